"""``--json`` of a large model (issue 39): the model's own serializer, not a copy of it in dicts."""

from __future__ import annotations

import datetime as dt
import json
import tracemalloc
from pathlib import Path

from bot.shell.output import print_result
from handlers.inventory import COMMAND
from runbooks.inventory.models import Inventory

NODES = 2_000


def inventory(nodes: int) -> Inventory:
    return Inventory.model_validate({
        "taken_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC), "context": "kubesim", "server": "https://127.0.0.1:1",
        "gpu_resources": ["nvidia.com/gpu"],
        "kubernetes": {"version": "v1.31.13", "minor": 31},
        "dra": {"feature_gate": "enabled", "served_versions": ["v1alpha3"]},
        "nodes": [{"name": f"gpu-node{i}", "ready": True, "unschedulable": False, "gpu_hardware": True,
                   "labels": {"nvidia.com/gpu.present": "true", "topology.kubernetes.io/zone": f"zone-{i % 3}"},
                   "capacity": {"nvidia.com/gpu": 8}, "allocatable": {"nvidia.com/gpu": 8},
                   "in_use": {"nvidia.com/gpu": i % 8}, "kubelet_version": "v1.31.13",
                   "os_image": "Ubuntu 22.04.4 LTS", "kernel": "5.15.0-105-generic", "runtime": "containerd://1.7.13"}
                  for i in range(nodes)],
    })


def test_inventory_json_is_printed_without_a_copy_in_dicts(tmp_path: Path) -> None:
    """issue 39: ``inventory --json`` prints the same JSON as ``json.dumps(model_dump(), indent=2)``
    while Python allocates under three times its size at the peak (the dicts of model_dump and
    json's indenting encoder took about ten times: 40 MiB more at 5,000 nodes)."""
    found = inventory(NODES)
    expected = json.dumps(found.model_dump(mode="json"), indent=2) + "\n"
    path = tmp_path / "out.json"
    with path.open("w") as out:
        tracemalloc.start()
        try:
            code = print_result(COMMAND, found, as_json=True, out=out)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 0
    assert path.read_text() == expected
    assert peak < 3 * len(expected), (peak, len(expected))


def with_plugin(inv: Inventory, pods: int) -> Inventory:
    """``inv`` with a device plugin DaemonSet of ``pods`` pods (a long list inside a list item)."""
    plugin = {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "kind": "device-plugin",
              "images": {"plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.16.2"}, "update_strategy": "RollingUpdate",
              "pods": [{"name": f"nvidia-device-plugin-{i}", "node": f"gpu-node{i}", "phase": "Running", "ready": True,
                        "restarts": i % 2, "crashloop": False, "images": {"plugin": "nvcr.io/x:v0.16.2"},
                        "registered": None if i % 3 else True} for i in range(pods)]}
    small = {**plugin, "name": "small", "pods": plugin["pods"][:2]}
    return inv.model_copy(update={"daemonsets": Inventory.model_validate(
        {**inv.model_dump(include={"taken_at", "context", "server", "gpu_resources", "kubernetes", "dra"}),
         "daemonsets": [plugin, small]}).daemonsets, "notes": ["a note with \"quotes\"\nand a newline"]})


def test_inventory_json_is_written_as_it_is_made(tmp_path: Path) -> None:
    """issue 39: ``--json`` of an inventory writes, character for character, what
    ``model_dump_json(indent=2)`` makes (nested long lists, empty lists, escapes) while Python
    allocates under a tenth of its size at the peak: its long lists are written item by item, so the
    JSON (7 MB at 5,000 nodes, and a second copy to encode it) is never whole in memory."""
    found = with_plugin(inventory(NODES), NODES)
    expected = found.model_dump_json(indent=2) + "\n"
    path = tmp_path / "out.json"
    with path.open("w") as out:
        tracemalloc.start()
        try:
            code = print_result(COMMAND, found, as_json=True, out=out)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 0
    assert path.read_text() == expected
    assert peak < len(expected) / 10, (peak, len(expected))
