"""kubesim's image pull failures (issue 36, item 6), refereed by the real kubectl: a tag no
release has (issue 58: not in kubesim's registry) or a registry under ``.invalid`` leaves the
container waiting ``ErrImagePull`` then ``ImagePullBackOff`` with the kubelet's ``Failed``/``BackOff`` events, the pod Pending; and
``kubectl logs --previous`` of a container that never terminated is the API server's error."""

from __future__ import annotations

import json
import time

import pytest

from kubesim import KubeSim
from tests.support import Kubectl

NS = "kube-system"
DS = "nvidia-device-plugin-daemonset"
CTR = "nvidia-device-plugin-ctr"


def _pod_on(kubectl: Kubectl, node: str) -> dict:  # type: ignore[type-arg]
    """The live plugin pod on ``node`` ({} between a deletion and its replacement)."""
    pods = json.loads(kubectl("get", "pods", "-n", NS, "-l", "name=nvidia-device-plugin-ds",
                              "--field-selector", f"spec.nodeName={node}", "-o", "json"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) <= 1, [p["metadata"]["name"] for p in pods]
    return live[0] if live else {}  # type: ignore[no-any-return]


def _waiting(pod: dict) -> dict:  # type: ignore[type-arg]
    return ((pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}


@pytest.mark.conformance
@pytest.mark.parametrize("minor", [27, 32, 34])
def test_a_tag_no_release_has_is_err_image_pull_then_image_pull_backoff(minor: int) -> None:
    """Issue 36 item 6: a tag no release has (v0.17.5) is not found in its registry: the container waits
    ErrImagePull with containerd's NotFound message, then ImagePullBackOff (from 1.31 with the
    last error appended); kubectl describe shows the Failed and BackOff events as a kubelet
    writes them; the pod stays Pending with no imageID; ``logs --previous`` says there is no
    previous terminated container."""
    image = "nvcr.io/nvidia/k8s-device-plugin:v0.17.5"
    with KubeSim(scenario="gpu-small", k8s_version=f"1.{minor}") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("-n", NS, "patch", "ds", DS, "-p", json.dumps(
            {"spec": {"updateStrategy": {"type": "OnDelete"}, "template": {"spec": {"containers": [
                {"name": CTR, "image": image}]}}}}))
        old = _pod_on(kubectl, "gpu-node1")["metadata"]["name"]
        kubectl("-n", NS, "delete", "pod", old, "--wait=false")
        seen: set[str] = set()
        pod: dict = {}  # type: ignore[type-arg]
        for _ in range(80):
            sim.advance("0.5s")
            time.sleep(0.02)
            pod = _pod_on(kubectl, "gpu-node1")
            if not pod or pod["metadata"]["name"] == old:
                continue
            reason = _waiting(pod).get("reason")
            if reason:
                seen.add(reason)
            if {"ErrImagePull", "ImagePullBackOff"} <= seen:
                break
        assert {"ErrImagePull", "ImagePullBackOff"} <= seen, seen
        name = pod["metadata"]["name"]
        ref = "nvcr.io/nvidia/k8s-device-plugin:v0.17.5"
        error = (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
                 f'reference "{ref}": {ref}: not found')
        status = pod["status"]["containerStatuses"][0]
        assert pod["status"]["phase"] == "Pending" and not status["ready"] and status["imageID"] == ""
        text = kubectl("-n", NS, "describe", "pod", name)
        assert f'Failed to pull image "{image}": {error}' in text
        assert "Error: ErrImagePull" in text and "Error: ImagePullBackOff" in text
        assert f'Back-off pulling image "{image}"' in text
        events = json.loads(kubectl("-n", NS, "get", "events", "--field-selector",
                                    f"involvedObject.name={name}", "-o", "json"))["items"]
        kinds = {(e["reason"], e["type"]) for e in events}
        assert {("Failed", "Warning"), ("BackOff", "Normal"), ("Pulling", "Normal")} <= kinds, kinds
        if _waiting(pod).get("reason") == "ImagePullBackOff":
            message = _waiting(pod)["message"]
            assert message.startswith(f'Back-off pulling image "{image}"')
            assert (f": ErrImagePull: {error}" in message) == (minor >= 31), message
        previous = kubectl.run("-n", NS, "logs", name, "-c", CTR, "--previous", check=False)
        assert previous.returncode == 1
        assert f'previous terminated container "{CTR}" in pod "{name}" not found' in previous.stderr


@pytest.mark.conformance
def test_an_unresolvable_registry_fails_the_pull_with_no_such_host() -> None:
    """Issue 36 item 6: a registry host under ``.invalid`` does not resolve: ErrImagePull with
    containerd's ``dial tcp: lookup …: no such host``."""
    image = "registry.example.invalid/nvidia/k8s-device-plugin:v0.17.0"
    with KubeSim(scenario="gpu-small", k8s_version="1.32") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("-n", NS, "set", "image", f"ds/{DS}", f"{CTR}={image}")
        message = ""
        for _ in range(60):
            sim.advance("1s")
            time.sleep(0.02)
            pods = json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
            waiting = [_waiting(p) for p in pods if p["spec"]["containers"][0]["image"] == image]
            message = next((w.get("message", "") for w in waiting if w.get("reason") == "ErrImagePull"), "")
            if message:
                break
        assert message == (
            f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": failed to resolve reference '
            f'"{image}": failed to do request: Head "https://registry.example.invalid/v2/nvidia/k8s-device-plugin/'
            'manifests/v0.17.0": dial tcp: lookup registry.example.invalid: no such host')
