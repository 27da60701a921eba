"""The event collector's aggregation on 200,000 watch events, next to a bare reference, in one run.

The input is what a watch on a busy cluster delivers: JSON lines ``{"type", "object"}`` of
core/v1 Events over 500 nodes (most of them Normal and irrelevant: Scheduled, Pulled,
Started...; recurring BackOffs whose ``count`` grows; FailedScheduling for lack of GPUs;
NodeNotReady; expired events DELETED), built before anything is measured.

- reference: ``json.loads`` each line and count it by reason in a dict (the least any
  consumer of the stream does);
- collector: ``json.loads`` each line and apply it to the run's
  :class:`~runbooks.stability.collecting.Counting` (what matters, dedupe by uid and count,
  the bounded tally) — the collector's hot path;
- collector + Redis: the same, storing tally, dedupe changes and version with the fenced
  Lua write every 5,000 events, on a real ``redis-server`` (skipped with ``--no-redis``).

Time is measured without tracing; memory in a second pass with ``tracemalloc`` (peak of
what the pass allocates, the input excluded), and the size of what is kept at the end.

``python -m bench.bench_collector [--events 200000] [--no-redis]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from runbooks.stability.collecting import Counting
from runbooks.stability.tallying import Scope

NODES = [f"gpu-node{i}" for i in range(1, 401)] + [f"cpu-node{i}" for i in range(1, 101)]
SCOPE = Scope(namespace="kube-system", daemonset="nvidia-device-plugin-daemonset", nodes=frozenset(NODES[:400]),
              gpu_resources=("nvidia.com/gpu",), drivers=("nvidia-device-plugin-daemonset", "k8s-device-plugin"),
              since="2025-01-06T00:00:00")
NORMAL = ("Scheduled", "Pulling", "Pulled", "Created", "Started", "Killing", "SuccessfulCreate")


def stamp(seconds: int) -> str:
    return (dt.datetime(2025, 1, 6, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_events(total: int, seed: int = 7) -> list[bytes]:
    """``total`` watch lines: new events, recurrences of warnings, deletions of old events."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    live: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    for i in range(total):
        roll = rng.random()
        if roll < 0.15 and warnings:
            obj = rng.choice(warnings)
            obj["count"] += 1
            obj["lastTimestamp"] = stamp(i)
            kind = "MODIFIED"
        elif roll < 0.20 and live:
            obj, kind = live.pop(rng.randrange(len(live))), "DELETED"
        else:
            node = rng.choice(NODES)
            pod = f"train-{rng.randrange(20_000)}"
            reason, etype, message = rng.choice(NORMAL), "Normal", f"Successfully did it for {pod} on {node}"
            if roll > 0.88:
                reason, etype, message = rng.choice((
                    ("BackOff", "Warning", f"Back-off restarting failed container main in pod {pod}"),
                    ("FailedScheduling", "Warning", "0/500 nodes are available: 400 Insufficient nvidia.com/gpu."),
                    ("NodeNotReady", "Warning", "Node is not ready"),
                    ("UnexpectedAdmissionError", "Warning", "Allocate failed due to device plugin GetPreferredAllocation"),
                ))
            obj = {"metadata": {"name": f"{pod}.{i:x}", "namespace": "ml-team", "uid": f"uid-{i}",
                                "resourceVersion": str(1000 + i), "creationTimestamp": stamp(i)},
                   "involvedObject": {"kind": "Pod", "namespace": "ml-team", "name": pod, "uid": f"pod-{pod}",
                                      "apiVersion": "v1", "fieldPath": "spec.containers{main}"},
                   "reason": reason, "message": message, "type": etype, "count": 1,
                   "source": {"component": "kubelet", "host": node}, "firstTimestamp": stamp(i),
                   "lastTimestamp": stamp(i), "reportingComponent": "kubelet", "reportingInstance": node}
            kind = "ADDED"
            live.append(obj)
            if etype == "Warning":
                warnings.append(obj)
        obj["metadata"]["resourceVersion"] = str(1000 + i)
        lines.append(json.dumps({"type": kind, "object": obj}).encode())
    return lines


def reference(lines: list[bytes]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in lines:
        event = json.loads(line)
        reason = event["object"].get("reason", "")
        counts[reason] = counts.get(reason, 0) + 1
    return counts


def collector(lines: list[bytes]) -> Counting:
    counting = Counting(SCOPE)
    for line in lines:
        event = json.loads(line)
        counting.apply(event["type"], event["object"])
    return counting


def with_redis(lines: list[bytes], store: Any) -> Counting:
    counting = Counting(SCOPE)
    for n, line in enumerate(lines, 1):
        event = json.loads(line)
        counting.apply(event["type"], event["object"])
        if n % 5_000 == 0 or n == len(lines):
            seen, gone = counting.take_changes()
            assert store.save_collection("r-bench001", owner="bench", rv=event["object"]["metadata"]["resourceVersion"],
                                         tally=counting.tally, seen=seen, gone=gone, info={"since": SCOPE.since})
    return counting


def timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def peak_mib(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_collector", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--no-redis", action="store_true", help="skip the pass that stores into a real Redis")
    args = parser.parse_args(argv)
    lines = make_events(args.events)
    size = sum(len(line) for line in lines)
    print(f"{len(lines):,} watch events, {size / 2**20:.0f} MiB of JSON, {len(NODES)} nodes", flush=True)
    ref_s, col_s = timed(lambda: reference(lines)), timed(lambda: collector(lines))
    ref_mib, col_mib = peak_mib(lambda: reference(lines)), peak_mib(lambda: collector(lines))
    counting = collector(lines)
    tally_bytes = len(json.dumps(counting.tally.to_dict()))
    print(f"  {'':<44} {'seconds':>8} {'events/s':>11} {'peak MiB':>9}")
    print(f"  {'reference: json.loads + count by reason':<44} {ref_s:8.2f} {len(lines) / ref_s:11,.0f} {ref_mib:9.2f}")
    print(f"  {'collector: json.loads + Counting.apply':<44} {col_s:8.2f} {len(lines) / col_s:11,.0f} {col_mib:9.2f}")
    if not args.no_redis:
        from bot.storage.embedded import EmbeddedRedis
        from bot.storage.redis_store import RedisRunStore

        with EmbeddedRedis() as server:
            store = RedisRunStore.from_url(server.url)
            lease = dt.timedelta(minutes=30)  # the writes are fenced by the leader's lease: the bench holds it
            red_s = timed(lambda: (store.client.flushall(), store.acquire_leader("bench", lease),
                                   with_redis(lines, store)), repeat=1)
            print(f"  {'collector + fenced Redis write / 5,000 ev':<44} {red_s:8.2f} {len(lines) / red_s:11,.0f} {'-':>9}")
            store.close()
    print(f"  collector / reference time: {col_s / ref_s:.2f}x; peak memory {col_mib:.1f} MiB against "
          f"{ref_mib:.2f} MiB (the tally and the dedupe state; the reference keeps one dict)")
    print(f"  kept at the end: tally {tally_bytes / 1024:.1f} KiB of JSON ({counting.tally.total:,} occurrences, "
          f"{len(counting.tally.reasons)} reasons), {len(counting.seen):,} event uids for dedupe")
    return 0


if __name__ == "__main__":
    sys.exit(main())
