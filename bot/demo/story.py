"""The story ``upgradebot demo`` tells, stage by stage, each checking that its step happened.

1. inventory; 2. a preflight of the DRA objects before a Kubernetes upgrade; 3. a canary
requested by the platform engineer; 4. her own approval refused; 5. approved by the team
lead: the canary runs on one node; 6. verify on the canary node; 7. the promotion request,
approved; the rollout to the other nodes in two waves, each verified, with a progress bar
per wave; 8. verify on every node; 9. monitoring; 10. the
stability reports, with the schedule compressed (below); 11. a crashing image: the canary
fails and is rolled back automatically; 12. a DRA driver upgraded, its smoke test getting
a GPU through a ResourceClaim; 13. the list of runs. :func:`run` is ``upgradebot demo [--interactive]``; ``--interactive`` starts the
same world and leaves you at the console prompt.

The reports stage (:func:`run_reports`) moves kubesim's clock (which the engine and the
report scheduler read) through the monitoring window: a kubelet restart on a GPU node
early on, the event collector storing it, then 24 h and 48 h later the scheduled reports
fired by :meth:`bot.reports.wiring.Reports.run_due`. The kubelet's event expires from the
cluster after its 1-hour TTL long before the reports, and still shows in them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from bot.demo.world import (
    ALICE,
    BOB,
    CRASHING,
    DRA_NEW,
    DRA_TARGET,
    NEW,
    OLD,
    TARGET,
    DemoContext,
    demo_world,
    stage,
)
from bot.runtime import Runtime
from bot.settings import Settings
from handlers.run_views import gate_ref
from kubesim import KubeSim
from runbooks.cluster.resources import EVENTS, PODS
from runbooks.digests import promoted_image
from runbooks.engine.runs import Run, RunState

S = RunState
INCIDENT_NODE = "gpu-node2"


def plugin_images(ctx: DemoContext) -> dict[str, str]:
    """node -> image of its (not terminating) device plugin pod, read through the API."""
    with ctx.runtime.connect("kubesim") as cluster:
        pods = cluster.list_objects(PODS, namespace="kube-system")
    return {p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"] for p in pods
            if p["metadata"]["name"].startswith("nvidia-device-plugin-daemonset-")
            and not p["metadata"].get("deletionTimestamp")}


def choice(ctx: DemoContext, run: Run, action: str) -> str:
    """The number the console gave the ``action`` button of the run's open request."""
    assert run.gate is not None
    ref = gate_ref(run, run.gate)
    numbers = [n for n, c in ctx.chat.choices.items() if c.value == ref and c.action == action]
    return str(max(numbers)) if numbers else "0"


def newest(ctx: DemoContext) -> Run:
    return ctx.runtime.engine.runs(limit=1)[0]


