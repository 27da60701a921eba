"""How a promotion rolls out, from the policy (``runbooks/policy.py``), no I/O: its waves
(:class:`Wave`), the windows it may run in (:class:`Window`) and how nodes are drained
before their plugin pod is replaced (:class:`Drain`).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from runbooks.policy_checks import Strict, at_least, duration

WAVE_SIZE = re.compile(r"^([1-9][0-9]{0,5})(%?)$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_WAVES = 20


class Wave(Strict):
    """One wave of a promotion: how many nodes have the new image once it is done, how
    long it soaks after its verification, and whether the next wave waits for an approval."""

    nodes: str
    """Cumulative over the nodes the promotion moves (every node of the DaemonSet but the
    canary's): a count (``1``, ``10``) or a percentage rounded up (``5%``, ``100%``)."""
    soak: str = "0s"
    """How long the wave's nodes run the new image, verified, before the next wave may start."""
    approve_next: bool = True
    """The next wave starts only once approved (Approve in the thread); false: it starts by
    itself when this wave's verification passed and its soak is over."""

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: object) -> str:
        text = str(value).strip()
        match = WAVE_SIZE.fullmatch(text)
        if isinstance(value, bool) or not match or (match.group(2) and int(match.group(1)) > 100):
            raise ValueError(f"{value!r} is not a wave size: use a node count (e.g. 1, 10) or a percentage "
                             "up to 100% (e.g. 5%)")
        return text

    @field_validator("soak")
    @classmethod
    def _soak(cls, value: str) -> str:
        return duration(value)

    @property
    def percent(self) -> int | None:
        return int(self.nodes[:-1]) if self.nodes.endswith("%") else None

    def count(self, total: int) -> int:
        """The cumulative node count this wave reaches out of ``total`` (percentages round up)."""
        percent = self.percent
        if percent is None:
            return min(int(self.nodes), total)
        return min(total, -(-percent * total // 100))


DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
HOURS = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])$")


class Window(Strict):
    """A weekly maintenance window: on ``days``, from the first to the second time of ``hours``
    in ``timezone`` (an end before the start runs past midnight into the next day)."""

    days: list[str] = Field(default_factory=lambda: list(DAYS))
    """``mon`` … ``sun``, or ranges such as ``mon-fri``: the days the window opens on."""
    hours: str = "00:00-24:00"
    timezone: str = "UTC"
    """An IANA time zone (``Europe/Berlin``): the window follows its daylight-saving changes."""

    @field_validator("days", mode="before")
    @classmethod
    def _days(cls, value: object) -> object:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            return value
        out: list[str] = []
        for item in items:
            text = str(item).strip().lower()
            first, sep, last = text.partition("-")
            if first not in DAYS or (sep and last not in DAYS):
                raise ValueError(f"{item!r} is not a day: use mon … sun, or a range such as mon-fri")
            a, b = DAYS.index(first), DAYS.index(last if sep else first)
            span = range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)]
            out += [DAYS[i] for i in span if DAYS[i] not in out]
        if not out:
            raise ValueError("a window needs at least one day")
        return out

    @field_validator("hours")
    @classmethod
    def _hours(cls, value: str) -> str:
        match = HOURS.fullmatch(value.strip())
        if not match or match.group(1, 2) == match.group(3, 4) or (match.group(3) == "24" and match.group(4) != "00"):
            raise ValueError(f"{value!r} is not a span of hours: use HH:MM-HH:MM, e.g. 09:00-17:00 (22:00-02:00 "
                             "runs past midnight)")
        return value.strip()

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"{value!r} is not a time zone: use an IANA name such as Europe/Berlin or UTC") from exc
        return value

    @property
    def minutes(self) -> tuple[int, int]:
        """``(start, length)`` in minutes from midnight."""
        start_h, start_m, end_h, end_m = (int(x) for x in HOURS.fullmatch(self.hours).groups())  # type: ignore[union-attr]
        start, end = start_h * 60 + start_m, end_h * 60 + end_m
        return start, (end - start) % (24 * 60) or 24 * 60

    def __str__(self) -> str:
        days = ",".join(self.days) if len(self.days) < 7 else "every day"
        return f"{days} {self.hours} {self.timezone}"


class Drain(Strict):
    """Draining a node before its plugin pod is replaced (policy ``targets[].drain``): the node
    is cordoned and the pods using its devices are evicted through the eviction API, which
    honours their PodDisruptionBudgets; it is uncordoned once the node's wave (or the canary)
    is verified. ``drain: true`` takes the defaults."""

    timeout: str = "10m"
    """How long the evictions of one batch of nodes may take, budgets refusing meanwhile and
    pods terminating, before the step fails (and the run rolls back, uncordoning)."""
    keep_failed_cordoned: bool = False
    """A node whose new plugin failed in the canary or its wave (crash-looping, never Ready, or
    failing the wave's verification) stays cordoned after the rollback, for a person to look
    at; false: every node the run cordoned is uncordoned again."""

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str) -> str:
        return at_least("10s")(duration(value))
