"""What a shell verb costs before it does anything: ``upgradebot status`` and ``--help`` next to ``python -c pass``.

Every CI step and many tests start the CLI, so its import floor is paid per command.
Each command runs as a child process, the three in turn, ``--runs`` times; the best wall
time of each is kept (the floor: what the command costs when the machine lets it) and
its peak RSS is the child's own max RSS (``/usr/bin/time -f %M`` where there is one, as in
``bench_inventory``). ``status`` reads a real Redis started here (no active run: the
store is asked, nothing else); no cluster is needed. The project's bytecode is written
first (as ``make bytecode``; ``PYTHONDONTWRITEBYTECODE`` would otherwise have every run
compile the files changed since the last time), so the start is timed as installed.

Exits 1 when ``status`` takes more than 0.15 s (issue 63, on a quiet machine: the load
average is printed beside it; issue 39 asked 0.5 s) or more than 10 times ``python -c pass``.

``python -m bench.bench_shell [--runs 7]``
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import tempfile
from pathlib import Path

from bench.bench_inventory import Measurement, measure
from bot.storage.embedded import EmbeddedRedis

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
LIMIT_SECONDS = 0.15
"""``upgradebot status --json`` on a quiet machine (issue 63)."""
LIMIT_RATIO = 10.0


def best(runs: list[Measurement]) -> Measurement:
    fastest = min(runs, key=lambda m: m.seconds)
    return Measurement(fastest.label, fastest.seconds, min(m.max_rss_mib for m in runs), fastest.code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_shell", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (default 7); the best is kept")
    args = parser.parse_args(argv)

    for package in ("bot", "handlers", "runbooks"):
        compileall.compile_dir(ROOT / package, quiet=1)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "upgradebot --help": [str(BIN / "upgradebot"), "--help"],
        "upgradebot status --json": [str(BIN / "upgradebot"), "status", "--json"],
    }
    with tempfile.TemporaryDirectory(prefix="bench-shell-") as tmp, EmbeddedRedis() as redis:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
        env.update(HOME=tmp, REDIS_URL=redis.url)
        found: dict[str, list[Measurement]] = {label: [] for label in commands}
        for _ in range(args.runs + 1):  # the first round warms the page cache and is not counted
            for label, command in commands.items():
                found[label].append(measure(label, command, env))
    results = {label: best(runs[1:]) for label, runs in found.items()}
    floor, status = results["python -c pass"], results["upgradebot status --json"]
    print(f"best of {args.runs} runs each, in turn        {'wall':>10} {'x pass':>8} {'peak RSS':>10}")
    for label, m in results.items():
        print(f"  {label:<36} {m.seconds:8.3f} s {m.seconds / floor.seconds:7.1f}x {m.max_rss_mib:6.0f} MiB"
              + ("" if m.code == 0 else f"  (exit code {m.code})"))
    ratio = status.seconds / floor.seconds
    ok = status.code == 0 and status.seconds <= LIMIT_SECONDS and ratio <= LIMIT_RATIO
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"  status: {status.seconds:.3f} s, {ratio:.1f}x python -c pass "
          f"(targets: within {LIMIT_SECONDS} s quiet and {LIMIT_RATIO:.0f}x; load average {load:.1f} "
          f"on {os.cpu_count()} cores): {'ok' if ok else 'TOO SLOW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
