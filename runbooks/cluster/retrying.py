"""Retrying reads: exponential backoff with jitter, Retry-After honoured, bounded in time.

No I/O of its own: :func:`call_with_retries` runs a callable, and the clock and the
sleep are passed in so tests can drive them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from runbooks.errors import TemporaryClusterError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard the adapter tries before it gives up on a read."""

    attempts: int = 5
    """Tries in all, the first included."""
    base_delay: float = 0.2
    """Seconds before the second try; doubles each time."""
    max_delay: float = 5.0
    """No single wait is longer than this, unless the server's Retry-After says so."""
    deadline: float = 30.0
    """Seconds from the first try after which no new try starts."""
    max_retry_after: float = 20.0
    """A Retry-After longer than this is not waited for: the error is raised instead."""
    jitter: float = 0.5
    """Up to this fraction of each backoff is randomised so clients do not retry in step."""
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def backoff(self, attempt: int) -> float:
        """The wait after failed try number ``attempt`` (1-based), before jitter."""
        return min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))

    def delay(self, attempt: int, retry_after: float | None) -> float:
        base = self.backoff(attempt)
        wait = base * (1 - self.jitter * self.rng.random())
        if retry_after is not None:
            wait = max(wait, retry_after)
        return wait


NO_RETRIES = RetryPolicy(attempts=1)


def call_with_retries(
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> T:
    """``fn()``, retried on :class:`TemporaryClusterError` as ``policy`` allows.

    The last error is raised with how many tries were made added to its message, so a
    reader sees that the bot did retry.
    """
    start = monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TemporaryClusterError as error:
            retry_after = error.retry_after
            wait = policy.delay(attempt, retry_after)
            out_of_tries = attempt >= policy.attempts
            out_of_time = monotonic() - start + wait > policy.deadline
            too_long = retry_after is not None and retry_after > policy.max_retry_after
            if out_of_tries or out_of_time or too_long:
                if attempt > 1:
                    error.args = (f"{error} (gave up after {attempt} tries in {monotonic() - start:.1f}s)",)
                raise
            sleep(wait)
