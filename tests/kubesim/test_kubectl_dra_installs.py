"""The real kubectl on the DRA drivers' chart scenarios (kubesim.dra_installs): the classes and the slices
each node's plugin published, read back; each chart's file applied as it stands (a server-side dry run)."""

from __future__ import annotations

import pytest

from kubesim import KubeSim
from kubesim.dra_installs import EXAMPLE_FILE, NVIDIA_FILE
from kubesim.installs import MANIFESTS
from tests.support import Kubectl

pytestmark = pytest.mark.conformance


@pytest.mark.parametrize(("scenario", "version", "file", "classes", "slices"), [
    ("dra-example-driver", "1.32", EXAMPLE_FILE, ["gpu.example.com"],
     {(n, "gpu.example.com") for n in ("gpu-node1", "gpu-node2", "gpu-node3", "cpu-node1")}),
    ("nvidia-dra-driver", "1.34", NVIDIA_FILE,
     ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com", "gpu.nvidia.com", "mig.nvidia.com"],
     {(f"gpu-node{i}", d) for i in (1, 2, 3) for d in ("gpu.nvidia.com", "compute-domain.nvidia.com")}),
])
def test_kubectl_reads_the_classes_and_slices_and_applies_the_chart(scenario, version, file, classes, slices):
    with KubeSim(scenario=scenario, k8s_version=version) as sim:
        kubectl = Kubectl(sim.kubeconfig)
        items = kubectl.json("get", "deviceclasses,resourceslices")["items"]
        assert sorted(o["metadata"]["name"] for o in items if o["kind"] == "DeviceClass") == classes
        got = {(o["spec"]["nodeName"], o["spec"]["driver"]) for o in items if o["kind"] == "ResourceSlice"}
        assert got == slices
        assert all(o["metadata"]["ownerReferences"][0]["kind"] == "Node" for o in items if o["kind"] == "ResourceSlice")
        table = kubectl("get", "deviceclasses,resourceslices")
        assert all(f"deviceclass.resource.k8s.io/{name}" in table for name in classes), table
        assert all(node in table and driver in table for node, driver in slices), table
        out = kubectl("apply", "--dry-run=server", "-f", str(MANIFESTS / file))
        assert "(server dry run)" in out and "error" not in out.lower(), out