def tell(ctx: DemoContext) -> None:
    engine = ctx.runtime.engine
    stage(ctx, 1, "inventory: what the cluster runs")
    said = ctx.type(ALICE, "/upgrade inventory")
    ctx.expect("Inventory of kubesim" in said and TARGET in said, "inventory shows the cluster and the plugin DaemonSet")

    stage(ctx, 2, "preflight: would Kubernetes 1.32 break the cluster's DRA objects?")
    said = ctx.type(ALICE, "/upgrade preflight target=1.32")
    ctx.expect("Nothing in the DRA objects checked stops an upgrade to 1.32" in said and "1.31 -> 1.32" in said,
               "preflight finds nothing in the DRA objects that stops an upgrade to 1.32")

    stage(ctx, 3, f"{ALICE} requests a canary of {NEW} on gpu-node1")
    ctx.type(ALICE, f"/upgrade canary {TARGET} image={NEW} node=gpu-node1")
    run = newest(ctx)
    ctx.run_id = run.id
    ctx.expect(run.state is S.AWAITING_APPROVAL and run.requester == ALICE, f"run {run.id} waits for approval")

    stage(ctx, 4, f"{ALICE} clicks Approve on her own request")
    said = ctx.type(ALICE, choice(ctx, run, "approve"))
    ctx.expect("another approver must approve" in said and engine.get(run.id).state is S.AWAITING_APPROVAL,
               "the requester's own approval is refused, nothing changed")

    stage(ctx, 5, f"{BOB} approves: the canary runs on gpu-node1 only")
    ctx.type(BOB, choice(ctx, run, "approve"))
    run = engine.get(run.id)
    images = plugin_images(ctx)
    ctx.say("  (the cluster now: " + ", ".join(f"{n} {i.rsplit(':', 1)[1]}" for n, i in sorted(images.items())) + ")")
    ctx.expect(run.state is S.AWAITING_PROMOTION, "the canary passed its checks; the promotion request is open")
    ctx.expect(images == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD},
               "only gpu-node1 runs the new image")

    stage(ctx, 6, "verify the canary node")
    said = ctx.type(ALICE, f"/upgrade verify {TARGET} node=gpu-node1")
    ctx.expect("all checks passed" in said, "verify on gpu-node1 passes")

    stage(ctx, 7, f"the promotion request, posted again by {ALICE} and approved by {BOB}")
    ctx.type(ALICE, f"/upgrade promote {run.id}")
    said = ctx.type(BOB, choice(ctx, engine.get(run.id), "approve"))
    run = engine.get(run.id)
    images = plugin_images(ctx)
    ctx.expect("Wave 1 of 2 ▰▰▰▰▰▰▰▰▰▰ 1/1 node" in said and "Wave 2 of 2 ▰▰▰▰▰▰▰▰▰▰ 1/1 node" in said,
               "the promotion went in two waves, each shown with its progress bar as it moved")
    ctx.expect(run.state is S.MONITORING, "promoted and verified on every node; the run is monitoring")
    promoted = promoted_image(NEW, run.progress, pin=True)  # images.pin_digest: the digest the canary verified
    ctx.expect(set(images.values()) == {promoted} and "@sha256:" in promoted and len(images) == 3,
               "every GPU node runs the new image, pinned to the digest the canary verified")

    stage(ctx, 8, "verify every node")
    said = ctx.type(ALICE, f"/upgrade verify {TARGET}")
    ctx.expect("all checks passed" in said, "verify on all nodes passes")

    stage(ctx, 9, "monitoring")
    said = ctx.type(ALICE, f"/upgrade status {run.id}")
    ctx.expect("monitoring" in said, "status shows the run monitoring until its stability reports")

    stage(ctx, 10, "stability reports after 24 h and 48 h (simulated clock)")
    try:
        demo_reports(ctx)
    except Exception as exc:  # a failing stage fails the story with its reason, not the demo with a traceback
        ctx.expect(False, f"the stability reports stage ran ({type(exc).__name__}: {exc})")
    if engine.get(run.id).state is S.MONITORING:
        ctx.type(ALICE, f"/upgrade close {run.id}")
    ctx.expect(engine.get(run.id).state is S.DONE, f"run {run.id} is done")

    stage(ctx, 11, f"a bad image: {CRASHING} on gpu-node2")
    ctx.type(ALICE, f"/upgrade canary {TARGET} image={CRASHING} node=gpu-node2")
    bad = newest(ctx)
    ctx.run_id = bad.id
    said = ctx.type(BOB, choice(ctx, bad, "approve"))
    bad = engine.get(bad.id)
    images = plugin_images(ctx)
    ctx.expect(bad.state is S.ROLLED_BACK and "rolling back automatically" in said,
               "the crash-looping canary was detected and rolled back automatically")
    ctx.expect(set(images.values()) == {promoted} and len(images) == 3, "every GPU node is back on the previous image")

    stage(ctx, 12, f"a DRA driver upgrade: {DRA_NEW} on gpu-node1, then every node")
    ctx.type(ALICE, f"/upgrade canary {DRA_TARGET} image={DRA_NEW} node=gpu-node1")
    dra_run = newest(ctx)
    ctx.run_id = dra_run.id
    ctx.type(BOB, choice(ctx, dra_run, "approve"))
    dra_run = engine.get(dra_run.id)
    claimed = [e for e in engine.audit(dra_run.id) if e.get("name") == "verify_canary.smoke-test"]
    ctx.expect(dra_run.state is S.AWAITING_PROMOTION and bool(claimed) and "through a claim" in claimed[0]["detail"],
               "the DRA driver canary passed its checks; its smoke test got a GPU through a ResourceClaim")
    ctx.type(BOB, choice(ctx, dra_run, "approve"))
    dra_run = engine.get(dra_run.id)
    if dra_run.state is S.MONITORING:
        ctx.type(ALICE, f"/upgrade close {dra_run.id}")
    ctx.expect(engine.get(dra_run.id).state is S.DONE, "the DRA driver runs the new image on every node; the run is done")

    stage(ctx, 13, "the runs")
    said = ctx.type(ALICE, "/upgrade runs")
    ctx.expect(run.id in said and bad.id in said and dra_run.id in said, "runs lists every run")


