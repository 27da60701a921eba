"""What a run costs the cluster and the bot per node: verify, canary and promotion at 1,000, 5,000 and 10,000 nodes.

For each size, a kubesim ``gpu-large`` cluster in a process of its own (its DaemonSet
rolls 5 % of its nodes at a time) and the run engine in this process, on a Redis of its
own: ``verify`` of the DaemonSet with a ``--window`` observe window; a canary on
``gpu-node1`` (pre-checks, baseline, the canary, its verify), approved; then the
promotion (the controller's rollout followed, then verify on every node), approved. For
each phase: API requests and bytes read (kubesim's ``apiserver_response_sizes`` and
``apiserver_watch_events_sizes``, as a real API server counts them, read with kubectl),
this process's CPU (the engine, its watch caches, the Redis client; kubesim's is its
own), per node; for the promotion, bytes read per node per minute; the run saves (bytes
sent to Redis) of each phase: the canary's one that records the baseline beside the run,
and the largest of the others; the messages the run's Slack thread posted; and what
``status`` and ``runs`` cost once the run is done (they read the run without its
per-node parts); and kubesim's peak resident memory (``VmHWM``) at each size.

Prints the ratios between the largest and the smallest size and exits 1 when a target
is missed: verify within 1.2x its window and under 5 s of CPU at the largest size; bytes
read per node per minute of promotion within 1.5x from the smallest size to the largest;
the promotion's CPU per node at the largest size within 1.1x of the size before it (at least
5,000 nodes; issue 63: flat to 10,000); every promotion save under 64 KiB and fewer than 50
Slack messages; the canary phase (request, approval, canary, its verify) within 1.0x the
promotion's API requests, bytes read and CPU at every promoted size of 5,000 nodes or more
(issue 63); kubesim's peak RSS under 1 GiB at the largest size; ``status`` and ``runs`` within 1.5x.

``python -m bench.bench_run [--nodes 1000 5000 10000] [--window 30] [--promote-up-to N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NS, DS = "kube-system", "nvidia-device-plugin-daemonset"
TARGET = f"{NS}/{DS}"
BOT_TOKEN = "xoxb-bench-0000-token"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


@dataclass
class Phase:
    wall: float = 0.0
    cpu: float = 0.0
    requests: float = 0.0
    bytes: float = 0.0


@dataclass
class Size:
    nodes: int
    phases: dict[str, Phase] = field(default_factory=dict)
    saves: dict[str, list[int]] = field(default_factory=dict)
    reads: dict[str, float] = field(default_factory=dict)
    verify_ok: bool = False
    paused: int = 0
    posts: int = 0
    updates: int = 0
    sim_peak: int = 0
    """kubesim's peak resident memory, bytes (its ``VmHWM``)."""


