"""docs/install.md ("Install in your cluster", once README's), step by step with the real kubectl against kubesim
(issue 34, item 1): ``kubectl create namespace`` and ``create secret generic`` (protobuf
bodies), ``apply -k`` of every overlay (and the ServiceMonitor component once its CRD is
installed) with zero errors, ``get`` of each kind with the columns kubectl prints, and
``rollout status``; a pod whose Secret is missing does not start until the Secret exists."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubesim import KubeSim
from tests.kubesim.test_kubectl import wait_for
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance
ROOT = Path(__file__).resolve().parents[2]
INSTALL_PAGE = ROOT / "docs" / "install.md"
"""Where the install is written: the test reads its commands there (issue 41 moved it out of README.md)."""
OVERLAYS = sorted(p for p in (ROOT / "deploy" / "overlays").iterdir() if (p / "kustomization.yaml").exists())
SLACK_TOKEN = "xoxb-issue34-bot-token-never-logged"
REDIS_PASSWORD = "issue34-redis-password-never-logged"
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor",
                       "listKind": "ServiceMonitorList", "categories": ["prometheus-operator"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
"""What Pod Security "restricted" asks of a pod and its containers: the install's namespace
``upgradebot`` enforces it (deploy/base/namespaces.yaml), as a real API server does."""


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=20.0) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


def _columns(kubectl: Kubectl, *args: str) -> list[str]:
    """The header kubectl printed, one entry a column (columns are two or more spaces apart)."""
    return re.split(r"\s{2,}", kubectl("get", *args).splitlines()[0].strip())


def readme_install_commands() -> list[list[str]]:
    """The kubectl commands of docs/install.md's steps that create the namespaces and the two
    Secrets for Socket Mode, as written there (continuation lines joined, comments dropped), with
    the placeholders filled and the page's paths made this checkout's: the test runs what a
    reader would paste, so the page and the test cannot drift apart."""
    page = INSTALL_PAGE.read_text()
    blocks = re.findall(r"<!-- install-walk: (both|socket-mode) -->\s*```sh\n(.*?)```", page, re.S)
    text = "".join(body for _, body in blocks
                   if "namespaces.yaml" in body or "create secret generic" in body).replace("\\\n", " ")
    assert text, "docs/install.md has no marked blocks creating the namespaces and the Secrets"
    filled = {"xoxb-…": SLACK_TOKEN, "xapp-…": "xapp-issue34", '"$(openssl rand -hex 24)"': REDIS_PASSWORD,
              "deploy/": f"{ROOT / 'deploy'}/"}
    commands = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        for placeholder, value in filled.items():
            line = line.replace(placeholder, value)
        if line:
            words = shlex.split(line)
            assert words[0] == "kubectl", line
            commands.append(words[1:])
    return commands


def _apply_json(kubectl: Kubectl, *objs: dict) -> str:
    return kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


@pytest.fixture(scope="module")
def installed(sim: KubeSim, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """docs/install.md's steps 5 and 6, verbatim (read from the page itself), for every overlay;
    what each ``apply -k`` printed."""
    commands = readme_install_commands()
    assert [c[:2] for c in commands] == [["apply", "-f"], ["-n", "upgradebot"], ["-n", "upgradebot"]], commands
    for command in commands:
        kubectl(*command)
    assert "kubectl apply -k deploy/overlays/socket-mode" in INSTALL_PAGE.read_text()
    out: dict[str, str] = {}
    for overlay in OVERLAYS:
        proc = kubectl.run("apply", "-k", str(overlay))
        assert proc.returncode == 0 and "error" not in proc.stderr.lower(), proc.stderr
        out[overlay.name] = proc.stdout
    # The component, as docs/install.md says to add it to an overlay, once the Prometheus Operator's CRD is there.
    _apply_json(kubectl, SERVICE_MONITOR_CRD)
    kubectl("wait", "--for=condition=established", "crd/servicemonitors.monitoring.coreos.com", "--timeout=30s")
    overlay = tmp_path_factory.mktemp("overlay")
    base = os.path.relpath(ROOT / "deploy" / "overlays" / "socket-mode", overlay)
    component = os.path.relpath(ROOT / "deploy" / "components" / "servicemonitor", overlay)
    (overlay / "kustomization.yaml").write_text(
        f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{base}]\n"
        f"components: [{component}]\n")
    proc = kubectl.run("apply", "-k", str(overlay))
    assert proc.returncode == 0 and "error" not in proc.stderr.lower(), proc.stderr
    out["servicemonitor"] = proc.stdout
    return out


def test_install_steps_apply_every_overlay_and_roll_out(installed: dict[str, str], kubectl: Kubectl) -> None:
    """Issue 34 item 1: every kind of every overlay is served (Service, NetworkPolicy, Ingress, the
    ServiceMonitor of a CRD), and the bot and Redis roll out once both Secrets exist."""
    assert {p.name for p in OVERLAYS} <= set(installed) and "socket-mode" in installed and "http-mode" in installed
    for overlay in ("socket-mode", "http-mode"):
        assert "service/upgradebot-redis " in installed[overlay]
        assert "networkpolicy.networking.k8s.io/upgradebot " in installed[overlay]
    assert "ingress.networking.k8s.io/upgradebot created" in installed["http-mode"]
    assert "servicemonitor.monitoring.coreos.com/upgradebot created" in installed["servicemonitor"]
    out = kubectl("-n", "upgradebot", "rollout", "status", "deployment/upgradebot", "--timeout=60s", timeout=90)
    assert 'deployment "upgradebot" successfully rolled out' in out
    kubectl("-n", "upgradebot", "rollout", "status", "statefulset/upgradebot-redis", "--timeout=60s", timeout=90)
    assert _columns(kubectl, "-n", "upgradebot", "servicemonitors") == ["NAME", "AGE"]
    monitor = kubectl.json("-n", "upgradebot", "get", "servicemonitor", "upgradebot")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    resources = kubectl("api-resources", "--api-group=monitoring.coreos.com")
    assert "servicemonitors" in resources and "ServiceMonitor" in resources


def test_get_prints_each_kinds_columns(installed: dict[str, str], kubectl: Kubectl) -> None:
    """``kubectl get`` of each kind the install writes prints the API server's printer columns."""
    assert _columns(kubectl, "-n", "upgradebot", "secret") == ["NAME", "TYPE", "DATA", "AGE"]
    secrets = kubectl("-n", "upgradebot", "get", "secret", "upgradebot-slack")
    assert secrets.splitlines()[1].split()[:3] == ["upgradebot-slack", "Opaque", "2"]
    assert _columns(kubectl, "-n", "upgradebot", "svc") == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    redis = kubectl("-n", "upgradebot", "get", "svc", "upgradebot-redis").splitlines()[1].split()
    assert redis[1] == "ClusterIP" and redis[2].startswith("10.9") and redis[3:5] == ["<none>", "6379/TCP"]
    assert _columns(kubectl, "-n", "upgradebot", "netpol") == ["NAME", "POD-SELECTOR", "AGE"]
    assert _columns(kubectl, "-n", "upgradebot", "ingress") == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert "upgradebot.example.com" in kubectl("-n", "upgradebot", "get", "ingress")
    assert _columns(kubectl, "-n", "upgradebot", "cm")[:2] == ["NAME", "DATA"]
    assert _columns(kubectl, "-n", "upgradebot", "sa")[:2] == ["NAME", "SECRETS"]
    assert _columns(kubectl, "pc")[:3] == ["NAME", "VALUE", "GLOBAL-DEFAULT"]
    names = {line.split()[0] for line in kubectl("get", "pc").splitlines()[1:]}
    assert {"system-node-critical", "system-cluster-critical"} <= names
    _apply_json(kubectl, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "upgradebot-leader", "namespace": "upgradebot"},
                          "spec": {"holderIdentity": "upgradebot-0", "leaseDurationSeconds": 15}})
    assert _columns(kubectl, "-n", "upgradebot", "lease") == ["NAME", "HOLDER", "AGE"]
    assert "upgradebot-0" in kubectl("-n", "upgradebot", "get", "lease")
    assert _columns(kubectl, "crd") == ["NAME", "CREATED AT"]


