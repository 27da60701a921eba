"""Migrations from Slack end to end: ``migrate`` posts its plan with a long manifest uploaded
to the thread as a file (``files.uploadV2`` on the fake Slack); ``apply-migration`` opens a
run whose migration request is approved with a click, applied and verified on kubesim."""

from __future__ import annotations

import json

import yaml

from runbooks.engine.runs import RunState
from tests.e2e.conftest import RunBot
from tests.e2e.runs_support import eventually, posted_ts, roots, texts
from tests.integration.test_migration_run import deployment
from tests.support import Kubectl


def _trainer(bot: RunBot, *, env: int = 0) -> None:
    obj = deployment("trainer", 1)
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": f"SETTING_{i:03d}", "value": "a value long enough to make the manifest long"} for i in range(env)]
    assert bot.kubeconfig is not None
    kubectl = Kubectl(bot.kubeconfig)
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubectl("rollout", "status", "deployment/trainer", "-n", "ml-team", "--timeout=60s", timeout=90)


def test_a_long_plan_is_uploaded_to_the_thread_as_a_file(run_bot: RunBot) -> None:
    bot = run_bot
    _trainer(bot, env=60)
    bot.slack.command("migrate ml-team/trainer class=gpu.example.com", user="U0EVE")  # reading needs no rights
    upload = bot.fake.wait_for("files.completeUploadExternal")[0]
    (root,) = [c for c in bot.fake.of("chat.postMessage") if "Migration of Deployment ml-team/trainer" in texts(c)]
    [stored] = bot.fake.files.values()
    assert upload.answer["ok"] and stored["thread_ts"] == posted_ts(root) and stored["channel"] == "C0OPS"
    assert stored["filename"] == "migration-ml-team-deployment-trainer.yaml"
    kinds = [d["kind"] for d in yaml.safe_load_all(stored["data"].decode()) if d]
    assert kinds == ["ResourceClaimTemplate", "Deployment"]
    posted = "\n".join(texts(c) for c in bot.fake.of("chat.postMessage"))
    assert "in the file migration-ml-team-deployment-trainer.yaml" in posted and "SETTING_059" not in posted


def test_a_failed_upload_is_said_in_the_thread(run_bot: RunBot) -> None:
    bot = run_bot
    _trainer(bot, env=60)
    bot.fake.fail_once("files.getUploadURLExternal", "missing_scope")
    bot.slack.command("migrate ml-team/trainer class=gpu.example.com", user="U0EVE")
    said = eventually(lambda: [c for c in bot.fake.of("chat.postMessage") if "could not be uploaded" in texts(c)],
                      "the failed upload said in the thread")
    assert "(missing_scope)" in texts(said[0]) and "files:write" in texts(said[0])  # type: ignore[index]


def test_apply_migration_from_slack_to_done(run_bot: RunBot) -> None:
    bot = run_bot
    _trainer(bot)
    bot.slack.command("apply-migration ml-team/trainer class=gpu.example.com", user="U0ANA")
    (root,) = eventually(lambda: roots(bot.fake), "the run's root message")  # type: ignore[misc]
    assert "Migration r-" in texts(root) and "train: nvidia.com/gpu 1 -&gt; claim train-gpu" in texts(root)
    root_ts = posted_ts(root)
    gate_ts, value = bot.slack.gate(root_ts)
    (run,) = bot.runtime.engine.runs()
    bot.slack.click("approve", value, user="U0LEAD", message_ts=gate_ts, thread_ts=root_ts)
    bot.wait_state(run.id, RunState.DONE)
    eventually(bot.idle, "everything sent")
    gate = [c for c in bot.fake.of("chat.postMessage") if c.body.get("thread_ts") == root_ts
            and "Migration request" in texts(c)]
    assert gate and "apply the migration of Deployment ml-team/trainer" in texts(gate[0])
