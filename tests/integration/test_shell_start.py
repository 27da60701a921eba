"""What the shell loads to start (issue 39): each verb pays for the imports it uses, no more.

Not timed: the guard is the mechanism, the modules a fresh interpreter holds after
importing the CLI, after ``--help`` and after ``upgradebot status`` against a real Redis
(``bench/bench_shell.py`` measures the times). Every check runs in a subprocess of its own,
since this test process has long imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kubesim import KubeSim

PROBE = """
import json, sys
from bot.shell.cli import main
code = None
try:
    code = main(sys.argv[2:]) if len(sys.argv) > 2 else None
except SystemExit as exc:  # argparse's --help
    code = exc.code
with open(sys.argv[1], "w") as found:
    json.dump({"code": code, "modules": sorted(sys.modules)}, found)
"""
HEAVY = ("kubernetes", "slack_sdk", "slack_bolt", "matplotlib", "aiohttp", "dramatiq", "prometheus_client",
         "waitress", "kubernetes_validate", "jsonschema", "bot.console", "bot.slack", "bot.reports", "bot.demo")
"""Loaded by no verb that only reads the run store: the cluster client, Slack, the reports, the
console and the processes' servers."""
FOR_RUNS = ("redis", "bot.storage.redis_store")
"""What the run verbs load, and the others (``--help``, ``inventory``) do not."""
FOR_VERBS = ("bot.runtime", "bot.settings", "bot.shell.output", "bot.workers",
             "runbooks.daemonset.steps", "runbooks.daemonset.repairing", "runbooks.dra.claim_cleanup",
             "runbooks.dra.migration_run")
"""What a verb of the table loads to act (the settings, the engine's steps, the printing of a
result) and ``--help`` does not: it needs the verb table's names and usage lines only."""
FOR_REPORTS = ("runbooks.stability.reporting", "runbooks.stability.reports", "runbooks.stability.judging")
"""The stability reports' computing and model: loaded by ``report`` only, not by ``status`` or ``--help``."""


def loaded(tmp_path: Path, *argv: str, env: dict[str, str]) -> tuple[object, set[str]]:
    """The exit code of ``upgradebot <argv>`` run in a fresh interpreter, and every module it held."""
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    found = json.loads(out.read_text())
    return found["code"], set(found["modules"])


