"""``resource.Quantity`` as apimachinery parses it: every quantity kubesim reads goes through here.

:func:`parse` follows ``ParseQuantity`` and ``parseQuantityString`` of k8s.io/apimachinery
``pkg/api/resource/quantity.go`` and the suffixes of ``suffix.go`` (kubernetes-1.34.2; unchanged
in substance since 1.27): an optional sign, digits with at most one ``.``, then a suffix that is
one of ``n u m k M G T P E`` (decimal), ``Ki Mi Gi Ti Pi Ei`` (binary) or an exponent ``e3``/``E-2``.
The value is exact (a :class:`~fractions.Fraction`), rounded *up* to a whole nano-unit as the
parser does, and a binary quantity is capped at 2^63-1. :func:`milli` and :func:`value` are
``MilliValue()`` and ``Value()`` (the ceiling at that scale), what the scheduler and the kubelet
compare. A JSON number (``cpu: 2``) is read as its text, as ``Quantity.UnmarshalJSON`` does.

Anything else raises :class:`QuantityError` with the parser's own words (``ErrFormatWrong``,
``ErrSuffix``, ``ErrNumeric``); :func:`check_object` finds such a quantity in a pod or pod
template before it is stored, so a write with one is refused as the API server refuses it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from kubesim.errors import ApiError

SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
FORMAT_WRONG = f"quantities must match the regular expression '{SPLIT_RE}'"
"""``ErrFormatWrong``."""
SUFFIX_WRONG = "unable to parse quantity's suffix"
"""``ErrSuffix``."""
NUMERIC_WRONG = "unable to parse numeric part of quantity"
"""``ErrNumeric``."""

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX = Fraction(2**63 - 1)
_NANO = 10**9
_SCAN = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*)([-+]?[0-9]*)")


class QuantityError(ValueError):
    """A string that is not a quantity; ``str()`` is the parser's message."""


def _suffix(suffix: str) -> tuple[int, int] | None:
    """(base, exponent) of a suffix: ``suffixHandler.interpret``."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        try:  # strconv.ParseInt(suffix[1:], 10, 64)
            exponent = int(suffix[1:], 10)
        except ValueError:
            return None
        if not (suffix[1:].lstrip("+-").isdigit() and -(2**63) <= exponent < 2**63):
            return None
        return 10, exponent
    return None


@functools.lru_cache(maxsize=4096)
def _parse(text: str) -> Fraction:
    if not text:
        raise QuantityError(FORMAT_WRONG)
    scanned = _SCAN.fullmatch(text)
    if scanned is None:  # parseQuantityString: a character after the suffix that is not an exponent's digit
        raise QuantityError(FORMAT_WRONG)
    sign, num, denom, letters, exp = scanned.groups()
    if not num and denom is None and not letters and not exp and sign:
        return Fraction(0)  # "-" and "+" scan as zero (the leading-zeros loop reaches the end)
    found = _suffix(letters + exp)
    if found is None:
        raise QuantityError(SUFFIX_WRONG)
    base, exponent = found
    if base == 10 and abs(exponent) > 10**6:
        raise QuantityError(NUMERIC_WRONG)  # beyond what inf.Dec's scale (int32) holds
    amount = Fraction(int(num or "0") * 10 ** len(denom or "") + int(denom or "0"), 10 ** len(denom or ""))
    amount *= Fraction(base) ** exponent
    if amount:  # round up to a whole nano-unit (inf.RoundUp at Nano)
        amount = Fraction(math.ceil(amount * _NANO), _NANO)
    if base == 2 and amount > _MAX:
        amount = _MAX
    return -amount if sign == "-" else amount


def parse(value: Any) -> Fraction:
    """The exact value of a quantity given as a string or a JSON number; ``None`` is zero."""
    if value is None:
        return Fraction(0)
    if isinstance(value, bool):
        raise QuantityError(FORMAT_WRONG)
    if isinstance(value, int):
        return Fraction(value)
    text = repr(value) if isinstance(value, float) else str(value)
    if isinstance(value, float):  # the JSON number's text: 1e+21 is read as 1e21
        text = text.replace("e+", "e")
    return _parse(text.strip())


def value(quantity: Any) -> int:
    """``Quantity.Value()``: the value rounded up to an integer."""
    return math.ceil(parse(quantity))


def milli(quantity: Any) -> int:
    """``Quantity.MilliValue()``: thousandths, rounded up (what the scheduler counts CPU in)."""
    return math.ceil(parse(quantity) * 1000)


# ------------------------------------------------------------------ where a pod holds quantities
def _resource_maps(spec: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(JSON path, quantity) of every quantity a pod spec holds: containers', init and ephemeral
    containers' requests and limits, the pod-level resources and the overhead."""
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            res = (container or {}).get("resources") if isinstance(container, dict) else None
            for part in ("limits", "requests"):
                for name, amount in ((res or {}).get(part) or {}).items() if isinstance(res, dict) else ():
                    yield f"spec.{kind}[{i}].resources.{part}[{name}]", amount
    pod_level = spec.get("resources")
    if isinstance(pod_level, dict):
        for part in ("limits", "requests"):
            for name, amount in (pod_level.get(part) or {}).items():
                yield f"spec.resources.{part}[{name}]", amount
    for name, amount in (spec.get("overhead") or {}).items() if isinstance(spec.get("overhead"), dict) else ():
        yield f"spec.overhead[{name}]", amount