def test_service_cluster_ips_are_unique(installed: dict[str, str], kubectl: Kubectl) -> None:
    """Each Service gets its own cluster IP from the service CIDR; one asked for that is taken is refused."""
    services = kubectl.json("get", "svc", "-A")["items"]
    ips = [s["spec"]["clusterIP"] for s in services]
    assert len(ips) == len(set(ips)) >= 4
    taken = kubectl.json("-n", "upgradebot", "get", "svc", "upgradebot-redis")["spec"]["clusterIP"]
    proc = kubectl.run("apply", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "copycat", "namespace": "upgradebot"},
        "spec": {"clusterIP": taken, "ports": [{"port": 80}]}}))
    assert proc.returncode != 0 and "provided IP is already allocated" in proc.stderr


def test_secret_string_data_and_type_defaulted_values_never_logged(
        installed: dict[str, str], sim: KubeSim, kubectl: Kubectl, caplog: pytest.LogCaptureFixture) -> None:
    """``stringData`` is merged into ``data`` (base64) and never stored; ``type`` defaults to Opaque;
    no Secret value appears in kubesim's request log or its logs."""
    caplog.set_level(logging.DEBUG)
    _apply_json(kubectl, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mixed", "namespace": "upgradebot"},
                          "data": {"a": "YQ=="}, "stringData": {"b": "issue34-string-data-value"}})
    stored = kubectl.json("-n", "upgradebot", "get", "secret", "mixed")
    assert stored["type"] == "Opaque" and "stringData" not in stored
    assert stored["data"] == {"a": "YQ==", "b": "aXNzdWUzNC1zdHJpbmctZGF0YS12YWx1ZQ=="}
    trail = json.dumps(sim.mutations()) + caplog.text + kubectl("get", "events", "-A", "-o", "json")
    for value in (SLACK_TOKEN, REDIS_PASSWORD, "issue34-string-data-value"):
        assert value not in trail


