"""The DRA example plugin's log as its source writes it at the verbosity its pod runs it at: gpu-small's
hand-made DaemonSet runs v0.1.0 without -v, so at klog's default 0 it writes nothing on start and nothing
when the kubelet restarts and it registers again (the kubeletplugin helper logs its servers at V(3), the
kubelet's registration calls at V(6); nothing logs registered=true). Registration shows in the API:
the node's ResourceSlices, published again by the pod."""

from __future__ import annotations

from _simkit import PODS, small

from kubesim import dra


def _plugin_logs(sim) -> dict[str, str]:
    return {p["spec"]["nodeName"]: sim.logs.read("dra-example-driver", p["metadata"]["name"], "plugin") or ""
            for p in sim.store.list(PODS, "dra-example-driver")}


def test_gpu_smalls_example_plugin_at_verbosity_zero_logs_no_registration():
    sim = small(32)
    logs = _plugin_logs(sim)
    assert sorted(logs) == ["gpu-node1", "gpu-node2", "gpu-node3"]
    assert all(log == "" for log in logs.values()), logs


def test_a_kubelet_restart_re_registers_the_plugin_silently_and_its_slices_stay_published():
    sim = small(32)
    sim.controllers["kubelet"].restart_kubelet("gpu-node1")
    sim.advance(30)
    assert all("registered=true" not in log and "GRPC server started" not in log for log in _plugin_logs(sim).values())
    assert sorted(dra.slice_node_driver(s)[0] for s in sim.store.list(dra.SLICES)) == ["gpu-node1", "gpu-node2", "gpu-node3"]
