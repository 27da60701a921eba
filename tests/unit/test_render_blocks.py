"""Block Kit rendering: Slack's limits kept, text escaped, buttons as actions."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.slack.blocks import (
    MAX_BLOCKS,
    MAX_SECTION,
    all_blocks,
    escape,
    render_message,
    render_reply,
)
from bot.text import render_reply as render_text_reply
from handlers.inventory import summarize
from handlers.replies import Item, Message, Reply, Table, user_ref
from handlers.run_views import APPROVE, REJECT, approval_buttons
from runbooks.inventory import (
    DaemonSet,
    DraInfo,
    Finding,
    Inventory,
    KubernetesInfo,
    Node,
    PluginPod,
)


def check_limits(payload: dict[str, Any]) -> None:
    """What Slack refuses: > 50 blocks, section text > 3,000, > 10 fields, a field > 2,000."""
    blocks = payload["blocks"]
    assert len(blocks) <= MAX_BLOCKS
    assert len(payload["text"]) <= 3000
    for block in blocks:
        if block["type"] == "section":
            if "text" in block:
                assert 0 < len(block["text"]["text"]) <= MAX_SECTION
            assert len(block.get("fields", [])) <= 10
            assert all(len(f["text"]) <= 2000 for f in block.get("fields", []))
        if block["type"] == "actions":
            assert len(block["elements"]) <= 25


def big_reply() -> Reply:
    rows = [[f"gpu-node-{i:05d}", "yes", "-", "8/8", "yes", "nvidia.com/gpu:NoSchedule"] for i in range(2000)]
    table = Table(header=["NAME", "READY", "SCHED", "CAP/ALLOC", "GPU-HW", "TAINTS"], rows=rows, note="… 3000 more")
    return Reply(
        title="Inventory of prod", text="x" * 7000 + "\n" + "line\n" * 800,
        fields=[Item(label=f"field {i}", value="v" * 2500) for i in range(35)], table=table,
        thread=[Message(title="Nodes", table=table), Message(title="Findings", text="FAIL it broke\n" * 900)],
    )


def test_large_reply_is_summarized_within_limits() -> None:
    """A reply far over every limit: each payload fits, and the overflow moves to the thread."""
    rendered = render_reply(big_reply(), prefix="/upgrade")
    for payload in [rendered.main, *rendered.thread]:
        check_limits(payload)
    assert len(rendered.main["blocks"]) == MAX_BLOCKS
    assert "more block(s) in the thread" in rendered.main["blocks"][-1]["text"]["text"]
    text = "".join(b.get("text", {}).get("text", "") for b in all_blocks(rendered.thread))
    assert "gpu-node-01999" in text and "it broke" in text


def test_ephemeral_reply_is_cut_short() -> None:
    """An ephemeral reply has no thread: its items are appended and the whole cut at 50 blocks."""
    reply = big_reply().model_copy(update={"ephemeral": True})
    rendered = render_reply(reply, prefix="/upgrade")
    check_limits(rendered.main)
    assert rendered.thread == []
    assert "cut short" in rendered.main["blocks"][-1]["text"]["text"]


def test_escaping_keeps_references() -> None:
    """&, < and > are escaped; user, channel and group references stay mentions."""
    assert escape(f"{user_ref('U1')} in <#C2> & <S3> <!subteam^S4> <b>") == (
        "<@U1> in <#C2> &amp; &lt;S3&gt; <!subteam^S4> &lt;b&gt;"
    )


def test_usage_lines_are_code_with_prefix() -> None:
    """Usage lines carry the slash command; a summary stays outside the code span."""
    reply = Reply.error("unknown verb 'x'", usage=["help [verb] — this list", "inventory [cluster=<context>]"])
    text = render_reply(reply, prefix="/upgrade").main["blocks"][-1]["text"]["text"]
    assert "`/upgrade help [verb]` — this list" in text
    assert "`/upgrade inventory [cluster=&lt;context&gt;]`" in text


def test_buttons_become_an_actions_block() -> None:
    """Approve and Reject are buttons with their action ids, value and styles."""
    payload = render_message(Message(title="Approve the canary?", buttons=approval_buttons("run-1")))[0]
    actions = next(b for b in payload["blocks"] if b["type"] == "actions")["elements"]
    assert [(a["action_id"], a["value"], a.get("style")) for a in actions] == [
        (APPROVE, "run-1", "primary"), (REJECT, "run-1", "danger"),
    ]


def test_console_rendering() -> None:
    """The console shows references plainly, buttons as numbered choices, the thread indented."""
    reply = Reply(
        title="Canary requested", text=f"by {user_ref('U0ANA')}", fields=[Item(label="Target", value="ns/ds")],
        thread=[Message(text="Approve?", buttons=approval_buttons("run-1"))], usage=["status <run>"],
    )
    out = render_text_reply(reply)
    assert "by @U0ANA" in out and "Target: ns/ds" in out
    assert "  | [1] Approve  [2] Reject" in out
    assert "  /upgrade status <run>" in out


@settings(max_examples=60, deadline=None)
@given(
    st.text(max_size=9000), st.lists(st.text(max_size=2500), max_size=30),
    st.lists(st.lists(st.text(max_size=60), min_size=2, max_size=2), max_size=300),
)
def test_any_reply_fits(text: str, values: list[str], rows: list[list[str]]) -> None:
    """Whatever the sizes and characters, every payload keeps Slack's limits."""
    reply = Reply(title=text[:200] or None, text=text, fields=[Item(label="f", value=v) for v in values],
                  table=Table(header=["A", "B"], rows=rows) if rows else None, thread=[Message(text=text)])
    rendered = render_reply(reply, prefix="/upgrade")
    for payload in [rendered.main, *rendered.thread]:
        check_limits(payload)


