"""kubesim authorizes like the API server's RBAC authorizer, refereed by the real kubectl.

ServiceAccounts get tokens (``kubectl create token``); a request with such a token is
allowed only by a Role or ClusterRole bound to the account (verbs, API groups, resources,
subresources, ``resourceNames``, ``nonResourceURLs``) and refused with the API server's
own 403; ``kubectl auth can-i`` asks a SelfSubjectAccessReview. The kubeconfig's admin
token keeps every right.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubesim import KubeSim
from tests.support import Kubectl

pytestmark = pytest.mark.conformance

NS = "kube-system"
DS = "nvidia-device-plugin-daemonset"
SA = "system:serviceaccount:rbac-test:bot"
RULES = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: bot-read}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, list, watch]}
  - {apiGroups: [apps], resources: [daemonsets], verbs: [get, list]}
  - {nonResourceURLs: [/metrics], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: bot-read}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: bot-read}
subjects: [{kind: ServiceAccount, name: bot, namespace: rbac-test}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bot-plugin, namespace: kube-system}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [get, list]}
  - {apiGroups: [apps], resources: [daemonsets], resourceNames: [nvidia-device-plugin-daemonset], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bot-plugin, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: bot-plugin}
subjects: [{kind: ServiceAccount, name: bot, namespace: rbac-test}]
"""


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.31") as s:
        yield s


@pytest.fixture(scope="module")
def admin(sim: KubeSim) -> Kubectl:
    return Kubectl(sim.kubeconfig)


