"""``/upgrade quarantine`` and ``/upgrade release`` from Slack end to end (issue 61, item 5): the
request posts its plan (the label, the affinity term, OnDelete, the pods using the node's GPUs) in
the run's thread, a second person's click approves it, the thread tells the workloads on the node
and the other nodes untouched; the release, approved the same way, gives the node back. Every
message is Block Kit the fake Slack validated."""

from __future__ import annotations

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import eventually, posted_ts, roots, texts, thread_as_text
from tests.support import Kubectl

TARGET = "kube-system/nvidia-device-plugin-daemonset"


def _approve(bot: RunBot, word: str) -> str:
    """The newest root message (the run just requested), its request approved by U0LEAD's click."""
    root = eventually(lambda: [c for c in roots(bot.fake) if word in texts(c)], f"the {word} run's root message")
    root_ts = posted_ts(root[-1])  # type: ignore[index]
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    return root_ts


def test_quarantine_and_release_from_slack(run_bot: RunBot) -> None:
    bot = run_bot
    assert bot.kubeconfig is not None
    kubectl = Kubectl(bot.kubeconfig)
    bot.slack.command(f"quarantine {TARGET} node=gpu-node2", user="U0ANA")
    root_ts = _approve(bot, "Quarantine r-")
    [run] = bot.runtime.engine.runs()
    bot.wait_state(run.id, RunState.DONE)
    eventually(bot.idle, "everything sent")
    said = "\n".join(thread_as_text(bot.fake, root_ts))
    assert "Quarantine request" in said and "DoesNotExist" in said and "updateStrategy OnDelete" in said, said
    assert "Pods using the node's GPUs" in said and "ml-team/trainer-1" in said, said
    assert "Other nodes' plugin pods not restarted" in said, said
    pods = kubectl.json("get", "pods", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-node1", "gpu-node3"]

    bot.slack.command(f"release {TARGET} node=gpu-node2", user="U0ANA")
    release_ts = _approve(bot, "Release r-")
    released = next(r for r in bot.runtime.engine.runs() if r.id != run.id)
    bot.wait_state(released.id, RunState.DONE)
    eventually(bot.idle, "everything sent")
    said = "\n".join(thread_as_text(bot.fake, release_ts))
    assert "Release request" in said and "uncordon it" in said, said
    assert "Plugin pod Running and Ready on the node again" in said, said
    assert not kubectl.json("get", "node", "gpu-node2")["spec"].get("unschedulable")