def test_pod_with_missing_secret_stays_create_container_config_error(installed: dict[str, str],
                                                                     kubectl: Kubectl) -> None:
    """Issue 34 done-when: a pod referencing a missing Secret does not start on kubesim (its container
    waits CreateContainerConfigError, ``rollout status`` times out) until the Secret is created."""
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "needs-secret", "namespace": "upgradebot"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "needs-secret"}},
                 "template": {"metadata": {"labels": {"app": "needs-secret"}}, "spec": {
                     "securityContext": RESTRICTED_POD,
                     "containers": [{
                     "name": "app", "image": "registry.example.com/app:1.0",
                     "securityContext": RESTRICTED_CONTAINER,
                     "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}},
                             {"name": "MAYBE", "valueFrom": {"secretKeyRef": {
                                 "name": "never", "key": "x", "optional": True}}}]}]}}}}
    _apply_json(kubectl, deployment)
    proc = kubectl.run("-n", "upgradebot", "rollout", "status", "deployment/needs-secret", "--timeout=5s",
                       check=False, timeout=60)
    assert proc.returncode != 0 and "timed out" in proc.stderr

    def waiting() -> dict | None:
        pods = kubectl.json("-n", "upgradebot", "get", "pods", "-l", "app=needs-secret")["items"]
        states = [s["state"] for p in pods for s in (p.get("status") or {}).get("containerStatuses") or []]
        return states[0].get("waiting") if states and "waiting" in states[0] else None

    state = wait_for(lambda: (w := waiting()) and w.get("reason") == "CreateContainerConfigError" and w)
    assert state["message"] == 'secret "late" not found'
    assert "CreateContainerConfigError" in kubectl("-n", "upgradebot", "get", "pods", "-l", "app=needs-secret")
    described = kubectl("-n", "upgradebot", "describe", "pod", "-l", "app=needs-secret")
    assert "Reason:       CreateContainerConfigError" in described
    assert 'Error: secret "late" not found' in described

    kubectl("-n", "upgradebot", "create", "secret", "generic", "late", "--from-literal=token=t")
    out = kubectl("-n", "upgradebot", "rollout", "status", "deployment/needs-secret", "--timeout=60s", timeout=90)
    assert 'deployment "needs-secret" successfully rolled out' in out


def test_pod_with_missing_config_map_volume_is_not_mounted(installed: dict[str, str], kubectl: Kubectl) -> None:
    """A ConfigMap volume that does not exist holds the pod ContainerCreating with FailedMount, as a kubelet does."""
    _apply_json(kubectl, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "needs-cm", "namespace": "upgradebot"},
                          "spec": {"securityContext": RESTRICTED_POD,
                                   "containers": [{"name": "app", "image": "registry.example.com/app:1.0",
                                                   "securityContext": RESTRICTED_CONTAINER}],
                                   "volumes": [{"name": "conf", "configMap": {"name": "later"}}]}})
    events = lambda: kubectl("-n", "upgradebot", "get", "events", "--field-selector",  # noqa: E731
                             "involvedObject.name=needs-cm")
    wait_for(lambda: "FailedMount" in events())
    assert 'MountVolume.SetUp failed for volume "conf" : configmap "later" not found' in events()
    assert kubectl.json("-n", "upgradebot", "get", "pod", "needs-cm")["status"]["phase"] == "Pending"
    kubectl("-n", "upgradebot", "create", "configmap", "later", "--from-literal=k=v")
    kubectl("-n", "upgradebot", "wait", "--for=condition=Ready", "pod/needs-cm", "--timeout=60s", timeout=90)


