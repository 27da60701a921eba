"""The plugin logs of verify's registration check, read while its window runs (issue 39).

Outside the window they were the last reads before the verdict: up to ``log_budget`` logs
(200 at 5,000 nodes) read after the window had ended. :meth:`WindowLogs.start` reads the
sample of the window's start in the background, while the window waits; at its end
:meth:`WindowLogs.results` keeps what showed the registration line of a pod still the same
(same pod, same restarts, same containers: the same log, only longer since) and reads the
rest again: a pod that registered during the window, was replaced or restarted, or that
the end's sample chose anew. What is judged is what the end would have read.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from runbooks.cluster import Cluster
from runbooks.inventory import PluginPod
from runbooks.inventory.plugins import LOG_TAIL, LogRead, LogResult, read_registrations

Key = tuple[str, str]


class WindowLogs:
    """Registration logs read during the window, then only what changed at its end (see the module)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-logs")
        self._early: Future[dict[Key, LogResult]] | None = None
        self._pods: Mapping[str, PluginPod] = {}

    def __enter__(self) -> WindowLogs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=exc[0] is None, cancel_futures=True)

    def _read(self, reads: list[LogRead]) -> dict[Key, LogResult]:
        cluster = self.cluster
        return read_registrations(
            reads, lambda ns, pod, container: cluster.pod_log(ns, pod, container=container, tail_lines=LOG_TAIL),
        )

    def start(self, reads: list[LogRead], pods: Mapping[str, PluginPod]) -> None:
        """Read ``reads`` (of ``pods``, by name) in the background."""
        self._pods = dict(pods)
        self._early = self._pool.submit(self._read, reads)

    def results(self, reads: list[LogRead], pods: Mapping[str, PluginPod]) -> dict[Key, LogResult]:
        """``{(namespace, pod): LogResult}`` of ``reads`` (of ``pods``, by name): what the window's
        reads found registered for the same pod, the rest read now."""
        early = self._early.result() if self._early is not None else {}
        kept = {}
        for read in reads:
            found = early.get((read.namespace, read.pod))
            if found is not None and found.registered and _same(self._pods.get(read.pod), pods.get(read.pod)):
                kept[(read.namespace, read.pod)] = found
        return {**kept, **self._read([r for r in reads if (r.namespace, r.pod) not in kept])}


def _same(before: PluginPod | None, after: PluginPod | None) -> bool:
    """The same container instances: what one log read showed still holds (a log only grows)."""
    return before is not None and after is not None and before.uid == after.uid \
        and before.restarts == after.restarts and before.images == after.images
