"""The policy file (``UPGRADEBOT_CONFIG``) as validated pydantic models, no I/O.

``bot/settings.py`` reads the YAML and validates it into :class:`Policy`; the run engine,
handlers and runbooks receive the model. Unknown keys are refused so a typo
(``aprovers:``) is an error at start-up, not a silently ignored rule.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """``30m`` -> 1800.0; ``ValueError`` for anything but ``<number><s|m|h|d>``."""
    match = DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration: use e.g. 90s, 30m, 24h or 2d")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def _duration(value: str) -> str:
    duration_seconds(value)
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Target(Strict):
    """A DaemonSet the bot may upgrade: ``namespace/name``, and optionally the log line
    (a regular expression) that says its plugin registered with the kubelet."""

    namespace: str
    name: str
    registration: str | None = None

    @field_validator("registration")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"{value!r} is not a regular expression: {exc}") from exc
        if not value.strip():
            raise ValueError("an empty registration pattern matches every log")
        return value

    @classmethod
    def parse(cls, text: str) -> Target:
        namespace, sep, name = text.strip().partition("/")
        if not sep or not DNS1123_LABEL.match(namespace) or not DNS1123_SUBDOMAIN.match(name):
            raise ValueError(
                f"{text!r} is not a target: use <namespace>/<daemonset>, e.g. "
                "kube-system/nvidia-device-plugin-daemonset"
            )
        return cls(namespace=namespace, name=name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Principals(Strict):
    users: list[str] = Field(default_factory=list)
    usergroups: list[str] = Field(default_factory=list)


class Approvers(Principals):
    quorum: Annotated[int, Field(ge=1)] = 1
    allow_self_approval: bool = False
    expire_after: str = "30m"

    @field_validator("expire_after")
    @classmethod
    def _expiry(cls, value: str) -> str:
        return _duration(value)


class ChannelPolicy(Strict):
    cluster: str | None = None


class Oncall(Strict):
    channel: str | None = None
    mention: str | None = None


class Reports(Strict):
    after: list[str] = Field(default_factory=lambda: ["24h", "48h"])
    """When the stability reports are due, after the promotion; the last one, if stable, ends monitoring."""
    claims_pending_after: str = "15m"
    """A ResourceClaim created since the upgrade and pending longer than this degrades a report."""

    @field_validator("after")
    @classmethod
    def _durations(cls, values: list[str]) -> list[str]:
        return [_duration(v) for v in values]

    @field_validator("claims_pending_after")
    @classmethod
    def _pending(cls, value: str) -> str:
        return _duration(value)


class Rollback(Strict):
    automatic: bool = True
    requires_approval: bool = True


class StepTimings(Strict):
    """How long the cluster steps wait and watch (``runbooks.engine.steps.StepSettings``)."""

    ready_timeout: str = "5m"
    """How long a replaced pod (canary, promotion, rollback) may take to become Ready."""
    observe_window: str = "30s"
    """How long verify watches restart counts for a rise."""
    poll_interval: str = "1s"
    settle_window: str = "30s"
    """How long the baseline waits for a node caught mid-change (fewer GPUs allocatable than
    capacity, a plugin re-registering) to settle before it is recorded as it is."""
    smoke_test: dict[str, Any] | None = None
    """Optional smoke-test pod: ``{image, command, expect, namespace, timeout}``."""

    @field_validator("ready_timeout", "observe_window", "poll_interval", "settle_window")
    @classmethod
    def _durations(cls, value: str) -> str:
        return _duration(value)


class Halt(Strict):
    rollback_after: str = "15m"
    """A run halted longer than this (an unexpected error, a failed rollback) is rolled back
    by itself as soon as the API answers, when ``rollback.automatic`` is on."""

    @field_validator("rollback_after")
    @classmethod
    def _after(cls, value: str) -> str:
        return _duration(value)


class Verify(Strict):
    unknown: Literal["fail", "warn"] = "fail"
    """A check that could not be made (a 403, a timeout): ``fail`` blocks the step like a
    failed check; ``warn`` lets it pass, still shown as unknown with the reason."""


class Policy(Strict):
    """The whole policy file; every section optional (docs/policy.md lists the defaults)."""

    slash_command: str = "/upgrade"
    channels: dict[str, ChannelPolicy] = Field(default_factory=dict)
    requesters: Principals = Field(default_factory=Principals)
    approvers: Approvers = Field(default_factory=Approvers)
    oncall: Oncall = Field(default_factory=Oncall)
    reports: Reports = Field(default_factory=Reports)
    rollback: Rollback = Field(default_factory=Rollback)
    targets: list[Target] = Field(default_factory=list)
    steps: StepTimings = Field(default_factory=StepTimings)
    verify: Verify = Field(default_factory=Verify)
    halt: Halt = Field(default_factory=Halt)
    gpu_resources: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu"])
    """Extended resources the inventory reports and checks per node."""

    @field_validator("gpu_resources")
    @classmethod
    def _resources(cls, values: list[str]) -> list[str]:
        for value in values:
            domain, sep, name = value.partition("/")
            if not sep or not DNS1123_SUBDOMAIN.match(domain) or not name:
                raise ValueError(f"{value!r} is not an extended resource name: use e.g. nvidia.com/gpu")
        return values

    @field_validator("channels", mode="before")
    @classmethod
    def _channels(cls, value: object) -> object:
        if isinstance(value, dict):
            return {k: (v if v is not None else {}) for k, v in value.items()}
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, value: object) -> object:
        if isinstance(value, list):
            return [Target.parse(v) if isinstance(v, str) else v for v in value]
        return value

    @property
    def target_refs(self) -> list[str]:
        return [str(t) for t in self.targets]

    @property
    def registration(self) -> dict[str, str]:
        """``{namespace/name: pattern}`` of the targets that name their registration line."""
        return {str(t): t.registration for t in self.targets if t.registration}