def packages(modules: set[str], names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` (a package or a module) is among ``modules``."""
    return {name for name in names if any(m == name or m.startswith(name + ".") for m in modules)}


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    return {**base, "HOME": str(tmp_path), **extra}


def test_importing_the_cli_loads_no_client_and_no_store(tmp_path: Path) -> None:
    """issue 39: ``import bot.shell.cli`` loads neither the kubernetes client, Slack, the Redis
    store, the reports nor the console: the verbs load what they use."""
    _, modules = loaded(tmp_path, env=shell_env(tmp_path))
    assert "bot.shell.cli" in modules and "handlers.verbs" in modules  # the probe did import the CLI
    assert packages(modules, HEAVY + FOR_RUNS) == set()


def test_help_lists_every_verb_without_loading_them(tmp_path: Path) -> None:
    """issue 39: ``upgradebot --help`` (argparse built from the whole verb table) exits 0 and
    loads nothing a verb needs to act: no client, no store, no console."""
    code, modules = loaded(tmp_path, "--help", env=shell_env(tmp_path))
    assert code == 0
    assert packages(modules, HEAVY + FOR_RUNS) == set()


def test_status_loads_the_store_but_no_cluster_client(tmp_path: Path, redis_url: str) -> None:
    """issue 39: ``upgradebot status`` reads the runs from a real Redis (exit 0, no active run) and
    loads the Redis store it uses, never the kubernetes client, Slack, the reports or the console."""
    code, modules = loaded(tmp_path, "status", "--json", env=shell_env(tmp_path, REDIS_URL=redis_url))
    assert code == 0
    assert packages(modules, FOR_RUNS) == set(FOR_RUNS)  # it did read the store
    assert packages(modules, HEAVY) == set()


def test_help_loads_no_settings_no_engine_steps_and_no_reports(tmp_path: Path) -> None:
    """issue 39: ``upgradebot --help`` loads neither the settings (pydantic-settings), the runtime
    and the engine's steps (upgrade, repair, cleanup, migration), the result printing nor the
    stability reports: the verbs' usage lines are all it prints."""
    code, modules = loaded(tmp_path, "--help", env=shell_env(tmp_path))
    assert code == 0
    assert "handlers.verbs" in modules  # the table was built
    assert packages(modules, FOR_VERBS + FOR_REPORTS) == set()


def test_status_loads_no_stability_report(tmp_path: Path, redis_url: str) -> None:
    """issue 39: ``upgradebot status`` (exit 0 on a real Redis) loads the settings and the
    runtime it uses, but not the stability reports' computing and model (``report``'s)."""
    code, modules = loaded(tmp_path, "status", "--json", env=shell_env(tmp_path, REDIS_URL=redis_url))
    assert code == 0
    assert packages(modules, ("bot.settings", "bot.runtime")) == {"bot.settings", "bot.runtime"}
    assert packages(modules, FOR_REPORTS) == set()


HANDLERS = ("handlers.inventory", "handlers.verify", "handlers.claims", "handlers.migrate", "handlers.preflight",
            "handlers.rbac", "handlers.report", "handlers.runs")
"""The handler modules of the verb table: ``--help`` reads the table's rows as data and imports none."""
NOT_FOR_STATUS = ("runbooks.cluster", "urllib3", "runbooks.inventory", "runbooks.stability", "runbooks.engine.commands",
                  "runbooks.engine.requesting", "runbooks.engine.driving", "runbooks.daemonset", "runbooks.dra",
                  "runbooks.engine.steps", "runbooks.engine.approving", "runbooks.policy", "runbooks.metrics", "yaml",
                  *(h for h in HANDLERS if h != "handlers.runs"))
"""What ``status`` does not use: the cluster adapter (and urllib3), the inventory and stability models,
the engine's commands, steps and approval rules, the policy's models and yaml (no policy file: the
defaults are built when a verb uses them), the other verbs."""
NOT_FOR_HELP = ("runbooks.policy", "runbooks.metrics", "yaml", "pydantic", "runbooks.engine.runs")
"""The policy's models, yaml, pydantic itself and the run model: ``--help`` prints usage lines and needs none."""


def test_help_imports_no_handler_module(tmp_path: Path) -> None:
    """issue 39: ``upgradebot --help`` and ``upgradebot status --help`` build the parser from the
    verb table's rows as data: no verb's handler module is imported, nor the cluster adapter,
    the policy's models, the run model or pydantic."""
    for argv in (("--help",), ("status", "--help")):
        code, modules = loaded(tmp_path, *argv, env=shell_env(tmp_path))
        assert code == 0
        assert packages(modules, HANDLERS + NOT_FOR_STATUS + NOT_FOR_HELP) == set(), argv


def test_status_imports_only_the_run_model_the_store_and_its_reply(tmp_path: Path, redis_url: str) -> None:
    """issue 39: ``upgradebot status`` (exit 0 on a real Redis) imports its own handler module and
    the store, and none of what it does not use: no cluster adapter, no engine commands or steps,
    no policy models or yaml (no policy file), no inventory or stability models, no other verb."""
    for argv in (("status", "--json"), ("status",)):
        code, modules = loaded(tmp_path, *argv, env=shell_env(tmp_path, REDIS_URL=redis_url))
        assert code == 0
        assert {"handlers.runs", "bot.storage.redis_store", "runbooks.engine.runs"} <= modules
        assert packages(modules, NOT_FOR_STATUS) == set(), argv


BUILT = """
import io, json, sys
from pydantic import BaseModel
from bot.shell.cli import main
code = main(sys.argv[2:], out=io.StringIO())
def below(model):
    for sub in model.__subclasses__():
        yield sub
        yield from below(sub)
ours = {f"{m.__module__}.{m.__qualname__}": m.__pydantic_complete__ for m in below(BaseModel)
        if m.__module__.split(".")[0] in ("bot", "handlers", "runbooks")}
with open(sys.argv[1], "w") as found:
    json.dump({"code": code, "models": ours}, found)
"""


def built_models(tmp_path: Path, *argv: str, env: dict[str, str]) -> tuple[object, set[str], set[str]]:
    """The exit code of ``upgradebot <argv>`` run in a fresh interpreter, the project's pydantic
    models whose schema (validator and serializer) it built, and those it defined without building."""
    out = tmp_path / "models.json"
    proc = subprocess.run([sys.executable, "-c", BUILT, str(out), *argv], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    found = json.loads(out.read_text())
    models: dict[str, bool] = found["models"]
    return found["code"], {m for m, done in models.items() if done}, {m for m, done in models.items() if not done}


def test_status_builds_the_schema_of_no_model_it_does_not_validate(tmp_path: Path, redis_url: str) -> None:
    """issue 39: ``upgradebot status --json`` with no active run (exit 0 on a real Redis) defines the
    run model, the replies and the verbs' argument models, but builds the pydantic schema of the
    settings alone: a model's schema is built when a value is first validated, not at import."""
    code, built, deferred = built_models(tmp_path, "status", "--json", env=shell_env(tmp_path, REDIS_URL=redis_url))
    assert code == 0
    assert {"runbooks.engine.runs.Run", "handlers.replies.Reply", "runbooks.templates.Edits"} <= deferred
    assert built == {"bot.settings.Settings"}


def test_status_of_a_run_builds_the_run_model_and_no_reply(tmp_path: Path, redis_url: str) -> None:
    """issue 39: ``upgradebot status <run> --json`` on a run stored in a real Redis builds the schema
    of what it validates (the run, the models it holds within it) and prints the run as stored, but builds
    no reply and no other verb's argument model: JSON needs no Reply."""
    import datetime as dt

    from bot.storage.redis_store import RedisRunStore
    from runbooks.engine.runs import Run, Target, new_run_id

    now = dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)
    store = RedisRunStore.from_url(redis_url)
    run = store.create(Run(id=new_run_id(), target=Target(cluster="prod", namespace="team", name="plugin"),
                           image="repo/plugin:v2", container="plugin", node="gpu-node1", requester="U0ALICE",
                           created_at=now, updated_at=now))
    env = shell_env(tmp_path, REDIS_URL=redis_url)
    code, built, deferred = built_models(tmp_path, "status", run.id, "--json", env=env)
    assert code == 0
    assert "runbooks.engine.runs.Run" in built  # its parts' schemas are built into its own
    assert {"handlers.replies.Reply", "handlers.replies.Message", "handlers.runs.CanaryArgs"} <= deferred
    shown = subprocess.run([sys.executable, "-c", "import sys; from bot.shell.cli import main; sys.exit(main())",
                            "status", run.id, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(run.model_dump_json())


EXIT = """
import atexit, json, sys
from importlib.metadata import entry_points

class Module:
    def __del__(self):  # runs in the interpreter's teardown, not after os._exit
        sys.stderr.write("torn down\\n")

held = Module()
(script,) = entry_points(group="console_scripts", name="upgradebot")
atexit.register(lambda: sys.stderr.write("exit handlers ran\\n"))
sys.stderr.write(json.dumps({"entry": script.value}) + "\\n")
sys.argv = ["upgradebot", *sys.argv[1:]]
sys.exit(script.load()())
"""


def test_the_command_ends_without_the_interpreters_teardown_but_runs_its_exit_handlers(
        tmp_path: Path, redis_url: str) -> None:
    """issues 35 and 39: the installed ``upgradebot`` command runs the verb (``status --json``: exit 0,
    the JSON printed), runs the exit handlers (the kubernetes client deletes its certificate files
    in one) and ends the process without the interpreter's teardown, which walked and freed the whole
    of pydantic, Redis and the verbs object by object (an object held by a module is never finalized)."""
    proc = subprocess.run([sys.executable, "-c", EXIT, "status", "--json"], capture_output=True,
                          text=True, env=shell_env(tmp_path, REDIS_URL=redis_url), timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout) == {"runs": []}
    lines = proc.stderr.splitlines()
    assert json.loads(lines[0]) == {"entry": "bot.shell.cli:run"}, proc.stderr
    assert "exit handlers ran" in lines and "torn down" not in lines, proc.stderr


def test_a_verb_that_read_a_cluster_leaves_no_certificate_file(tmp_path: Path, cluster: KubeSim) -> None:
    """issue 35: the kubernetes client writes a kubeconfig's ``certificate-authority-data`` to a
    temporary file and deletes it in an exit handler; the command ends at once but still runs it,
    so ``inventory`` leaves nothing in ``TMPDIR`` (a CI runner's /tmp filled with them otherwise)."""
    assert "certificate-authority-data" in cluster.kubeconfig.read_text()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run([str(Path(sys.executable).parent / "upgradebot"), "inventory", "--json"],
                          capture_output=True, text=True, timeout=120,
                          env=shell_env(tmp_path, KUBECONFIG=str(cluster.kubeconfig), TMPDIR=str(scratch)))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["nodes"], proc.stdout[:500]
    assert list(scratch.iterdir()) == []


NOT_FOR_READS = ("kubernetes", "kubernetes_validate", "redis", "slack_sdk", "slack_bolt", "pydantic_settings",
                 "requests", "oauthlib", "websocket")
"""issue 63: what ``inventory`` never loads: the kubernetes client (the kubeconfig is read by
:mod:`runbooks.cluster.kubeconfig`, requests go over urllib3), Redis (sync or asyncio), Slack,
pydantic-settings and what the kubernetes client pulled in with it."""


def test_inventory_reads_the_cluster_without_the_kubernetes_client_or_redis(tmp_path: Path, cluster: KubeSim) -> None:
    """issue 63: ``upgradebot inventory --json`` (exit 0 on kubesim over HTTPS) reads its kubeconfig and
    the cluster, and loads neither the kubernetes client, Redis (nor ``redis.asyncio``), Slack nor
    pydantic-settings."""
    code, modules = loaded(tmp_path, "inventory", "--json",
                           env=shell_env(tmp_path, KUBECONFIG=str(cluster.kubeconfig)))
    assert code == 0
    assert {"runbooks.cluster.adapter", "runbooks.cluster.kubeconfig", "runbooks.inventory.taking"} <= modules
    assert packages(modules, NOT_FOR_READS) == set()
    assert "redis.asyncio" not in modules


def test_status_loads_no_settings_library(tmp_path: Path, redis_url: str) -> None:
    """issue 63: ``upgradebot status`` validates its settings with pydantic alone: pydantic-settings (and
    what it loads to read ``.env`` files and cloud secret stores) is not loaded."""
    code, modules = loaded(tmp_path, "status", "--json", env=shell_env(tmp_path, REDIS_URL=redis_url))
    assert code == 0
    assert "bot.settings" in modules
    assert packages(modules, ("pydantic_settings", "kubernetes")) == set()
