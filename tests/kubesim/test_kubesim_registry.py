"""kubesim's registry (issue 58, item 3): only images that exist are pulled, the released tags of
the repositories kubesim knows (read from their upstream Makefiles and release notes) plus what a
test pushes through the control API; anything else fails as containerd reports it."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from kubesim import KubeSim
from kubesim.podstatus import first_digest
from kubesim.registry import RELEASED, Registry
from kubesim.scenarios import SCENARIOS, build
from tests.support import Kubectl

NS, DS, CTR = "kube-system", "nvidia-device-plugin-daemonset", "nvidia-device-plugin-ctr"
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


def _not_found(ref: str) -> str:
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve '
            f'reference "{ref}": {ref}: not found')


@pytest.mark.parametrize(("image", "exists"), [
    (f"{PLUGIN}:v0.14.2", True), (f"{PLUGIN}:v0.14.2-ubuntu20.04", True), (f"{PLUGIN}:v0.14.2-ubi8", True),
    (f"{PLUGIN}:v0.15.0-ubuntu22.04", True), (f"{PLUGIN}:v0.16.2-ubi8", True), (f"{PLUGIN}:v0.16.2-ubuntu20.04", False),
    (f"{PLUGIN}:v0.17.0", True), (f"{PLUGIN}:v0.17.0-ubi9", True), (f"{PLUGIN}:v0.17.0-ubi8", False),
    (f"{PLUGIN}:v0.18.0", True), (f"{PLUGIN}:v0.18.0-ubi9", False), (f"{PLUGIN}:v0.20.0", True),
    (f"{PLUGIN}:v0.17.9", False), (f"{PLUGIN}:v0.17.0-rc.1", False), (f"{PLUGIN}:v9.9.9", False),
    (f"{PLUGIN}:latest", False), ("nvcr.io/nvidia/k8s-device-plugn:v0.17.0", False),
    (f"{PLUGIN}:v0.17.0-crash", False), (f"{PLUGIN}:v0.17.0-nopull", False),
    ("registry.k8s.io/dra-example-driver/dra-example-driver:v0.1.0", True),
    ("registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0", True),
    ("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.0-ubi9", True), ("nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0-ubi9", False),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", True), ("busybox:1.36", False),
])
def test_the_released_tags_exist_and_nothing_else(image: str, exists: bool) -> None:
    """Issue 58 item 3: the device plugin's tags and their per-release variants as its
    deployments/container/Makefile pushes them (v0.14.x ubuntu20.04 and ubi8, v0.15-v0.16 ubuntu22.04
    and ubi8, v0.17 ubi9, v0.18+ the version alone), the DRA drivers' and the CUDA sample's;
    a mistyped repository, a tag no release has, and kubesim's fault tags are not found."""
    registry = Registry()
    assert registry.has(image) is exists
    assert (registry.pull_error(image) is None) is exists
    if not exists:
        assert registry.pull_error(image) == _not_found(_ref(image))


def _ref(image: str) -> str:
    return image if "/" in image else f"docker.io/library/{image}"


def test_a_pushed_image_exists_and_a_bad_reference_is_refused() -> None:
    """A test's own build exists once pushed (named as containerd names it); a reference that is
    not ``repository:tag`` is refused with one line, nothing pushed."""
    registry = Registry(pushed=[f"{PLUGIN}:v0.17.0-crash"])
    assert registry.has(f"{PLUGIN}:v0.17.0-crash") and not registry.has(f"{PLUGIN}:v0.17.0-silent")
    assert registry.push("busybox:1.36") == "docker.io/library/busybox:1.36" and registry.has("busybox:1.36")
    for bad in ("Nvcr.io/NVIDIA/plugin:v1", "nvcr.io/nvidia/plugin", "nvcr.io/nvidia/plugin:-v1", ""):
        with pytest.raises(ValueError, match="is not a tagged image reference"):
            registry.push(bad)
    assert registry.pushed == ["docker.io/library/busybox:1.36", f"{PLUGIN}:v0.17.0-crash"]


def test_every_image_a_scenario_runs_exists() -> None:
    """Nothing a scenario loads is pulled from thin air: every container image of every
    scenario's pods is a released tag or one of the scenario's own pushed workload images."""
    for scenario in SCENARIOS:
        sim = build(scenario=scenario, nodes=2, minor=32)
        for pod in sim.store.list(("", "pods")):
            for ctr in pod["spec"]["containers"] + (pod["spec"].get("initContainers") or []):
                assert sim.registry.has(ctr["image"]), (scenario, ctr["image"])


def test_every_released_repository_is_cited_in_the_docs() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "kubesim.md").read_text()
    for repository in RELEASED:
        assert f"`{repository}`" in text, repository


def _control(sim: KubeSim, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(sim.url + path, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {sim.token}", "Content-Type": "application/json"})
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _waiting(kubectl: Kubectl, node: str, image: str) -> dict[str, Any]:
    pods = json.loads(kubectl("get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={node}", "-o", "json"))["items"]
    for pod in pods:
        if pod["spec"]["containers"][0]["image"] == image and not pod["metadata"].get("deletionTimestamp"):
            status = (pod["status"].get("containerStatuses") or [{}])[0]
            return {"ready": status.get("ready"), **((status.get("state") or {}).get("waiting") or {})}
    return {}


@pytest.mark.conformance
def test_a_mistyped_repository_is_not_found_until_pushed_through_the_control_api() -> None:
    """Issue 58 item 3: ``k8s-device-plugn`` waits ErrImagePull with containerd's ``not found``;
    ``POST /sim/v1/registry`` pushes it, and the kubelet's next pull (after the back-off) gets it
    and the pod runs; bad bodies are refused with 400 and one line; GET lists what was pushed."""
    image = "nvcr.io/nvidia/k8s-device-plugn:v0.17.0"
    with KubeSim(scenario="gpu-small", k8s_version="1.32") as sim:
        kubectl = Kubectl(sim.kubeconfig)
        kubectl("-n", NS, "set", "image", f"ds/{DS}", f"{CTR}={image}")
        seen: dict[str, Any] = {}
        for _ in range(60):
            sim.advance("1s")
            time.sleep(0.01)
            seen = _waiting(kubectl, "gpu-node1", image) or _waiting(kubectl, "gpu-node2", image) \
                or _waiting(kubectl, "gpu-node3", image)
            if seen.get("reason") == "ErrImagePull":
                break
        assert seen.get("reason") == "ErrImagePull" and seen.get("message") == _not_found(image), seen
        for bad in ({}, {"images": "x"}, {"images": ["Not/A:ref"]}):
            code, answer = _control(sim, "POST", "/sim/v1/registry", bad)
            assert code == 400 and "\n" not in answer["error"], answer
        code, answer = _control(sim, "POST", "/sim/v1/registry", {"images": [image]})
        assert (code, answer) == (200, {"pushed": [image], "digests": {image: first_digest(image)}})
        code, listed = _control(sim, "GET", "/sim/v1/registry")
        assert image in listed["pushed"] and "v0.17.0-ubi9" in listed["released"][PLUGIN]
        ready = False
        for _ in range(120):
            sim.advance("5s")
            time.sleep(0.01)
            pods = json.loads(kubectl("get", "pods", "-n", NS, "-o", "json"))["items"]
            mine = [p for p in pods if p["spec"]["containers"][0]["image"] == image]
            if mine and all((p["status"].get("containerStatuses") or [{}])[0].get("ready") for p in mine):
                ready = True
                break
        assert ready
