"""The objects ``kubectl create <kind>`` sends as protobuf, read into their JSON form.

kubectl's typed clients send ``application/vnd.kubernetes.protobuf`` (see
:mod:`kubesim.protowire`): ``kubectl create namespace``, ``secret``, ``configmap``,
``serviceaccount``, ``priorityclass``, ``service``, ``deployment``, ``job``, ``role``,
``clusterrole``, ``rolebinding``, ``clusterrolebinding``, ``poddisruptionbudget`` and
``ingress`` do. Each message is read by the field numbers of k8s.io/api's
``generated.proto``, as far as those commands fill it (:data:`SCHEMAS`); the result is the
object a JSON client would have sent (empty strings, zero numbers and empty structs left
out, as ``omitempty`` does), so the rest of the server does not know the difference. A
kind not listed is refused as unsupported media, never misread.
"""

from __future__ import annotations

import base64
from typing import Any

from kubesim import errors
from kubesim.protowire import Fields, WireError, fields, unwrap

Schema = dict[int, tuple[str, str, Any]]
"""field number -> (JSON name, how to read it, the sub-message's schema). How: ``s`` string,
``i`` integer (``pi``: a pointer, kept when 0), ``b`` bool (``pb``: kept when false), ``m``
message (``pm``: kept when empty), ``ls``/``lm`` repeated string/message, ``map`` string map,
``bmap`` bytes map (base64), ``qmap`` map of Quantities, ``ios`` IntOrString, ``inline`` a
message whose fields belong to the parent (IngressRuleValue)."""

META: Schema = {1: ("name", "s", None), 2: ("generateName", "s", None), 3: ("namespace", "s", None),
                11: ("labels", "map", None), 12: ("annotations", "map", None), 14: ("finalizers", "ls", None)}
SELECTOR: Schema = {1: ("matchLabels", "map", None), 2: ("matchExpressions", "lm", {
    1: ("key", "s", None), 2: ("operator", "s", None), 3: ("values", "ls", None)})}
KEY_REF: Schema = {1: ("localObjectReference", "inline", {1: ("name", "s", None)}), 2: ("key", "s", None),
                   3: ("optional", "pb", None)}
CONTAINER: Schema = {
    1: ("name", "s", None), 2: ("image", "s", None), 3: ("command", "ls", None), 4: ("args", "ls", None),
    5: ("workingDir", "s", None),
    6: ("ports", "lm", {1: ("name", "s", None), 2: ("hostPort", "i", None), 3: ("containerPort", "i", None),
                        4: ("protocol", "s", None), 5: ("hostIP", "s", None)}),
    7: ("env", "lm", {1: ("name", "s", None), 2: ("value", "s", None), 3: ("valueFrom", "m", {
        3: ("configMapKeyRef", "pm", KEY_REF), 4: ("secretKeyRef", "pm", KEY_REF)})}),
    8: ("resources", "pm", {1: ("limits", "qmap", None), 2: ("requests", "qmap", None)}),
    9: ("volumeMounts", "lm", {1: ("name", "s", None), 2: ("readOnly", "b", None), 3: ("mountPath", "s", None),
                               4: ("subPath", "s", None)}),
    13: ("terminationMessagePath", "s", None), 14: ("imagePullPolicy", "s", None),
    20: ("terminationMessagePolicy", "s", None),
}
POD_SPEC: Schema = {
    2: ("containers", "lm", CONTAINER), 3: ("restartPolicy", "s", None),
    4: ("terminationGracePeriodSeconds", "pi", None), 6: ("dnsPolicy", "s", None),
    7: ("nodeSelector", "map", None), 8: ("serviceAccountName", "s", None), 19: ("schedulerName", "s", None),
    20: ("initContainers", "lm", CONTAINER), 24: ("priorityClassName", "s", None),
}
TEMPLATE: Schema = {1: ("metadata", "m", META), 2: ("spec", "m", POD_SPEC)}
RULE: Schema = {1: ("verbs", "ls", None), 2: ("apiGroups", "ls", None), 3: ("resources", "ls", None),
                4: ("resourceNames", "ls", None), 5: ("nonResourceURLs", "ls", None)}
