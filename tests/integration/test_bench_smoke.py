"""The quick benches run end to end on a small input (``make bench`` runs them at full size):
a bench that no longer matches the code fails here, not on the first ``make bench`` after."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import bench_collector, bench_snapshot


def test_the_collector_bench_runs_with_its_redis_pass(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_collector.main(["--events", "6000"]) == 0
    out = capsys.readouterr().out
    assert "collector + fenced Redis write / 5,000 ev" in out and "collector / reference time" in out


def test_the_snapshot_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_snapshot.main(["--sizes", "50", "200"]) == 0
    assert "snapshot time per node, 200 against 50 nodes" in capsys.readouterr().out


def test_the_ack_bench_runs_both_servers_on_a_small_idle_cluster() -> None:
    """One command at a time, once: the servers, the client process and the summary (no ratio judged at 1)."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_ack", "--nodes", "20", "--idle", "--rounds", "1",
                           "--concurrency", "1", "--verb", "help", "--wait", "10", "--slack-nice", "0"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "upgradebot / bare" in done.stdout and "0 told the bot is busy" in done.stdout


def test_the_verify_bench_runs_the_cli_against_a_small_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 39: bench_verify spawns ``upgradebot verify … --json`` (no Redis reachable) and prints its
    ratio to the window; a 1 s window is mostly start-up, so only the run itself is checked here."""
    from bench import bench_verify

    bench_verify.main(["--nodes", "30", "--window", "1", "--runs", "1"])
    out = capsys.readouterr().out
    assert "verify from the CLI at 30 nodes: passed" in out and "x its window" in out