def peak_rss(pid: int) -> int:
    """The peak resident memory of process ``pid`` so far, bytes (``VmHWM`` of /proc; 0 where there is none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def traffic(kubectl: Any) -> tuple[float, float]:
    """(requests, bytes) the API server has answered so far, read with ``kubectl get --raw /metrics``."""
    totals = {"apiserver_request_total": 0.0, "apiserver_response_sizes_sum": 0.0,
              "apiserver_watch_events_sizes_sum": 0.0}
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["apiserver_request_total"], (totals["apiserver_response_sizes_sum"]
                                               + totals["apiserver_watch_events_sizes_sum"])


def measure(kubectl: Any, work: Any) -> tuple[Phase, Any]:
    requests, read = traffic(kubectl)
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    phase = Phase(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu)
    after_requests, after_read = traffic(kubectl)
    phase.requests, phase.bytes = after_requests - requests, after_read - read
    return phase, result


def one_size(nodes: int, window: float, promote_up_to: int) -> Size:
    from bot.runtime import Observers
    from bot.settings import Settings
    from bot.slack.metrics import Metrics
    from bot.slack.pacing import Pacer
    from bot.slack.threads import SlackThreads
    from bot.slack.web import SlackWeb, make_client
    from bot.storage.embedded import EmbeddedRedis
    from bot.storage.redis_store import RedisRunStore
    from runbooks.cluster import Cluster
    from runbooks.cluster.informing import Watches
    from runbooks.daemonset.steps import DaemonSetSteps
    from runbooks.daemonset.verifying import verify
    from runbooks.engine.approving import Actor
    from runbooks.engine.clocks import SystemClock
    from runbooks.engine.commands import Engine, step_settings_of
    from runbooks.engine.driving import StepPaused
    from runbooks.engine.runs import RunState
    from runbooks.policy import Policy
    from tests.fakeslack import FakeSlack
    from tests.support import Kubectl

    size = Size(nodes)
    policy = Policy.model_validate({
        "approvers": {"users": ["U0BOB"]}, "reports": {"after": []},
        "steps": {"observe_window": "5s", "poll_interval": "1s", "ready_timeout": "600s"},
    })
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp, EmbeddedRedis() as redis_server, \
            FakeSlack(token=BOT_TOKEN) as fake:
        kubeconfig = Path(tmp) / "kubeconfig"
        sim = subprocess.Popen([sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-large",
                                "--nodes", str(nodes), "--speed", "5", "--kubeconfig", str(kubeconfig)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert sim.stdout is not None
            sim.stdout.readline()
            sim.stdout.readline()
            kubectl = Kubectl(kubeconfig)
            kubectl("patch", "daemonset", DS, "-n", NS, "--type=merge",
                                "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"maxUnavailable":"5%"}}}}')
            cluster = Cluster.from_kubeconfig(kubeconfig)
            store = RedisRunStore.from_url(redis_server.url)
            save = store.save
            phase = ["verify"]

            def counted(run: Any, **kwargs: Any) -> Any:
                stored = save(run, **kwargs)
                size.saves.setdefault(phase[0], []).append(store.last_save_bytes)
                return stored

            store.save = counted  # type: ignore[method-assign]
            observers = Observers()  # the run's Slack thread as serve posts it, to a fake Slack
            connect = lambda context: Cluster.from_kubeconfig(kubeconfig, context)  # noqa: E731
            watches = Watches(connect)  # the worker's watch cache, shared by the run's steps
            engine = Engine(store=store, steps=DaemonSetSteps(), policy=policy, clock=SystemClock(),
                            connect=connect, observer=observers, watches=watches)
            settings_ = Settings(SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_API_URL=fake.api_url)  # type: ignore[call-arg]
            pacer = Pacer(1.0)  # serve's pace: a message a second per channel
            observers.add(SlackThreads(web=SlackWeb(make_client(settings_), Metrics()), pacer=pacer,
                                       set_origin=engine.set_origin, audit=engine.audit))
            bob = Actor("U0BOB")
            settings = dataclasses.replace(step_settings_of(policy), observe_window=window)
            size.phases["verify"], outcome = measure(kubectl, lambda: verify(cluster, TARGET, settings=settings,
                                                                             clock=SystemClock()))
            size.verify_ok = outcome.ok

            def canary() -> Any:
                run = engine.request_canary(actor=Actor("U0ANA"), target=TARGET, image=NEW, node="gpu-node1",
                                            origin={"surface": "slack", "channel": "C0OPS"}).run
                engine.approve(run.id, actor=bob)
                return engine.advance(run.id)

            phase[0] = "canary"
            size.phases["canary"], run = measure(kubectl, canary)
            if run.state is not RunState.AWAITING_PROMOTION:
                raise SystemExit(f"{nodes} nodes: the canary ended {run.state.value}: {run.reason}")

            def promote() -> Any:
                engine.approve(run.id, actor=bob)
                while True:  # as the sweep would: a step paused by an API server too busy to answer goes on
                    try:
                        return engine.advance(run.id)
                    except StepPaused as exc:
                        size.paused += 1
                        print(f"  ({exc.__class__.__name__}: resumed)", flush=True)
                        time.sleep(2)

            if nodes <= promote_up_to:
                phase[0] = "promote"
                size.phases["promote"], run = measure(kubectl, promote)
                if run.state is not RunState.DONE:
                    raise SystemExit(f"{nodes} nodes: the promotion ended {run.state.value}: {run.reason}")
            pacer.close(timeout=60)  # the thread's last edits sent: nothing else runs in this process
            watches.close()
            for name, read in (("status", lambda: engine.get(run.id, whole=False)),
                               ("runs", lambda: engine.runs(limit=20, whole=False))):
                read()
                rounds = []
                for _ in range(5):  # the quickest of 5 rounds: what the read costs, not what interrupted it
                    began = time.perf_counter()
                    for _ in range(100):
                        read()
                    rounds.append((time.perf_counter() - began) / 100)
                size.reads[name] = min(rounds)
            size.posts = len(fake.of("chat.postMessage"))
            size.updates = len(fake.of("chat.update"))
            store.close()
        finally:
            size.sim_peak = peak_rss(sim.pid)
            sim.terminate()
            try:
                sim.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait()
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_run", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--window", type=float, default=30.0, help="verify's observe window, seconds (default 30)")
    parser.add_argument("--promote-up-to", type=int, default=None,
                        help="promote only clusters this large or smaller (default: every size)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", os.getcwd())
    sizes = []
    for nodes in args.nodes:
        print(f"-- {nodes} nodes", flush=True)
        size = one_size(nodes, args.window, nodes if args.promote_up_to is None else args.promote_up_to)
        sizes.append(size)
        print(f"  {'phase':<9} {'wall s':>8} {'CPU s':>7} {'CPU ms/node':>12} {'requests':>9} {'MiB read':>9} "
              f"{'KiB/node':>9}")
        for name, p in size.phases.items():
            print(f"  {name:<9} {p.wall:8.1f} {p.cpu:7.2f} {p.cpu * 1000 / nodes:12.2f} {p.requests:9.0f} "
                  f"{p.bytes / 2**20:9.2f} {p.bytes / 1024 / nodes:9.2f}")
        promote = size.phases.get("promote")
        if promote is not None:
            print(f"  promotion: {promote.bytes / nodes / max(promote.wall / 60, 1e-9) / 1024:.1f} KiB read per node "
                  "per minute", flush=True)
        for name, saves in size.saves.items():
            print(f"  {name} saves: {len(saves)}, the largest {max(saves) / 1024:.1f} KiB", flush=True)
        print(f"  the run's Slack thread: {size.posts} messages posted (target: under 50), {size.updates} edits; "
              f"status {size.reads['status'] * 1000:.2f} ms, runs {size.reads['runs'] * 1000:.2f} ms", flush=True)
        print(f"  verify on every node: {'passed' if size.verify_ok else 'FAILED'} in "
              f"{size.phases['verify'].wall:.1f} s for a {args.window:g} s window "
              f"({size.phases['verify'].wall / args.window:.2f}x), {size.phases['verify'].cpu:.2f} s of CPU", flush=True)
        print(f"  kubesim's peak RSS: {size.sim_peak / 2**20:.0f} MiB", flush=True)
    small, large = sizes[0], sizes[-1]
    missed = []

    def target(ok: bool, line: str) -> None:
        print(f"  {line}{'' if ok else '  <- MISSED'}")
        if not ok:
            missed.append(line)

    promoted = [s for s in sizes if "promote" in s.phases]
    print(f"{large.nodes} / {small.nodes} nodes:")
    if len(promoted) > 1:
        def per_minute(s: Size) -> float:
            p = s.phases["promote"]
            return p.bytes / s.nodes / max(p.wall / 60, 1e-9)

        ratio = per_minute(promoted[-1]) / per_minute(promoted[0])
        per_node = (promoted[-1].phases["promote"].bytes / promoted[-1].nodes) / max(
            promoted[0].phases["promote"].bytes / promoted[0].nodes, 1)
        target(ratio <= 1.5, f"promotion, {promoted[-1].nodes} / {promoted[0].nodes} nodes: API bytes read per node "
                             f"per minute {ratio:.2f}x (target: within 1.5x; bytes per node {per_node:.2f}x)")
    for name in ("verify", "canary"):
        a, b = small.phases[name], large.phases[name]
        print(f"  {name}: bytes per node {(b.bytes / large.nodes) / max(a.bytes / small.nodes, 1):.2f}x, "
              f"CPU per node {(b.cpu / large.nodes) / max(a.cpu / small.nodes, 1e-9):.2f}x")
    baseline = max(large.saves.get("canary", [0]))
    print(f"  the canary's baseline, saved once beside the run: {baseline / 1024:.1f} KiB at {large.nodes} nodes")
    def cpu_per_node(s: Size) -> float:
        return s.phases["promote"].cpu / s.nodes

    for before, after in itertools.pairwise(promoted):
        ratio = cpu_per_node(after) / max(cpu_per_node(before), 1e-12)
        line = (f"promotion CPU per node, {after.nodes} / {before.nodes} nodes: {ratio:.2f}x "
                f"({cpu_per_node(after) * 1000:.2f} / {cpu_per_node(before) * 1000:.2f} ms)")
        if after is promoted[-1] and before.nodes >= 5000:
            target(ratio <= 1.1, f"{line} (target: within 1.1x; issue 63: flat to 10,000 nodes)")
        else:
            print(f"  {line}")
    for each in promoted:
        canary, promotion = each.phases["canary"], each.phases["promote"]
        for label, spent, reference in (("requests", canary.requests, promotion.requests),
                                        ("bytes", canary.bytes, promotion.bytes), ("CPU", canary.cpu, promotion.cpu)):
            ratio = spent / max(reference, 1e-9)
            line = f"{each.nodes}-node canary/promotion {label}: {ratio:.2f}x"
            if each.nodes >= 5000 or each is promoted[-1]:
                target(ratio <= 1.0, f"{line} (target: within 1.0x; issue 63: the canary asks no more than the "
                                     "promotion)")
            else:
                print(f"  {line}")
    target(large.sim_peak < 2**30, f"kubesim's peak RSS at {large.nodes} nodes: {large.sim_peak / 2**20:.0f} MiB "
                                   "(target: under 1 GiB; issue 63)")
    if promoted:
        biggest = promoted[-1]
        largest = max(biggest.saves.get("promote", [0]))
        target(largest < 64 * 1024, f"{biggest.nodes}-node promotion: largest run save {largest / 1024:.1f} KiB "
                                    f"(target: under 64 KiB)")
        target(biggest.posts < 50, f"{biggest.nodes}-node run's Slack thread: {biggest.posts} messages posted "
                                   f"(target: under 50)")
    for name in ("status", "runs"):
        ratio = large.reads[name] / max(small.reads[name], 1e-9)
        target(ratio <= 1.5, f"{name}: {ratio:.2f}x ({large.reads[name] * 1000:.2f} ms at {large.nodes} nodes; "
                             f"target: within 1.5x)")
    verify = large.phases["verify"]
    target(large.verify_ok and verify.wall <= 1.2 * args.window and verify.cpu < 5.0,
           f"verify at {large.nodes} nodes: {'passed' if large.verify_ok else 'FAILED'}, {verify.wall / args.window:.2f}x "
           f"its window (target: within 1.2x), {verify.cpu:.2f} s of CPU (target: under 5 s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