@pytest.fixture(scope="module")
def bot(sim: KubeSim, admin: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """kubectl as the ServiceAccount rbac-test/bot, with the token ``kubectl create token`` minted."""
    # `kubectl create namespace|serviceaccount` send protobuf, which kubesim does not read yet: apply is JSON
    admin("apply", "-f", "-", input="apiVersion: v1\nkind: Namespace\nmetadata: {name: rbac-test}\n---\n"
          "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: bot, namespace: rbac-test}\n")
    admin("apply", "-f", "-", input=RULES)
    token = admin("create", "token", "bot", "-n", "rbac-test").strip()
    assert token.count(".") == 2, token  # a JWT, as the API server mints
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": token}
    path = tmp_path_factory.mktemp("bot") / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Kubectl(path)


def refused(proc: object, message: str) -> None:
    assert proc.returncode != 0, proc.stdout  # type: ignore[attr-defined]
    assert "Error from server (Forbidden)" in proc.stderr and message in proc.stderr, proc.stderr  # type: ignore[attr-defined]


def test_bound_rules_allow_and_everything_else_is_forbidden(bot: Kubectl) -> None:
    assert "gpu-node1" in bot("get", "nodes")
    assert DS in bot("get", "daemonsets", "-n", NS)
    assert bot("get", "pods", "-n", NS, "-o", "name")
    refused(bot.run("get", "pods", "-n", "default", check=False),
            f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" in the namespace "default"')
    refused(bot.run("delete", "pod", "-n", NS, "--all", check=False),
            f'is forbidden: User "{SA}" cannot delete resource "pods" in API group "" in the namespace "{NS}"')
    refused(bot.run("get", "namespaces", check=False),
            f'namespaces is forbidden: User "{SA}" cannot list resource "namespaces" in API group "" at the cluster scope')
    refused(bot.run("get", "configmaps", "-n", NS, check=False), 'cannot list resource "configmaps"')
    refused(bot.run("get", "roles", "-n", NS, check=False),
            'cannot list resource "roles" in API group "rbac.authorization.k8s.io" in the namespace "kube-system"')


def test_resource_names_and_subresources(bot: Kubectl, admin: Kubectl) -> None:
    patch = '{"metadata":{"annotations":{"rbac-test":"yes"}}}'
    bot("patch", "daemonset", DS, "-n", NS, "--type=merge", "-p", patch)
    assert admin.json("get", "daemonset", DS, "-n", NS)["metadata"]["annotations"]["rbac-test"] == "yes"
    refused(bot.run("patch", "daemonset", "dra-example-driver-kubeletplugin", "-n", "dra-example-driver",
                    "--type=merge", "-p", patch, check=False),
            f'daemonsets.apps "dra-example-driver-kubeletplugin" is forbidden: User "{SA}" cannot patch resource '
            '"daemonsets" in API group "apps" in the namespace "dra-example-driver"')
    pod = bot("get", "pods", "-n", NS, "-o", "name").split()[0].removeprefix("pod/")
    refused(bot.run("logs", pod, "-n", NS, check=False), 'cannot get resource "pods/log" in API group ""')


def test_kubectl_auth_can_i(bot: Kubectl) -> None:
    assert bot.run("auth", "can-i", "list", "pods", "-n", NS).stdout.strip() == "yes"
    assert bot.run("auth", "can-i", "patch", f"daemonsets/{DS}", "-n", NS).stdout.strip() == "yes"
    no = bot.run("auth", "can-i", "patch", "daemonsets", "-n", NS, check=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no")
    assert bot.run("auth", "can-i", "get", "/metrics").stdout.strip() == "yes"
    assert bot.run("auth", "can-i", "get", "/logs", check=False).stdout.strip() == "no"


def test_non_resource_urls_and_discovery(bot: Kubectl) -> None:
    assert "apps/v1" in bot("api-versions")  # discovery: every authenticated user
    assert bot("get", "--raw", "/metrics")
    proc = bot.run("get", "--raw", "/openapi/v2x", check=False)
    assert "NotFound" in proc.stderr or "not found" in proc.stderr.lower()


def test_an_unknown_token_is_unauthorized_and_the_admin_keeps_every_right(sim: KubeSim, admin: Kubectl,
                                                                           tmp_path: Path) -> None:
    config = yaml.safe_load(Path(sim.kubeconfig).read_text())
    config["users"][0]["user"] = {"token": "not-a-token"}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    proc = Kubectl(path).run("get", "nodes", check=False)
    assert proc.returncode != 0 and "You must be logged in to the server" in proc.stderr
    assert "bot-plugin" in admin("get", "roles", "-A") and admin("auth", "can-i", "*", "*").strip() == "yes"


def test_a_token_for_an_account_that_does_not_exist_is_refused(admin: Kubectl) -> None:
    proc = admin.run("create", "token", "nobody", "-n", "rbac-test", check=False)
    assert proc.returncode != 0 and 'serviceaccounts "nobody" not found' in proc.stderr


def review(kubectl: Kubectl, spec: dict[str, object]) -> dict[str, object]:
    """A SelfSubjectAccessReview's status, as kubectl creates one (its JSON printed back)."""
    body = json.dumps({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec})
    return json.loads(kubectl("create", "-f", "-", "-o", "json", input=body))["status"]


def test_self_subject_access_reviews_carry_the_rbac_authorizers_reason(bot: Kubectl, admin: Kubectl) -> None:
    """The reason RBAC gives (kubernetes v1.34.2 plugin/pkg/auth/authorizer/rbac/rbac.go ``RBAC: allowed by
    %s``; pkg/registry/rbac/validation/rule.go's binding describers and ``describeSubject``); none when
    refused; none for ``system:masters``, allowed before RBAC by the privileged-group authorizer."""
    account = 'to ServiceAccount "bot/rbac-test"'
    assert review(bot, {"resourceAttributes": {"verb": "list", "resource": "nodes"}}) == {
        "allowed": True, "reason": f'RBAC: allowed by ClusterRoleBinding "bot-read" of ClusterRole "bot-read" {account}'}
    assert review(bot, {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": NS}}) == {
        "allowed": True, "reason": f'RBAC: allowed by RoleBinding "bot-plugin/kube-system" of Role "bot-plugin" {account}'}
    assert review(bot, {"nonResourceAttributes": {"verb": "get", "path": "/apis"}}) == {
        "allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "system:discovery" of ClusterRole '
                                   '"system:discovery" to Group "system:authenticated"'}
    assert review(bot, {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}) == {"allowed": False}
    assert review(admin, {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}) == {"allowed": True}
