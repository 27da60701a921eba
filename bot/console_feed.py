"""A console's feed: every run as Redis stores it, redrawn when another process changes it.

A console hears its own engine's writes as they happen (:class:`runbooks.engine.transitioning.Observer`),
but not those of another console, a shell command or a ``serve`` on the same Redis: two people
each at a console (Alice asks, Bob approves) would not see each other. The feed closes that gap
the way Slack's channel does: every write to a run appends to the audit stream every process
shares (``{upgradebot}:audit``, in the same atomic write as the run), so the feed reads that
stream with a short blocking read (``XREAD BLOCK``, :meth:`RedisRunStore.audit_after`) and has
the chat redraw each run named there from its stored state (:meth:`bot.console.Chat.redraw`):
a run posted elsewhere shows whole, a change of state as one line, a request closed elsewhere
loses its buttons and an open one gets numbers in this console. What this console already
printed is not printed again, so its own writes, heard both ways, show once.

At start the feed shows the requests open now (a console started after the request can
approve it) and follows the stream from there on.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from runbooks.engine.store import StoreUnavailable

if TYPE_CHECKING:
    from bot.console import Chat
    from bot.storage.redis_store import RedisRunStore

log = logging.getLogger("upgradebot.console")
BLOCK = 1.0
"""Seconds one blocking read waits for an entry: how long stopping the feed may take."""


class Feed:
    """Follows the shared audit stream in a thread of its own and has ``chat`` redraw the runs named there."""

    def __init__(self, chat: Chat, store: RedisRunStore, *, block: float = BLOCK) -> None:
        self.chat, self.store, self.block = chat, store, block
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The requests open now, then every change as it is written (once; later calls do nothing)."""
        if self._thread is not None:
            return
        last = self._head()
        for run in self.store.list_runs(active_only=True):
            if run.gate is not None and run.gate.is_open:
                self.chat.redraw(run)
        self._thread = threading.Thread(target=self._follow, args=(last,), name="console-feed", daemon=True)
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=min(timeout, self.block * 3))

    def _head(self) -> str | None:
        """The newest entry now (read without waiting), so that nothing written after it is missed."""
        try:
            return self.store.audit_after(None, block=0)[0]
        except StoreUnavailable as exc:
            log.warning("the console cannot follow other consoles' changes yet: %s", exc)
            return None

    def _follow(self, last: str | None) -> None:
        while not self._stop.is_set():
            try:
                if last is None:  # Redis did not answer at start: from its newest entry once it does
                    last = self._head()
                    if last is None:
                        self._stop.wait(self.block)
                    continue
                last, runs = self.store.audit_after(last, block=self.block)
                for run_id in dict.fromkeys(r for r in runs if r):
                    run = self.store.get(run_id)
                    if run is not None and not self._stop.is_set():
                        self.chat.redraw(run)
            except StoreUnavailable as exc:
                log.warning("the console's feed of other consoles' changes: %s", exc)
                self._stop.wait(self.block)
            except Exception:  # a run that no longer parses, a chat that failed to print: the feed goes on
                log.exception("the console's feed could not redraw a run")
