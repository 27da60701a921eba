"""The inventory on a larger cluster: bounded log reads, summaries for people."""

from __future__ import annotations

from collections.abc import Callable

from bot.text import render_reply
from handlers.inventory import summarize
from kubesim import KubeSim
from runbooks.inventory import Inventory


def test_log_reads_are_bounded_and_cover_every_plugin(inventory_of: Callable[..., Inventory]) -> None:
    """Beyond the log budget, each plugin DaemonSet still has a pod read and the rest say 'not read'."""
    with KubeSim(scenario="gpu-large", nodes=40, k8s_version="1.32") as sim:
        inv = inventory_of(sim, log_budget=10)
    assert len(inv.nodes) == 40 and all(n.allocatable == {"nvidia.com/gpu": 8} for n in inv.nodes)
    assert sorted(d.name for d in inv.daemonsets) == ["dra-example-driver-kubeletplugin", "nvidia-device-plugin-daemonset"]
    read = [p for d in inv.daemonsets for p in d.pods if p.registered is not None and d.kind == "device-plugin"]
    assert len(read) == 10 and all(p.registered for p in read)
    assert all(any(p.registered for p in d.pods) for d in inv.daemonsets)
    # issue 59: a DRA driver's registration is seen in its ResourceSlices, every pod's, no log read
    dra = next(d for d in inv.daemonsets if d.kind == "dra-kubelet-plugin")
    assert len(dra.pods) == 40 and all(p.registered for p in dra.pods)
    assert inv.notes == ["registration read from the logs of 10 of 40 plugin pods (the most suspect first); "
                         "the others show registered=null"]
    assert inv.findings == []
    text = render_reply(summarize(inv))  # what the shell prints
    assert "… 40 more nodes, all Ready with every GPU allocatable" in text
    assert len(text.splitlines()) < 60
