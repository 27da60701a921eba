"""Draining a node, refereed by the real kubectl and the official client: PodDisruptionBudgets
(``policy/v1``, kubectl's columns, the disruption controller's status), the ``pods/eviction``
subresource with the API server's answers (201, 404, 409, 429 with the budget's cause, 500
for two budgets), cordon and uncordon (the ``node.kubernetes.io/unschedulable`` taint, the
scheduler keeping new pods off the node) and ``kubectl drain`` itself, which evicts within the
budget, retries what the budget refuses and refuses bare pods without ``--force``.

The workload: a Deployment in ``ml-team`` whose three pods each ask for one ``nvidia.com/gpu``
(the scheduler puts all three on ``gpu-node3``, the node with the most free GPUs) and a
budget of ``minAvailable: 2`` over them. Every test has a cluster of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim import KubeSim
from tests.support import TEST_BUILDS, Kubectl

pytestmark = pytest.mark.conformance

NS = "ml-team"
APP = "gpu-job"
IMAGE = "registry.example.com/ml/worker:3.0.2"
SLOW = "registry.example.com/ml/worker:3.0.2-slow"  # pulls for 180 s: a replacement is not Ready soon
PDBS = ("policy", "poddisruptionbudgets")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
TWO_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31") as s:
        yield s


@pytest.fixture
def kubectl(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


@pytest.fixture
def core(sim: KubeSim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig), context="kubesim"))


def deployment(name: str = APP, replicas: int = 3, image: str = IMAGE) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "worker", "image": image, "resources": {
                                      "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def budget(name: str = APP, app: str = APP, **spec: Any) -> dict[str, Any]:
    spec = spec or {"minAvailable": 2}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": NS},
            "spec": {**spec, "selector": {"matchLabels": {"app": app}}}}


def apply(kubectl: Kubectl, *objs: dict[str, Any]) -> str:
    return kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def workload(sim: KubeSim, kubectl: Kubectl, replicas: int = 3, image: str = IMAGE,
             **spec: Any) -> list[dict[str, Any]]:
    """The Deployment and its budget, settled: every pod Running and Ready, the budget's status current."""
    apply(kubectl, deployment(replicas=replicas, image=image), budget(**spec))
    sim.advance("200s" if image == SLOW else "10s")
    pods = pods_of(kubectl)
    assert len(pods) == replicas and all(ready(p) for p in pods), [p["status"] for p in pods]
    return pods


def replicas(kubectl: Kubectl, count: int) -> None:
    """Scale the Deployment (a patch: kubesim's scale subresource does not answer with a Scale yet)."""
    kubectl("patch", "deployment", APP, "-n", NS, "--type=merge", "-p", json.dumps({"spec": {"replicas": count}}))


def pods_of(kubectl: Kubectl, app: str = APP) -> list[dict[str, Any]]:
    return list(kubectl.json("get", "pods", "-n", NS, "-l", f"app={app}")["items"])


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def pdb_status(kubectl: Kubectl, name: str = APP) -> dict[str, Any]:
    return dict(kubectl.json("get", "pdb", name, "-n", NS)["status"])


def eviction(pod: str, **delete_options: Any) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS},
            "deleteOptions": delete_options}


def evict(core: client.CoreV1Api, pod: str, body: dict[str, Any] | None = None,
          **query: Any) -> tuple[int, dict[str, Any]]:
    """POST the eviction; (HTTP status, the Status the server answered), errors included."""
    try:
        raw = core.create_namespaced_pod_eviction(pod, NS, body or eviction(pod), _preload_content=False, **query)
    except ApiException as exc:
        return exc.status, json.loads(exc.body)
    return raw.status, json.loads(raw.data)


# ------------------------------------------------------------------ PodDisruptionBudgets
@pytest.mark.parametrize("version", ["1.27", "1.31"])
def test_budget_is_served_with_kubectl_columns_and_status(version: str) -> None:
    """policy/v1 PodDisruptionBudget (short name pdb) in discovery; kubectl get prints the printer's
    columns; the disruption controller keeps the status and the DisruptionAllowed condition."""
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version=version) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        resources = kubectl("api-resources", "--api-group=policy")
        assert ["poddisruptionbudgets", "pdb", "policy/v1", "true", "PodDisruptionBudget"] in \
            [line.split() for line in resources.splitlines()], resources
        assert "minAvailable" in kubectl("explain", "pdb.spec")
        workload(sim, kubectl)
        table = kubectl("get", "pdb", "-n", NS).splitlines()
        assert table[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
        assert table[1].split()[:4] == [APP, "2", "N/A", "1"]
        stored = kubectl.json("get", "pdb", APP, "-n", NS)
        status = stored["status"]
        assert {k: status[k] for k in ("observedGeneration", "expectedPods", "currentHealthy", "desiredHealthy",
                                       "disruptionsAllowed")} == {
            "observedGeneration": stored["metadata"]["generation"], "expectedPods": 3, "currentHealthy": 3,
            "desiredHealthy": 2, "disruptionsAllowed": 1}
        [cond] = status["conditions"]
        assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
            "DisruptionAllowed", "True", "SufficientPods", "")

        apply(kubectl, budget("by-percent", maxUnavailable="50%"))
        sim.advance("1s")
        row = kubectl("get", "pdb", "by-percent", "-n", NS, "--no-headers").split()
        assert row[:4] == ["by-percent", "N/A", "50%", "2"]  # 50% of the Deployment's 3, rounded up


