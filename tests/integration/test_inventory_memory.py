"""What an inventory of every node holds while it reads (issue 39): page by page, only what it
returns. Measured with tracemalloc in a child process (the simulator, serving from this one,
allocates as it answers), from a connection already made to the inventory taken.

Found before: every unfinished pod of the cluster was decoded into a dict, page by page, and
kept as a pod object for the IN USE column until the end (10,000 pods at 1,000 nodes), the
nodes were copied whole to add what is in use, and every ResourceSlice's devices were decoded
with their attributes: 19 MiB held beyond an 8 MiB inventory at 1,000 nodes, 31 MiB at 5,000.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from kubesim import KubeSim

PROBE = """
import json, sys, tracemalloc
from runbooks.cluster import Cluster
from runbooks.inventory import take_inventory
with Cluster.from_kubeconfig(sys.argv[1]) as cluster:
    cluster.version()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    inv = take_inventory(cluster)
    now, peak = tracemalloc.get_traced_memory()
    print(json.dumps({"kept": now - start, "peak": peak - start, "nodes": len(inv.nodes),
                      "in_use": sum(sum(n.in_use.values()) for n in inv.nodes),
                      "plugin_pods": sum(len(d.pods) for d in inv.daemonsets)}))
"""


@pytest.fixture(scope="module")
def large() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-large", nodes=1000, k8s_version="1.31") as served:
        yield served


def test_an_inventory_of_every_node_holds_little_beyond_what_it_returns(large: KubeSim) -> None:
    """issue 39: the inventory of 1,000 nodes (10,000 pods) holds at its peak under 0.6 times
    more than the inventory it returns (before: 2.3 times), reading the cluster's pods once, as
    typed shapes counted per node while paging, and it counts what that list holds: the GPUs in
    use of every pod, the pods of both plugins."""
    large.call(lambda sim: sim.reads.clear())
    done = subprocess.run([sys.executable, "-c", PROBE, str(large.kubeconfig)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["nodes"] == 1000 and found["plugin_pods"] == 2000 and found["in_use"] > 0, found
    held = found["peak"] - found["kept"]
    assert held < 0.6 * found["kept"], (f"{held / 2**20:.1f} MiB held beyond a "
                                        f"{found['kept'] / 2**20:.1f} MiB inventory")
    pod_lists = [parse_qs(r["query"]) for r in large.reads() if r["verb"] == "list" and r["path"] == "/api/v1/pods"
                 and not parse_qs(r["query"]).get("continue")]
    assert len(pod_lists) == 1, pod_lists
