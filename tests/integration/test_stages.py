"""Stages across clusters: an image goes to ``staging`` first, and the request for ``prod``
opens only once the staging run ended with its last stability report stable, linking to it.

Two kubesims, one kubeconfig with a context for each (as a platform team's kubeconfig
has); the staging run's report is posted by the real report machinery when the staging
cluster's clock passes 24 hours."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bot.storage.redis_store import RedisRunStore
from handlers.run_views import gate_message
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.engine.refusals import Refused
from runbooks.engine.runs import RunState
from runbooks.policy import Policy
from tests.report_support import DS, NS, TARGET, Posts, world

S = RunState
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
ALICE, BOB, CAROL = Actor("U0ALICE"), Actor("U0BOB"), Actor("U0CAROL")
POLICY = Policy.model_validate({
    "approvers": {"users": ["U0BOB", "U0CAROL"]},
    "reports": {"after": ["24h"]},
    "oncall": {"channel": "C0ONCALL"},
    "steps": {"observe_window": "1s", "poll_interval": "0.1s", "ready_timeout": "60s"},
    "targets": [{"namespace": NS, "name": DS, "stages": ["staging", "prod"]}],
})


def merged_kubeconfig(path: Path, clusters: dict[str, KubeSim]) -> Path:
    """One kubeconfig with a context per kubesim, named as given."""
    config: dict[str, list[dict[str, object]] | str] = {"apiVersion": "v1", "kind": "Config", "clusters": [],
                                                        "users": [], "contexts": []}
    for name, sim in clusters.items():
        own = yaml.safe_load(Path(sim.kubeconfig).read_text())
        config["clusters"].append({"name": name, "cluster": own["clusters"][0]["cluster"]})  # type: ignore[union-attr]
        config["users"].append({"name": f"{name}-admin", "user": own["users"][0]["user"]})  # type: ignore[union-attr]
        config["contexts"].append({"name": name, "context": {"cluster": name, "user": f"{name}-admin"}})  # type: ignore[union-attr]
    config["current-context"] = next(iter(clusters))
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[KubeSim, KubeSim, Path]]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as staging, \
            KubeSim(scenario="gpu-small", k8s_version="1.31", speed=4) as prod:
        yield staging, prod, merged_kubeconfig(tmp_path / "kubeconfig", {"staging": staging, "prod": prod})


def test_prod_waits_for_a_stable_last_report_on_staging_and_links_to_it(
        fleet: tuple[KubeSim, KubeSim, Path], redis_url: str) -> None:
    staging, prod, kubeconfig = fleet
    engine = Engine(store=RedisRunStore.from_url(redis_url), steps=DaemonSetSteps(), policy=POLICY,
                    connect=lambda context: Cluster.from_kubeconfig(kubeconfig, context))

    def ask(cluster: str) -> object:
        return engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1", cluster=cluster).run

    with pytest.raises(Refused, match=r"prod is stage 2 of 2 of kube-system/nvidia-device-plugin-daemonset: "
                       r"nvcr.io/nvidia/k8s-device-plugin:v0.17.0 must first go through staging \(no run of it there yet\)"):
        ask("prod")
    with pytest.raises(Refused, match=r"goes through the stages staging -> prod: lab is not one of them"):
        engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1", cluster="lab")

    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1", cluster="staging",
                                origin={"surface": "slack", "channel": "C0STAGE"}).run
    engine.set_origin(run.id, ts="1700000000.000100")  # as the Slack thread records its root message
    engine.approve(run.id, actor=BOB)
    assert engine.advance(run.id).state is S.AWAITING_PROMOTION
    engine.approve(run.id, actor=CAROL)
    promoted = engine.advance(run.id)
    assert promoted.state is S.MONITORING, [f"{e.get('name')}: {e.get('detail')}" for e in engine.audit(run.id)
                                           if e.get("status") == "failed"]
    with pytest.raises(Refused, match=rf"run {run.id} of {NEW} there is monitoring"):
        ask("prod")

    posts = Posts()
    reports = world(redis_url, staging, POLICY, posts, owner="reports-1",
                    connect=lambda context: Cluster.from_kubeconfig(kubeconfig, context))
    try:
        assert reports.scheduler.run_due() == []
        staging.advance("24h")  # the staging cluster's clock: its report falls due
        assert reports.scheduler.run_due() == [(run.id, "24h", "posted")]
    finally:
        reports.stop()
    done = engine.get(run.id)
    assert done.progress["last_report"]["verdict"] == "stable" and done.progress["last_report"]["after"] == "24h"
    assert [where for where, _, _ in posts.items] == ["thread", "oncall"]

    second = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node2", cluster="prod").run
    assert second.state is S.AWAITING_APPROVAL and second.gate is not None
    assert second.gate.reason.startswith(f"stage 2 of 2 (prod), after staging: run {run.id} there ended with its "
                                         "24h stability report stable (posted ")
    after = second.progress["after_stage"]
    assert after["run"] == run.id and after["origin"]["channel"] == "C0STAGE" and after["report"]["thread"] == "t1"

    text = gate_message(second, second.gate).text
    assert "https://slack.com/archives/C0STAGE/p1700000000000100" in text  # the staging run's thread
    assert staging.mutations() and prod.mutations() == []  # prod untouched: its request only read it