def test_budget_validation_is_the_api_servers(kubectl: Kubectl) -> None:
    """minAvailable and maxUnavailable: not both, each a non-negative integer or a percentage up to 100%."""
    both = kubectl.run("apply", "-f", "-", check=False,
                       input=json.dumps(budget("both", minAvailable=1, maxUnavailable=1)))
    assert both.returncode == 1
    assert 'The PodDisruptionBudget "both" is invalid: spec: Invalid value: policy.PodDisruptionBudgetSpec{' \
        in both.stderr, both.stderr
    assert "minAvailable and maxUnavailable cannot be both set" in both.stderr
    over = kubectl.run("apply", "-f", "-", check=False, input=json.dumps(budget("over", minAvailable="150%")))
    assert "spec.minAvailable: Invalid value:" in over.stderr and "must not be greater than 100%" in over.stderr
    negative = kubectl.run("apply", "-f", "-", check=False, input=json.dumps(budget("negative", maxUnavailable=-1)))
    assert "spec.maxUnavailable: Invalid value: -1: must be greater than or equal to 0" in negative.stderr
    word = kubectl.run("apply", "-f", "-", check=False, input=json.dumps(budget("word", minAvailable="half")))
    assert "a valid percent string must be a numeric string followed by an ending '%'" in word.stderr
    assert "No resources found" in kubectl.run("get", "pdb", "-n", NS).stderr


# ------------------------------------------------------------------ kubectl drain
def test_drain_evicts_within_the_budget_cordons_and_uncordon_reopens(sim: KubeSim, kubectl: Kubectl) -> None:
    """kubectl drain cordons the node, evicts the pods one budget at a time (the refused ones are
    retried with the server's 429 message), the replacements run elsewhere; uncordon reopens it."""
    pods = workload(sim, kubectl)
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-node3"}  # most free GPUs
    drained = kubectl.run("drain", "gpu-node3", "--ignore-daemonsets", "--delete-emptydir-data",
                          f"--pod-selector=app={APP}", "--timeout=90s", timeout=120)
    assert drained.returncode == 0, drained.stderr
    assert "node/gpu-node3 cordoned" in drained.stdout and "node/gpu-node3 drained" in drained.stdout
    for pod in pods:
        assert f"pod/{pod['metadata']['name']} evicted" in drained.stdout
    assert BUDGET_MESSAGE in drained.stderr, drained.stderr  # the second eviction waited for a replacement

    node = kubectl.json("get", "node", "gpu-node3")
    assert node["spec"]["unschedulable"] is True
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [(UNSCHEDULABLE, "NoSchedule")]
    assert kubectl("get", "node", "gpu-node3", "--no-headers").split()[1] == "Ready,SchedulingDisabled"
    sim.advance("10s")
    moved = pods_of(kubectl)
    assert len(moved) == 3 and all(ready(p) for p in moved)
    assert not {p["metadata"]["name"] for p in moved} & {p["metadata"]["name"] for p in pods}
    assert "gpu-node3" not in {p["spec"]["nodeName"] for p in moved}
    left = kubectl.json("get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-node3")["items"]
    owners = {p["metadata"]["name"]: [r["kind"] for r in p["metadata"].get("ownerReferences") or []] for p in left}
    assert owners.pop("inference-0") == []  # a bare pod the selector left alone: still running
    assert owners and all(kinds == ["DaemonSet"] for kinds in owners.values()), owners  # ignored, still there
    status = pdb_status(kubectl)
    assert (status["currentHealthy"], status["disruptionsAllowed"], status.get("disruptedPods")) == (3, 1, None)

    replicas(kubectl, 4)  # a cordoned node takes no new pod
    sim.advance("5s")
    assert "gpu-node3" not in {p["spec"]["nodeName"] for p in pods_of(kubectl)}
    assert "node/gpu-node3 uncordoned" in kubectl("uncordon", "gpu-node3")
    node = kubectl.json("get", "node", "gpu-node3")
    assert not node["spec"].get("unschedulable") and not node["spec"].get("taints")
    assert kubectl("get", "node", "gpu-node3", "--no-headers").split()[1] == "Ready"
    replicas(kubectl, 5)
    sim.advance("5s")
    assert "gpu-node3" in {p["spec"]["nodeName"] for p in pods_of(kubectl)}  # the most free GPUs again


