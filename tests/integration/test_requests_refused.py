"""Findings 6 and 9 of the security review, on kubesim ``gpu-small`` with the real engine, shell
and kubectl.

6: ``env=FOO\\n=x`` from the shell never reaches the DaemonSet: refused as the words are parsed,
in one line (then the usage line), with exit 2.
9: a change the API server would refuse (a ``priorityClassName`` naming no PriorityClass, a
``runAsUser`` beyond int32) is refused at request time with the server's reason, in one line,
before any run is stored or any approver asked; the dry runs write nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from handlers.runs import parse_canary
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.clocks import ClusterClock
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.policy import Policy
from tests.engine_support import kubesim_engine
from tests.support import Kubectl, shell_identities

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
ALICE = Actor("U0ALICE")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": []},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
    "targets": [TARGET],
})
UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")


def engine_on(sim: KubeSim, redis_url: str) -> Engine:
    return kubesim_engine(sim, redis_url, POLICY, clock=ClusterClock(Cluster.from_kubeconfig(sim.kubeconfig).server_time))


def daemonset(kubectl: Kubectl) -> dict[str, Any]:
    return dict(kubectl.json("get", "daemonset", DS, "-n", NS))


@pytest.mark.parametrize(("words", "reason"), [
    ("priority=does-not-exist",
     f'pods "{DS}-" is forbidden: no PriorityClass with name does-not-exist was found'),
    ("security=runAsUser=9999999999",
     f'DaemonSet.apps "{DS}" is invalid: spec.template.spec.containers[0].securityContext.runAsUser: '
     "Invalid value: 9999999999: must be between 0 and 2147483647, inclusive"),
    ("pod-security=fsGroup=4294967296",
     f'DaemonSet.apps "{DS}" is invalid: spec.template.spec.securityContext.fsGroup: '
     "Invalid value: 4294967296: must be between 0 and 2147483647, inclusive"),
])
def test_a_change_the_api_server_refuses_is_refused_at_request_time(
        sim: KubeSim, redis_url: str, words: str, reason: str) -> None:
    """finding 9: the request's dry runs (the DaemonSet patch, a canary pod's create) bring the
    server's refusal before any approver is asked: one line naming the server's reason; no run
    stored, no lock held, the DaemonSet untouched."""
    kubectl = Kubectl(sim.kubeconfig)
    before = daemonset(kubectl)
    engine = engine_on(sim, redis_url)
    args = parse_canary([TARGET, "node=gpu-node1", *words.split()])
    with pytest.raises(Refused) as refused:
        engine.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node, edits=args.edits)
    said = str(refused.value)
    assert reason in said and said.startswith(f"the API server refuses this change of {TARGET}"), said
    assert len(said.splitlines()) == 1
    assert engine.runs(limit=5) == []
    after = daemonset(kubectl)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]
    # the same target takes a change the server accepts: nothing was left locked
    args = parse_canary([TARGET, "node=gpu-node1", "priority=system-cluster-critical"])
    run = engine.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node,
                                edits=args.edits).run
    assert run.gate is not None and run.gate.is_open


def test_a_newline_in_an_env_name_from_the_shell_never_reaches_the_daemonset(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """finding 6: ``upgradebot canary … env=$'FOO\\n=x'`` exits 2 with one line naming env= and
    U+000A; no run, and the DaemonSet's containers have no FOO."""
    identities, tokens = shell_identities("U0ALICE", "U0BOB")
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"approvers: {{users: [U0BOB]}}\nshell: {{approvals: true}}\n{identities}")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
    env = {**base, "HOME": str(tmp_path), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
           "UPGRADEBOT_CONFIG": str(policy), "UPGRADEBOT_TOKEN": tokens["U0ALICE"]}
    kubectl = Kubectl(sim.kubeconfig)
    before = daemonset(kubectl)
    for word in ("env=FOO\n=x", "env=FOO=x\n", "env=FOO=\u2028*Change:* none"):
        proc = subprocess.run([UPGRADEBOT, "canary", TARGET, "node=gpu-node1", word], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 2, (proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()  # the reason, then the verb's usage line
        assert "Traceback" not in proc.stderr and "env= holds U+" in lines[0], proc.stderr
        assert len(lines) == 2 and lines[1].startswith("usage: upgradebot canary"), proc.stderr
    runs = subprocess.run([UPGRADEBOT, "runs"], capture_output=True, text=True, env=env, timeout=120)
    assert runs.returncode == 0 and "r-" not in runs.stdout, runs.stdout
    after = daemonset(kubectl)
    assert after["spec"]["template"] == before["spec"]["template"]
    assert not any(e.get("name", "").startswith("FOO") for c in after["spec"]["template"]["spec"]["containers"]
                   for e in c.get("env") or [])


def test_the_installed_rbac_lets_the_request_dry_runs_ask_and_names_the_rule_they_need(
        sim: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """finding 9: with the install's RBAC (a token of its ServiceAccount) the dry runs of a template
    change ask without a 403 of RBAC and the server's refusal comes back; without ``create`` on
    pods in the target's namespace the request stops, naming that rule."""
    from bot.storage.redis_store import RedisRunStore
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.errors import Forbidden
    from tests.integration.test_install_rbac import POLICY as INSTALLED
    from tests.integration.test_install_rbac import install, rendered_rbac

    def engine(objects: list[dict[str, Any]], where: str) -> Engine:
        (tmp_path / where).mkdir()
        bot = install(sim, tmp_path / where, objects)
        return Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=INSTALLED,
                      connect=bot.connect)

    def ask(on: Engine, words: str) -> Any:
        args = parse_canary([TARGET, "node=gpu-node1", *words.split()])
        return on.request_canary(actor=ALICE, target=args.target, image=args.image, node=args.node, edits=args.edits)

    installed = engine(rendered_rbac(), "installed")
    with pytest.raises(Refused, match="no PriorityClass with name does-not-exist was found"):
        ask(installed, "priority=does-not-exist")
    assert ask(installed, "env=PASS_DEVICE_SPECS=true").run.gate is not None

    objects = rendered_rbac()
    for role in (o for o in objects if o["kind"] == "Role" and o["metadata"]["name"] == "upgradebot-upgrade"):
        for rule in role["rules"]:
            if rule["resources"] == ["pods"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "create"]
    with pytest.raises(Forbidden, match=r'lacks the rule \{apiGroups: \[""\], resources: \[pods\], verbs: \[create\]\}'):
        ask(engine(objects, "without-create"), "env=OTHER=1 toleration=example.com/x:NoSchedule")
