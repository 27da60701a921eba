"""The verdicts of verify: pure functions from what was read to :class:`Check` models.

No I/O: :mod:`runbooks.daemonset.verifying` reads the cluster (snapshots at the start and the end
of the observation window, node samples in between, logs, DRA objects, events) and
passes the data here. Each function returns one check named for what it proves, with
the nodes it concerns in ``scope`` and the numbers behind the verdict in ``evidence``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.evidence import current_log
from runbooks.daemonset.observing import Snapshot
from runbooks.engine.recording import failed, passed, skipped, unknown, warned
from runbooks.engine.steps import Check
from runbooks.errors import plural
from runbooks.inventory import Node, ResourceClaim, ResourceSlice
from runbooks.inventory.plugins import LogResult

ALL = "all nodes"


def listing(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def scope_of(nodes: Sequence[str], everywhere: bool) -> str:
    return ALL if everywhere else listing(list(nodes))


def rollout(snap: Snapshot, nodes: Sequence[str], *, image: str | None, container: str | None, everywhere: bool) -> Check:
    """Pods in scope run the current revision (and ``image``); counted from pod hashes and DS status."""
    status = snap.status
    current = snap.current_revision
    desired = int(status.get("desiredNumberScheduled") or 0)
    on_current = sum(1 for p in snap.pods if current and not p.deleting and p.revision_hash == current.hash)
    evidence: dict[str, Any] = {
        "desired": desired, "updated_status": int(status.get("updatedNumberScheduled") or 0), "updated_pods": on_current,
        "ready": int(status.get("numberReady") or 0), "available": int(status.get("numberAvailable") or 0),
        "revision": current.number if current else None, "hash": current.hash if current else None,
        "strategy": snap.strategy_type,
    }
    scope = scope_of(nodes, everywhere)
    if current is None or int(status.get("observedGeneration") or 0) < snap.generation:
        return failed("rollout", "the DaemonSet controller has not processed the latest template yet", scope, **evidence)
    behind, wrong_image = [], []
    for node in nodes:
        pod = snap.pod_on(node)
        if pod is None or pod.deleting or pod.revision_hash != current.hash:
            behind.append(node)
        elif image and container and pod.images.get(container) != image:
            wrong_image.append(node)
    evidence.update(behind=behind, wrong_image=wrong_image)
    if wrong_image:
        return failed("rollout", f"pods on {listing(wrong_image)} do not run {image}", scope, **evidence)
    if behind:
        detail = f"{len(behind)} of {plural(len(nodes), 'node')} not on revision {current.number} ({current.hash}): {listing(behind)}"
        if image is None and snap.strategy_type == "OnDelete":
            return warned("rollout", detail + " (OnDelete: pods change only when deleted; a canary may be in progress)",
                          scope, **evidence)
        return failed("rollout", detail, scope, **evidence)
    what = f" with {image}" if image else ""
    return passed("rollout", f"{plural(len(nodes), 'node')} on revision {current.number} ({current.hash}){what}; "
                  f"{on_current}/{desired} pods updated", scope, **evidence)


def pods_ready(snap: Snapshot, nodes: Sequence[str], *, everywhere: bool) -> Check:
    bad = {}
    for node in nodes:
        pod = snap.pod_on(node)
        if pod is None:
            bad[node] = "no pod"
        elif pod.deleting or pod.phase != "Running" or not pod.ready:
            bad[node] = f"{pod.name} {'terminating' if pod.deleting else pod.phase}{'' if pod.ready else ', not Ready'}"
    scope = scope_of(nodes, everywhere)
    if bad:
        return failed("pods-ready", "; ".join(f"{n}: {why}" for n, why in list(bad.items())[:5]), scope, nodes=bad)
    return passed("pods-ready", f"the plugin pod on each of {plural(len(nodes), 'node')} is Running and Ready", scope)


def no_crashloop(samples: Sequence[Snapshot], nodes: Sequence[str], *, everywhere: bool) -> Check:
    seen: dict[str, str] = {}
    for snap in samples:
        for node in nodes:
            pod = snap.pod_on(node)
            if pod is not None and pod.crashloop:
                seen.setdefault(node, f"{pod.name} ({pod.restarts} restart{'' if pod.restarts == 1 else 's'})")
    scope = scope_of(nodes, everywhere)
    if seen:
        return failed("no-crashloop", "CrashLoopBackOff: " + "; ".join(f"{n}: {p}" for n, p in list(seen.items())[:5]),
                      scope, nodes=seen)
    return passed("no-crashloop", "no plugin container in CrashLoopBackOff", scope)


def restarts_stable(start: Snapshot, end: Snapshot, nodes: Sequence[str], *, window: float, everywhere: bool) -> Check:
    """Restart counts sampled at the start and the end of the observation window."""
    rose, replaced = {}, {}
    for node in nodes:
        before, after = start.pod_on(node), end.pod_on(node)
        if before is None or after is None:
            continue
        if before.uid != after.uid:
            replaced[node] = f"{before.name} -> {after.name}"
        elif after.restarts > before.restarts:
            rose[node] = f"{after.name}: {before.restarts} -> {after.restarts}"
    scope = scope_of(nodes, everywhere)
    evidence = {"window_seconds": window, "rose": rose, "replaced": replaced}
    if rose or replaced:
        parts = [f"restarts rose on {n} ({why})" for n, why in rose.items()]
        parts += [f"pod replaced on {n} ({why})" for n, why in replaced.items()]
        return failed("restarts-stable", f"during {window:g}s: " + "; ".join(parts[:5]), scope, **evidence)
    return passed("restarts-stable", f"no restart in {window:g}s", scope, **evidence)


def registered(snap: Snapshot, nodes: Sequence[str], logs: dict[str, LogResult], *, kind: str, everywhere: bool,
               pattern: str | None = None, advertised: dict[str, int] | None = None,
               resources: Sequence[str] = ("nvidia.com/gpu",)) -> Check:
    """The registration line in each plugin pod's log (``logs`` by node); a node whose log was
    not in the sample is judged by ``advertised`` (the GPUs its allocatable offers: a device
    plugin that did not register offers none)."""
    missing, unread, silent = [], {}, []
    advertised = advertised or {}
    for node in nodes:
        result = logs.get(node)
        if result is None and node in advertised:
            if advertised[node] <= 0:
                silent.append(node)
        elif result is None or result.registered is None:
            unread[node] = result.problem if result and result.problem else "log not read"
        elif not result.registered:
            missing.append(node)
    scope = scope_of(nodes, everywhere)
    if pattern:
        line = f"line matching {pattern!r} (the policy's registration pattern)"
    elif kind == "device-plugin":
        line = "'Registered device plugin [for …] with Kubelet'"
    else:
        line = "the DRA driver's registration with the kubelet"
    if missing or silent:
        parts = [f"the plugin log on {listing(missing)} has no {line}"] if missing else []
        if silent:
            parts.append(f"{listing(silent)} advertise{'s' if len(silent) == 1 else ''} no {', '.join(resources)}")
        known = unregistered_evidence(snap, missing, logs)
        sigs = known[1]["signatures"] if known else []
        said = f"; on {known[0]}: {sigs[0]['meaning']}: {sigs[0]['fix']}" if known and sigs else ""
        return failed("plugin-registered", "; ".join(parts) + ": it did not register" + said, scope, missing=missing,
                      silent=silent, unread=unread, **(known[1] if known else {}))
    if unread:
        first = next(iter(unread.values()))
        return unknown("plugin-registered", f"could not read the plugin log on {listing(list(unread))} ({first})",
                      scope, unread=unread)
    by_logs = [n for n in nodes if n not in advertised]
    others = len(nodes) - len(by_logs)
    also = f"; the other {plural(others, 'node')} advertise {', '.join(resources)}" if others else ""
    return passed("plugin-registered", f"{line} found on {plural(len(by_logs), 'node')}{also}", scope,
                  by_logs=len(by_logs), by_capacity=others)


def unregistered_evidence(snap: Snapshot, missing: Sequence[str],
                          logs: Mapping[str, LogResult]) -> tuple[str, dict[str, Any]] | None:
    """The evidence of a plugin running unregistered (issue 61 item 3): the current log of the
    first node in ``missing`` whose log shows a known failure (``Failed to start plugin`` …
    ``Retrying in 30s...``, ``No devices found``), else of the first whose log was read, as
    :func:`~runbooks.daemonset.evidence.current_log` makes it, naming the node in ``signatures_of``. A
    pod whose container is not running (crash-looping, waiting) is left out: its previous log is the
    evidence (:func:`~runbooks.daemonset.evidence.attach`)."""
    read = [(node, result, pod) for node in missing
            if (result := logs.get(node)) is not None and result.registered is not True
            and (pod := snap.pod_on(node)) is not None and not (pod.crashloop or pod.waiting_reason)]
    found = [(node, current_log(pod.name, sorted(pod.images), result)) for node, result, pod in read]
    chosen = next((f for f in found if f[1]["signatures"]), found[0] if found else None)
    if chosen is None:
        return None
    node, said = chosen
    return node, {"signatures_of": node, **said}


def gpu_capacity(
    nodes: Sequence[str], final: dict[str, Node], lowest: dict[str, dict[str, int]], baseline: Baseline | None,
    resources: Sequence[str], *, everywhere: bool,
) -> Check:
    """Capacity and allocatable are not below the baseline at the end, and allocatable never dipped
    below it. Each node is compared with its own state before the change: one already degraded
    then is said so, never blamed on the upgrade; one that recovered since is no failure."""
    problems: dict[str, str] = {}
    degraded = _degraded_before(nodes, baseline, resources)
    for node in nodes:
        now = final.get(node)
        if now is None:
            problems[node] = "node gone"
            continue
        base = baseline.node(node) if baseline else None
        for res in resources:
            cap, alloc, low = now.capacity.get(res, 0), now.allocatable.get(res, 0), lowest.get(node, {}).get(res)
            if base is not None:
                want_cap, want_alloc = base.capacity.get(res, 0), base.allocatable.get(res, 0)
            else:
                want_cap, want_alloc = cap, cap
            if cap < want_cap or alloc < want_alloc:
                problems[node] = f"{res} capacity/allocatable {cap}/{alloc}, baseline {want_cap}/{want_alloc}"
            elif low is not None and low < want_alloc:
                problems[node] = f"{res} allocatable dropped to {low} (baseline {want_alloc}) during the window"
    scope = scope_of(nodes, everywhere)
    before = f"; already degraded before the run: {'; '.join(f'{n} ({d})' for n, d in degraded.items())}" \
        if degraded else ""
    if problems:
        return failed("gpu-capacity", "; ".join(f"{n}: {p}" for n, p in list(problems.items())[:5]) + before, scope,
                      nodes=problems, degraded_before=degraded)
    if baseline is None:
        return passed("gpu-capacity", f"{', '.join(resources)} allocatable equals capacity on {plural(len(nodes), 'node')} "
                      "(no baseline to compare with)", scope)
    return passed("gpu-capacity", f"{', '.join(resources)} capacity and allocatable not below the baseline on "
                  f"{plural(len(nodes), 'node')}{before}", scope, degraded_before=degraded)


def _degraded_before(nodes: Sequence[str], baseline: Baseline | None, resources: Sequence[str]) -> dict[str, str]:
    """Nodes whose baseline already had fewer allocatable GPUs than capacity."""
    found: dict[str, str] = {}
    for node in nodes:
        base = baseline.node(node) if baseline else None
        short = [f"{r} {base.allocatable.get(r, 0)} of {base.capacity.get(r, 0)} allocatable" for r in resources
                 if base is not None and base.allocatable.get(r, 0) < base.capacity.get(r, 0)]
        if short:
            found[node] = ", ".join(short)
    return found


def others_unchanged(
    snap: Snapshot, others: Sequence[str], final: dict[str, Node], baseline: Baseline | None, resources: Sequence[str],
) -> Check:
    """Nodes outside the scope keep their baseline images and GPU capacity (the canary stays on one node)."""
    if baseline is None:
        return skipped("other-nodes-unchanged", "no baseline to compare the other nodes with")
    changed: dict[str, str] = {}
    for node in others:
        base, pod, now = baseline.node(node), snap.pod_on(node), final.get(node)
        if base is None:
            continue
        if pod is None or pod.images != base.images:
            changed[node] = f"image {pod.images if pod else 'no pod'} (baseline {base.images})"
        elif now is not None and any(
            now.capacity.get(r, 0) < base.capacity.get(r, 0) or now.allocatable.get(r, 0) < base.allocatable.get(r, 0)
            for r in resources
        ):
            changed[node] = f"GPU capacity/allocatable {now.capacity}/{now.allocatable} (baseline {base.capacity}/{base.allocatable})"
    if changed:
        return failed("other-nodes-unchanged", "; ".join(f"{n}: {c}" for n, c in list(changed.items())[:5]),
                      listing(list(changed)), nodes=changed)
    return passed("other-nodes-unchanged", f"{plural(len(others), 'other node')} keep their image and GPU capacity", "other nodes")


def dra_slices(nodes: Sequence[str], slices: Sequence[ResourceSlice] | None, drivers: Sequence[str],
               baseline: Baseline | None, *, everywhere: bool) -> Check:
    scope = scope_of(nodes, everywhere)
    if slices is None:
        return skipped("dra-slices", "this cluster serves no ResourceSlice API (DRA before 1.30): nothing to count", scope)
    if not drivers:
        return warned("dra-slices", "the DaemonSet names no DRA driver: cannot tell which slices are its", scope)
    missing: dict[str, str] = {}
    for node in nodes:
        for driver in drivers:
            devices = sum(s.devices for s in slices if s.node == node and s.driver == driver)
            base = baseline.node(node) if baseline else None
            want = base.slices.get(driver) if base else None
            if devices == 0:
                missing[node] = f"no ResourceSlice of {driver}"
            elif want is not None and devices < want:
                missing[node] = f"{plural(devices, 'device')} of {driver}, baseline {want}"
    if missing:
        return failed("dra-slices", "; ".join(f"{n}: {m}" for n, m in list(missing.items())[:5]), scope, nodes=missing)
    return passed("dra-slices", f"ResourceSlices of {', '.join(drivers)} on {plural(len(nodes), 'node')}", scope)


def dra_claims(claims: Sequence[ResourceClaim] | None, baseline: Baseline | None, drivers: Sequence[str]) -> Check:
    if claims is None:
        return skipped("dra-claims", "this cluster serves no ResourceClaim API")
    now = {f"{c.namespace}/{c.name}": c for c in claims}
    wanted = baseline.claims_allocated if baseline else [k for k, c in now.items() if set(c.drivers) & set(drivers)]
    lost = [k for k in wanted if k not in now or not now[k].state.startswith("allocated")]
    if lost:
        return failed("dra-claims", f"claims no longer allocated: {listing(lost)}", ALL, lost=lost)
    return passed("dra-claims", f"{plural(len(wanted), 'claim')} of {', '.join(drivers) or 'its drivers'} still allocated", ALL)


def dra_new_claims(claims: Sequence[ResourceClaim] | None, since: dt.datetime, *, end_time: dt.datetime, grace: float,
                   drivers: Sequence[str], scheduling: dict[str, str]) -> Check:
    """No claim made since the step began stays pending past ``grace`` while a pod waits for it.

    Claims allocated before the step are :func:`dra_claims`' business; this one catches a driver
    that runs and registers but whose devices cannot be allocated (the scheduler's ``cannot
    allocate all claims``), which a pod waiting on a new claim shows first.
    """
    if claims is None:
        return skipped("dra-new-claims", "this cluster serves no ResourceClaim API")
    stuck = [c for c in claims if c.state == "pending" and c.waiting_pods and c.created and c.created >= since
             and (end_time - c.created).total_seconds() >= grace]
    if stuck:
        said = {f"{c.namespace}/{c.name}": next((scheduling[f"{c.namespace}/{p}"] for p in c.waiting_pods
                                                 if f"{c.namespace}/{p}" in scheduling), "") for c in stuck}
        first = next(iter(said.items()))
        why = f": the scheduler said {first[1][:200]!r}" if first[1] else ""
        return failed("dra-new-claims", f"{plural(len(stuck), 'claim')} made since the step began still pending after "
                      f"{grace:g}s with pods waiting ({listing(list(said))}){why}", ALL, claims=said)
    return passed("dra-new-claims", f"no claim made since the step began is left pending (of "
                  f"{', '.join(drivers) or 'its drivers'})", ALL)
