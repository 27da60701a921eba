"""Issue 60 from Slack end to end: an operator-native run on the ``gpu-operator`` scenario (kubesim's GPU
operator reconcile) requested with ``/upgrade canary`` of the DaemonSet the operator renders, the policy's
target saying ``owner: clusterpolicy/cluster-policy``; the canary approved by a second person's click, then
its promotion, then a rollback. Every step the engine recorded in the run's audit is in the thread (the root
message and its replies as the fake Slack recorded them, each as last edited), in the audit's order, and the
request shows the ClusterPolicy's diff."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.e2e.conftest import RunBot, served_bot
from tests.e2e.runs_support import (
    RUN_POLICY,
    eventually,
    posted_ts,
    roots,
    texts,
    thread,
    thread_as_text,
)
from tests.fakeslack import FakeSlack
from tests.shell_support import in_process
from tests.support import Kubectl

S = RunState
NS, DS = "gpu-operator", "nvidia-device-plugin-daemonset"
RUNNING, NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.20.0", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
CANARY = f"canary {NS}/{DS} image={NEW} node=gpu-node1"
POLICY = Policy.model_validate({**RUN_POLICY, "reports": {"after": ["24h"]},  # monitoring: the rollback's turn
                                "targets": [{"namespace": NS, "name": DS, "owner": "clusterpolicy/cluster-policy"}]})
HEADINGS = {"precheck": "Pre-checks on gpu-node1", "canary": "Canary on gpu-node1",
            "verify_canary": "Verify the canary on gpu-node1", "promote": "Promotion", "verify_all": "Verify every node",
            "rollback": "Rollback"}
"""The title of each step's message in the thread (the test's own words for the engine's steps)."""
ROW_MARKS = ("✅", "❌", "❔", "🔹", "⏭️", "⏳")
SHOWN_ELSEWHERE = ("transition", "gate", "decision")
"""Entries the root message (each change of state) and the requests' own messages show."""


@pytest.fixture
def op_bot(fake_slack: FakeSlack, redis_url: str) -> Iterator[RunBot]:
    with served_bot(fake_slack, redis_url, scenario="gpu-operator", k8s_version="1.31", policy=POLICY) as bot:
        yield bot


def step_of(name: str) -> str:
    head, _, rest = name.partition(".")
    return "precheck" if head == "canary" and rest.startswith("precheck") else head


def message_of(thread_text: Sequence[str], step: str) -> tuple[int, str]:
    found = [(i, m) for i, m in enumerate(thread_text) if m.split("\n", 1)[0].lstrip(":abcdefghijklmnopqrstuvwxyz_ ")
             .startswith(f"*{HEADINGS[step]}:")]
    assert len(found) == 1, (step, thread_text)
    return found[0]


def assert_every_step_in_thread(audit: list[dict[str, Any]], thread_text: Sequence[str]) -> None:
    """Each step the audit records has its message in the thread, in the audit's order; in it one row per
    check (entries repeated per node or pod in one row that counts them), each with its latest evidence."""
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in audit:
        if entry["kind"] in SHOWN_ELSEWHERE:
            continue
        step = step_of(entry["name"])
        if entry["kind"] == "step" and entry["name"] == step:  # the step's conclusion: its message's title
            steps.setdefault(step, {})
            continue
        steps.setdefault(step, {})[entry["name"].rsplit(".", 1)[-1]] = entry
    where = [message_of(thread_text, step)[0] for step in steps]
    assert where == sorted(where), (list(steps), where)
    for step, checks in steps.items():
        _, message = message_of(thread_text, step)
        rows = [line for line in message.splitlines() if line.startswith(ROW_MARKS)]
        assert len(rows) == len(checks), (step, sorted(checks), rows)
        evidence = [str(last["detail"]).split("\n", 1)[0][:60].lower() for last in checks.values()]
        order = [next((i for i, row in enumerate(rows) if said in row.lower()), -1) for said in evidence]
        assert order == sorted(order) and -1 not in order, (step, evidence, rows)  # every one passed: audit order
        for key in checks:
            repeated = sum(1 for e in audit if e["kind"] not in SHOWN_ELSEWHERE and step_of(e["name"]) == step
                           and e["name"].rsplit(".", 1)[-1] == key)
            if repeated > 1:  # one per node or pod: the row counts them
                assert any(f"({repeated} " in row for row in rows), (step, key, repeated, rows)


