"""Pure parts of the cluster adapter: retry policy, error wording, secret scrubbing."""

from __future__ import annotations

import json

import pytest

from runbooks.cluster.retrying import RetryPolicy, call_with_retries
from runbooks.cluster.wrapping import error_for_status
from runbooks.errors import (
    Action,
    AdmissionRefused,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerBusy,
    TemporaryClusterError,
    Unauthorized,
    redact_url,
    scrub,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


def failing(times: int, retry_after: float | None = None):
    calls = {"n": 0}

    def fn() -> str:
        calls["n"] += 1
        if calls["n"] <= times:
            raise ServerBusy("busy", retry_after=retry_after)
        return "ok"

    return fn, calls


def test_retries_until_success_with_growing_backoff() -> None:
    """Temporary errors are retried with exponential backoff until the call succeeds."""
    clock = FakeClock()
    fn, calls = failing(3)
    policy = RetryPolicy(jitter=0)
    assert call_with_retries(fn, policy, sleep=clock.sleep, monotonic=clock.monotonic) == "ok"
    assert calls["n"] == 4
    assert clock.sleeps == [0.2, 0.4, 0.8]


def test_retry_after_is_honoured() -> None:
    """A Retry-After longer than the backoff is waited for."""
    clock = FakeClock()
    fn, _ = failing(1, retry_after=3)
    call_with_retries(fn, RetryPolicy(jitter=0), sleep=clock.sleep, monotonic=clock.monotonic)
    assert clock.sleeps == [3]


def test_retries_are_bounded_in_time_and_say_so() -> None:
    """Retries stop at the deadline and the error says how many tries were made."""
    clock = FakeClock()
    fn, calls = failing(100)
    policy = RetryPolicy(attempts=100, deadline=10, jitter=0)
    with pytest.raises(TemporaryClusterError, match="gave up after"):
        call_with_retries(fn, policy, sleep=clock.sleep, monotonic=clock.monotonic)
    assert clock.now <= 10
    assert calls["n"] < 100


def test_permanent_errors_are_not_retried() -> None:
    """A permanent error is raised at once."""
    calls = {"n": 0}

    def fn() -> None:
        calls["n"] += 1
        raise NotFound("gone")

    with pytest.raises(NotFound):
        call_with_retries(fn, RetryPolicy())
    assert calls["n"] == 1


def _status(message: str, code: int) -> bytes:
    return json.dumps({"kind": "Status", "message": message, "code": code}).encode()


def test_forbidden_names_verb_resource_and_where_to_grant() -> None:
    """A 403 says which verb on which resource the ServiceAccount lacks, and where to grant it."""
    body = _status('daemonsets.apps is forbidden: User "system:serviceaccount:upgradebot:upgradebot" cannot list resource "daemonsets"', 403)
    error = error_for_status(403, body, {}, action=Action("list", "daemonsets.apps", "kube-system"), context="prod")
    assert isinstance(error, Forbidden)
    assert str(error) == (
        "the bot's ServiceAccount (system:serviceaccount:upgradebot:upgradebot) may not list daemonsets.apps "
        'in namespace kube-system: its RBAC lacks the rule {apiGroups: ["apps"], resources: [daemonsets], '
        "verbs: [list]} in its ClusterRole (`upgradebot rbac` prints every rule the policy needs; "
        "docs/operations.md#rbac explains them), "
        "or use a kubeconfig context that may"
    )


@pytest.mark.parametrize(("action", "rule", "where"), [
    (Action("patch", "daemonsets.apps", "kube-system", "nvidia-device-plugin-daemonset"),
     '{apiGroups: ["apps"], resources: [daemonsets], verbs: [patch], resourceNames: [nvidia-device-plugin-daemonset]}',
     "a Role of namespace kube-system"),
    (Action("delete", "pods", "kube-system", "nvidia-device-plugin-daemonset-x7k2p"),
     '{apiGroups: [""], resources: [pods], verbs: [delete]}', "a Role of namespace kube-system"),
    (Action("get", "pods/log", "kube-system", "p"), '{apiGroups: [""], resources: [pods/log], verbs: [get]}',
     "its ClusterRole"),
    (Action("list", "resourceslices.resource.k8s.io"),
     '{apiGroups: ["resource.k8s.io"], resources: [resourceslices], verbs: [list]}', "its ClusterRole"),
    (Action("get", "/metrics"), "{nonResourceURLs: [/metrics], verbs: [get]}", "its ClusterRole"),
])
def test_a_refusal_names_the_missing_rule_and_where_it_goes(action: Action, rule: str, where: str) -> None:
    error = error_for_status(403, _status('forbidden: User "system:serviceaccount:upgradebot:upgradebot"', 403),
                             {}, action=action, context="prod")
    assert f"its RBAC lacks the rule {rule} in {where} (`upgradebot rbac`" in str(error)


def test_statuses_map_to_the_hierarchy_and_bodies_are_cut() -> None:
    """Each HTTP status maps to one error type; long server messages are shortened to one line."""
    action = Action("get", "pods", "ns", "p")
    long_body = _status("x" * 5000, 422)
    invalid = error_for_status(422, long_body, {}, action=action, context="c")
    assert isinstance(invalid, InvalidRequest) and len(str(invalid)) < 500
    busy = error_for_status(429, b"", {"Retry-After": "7"}, action=action, context="c")
    assert isinstance(busy, ServerBusy) and busy.retry_after == 7 and busy.retryable
    assert isinstance(error_for_status(401, b"", {}, action=action, context="c"), Unauthorized)
    assert isinstance(error_for_status(503, b"", {}, action=action, context="c"), ServerBusy)


def test_scrub_removes_credentials() -> None:
    """Bearer tokens, token fields, JWTs, PEM blocks and known secrets never reach a message."""
    text = (
        "Authorization: Bearer abc.def token: s3cr3t-value eyJhbGciOi.eyJzdWIiOi.sig "
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE----- mysecretvalue1"
    )
    clean = scrub(text, "mysecretvalue1")
    for secret in ("abc.def", "s3cr3t-value", "eyJhbGciOi", "MIIB", "mysecretvalue1"):
        assert secret not in clean


def test_in_cluster_outside_a_pod_says_what_to_do() -> None:
    """Outside a pod, in-cluster configuration fails with a sentence that points at KUBECONFIG."""
    from runbooks.cluster import Cluster
    from runbooks.errors import ClusterConfigError

    with pytest.raises(ClusterConfigError, match="set KUBECONFIG or pass --kubeconfig"):
        Cluster.in_cluster()


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://ops:s3cret@h:6379/0?password=s3cret&db=1#x", "redis://ops:***@h:6379/0?password=***&db=1#x"),
    ("rediss://:s3cret@h", "rediss://:***@h"),
    ("unix:///run/redis.sock?db=0&password=s3cret", "unix:///run/redis.sock?db=0&password=***"),
    ("https://api.example/x?access_token=s3cret&page=2", "https://api.example/x?access_token=***&page=2"),
    ("https://slack.com/api/", "https://slack.com/api/"),
])
def test_urls_are_printed_without_their_secrets(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in scrub(f"cannot reach {url}: refused")


_PSA = ('pods "upgradebot-smoke-1a2b3c" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "smoke" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "smoke" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "smoke" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "smoke" must set securityContext.seccompProfile.type to "RuntimeDefault" '
        'or "Localhost")')


@pytest.mark.parametrize(("message", "admission"), [
    (_PSA, "Pod Security admission"),
    ('pods "p" is forbidden: error looking up service account ml/trainer: serviceaccount "trainer" not found',
     "ServiceAccount admission"),
    ('pods "p" is forbidden: unable to create new content in namespace ml because it is being terminated',
     "NamespaceLifecycle admission"),
    ('pods "p" is forbidden: pod rejected: RuntimeClass "nvidia" not found', "RuntimeClass admission"),
    ('admission webhook "validate.kyverno.svc" denied the request: image must be signed', 'admission webhook '
     '"validate.kyverno.svc"'),
    ('pods "p" is forbidden: exceeded quota: compute, requested: nvidia.com/gpu=1, used: nvidia.com/gpu=8, '
     'limited: nvidia.com/gpu=8', "ResourceQuota admission"),
    ('pods "p" is forbidden: something a plugin we do not know says', "an admission plugin"),
])
def test_a_403_from_admission_quotes_the_server_and_never_blames_rbac(message: str, admission: str) -> None:
    """A 403 whose message is not the authorizer's (``forbidden: User "…" cannot …``) is an admission
    refusal: it is reported as such, naming the admission and quoting the server, never as missing RBAC,
    whoever the bot is (here a cluster admin)."""
    action = Action("create", "pods", "gpu-smoke", "upgradebot-smoke-1a2b3c")
    error = error_for_status(403, _status(message, 403), {}, action=action, context="prod")
    assert isinstance(error, AdmissionRefused)
    assert not isinstance(error, Forbidden)
    assert "RBAC" not in str(error) and "rbac" not in str(error)
    assert admission in str(error)
    assert message[:120] in str(error)
    assert error.detail.startswith(message[:120])
    assert admission in error.admission


@pytest.mark.parametrize("message", [
    'pods is forbidden: User "kubernetes-admin" cannot create resource "pods" in API group "" in the namespace "x"',
    'daemonsets.apps "d" is forbidden: User "u" cannot patch resource "daemonsets" in API group "apps" '
    'in the namespace "kube-system": RBAC: role.rbac.authorization.k8s.io "r" not found',
    'forbidden: User "system:serviceaccount:upgradebot:upgradebot" cannot get path "/metrics"',
    "",
])
def test_a_403_from_the_authorizer_stays_an_rbac_refusal(message: str) -> None:
    """The authorizer's message (apiserver's ``forbiddenMessage``), or no message at all, is RBAC."""
    error = error_for_status(403, _status(message, 403) if message else b"", {},
                             action=Action("create", "pods", "x"), context="prod")
    assert isinstance(error, Forbidden)
    assert "its RBAC lacks the rule" in str(error)
