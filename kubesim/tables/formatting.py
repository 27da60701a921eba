"""Cell formatting shared by the printers: ages (HumanDuration), labels and selectors."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_US_PER_S = 1_000_000


_S_PER_MIN = 60


_S_PER_HOUR = 3600


def _to_microseconds(delta: dt.timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds


def _trunc_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, like Go's ``int(...)`` conversions."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _past(delta: dt.timedelta) -> tuple[int, int, str | None]:
    """``(microseconds, whole seconds, label)``: the label of a negative duration, else None."""
    us = _to_microseconds(delta)
    seconds = _trunc_div(us, _US_PER_S)
    label = "<invalid>" if seconds < -1 else "0s" if seconds < 0 else None
    return us, seconds, label


def human_duration(delta: dt.timedelta) -> str:
    """``duration.HumanDuration``: ~2-3 significant figures (``2m3s``, ``3h20m``, ``2y10d``)."""
    _, seconds, negative = _past(delta)
    if negative is not None:
        return negative
    if seconds < 2 * _S_PER_MIN:
        return f"{seconds}s"
    minutes = seconds // _S_PER_MIN
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 3 * 60:
        return f"{minutes}m"
    hours = seconds // _S_PER_HOUR
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def short_human_duration(delta: dt.timedelta) -> str:
    """``duration.ShortHumanDuration``: one unit only (``5s``, ``10m``, ``3h``, ``45d``, ``2y``)."""
    us, seconds, negative = _past(delta)
    if negative is not None:
        return negative
    if seconds < 60:
        return f"{seconds}s"
    if (minutes := us // (_US_PER_S * _S_PER_MIN)) < 60:
        return f"{minutes}m"
    if (hours := us // (_US_PER_S * _S_PER_HOUR)) < 24:
        return f"{hours}h"
    if hours < 24 * 365:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


_FRACTION = re.compile(r"(\.\d{6})\d+")


def _parse_time(value: Any) -> dt.datetime | None:
    """Parse an RFC3339 ``Time``/``MicroTime``; ``None`` stands for Go's zero time."""
    if not value:
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        text = _FRACTION.sub(r"\1", str(value).strip())  # nanoseconds -> microseconds
        parsed = dt.datetime.fromisoformat(text.replace("z", "Z"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    if parsed.year == 1 and parsed.replace(tzinfo=None) == dt.datetime(1, 1, 1):
        return None  # "0001-01-01T00:00:00Z" is Go's zero time
    return parsed


def _aware(now: dt.datetime) -> dt.datetime:
    return now if now.tzinfo is not None else now.replace(tzinfo=dt.UTC)


def _since(value: Any, now: dt.datetime) -> str:
    """``translateTimestampSince`` / ``translateMicroTimestampSince``."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    return human_duration(_aware(now) - when)


def _age(obj: dict, now: dt.datetime) -> str:
    return _since(_meta(obj).get("creationTimestamp"), now)


_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


_SELECTOR_OPERATORS = {"In": " in ", "NotIn": " notin ", "Exists": "", "DoesNotExist": ""}


def format_labels(labels: dict[str, str] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs joined by ``,``; ``<none>`` when empty."""
    pairs = sorted(f"{k}={v}" for k, v in (labels or {}).items())
    return ",".join(pairs) or "<none>"


def _valid_label_key(key: str) -> bool:
    parts = key.split("/")
    if len(parts) > 2:
        return False
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.fullmatch(name))


def _valid_label_value(value: str) -> bool:
    return len(value) <= 63 and (value == "" or bool(_LABEL_NAME.fullmatch(value)))


def _selector_string(selector: dict | None) -> str:
    """``metav1.LabelSelectorAsSelector(sel).String()``; raises ``ValueError`` if invalid."""
    if selector is None:
        return ""  # labels.Nothing()
    requirements: list[tuple[str, str]] = []  # (key, rendered requirement)
    for key, value in (selector.get("matchLabels") or {}).items():
        if not _valid_label_key(key) or not _valid_label_value(str(value)):
            raise ValueError(f"invalid label requirement {key}={value}")
        requirements.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = [str(v) for v in expr.get("values") or []]
        if op not in _SELECTOR_OPERATORS or not _valid_label_key(key):
            raise ValueError(f"invalid label selector requirement {expr!r}")
        if (op in ("In", "NotIn")) != bool(values):
            raise ValueError(f"invalid values for operator {op}: {values!r}")
        if not all(_valid_label_value(v) for v in values):
            raise ValueError(f"invalid label values {values!r}")
        if op == "Exists":
            rendered = key
        elif op == "DoesNotExist":
            rendered = "!" + key
        else:
            shown = values[0] if len(values) == 1 else ",".join(sorted(values))
            rendered = f"{key}{_SELECTOR_OPERATORS[op]}({shown})"
        requirements.append((key, rendered))
    requirements.sort(key=lambda req: req[0])
    return ",".join(rendered for _, rendered in requirements)


def format_label_selector(selector: dict | None) -> str:
    """``metav1.FormatLabelSelector``: ``<none>`` when it selects nothing/everything."""
    try:
        return _selector_string(selector) or "<none>"
    except ValueError:
        return "<error>"


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _name(obj: dict) -> str:
    return _meta(obj).get("name") or ""


def _int(value: Any) -> int:
    return int(value or 0)


def _containers_cells(pod_spec: dict) -> list[str]:
    """``layoutContainerCells``: comma-joined container names and images."""
    containers = pod_spec.get("containers") or []
    return [
        ",".join(c.get("name") or "" for c in containers),
        ",".join(c.get("image") or "" for c in containers),
    ]


def _template_spec(obj: dict) -> dict:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