def test_user_priority_class_admits_pods(installed: dict[str, str], kubectl: Kubectl) -> None:
    """A PriorityClass created with ``kubectl create priorityclass`` (protobuf) admits pods naming it, a
    pod's and a DaemonSet's, with its value; a class that does not exist is refused by the Priority admission."""
    kubectl("create", "priorityclass", "issue34-high", "--value=4242", "--description=test")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "prio", "namespace": "upgradebot"},
           "spec": {"priorityClassName": "issue34-high", "securityContext": RESTRICTED_POD,
                    "containers": [{"name": "app", "image": "registry.example.com/app:1.0",
                                    "securityContext": RESTRICTED_CONTAINER}]}}
    _apply_json(kubectl, pod)
    assert kubectl.json("-n", "upgradebot", "get", "pod", "prio")["spec"]["priority"] == 4242
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "prio-ds", "namespace": "upgradebot"},
                 "spec": {"selector": {"matchLabels": {"app": "prio-ds"}}, "template": {
                     "metadata": {"labels": {"app": "prio-ds"}},
                     "spec": {"priorityClassName": "issue34-high", "nodeSelector": {"kubernetes.io/hostname": "cpu-node1"},
                              "securityContext": RESTRICTED_POD,
                              "containers": [{"name": "agent", "image": "registry.example.com/agent:1.0",
                                              "securityContext": RESTRICTED_CONTAINER}]}}}}
    _apply_json(kubectl, daemonset)
    pods = wait_for(lambda: kubectl.json("-n", "upgradebot", "get", "pods", "-l", "app=prio-ds")["items"])
    assert [p["spec"]["priority"] for p in pods] == [4242]
    pod["metadata"]["name"], pod["spec"]["priorityClassName"] = "prio-missing", "issue34-none"
    proc = kubectl.run("apply", "-f", "-", check=False, input=json.dumps(pod))
    assert proc.returncode != 0 and "no PriorityClass with name issue34-none was found" in proc.stderr


CREATES = [
    ("-n", "proto", "create", "secret", "generic", "s1", "--from-literal=a=b", "--type=kubernetes.io/basic-auth"),
    ("-n", "proto", "create", "secret", "docker-registry", "pull", "--docker-username=u", "--docker-password=p"),
    ("-n", "proto", "create", "configmap", "c1", "--from-literal=a=b"),
    ("-n", "proto", "create", "serviceaccount", "sa1"),
    ("create", "priorityclass", "p1", "--value=7", "--description=hi", "--preemption-policy=Never"),
    ("-n", "proto", "create", "service", "clusterip", "svc1", "--tcp=80:8080", "--tcp=443:https"),
    ("-n", "proto", "create", "service", "nodeport", "np1", "--tcp=80:8080", "--node-port=30080"),
    ("-n", "proto", "create", "deployment", "d1", "--image=registry.example.com/app:1", "--replicas=2", "--port=80"),
    ("-n", "proto", "create", "job", "j1", "--image=registry.example.com/app:1", "--", "run", "--once"),
    ("-n", "proto", "create", "role", "r1", "--verb=get", "--verb=list", "--resource=pods", "--resource-name=a"),
    ("create", "clusterrole", "cr1", "--verb=get", "--resource=nodes"),
    ("-n", "proto", "create", "rolebinding", "rb1", "--role=r1", "--serviceaccount=proto:sa1", "--user=bob"),
    ("create", "clusterrolebinding", "crb1", "--clusterrole=cr1", "--group=g1"),
    ("-n", "proto", "create", "pdb", "pdb1", "--selector=a=b", "--min-available=50%"),
    ("-n", "proto", "create", "ingress", "i1", "--class=nginx", "--rule=foo.com/bar*=svc1:8080,tls=my-cert",
     "--default-backend=defsvc:http"),
]


