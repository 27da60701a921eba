"""A Helm release's target (policy ``owner: helm``, issue 60 item 4): the stability report reads the release.

On ``gpu-helm`` (release ``nvdp``, its Secret ``sh.helm.release.v1.nvdp.v1`` as Helm 3 stores it): once an
owner: helm run has promoted a new image, the report warns while the release still renders the old one
(naming both and the ``helm upgrade`` that makes it match); once a new revision renders the live image (a
Secret written as ``helm upgrade`` writes it), it says nothing; as a ServiceAccount that may not list
Secrets there, it says ``unknown`` with the reason. Reading the release never shows its contents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.storage.embedded import EmbeddedRedis
from handlers.report import present
from kubesim import KubeSim
from kubesim.installs import helm_release_secret
from runbooks.cluster import Cluster
from runbooks.engine.approving import Actor
from runbooks.engine.runs import Run, RunState
from runbooks.policy import Policy
from runbooks.rbac_manifests import manifests
from runbooks.stability.reporting import report_of
from runbooks.stability.reports import StabilityReport
from tests.engine_support import kubesim_engine
from tests.support import Kubectl

NS, DS = "nvidia-device-plugin", "nvdp-nvidia-device-plugin"
TARGET = f"{NS}/{DS}"
OLD, NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"
SET = "--reuse-values --set image.repository=nvcr.io/nvidia/k8s-device-plugin --set image.tag=v0.19.3"
ALICE, BOB = Actor("U0ALICE"), Actor("U0BOB")
POLICY = Policy.model_validate({"approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
                                "steps": {"observe_window": "1s", "poll_interval": "0.1s"},
                                "targets": [{"namespace": NS, "name": DS, "owner": "helm"}]})


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-helm", k8s_version="1.31") as served:
        yield served


@pytest.fixture(scope="module")
def promoted(sim: KubeSim, redis_server: EmbeddedRedis) -> Run:
    """The owner: helm run, promoted (reports read the Run; the store is the session's, flushed first)."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    engine = kubesim_engine(sim, redis_server.url, POLICY)
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.AWAITING_PROMOTION, (run.state, run.reason)
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.DONE, (run.state, run.reason)
    return run


def report(kubeconfig: Path | str, run: Run) -> StabilityReport:
    with Cluster.from_kubeconfig(kubeconfig) as cluster:
        return report_of(run, cluster=cluster, tally=None, info={}, policy=POLICY)


def as_bot(sim: KubeSim, tmp_path: Path, *, helm_role: bool) -> Path:
    """A kubeconfig of the bot's ServiceAccount holding what ``upgradebot rbac`` prints for POLICY
    (without its Helm release Role when ``helm_role`` is false)."""
    admin = Kubectl(sim.kubeconfig)
    objects = [o for o in manifests(POLICY) if helm_role or o["metadata"]["name"] != "upgradebot-helm-release"]
    account = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "upgradebot"}},
               {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "upgradebot", "namespace": "upgradebot"}}]
    path = tmp_path / "rbac.yaml"
    path.write_text(yaml.safe_dump_all([*account, *objects]))
    admin("apply", "-f", str(path))
    if not helm_role:
        admin("-n", NS, "delete", "role,rolebinding", "upgradebot-helm-release", "--ignore-not-found")
    token = admin("create", "token", "upgradebot", "-n", "upgradebot").strip()
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    out = tmp_path / "bot.kubeconfig"
    out.write_text(yaml.safe_dump(config))
    return out


def test_the_report_warns_while_the_release_renders_the_image_the_run_replaced(sim: KubeSim, promoted: Run) -> None:
    got = report(sim.kubeconfig, promoted)
    assert got.warnings == [
        f"Helm release {NS}/nvdp (revision 1) renders {OLD}, but {TARGET} runs {NEW}: the next `helm upgrade` puts "
        f"{OLD} back on every node; make the release match with `helm upgrade nvdp <chart> -n {NS} {SET}`"]
    shown = present(got)
    warned = [m.text or "" for m in shown.thread if m.title == "Warnings"]
    assert warned and OLD in warned[0] and NEW in warned[0]
    assert "gfd" not in json.dumps(got.model_dump(mode="json"))  # nothing of the release's values is kept


def test_as_a_bot_that_may_not_list_secrets_the_release_is_unknown_with_the_reason(
        sim: KubeSim, promoted: Run, tmp_path: Path) -> None:
    got = report(as_bot(sim, tmp_path, helm_role=False), promoted)
    assert got.warnings == []
    unknown = [n for n in got.notes if n.startswith(f"Helm release {NS}/nvdp: unknown")]
    assert len(unknown) == 1, got.notes
    assert "cannot read the release" in unknown[0] and "secrets" in unknown[0] and "list" in unknown[0]


def test_with_the_role_upgradebot_rbac_prints_the_bot_reads_the_release(
        sim: KubeSim, promoted: Run, tmp_path: Path) -> None:
    got = report(as_bot(sim, tmp_path, helm_role=True), promoted)
    assert [w for w in got.warnings if "Helm release" in w] and not [n for n in got.notes if "Helm release" in n]


def test_once_a_new_revision_renders_the_live_image_the_report_says_nothing(sim: KubeSim, promoted: Run) -> None:
    """``helm upgrade nvdp … --reuse-values --set image.tag=v0.19.3``: revision 2 deployed, revision 1 superseded."""
    admin = Kubectl(sim.kubeconfig)
    created = admin.json("-n", NS, "get", "secret", "sh.helm.release.v1.nvdp.v1")["metadata"]["creationTimestamp"]
    config = {"gfd": {"enabled": True}, "nfd": {"enabled": False},
              "image": {"repository": "nvcr.io/nvidia/k8s-device-plugin", "tag": "v0.19.3"}}
    upgraded = helm_release_secret("gpu-helm", created, revision=2, config=config)
    del upgraded["metadata"]["uid"], upgraded["metadata"]["creationTimestamp"]
    path = Path(sim.kubeconfig).parent / "release-v2.json"
    path.write_text(json.dumps(upgraded))
    admin("create", "-f", str(path))
    admin("-n", NS, "label", "secret", "sh.helm.release.v1.nvdp.v1", "status=superseded", "--overwrite")
    got = report(sim.kubeconfig, promoted)
    assert got.warnings == []
    assert not [n for n in got.notes if "Helm release" in n]

