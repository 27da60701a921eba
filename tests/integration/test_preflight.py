"""``preflight``: from each simulated release to the next two, every planted incompatibility is
found (in the cluster's own DRA objects and in manifests), clean objects give nothing, and
manifests the cluster serves today get the server's own answer to a dry run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from handlers.preflight import load_manifests
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.dra.preflight import Manifest, preflight
from tests.integration.test_cli import assert_one_line_reason, run
from tests.support import TEST_BUILDS

RELEASES = (27, 30, 31, 32, 33, 34)


def preferred(minor: int) -> str:
    """The version a manifest for 1.<minor> is written in (the one a DRA-enabled cluster prefers)."""
    return {27: "v1alpha2", 28: "v1alpha2", 29: "v1alpha2", 30: "v1alpha2", 31: "v1alpha3", 32: "v1beta1",
            33: "v1beta2"}.get(minor, "v1")


def pod(name: str, ref: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml-team"},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/ml/trainer:2.1.0",
                                     "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", **ref}]}}


def planted(current: int) -> dict[str, tuple[dict[str, Any], dict[str, int]]]:
    """Manifests a team running 1.<current> has, each breaking at some later release:
    name -> (object, {finding code: the first target it shows on})."""
    meta = {"metadata": {"name": "old", "namespace": "ml-team"}}
    written_for = {
        "resource-class": range(27, 31), "v1alpha2-claim": range(27, 31), "pod-source": range(27, 31),
        "scheduling-context": range(31, 32), "classic-claim": range(31, 32), "v1beta1-class": range(32, 35),
    }
    every = {
        "resource-class": ({"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClass",
                            "metadata": {"name": "old.example.com"}, "driverName": "gpu.example.com"},
                           {"kind-removed": 31}),
        "v1alpha2-claim": ({"apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim", **meta,
                            "spec": {"resourceClassName": "old.example.com"}}, {"version-removed": 31}),
        "pod-source": (pod("old-shape", {"source": {"resourceClaimTemplateName": "gpu-template"}}),
                       {"pod-claim-source": 31}),
        "scheduling-context": ({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "PodSchedulingContext", **meta,
                                "spec": {}}, {"kind-removed": 32}),
        "classic-claim": ({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourceClaim", **meta,
                           "spec": {"controller": "gpu.example.com", "devices": {"requests": []}}},
                          {"claim-controller": 32, "kind-removed": 34}),
        "v1beta1-class": ({"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass",
                           "metadata": {"name": "beta.example.com"}}, {"version-not-default": 34,
                                                                       "version-deprecated": 35}),
    }
    return {name: value for name, value in every.items() if current in written_for[name]}


def clean(target: int) -> list[dict[str, Any]]:
    """What a team writes for the target release: nothing to report."""
    version = preferred(target)
    group = f"resource.k8s.io/{version}"
    klass = ({"apiVersion": group, "kind": "ResourceClass", "metadata": {"name": "gpu.example.com"},
              "driverName": "gpu.example.com"} if target <= 30 else
             {"apiVersion": group, "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
              "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}})
    template = {"apiVersion": group, "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpu-template", "namespace": "ml-team"}, "spec": {"spec": {}}}
    ref = {"source": {"resourceClaimTemplateName": "gpu-template"}} if target <= 30 else {
        "resourceClaimTemplateName": "gpu-template"}
    return [klass, template, pod("new-shape", ref)]


def driver_expected(current: int, target: int) -> set[tuple[str, str]]:
    """What the scenario's DRA example driver v0.1.0 must be reported for on the way: built on
    k8s.io/dynamic-resource-allocation 0.32, it lists gRPC services (read by kubelets from 1.32 on)
    and uses resource.k8s.io/v1beta1 (which exists from 1.32, served only when enabled from 1.34);
    its chart says kubeVersion 1.32.x."""
    steps = range(current + 1, target + 1)
    out = set()
    if min(steps) < 32:
        out |= {"driver-kubelet-grpc", "driver-resource-api", "driver-kube-version"}
    if max(steps) > 32:
        out.add("driver-kube-version")
    if max(steps) >= 34:
        out.add("driver-resource-api")
    return {("DaemonSet", code) for code in out}


def cluster_expected(current: int, target: int) -> set[tuple[str, str]]:
    """What the scenario's own objects must be reported for: (subject prefix, code)."""
    out = driver_expected(current, target)
    if current <= 30 < target:
        out |= {("ResourceClass", "kind-removed"), ("ResourceClass", "v1alpha2-removed"),
                ("ResourceClaim", "v1alpha2-removed"), ("Pod ml-team/inference-0", "pod-claim-source")}
        if current == 30:
            out.add(("ResourceSlice", "v1alpha2-removed"))
    return out


