"""Input validation for the engine and the front ends: names, images, nodes, targets."""

from __future__ import annotations

import pytest

from runbooks import validation

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
    "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0",
    "localhost:5000/plugins/gpu:1.2.3-rc.1",
    f"nvcr.io/nvidia/k8s-device-plugin@{DIGEST}",
    f"nvcr.io/nvidia/k8s-device-plugin:v0.17.0@{DIGEST}",
    "busybox:1.36",
    "Registry.Example.COM/team/plugin:v1",
])
def test_valid_image_references_pass(image: str) -> None:
    """Registry (with port), nested repositories, tags, digests and both are accepted as they are."""
    assert validation.image_reference(f"  {image} ") == image


@pytest.mark.parametrize(("image", "why"), [
    ("nvcr.io/nvidia/k8s-device-plugin", "has no tag or digest"),
    ("nvcr.io/NVIDIA/plugin:v1", "not a valid image reference"),
    ("UPPER/plugin:v1", "repository names are lower case"),
    ("nvcr.io/nvidia/plugin:", "not a valid image reference"),
    ("nvcr.io/nvidia/plugin:-v1", "not a valid image reference"),
    ("nvcr.io//plugin:v1", "not a valid image reference"),
    ("nvcr.io/nvidia/plugin@sha256:abc", "not a valid image reference"),
    ("plugin v1", "not a valid image reference"),
    ("", "not a valid image reference"),
    ("nvcr.io/nvidia/plugin:v\u0661.17", "not a valid image reference"),  # ARABIC-INDIC DIGIT ONE
    ("nvcr.io/nvidia/plugin:v0.\uff11", "not a valid image reference"),  # FULLWIDTH DIGIT ONE
    ("nvcr.io/nvidia/plugin:v\u00e9", "not a valid image reference"),
    ("n\u00e9cr.io/nvidia/plugin:v1", "not a valid image reference"),
])
def test_invalid_image_references_say_why(image: str, why: str) -> None:
    """A bad reference raises ValueError whose message says what is wrong and shows an example."""
    with pytest.raises(ValueError, match=why) as info:
        validation.image_reference(image)
    assert "e.g." in str(info.value) or "lower case" in str(info.value)


def test_names_nodes_and_containers() -> None:
    """DNS-1123 labels and subdomains as Kubernetes defines them; node names are subdomains."""
    assert validation.dns1123_label("kube-system") == "kube-system"
    assert validation.node_name("ip-10-0-1-7.ec2.internal") == "ip-10-0-1-7.ec2.internal"
    assert validation.container_name("nvidia-device-plugin-ctr") == "nvidia-device-plugin-ctr"
    for bad in ("Kube-System", "-x", "x-", "a" * 64, "under_score"):
        with pytest.raises(ValueError, match="is not a valid Kubernetes name"):
            validation.dns1123_label(bad)
    with pytest.raises(ValueError, match="node 'gpu_node1'"):
        validation.node_name("gpu_node1")
    with pytest.raises(ValueError, match="at most 253"):
        validation.dns1123_subdomain("a." * 130)


def test_targets_and_known_targets() -> None:
    """namespace/daemonset parsed; with the policy's list, only those."""
    target = validation.target("kube-system/nvidia-device-plugin-daemonset")
    assert (target.namespace, target.name) == ("kube-system", "nvidia-device-plugin-daemonset")
    with pytest.raises(ValueError, match="use <namespace>/<daemonset>"):
        validation.target("nvidia-device-plugin-daemonset")
    with pytest.raises(ValueError, match="not a target of the policy: use one of kube-system/a"):
        validation.target("kube-system/b", known=["kube-system/a"])
    assert str(validation.target("kube-system/a", known=["kube-system/a"])) == "kube-system/a"
