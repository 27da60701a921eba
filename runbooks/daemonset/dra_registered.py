"""Verify's ``plugin-registered`` for a DRA driver: seen in the API, not in a log (issue 59).

Each node in scope is judged by :func:`runbooks.inventory.registration.slice_registration`: the
driver's ResourceSlices for the node, published by the plugin now running there (each driver
against the start of the containers serving it: NVIDIA's DRA driver serves ``gpu.nvidia.com``
from its ``gpus`` container and ``compute-domain.nvidia.com`` from ``compute-domains``). The
plugin logs read during the window are supporting evidence only: a line showing registration
proves a node whose slices are older than its plugin while the kubelet's wiping delay runs, and
a log's tail names a known failure, and a failed node's current log is the failure's evidence
(issue 61 item 3); a driver that logs nothing (verbosity 0) is registered if its
slices are there. The policy's ``registration:`` pattern, when a target sets one, is required on
top. Pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from runbooks.daemonset.checks import unregistered_evidence
from runbooks.daemonset.observing import Snapshot
from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.steps import Check
from runbooks.errors import plural
from runbooks.inventory import ResourceSlice
from runbooks.inventory.plugins import LogResult
from runbooks.inventory.registration import (
    SliceRegistration,
    by_node,
    slice_registration,
    started_serving,
)

NAME = "plugin-registered"


def _listing(names: Sequence[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def judge(snap: Snapshot, nodes: Sequence[str], slices: Sequence[ResourceSlice], *,
          drivers: Mapping[str, Sequence[str]], logs: Mapping[str, LogResult], now: dt.datetime, everywhere: bool,
          pattern: str | None = None) -> Check:
    """``plugin-registered`` on ``nodes``: ``drivers`` maps each driver judged to the containers
    serving it (none named: all the pod's); ``logs`` by node, those read (supporting evidence)."""
    scope = "all nodes" if everywhere else _listing(list(nodes))
    if not drivers:
        return unknown(NAME, "the DaemonSet names no DRA driver and none published ResourceSlices on its nodes: "
                       "cannot tell its registration", scope)
    bad: dict[str, str] = {}
    unproven: dict[str, str] = {}
    how: dict[str, dict[str, str]] = {}
    by_log = 0
    index = by_node(slices)
    for node in nodes:
        pod = snap.pod_on(node)
        if pod is None or pod.deleting:
            bad[node] = "no plugin pod running"
            continue
        log = logs.get(node)
        seen = bool(log is not None and log.registered)
        for driver, containers in sorted(drivers.items()):
            verdict: SliceRegistration = slice_registration(node, driver, index.get(node, []), now=now,
                                                            started=started_serving(pod.started, containers))
            how.setdefault(node, {})[driver] = verdict.how
            if verdict.registered is False:
                bad.setdefault(node, verdict.detail)
            elif verdict.registered is None:
                if seen and not pattern:
                    by_log += 1
                    how[node][driver] = "log"
                else:
                    unproven.setdefault(node, verdict.detail)
        if pattern and log is not None and log.registered is False:
            bad.setdefault(node, f"the plugin log has no line matching {pattern!r} (the policy's registration "
                           "pattern)")
    logged = sorted(n for n in nodes if (r := logs.get(n)) is not None and r.registered)
    evidence = {"by_slices": how, "log_line_seen": logged, "drivers": {d: list(c) for d, c in drivers.items()}}
    if bad:
        first = next(iter(bad.items()))
        known = unregistered_evidence(snap, list(bad), logs)
        sigs = known[1]["signatures"] if known else []
        said = f"; on {known[0]}: {sigs[0]['meaning']}: {sigs[0]['fix']}" if known and sigs else ""
        return failed(NAME, f"{', '.join(sorted(drivers))} not registered on {_listing(list(bad))}: {first[1]}{said}",
                      scope, missing=sorted(bad), reasons=bad, **evidence, **(known[1] if known else {}))
    if unproven:
        first = next(iter(unproven.items()))
        return unknown(NAME, f"registration not proven yet on {_listing(list(unproven))}: {first[1]}", scope,
                       unproven=unproven, **evidence)
    also = f"; {plural(by_log, 'node')} by the plugin's log line while the kubelet's wiping delay runs" if by_log else ""
    lines = f" (the registration line is in {plural(len(logged), 'log')} read)" if logged else ""
    return passed(NAME, f"ResourceSlices of {', '.join(sorted(drivers))} published by the plugin now running on "
                  f"{plural(len(nodes), 'node')}{also}{lines}", scope, **evidence)
