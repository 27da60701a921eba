"""Just enough of the protobuf wire format to read what kubectl sends as protobuf.

kubectl's typed clients (``create token``, ``auth can-i``) send
``application/vnd.kubernetes.protobuf``: the four bytes ``k8s\\0``, then a
``runtime.Unknown`` (field 1 ``typeMeta``, 2 ``raw``: the object's own message). This
module reads fields by number; :mod:`kubesim.rbac` knows the few messages it needs.
"""

from __future__ import annotations

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"

Fields = dict[int, list[bytes | int]]


class WireError(ValueError):
    """The bytes are not a protobuf message."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise WireError("a truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def fields(data: bytes) -> Fields:
    """Every field of one message: number -> values (varints as int, the rest as bytes)."""
    out: Fields = {}
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise WireError("a truncated field")
            value, at = data[at:at + length], at + length
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise WireError(f"wire type {wire} is not supported")
        out.setdefault(number, []).append(value)
    return out


def message(values: Fields, number: int) -> Fields:
    """The sub-message in field ``number`` (empty when absent)."""
    raw = values.get(number, [b""])[-1]
    return fields(raw) if isinstance(raw, bytes) else {}


def text(values: Fields, number: int) -> str:
    raw = values.get(number, [b""])[-1]
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else ""


def unwrap(body: bytes) -> Fields:
    """The object inside kubectl's protobuf envelope (``runtime.Unknown.raw``)."""
    if not body.startswith(MAGIC):
        raise WireError("no k8s protobuf envelope")
    envelope = fields(body[len(MAGIC):])
    raw = envelope.get(2, [b""])[-1]
    return fields(raw) if isinstance(raw, bytes) else {}