def _missing(sent: object, stored: object, path: str = "") -> list[str]:
    """Where ``stored`` lacks a field of ``sent`` or holds another value."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [m for k, v in sent.items() if k not in ("creationTimestamp", "status")
                for m in (_missing(v, stored[k], f"{path}.{k}") if k in stored else [f"{path}.{k}"])]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(sent) != len(stored):
            return [path]
        return [m for i, (a, b) in enumerate(zip(sent, stored, strict=True)) for m in _missing(a, b, f"{path}[{i}]")]
    return [] if sent == stored else [f"{path}: {sent!r} != {stored!r}"]


def test_kubectl_create_protobuf_bodies_store_what_dry_run_shows(installed: dict[str, str], kubectl: Kubectl) -> None:
    """Issue 34 item 1: every ``kubectl create`` subcommand that sends protobuf is read field by field:
    the stored object holds everything ``--dry-run=client -o json`` shows kubectl would send."""
    kubectl("create", "namespace", "proto")
    for args in CREATES:
        flags = args.index("--") if "--" in args else len(args)  # before a command for the container
        sent = json.loads(kubectl(*args[:flags], "--dry-run=client", "-o", "json", *args[flags:]))
        kubectl(*args)
        namespace = ["-n", "proto"] if args[0] == "-n" else []
        stored = kubectl.json(*namespace, "get", sent["kind"].lower(), sent["metadata"]["name"])
        assert _missing(sent, stored) == [], args


CUDA_SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"


def _job(name: str, **spec: object) -> dict:
    container: dict = {"name": "sample", "image": CUDA_SAMPLE, "securityContext": RESTRICTED_CONTAINER}
    if spec.pop("gpu", True):
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "upgradebot"},
            "spec": {**spec, "template": {"spec": {"restartPolicy": "Never", "securityContext": RESTRICTED_POD,
                                                    "containers": [container]}}}}


def test_jobs_run_to_completion_or_their_backoff_limit(installed: dict[str, str], kubectl: Kubectl) -> None:
    """batch/v1 Jobs are served with their controller: a CUDA sample given a GPU completes (``kubectl wait
    --for=condition=complete``); one without a GPU fails past its backoffLimit; ``get jobs`` prints the
    printer's columns; a template that may restart is refused."""
    _apply_json(kubectl, _job("vectoradd"), _job("no-gpu", gpu=False, backoffLimit=1))
    kubectl("-n", "upgradebot", "wait", "--for=condition=complete", "job/vectoradd", "--timeout=60s", timeout=90)
    kubectl("-n", "upgradebot", "wait", "--for=condition=failed", "job/no-gpu", "--timeout=60s", timeout=90)
    assert "Test PASSED" in kubectl("-n", "upgradebot", "logs", "job/vectoradd")
    failed = kubectl.json("-n", "upgradebot", "get", "job", "no-gpu")
    assert failed["status"]["failed"] == 2 and failed["status"]["conditions"][-1]["reason"] == "BackoffLimitExceeded"
    assert _columns(kubectl, "-n", "upgradebot", "jobs") == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    rows = {line.split()[0]: line.split()[1:3] for line in kubectl("-n", "upgradebot", "get", "jobs").splitlines()[1:]}
    assert rows["vectoradd"] == ["Complete", "1/1"] and rows["no-gpu"] == ["Failed", "0/1"]
    bad = _job("restarts")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    proc = kubectl.run("apply", "-f", "-", check=False, input=json.dumps(bad))
    assert proc.returncode != 0 and 'Unsupported value: "Always": supported values: "OnFailure", "Never"' in proc.stderr


def test_crd_kinds_are_served_until_the_crd_is_deleted(installed: dict[str, str], kubectl: Kubectl) -> None:
    """A CRD's kind is served once the CRD is Established (created, read by its short name, listed with its
    additionalPrinterColumns) and is gone, objects and all, once the CRD is deleted."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "widgets.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                    "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                  "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                                                               {"name": "Age", "type": "date",
                                                                "jsonPath": ".metadata.creationTimestamp"}],
                                  "schema": {"openAPIV3Schema": {"type": "object",
                                                                 "x-kubernetes-preserve-unknown-fields": True}}}]}}
    _apply_json(kubectl, crd)
    kubectl("wait", "--for=condition=established", "crd/widgets.example.com", "--timeout=30s")
    status = kubectl.json("get", "crd", "widgets.example.com")["status"]
    assert status["acceptedNames"]["listKind"] == "WidgetList" and status["storedVersions"] == ["v1"]
    _apply_json(kubectl, {"apiVersion": "example.com/v1", "kind": "Widget",
                          "metadata": {"name": "w1", "namespace": "upgradebot"}, "spec": {"size": 3}})
    assert kubectl.json("-n", "upgradebot", "get", "wd", "w1")["spec"] == {"size": 3}
    table = kubectl("-n", "upgradebot", "get", "widgets")
    assert _columns(kubectl, "-n", "upgradebot", "widgets") == ["NAME", "SIZE", "AGE"]
    assert table.splitlines()[1].split()[:2] == ["w1", "3"]
    kubectl("delete", "crd", "widgets.example.com")
    proc = kubectl.run("get", "--raw", "/apis/example.com/v1/namespaces/upgradebot/widgets/w1", check=False)
    assert proc.returncode != 0 and "the server could not find the requested resource" in proc.stderr
    assert "example.com" not in kubectl("get", "--raw", "/apis")
