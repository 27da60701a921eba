"""A node's ``status.nodeInfo`` written by a hostile kubelet reaches people inert (attack run,
finding 3): an OS image holding line ends, a fake table row, a user mention, ``<!channel>``, a
terminal escape sequence and a right-to-left override; a kernel holding a carriage return, a C1
CSI, a group mention and a bidi isolate. The Slack reply mentions nobody and its tables keep one
row a node; ``upgradebot inventory`` writes no control or bidi character and keeps the node on
one line; ``--json`` is valid JSON carrying the values as the bot shows them
(:func:`runbooks.characters.shown`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from bot.slack.blocks import all_blocks, render_reply
from bot.text import render_reply as render_text
from handlers.inventory import summarize
from kubesim import KubeSim
from runbooks.inventory import Inventory
from tests.support import Kubectl

OS_IMAGE = "Ubuntu\n| fake | row |\n<@U0ADMIN> <!channel> \x1b[31mred\u202eevil"
KERNEL = "6.8.0\r\x9b31m<!subteam^S0OPS> <#C0OPS>\u2066x\u200b"
NODE = "gpu-node2"
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
RAW = ("\n", "\r", "\x1b", "\x9b", "\u202e", "\u2066", "\u200b")
"""What no shown value may hold."""


@pytest.fixture(scope="module")
def hostile() -> Iterator[KubeSim]:
    """gpu-small with gpu-node2's nodeInfo rewritten through the status subresource, as its kubelet could."""
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        patch = {"status": {"nodeInfo": {"osImage": OS_IMAGE, "kernelVersion": KERNEL}}}
        Kubectl(sim.kubeconfig)("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", json.dumps(patch))
        yield sim


@pytest.fixture(scope="module")
def inv(hostile: KubeSim, inventory_of: Callable[..., Inventory]) -> Inventory:
    return inventory_of(hostile)


def shell(sim: KubeSim, home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
    env.update(HOME=str(home), KUBECONFIG=str(sim.kubeconfig))
    return subprocess.run([UPGRADEBOT, "inventory", *args], capture_output=True, env=env, timeout=60)


def test_the_inventory_keeps_the_values_shown(inv: Inventory) -> None:
    """The node's OS image and kernel are kept with their control and layout characters escaped and
    their mention openers broken, whichever path read them."""
    node = inv.node(NODE)
    assert node is not None and node.os_image is not None and node.kernel is not None
    for value in (node.os_image, node.kernel):
        assert not any(c in value for c in RAW), repr(value)
        assert "<@" not in value and "<!" not in value and "<#" not in value, repr(value)
    assert node.os_image.startswith("Ubuntu\\n| fake | row |\\n<"), node.os_image
    assert "\\x1b[31mred\\u202eevil" in node.os_image


def _code_rows(blocks: list[dict[str, Any]]) -> list[list[str]]:
    """The lines of each code block (a table) among ``blocks``."""
    out = []
    for block in blocks:
        text = (block.get("text") or {}).get("text", "")
        if text.startswith("```"):
            out.append(text.strip("`").strip("\n").split("\n"))
    return out


def test_slack_reply_mentions_nobody_and_keeps_one_row_a_node(inv: Inventory) -> None:
    """Block Kit as slack_sdk validates it: no raw mention of a user, group, channel or ``<!channel>``,
    no control or bidi character, and the node's row is one line of its table."""
    rendered = render_reply(summarize(inv), prefix="/upgrade")
    payloads = [rendered.main, *rendered.thread]
    for payload in payloads:
        for block in payload["blocks"]:
            Block.parse(block).validate_json()  # type: ignore[union-attr]
    blocks = all_blocks(payloads)
    dumped = json.dumps(payloads, ensure_ascii=False)
    for opener in ("<@U0ADMIN", "<!channel", "<!subteam", "<#C0OPS"):
        assert opener not in dumped, opener
    for raw in ("\r", "\x1b", "\x9b", "\u202e", "\u2066", "\u200b"):
        assert raw not in dumped, repr(raw)
    tables = _code_rows(blocks)
    stack = next(t for t in tables if t[0].startswith("NAME") and "OS IMAGE" in t[0])
    classes = next(t for t in tables if t[0].startswith("GPU PRODUCT"))
    assert (len(stack), len(classes)) == (1 + len(inv.nodes), 1 + len(inv.classes)), tables
    row = next(r for r in stack if r.startswith(NODE + " "))
    assert "fake | row" in row and "red" in row and "6.8.0" in row, row
    assert not any(r.lstrip().startswith("| fake") for t in tables for r in t), tables


def test_shell_text_writes_no_control_or_bidi_character(hostile: KubeSim, tmp_path: Path) -> None:
    """``upgradebot inventory``'s text: no ESC, CSI, CR or bidi character, and the node on one line."""
    proc = shell(hostile, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")
    for raw in ("\r", "\x1b", "\x9b", "\u202e", "\u2066", "\u200b"):
        assert raw not in out, repr(raw)
    rows = [line for line in out.splitlines() if "fake | row" in line]
    assert len(rows) == 2, out  # the class's OS images, and the node's own row
    assert rows[1].split()[:3] == ["|", NODE, "NVIDIA-A100-SXM4-80GB"] and "red" in rows[1] and "6.8.0" in rows[1], rows
    assert not any(line.lstrip(" |").startswith("fake | row") for line in out.splitlines()), out


def test_console_text_is_the_same(inv: Inventory) -> None:
    """The console prints the same renderer's text: no control or bidi character there either."""
    out = render_text(summarize(inv), prefix="/upgrade")
    for raw in ("\r", "\x1b", "\x9b", "\u202e", "\u2066", "\u200b"):
        assert raw not in out, repr(raw)
    assert "@U0ADMIN" not in out.replace("<\u2060@U0ADMIN", "")


def test_json_is_valid_and_carries_the_values_shown(hostile: KubeSim, tmp_path: Path, inv: Inventory) -> None:
    """``--json`` is valid JSON; its OS image is the value the bot keeps and shows (escaped, not raw),
    and its bytes hold no control or bidi character a terminal would act on."""
    proc = shell(hostile, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")
    for raw in ("\r", "\x1b", "\x9b", "\u202e", "\u2066", "\u200b"):
        assert raw not in out, repr(raw)
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    shown = inv.node(NODE)
    assert shown is not None
    assert (nodes[NODE]["os_image"], nodes[NODE]["kernel"]) == (shown.os_image, shown.kernel)
