"""The compatibility matrix from Slack, end to end (issue 36, item 2), on kubesim ``gpu-mixed``:
a signed ``/upgrade canary`` of a device plugin built for driver 550 gets one ephemeral line
naming the matrix row and the A100 nodes on driver 535, and nothing is posted for approvers;
the release itself opens its request, which shows gpu-node5's unknown driver as a warning."""

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

PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


@pytest.fixture
def mixed_bot(fake_slack: FakeSlack, redis_url: str) -> Iterator[RunBot]:
    """The bot as ``upgradebot serve`` wires it, on a gpu-mixed kubesim of its own."""
    with served_bot(fake_slack, redis_url, scenario="gpu-mixed", k8s_version="1.34") as bot:
        yield bot


def test_a_plugin_needing_a_newer_driver_is_refused_from_slack(mixed_bot: RunBot) -> None:
    """issue 36, item 2: the refusal names the row and gpu-node1, gpu-node2 in one line; no run,
    no root message; then v0.17.0's request carries the warning about gpu-node5."""
    bot = mixed_bot
    assert bot.slack.command(f"canary {TARGET} image={PLUGIN}:v0.17.0-driver550 node=gpu-node3").status == 200
    reply = eventually(lambda: next((c for c in bot.fake.of("response_url") if "compatibility" in texts(c)), None),
                       "the refusal")
    lines = [line for line in texts(reply).splitlines() if "compatibility" in line]  # type: ignore[arg-type]
    assert len(set(lines)) == 1, lines
    assert "refused before any approver was asked" in lines[0] and "NVIDIA device plugin v0.17.x" in lines[0]
    assert "has gpu-node1, gpu-node2 on driver 535.183.01" in lines[0], lines[0]
    assert bot.runtime.engine.runs(limit=5) == [] and roots(bot.fake) == []

    assert bot.slack.command(f"canary {TARGET} image={PLUGIN}:v0.17.0 node=gpu-node3").status == 200
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    gate = eventually(lambda: next((c for c in thread(bot.fake, posted_ts(root)) if buttons(c)), None), "the request")
    shown = texts(gate)  # type: ignore[arg-type]
    assert "Warnings (not refused" in shown and "the driver of gpu-node5 is unknown" in shown, shown
