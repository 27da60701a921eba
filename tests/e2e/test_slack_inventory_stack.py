"""``/upgrade inventory`` on mixed hardware, end to end (issue 36, item 1): a signed slash
command, answered on the fake Slack (which checks every block with slack_sdk) with the
hardware classes, their driver, CUDA, kernel and runtime, and the GPU node whose stack is
unknown named plainly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubesim import KubeSim
from tests.e2e.harness import Bot
from tests.e2e.test_slack_commands import assert_within_limits, texts


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeSim]:
    """kubesim's gpu-mixed scenario on Kubernetes 1.34 (the bot fixture's cluster)."""
    with KubeSim(scenario="gpu-mixed", k8s_version="1.34") as sim:
        yield sim


def test_inventory_thread_lists_the_hardware_classes(bot: Bot) -> None:
    """The summary counts the classes and the GPU node without GFD labels; the thread has one row
    per class (product, driver, CUDA, runtime, kernel, nodes) and each node's stack."""
    assert bot.command("inventory").status == 200
    bot.fake.wait_for("chat.postMessage", 2)
    bot.settle()
    root, *thread = bot.fake.of("chat.postMessage")
    assert "3 hardware class(es), 1 GPU node(s) with no GPU Feature Discovery labels" in texts(root)
    details = "\n".join(texts(c) for c in thread)
    assert "Hardware classes (3: GPU product / driver branch / runtime)" in details
    rows = [" ".join(line.split()) for line in details.splitlines()]
    assert ("NVIDIA-A100-SXM4-80GB 535.183.01 12.2 containerd 1.7 5.15.0-105-generic Ubuntu 22.04.4 LTS "
            "2: gpu-node1, gpu-node2") in rows, details
    assert ("NVIDIA-H100-80GB-HBM3 550.127.05 12.4 containerd 2.0 6.8.0-45-generic Ubuntu 24.04.1 LTS "
            "2: gpu-node3, gpu-node4") in rows, details
    assert any(r.startswith("unknown (no GPU Feature Discovery labels) unknown unknown containerd 1.7") for r in rows)
    assert "Stack unknown on gpu-node5: no GPU Feature Discovery labels" in details
    assert any(r.startswith("gpu-node5 unknown 8 unknown unknown Rocky Linux 9.4 (Blue Onyx)") for r in rows), details
    for call in [root, *thread]:
        assert_within_limits(call)


def test_the_next_inventory_lists_no_node_and_no_pod(bot: Bot, cluster: KubeSim) -> None:
    """issue 39: the front end keeps the nodes and unfinished pods in its watch cache, so the
    second inventory reads neither again, and says where it read them."""
    assert bot.command("inventory").status == 200
    bot.fake.wait_for("chat.postMessage", 2)
    bot.settle()
    cluster.call(lambda sim: sim.reads.clear())
    posted = len(bot.fake.of("chat.postMessage"))
    assert bot.command("inventory").status == 200
    bot.fake.wait_for("chat.postMessage", posted + 2)
    bot.settle()
    lists = [r["path"] for r in cluster.reads() if r["verb"] == "list"]
    assert "/api/v1/nodes" not in lists and "/api/v1/pods" not in lists, lists
    thread = "\n".join(texts(c) for c in bot.fake.of("chat.postMessage")[posted:])
    assert "read from the bot's watch cache" in thread
