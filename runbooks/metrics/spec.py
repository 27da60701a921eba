"""The policy's metric checks (``verify.metrics``) and Prometheus (``prometheus``), no I/O.

A check is declared as in Argo Rollouts' analysis: a PromQL ``query`` with ``$node`` (one
node: the query runs once per node), ``$nodes`` (a regex of every node in scope),
``$window`` (verify's observation window, e.g. ``30s``), ``$pods`` and ``$namespace`` (the
pods in scope: any pod in ``verify``, the canary's or the original's in a migration canary),
``$node_label``, ``$pod_label`` and ``$namespace_label`` (the labels that name a series'
node, pod and namespace where the query runs: ``Hostname`` or ``hostname`` by dcgm-exporter
release, ``pod`` or ``exported_pod`` by how Prometheus scrapes it, found by
:mod:`runbooks.metrics.probing`); a ``condition`` every node's (or GPU's, when the answer
keeps the ``gpu`` label) value must meet (``result <op> <number>``, or against its own value
before the run: ``result <op> baseline``, ``result <op> baseline * 0.5``; clauses joined by
``or``); ``interval``, how often verify measures it during its window (and once at its end);
``failure_limit``, the failed measurements tolerated. Without ``verify.metrics`` the built-in
checks (:data:`DEFAULT_CHECKS`: XID errors, double-bit ECC errors, workload GPU utilisation)
run whenever ``prometheus`` is set.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NUMBER = r"[-+]?\d+(?:\.\d+)?"
CONDITION = re.compile(
    rf"^\s*result\s*(?P<op><=|>=|==|!=|<|>)\s*(?:(?P<baseline>baseline)(?:\s*(?P<arith>[*+-])\s*(?P<factor>{_NUMBER}))?"
    rf"|(?P<number>{_NUMBER}))\s*$"
)
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}
_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)(s|m)$")


@dataclass(frozen=True)
class Clause:
    """``result <op> <number>`` or ``result <op> baseline [<*|+|-> <number>]``."""

    op: str
    number: float | None = None
    arith: str = ""
    factor: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Clause:
        match = CONDITION.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a condition: use e.g. 'result == 0', 'result <= baseline', "
                             "'result >= baseline * 0.5' or 'result == baseline or result == 0'")
        if match.group("number") is not None:
            return cls(match.group("op"), number=float(match.group("number")))
        return cls(match.group("op"), arith=match.group("arith") or "", factor=float(match.group("factor") or 0))

    @property
    def needs_baseline(self) -> bool:
        return self.number is None

    def bound(self, baseline: float | None) -> float | None:
        """The number a value is compared with (None: a baseline was needed and there is none)."""
        if self.number is not None:
            return self.number
        if baseline is None:
            return None
        if self.arith == "*":
            return baseline * self.factor
        if self.arith == "+":
            return baseline + self.factor
        if self.arith == "-":
            return baseline - self.factor
        return baseline


@dataclass(frozen=True)
class Condition:
    """One clause, or several joined by ``or`` (any that holds is enough)."""

    clauses: tuple[Clause, ...]

    @classmethod
    def parse(cls, text: str) -> Condition:
        return cls(tuple(Clause.parse(part) for part in re.split(r"\s+or\s+", text.strip())))

    @property
    def needs_baseline(self) -> bool:
        return any(c.needs_baseline for c in self.clauses)

    def judge(self, value: float, baseline: float | None) -> bool | None:
        """Whether ``value`` meets the condition; None when no clause holds and one that needed
        the value before the run could not be judged (there is none)."""
        if math.isnan(value):
            return False
        undecided = False
        for clause in self.clauses:
            bound = clause.bound(baseline)
            if bound is None:
                undecided = True
            elif _OPS[clause.op](value, bound):
                return True
        return None if undecided else False


class MetricCheckSpec(BaseModel):
    """One check of ``verify.metrics``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    query: str = Field(min_length=1, max_length=4000)
    condition: str
    failure_limit: int = Field(default=0, ge=0, le=100)
    interval: str = "10s"
    windowed: bool = False
    """The value counts events over a sliding window (``DCGM_EXP_XID_ERRORS_COUNT``): any rise
    from one measurement to the next fails too, since an event that arrives as an older one
    leaves the window keeps the value level with the one before the run."""
    unit: str = ""
    """How a value reads in the step message: ``XIDs`` (after the number, in the plural), ``%``,
    or a text with ``{}`` where the number goes (``last XID {}``); empty: the number alone."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a check name: lower-case letters, digits and '-'")
        return value

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        Condition.parse(value)
        return value

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: str) -> str:
        if not _INTERVAL.fullmatch(value) or interval_seconds(value) < 1 or interval_seconds(value) > 3600:
            raise ValueError(f"{value!r} is not an interval between 1s and 60m (e.g. 10s, 1m)")
        return value

    @property
    def parsed(self) -> Condition:
        return Condition.parse(self.condition)

    @property
    def every(self) -> float:
        return interval_seconds(self.interval)


def interval_seconds(text: str) -> float:
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise ValueError(text)
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


class PrometheusPolicy(BaseModel):
    """Policy ``prometheus``: where the metric checks read, and the token that lets them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    """e.g. ``http://kube-prometheus-stack-prometheus.monitoring.svc:9090``; no credentials in it."""
    bearer_token_file: str | None = None
    """A file holding the bearer token (a mounted ServiceAccount token or Secret), read at
    each query; the token itself is never in the policy, a message or a log."""
    timeout: float = Field(default=10.0, gt=0, le=120)
    """Seconds a query may take before the check is ``unknown``."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("prometheus.url must be an http(s) URL, e.g. http://prometheus.monitoring.svc:9090")
        if parts.username or parts.password:
            raise ValueError("prometheus.url must not carry credentials: put a bearer token in bearer_token_file")
        if parts.query or parts.fragment:
            raise ValueError("prometheus.url is the server's base URL, without a query")
        return value.rstrip("/")

    @field_validator("bearer_token_file")
    @classmethod
    def _file(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("prometheus.bearer_token_file must be an absolute path")
        return value


def metrics_of(query: str) -> list[str]:
    """The metric names ``query`` selects (``NAME{...}``), in order, once each."""
    names = re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{", query)
    return list(dict.fromkeys(n for n in names if n not in _PROMQL_WORDS))


_PROMQL_WORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                           "offset", "bool"})
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
XID_CHECK = MetricCheckSpec(
    name="xid-errors", query=f'max by ($node_label, gpu) ({XID_GAUGE}{{$node_label=~"$nodes"}})',
    condition="result == baseline or result == 0", unit="last XID {}", interval="10s")
"""dcgm-exporter's default: ``DCGM_FI_DEV_XID_ERRORS`` holds the code of the GPU's last XID, so
an XID during the run is a GPU whose code changed to one that is not 0 (the same code raised
again leaves no trace in this field)."""
XID_COUNT_CHECK = MetricCheckSpec(
    name="xid-count", query=f'sum by ($node_label, gpu) ({XID_COUNT}{{$node_label=~"$nodes"}})',
    condition="result <= baseline", unit="{} XID(s) in the exporter's window", interval="10s", windowed=True)
"""Where the exporter exports ``DCGM_EXP_XID_ERRORS_COUNT`` (commented out in NVIDIA's CSVs): a
GPU's XIDs over the exporter's window (``--xid-count-window-size``, 5 minutes by default), run
beside :data:`XID_CHECK` (it sees the same code raised again, which the last-XID gauge cannot;
a sliding count alone would miss an XID that arrives as an older one ages out of the window)."""
XID_LAST = XID_CHECK.model_copy(update={"name": "xid-last"})
"""Every GPU's last XID code, recorded with the values before the run whichever XID check runs:
the stability reports tell new XIDs from it (:mod:`runbooks.stability.metric_view`)."""
DEFAULT_CHECKS: tuple[MetricCheckSpec, ...] = (
    XID_CHECK,
    MetricCheckSpec(name="ecc-errors", query=f'max by ($node_label, gpu) ({ECC_DBE}{{$node_label=~"$nodes"}})',
                    condition="result == baseline", unit="double-bit ECC errors", interval="10s"),
    MetricCheckSpec(name="gpu-utilisation",
                    query=f'avg by ($node_label) ({GPU_UTIL}{{$node_label=~"$nodes", '
                          '$namespace_label=~"$namespace", $pod_label=~"$pods"})',
                    condition="result >= baseline * 0.5", unit="% workload GPU utilisation", interval="10s"),
)
"""What ``verify.metrics`` means when the policy does not say: no new XID, no new
double-bit ECC error, the workloads' GPUs at least half as busy as before the run (in a
migration canary, the canary's pods' GPUs at least half as busy as the original's: ``$pods``
makes a check compare pods, see :mod:`runbooks.metrics.comparing`). XIDs and ECC errors are
judged per GPU (a GPU whose series vanish cannot hide behind its node's others); where the
exporter exports ``DCGM_EXP_XID_ERRORS_COUNT``, :data:`XID_COUNT_CHECK` runs beside the XID
check (:func:`runbooks.metrics.probing.adapt`)."""
