"""A promotion in waves: which nodes each wave moves, and moving them wave by wave.

The plan is made once, when the canary has passed, and kept in ``run.progress.waves`` (so
the promotion request shows it and a resumed run follows the same one):

- the nodes are every node the DaemonSet runs on except the canary's;
- their order is stable and spreads over failure domains: the hardware class (GPU product x
  driver branch x runtime) first, so the first wave holds a node of every class (it grows to
  one per class if its size is smaller), then the policy's ``spread`` labels,
  widest first, are taken in turn (zone a, zone b, zone c, zone a...; within a zone, rack
  by rack), and where a choice remains the idlest node (fewest devices in use) comes first;
- wave sizes are cumulative over those nodes (``1``, ``5%``, ``25%``, ``100%``; percentages
  round up); a wave that would add no node is left out.

:func:`promote_in_waves` is the promote step of such a run. For each wave, in order, doing
only what the run's progress does not show done:

1. the wave's old pods are deleted, at most ``maxUnavailable`` (the DaemonSet's own,
   rounded up as the controller does) of the DaemonSet's pods unavailable at once, and
   each replacement is followed until it is Ready; a crash-looping pod stops the wave;
2. the wave is verified on its own nodes (the checks of ``verify``) and every node of the
   later waves must still be as the baseline found it;
3. it soaks (``soak``), the run waiting without holding a worker, then the next wave
   starts by itself or, with ``approve_next``, once its request is approved.

With maintenance windows (policy ``windows``) a wave starts only inside one in which its
soak also ends; otherwise the run waits for the next such window. A wave already started
finishes (its nodes moved and verified) even if the window closes meanwhile.

With ``drain`` (:mod:`runbooks.daemonset.draining`) each batch's nodes are cordoned and
drained before their plugin pods are deleted, and uncordoned once their wave is verified; a
target that drains without ``waves`` is promoted in one wave of every node.

No pod outside the current wave is deleted. A failed wave fails the step, and the run's
rollback puts every node it moved back. When every wave is done the original update
strategy goes back (every pod already runs the new revision, so nothing churns).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runbooks import windows
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from runbooks.daemonset import companions, draining, pinning, through_operator
from runbooks.daemonset.baselines import Baseline
from runbooks.daemonset.checks import listing
from runbooks.daemonset.following import replace_nodes
from runbooks.daemonset.observing import Revision, Snapshot
from runbooks.daemonset.patching import set_strategy
from runbooks.daemonset.verifying import verify
from runbooks.engine.recording import failed, note, note_checks, passed
from runbooks.engine.steps import Again, Check, StepContext, StepResult, StepSettings
from runbooks.errors import plural
from runbooks.inventory import take_inventory
from runbooks.inventory.reading import parse_time
from runbooks.inventory.stacks import class_of
from runbooks.policy import Target
from runbooks.policy_checks import duration_seconds
from runbooks.policy_rollout import Wave


@dataclass(frozen=True)
class Candidate:
    """A node a wave may take: its failure domains (the spread labels' values) and how busy it is."""

    name: str
    domains: tuple[str, ...]
    busy: int = 0


def order_nodes(candidates: Sequence[Candidate]) -> list[str]:
    """Every candidate once, spread over its failure domains, the idlest first where a choice remains."""
    return [c.name for c in _interleave(list(candidates), 0)]


def _interleave(candidates: list[Candidate], depth: int) -> list[Candidate]:
    if not candidates or depth >= len(candidates[0].domains):
        return sorted(candidates, key=lambda c: (c.busy, c.name))
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.domains[depth], []).append(c)
    queues = {key: _interleave(members, depth + 1) for key, members in groups.items()}
    out: list[Candidate] = []
    turn = 0
    while len(out) < len(candidates):
        heads = [(q[turn].busy, key) for key, q in queues.items() if turn < len(q)]
        out.extend(queues[key][turn] for _, key in sorted(heads))
        turn += 1
    return out


