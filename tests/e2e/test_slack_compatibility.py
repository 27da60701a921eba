"""The compatibility matrix from Slack, end to end (issue 36, item 2; issue 58, item 5), on
kubesim ``gpu-mixed`` with gpu-node1 and gpu-node2 labelled by GFD as on driver 375.66: a
signed ``/upgrade canary`` of v0.17.0 (README: drivers ~= 384.81) gets one ephemeral line
naming the matrix row and those nodes, and nothing is posted for approvers; v0.18.2, once
the nodes are back on 535, opens its request, which shows gpu-node5's unknown driver as a
warning."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import RunBot, served_bot
from tests.e2e.runs_support import (
    TARGET,
    buttons,
    eventually,
    posted_ts,
    roots,
    texts,
    thread,
)
from tests.fakeslack import FakeSlack
from tests.support import relabel_driver

PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


@pytest.fixture
def mixed_bot(fake_slack: FakeSlack, redis_url: str) -> Iterator[RunBot]:
    """The bot as ``upgradebot serve`` wires it, on a gpu-mixed kubesim of its own."""
    with served_bot(fake_slack, redis_url, scenario="gpu-mixed", k8s_version="1.34") as bot:
        yield bot


def test_a_node_below_the_driver_floor_is_refused_from_slack(mixed_bot: RunBot) -> None:
    """issue 36, item 2: the refusal names the row and gpu-node1, gpu-node2 in one line with the
    host's fix; no run, no root message; then a request carries the warning about gpu-node5."""
    bot = mixed_bot
    assert bot.kubeconfig is not None
    relabel_driver(bot.kubeconfig, ("gpu-node1", "gpu-node2"), "375.66")
    assert bot.slack.command(f"canary {TARGET} image={PLUGIN}:v0.17.0 node=gpu-node3").status == 200
    reply = eventually(lambda: next((c for c in bot.fake.of("response_url") if "compatibility" in texts(c)), None),
                       "the refusal")
    lines = [line for line in texts(reply).splitlines() if "compatibility" in line]  # type: ignore[arg-type]
    assert len(set(lines)) == 1, lines
    assert "refused before any approver was asked" in lines[0] and "NVIDIA device plugin v0.17.x" in lines[0]
    assert "has gpu-node1, gpu-node2 on driver 375.66: upgrade the NVIDIA driver on those nodes first" in lines[0]
    assert bot.runtime.engine.runs(limit=5) == [] and roots(bot.fake) == []

    relabel_driver(bot.kubeconfig, ("gpu-node1", "gpu-node2"), "535.183.01")
    assert bot.slack.command(f"canary {TARGET} image={PLUGIN}:v0.18.2 node=gpu-node3").status == 200
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    gate = eventually(lambda: next((c for c in thread(bot.fake, posted_ts(root)) if buttons(c)), None), "the request")
    shown = texts(gate)  # type: ignore[arg-type]
    assert "Warnings (not refused" in shown and "the driver of gpu-node5 is unknown" in shown, shown
