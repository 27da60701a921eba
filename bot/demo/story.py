"""The story ``upgradebot demo`` tells, stage by stage, each checking that its step happened.

1. inventory; 2. a canary requested by the platform engineer; 3. her own approval
refused; 4. approved by the team lead: the canary runs on one node; 5. verify on the
canary node; 6. the promotion request, approved; the rollout to every node; 7. verify on
every node; 8. monitoring; 9. the stability reports (issue 6: :data:`REPORTS_HOOK`, when
that module exists; otherwise the run is closed with ``close``); 10. a crashing image:
the canary fails and is rolled back automatically; 11. the list of runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from bot.demo.world import ALICE, BOB, CRASHING, NEW, OLD, TARGET, DemoContext, stage
from handlers.run_views import gate_ref
from runbooks.cluster.resources import PODS
from runbooks.engine.runs import Run, RunState

S = RunState
REPORTS_HOOK = ("bot.demo.reports", "demo_reports")
"""Issue 6 provides ``bot/demo/reports.py`` with ``demo_reports(ctx: DemoContext) -> None``: it moves
the simulated clock 24 h and 48 h on, and shows (and ``ctx.expect``s) the reports of ``ctx.run_id``."""


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

    stage(ctx, 2, f"{ALICE} requests a canary of {NEW} on gpu-node1")
    ctx.type(ALICE, f"/upgrade canary {TARGET} image={NEW} node=gpu-node1")
    run = newest(ctx)
    ctx.run_id = run.id
    ctx.expect(run.state is S.AWAITING_APPROVAL and run.requester == ALICE, f"run {run.id} waits for approval")

    stage(ctx, 3, f"{ALICE} clicks Approve on her own request")
    said = ctx.type(ALICE, choice(ctx, run, "approve"))
    ctx.expect("another approver must approve" in said and engine.get(run.id).state is S.AWAITING_APPROVAL,
               "the requester's own approval is refused, nothing changed")

    stage(ctx, 4, f"{BOB} approves: the canary runs on gpu-node1 only")
    ctx.type(BOB, choice(ctx, run, "approve"))
    run = engine.get(run.id)
    images = plugin_images(ctx)
    ctx.say("  (the cluster now: " + ", ".join(f"{n} {i.rsplit(':', 1)[1]}" for n, i in sorted(images.items())) + ")")
    ctx.expect(run.state is S.AWAITING_PROMOTION, "the canary passed its checks; the promotion request is open")
    ctx.expect(images == {"gpu-node1": NEW, "gpu-node2": OLD, "gpu-node3": OLD},
               "only gpu-node1 runs the new image")

    stage(ctx, 5, "verify the canary node")
    said = ctx.type(ALICE, f"/upgrade verify {TARGET} node=gpu-node1")
    ctx.expect("all checks passed" in said, "verify on gpu-node1 passes")

    stage(ctx, 6, f"the promotion request, posted again by {ALICE} and approved by {BOB}")
    ctx.type(ALICE, f"/upgrade promote {run.id}")
    ctx.type(BOB, choice(ctx, engine.get(run.id), "approve"))
    run = engine.get(run.id)
    images = plugin_images(ctx)
    ctx.expect(run.state is S.MONITORING, "promoted and verified on every node; the run is monitoring")
    ctx.expect(set(images.values()) == {NEW} and len(images) == 3, "every GPU node runs the new image")

    stage(ctx, 7, "verify every node")
    said = ctx.type(ALICE, f"/upgrade verify {TARGET}")
    ctx.expect("all checks passed" in said, "verify on all nodes passes")

    stage(ctx, 8, "monitoring")
    said = ctx.type(ALICE, f"/upgrade status {run.id}")
    ctx.expect("monitoring" in said, "status shows the run monitoring until its stability reports")

    stage(ctx, 9, "stability reports after 24 h and 48 h (simulated clock)")
    hook = reports_hook()
    if hook is not None:
        try:
            hook(ctx)
        except Exception as exc:  # the stage is another module's; its failure fails the story, not the demo
            ctx.expect(False, f"the stability reports stage ran ({type(exc).__name__}: {exc})")
    if engine.get(run.id).state is S.MONITORING:
        ctx.type(ALICE, f"/upgrade close {run.id}")
    ctx.expect(engine.get(run.id).state is S.DONE, f"run {run.id} is done")

    stage(ctx, 10, f"a bad image: {CRASHING} on gpu-node2")
    ctx.type(ALICE, f"/upgrade canary {TARGET} image={CRASHING} node=gpu-node2")
    bad = newest(ctx)
    ctx.run_id = bad.id
    said = ctx.type(BOB, choice(ctx, bad, "approve"))
    bad = engine.get(bad.id)
    images = plugin_images(ctx)
    ctx.expect(bad.state is S.ROLLED_BACK and "rolling back automatically" in said,
               "the crash-looping canary was detected and rolled back automatically")
    ctx.expect(set(images.values()) == {NEW} and len(images) == 3, "every GPU node is back on the previous image")

    stage(ctx, 11, "the runs")
    said = ctx.type(ALICE, "/upgrade runs")
    ctx.expect(run.id in said and bad.id in said, "runs lists both runs")


def reports_hook() -> Callable[[DemoContext], None] | None:
    """Issue 6's ``demo_reports`` when its module exists, else None (the stage then only closes the run)."""
    module_name, function = REPORTS_HOOK
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    hook: Callable[[DemoContext], None] = getattr(module, function)
    return hook