def split(order: Sequence[str], waves: Sequence[Wave], *, first_at_least: int = 0) -> list[dict[str, Any]]:
    """The waves' nodes from the ordered nodes: cumulative sizes, empty waves left out; the first
    wave takes at least ``first_at_least`` nodes (one of each hardware class, when the order
    interleaves the classes first)."""
    planned: list[dict[str, Any]] = []
    reached = 0
    for i, wave in enumerate(waves):
        upto = len(order) if i == len(waves) - 1 else max(reached, wave.count(len(order)))
        if not planned:
            upto = min(len(order), max(upto, first_at_least))
        if upto <= reached:
            continue
        planned.append({"size": wave.nodes, "nodes": list(order[reached:upto]),
                        "soak": duration_seconds(wave.soak), "approve_next": wave.approve_next})
        reached = upto
    return planned


def waves_of(settings: StepSettings, ref: str, *, drain: bool = False) -> Target | None:
    """The policy's entry for ``ref`` when it promotes in waves. A run that drains (``drain``)
    always does: without ``waves`` in one wave of every node, since the nodes must be drained
    before their pods are replaced, which the DaemonSet controller would not wait for."""
    target = settings.targets.get(ref)
    if target is not None and target.waves:
        return target
    if not drain:
        return None
    namespace, _, name = ref.partition("/")
    base = target or Target(namespace=namespace, name=name)
    return base.model_copy(update={"waves": [Wave(nodes="100%")]})


def plan(
    cluster: Cluster, snap: Snapshot, *, canary: Sequence[str], target: Target, settings: StepSettings,
) -> list[dict[str, Any]]:
    """The waves of the promotion of ``snap``'s DaemonSet (read-only): the hardware class (GPU
    product x driver branch x runtime) is the widest failure domain, before the policy's
    ``spread`` labels, and the first wave holds a node of every class."""
    keys = list(target.spread)
    labels: dict[str, tuple[str, ...]] = {}
    for name, values in cluster.list_objects(NODES, project=lambda o: _domains(o, keys)):
        labels[name] = values
    found = take_inventory(cluster, targets=[str(target)], gpu_resources=settings.gpu_resources, log_budget=0).nodes
    busy = {n.name: n.busy for n in found}
    hardware = {n.name: class_of(n) or "" for n in found}
    nodes = [n for n in snap.nodes if n not in canary]
    order = order_nodes([Candidate(n, (hardware.get(n, ""), *labels.get(n, ("",) * len(keys))), busy.get(n, 0))
                         for n in nodes])
    return split(order, target.waves, first_at_least=len({hardware.get(n, "") for n in nodes}))


