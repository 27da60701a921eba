"""Reading Prometheus text samples (``name{label="v",...} value``), no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float


def parse_sample(line: str) -> MetricSample | None:
    """One sample line, or ``None`` for comments, blank lines and garbage."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    match = _SAMPLE.match(line)
    if match is None:
        return None
    labels = {
        m.group("key"): m.group("value").replace('\\"', '"').replace("\\\\", "\\")
        for m in _LABEL.finditer(match.group("labels") or "")
    }
    try:
        value = float(match.group("value"))
    except ValueError:
        return None
    return MetricSample(match.group("name"), labels, value)


def lines_of(chunks: Iterable[bytes]) -> Iterator[str]:
    rest = b""
    for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if rest:
        yield rest.decode("utf-8", "replace")


def samples_of(name: str, lines: Iterable[str]) -> list[MetricSample]:
    samples: list[MetricSample] = []
    for line in lines:
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            sample = parse_sample(line)
            if sample is not None:
                samples.append(sample)
        elif samples and not line.startswith("#"):
            break  # a metric's samples come together: the block is over
    return samples