# ------------------------------------------------------------------ stage 10: the reports
@dataclass(frozen=True)
class Shown:
    """What the stage did, for its checks."""

    fired: list[tuple[str, str, str]]
    """``(run, after, outcome)`` of each report job fired."""
    expired: bool
    """The early event was gone from the cluster before the reports."""
    records: dict[str, dict[str, str]]
    """Each report's idempotency record in Redis."""
    state: RunState


def run_reports(runtime: Runtime, run_id: str, sim: KubeSim, *, say: Callable[[str], None] = print) -> Shown:
    """Drive run ``run_id`` (monitoring) through its 24 h and 48 h reports; what happened, for checks."""
    reports = runtime.reports
    if reports is None:
        raise RuntimeError("the demo policy schedules no stability reports (reports.after is empty)")
    after = runtime.policy.reports.after
    say(f"  (the reports are due {' and '.join(after)} after the promotion. The schedule is compressed: the demo "
        "moves kubesim's clock ahead, and the report scheduler reads that clock, so each report fires at once. "
        "Only the clock is moved: the event collector reads kubesim's events over the Kubernetes API, the schedule "
        "is recomputed from the runs in Redis, each post is claimed once in Redis with the leader's token.)")
    reports.scheduler.tick()
    reports.collectors.catch_up()
    sim.fault(kind="kubelet-restart", node=INCIDENT_NODE)
    sim.advance("10m")
    reports.collectors.catch_up()
    say(f"  (+10 min: the kubelet of {INCIDENT_NODE} restarted; the collector stored its event)")
    sim.advance("2h")
    with runtime.connect(runtime.engine.get(run_id).target.cluster or None) as cluster:
        left = [e for e in cluster.list_objects(EVENTS) if (e.get("involvedObject") or {}).get("name") == INCIDENT_NODE
                and e.get("reason") == "Starting"]
    say(f"  (+2 h: the cluster's 1-hour event TTL removed it: {len(left)} such event(s) left in the cluster)")
    fired: list[tuple[str, str, str]] = []
    for offset in after:
        sim.advance("24h")
        say(f"  (kubesim's clock moved 24 h ahead: the {offset} report is due)")
        fired += reports.run_due()
    records = {offset: runtime.store.report_record(run_id, offset) for offset in after}
    return Shown(fired=fired, expired=not left, records=records, state=runtime.engine.get(run_id).state)


def demo_reports(ctx: DemoContext) -> None:
    """Stage 9: both reports of ``ctx.run_id``, checked."""
    mark = ctx.transcript.mark()
    shown = run_reports(ctx.runtime, ctx.run_id, ctx.sim, say=ctx.say)
    said = ctx.transcript.since(mark)
    for offset in ctx.runtime.policy.reports.after:
        posted = [f for f in shown.fired if f[1] == offset] == [(ctx.run_id, offset, "posted")]
        ctx.expect(posted and "posted_at" in shown.records[offset] and f"Stability report ({offset}) of {ctx.run_id}" in said,
                   f"the {offset} stability report is posted once, in the run's thread and to on-call")
    ctx.expect(shown.expired and "KubeletRestart" in said,
               "an event the cluster already forgot (1 h TTL) still shows in the reports")
    ctx.expect(shown.state is RunState.DONE, "after the last (stable) report the run is done and its target free")


# ------------------------------------------------------------------ upgradebot demo
def run(args: argparse.Namespace, settings: Settings, out: TextIO) -> int:
    """``upgradebot demo [--interactive]``."""
    started = time.monotonic()
    with demo_world(settings, out) as ctx:
        if args.interactive:
            ctx.say(f"You are {ALICE} (a platform engineer); {BOB} approves. Try: inventory; canary {TARGET} "
                    f"image={NEW} node=gpu-node1; /as {BOB}; then the number of the Approve button.")
            ctx.chat.loop(prompt=sys.stdin.isatty())
            return 0
        tell(ctx)
    missing = [what for ok, what in ctx.results if not ok]
    seconds = time.monotonic() - started
    if missing:
        out.write(f"\ndemo: {len(missing)} expected step(s) did not happen: {'; '.join(missing)}\n")
        return 1
    out.write(f"\ndemo: all {len(ctx.results)} expected steps happened, in {seconds:.0f} s of real time.\n")
    return 0