def _domains(obj: dict[str, Any], keys: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return meta.get("name", ""), tuple(str(labels.get(k, "")) for k in keys)


def at_once(strategy: dict[str, Any], total: int) -> int:
    """How many of the DaemonSet's pods may be unavailable at once: its ``maxUnavailable``
    (a percentage rounds up, as the controller does; OnDelete or unset: 1), at least 1."""
    value = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1)
    if isinstance(value, str) and value.endswith("%"):
        try:
            return max(1, -(-int(value[:-1]) * total // 100))
        except ValueError:
            return 1
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def promote_in_waves(ctx: StepContext, snap: Snapshot, new: Revision) -> StepResult:
    """The promote step of a run with waves (see the module's docstring)."""
    run = ctx.run
    saved = run.progress["saved"]
    waves: list[dict[str, Any]] = run.progress.get("waves") or []
    target = waves_of(ctx.settings, run.target.ref, drain=run.target.drain)
    if not waves:
        if target is None:
            return StepResult(ok=False, reason="the run has no wave plan and the policy no longer gives waves")
        waves = plan(ctx.cluster, snap, canary=run.canary_nodes, target=target, settings=ctx.settings)
        ctx.run = ctx.save_progress({"waves": waves})
    done: dict[str, Any] = dict(run.progress.get("wave_done") or {})
    limit = at_once(saved["update_strategy"], len(snap.nodes))
    if pinning.promoted(run, ctx.settings) != run.image and not done:  # the canary's pods to the pinned digest first
        canary = list(run.canary_nodes)
        repinned = replace_nodes(ctx, canary, new.hash, at_once=limit, step="promote.canary-pin",
                                 prepare=lambda batch: draining.drain_nodes(ctx, batch, step="promote.canary-pin.drain"))
        if not repinned.ok:
            return StepResult(ok=False, reason=f"the canary's nodes did not move to the pinned digest: "
                              f"{repinned.problem or 'not finished'}; {listing(repinned.behind)} behind")
        draining.uncordon(ctx, canary, step="promote.canary-pin.uncordon")
    total = len(waves)
    for number, wave in enumerate(waves, start=1):
        key = str(number)
        if key not in done:
            if number > 1 and waves[number - 2]["approve_next"] and int(ctx.run.progress.get("approved_wave") or 1) < number:
                return StepResult(ok=True, again=Again(why=f"wave {number} of {total} waits for its approval",
                                                       approval=True, wave=number))
            if ctx.paused():
                return _paused(ctx, number, total)
            if key not in (ctx.run.progress.get("wave_started") or {}):
                closed = _window_closed(ctx, target, number, total, float(wave.get("soak") or 0))
                if closed is not None:
                    return closed
            result = _move_and_verify(ctx, number, total, wave, new, limit, later=_later(waves, number))
            if not result.ok or result.again is not None:
                return result
            done = dict(ctx.run.progress.get("wave_done") or {})
        soak_until = parse_time(done[key].get("soak_until"))
        if number < total and soak_until is not None and ctx.clock.now() < soak_until:
            return StepResult(ok=True, again=Again(why=f"wave {number} of {total} soaks until {soak_until:%Y-%m-%d %H:%M} UTC",
                                                   at=soak_until))
    return _finish(ctx, saved, new)


def _window_closed(ctx: StepContext, target: Target | None, number: int, total: int, soak: float) -> StepResult | None:
    """Wait for a maintenance window in which the wave's soak ends, when the current one is
    closed or closes too soon; None when the wave may start now."""
    found = list(target.windows) if target is not None else []
    if not found:
        return None
    now = ctx.clock.now()
    span = windows.span_at(found, now)
    if span is not None and span.fits(now, soak):
        return None
    nxt = windows.next_span(found, now, fitting=soak)
    if nxt is None:
        return StepResult(ok=False, reason=f"wave {number} of {total} soaks {soak:g}s, longer than any maintenance window")
    needs = f" and its {soak:g}s soak" if soak else ""
    why = (f"wave {number} of {total} waits for a maintenance window ({windows.describe(found)}) in which it{needs} "
           f"fits: {nxt.start:%Y-%m-%d %H:%M} UTC")
    note(ctx, "promote.window", "info", why, wave=number)
    return StepResult(ok=True, again=Again(why=why, at=nxt.start))


def _later(waves: list[dict[str, Any]], number: int) -> list[str]:
    return [n for w in waves[number:] for n in w["nodes"]]


def _paused(ctx: StepContext, number: int, total: int) -> StepResult:
    pause = ctx.run.pause
    who = f" by {pause.by}" if pause else ""
    held = draining.still_cordoned(ctx.run.progress)
    cordoned = f"; {listing(held)} stay cordoned until their wave is verified" if held else ""
    note(ctx, "promote.paused", "info", f"paused{who} before wave {number} of {total}{cordoned}: "
         f"`continue {ctx.run.id}` goes on", cordoned=held)
    return StepResult(ok=True, again=Again(why=f"paused{who} before wave {number} of {total}"))


def _move_and_verify(ctx: StepContext, number: int, total: int, wave: dict[str, Any], new: Revision, limit: int,
                     *, later: list[str]) -> StepResult:
    run = ctx.run
    nodes: list[str] = list(wave["nodes"])
    state = dict(run.progress.get("wave_started") or {})
    if str(number) not in state:
        state[str(number)] = ctx.cluster.server_time().isoformat()
        ctx.run = ctx.save_progress({"wave": number, "wave_started": state})
        note(ctx, "promote.wave", "info", f"wave {number} of {total} starts: {plural(len(nodes), 'node')} ({listing(nodes)}), "
             f"at most {plural(limit, 'plugin pod')} unavailable at once", wave=number, nodes=nodes)
    def moved(count: int) -> None:
        ctx.run = ctx.save_progress({"wave_moved": {**(ctx.run.progress.get("wave_moved") or {}), str(number): count}})

    outcome = replace_nodes(ctx, nodes, new.hash, at_once=limit, step="promote.node", moved=moved,
                            prepare=lambda batch: draining.drain_nodes(ctx, batch, step=f"promote.wave{number}.drain"))
    if outcome.paused:
        return _paused(ctx, number, total)
    if not outcome.ok:
        draining.mark_failed(ctx, outcome.failing)
        check = failed("promotion", f"wave {number} of {total}: {outcome.problem or 'not finished'}; "
                       f"{len(outcome.behind)} of {plural(len(nodes), 'node')} of the wave behind: {listing(outcome.behind)}",
                       listing(outcome.behind), wave=number, behind=outcome.behind, revision=new.hash)
        note_checks(ctx, "promote", [check])
        return StepResult(ok=False, reason=f"wave {number} of {total} failed: {check.detail}", checks=[check])
    baseline = Baseline.model_validate(run.progress["baseline"]) if run.progress.get("baseline") else None
    container = run.progress["saved"].get("container") or run.container or None
    outcome_v = verify(ctx.cluster, run.target.ref, nodes=nodes, others=later, baseline=baseline,
                       since=parse_time(state[str(number)]), settings=ctx.settings, clock=ctx.clock,
                       image=pinning.promoted(run, ctx.settings), container=container, watches=ctx.watches)
    checks = [c.model_copy(update={"evidence": {**c.evidence, "wave": number}}) for c in outcome_v.checks]
    note_checks(ctx, f"promote.wave{number}", checks)
    passing = sum(1 for c in checks if c.status in ("pass", "skip"))
    ctx.run = ctx.save_progress({"wave_checks": {**(ctx.run.progress.get("wave_checks") or {}),
                                                 str(number): [passing, len(checks)]}})
    if not outcome_v.ok:
        draining.mark_failed(ctx, draining.failed_nodes(checks, nodes))
        return StepResult(ok=False, reason=f"wave {number} of {total} failed its verification: {outcome_v.reason}",
                          checks=checks)
    draining.uncordon(ctx, nodes, step=f"promote.wave{number}.uncordon")
    soak = float(wave.get("soak") or 0)
    now = ctx.clock.now()
    entry = {"verified_at": now.isoformat(), "soak_until": (now + dt.timedelta(seconds=soak)).isoformat() if soak else None}
    ctx.run = ctx.save_progress({"wave_done": {**(ctx.run.progress.get("wave_done") or {}), str(number): entry}})
    soaking = f"; it soaks for {soak:g}s" if soak and number < total else ""
    note(ctx, "promote.wave", "ok", f"wave {number} of {total} verified on {plural(len(nodes), 'node')}{soaking}", wave=number)
    return StepResult(ok=True)


def _finish(ctx: StepContext, saved: dict[str, Any], new: Revision) -> StepResult:
    """Every wave done: the original strategy back, the workloads upgraded after the DaemonSet."""
    run = ctx.run
    original = saved["update_strategy"]
    if run.target.clusterpolicy:  # the operator renders the strategy: its ClusterPolicy's field as it was
        through_operator.put_back_strategy(ctx, step="promote.clusterpolicy")
    elif (original.get("type") or "RollingUpdate") != "OnDelete":
        set_strategy(ctx, original, step="promote.strategy")
    waves = run.progress.get("waves") or []
    moved = sum(len(w["nodes"]) for w in waves) + len(run.canary_nodes)
    check = passed("promotion", f"{plural(moved, 'node')} run {pinning.promoted(run, ctx.settings)} (revision {new.number}), in {plural(len(waves), 'wave')} after "
                   "the canary, each verified", "all nodes", revision=new.hash, waves=len(waves))
    after = companions.upgrade(ctx, before=False)
    note_checks(ctx, "promote", [check, *after])
    bad: list[Check] = [c for c in after if c.status != "pass"]
    if bad:
        return StepResult(ok=False, reason="; ".join(f"{c.scope}: {c.detail}" for c in bad), checks=[check, *after])
    return StepResult(ok=True, checks=[check, *after])