@pytest.fixture(scope="module", params=RELEASES, ids=lambda m: f"1.{m}")
def served(request: pytest.FixtureRequest) -> Iterator[tuple[int, KubeSim]]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{request.param}") as sim:
        yield request.param, sim


@pytest.mark.parametrize("ahead", [1, 2])
def test_every_planted_incompatibility_is_found_and_clean_objects_give_nothing(
        served: tuple[int, KubeSim], ahead: int) -> None:
    current, sim = served
    target = current + ahead
    manifests = [Manifest(f"planted/{name}", obj) for name, (obj, _) in planted(current).items()]
    manifests += [Manifest(f"clean/{i}", obj) for i, obj in enumerate(clean(target))]
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        result = preflight(cluster, target, manifests)

    assert result.steps == list(range(current + 1, target + 1))
    found = {(f.origin, f.code) for f in result.findings}
    expected = {(f"planted/{name}", code) for name, (_, codes) in planted(current).items()
                for code, since in codes.items() if target >= since}
    from_cluster = {(f.subject, f.code) for f in result.findings if f.origin == "cluster"}
    assert {f for f in found if f[0] != "cluster"} == expected
    assert {(s.split(" ")[0] if not s.startswith("Pod") else s, c) for s, c in from_cluster} == \
        cluster_expected(current, target)
    assert all(f.source.startswith("https://") and f.fix for f in result.findings)
    assert result.failed == any(f.severity == "fail" for f in result.findings)


def test_dry_runs_give_the_servers_answer(served: tuple[int, KubeSim]) -> None:
    """Manifests the cluster serves today are applied with dryRun=All; the answer is the server's."""
    current, sim = served
    good, template, _ = clean(current)
    bad = {**good, "metadata": {"name": "Bad_Name"}}
    unserved = {"apiVersion": "resource.k8s.io/v1alpha1", "kind": "ResourceClass", "metadata": {"name": "x"}}
    manifests = [Manifest("good", good), Manifest("template", template), Manifest("bad", bad),
                 Manifest("unserved", unserved)]
    with Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        before = len(cluster.list_objects(cluster.dra_apis().chosen[good["kind"]]))
        result = preflight(cluster, current + 1, manifests)
        after = len(cluster.list_objects(cluster.dra_apis().chosen[good["kind"]]))
    answers = {d.origin: d for d in result.dry_runs}
    assert set(answers) == {"good", "template", "bad"}  # nothing served, nothing sent
    assert answers["good"].accepted and answers["template"].accepted
    assert not answers["bad"].accepted
    assert answers["bad"].answer.startswith(f'{good["kind"]} "Bad_Name" is invalid: metadata.name: Invalid value')
    assert before == after  # a dry run writes nothing


@pytest.fixture(scope="module")
def sim133() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.33") as sim:
        yield sim


def test_an_older_target_is_refused_kubernetes_is_not_downgraded(sim133: KubeSim, tmp_path: Path) -> None:
    """Item 5 of issue 38: a target older than the cluster gets one line: no downgrade, and how to check
    manifests against this cluster instead."""
    proc = run("preflight", "target=1.32", env={"KUBECONFIG": str(sim133.kubeconfig)}, home=tmp_path)
    assert_one_line_reason(proc, lines=1)
    assert "the cluster already runs v1.33.5, newer than 1.32: Kubernetes is not downgraded" in proc.stderr
    assert "give target=1.33 to check manifests against this cluster" in proc.stderr


def test_a_cluster_already_at_the_target_dry_runs_the_manifests(sim133: KubeSim, tmp_path: Path) -> None:
    """Item 5 of issue 38: a staging cluster upgraded first (already at the target) is no refusal:
    no step is checked, the manifests are checked against the target and dry-run on the cluster,
    and the server's refusal fails the verdict."""
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    good = clean(33)
    (clean_dir / "all.yaml").write_text(yaml.safe_dump_all(good))
    env = {"KUBECONFIG": str(sim133.kubeconfig)}
    ok = run("preflight", "target=1.33", "-f", str(clean_dir), "--json", env=env, home=tmp_path)
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["steps"] == [] and data["current_minor"] == data["target_minor"] == 33
    assert [(d["subject"], d["accepted"]) for d in data["dry_runs"]] == [
        ("DeviceClass gpu.example.com", True), ("ResourceClaimTemplate ml-team/gpu-template", True),
        ("Pod ml-team/new-shape", True)]
    assert data["notes"][0]["text"].startswith("the cluster already runs 1.33: nothing to upgrade")
    text = run("preflight", "target=1.33", "-f", str(clean_dir), env=env, home=tmp_path)
    assert text.returncode == 0 and "none: the cluster runs 1.33" in text.stdout, text.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**good[0], "metadata": {"name": "Bad_Name"}}))
    refused = run("preflight", "target=1.33", "-f", str(bad), "--json", env=env, home=tmp_path)
    assert refused.returncode == 1, refused.stderr
    [answer] = json.loads(refused.stdout)["dry_runs"]
    assert not answer["accepted"] and 'DeviceClass "Bad_Name" is invalid' in answer["answer"]


