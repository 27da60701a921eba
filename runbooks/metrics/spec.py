"""The policy's metric checks (``verify.metrics``) and Prometheus (``prometheus``), no I/O.

A check is declared as in Argo Rollouts' analysis: a PromQL ``query`` with ``$node`` (one
node: the query runs once per node), ``$nodes`` (a regex of every node in scope),
``$window`` (verify's observation window, e.g. ``30s``), ``$pods`` and ``$namespace`` (the
pods in scope: any pod in ``verify``, the canary's or the original's in a migration canary);
a ``condition`` every node's value must meet (``result <op> <number>``, or against the node's own value before the run:
``result <op> baseline``, ``result <op> baseline * 0.5``); ``interval``, how often verify
measures it during its window (and once at its end); ``failure_limit``, the failed
measurements tolerated. Without ``verify.metrics`` the built-in checks
(:data:`DEFAULT_CHECKS`: XID errors, double-bit ECC errors, workload GPU utilisation)
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
class Condition:
    """``result <op> <number>`` or ``result <op> baseline [<*|+|-> <number>]``."""

    op: str
    number: float | None = None
    arith: str = ""
    factor: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Condition:
        match = CONDITION.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a condition: use e.g. 'result == 0', 'result <= baseline' or "
                             "'result >= baseline * 0.5'")
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

    def holds(self, value: float, bound: float) -> bool:
        return not math.isnan(value) and _OPS[self.op](value, bound)


class MetricCheckSpec(BaseModel):
    """One check of ``verify.metrics``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    query: str = Field(min_length=1, max_length=4000)
    condition: str
    failure_limit: int = Field(default=0, ge=0, le=100)
    interval: str = "10s"
    unit: str = ""
    """How a value reads in the step message (``XIDs``, ``%``); empty: the number alone."""

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


_XID = ('sum by (Hostname) (DCGM_EXP_XID_ERRORS_TOTAL{Hostname=~"$nodes"})'
        ' or sum by (Hostname) (DCGM_FI_DEV_XID_ERRORS{Hostname=~"$nodes"}) * 0')
DEFAULT_CHECKS: tuple[MetricCheckSpec, ...] = (
    MetricCheckSpec(name="xid-errors", query=_XID, condition="result <= baseline", unit="XIDs", interval="10s"),
    MetricCheckSpec(name="ecc-errors", query='sum by (Hostname) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{Hostname=~"$nodes"})',
                    condition="result <= baseline", unit="double-bit ECC errors", interval="10s"),
    MetricCheckSpec(name="gpu-utilisation",
                    query='avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname=~"$nodes", namespace=~"$namespace", pod=~"$pods"})',
                    condition="result >= baseline * 0.5", unit="% workload GPU utilisation", interval="10s"),
)
"""What ``verify.metrics`` means when the policy does not say: no new XID, no new
double-bit ECC error, the workloads' GPUs at least half as busy as before the run (in a
migration canary, the canary's pods' GPUs at least half as busy as the original's: ``$pods``
makes a check compare pods, see :mod:`runbooks.metrics.comparing`)."""