def test_operator_native_run_every_step_in_the_thread(op_bot: RunBot, redis_url: str, tmp_path: Path) -> None:
    bot = op_bot
    assert bot.kubeconfig is not None
    kubectl = Kubectl(bot.kubeconfig)
    before = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["spec"]
    bot.slack.command(CANARY, user="U0ANA")
    found = eventually(lambda: roots(bot.fake), "the root message")
    assert isinstance(found, list) and len(found) == 1
    root_ts = posted_ts(found[0])
    (run,) = bot.runtime.engine.runs()
    gate_ts, value = bot.slack.gate(root_ts)
    (request,) = [c for c in thread(bot.fake, root_ts) if posted_ts(c) == gate_ts]
    asked = texts(request)
    assert "ClusterPolicy/cluster-policy" in asked, asked
    assert "- spec.devicePlugin.version: v0.20.0\n+ spec.devicePlugin.version: v0.19.3" in asked, asked
    assert "- spec.daemonsets.updateStrategy: RollingUpdate\n+ spec.daemonsets.updateStrategy: OnDelete" in asked
    bot.slack.click("approve", value, user="U0CAT", message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run.id, S.AWAITING_PROMOTION)
    promotion_ts, promotion = bot.slack.gate(root_ts, 2)
    bot.slack.click("approve", promotion, user="U0LEAD", message_ts=promotion_ts, thread_ts=root_ts)
    bot.wait_state(run.id, S.MONITORING)
    eventually(bot.idle, "the promotion's messages sent")
    spec = kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["spec"]
    assert spec["devicePlugin"]["version"] == "v0.19.3" and spec["daemonsets"] == before["daemonsets"]
    promoted = bot.runtime.engine.audit(run.id)
    assert [e["name"] for e in promoted if e["kind"] == "mutation"] == [
        "canary.clusterpolicy", "canary.delete-pod", "promote.node.delete-pod", "promote.node.delete-pod",
        "promote.clusterpolicy"]
    names = [e["name"] for e in promoted]
    assert names.index("canary.clusterpolicy") < names.index("canary.rendered") < names.index("canary.delete-pod"), \
        "the wait for the operator's render is a step of the audit, between the write and the pod's replacement"
    at_promotion = thread_as_text(bot.fake, root_ts)
    assert_every_step_in_thread(promoted, at_promotion)
    saved = next(line for line in message_of(at_promotion, "canary")[1].splitlines() if "Saved what a rollback" in line)
    assert "ClusterPolicy/cluster-policy's fields" in saved, saved

    bot.slack.command(f"rollback {run.id} reason=testing", user="U0ANA")
    rollback_ts, rollback = bot.slack.gate(root_ts, 3)
    (asked_back,) = [c for c in thread(bot.fake, root_ts) if posted_ts(c) == rollback_ts]
    assert "ClusterPolicy/cluster-policy" in texts(asked_back) and "template" not in texts(asked_back), \
        "the rollback request says what it puts back: the ClusterPolicy's fields"
    bot.slack.click("approve", rollback, user="U0CAT", message_ts=rollback_ts, thread_ts=root_ts)
    bot.wait_state(run.id, S.ROLLED_BACK)
    eventually(bot.idle, "everything sent")
    assert kubectl.json("get", "clusterpolicies.nvidia.com", "cluster-policy")["spec"] == before
    audit = bot.runtime.engine.audit(run.id)
    names = [e["name"] for e in audit]
    assert names.index("rollback.clusterpolicy") < names.index("rollback.rendered"), "the re-render waited for, recorded"
    final = thread_as_text(bot.fake, root_ts)
    assert_every_step_in_thread(audit, final)
    assert "rolled back" in final[0]
    for call in bot.fake.of("chat.postMessage") + bot.fake.of("chat.update"):
        for block in call.body.get("blocks", []):
            Block.parse(block).validate_json()  # type: ignore[union-attr]
    shell = shell_env(bot, redis_url, tmp_path)
    printed = json.loads(in_process(shell, "audit", run.id, "--all", "--json").stdout)
    assert [(e["name"], e["status"]) for e in printed["entries"]] == [(e["name"], e["status"]) for e in audit]
    status = in_process(shell, "status", run.id, "--json")
    assert json.loads(status.stdout)["state"] == "rolled_back"
    assert "rolled back" in in_process(shell, "status", run.id).stdout


def shell_env(bot: RunBot, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """The shell's environment on the bot's cluster, Redis and policy (reading needs no identity)."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps(POLICY.model_dump(mode="json", exclude_defaults=True)))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), "KUBECONFIG": str(bot.kubeconfig), "UPGRADEBOT_CONFIG": str(policy),
            "REDIS_URL": redis_url}