BINDING: Schema = {
    1: ("metadata", "m", META),
    2: ("subjects", "lm", {1: ("kind", "s", None), 2: ("apiGroup", "s", None), 3: ("name", "s", None),
                           4: ("namespace", "s", None)}),
    3: ("roleRef", "m", {1: ("apiGroup", "s", None), 2: ("kind", "s", None), 3: ("name", "s", None)}),
}
INGRESS_BACKEND: Schema = {4: ("service", "pm", {1: ("name", "s", None), 2: ("port", "m", {
    1: ("name", "s", None), 2: ("number", "i", None)})})}

SCHEMAS: dict[tuple[str, str], Schema] = {
    ("", "Namespace"): {1: ("metadata", "m", META), 2: ("spec", "m", {1: ("finalizers", "ls", None)})},
    ("", "Secret"): {1: ("metadata", "m", META), 2: ("data", "bmap", None), 3: ("type", "s", None),
                     4: ("stringData", "map", None), 5: ("immutable", "pb", None)},
    ("", "ConfigMap"): {1: ("metadata", "m", META), 2: ("data", "map", None), 3: ("binaryData", "bmap", None),
                        4: ("immutable", "pb", None)},
    ("", "ServiceAccount"): {1: ("metadata", "m", META), 2: ("secrets", "lm", {3: ("name", "s", None)}),
                             3: ("imagePullSecrets", "lm", {1: ("name", "s", None)}),
                             4: ("automountServiceAccountToken", "pb", None)},
    ("", "Service"): {1: ("metadata", "m", META), 2: ("spec", "m", {
        1: ("ports", "lm", {1: ("name", "s", None), 2: ("protocol", "s", None), 3: ("port", "i", None),
                            4: ("targetPort", "ios", None), 5: ("nodePort", "i", None)}),
        2: ("selector", "map", None), 3: ("clusterIP", "s", None), 4: ("type", "s", None),
        5: ("externalIPs", "ls", None), 7: ("sessionAffinity", "s", None), 10: ("externalName", "s", None),
        18: ("clusterIPs", "ls", None)})},
    ("scheduling.k8s.io", "PriorityClass"): {1: ("metadata", "m", META), 2: ("value", "pi", None),
                                             3: ("globalDefault", "b", None), 4: ("description", "s", None),
                                             5: ("preemptionPolicy", "s", None)},
    ("apps", "Deployment"): {1: ("metadata", "m", META), 2: ("spec", "m", {
        1: ("replicas", "pi", None), 2: ("selector", "pm", SELECTOR), 3: ("template", "m", TEMPLATE),
        4: ("strategy", "pm", {1: ("type", "s", None)}), 5: ("minReadySeconds", "i", None),
        6: ("revisionHistoryLimit", "pi", None), 9: ("progressDeadlineSeconds", "pi", None)})},
    ("batch", "Job"): {1: ("metadata", "m", META), 2: ("spec", "m", {
        1: ("parallelism", "pi", None), 2: ("completions", "pi", None), 3: ("activeDeadlineSeconds", "pi", None),
        4: ("selector", "pm", SELECTOR), 6: ("template", "m", TEMPLATE), 7: ("backoffLimit", "pi", None)})},
    ("rbac.authorization.k8s.io", "Role"): {1: ("metadata", "m", META), 2: ("rules", "lm", RULE)},
    ("rbac.authorization.k8s.io", "ClusterRole"): {1: ("metadata", "m", META), 2: ("rules", "lm", RULE)},
    ("rbac.authorization.k8s.io", "RoleBinding"): BINDING,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): BINDING,
    ("policy", "PodDisruptionBudget"): {1: ("metadata", "m", META), 2: ("spec", "m", {
        1: ("minAvailable", "ios", None), 2: ("selector", "pm", SELECTOR), 3: ("maxUnavailable", "ios", None),
        4: ("unhealthyPodEvictionPolicy", "s", None)})},
    ("networking.k8s.io", "Ingress"): {1: ("metadata", "m", META), 2: ("spec", "m", {
        1: ("defaultBackend", "pm", INGRESS_BACKEND),
        2: ("tls", "lm", {1: ("hosts", "ls", None), 2: ("secretName", "s", None)}),
        3: ("rules", "lm", {1: ("host", "s", None), 2: ("ingressRuleValue", "inline", {1: ("http", "pm", {
            1: ("paths", "lm", {1: ("path", "s", None), 2: ("backend", "m", INGRESS_BACKEND),
                                3: ("pathType", "s", None)})})})}),
        4: ("ingressClassName", "s", None)})},
}
API_VERSIONS = {"": "v1", "apps": "apps/v1", "batch": "batch/v1", "policy": "policy/v1"}


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _entries(values: list[bytes | int]) -> list[tuple[str, bytes]]:
    out = []
    for raw in values:
        if isinstance(raw, bytes):
            entry = fields(raw)
            key, value = entry.get(1, [b""])[-1], entry.get(2, [b""])[-1]
            out.append((key.decode("utf-8", "replace") if isinstance(key, bytes) else "",
                        value if isinstance(value, bytes) else b""))
    return out


