"""A DeviceClass naming a driver no kubelet plugin serves, while another driver runs (item 5 of
issue 38): the advice is to recreate the class if it misspells the running driver, not only to
deploy a driver that may not exist."""

from __future__ import annotations

import json
from collections.abc import Callable

from kubesim import KubeSim
from runbooks.inventory import Inventory


def test_a_class_with_a_misspelt_driver_is_advised_to_be_recreated(
        fresh_cluster: KubeSim, kubectl_for, inventory_of: Callable[..., Inventory]) -> None:
    """The class ``typo`` selects ``gpu.exmaple.com`` while ``gpu.example.com``'s plugin runs: the
    finding names the running driver and says to delete the class and apply it fixed."""
    typo = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceClass", "metadata": {"name": "typo"},
            "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.exmaple.com"'}}]}}
    kubectl_for(fresh_cluster)("apply", "-f", "-", input=json.dumps(typo))
    inv = inventory_of(fresh_cluster)
    [found] = [f for f in inv.findings if f.code == "class-without-plugin"]
    assert found.object == "deviceclass/typo" and "no kubelet plugin of gpu.exmaple.com" in found.message
    assert found.next_step.startswith("the running kubelet plugins serve gpu.example.com: if typo misspells one, "
                                      "recreate the class naming it (kubectl delete deviceclass typo, then apply "
                                      "it fixed"), found.next_step