def test_drain_gives_up_on_a_budget_that_allows_nothing(sim: KubeSim, kubectl: Kubectl) -> None:
    """A budget of minAvailable 3 over 3 pods: every eviction is refused with 429 until the timeout."""
    workload(sim, kubectl, minAvailable=3)
    assert pdb_status(kubectl)["disruptionsAllowed"] == 0
    drained = kubectl.run("drain", "gpu-node3", "--ignore-daemonsets", f"--pod-selector=app={APP}",
                          "--timeout=4s", check=False, timeout=60)  # kubectl retries a 429 after 5 s, then sees the timeout
    assert drained.returncode == 1
    assert BUDGET_MESSAGE in drained.stderr and "global timeout reached: 4s" in drained.stderr, drained.stderr
    assert len(pods_of(kubectl)) == 3 and {p["spec"]["nodeName"] for p in pods_of(kubectl)} == {"gpu-node3"}


def test_drain_refuses_bare_pods_without_force(sim: KubeSim, kubectl: Kubectl) -> None:
    """gpu-small's trainer pods have no controller: drain refuses them (kubectl's own rule) unless
    --force, and then evicts them through the eviction API (no budget: deleted)."""
    refused = kubectl.run("drain", "gpu-node1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s",
                          check=False, timeout=60)
    assert refused.returncode == 1
    assert "cannot delete Pods that declare no controller (use --force to override): ml-team/trainer-0" \
        in refused.stderr, refused.stderr
    assert kubectl.json("get", "pod", "trainer-0", "-n", NS)["status"]["phase"] == "Running"
    assert kubectl("get", "node", "gpu-node1", "--no-headers").split()[1] == "Ready,SchedulingDisabled"

    forced = kubectl.run("drain", "gpu-node1", "--ignore-daemonsets", "--force", "--timeout=30s", timeout=60)
    assert "deleting Pods that declare no controller: ml-team/trainer-0" in forced.stderr
    assert "pod/trainer-0 evicted" in forced.stdout and "node/gpu-node1 drained" in forced.stdout
    assert kubectl.run("get", "pod", "trainer-0", "-n", NS, check=False).returncode == 1
    kubectl("uncordon", "gpu-node1")


def test_kubectl_create_raw_eviction_refused_by_the_budget(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    """The eviction subresource as kubectl create --raw posts it: 201 Success, then 429 with the
    API server's message once the budget is spent."""
    pods = workload(sim, kubectl, image=SLOW)
    first, second = (p["metadata"]["name"] for p in pods[:2])
    for name in (first, second):
        (tmp_path / f"{name}.json").write_text(json.dumps(eviction(name)))
    path = f"/api/v1/namespaces/{NS}/pods/{{}}/eviction"
    out = json.loads(kubectl("create", "--raw", path.format(first), "-f", str(tmp_path / f"{first}.json")))
    assert out == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    refused = kubectl.run("create", "--raw", path.format(second), "-f", str(tmp_path / f"{second}.json"),
                          check=False)
    assert refused.returncode == 1
    assert f"Error from server (TooManyRequests): {BUDGET_MESSAGE}" in refused.stderr, refused.stderr
    status = pdb_status(kubectl)
    assert status["disruptionsAllowed"] == 0 and status["currentHealthy"] == 2


# ------------------------------------------------------------------ the eviction subresource
def test_eviction_answers(sim: KubeSim, kubectl: Kubectl, core: client.CoreV1Api) -> None:
    """404 for a missing pod; 201 and a graceful delete (the body's deleteOptions honoured) without a
    budget; 201 again for a pod already terminating; 409 for a uid precondition that does not hold."""
    code, body = evict(core, "no-such-pod")
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'pods "no-such-pod" not found')

    trainer = kubectl.json("get", "pod", "trainer-1", "-n", NS)
    code, body = evict(core, "trainer-1", eviction("trainer-1", preconditions={"uid": "not-the-uid"}))
    assert (code, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on Pod "trainer-1": the UID in the precondition (not-the-uid) does not '
        f'match the UID in record ({trainer["metadata"]["uid"]}). The object might have been deleted and then recreated')
    assert not kubectl.json("get", "pod", "trainer-1", "-n", NS)["metadata"].get("deletionTimestamp")

    code, body = evict(core, "trainer-1", eviction("trainer-1", gracePeriodSeconds=20,
                                                    preconditions={"uid": trainer["metadata"]["uid"]}))
    assert (code, body) == (201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201})
    evicted = kubectl.json("get", "pod", "trainer-1", "-n", NS)
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 20 and evicted["metadata"]["deletionTimestamp"]
    target = next(c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"], target["message"]) == (
        "True", "EvictionByEvictionAPI", "Eviction API: evicting")
    assert evict(core, "trainer-1")[0] == 201  # already terminating: evicted again, as the server does
    sim.advance("3s")
    assert kubectl.run("get", "pod", "trainer-1", "-n", NS, check=False).returncode == 1


