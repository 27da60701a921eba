"""Idempotency keys: a Slack retry or a second delivery never starts anything twice.

Each command and click is claimed once under a key made of what Slack sends again on a
retry (the ``trigger_id``), before any work starts; a delivery whose key is already
claimed is acknowledged and dropped. The Redis store (``bot/storage/redis_store.py``,
``RedisRunStore.claim_once``) implements :class:`Idempotency` across replicas and
restarts; :class:`InMemoryIdempotency` is the single-process fallback.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Idempotency(Protocol):
    def claim_once(self, key: str, ttl: dt.timedelta) -> bool:
        """True for the first claim of ``key`` within ``ttl``; False for every later one."""
        ...


class InMemoryIdempotency:
    """Claims kept in this process's memory: the single-process fallback.

    Correct only while one bot process serves the app: a second replica, or this one
    after a restart, does not see the claims. Production plugs the Redis store in.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    def claim_once(self, key: str, ttl: dt.timedelta) -> bool:
        now = self._clock()
        with self._lock:
            expires = self._expiry.get(key)
            if expires is not None and expires > now:
                return False
            if len(self._expiry) >= self._max_keys:
                self._expiry = {k: e for k, e in self._expiry.items() if e > now}
            self._expiry[key] = now + ttl.total_seconds()
            return True