def test_large_inventory_is_summarized() -> None:
    """5,000 nodes and pods and 60 findings: a short summary, the details in the thread, all within limits."""
    nodes = [Node(name=f"gpu-{i:05d}", ready=i % 700 != 0, unschedulable=False, gpu_hardware=True,
                  capacity={"nvidia.com/gpu": 8}, allocatable={"nvidia.com/gpu": 8}) for i in range(5000)]
    pods = [PluginPod(name=f"plugin-{i}", node=f"gpu-{i:05d}", phase="Running", ready=True, restarts=i % 900 == 0,
                      crashloop=False, images={"plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}) for i in range(5000)]
    ds = DaemonSet(namespace="kube-system", name="nvidia-device-plugin-daemonset", kind="device-plugin",
                   images={"plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}, update_strategy="RollingUpdate",
                   desired=5000, current=5000, updated=5000, ready=5000, available=5000, pods=pods)
    findings = [Finding(severity="fail" if i % 3 == 0 else "warn", code="x", message=f"problem {i} " + "x" * 200,
                        next_step="fix it " + "y" * 200, object=f"node/gpu-{i:05d}") for i in range(60)]
    inventory = Inventory(
        taken_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), context="prod", server="https://k8s", gpu_resources=["nvidia.com/gpu"],
        kubernetes=KubernetesInfo(version="v1.31.4", minor=31), dra=DraInfo(feature_gate="enabled", stage="BETA"),
        nodes=nodes, daemonsets=[ds], findings=findings,
    )
    reply = summarize(inventory)
    assert reply.tone == "error" and "20 failing, 40 warning" in reply.text
    rendered = render_reply(reply, prefix="/upgrade")
    for payload in [rendered.main, *rendered.thread]:
        check_limits(payload)
    assert len(rendered.main["blocks"]) < 10
    thread = "\n".join(b.get("text", {}).get("text", "") + "".join(e.get("text", "") for e in b.get("elements", []))
                       for b in all_blocks(rendered.thread))
    assert "problem 59" in thread and "gpu-04900" in thread and "more nodes" in thread


def test_large_preflight_and_migration_replies_fit() -> None:
    """A preflight with 120 findings and dry runs, and a migration with a long plan: within Slack's limits."""
    from handlers.migrate import summarize as migration_reply
    from handlers.preflight import summarize as preflight_reply
    from runbooks.dra.migrating import ClaimPlan, Migration
    from runbooks.dra.preflight import DryRun, Preflight, PreflightFinding, PreflightNote

    moment = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    findings = [PreflightFinding(severity="fail" if i % 2 else "warn", subject=f"Pod ml-team/p{i}", origin="cluster",
                                 code="pod-claim-source", problem="x" * 300, fix="y" * 300, source="https://k8s.io")
                for i in range(120)]
    runs = [DryRun(subject=f"DeviceClass c{i}", origin=f"f{i}.yaml", accepted=i % 3 != 0, answer="z" * 500)
            for i in range(60)]
    result = Preflight(context="prod", server="https://k8s", current="v1.30.4", current_minor=30, target_minor=32,
                       steps=[31, 32], checked=180, findings=findings, dry_runs=runs,
                       notes=[PreflightNote(release="1.31", text="n" * 400, source="https://k8s.io")], taken_at=moment)
    migration = Migration(context="prod", kind="Deployment", namespace="ml-team", name="trainer", version="v1",
                          device_class="gpu.example.com",
                          claims=[ClaimPlan(container=f"c{i}", resource="nvidia.com/gpu", count=2,
                                            template=f"trainer-c{i}-gpu", claim=f"c{i}-gpu") for i in range(30)],
                          objects=[{"kind": "ConfigMap", "data": {f"k{i}": "v" * 200 for i in range(60)}}],
                          dry_runs=runs[:5], taken_at=moment)
    for reply in (preflight_reply(result), migration_reply(migration)):
        rendered = render_reply(reply, prefix="/upgrade")
        for payload in [rendered.main, *rendered.thread]:
            check_limits(payload)


def test_files_print_in_text_and_go_inline_where_nothing_can_be_uploaded() -> None:
    """A reply's files: the console and the shell print them whole after the reply; an
    ephemeral Slack answer (nothing can be uploaded there) carries them as code sections."""
    from handlers.replies import Attachment

    content = "".join(f"line {i}: {'x' * 60}\n" for i in range(80))
    reply = Reply(title="Plan", text="see the file", files=[Attachment(filename="plan.yaml", title="To apply",
                                                                         content=content)])
    text = render_text_reply(reply, prefix="upgradebot")
    assert "--- plan.yaml: To apply\n" + content + "--- end of plan.yaml\n" in text
    inline = render_reply(reply.model_copy(update={"ephemeral": True}).files_inline(), prefix="/upgrade").main
    sections = [b["text"]["text"] for b in inline["blocks"] if b["type"] == "section"]
    assert "line 79" in "".join(sections) and all(len(s) <= MAX_SECTION for s in sections)
    assert reply.files_inline().files == [] and render_reply(reply, prefix="/upgrade").thread == []


def test_thread_items_share_a_message_while_they_fit() -> None:
    """Issue 39: an inventory's thread items (findings, nodes, node stack, DaemonSets) were a
    ``chat.postMessage`` each, eight calls an answer where Slack allows about one message a
    second in a channel. Whole items now share a thread message, a divider between them, in
    order, within 50 blocks and :data:`PACK_CHARS`; an item that does not fit starts the next."""
    from bot.slack.blocks import PACK_CHARS
    from tests.fakeslack import message_problems

    small = [Message(title=f"Item {i}", text=f"line of item {i}", table=Table(header=["A"], rows=[["x"]]))
             for i in range(7)]
    rendered = render_reply(Reply(title="Inventory", text="summary", thread=small), prefix="/upgrade")
    assert len(rendered.thread) == 1, [p["text"] for p in rendered.thread]
    (packed,) = rendered.thread
    titles = [b["text"]["text"] for b in packed["blocks"] if b["type"] == "section" and "*Item" in b["text"]["text"]]
    assert [t.strip("*") for t in titles] == [f"Item {i}" for i in range(7)]
    assert sum(b["type"] == "divider" for b in packed["blocks"]) == 6
    assert packed["text"].startswith("Item 0: line of item 0 · Item 1")
    assert not message_problems({"channel": "C1", **packed}), message_problems({"channel": "C1", **packed})

    big = "y" * 2900
    large = [Message(title=f"Big {i}", text="\n".join([big] * 3)) for i in range(4)]  # ~8,700 characters each
    rendered = render_reply(Reply(title="Report", text="summary", thread=large), prefix="/upgrade")
    assert len(rendered.thread) == 4, "two would pass Slack's ~13,200 characters: each goes alone"
    many = [Message(title=f"T{i}", fields=[Item(label=f"k{j}", value="v") for j in range(10)]) for i in range(30)]
    rendered = render_reply(Reply(title="Many", text="summary", thread=many), prefix="/upgrade")
    for payload in rendered.thread:
        check_limits(payload)
        assert len(payload["blocks"]) <= 50
    assert sum(len(p["blocks"]) for p in rendered.thread) == 30 * 2 + 30 - len(rendered.thread)
    assert all(sum(len(str(b)) for b in p["blocks"]) < PACK_CHARS * 2 for p in rendered.thread)
