"""NVIDIA's DRA driver as it ships (issue 59): one kubelet-plugin DaemonSet with two containers
(``gpus`` runs ``gpu-kubelet-plugin``, serving ``gpu.nvidia.com``; ``compute-domains`` runs
``compute-domain-kubelet-plugin``, serving ``compute-domain.nvidia.com``) and five DeviceClasses.
Objects as NVIDIA/k8s-dra-driver-gpu v25.12.0 renders them with its default values:
``deployments/helm/nvidia-dra-driver-gpu/templates/kubeletplugin.yaml`` and ``deviceclass-*.yaml``;
the driver names from ``cmd/gpu-kubelet-plugin/main.go`` and ``cmd/compute-domain-kubelet-plugin/main.go``.
The smoke test's class is chosen by what its selectors ask, never by name order. Pure."""

from __future__ import annotations

from typing import Any

from runbooks.dra.classes import choose_class
from runbooks.inventory.plugins import classify, container_drivers, serving, template_drivers
from runbooks.plugin_containers import plugin_container

GPU, CD = "gpu.nvidia.com", "compute-domain.nvidia.com"
# deviceclass-*.yaml at v25.12.0 (resources.gpus.enabled and resources.computeDomains.enabled are true by default)
NVIDIA_CLASSES: dict[str, str] = {
    "compute-domain-daemon.nvidia.com":
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
    "compute-domain-default-channel.nvidia.com":
        "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
        " && device.attributes['compute-domain.nvidia.com'].id == 0",
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    "vfio.gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
}


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def nvidia_classes() -> list[dict[str, Any]]:
    return [device_class(n, e) for n, e in sorted(NVIDIA_CLASSES.items())]


def plugin(program: str) -> str:
    return ("# Conditionally mask the params file ...\nif [ \"${MASK_NVIDIA_DRIVER_PARAMS}\" = \"true\" ]; then\n"
            "  cp /proc/driver/nvidia/params root/gpu-params\nfi\n" f"{program} -v $(LOG_VERBOSITY)")


def nvidia_daemonset() -> dict[str, Any]:
    image = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"
    env = [{"name": "LOG_VERBOSITY", "value": "4"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
           {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    return {"metadata": {"name": "nvidia-dra-driver-gpu-kubelet-plugin", "namespace": "nvidia-dra-driver-gpu",
                         "labels": {"app.kubernetes.io/name": "nvidia-dra-driver-gpu"}},
            "spec": {"template": {"metadata": {"labels": {"nvidia-dra-driver-gpu-component": "kubelet-plugin"}},
                                  "spec": {"initContainers": [{"name": "init-container", "image": image,
                                                               "command": ["bash", "/usr/bin/kubelet-plugin-prestart.sh"]}],
                                           "containers": [
                                               {"name": "compute-domains", "image": image, "command": ["bash", "-c"],
                                                "args": [plugin("compute-domain-kubelet-plugin")], "env": env},
                                               {"name": "gpus", "image": image, "command": ["bash", "-c"],
                                                "args": [plugin("gpu-kubelet-plugin")], "env": env}]}}}}


def test_the_smoke_test_claims_a_gpu_of_nvidias_driver_not_the_first_class_by_name() -> None:
    chosen = choose_class(nvidia_classes(), [GPU, CD])
    assert (chosen.name, chosen.problem) == ("gpu.nvidia.com", ""), chosen
    assert "type == 'gpu'" in chosen.why


def test_the_example_drivers_class_asks_only_its_driver_and_is_chosen() -> None:
    """dra-example-driver's ``templates/deviceclass.yaml``: ``device.driver == '<driverName>'``."""
    example = device_class("gpu.example.com", "device.driver == 'gpu.example.com'")
    mig = device_class("a-mig.example.com",
                       "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].type == 'mig'")
    assert choose_class([mig, example], ["gpu.example.com"]).name == "gpu.example.com"
    old = {"kind": "ResourceClass", "metadata": {"name": "gpu.example.com"}, "driverName": "gpu.example.com"}
    assert choose_class([old], ["gpu.example.com"]).name == "gpu.example.com"


def test_two_classes_asking_a_gpu_of_the_driver_are_refused_as_ambiguous() -> None:
    twin = device_class("another-gpu.nvidia.com", NVIDIA_CLASSES["gpu.nvidia.com"])
    chosen = choose_class([*nvidia_classes(), twin], [GPU])
    assert chosen.name is None
    assert "another-gpu.nvidia.com" in chosen.problem and "gpu.nvidia.com" in chosen.problem
    assert "smoke_test.device_class" in chosen.problem


def test_a_driver_with_no_class_asking_a_gpu_is_refused_naming_the_classes() -> None:
    chosen = choose_class(nvidia_classes(), [CD])
    assert chosen.name is None
    assert "compute-domain-daemon.nvidia.com" in chosen.problem and "smoke_test.device_class" in chosen.problem


def test_each_container_serves_its_driver() -> None:
    ds = nvidia_daemonset()
    assert classify(ds) == "dra-kubelet-plugin"
    assert container_drivers(ds, set()) == {"compute-domains": [CD], "gpus": [GPU]}
    assert template_drivers(ds, set()) == [CD, GPU]
    assert serving(ds, [GPU, CD]) == {GPU: ["gpus"], CD: ["compute-domains"]}
    assert serving(ds, [GPU, CD], container="gpus") == {GPU: ["gpus"]}, "a canary of gpus judges its driver"


def test_a_canary_of_nvidias_daemonset_changes_the_gpus_container_by_default() -> None:
    containers = nvidia_daemonset()["spec"]["template"]["spec"]["containers"]
    assert plugin_container(containers) == "gpus"


def test_the_example_drivers_container_serves_the_driver_its_env_names() -> None:
    """dra-example-driver's ``templates/kubeletplugin.yaml``: ``DRIVER_NAME`` in the env."""
    ds = {"metadata": {"name": "dra-example-driver-kubeletplugin"},
          "spec": {"template": {"spec": {"containers": [
              {"name": "plugin", "command": ["dra-example-kubeletplugin"],
               "env": [{"name": "DRIVER_NAME", "value": "gpu.example.com"}]}]}}}}
    assert container_drivers(ds, set()) == {"plugin": ["gpu.example.com"]}