@pytest.mark.parametrize(("current", "target", "older"), [(31, 32, "1.31"), (34, 35, "1.33")])
def test_the_no_downgrade_notes_come_with_the_steps_that_change_the_storage_version(
        current: int, target: int, older: str) -> None:
    """Item 5 of issue 38: an upgrade through 1.32 (storage v1beta1) or 1.35 (storage v1) says a
    downgrade with DRA objects is not supported, with its source; an upgrade through neither does not."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=f"1.{current}") as sim, \
            Cluster.from_kubeconfig(str(sim.kubeconfig)) as cluster:
        result = preflight(cluster, target)
        quiet = preflight(cluster, current)
    [note] = [n for n in result.notes if "downgrading" in n.text]
    assert note.release == f"1.{target}" and f"downgrading to {older} with DRA objects is not supported" in note.text
    assert note.source.startswith("https://github.com/kubernetes/kubernetes/pull/")
    assert not [n for n in quiet.notes if "downgrading" in n.text]


def test_shell_reads_manifests_with_f_and_exits_by_verdict(sim133: KubeSim, tmp_path: Path) -> None:
    sim = sim133
    env = {"KUBECONFIG": str(sim.kubeconfig)}
    clean_dir = tmp_path / "clean"
    clean_dir.mkdir()
    (clean_dir / "all.yaml").write_text(yaml.safe_dump_all(clean(34)))
    ok = run("preflight", "target=1.34", "-f", str(clean_dir), env=env, home=tmp_path)
    assert ok.returncode == 0, ok.stderr
    # the clean manifests give nothing; the scenario's driver (v0.1.0: chart 1.32.x, resource.k8s.io/v1beta1,
    # served by 1.34 only when enabled) gives the two warnings
    assert "Nothing blocks the upgrade to 1.34; 2 to look at" in ok.stdout, ok.stdout
    assert ok.stdout.count("WARN  DaemonSet dra-example-driver/dra-example-driver-kubeletplugin") == 2, ok.stdout

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                  "items": [obj for obj, _ in [*planted(31).values(), *planted(33).values()]]}))
    failed = run("preflight", "target=v1.34.0", "-f", str(broken), "-f", str(clean_dir), "--json", env=env,
                 home=tmp_path)
    assert failed.returncode == 1, failed.stderr
    data = json.loads(failed.stdout)
    assert {f["origin"] for f in data["findings"] if not f["code"].startswith("driver-")} == {
        f"{broken} item {i}" for i in (1, 2, 3)}
    assert [d["subject"] for d in data["dry_runs"] if str(broken) in d["origin"]] == [
        "DeviceClass beta.example.com"]  # the v1alpha3 ones are not served by 1.33: no dry run
    assert data["target_minor"] == 34 and data["steps"] == [34]

    (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    for args, reason in ((["-f", str(tmp_path / "bad.yaml")], "is not valid YAML"),
                         (["-f", str(tmp_path / "missing")], "no such file or directory")):
        proc = run("preflight", "target=1.34", *args, env=env, home=tmp_path)
        assert_one_line_reason(proc)
        assert reason in proc.stderr


@pytest.mark.parametrize(("words", "reason"), [
    (["target=2.1"], "is not a Kubernetes release"),
    ([], "which release?"),
    (["target=1.32", "-f", "x.yaml"], "-f reads manifest files, so it works from the shell"),
])
def test_bad_words_get_the_usage(words: list[str], reason: str) -> None:
    from handlers.arguments import UsageError
    from handlers.preflight import parse

    with pytest.raises(UsageError) as caught:
        parse(words)
    assert reason in caught.value.reason and caught.value.usage.startswith("preflight target=<version>")


def test_list_documents_and_directories_are_read(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.yaml").write_text(yaml.safe_dump_all(clean(33)))
    (tmp_path / "a" / "notes.txt").write_text("not a manifest")
    read = load_manifests([str(tmp_path / "a")])
    assert [m.obj["kind"] for m in read] == ["DeviceClass", "ResourceClaimTemplate", "Pod"]
    assert read[0].origin.endswith("one.yaml #1")