def test_eviction_budget_answers_429_then_500_for_two_budgets(sim: KubeSim, kubectl: Kubectl,
                                                              core: client.CoreV1Api) -> None:
    """With a budget of 1: the first eviction passes and is recorded in disruptedPods, a second one
    right after is 429 with the budget's cause; a second budget over the pods makes it 500."""
    names = [p["metadata"]["name"] for p in workload(sim, kubectl, image=SLOW)]
    before = sim.call(lambda s: s.store.rv)
    code, _ = evict(core, names[0])
    assert code == 201
    written = sim.call(lambda s: (s.settle(), [e.obj["status"] for e in s.store.history_since(PDBS, before)])[1])
    assert written[0]["disruptionsAllowed"] == 0 and set(written[0]["disruptedPods"]) == {names[0]}
    assert written[-1].get("disruptedPods") is None  # the controller saw the pod terminating
    code, body = evict(core, names[1])
    assert (code, body["reason"], body["message"]) == (429, "TooManyRequests", BUDGET_MESSAGE)
    assert body["details"] == {"causes": [{"reason": "DisruptionBudget",
                                           "message": f"The disruption budget {APP} needs 2 healthy pods and has 2 currently"}]}
    assert not kubectl.json("get", "pod", names[1], "-n", NS)["metadata"].get("deletionTimestamp")
    cond = pdb_status(kubectl)["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "InsufficientPods")

    sim.advance("200s")  # the replacement is Ready: the budget allows one again
    assert pdb_status(kubectl)["disruptionsAllowed"] == 1
    code, _ = evict(core, names[1], dry_run="All")
    assert code == 201 and not kubectl.json("get", "pod", names[1], "-n", NS)["metadata"].get("deletionTimestamp")
    assert pdb_status(kubectl)["disruptionsAllowed"] == 1  # a dry run spends nothing

    apply(kubectl, budget("second", maxUnavailable=1))
    sim.advance("1s")
    code, body = evict(core, names[1])
    assert (code, body["status"], body["message"], body.get("reason")) == (500, "Failure", TWO_BUDGETS, None)


def test_eviction_body_checks_and_v1beta1(kubectl: Kubectl, core: client.CoreV1Api, sim: KubeSim) -> None:
    """The body must name the pod of the URL; policy/v1beta1 Evictions are accepted as well."""
    code, body = evict(core, "trainer-0", eviction("trainer-1"))
    assert (code, body["message"]) == (400, "name in URL does not match name in Eviction object")
    old = {**eviction("trainer-0"), "apiVersion": "policy/v1beta1"}
    assert evict(core, "trainer-0", old)[0] == 201


def test_eviction_is_authorized_as_create_on_pods_eviction(sim: KubeSim, core: client.CoreV1Api) -> None:
    """RBAC asks for verb create on pods/eviction: a Role granting only pods is not enough."""
    user = "system:serviceaccount:ml-team:drainer"

    def setup(s: Any) -> str:
        store = s.store
        store.create(store.storage_type(("", "serviceaccounts")), {"metadata": {"name": "drainer", "namespace": NS}})
        store.create(store.storage_type(("rbac.authorization.k8s.io", "roles")), {
            "metadata": {"name": "drainer", "namespace": NS},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "delete"]}]})
        store.create(store.storage_type(("rbac.authorization.k8s.io", "rolebindings")), {
            "metadata": {"name": "drainer", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "drainer"},
            "subjects": [{"kind": "ServiceAccount", "name": "drainer", "namespace": NS}]})
        return str(s.tokens.mint(NS, "drainer", s.clock.now(), 3600)[0])

    token = sim.call(setup)
    admin = core.api_client.configuration
    own = client.Configuration(host=admin.host, api_key={"authorization": f"Bearer {token}"})
    own.ssl_ca_cert = admin.ssl_ca_cert
    drainer = client.CoreV1Api(client.ApiClient(own))
    code, body = evict(drainer, "trainer-0")
    assert (code, body["message"]) == (403, f'pods "trainer-0" is forbidden: User "{user}" cannot create resource '
                                             f'"pods/eviction" in API group "" in the namespace "{NS}"')

    def grant(s: Any) -> None:
        def add(role: dict[str, Any]) -> None:
            role["rules"].append({"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]})
        s.store.mutate(("rbac.authorization.k8s.io", "roles"), NS, "drainer", add)

    sim.call(grant)
    assert evict(drainer, "trainer-0")[0] == 201
