"""A failed canary's own words in its Slack thread, end to end (issue 36, item 4), on kubesim
gpu-small: a signed ``/upgrade canary`` of a tag its registry lacks, approved with a click,
ends with the registry's message in the thread; a crash-looping plugin's thread shows its
``--previous`` log lines and the matching signature's fix; a plugin running unregistered, its
current log's last lines (issue 61)."""

from __future__ import annotations

import pytest

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import TARGET, eventually, posted_ts, roots, thread_as_text

PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


def _failed_canary_thread(bot: RunBot, image: str) -> str:
    bot.slack.command(f"canary {TARGET} image={image} node=gpu-node1", user="U0ANA")
    (root,) = eventually(lambda: roots(bot.fake), "the root message")  # type: ignore[misc]
    root_ts = posted_ts(root)
    gate_ts, value = bot.slack.gate(root_ts)
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    run_id = bot.runtime.engine.runs()[0].id
    eventually(lambda: bot.state(run_id) in (RunState.ROLLED_BACK, RunState.FAILED), "the canary failed", timeout=90)
    eventually(bot.idle, "everything sent")
    return "\n\n".join(thread_as_text(bot.fake, root_ts))


@pytest.mark.parametrize(("tag", "said"), [
    ("v0.17.9", [f'the registry said: rpc error: code = NotFound desc = failed to pull and unpack image '
                 f'"{PLUGIN}:v0.17.9"', f"{PLUGIN}:v0.17.9: not found"]),
    ("v0.17.0-crash", ["Last log lines of", "failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files",
                       "Known failure (fs-watcher)", "fix: raise fs.inotify.max_user_instances on the node"]),
    ("v0.17.0-silent", ["(nvidia-device-plugin-ctr, current run):", "main.go:356] Retrieving plugins.",
                        "main.go:381] No devices found. Waiting indefinitely.", "Known failure (no-devices)",
                        "fix: check the node has GPUs and that the container sees them"]),
])
def test_the_failed_canarys_thread_carries_the_failures_own_words(run_bot: RunBot, tag: str, said: list[str]) -> None:
    """Issue 36 item 4: the canary's message in the thread names the pull error with the
    registry's words (v0.17.9: no release has it), or shows the crashed container's previous log lines and the
    known failure's fix (-crash). Issue 61 item 3: a plugin that runs and never registers (-silent)
    shows the last lines of its current log and the no-devices signature's fix."""
    text = _failed_canary_thread(run_bot, f"{PLUGIN}:{tag}")
    for words in said:
        assert words in text, text