def _int_or_string(raw: bytes) -> int | str:
    value = fields(raw)
    if value.get(1, [0])[-1] == 1:
        text = value.get(3, [b""])[-1]
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else ""
    number = value.get(2, [0])[-1]
    return _signed(number) if isinstance(number, int) else 0


def _read(how: str, sub: Any, values: list[bytes | int]) -> Any:
    """One field's JSON value; None when ``omitempty`` would leave it out."""
    last = values[-1]
    if how == "s":
        return last.decode("utf-8", "replace") or None if isinstance(last, bytes) else None
    if how in ("i", "pi"):
        number = _signed(last) if isinstance(last, int) else 0
        return number if number or how == "pi" else None
    if how in ("b", "pb"):
        return bool(last) if bool(last) or how == "pb" else None
    if how in ("m", "pm", "inline"):
        body = decode_message(sub, fields(last)) if isinstance(last, bytes) else {}
        return body if body or how == "pm" else None
    if how == "ls":
        return [v.decode("utf-8", "replace") for v in values if isinstance(v, bytes)] or None
    if how == "lm":
        return [decode_message(sub, fields(v)) for v in values if isinstance(v, bytes)] or None
    if how == "ios":
        return _int_or_string(last) if isinstance(last, bytes) else None
    entries = _entries(values)
    if how == "map":
        return {k: v.decode("utf-8", "replace") for k, v in entries} or None
    if how == "bmap":
        return {k: base64.b64encode(v).decode() for k, v in entries} or None
    return {k: str(fields(v).get(1, [b""])[-1].decode("utf-8", "replace")) for k, v in entries  # type: ignore[union-attr]
            if isinstance(fields(v).get(1, [b""])[-1], bytes)} or None


def decode_message(schema: Schema, values: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, (name, how, sub) in schema.items():
        if not values.get(number):
            continue
        value = _read(how, sub, values[number])
        if value is None:
            continue
        if how == "inline":
            out.update(value)
        else:
            out[name] = value
    return out


def decode(group: str, kind: str, body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf ``kind`` body; 415 for a kind kubesim cannot read, 400 for bad bytes."""
    schema = SCHEMAS.get((group, kind))
    if schema is None:
        raise errors.ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                              "accepted media types include: application/json, application/yaml")
    try:
        obj = decode_message(schema, unwrap(body))
    except (WireError, IndexError) as exc:
        raise errors.bad_request(f"the request body is not a valid protobuf {kind}: {exc}") from None
    return {"apiVersion": API_VERSIONS.get(group, f"{group}/v1"), "kind": kind, **obj}
