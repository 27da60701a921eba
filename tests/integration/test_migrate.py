"""``migrate``: a workload's device-plugin GPUs replaced by ResourceClaims in the served version's
shape, each object checked by the server's own dry run (on kubesim, against the release's schema)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.dra.migrating import MigrationError, migrate
from runbooks.dra.preflight import Discovered, Manifest, dry_run
from tests.integration.test_cli import run
from tests.support import TEST_BUILDS, Kubectl

DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer", "namespace": "ml-team"},
    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "trainer-deploy"}},
             "template": {"metadata": {"labels": {"app": "trainer-deploy"}},
                          "spec": {"containers": [
                              {"name": "train", "image": "registry.example.com/ml/trainer:2.1.0",
                               "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
                              {"name": "sidecar", "image": "registry.example.com/ml/log:1.0"}]}}},
}
SHAPE = {27: "v1alpha2", 30: "v1alpha2", 31: "v1alpha3", 32: "v1beta1", 33: "v1beta2", 34: "v1"}


@pytest.fixture(scope="module", params=sorted(SHAPE), ids=lambda m: f"1.{m}")
def served(request: pytest.FixtureRequest) -> Iterator[tuple[int, KubeSim]]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{request.param}") as sim:
        Kubectl(sim.kubeconfig)("apply", "-f", "-", input=json.dumps(DEPLOYMENT))
        yield request.param, sim


def test_the_plan_is_in_the_served_shape_and_passes_the_servers_dry_run(served: tuple[int, KubeSim]) -> None:
    minor, sim = served
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        result = migrate(cluster, "ml-team", "trainer")
    assert (result.kind, result.version, result.device_class) == ("Deployment", SHAPE[minor], "gpu.example.com")
    assert [(c.container, c.resource, c.count, c.template) for c in result.claims] == [
        ("train", "nvidia.com/gpu", 2, "trainer-train-gpu")]
    template, deployment = result.objects
    spec = template["spec"]["spec"]
    if minor <= 30:
        assert spec == {"resourceClassName": "gpu.example.com"}
    else:
        [req] = spec["devices"]["requests"]
        exact = req.get("exactly", req)
        assert ("exactly" in req) == (minor >= 33) and (exact["count"], exact["deviceClassName"]) == (2, "gpu.example.com")
    pod = deployment["spec"]["template"]["spec"]
    train, sidecar = pod["containers"]
    assert train["resources"] == {"limits": {"cpu": "4"}, "claims": [{"name": "train-gpu"}]}
    assert "resources" not in sidecar
    [ref] = pod["resourceClaims"]
    assert ref == ({"name": "train-gpu", "source": {"resourceClaimTemplateName": "trainer-train-gpu"}} if minor <= 30
                   else {"name": "train-gpu", "resourceClaimTemplateName": "trainer-train-gpu"})
    assert [d.subject for d in result.dry_runs] == ["ResourceClaimTemplate ml-team/trainer-train-gpu",
                                                    "Deployment ml-team/trainer"]
    assert result.accepted, [d.answer for d in result.dry_runs]
    live = Kubectl(sim.kubeconfig).json("get", "deployment", "trainer", "-n", "ml-team")
    assert live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_a_wrong_shape_is_refused_by_the_dry_run(served: tuple[int, KubeSim]) -> None:
    """What makes the dry run worth having: the previous version's shape, sent as the served version."""
    minor, sim = served
    if minor < 33:
        return
    wrong = {"apiVersion": f"resource.k8s.io/{SHAPE[minor]}", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "flat", "namespace": "ml-team"},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.example.com"}]}}}}
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        answer = dry_run(cluster, Discovered(cluster), Manifest("wrong", wrong))
    assert answer is not None and not answer.accepted
    assert 'deviceClassName: field not declared in schema' in answer.answer


def test_bare_pods_kinds_and_refusals(served: tuple[int, KubeSim], tmp_path: Path) -> None:
    minor, sim = served
    if minor != 34:
        return
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        pod = migrate(cluster, "ml-team", "trainer-0")
        assert pod.kind == "Pod" and pod.notes and "cannot be changed in place" in pod.notes[0]
        assert [d.subject for d in pod.dry_runs] == ["ResourceClaimTemplate ml-team/trainer-0-trainer-gpu"]
        for args, reason in ((("ml-team", "inference-0"), "asks for none of nvidia.com/gpu"),
                             (("ml-team", "nothing"), "there is no Deployment or StatefulSet or Job or Pod"),
                             (("ml-team", "trainer"), "which DeviceClass")):
            kwargs = {"device_class": None}
            if reason == "which DeviceClass":
                Kubectl(sim.kubeconfig)("apply", "-f", "-", input=json.dumps({
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "other"}}))
            with pytest.raises(MigrationError, match=reason):
                migrate(cluster, *args, **kwargs)
    env = {"KUBECONFIG": str(sim.kubeconfig)}
    proc = run("migrate", "ml-team/deployment/trainer", "class=gpu.example.com", "--json", env=env, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "Deployment" and len(data["objects"]) == 2
    text = run("migrate", "ml-team/trainer", "class=gpu.example.com", env=env, home=tmp_path)
    assert text.returncode == 0 and "Migration of Deployment ml-team/trainer to DRA" in text.stdout
    block = text.stdout.split("```")[1]  # the thread's lines, as the shell indents them
    docs = yaml.safe_load_all("\n".join(line.removeprefix("  | ") for line in block.splitlines()))
    assert [d["kind"] for d in docs if d] == ["ResourceClaimTemplate", "Deployment"]
    refused = run("migrate", "ml-team/daemonset/x", env=env, home=tmp_path)
    assert refused.returncode == 2 and "cannot be migrated" in refused.stderr