def pod_specs(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod specs an object holds: a Pod's own, a workload's template, a Job's of a CronJob."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if obj.get("kind") == "Pod" or "containers" in spec:
        yield spec
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        yield template["spec"]
    job = spec.get("jobTemplate")
    if isinstance(job, dict):
        yield from pod_specs({"spec": job.get("spec")})


def first_malformed(obj: dict[str, Any]) -> str | None:
    """The parser's message for the first quantity of ``obj`` that does not parse (its pod specs'
    resources and overhead; a Node's capacity and allocatable), else None."""
    amounts = [amount for spec in pod_specs(obj) for _, amount in _resource_maps(spec)]
    status = obj.get("status") if obj.get("kind") == "Node" else None
    if isinstance(status, dict):
        for part in ("capacity", "allocatable"):
            held = status.get(part)
            amounts += list(held.values()) if isinstance(held, dict) else []
    for amount in amounts:
        try:
            parse(amount)
        except QuantityError as exc:
            return str(exc)
    return None


# ------------------------------------------------------------------ the API server's refusal
def _go_value(value: Any) -> str:
    """Go's ``%+v`` of a decoded JSON value (``map[k:v]`` with sorted keys, ``[a b]``, ``<nil>``)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_value(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):  # encoding/json decodes every number as a float64: %v is %g
        return _go_g(float(value))
    return str(value)


def _go_g(number: float) -> str:
    """``strconv.FormatFloat(f, 'g', -1, 64)``: the shortest digits, an exponent when it is below
    -4 or at least 6 (``e+06``)."""
    if number == 0:
        return "0"
    shortest = repr(abs(number))
    exp = int(f"{abs(number):e}".partition("e")[2])
    digits = shortest.replace(".", "").replace("-", "").lstrip("0").split("e")[0].rstrip("0") or "0"
    sign = "-" if number < 0 else ""
    if exp < -4 or exp >= 6:
        head = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{head}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    text = f"{abs(number):.{max(0, len(digits) - exp - 1)}f}"
    return sign + text


def _quoted(text: str, minor: int) -> str:
    """A string value as a field error prints it: ``%q`` up to 1.33, ``json.Marshal`` from 1.34."""
    if minor >= 34:
        return json.dumps(text, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return json.dumps(text, ensure_ascii=False)


def refusal(kind: str, version: str, obj: dict[str, Any], *, minor: int,
            patch: tuple[str, Any] | None = None) -> ApiError | None:
    """How the API server refuses ``obj`` when a quantity in it does not parse, else None.

    A create or update body fails to decode: 400 ``<Kind> in version "<v>" cannot be handled as a
    <Kind>: <error>`` (``transformDecodeError`` in k8s.io/apiserver ``endpoints/handlers``). A patch
    (``patch``: its content type and body) fails when the patched object is decoded: 422 from
    ``NewInvalid`` with the ``patch`` field and, for a JSON or merge patch, the patched object as JSON,
    for a strategic merge patch the patch map as Go's ``%+v`` prints it (``handlers/patch.go``)."""
    error = first_malformed(obj)
    if error is None:
        return None
    if patch is None:
        return ApiError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: {error}')
    content_type, body = patch
    shown = _go_value(body) if content_type == "application/strategic-merge-patch+json" else \
        json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    said = f"Invalid value: {_quoted(shown, minor)}: {error}"
    return ApiError(422, "Invalid", f' "" is invalid: patch: {said}',
                    {"causes": [{"reason": "FieldValueInvalid", "message": said, "field": "patch"}]})
