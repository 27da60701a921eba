"""The quick benches run end to end on a small input (``make bench`` runs them at full size):
a bench that no longer matches the code fails here, not on the first ``make bench`` after."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

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
    """One command at a time, once: the servers, the client process and the summary (no ratio
    judged at 1), with the bare app measured twice (``--noise``) and the CPU each process used."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_ack", "--nodes", "20", "--idle", "--rounds", "1",
                           "--concurrency", "1", "--verb", "help", "--wait", "10", "--slack-nice", "0", "--noise"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "upgradebot / bare" in done.stdout and "0 told the bot is busy" in done.stdout
    assert "again / bare (the noise floor)" in done.stdout
    answered = re.search(r"acks within Slack's 3 s: (\d+)/\d+.*?(\d+) ephemeral \((\d+) in the ack itself\)", done.stdout)
    assert answered is not None and answered[1] == answered[2] == answered[3] != "0", done.stdout  # help: in the ack
    spent = {line.split("'s rounds ran")[0].rsplit("the ", 1)[1]: line for line in done.stdout.splitlines()
             if line.strip().startswith("CPU seconds while")}
    assert set(spent) == {"bare app", "bare app again", "bot"}, done.stdout
    assert not any("not measured" in line for line in spent.values()), spent


def test_the_ack_bench_measures_the_full_and_the_read_only_serve_and_ends_with_a_line_each() -> None:
    """Issue 63: ``make bench`` prints the ack ratio of both ``serve`` s: the full one, then read-only
    ``serve`` (no policy file), whose inventories its worker answers (none unanswered, none "busy")."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_ack", "--serve", "full", "read-only", "--idle",
                           "--nodes", "20", "--rounds", "1", "--concurrency", "1", "--verb", "inventory",
                           "--wait", "30"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert out.index("== full serve") < out.index("== read-only serve"), out
    assert 'unanswered (upgradebot_commands_total{outcome="unanswered"}, since serve started): 0' in out, out
    last = out[out.index("measured side by side in one run:"):].splitlines()[1:]
    assert [line.split(":")[0].strip() for line in last] == ["full serve on 20 nodes", "read-only serve on 20 nodes"]
    assert all("told busy: 0" in line for line in last), last


def test_the_ack_benchs_cpu_tally_counts_each_process_under_its_role_and_a_child_under_its_parents() -> None:
    """The CPU lines of ``bench_ack``: a process named in the roles is counted under its name, a
    process it started under its children's name; nothing else on the machine is counted."""
    from bench.bench_ack import CpuTally

    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    child = spin + "time.sleep(60)\n"  # spins, then stays to be sampled
    probe = subprocess.Popen([sys.executable, "-c", spin + "import subprocess, sys\n"
                              f"subprocess.run([sys.executable, '-c', {child!r}])\n"])
    tally = CpuTally({probe.pid: "parent"}, children={probe.pid: "its child"})
    seen: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seen.get("its child", 0.0) < 0.25:
            seen = tally.sample()
            time.sleep(0.1)
    finally:
        for pid in _children_of(probe.pid):
            os.kill(pid, signal.SIGKILL)
        probe.kill()
        probe.wait()
    assert set(seen) == {"parent", "its child"}, seen
    assert seen["parent"] >= 0.25 and seen["its child"] >= 0.25, seen


def _children_of(pid: int) -> list[int]:
    from bench.bench_ack import processes

    return [child for child, (parent, _) in processes().items() if parent == pid]


def test_the_inventory_bench_judges_its_targets_against_kubectl(capsys: pytest.CaptureFixture[str]) -> None:
    """issues 39 and 63: the inventory bench prints ``inventory --json``'s share of kubectl's time with the
    0.10x target (issue 63) and its peak RSS with the 150 MiB target, at each size asked for, and exits 1
    when either is missed."""
    from bench import bench_inventory
    from bench.bench_inventory import Measurement

    code = bench_inventory.main(["--nodes", "20,30", "--no-models"])
    out = capsys.readouterr().out
    for nodes in (20, 30):
        assert f"inventory --json at {nodes} nodes: " in out, out
        assert f"{nodes} nodes: " in out.split("each size measured side by side:")[1], out
    assert "x kubectl's time (target: within 0.10x)" in out and "peak RSS (target: within 150 MiB)" in out, out
    assert code == (1 if "<- MISSED" in out else 0), out  # 20 nodes: start-up dominates, so likely missed

    kubectl = Measurement("kubectl", 10.0, 400.0, 0)
    assert bench_inventory.judged(Measurement("inventory", 1.0, 150.0, 0), kubectl)
    assert not bench_inventory.judged(Measurement("inventory", 1.1, 100.0, 0), kubectl)
    assert not bench_inventory.judged(Measurement("inventory", 1.0, 151.0, 1), kubectl)


@pytest.mark.slow
def test_the_ack_bench_with_finish_sees_the_promotion_end_and_judges_its_last_saves() -> None:
    """Issue 39: ``bench_ack --finish`` reaches the end of the promotion it runs (its DaemonSet
    hurried once the bursts are over; the fixture's one node at a time never ends a 5,000-node
    promotion within a bench) and judges the run's saves (none but the canary's baseline over 16
    KiB, read from the bot's ``upgradebot_run_save_bytes``) with the saves at that end counted; a promotion it cannot see end fails the bench."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_ack", "--nodes", "20", "--rounds", "1",
                           "--concurrency", "1", "--verb", "help", "--wait", "30", "--finish",
                           "--finish-max-unavailable", "100%"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert "maxUnavailable is now 100%" in out and "the promotion ended: done" in out, out[-2000:]
    end = out[out.index("the promotion ended: done"):]
    saves = re.search(r"run saves \(upgradebot_run_save_bytes, serve and its workers\): (\d+); over 16 KiB: (\d+) "
                      r"\(target: at most 1, the canary's baseline, sent once\)", end)
    assert saves is not None and int(saves.group(1)) >= 5 and int(saves.group(2)) <= 1, end


def test_the_verify_bench_runs_the_cli_against_a_small_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    """issue 39: bench_verify spawns ``upgradebot verify … --json`` (no Redis reachable) and prints its
    ratio to the window; a 1 s window is mostly start-up, so only the run itself is checked here."""
    from bench import bench_verify

    bench_verify.main(["--nodes", "30", "--window", "1", "--runs", "1"])
    out = capsys.readouterr().out
    assert "verify from the CLI at 30 nodes: passed" in out and "x its window" in out
