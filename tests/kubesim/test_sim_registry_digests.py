"""kubesim's registry resolves tags to digests (issue 61, digests pinned): a tag pushed again gets
a new digest, ``imageID`` is the digest the kubelet pulled (``repo@sha256:…``, containerd's repo
digest), a pod naming a digest pulls exactly that one and fails ``ErrImagePull`` with containerd's
``not found`` when the registry has no such digest; the registry answers the OCI distribution API
(``HEAD /v2/<name>/manifests/<ref>?ns=<host>``) as a pull-through mirror does."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from kubesim import KubeSim
from kubesim.podstatus import behaviour, first_digest
from kubesim.registry import Registry
from tests.kubesim.test_kubesim_registry import _control
from tests.support import Kubectl

NS, DS, CTR = "kube-system", "nvidia-device-plugin-daemonset", "nvidia-device-plugin-ctr"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
TAG = f"{PLUGIN}:v0.17.0"


def _not_found(ref: str) -> str:
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
            f'reference "{ref}": {ref}: not found')


def test_a_tag_pushed_again_resolves_to_a_new_digest_and_the_old_one_still_pulls() -> None:
    """A released tag has a digest; pushing it again gives the tag another one, every push a new one;
    the earlier digests still pull by digest (with or without the tag, which containerd drops), and
    keep doing what the bytes pushed as that tag do; a digest the repository never held does not pull."""
    registry = Registry()
    first = registry.resolve(TAG)
    assert first == first_digest(TAG) and registry.image_id(TAG) == f"{PLUGIN}@{first}"
    registry.push(TAG)
    second = registry.resolve(TAG)
    registry.push(TAG)
    third = registry.resolve(TAG)
    assert len({first, second, third}) == 3 and all(d and d.startswith("sha256:") and len(d) == 71
                                                    for d in (second, third))
    for digest in (first, second, third):
        for image in (f"{PLUGIN}@{digest}", f"{TAG}@{digest}"):
            assert registry.has(image) and registry.pull_error(image) is None
            assert registry.image_id(image) == f"{PLUGIN}@{digest}"
    missing = f"{PLUGIN}@sha256:{'0' * 64}"
    assert not registry.has(missing) and registry.pull_error(missing) == _not_found(missing)
    assert registry.pull_error(f"{TAG}@sha256:{'0' * 64}") == _not_found(missing)  # the tag dropped
    other = f"{PLUGIN}-other@{first}"
    assert registry.pull_error(other) == _not_found(other)  # a digest belongs to its repository
    registry.push(f"{PLUGIN}:v0.17.0-crash")
    crashing = registry.resolve(f"{PLUGIN}:v0.17.0-crash")
    assert behaviour(registry.content(f"{PLUGIN}@{crashing}")) == "crash"
    assert behaviour(registry.content(f"{PLUGIN}@{first}")) == "healthy"


def _pod_on(kubectl: Kubectl, node: str) -> dict[str, Any]:
    pods = json.loads(kubectl("get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={node}", "-o", "json"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["metadata"]["name"].startswith(DS)]
    return live[0] if live else {}


def _replace_and_wait(sim: KubeSim, kubectl: Kubectl, node: str, image: str, *, until: str) -> dict[str, Any]:
    """The DaemonSet's container set to ``image`` (OnDelete), the pod on ``node`` deleted; the new pod
    once it is Ready (``until="ready"``) or waits ``ErrImagePull`` (``until="pull"``), on kubesim's clock."""
    kubectl("-n", NS, "patch", "ds", DS, "-p", json.dumps(
        {"spec": {"updateStrategy": {"type": "OnDelete"}, "template": {"spec": {"containers": [
            {"name": CTR, "image": image}]}}}}))
    old = _pod_on(kubectl, node)["metadata"]["name"]
    kubectl("-n", NS, "delete", "pod", old, "--wait=false")
    pod: dict[str, Any] = {}
    for _ in range(120):
        sim.advance("1s")
        pod = _pod_on(kubectl, node)
        if not pod or pod["metadata"]["name"] == old:
            continue
        status = (pod["status"].get("containerStatuses") or [{}])[0]
        if until == "ready" and status.get("ready"):
            return pod
        if until == "pull" and ((status.get("state") or {}).get("waiting") or {}).get("reason") == "ErrImagePull":
            return pod
    raise AssertionError(f"the pod on {node} did not get {until}: {pod.get('status')}")


