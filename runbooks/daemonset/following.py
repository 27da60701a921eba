"""Following a rollout node by node: the controller's (RollingUpdate) or our own (OnDelete).

:func:`follow_rollout` watches pods move to a revision, records each node as its new pod
becomes Ready, fails fast when a new pod crash-loops, cannot pull its image or cannot be
scheduled (the scheduler's ``FailedScheduling``: waiting does not make a node larger), and gives up when no node has moved
for ``settings.ready_timeout`` (so a long rollout is not cut short, a stuck one is).
:func:`replace_node_by_node` does what the controller would for an OnDelete DaemonSet:
delete one old pod, wait for its replacement to be Ready, go on to the next node.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from runbooks.daemonset.checks import listing
from runbooks.daemonset.evidence import PULL_ERRORS
from runbooks.daemonset.observing import Following, Snapshot, daemonset_done, wait_for
from runbooks.daemonset.patching import delete_pod, delete_pods
from runbooks.engine.recording import note
from runbooks.engine.steps import StepContext
from runbooks.errors import plural


@dataclass
class Outcome:
    """Where a rollout ended: the nodes still behind, and why it stopped if it did."""

    snapshot: Snapshot
    behind: list[str] = field(default_factory=list)
    problem: str = ""
    paused: bool = False
    """Someone paused the run: no new node was started, those in flight finished."""
    failing: list[str] = field(default_factory=list)
    """The nodes whose new pod failed (crash-looping, or never Ready once its old pod was deleted)."""

    @property
    def ok(self) -> bool:
        return not self.behind and not self.problem and not self.paused


def _crashlooping(snap: Snapshot, revision_hash: str) -> list[str]:
    return [p.node for p in snap.pods if p.revision_hash == revision_hash and not p.deleting and p.crashloop]


def _pull_failing(snap: Snapshot, revision_hash: str) -> list[str]:
    """Nodes whose new pod cannot pull its image (ErrImagePull, ImagePullBackOff, InvalidImageName):
    waiting longer does not make a tag exist."""
    return [p.node for p in snap.pods if p.revision_hash == revision_hash and not p.deleting
            and p.waiting_reason in PULL_ERRORS]


def _pull_problem(snap: Snapshot, nodes: list[str]) -> str:
    reason = next((p.waiting_reason for n in nodes if (p := snap.pod_on(n)) is not None and p.waiting_reason), "")
    return f"the new pods on {listing(nodes)} cannot pull their image ({reason})"


def _unschedulable(snap: Snapshot, revision_hash: str) -> list[str]:
    """Nodes whose new pod the scheduler cannot place (``PodScheduled=False``, ``Unschedulable``)."""
    return [p.node for p in snap.pods if p.revision_hash == revision_hash and not p.deleting
            and p.unschedulable is not None]


def _unschedulable_problem(snap: Snapshot, nodes: list[str]) -> str:
    said = next((p.unschedulable for n in nodes if (p := snap.pod_on(n)) is not None and p.unschedulable), "")
    return f"the new pods on {listing(nodes)} cannot be scheduled: the scheduler said: {said}"


def _ready(ctx: StepContext, step: str, nodes: list[str], revision_hash: str) -> None:
    """One entry for the nodes found on ``revision_hash`` and Ready in one look (a node alone,
    or a whole batch of a rollout): the trail of a 5,000-node promotion is a line per look,
    with every node in its evidence, not 5,000 lines."""
    if len(nodes) == 1:
        note(ctx, step, "ok", f"{nodes[0]} runs revision {revision_hash} and is Ready", nodes=nodes)
    else:
        note(ctx, step, "ok", f"{plural(len(nodes), 'node')} run revision {revision_hash} and are Ready: "
             f"{listing(nodes)}", nodes=nodes)


def rolled_out(snap: Snapshot) -> bool:
    """The controller counts every node that should run the DaemonSet as updated and
    available (having seen the current spec). The pods alone cannot say so: between the
    deletion of a node's old pod and the creation of its new one, the node has no pod at
    all, and a look in that moment would find nobody behind."""
    return snap.settled and daemonset_done(snap.ds)


def follow_rollout(ctx: StepContext, revision_hash: str, *, step: str, before: Snapshot | None = None) -> Outcome:
    """Wait until every node's pod is a Ready pod of ``revision_hash``, recording each node.

    ``before``: the DaemonSet as the step found it, before it changed anything; the nodes on
    ``revision_hash`` then are those *already* on it, and every other node is recorded as it
    comes. Without it the first look decides, and a controller quick enough to move nodes
    between the step's change and that look (``maxUnavailable: 100%``) had them all
    recorded as already there, as if the step had not moved them."""
    target = ctx.run.target
    with Following(ctx.cluster, target.namespace, target.name, watches=ctx.watches) as following:
        return _follow_rollout(ctx, following, revision_hash, step=step, before=before)


def _follow_rollout(ctx: StepContext, following: Following, revision_hash: str, *, step: str,
                    before: Snapshot | None) -> Outcome:
    settings, clock = ctx.settings, ctx.clock
    snap = following.snapshot()
    start = before if before is not None else snap
    late = set(start.behind(revision_hash))
    done = {n for n in start.nodes if n not in late}
    if done:
        note(ctx, step, "info", f"{plural(len(done), 'node')} already on revision {revision_hash}: {listing(sorted(done))}",
             nodes=sorted(done))
    moved_at = clock.now()
    while True:
        behind = snap.behind(revision_hash)
        fresh = sorted(set(snap.nodes) - set(behind) - done)
        if fresh:
            _ready(ctx, step, fresh, revision_hash)
            done.update(fresh)
            moved_at = clock.now()
        if not behind and rolled_out(snap):
            return Outcome(snap)
        looping = _crashlooping(snap, revision_hash)
        if looping:
            return Outcome(snap, behind, f"the new pods on {listing(looping)} are crash-looping")
        pulling = _pull_failing(snap, revision_hash)
        if pulling:
            return Outcome(snap, behind, _pull_problem(snap, pulling), failing=pulling)
        stuck = _unschedulable(snap, revision_hash)
        if stuck:
            return Outcome(snap, behind, _unschedulable_problem(snap, stuck), failing=stuck)
        if clock.now() - moved_at > dt.timedelta(seconds=settings.ready_timeout):
            return Outcome(snap, behind, f"no node moved for {settings.ready_timeout:g}s")
        following.wait(clock, settings.poll_interval)
        snap = following.snapshot()


def replace_node_by_node(ctx: StepContext, revision_hash: str, *, step: str) -> Outcome:
    """For OnDelete: replace the pods not on ``revision_hash`` one node at a time."""
    target = ctx.run.target
    with Following(ctx.cluster, target.namespace, target.name, watches=ctx.watches) as following:
        return _replace_node_by_node(ctx, following, revision_hash, step=step)


def _replace_node_by_node(ctx: StepContext, following: Following, revision_hash: str, *, step: str) -> Outcome:
    settings = ctx.settings
    snap = following.snapshot()
    for node in snap.behind(revision_hash):
        pod = snap.pod_on(node)
        if pod is not None and pod.revision_hash != revision_hash:
            delete_pod(ctx, pod, step=f"{step}.delete-pod", why=f"revision {pod.revision_hash} -> {revision_hash}")

        def ready(node: str = node) -> Snapshot | None:
            current = following.snapshot()
            return current if node not in current.behind(revision_hash, [node]) or _crashlooping(current, revision_hash) \
                or _pull_failing(current, revision_hash) or _unschedulable(current, revision_hash) else None

        current = wait_for(ctx.clock, timeout=settings.ready_timeout, interval=settings.poll_interval, probe=ready,
                           pause=lambda seconds: following.wait(ctx.clock, seconds))
        snap = current or following.snapshot()
        if current is not None and _pull_failing(current, revision_hash):
            return Outcome(snap, snap.behind(revision_hash), _pull_problem(current, [node]), failing=[node])
        if current is not None and _unschedulable(current, revision_hash):
            return Outcome(snap, snap.behind(revision_hash), _unschedulable_problem(current, [node]), failing=[node])
        if current is None or _crashlooping(current, revision_hash):
            why = "is crash-looping" if current is not None else f"was not Ready in {settings.ready_timeout:g}s"
            return Outcome(snap, snap.behind(revision_hash), f"the new pod on {node} {why}")
        _ready(ctx, step, [node], revision_hash)
    return Outcome(snap, snap.behind(revision_hash))


def replace_nodes(ctx: StepContext, nodes: list[str], revision_hash: str, *, at_once: int, step: str,
                  moved: Callable[[int], None] = lambda count: None,
                  prepare: Callable[[list[str]], str] = lambda batch: "") -> Outcome:
    """Move ``nodes`` (and only them) to ``revision_hash``: delete their old pods so that at
    most ``at_once`` of the DaemonSet's pods are unavailable at a time (those unavailable
    for other reasons count, as they do for the controller), record each node as its new
    pod becomes Ready. Stops at a crash-looping new pod, when no node moved for
    ``settings.ready_timeout``, or (``paused``) when the run is paused, once the pods in
    flight are Ready. ``moved(count)`` hears how many of ``nodes`` are done, when it grows;
    ``prepare(batch)`` is called before the old pods of ``batch`` are deleted (a drain) and
    stops the replacement with the problem it returns, if any.

    The pods come from a watch cache (:class:`Following`); a pod this call deleted counts as
    in flight until the cache shows it going, so a cache a moment behind never lets more than
    ``at_once`` pods be unavailable."""
    target = ctx.run.target
    with Following(ctx.cluster, target.namespace, target.name, watches=ctx.watches) as following:
        return _replace_nodes(ctx, following, nodes, revision_hash, at_once=at_once, step=step, moved=moved,
                              prepare=prepare)


def _replace_nodes(ctx: StepContext, following: Following, nodes: list[str], revision_hash: str, *, at_once: int,
                   step: str, moved: Callable[[int], None], prepare: Callable[[list[str]], str]) -> Outcome:
    settings, clock = ctx.settings, ctx.clock
    wanted = set(nodes)
    done: set[str] = set()
    deleted: dict[str, str | None] = {}
    """node -> uid of the old pod this call deleted, until the cache shows it deleting or gone."""
    moved_at = clock.now()
    while True:
        snap = following.snapshot()
        for node, uid in list(deleted.items()):
            pod = snap.pod_on(node)
            if pod is None or pod.deleting or pod.uid != uid:
                del deleted[node]
        behind = snap.behind(revision_hash, nodes)
        fresh = sorted(wanted - set(behind) - done)
        if fresh:
            _ready(ctx, step, fresh, revision_hash)
            done.update(fresh)
            moved_at = clock.now()
            moved(len(done))
        if not behind:
            return Outcome(snap)
        looping = [n for n in _crashlooping(snap, revision_hash) if n in wanted]
        if looping:
            return Outcome(snap, behind, f"the new pods on {listing(looping)} are crash-looping", failing=looping)
        pulling = [n for n in _pull_failing(snap, revision_hash) if n in wanted]
        if pulling:
            return Outcome(snap, behind, _pull_problem(snap, pulling), failing=pulling)
        stuck = [n for n in _unschedulable(snap, revision_hash) if n in wanted]
        if stuck:
            return Outcome(snap, behind, _unschedulable_problem(snap, stuck), failing=stuck)
        old = [n for n in behind if (p := snap.pod_on(n)) is not None and not p.deleting and p.revision_hash != revision_hash
               and n not in deleted]
        replacing = set(old)
        in_flight = [n for n in behind if n not in replacing]
        if not in_flight and ctx.paused():
            return Outcome(snap, behind, paused=True)
        unavailable = sum(1 for n in snap.nodes if n not in wanted and _unavailable(snap, n)) + len(in_flight)
        room = at_once - unavailable
        if room > 0 and old and not ctx.paused():
            problem = prepare(old[:room])
            if problem:
                return Outcome(snap, behind, problem)
            batch = [pod for node in old[:room] if (pod := snap.pod_on(node)) is not None]
            revisions = sorted({pod.revision_hash or "?" for pod in batch})
            for pod in delete_pods(ctx, batch, step=f"{step}.delete-pod",
                                   why=f"revision {', '.join(revisions)} -> {revision_hash}"):
                deleted[pod.node] = pod.uid
            moved_at = clock.now()
        if clock.now() - moved_at > dt.timedelta(seconds=settings.ready_timeout):
            return Outcome(snap, behind, f"no node moved for {settings.ready_timeout:g}s", failing=in_flight)
        following.wait(clock, settings.poll_interval)


def _unavailable(snap: Snapshot, node: str) -> bool:
    pod = snap.pod_on(node)
    return pod is None or pod.deleting or not (pod.phase == "Running" and pod.ready)
