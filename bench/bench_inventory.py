"""The inventory on gpu-large (1,000, 5,000 and 10,000 nodes, ~10 pods a node) next to kubectl, in one run.

kubesim serves the cluster from its own process, so the client side is measured alone.
Every measured command runs as a child process; its wall time is taken around it and
its peak memory is its own max RSS as GNU ``/usr/bin/time -f %M`` reports it: time is a
small fresh parent, so the figure is the command's alone (Linux counts a forked child's
copy of its parent's pages in the child's max RSS, so ``os.wait4`` from this process,
which grows to hundreds of MiB, would inflate every figure; without ``/usr/bin/time`` it
falls back to that, and says so). ``python -c pass`` is measured the same way as a check.
Output goes to /dev/null for both sides.

- ``upgradebot inventory --json`` (the whole CLI: start-up, reads, findings, JSON out)
- ``kubectl get nodes,pods,daemonsets -A -o json`` (the real kubectl from the venv)
- listing every pod through the adapter (raw JSON -> dicts) and through the client's
  generated models (``CoreV1Api.list_pod_for_all_namespaces``): why the adapter parses
  JSON itself.

Each size is a kubesim of its own, served in turn; the client-models listing is measured
at the first size only (it is the slowest command). With ``--runs R`` the inventory and
kubectl run R times in turn, A B A B, and the median of the pairs' ratios is judged.

Exits 1 when the inventory misses its targets at any size: at most 0.10x kubectl's time
(issue 63; issue 39 asked 0.15x at 5,000 nodes) and 150 MiB of peak RSS (issue 39).

``python -m bench.bench_inventory [--nodes 1000,5000,10000] [--runs 1] [--k8s-version 1.31] [--no-models]``
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Measurement:
    label: str
    seconds: float
    max_rss_mib: float
    code: int
    cpu: float = 0.0
    """User and system CPU seconds of the command and the processes it waited for."""


TIME = Path("/usr/bin/time")
LIMIT_RATIO = 0.10
"""``upgradebot inventory --json`` within this share of kubectl's time at 1,000, 5,000 and 10,000
nodes (issue 63: the shell's start-up, 0.46-0.50 s before, was most of it at 1,000)."""
SIZES = (1000, 5000, 10000)
LIMIT_RSS_MIB = 150.0
"""``upgradebot inventory --json`` within this peak RSS (issue 39)."""


def measure(label: str, command: list[str], env: dict[str, str]) -> Measurement:
    """Run ``command`` with stdout to /dev/null; wall time and its own peak RSS (see the module doc)."""
    with open(os.devnull, "wb") as sink, tempfile.TemporaryFile() as errors, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        wrapped = [str(TIME), "-f", "%M", "-o", rss.name, *command] if TIME.exists() else command
        start = time.perf_counter()
        proc = subprocess.Popen(wrapped, stdout=sink, stderr=errors, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):
            errors.seek(0)
            raise SystemExit(f"{label} failed ({proc.returncode}): {errors.read().decode(errors='replace')[:500]}")
        reported = [line for line in rss.read().split() if line.isdigit()]
    if reported:
        kib = float(reported[-1])
    else:
        kib = usage.ru_maxrss if sys.platform != "darwin" else usage.ru_maxrss / 1024
    return Measurement(label, seconds, kib / 1024, proc.returncode, usage.ru_utime + usage.ru_stime)


def serve(nodes: int, version: str, workdir: Path) -> tuple[subprocess.Popen[str], Path]:
    """kubesim gpu-large in its own process; returns it and its kubeconfig once it listens."""
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-large",
         "--nodes", str(nodes), "--k8s-version", version, "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("https://"):
        proc.kill()
        raise SystemExit(f"kubesim did not start: {url!r}")
    proc.stdout.readline()  # "kubeconfig written to …"
    return proc, kubeconfig


# ------------------------------------------------------------------ child processes
def child_list_raw(kubeconfig: str) -> None:
    from runbooks.cluster import Cluster
    from runbooks.cluster.resources import PODS

    with Cluster.from_kubeconfig(kubeconfig) as cluster:
        print(len(cluster.list_objects(PODS)))


def child_list_models(kubeconfig: str) -> None:
    from kubernetes import client, config  # the reference: the client's generated models

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    api = client.CoreV1Api(client.ApiClient(configuration))
    items, token = [], None
    while True:
        page = api.list_pod_for_all_namespaces(limit=500, _continue=token)
        items.extend(page.items)
        token = page.metadata._continue
        if not token:
            break
    print(len(items))


CHILDREN = {"list-raw": child_list_raw, "list-models": child_list_models}


# ------------------------------------------------------------------------- report
def row(m: Measurement) -> str:
    return f"  {m.label:<52} {m.seconds:8.2f} s {m.max_rss_mib:9.0f} MiB"


def ratio(label: str, slow: Measurement, fast: Measurement) -> str:
    return f"  {label:<52} {slow.seconds / fast.seconds:8.2f} x {slow.max_rss_mib / fast.max_rss_mib:9.2f} x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_inventory", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=",".join(map(str, SIZES)),
                        help="cluster sizes, comma-separated (default 1000,5000,10000)")
    parser.add_argument("--runs", type=int, default=1, help="inventory and kubectl runs at each size, in turn")
    parser.add_argument("--k8s-version", default="1.31")
    parser.add_argument("--no-models", action="store_true", help="skip the client-models listing (slow)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        CHILDREN[args.child](args.kubeconfig)
        return 0
    sizes = [int(n) for n in str(args.nodes).split(",") if n.strip()]
    verdicts = [one_size(nodes, args.k8s_version, runs=max(1, args.runs), models=not args.no_models and i == 0)
                for i, nodes in enumerate(sizes)]
    if len(sizes) > 1:
        print("inventory --json against kubectl, each size measured side by side:")
        for nodes, (_, share, _) in zip(sizes, verdicts, strict=True):
            print(f"  {nodes:>6} nodes: {share:.3f}x kubectl's time (target: within {LIMIT_RATIO:.2f}x)"
                  + ("" if share <= LIMIT_RATIO else "  <- MISSED"))
    return 0 if all(ok for ok, _, _ in verdicts) else 1


def one_size(nodes: int, version: str, *, runs: int, models: bool) -> tuple[bool, float, float]:
    """One kubesim of ``nodes`` nodes: every command measured, the table printed; (targets met, share, RSS)."""
    with tempfile.TemporaryDirectory(prefix="bench-inventory-") as tmp:
        workdir = Path(tmp)
        started = time.perf_counter()
        server, kubeconfig = serve(nodes, version, workdir)
        print(f"kubesim gpu-large, {nodes} nodes, Kubernetes {version}: "
              f"ready in {time.perf_counter() - started:.1f} s (own process)", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT"))}
        env.update(KUBECONFIG=str(kubeconfig), HOME=str(workdir))
        try:
            kubectl = [str(BIN / "kubectl")]
            subprocess.run([*kubectl, "api-resources"], env=env, capture_output=True, check=True)  # warm discovery cache
            me = [sys.executable, "-m", "bench.bench_inventory", "--kubeconfig", str(kubeconfig), "--child"]
            results = [
                measure("python + imports of the CLI (floor)", [sys.executable, "-c", "import bot.shell.cli"], env),
                measure("python -c pass (a check: the parent is not counted)", [sys.executable, "-c", "pass"], env),
            ]
            pairs = []
            for _ in range(runs):  # in turn, so a drift of the machine's speed meets both alike
                pairs.append((measure("upgradebot inventory --json", [str(BIN / "upgradebot"), "inventory", "--json"],
                                      env),
                              measure("kubectl get nodes,pods,daemonsets -A -o json",
                                      [*kubectl, "get", "nodes,pods,daemonsets", "-A", "-o", "json"], env)))
            pairs.sort(key=lambda pair: pair[0].seconds / pair[1].seconds)
            inventory, kubectl_run = pairs[len(pairs) // 2]  # the median pair
            results += [inventory, kubectl_run, measure("list all pods, adapter (raw JSON -> dicts)",
                                                        [*me, "list-raw"], env)]
            if models:
                results.append(measure("list all pods, client models (CoreV1Api)", [*me, "list-models"], env))
        finally:
            server.terminate()
            server.wait(timeout=30)
    floor, _, inventory, kubectl_run, raw = results[:5]
    print(f"  {'':<52} {'wall':>10} {'peak RSS':>13}" + (f"   (median of {runs} pairs)" if runs > 1 else ""))
    for m in results:
        print(row(m))
    print(ratio("inventory / kubectl", inventory, kubectl_run))
    if len(results) > 5:
        print(ratio("client models / adapter raw (listing every pod)", results[5], raw))
    print(f"  inventory above the interpreter floor: {inventory.max_rss_mib - floor.max_rss_mib:.0f} MiB")
    how = "/usr/bin/time -f %M" if TIME.exists() else "os.wait4 (no /usr/bin/time: includes the fork of this process)"
    print(f"  (inventory exit code {inventory.code}; peak RSS by {how}; this process's own peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, not counted)")
    return judged(inventory, kubectl_run, nodes=nodes), inventory.seconds / kubectl_run.seconds, inventory.max_rss_mib


def judged(inventory: Measurement, kubectl: Measurement, *, nodes: int | None = None) -> bool:
    """Print the two targets for ``inventory --json`` against kubectl of the same run (issues 63 and 39);
    True when both are met."""
    share = inventory.seconds / kubectl.seconds
    at = f" at {nodes} nodes" if nodes else ""
    lines = [
        (share <= LIMIT_RATIO, f"inventory --json{at}: {share:.3f}x kubectl's time (target: within {LIMIT_RATIO:.2f}x)"),
        (inventory.max_rss_mib <= LIMIT_RSS_MIB,
         f"inventory --json{at}: {inventory.max_rss_mib:.0f} MiB peak RSS (target: within {LIMIT_RSS_MIB:.0f} MiB)"),
    ]
    for ok, line in lines:
        print(f"  {line}{'' if ok else '  <- MISSED'}")
    return all(ok for ok, _ in lines)


if __name__ == "__main__":
    sys.exit(main())