def test_image_id_is_the_digest_pulled_and_a_pod_naming_a_digest_pulls_that_one() -> None:
    """Through the control API and kubectl: the canary-like pod reports the tag's digest in
    ``imageID``; the tag pushed again (the answer names its new digest) changes no running pod's
    ``imageID``; a pod naming the old digest runs exactly it (``image`` and ``imageID`` name it);
    a pod naming a digest the registry has not fails ErrImagePull with containerd's not found."""
    with KubeSim(scenario="gpu-small", k8s_version="1.32") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        pod = _replace_and_wait(sim, kubectl, "gpu-node1", TAG, until="ready")
        old = f"{PLUGIN}@{first_digest(TAG)}"
        assert pod["status"]["containerStatuses"][0]["imageID"] == old
        assert pod["status"]["containerStatuses"][0]["image"] == TAG
        code, answer = _control(sim, "POST", "/sim/v1/registry", {"images": [TAG]})
        new = answer["digests"][TAG]
        assert code == 200 and answer["pushed"] == [TAG] and f"{PLUGIN}@{new}" != old
        assert _control(sim, "GET", "/sim/v1/registry")[1]["digests"][TAG] == new
        sim.advance("5s")
        assert _pod_on(kubectl, "gpu-node1")["status"]["containerStatuses"][0]["imageID"] == old  # pulled before
        repulled = _replace_and_wait(sim, kubectl, "gpu-node2", TAG, until="ready")
        assert repulled["status"]["containerStatuses"][0]["imageID"] == f"{PLUGIN}@{new}"
        pinned = _replace_and_wait(sim, kubectl, "gpu-node3", f"{TAG}@{first_digest(TAG)}", until="ready")
        status = pinned["status"]["containerStatuses"][0]
        assert (status["image"], status["imageID"]) == (old, old)
        missing = f"{PLUGIN}@sha256:{'1' * 64}"
        failing = _replace_and_wait(sim, kubectl, "gpu-node1", missing, until="pull")
        waiting = failing["status"]["containerStatuses"][0]["state"]["waiting"]
        assert waiting["message"] == _not_found(missing), waiting
        events = json.loads(kubectl("get", "events", "-n", NS, "--field-selector",
                                    f"involvedObject.name={failing['metadata']['name']}", "-o", "json"))["items"]
        assert f'Failed to pull image "{missing}": {_not_found(missing)}' in [e["message"] for e in events]


def _head(sim: KubeSim, path: str) -> tuple[int, dict[str, str]]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(sim.url + path, method="HEAD")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_the_registry_answers_the_distribution_api_as_a_mirror() -> None:
    """``HEAD /v2/<name>/manifests/<tag>?ns=nvcr.io`` answers the tag's current digest in
    ``Docker-Content-Digest``, anonymously; after a push again, the new one; a digest the repository
    holds answers itself; an unknown tag or digest is 404 (``MANIFEST_UNKNOWN`` on a GET)."""
    with KubeSim(scenario="gpu-small", k8s_version="1.32") as sim:
        path = "/v2/nvidia/k8s-device-plugin/manifests/v0.17.0?ns=nvcr.io"
        code, headers = _head(sim, path)
        assert code == 200 and headers["Docker-Content-Digest"] == first_digest(TAG)
        assert headers["Docker-Distribution-API-Version"] == "registry/2.0"
        new = sim.push(TAG) and _control(sim, "GET", "/sim/v1/registry")[1]["digests"][TAG]
        assert _head(sim, path)[1]["Docker-Content-Digest"] == new != first_digest(TAG)
        by_digest = f"/v2/nvidia/k8s-device-plugin/manifests/{first_digest(TAG)}?ns=nvcr.io"
        assert _head(sim, by_digest)[1]["Docker-Content-Digest"] == first_digest(TAG)
        assert _head(sim, "/v2/nvidia/k8s-device-plugin/manifests/v0.17.9?ns=nvcr.io")[0] == 404
        assert _head(sim, "/v2/nvidia/k8s-device-plugin/manifests/v0.17.0")[0] == 404  # docker.io has none
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        try:
            urllib.request.urlopen(sim.url + "/v2/nvidia/k8s-device-plugin/manifests/v9?ns=nvcr.io", context=context)
            raise AssertionError("an unknown manifest answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404 and json.loads(exc.read())["errors"][0]["code"] == "MANIFEST_UNKNOWN"


def test_a_copy_of_published_bytes_is_pushed_with_their_digest_and_pulls_by_it() -> None:
    """``repo:tag@sha256:…`` pushes a copy (a mirror's): the tag resolves to that digest, a pod spec
    pinning it (deploy/base/redis.yaml's) pulls, and another digest of the repository does not."""
    real = "sha256:" + "ab" * 32
    registry = Registry()
    registry.push(f"docker.io/library/redis:7.4.11-alpine@{real}")
    assert registry.resolve("redis:7.4.11-alpine") == real
    assert registry.pull_error(f"docker.io/library/redis:7.4.11-alpine@{real}") is None
    assert registry.image_id(f"redis:7.4.11-alpine@{real}") == f"docker.io/library/redis@{real}"
    assert "not found" in str(registry.pull_error("docker.io/library/redis:7.4.11-alpine@sha256:" + "cd" * 32))
    for bad in ("redis:7.4.11-alpine@sha256:abc", "redis@sha256:" + "ab" * 32):
        try:
            registry.push(bad)
        except ValueError as exc:
            assert "repository:tag" in str(exc)
        else:
            raise AssertionError(f"{bad} was pushed")
