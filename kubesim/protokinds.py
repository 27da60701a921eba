"""The objects ``kubectl create <kind>`` sends as protobuf, read into their JSON form.

kubectl's typed clients send ``application/vnd.kubernetes.protobuf`` (see
:mod:`kubesim.protowire`): ``kubectl create namespace``, ``create secret``, ``create
configmap``, ``create serviceaccount`` and ``create priorityclass`` do. Each message is read
by its field numbers in k8s.io/api's ``generated.proto``; the result is the object a JSON
client would have sent, so the rest of the server does not know the difference. A kind
not listed here is refused as unsupported media, never misread.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from kubesim import errors
from kubesim.protowire import Fields, WireError, fields, message, text, unwrap

Decoder = Callable[[Fields], dict[str, Any]]


def _texts(values: Fields, number: int) -> list[str]:
    return [v.decode("utf-8", errors="replace") for v in values.get(number, []) if isinstance(v, bytes)]


def _map(values: Fields, number: int, *, binary: bool = False) -> dict[str, str]:
    """A ``map<string, string>`` (or ``map<string, bytes>``, as base64, its JSON form)."""
    out: dict[str, str] = {}
    for raw in values.get(number, []):
        if not isinstance(raw, bytes):
            continue
        entry = fields(raw)
        value = entry.get(2, [b""])[-1]
        value = value if isinstance(value, bytes) else b""
        out[text(entry, 1)] = base64.b64encode(value).decode() if binary else value.decode("utf-8", errors="replace")
    return out


def _bool(values: Fields, number: int) -> bool | None:
    raw = values.get(number)
    return bool(raw[-1]) if raw and isinstance(raw[-1], int) else None


def _int(values: Fields, number: int) -> int | None:
    raw = values.get(number)
    if not raw or not isinstance(raw[-1], int):
        return None
    value = raw[-1]
    return value - (1 << 64) if value >= 1 << 63 else value


def object_meta(values: Fields) -> dict[str, Any]:
    """ObjectMeta: name 1, generateName 2, namespace 3, labels 11, annotations 12, finalizers 14."""
    out: dict[str, Any] = {}
    for key, number in (("name", 1), ("generateName", 2), ("namespace", 3)):
        if text(values, number):
            out[key] = text(values, number)
    for key, number in (("labels", 11), ("annotations", 12)):
        if values.get(number):
            out[key] = _map(values, number)
    if values.get(14):
        out["finalizers"] = _texts(values, 14)
    return out


def _object(api_version: str, kind: str, values: Fields) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "metadata": object_meta(message(values, 1))}


def namespace(values: Fields) -> dict[str, Any]:
    out = _object("v1", "Namespace", values)
    finalizers = _texts(message(values, 2), 1)
    if finalizers:
        out["spec"] = {"finalizers": finalizers}
    return out


def secret(values: Fields) -> dict[str, Any]:
    """Secret: data 2 (bytes), type 3, stringData 4, immutable 5."""
    out = _object("v1", "Secret", values)
    if values.get(2):
        out["data"] = _map(values, 2, binary=True)
    if text(values, 3):
        out["type"] = text(values, 3)
    if values.get(4):
        out["stringData"] = _map(values, 4)
    if _bool(values, 5) is not None:
        out["immutable"] = _bool(values, 5)
    return out


def config_map(values: Fields) -> dict[str, Any]:
    """ConfigMap: data 2, binaryData 3, immutable 4."""
    out = _object("v1", "ConfigMap", values)
    if values.get(2):
        out["data"] = _map(values, 2)
    if values.get(3):
        out["binaryData"] = _map(values, 3, binary=True)
    if _bool(values, 4) is not None:
        out["immutable"] = _bool(values, 4)
    return out


def service_account(values: Fields) -> dict[str, Any]:
    """ServiceAccount: secrets 2 (ObjectReference, name 3), imagePullSecrets 3 (name 1), automount 4."""
    out = _object("v1", "ServiceAccount", values)
    refs = [fields(raw) for raw in values.get(2, []) if isinstance(raw, bytes)]
    if refs:
        out["secrets"] = [{"name": text(ref, 3)} for ref in refs]
    pulls = [fields(raw) for raw in values.get(3, []) if isinstance(raw, bytes)]
    if pulls:
        out["imagePullSecrets"] = [{"name": text(ref, 1)} for ref in pulls]
    if _bool(values, 4) is not None:
        out["automountServiceAccountToken"] = _bool(values, 4)
    return out


def priority_class(values: Fields) -> dict[str, Any]:
    """PriorityClass: value 2, globalDefault 3, description 4, preemptionPolicy 5."""
    out = _object("scheduling.k8s.io/v1", "PriorityClass", values)
    out["value"] = _int(values, 2) or 0
    if _bool(values, 3) is not None:
        out["globalDefault"] = _bool(values, 3)
    for key, number in (("description", 4), ("preemptionPolicy", 5)):
        if text(values, number):
            out[key] = text(values, number)
    return out


DECODERS: dict[tuple[str, str], Decoder] = {
    ("", "Namespace"): namespace,
    ("", "Secret"): secret,
    ("", "ConfigMap"): config_map,
    ("", "ServiceAccount"): service_account,
    ("scheduling.k8s.io", "PriorityClass"): priority_class,
}


def decode(group: str, kind: str, body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf ``kind`` body; 415 for a kind kubesim cannot read, 400 for bad bytes."""
    decoder = DECODERS.get((group, kind))
    if decoder is None:
        raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                              "accepted media types include: application/json, application/yaml")
    try:
        return decoder(unwrap(body))
    except WireError as exc:
        raise errors.bad_request(f"the request body is not a valid protobuf {kind}: {exc}") from None
