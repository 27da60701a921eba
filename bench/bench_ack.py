"""Acknowledgement latency of slash commands: ``upgradebot serve`` next to a bare Bolt app.

Both run as their own processes on the same server stack (waitress, same thread
count), in the same run, against the same fake Slack Web API (``tests/fakeslack.py``)
and, for the bot, a kubesim ``gpu-large`` cluster (``--nodes``, default 5,000) in a third
process. The bot is ``serve`` as deployed: a policy file, so it acks and queues and its
two worker processes (decisions; commands and runs) do the work. By default a promotion of
the device plugin runs on every node while the commands arrive (``--idle``: none): the
bot's own canary, approved, then its promotion, approved, as people would. Each round
sends ``--concurrency`` signed commands at once (a barrier releases them together, in a
client process of its own: the fake Slack's threads, serving the bot's replies, never slow
the client's clock) from :data:`USERS` distinct people over :data:`CHANNELS` channels, so
``inventory`` does real work within each person's and channel's quota (one person sending
them all would measure the quota's refusals). The latency of one command is the time from
sending the request to reading the HTTP answer (the ack). For each verb and concurrency the
rounds (``--rounds``, 60) go in ``--blocks`` blocks (12), in each the bare app's rounds first, then the bot's; then
the bot's answers are awaited: the bare app is measured under the same background as the bot
(the same stretches of the promotion, whose rolling comes in spurts: with one block each, the
bare app's p99 at 200 was 73-96 ms across runs, as the spurts fell, while the bot's held at
105-118), never while the bot's workers still answer a burst (before each of the bare app's
blocks, the bench waits, up to ``--drain`` seconds, until the bot's commands lane holds
nothing waiting or running: the backlog of the scenario before, ``inventory`` at 50, once ran
beside the bare app at 200 and made it look 1.5x slower than it is). kubesim and the fake Slack run at normal priority
(``--kubesim-nice``/``--slack-nice`` lower them). Two scenarios: ``help`` (the front end's
own cost: the bot answers it in the ack itself, counted "in the ack", as is a command its
queue refuses, told it is busy there) and ``inventory`` (the workers keep taking inventories while
later rounds arrive, as in a busy channel). The bare app only acks. Each server's timed
rounds in each block follow ``--warmup`` bursts of the same verb, answered but not timed (the
first burst after a pause wakes idle threads; for the bot, every timed round meets its
workers answering the bursts before it). Prints p50/p99/max of each, the ratio, and how every
command was answered (nobody should be told the bot is busy below 200 at once). A p99 is
drawn from the slowest acks (the 121 slowest of 12,000 at 200), often a few bursts' tails, and
the simulator's DaemonSet controller runs in spurts (a sync of 5,000 nodes every second or
two) that slow whichever server's round they fall in: with 20 rounds in 4 blocks, one run
told 1.70x for ``help`` at 200 and the next 0.92x, where the two servers' p50s were within 2 %;
60 rounds in 12 blocks give each server three times as many stretches of the promotion.

The run's saves are read from the bot's ``upgradebot_run_save_bytes`` (what each save of
``serve`` and its workers sent to Redis): their count and how many sent over 16 KiB (target:
at most one, the canary's baseline, 1.8 MB at 5,000 nodes; a save over a version another
process wrote once sent the baseline again). Not Redis's ``MONITOR``: it tripled Redis's CPU
while the bot's commands were queued, and the bare app's were timed without it. ``--finish`` (the default; ``--no-finish``
stops at the last burst) waits for the promotion to end first, so the saves at its end are
counted too. The DaemonSet rolls one node at a time (``maxUnavailable: 1``, the
fixture's): about 3 s a node, so a 5,000-node promotion lasts
hours and is certainly running through every burst, but never ends within a bench. With
``--finish``, once the last burst is answered, its ``maxUnavailable`` is raised to
``--finish-max-unavailable`` (default 10 %), as an operator in a hurry would (the promotion
follows the controller's rollout, whatever its pace), so the rest rolls in minutes.

By default both ``serve`` s are measured, each beside a bare app of its own (``--serve``): the full
one during its promotion (target: p99 within 1.2x the bare app's at 50 and 200 at once), then
read-only ``serve`` (no policy file, no promotion; target 1.5x): it acks and queues as the full one
does (help in the ack itself) and its one worker (``upgradebot worker --read-only``) answers the
inventories, and a burst passes when every command is answered (its inventory, or a quota's
refusal), nobody is told the bot is busy and ``upgradebot_commands_total{outcome="unanswered"}``
is 0 (issue 40, item 5). The last lines, one per mode, give the ratios against their targets.

After each server's rounds it prints the CPU seconds every process of the bench used
meanwhile (from ``/proc``: the client, the server, the bot's workers, the fake Slack, Redis,
kubesim): the bot's workers answer each burst while the next arrives, on the same cores, so
its acks compete with its own work and the bare app's do not. ``--noise`` starts a second bare
app, measured after the first in each scenario: the same app against itself, the noise
floor of one run's ratio (no target).

``python -m bench.bench_ack [--rounds 20] [--concurrency 1 50 200] [--verb help --verb inventory] [--nodes 5000] [--serve full read-only] [--idle] [--read-only] [--no-finish] [--noise]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.cputally import CpuTally, processes
from bench.promotion import (
    SECRET,
    hurry,
    promotion_ended,
    promotion_running,
    save_sizes,
    unanswered_count,
)

__all__ = ["CpuTally", "main", "processes"]

if TYPE_CHECKING:
    from tests.fakeslack import FakeSlack

BIN = Path(sys.executable).parent
TOKEN = "xoxb-bench-0000-token"
USERS = [f"U0P{i:02}" for i in range(50)]
CHANNELS = [f"C0OPS{i}" for i in range(10)]
"""The people who send the commands, five to a channel (U0P00, U0P10 … in C0OPS0): each command
of a burst is the next one's, in the next channel, so the first taken are of as many channels."""
SERVERS = {"bare": "bare app", "again": "bare app again", "bot": "bot"}
"""Each server a scenario measures, by the key of its timings, as the CPU lines name it."""
POLICY = {  # serve as deployed: who may request and approve, in which channel, on which cluster
    "channels": {"C0OPS": {"cluster": "kubesim"}, **{channel: {"cluster": "kubesim"} for channel in CHANNELS}},
    "requesters": {"users": ["U0ANA"]},
    "approvers": {"users": ["U0LEAD"]},
    "reports": {"after": []},
    "steps": {"observe_window": "5s", "poll_interval": "1s", "ready_timeout": "600s"},
}


# ------------------------------------------------------------------ the bare app (child)
def child_bare(port: int, threads: int) -> None:
    """A Bolt app that only acks, served by the same HttpServer as ``upgradebot serve``, in the
    bot's own Bolt mode (``process_before_response=True``: the answer goes out when the listener
    returns; Bolt's default instead polls every 10 ms for ``ack()``, which would make the
    reference slower than the bot's own mode)."""
    from slack_bolt import App
    from slack_bolt.adapter.wsgi import SlackRequestHandler
    from slack_sdk import WebClient

    from bot.slack.http import HttpServer

    client = WebClient(token=os.environ["SLACK_BOT_TOKEN"], base_url=os.environ["SLACK_API_URL"])
    app = App(client=client, signing_secret=os.environ["SLACK_SIGNING_SECRET"], process_before_response=True)
    app.command("/upgrade")(lambda ack: ack())
    http = HttpServer(SlackRequestHandler(app), host="127.0.0.1", port=port, threads=threads).start()
    print(http.url, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    http.stop(timeout=5)


# ------------------------------------------------------------------------ processes
def start(command: list[str], env: dict[str, str], lines: int = 1) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline().strip()
    for _ in range(lines - 1):
        proc.stdout.readline()
    if not first.startswith("http"):
        proc.kill()
        raise SystemExit(f"{' '.join(command[:4])} did not start: {first!r}")
    return proc, first


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.stdin:
        proc.stdin.close()
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


# --------------------------------------------------------------------------- client
def burst(url: str, text: str, concurrency: int, response_url: str) -> tuple[list[float], int, int]:
    """``concurrency`` signed commands released together; the seconds each took to be acked, and
    how many acks carried the answer itself (a message: the bot's ``help``, or a command the
    bot's queue refused), and how many of those said the bot is busy.

    Sent from a client process of its own (:func:`child_client`): in this process the fake
    Slack serves the bot's replies, and its threads would slow the clock of the commands
    to the bot and not of those to the bare app (which sends no reply)."""
    client = _client()
    assert client.stdin is not None and client.stdout is not None
    client.stdin.write(json.dumps({"url": url, "text": text, "concurrency": concurrency,
                                   "response_url": response_url}) + "\n")
    client.stdin.flush()
    answer = json.loads(client.stdout.readline())
    if answer["failures"]:
        raise SystemExit(f"{len(answer['failures'])} command(s) failed at {url}: {answer['failures'][0]}")
    return [float(x) for x in answer["seconds"]], int(answer["in_ack"]), int(answer["busy"])


_CLIENT: list[subprocess.Popen[str]] = []


def _client() -> subprocess.Popen[str]:
    if not _CLIENT or _CLIENT[0].poll() is not None:
        _CLIENT[:] = [subprocess.Popen([sys.executable, "-m", "bench.bench_ack", "--child", "client"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env={**os.environ, "PYTHONPATH": os.getcwd()})]
    return _CLIENT[0]


def child_client() -> None:
    """The client: a burst per line of stdin (JSON), its timings as a line of JSON on stdout."""
    for line in sys.stdin:
        ask = json.loads(line)
        seconds, failures, in_ack, busy = _send_together(ask["url"], ask["text"], int(ask["concurrency"]),
                                                         ask["response_url"])
        print(json.dumps({"seconds": seconds, "failures": failures, "in_ack": in_ack, "busy": busy}), flush=True)


_NEXT = itertools.count()


def _send_together(url: str, text: str, concurrency: int,
                   response_url: str) -> tuple[list[float], list[str], int, int]:
    from tests.fakeslack import post, slash_command

    people = [next(_NEXT) % len(USERS) for _ in range(concurrency)]  # each command the next person's, burst after burst
    bodies = [slash_command(text, response_url=response_url, user=USERS[p],
                            channel=CHANNELS[p % len(CHANNELS)]) for p in people]  # the next ones: other channels
    barrier = threading.Barrier(concurrency)
    seconds: list[float] = [0.0] * concurrency
    failures: list[str] = []
    in_ack = [False] * concurrency
    busy = [False] * concurrency

    def one(i: int) -> None:
        barrier.wait()
        answer = post(url + "/slack/events", bodies[i], secret=SECRET)
        if answer.status != 200:
            failures.append(f"{answer.status} {answer.body[:200]!r}")
        seconds[i] = answer.seconds
        in_ack[i] = answer.body.startswith(b"{") and b'"response_type"' in answer.body
        busy[i] = in_ack[i] and b"I am busy" in answer.body

    workers = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return seconds, failures, sum(in_ack), sum(busy)


def summary(label: str, seconds: list[float]) -> tuple[float, float, float]:
    p50 = statistics.median(seconds) * 1000
    p99 = (statistics.quantiles(seconds, n=100, method="inclusive")[98] if len(seconds) > 1 else seconds[0]) * 1000
    worst = max(seconds) * 1000
    print(f"  {label:<34} {p50:9.1f} {p99:9.1f} {worst:9.1f}")
    return p50, p99, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_ack", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60,
                        help="bursts per scenario and server (default 60: a burst's answers queue together, so "
                             "a p99 over ten bursts was one or two bursts' tail; over twenty, in four blocks, "
                             "whichever server's blocks met more of the simulator's spurts lost by up to 1.8x)")
    parser.add_argument("--blocks", type=int, default=12,
                        help="the rounds are sent in this many blocks, the bare app's then the bot's in each, the "
                             "bot's answers drained before the next block (default 12, five rounds each: both are "
                             "timed through the same stretches of the promotion; one block of each was one luck of each)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="bursts sent to each server before its timed rounds, in each block, answered but "
                             "not timed (default 1: the first burst after a pause wakes idle threads and connections)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 50, 200],
                        help="commands sent at once, one scenario each (default: 1 50 200)")
    parser.add_argument("--verb", action="append", help="command text, repeatable (default: help, then inventory)")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for the replies of a scenario")
    parser.add_argument("--drain", type=float, default=600.0,
                        help="seconds to wait, before a scenario's bare rounds, for the bot's workers to answer the "
                             "commands of the scenarios before (default 600)")
    parser.add_argument("--threads", type=int, default=16, help="HTTP threads of both servers")
    parser.add_argument("--nodes", type=int, default=5000, help="GPU nodes of the kubesim gpu-large cluster")
    parser.add_argument("--idle", action="store_true", help="no promotion running while the commands arrive")
    parser.add_argument("--read-only", action="store_true",
                        help="serve without a policy file (implies --idle): every command must be answered "
                             "(as --serve read-only)")
    parser.add_argument("--serve", choices=list(TARGETS), nargs="+",
                        help="which serve to measure, each beside a bare app of its own, one after the other "
                             "(default: full then read-only, so `make bench` prints both lines; --read-only: "
                             "read-only; --idle: full)")
    parser.add_argument("--kubesim-nice", type=int, default=0,
                        help="niceness of kubesim (default 0: normal priority, an equal share of the cores)")
    parser.add_argument("--slack-nice", type=int, default=0,
                        help="niceness this process (the fake Slack, standing for Slack's servers) takes once the "
                             "servers and the client have started (default 0: normal priority)")
    parser.add_argument("--finish", action=argparse.BooleanOptionalAction, default=True,
                        help="after the last burst, wait for the promotion to end, its last saves counted (default; "
                             "--no-finish: stop at the last burst)")
    parser.add_argument("--finish-max-unavailable", default="10%",
                        help="with --finish: the DaemonSet's maxUnavailable once the bursts are over, so the rest of "
                             "the promotion rolls in minutes (default 10%%; the fixture's 1 takes ~3 s a node)")
    parser.add_argument("--noise", action="store_true",
                        help="a second bare app, measured after the first in each scenario: the ratio of the same app "
                             "against itself, what one run's ratio varies by when the servers do not differ")
    parser.add_argument("--child", choices=["bare", "client"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "client":
        child_client()
        return 0
    if args.child:
        child_bare(args.port, args.threads)
        return 0
    args.verb = args.verb or ["help", "inventory"]
    modes = args.serve or (["read-only"] if args.read_only else ["full"] if args.idle else list(TARGETS))
    worst, lines = 0, []
    for mode in modes:
        args.read_only = mode == "read-only"
        print(f"== {SERVES[mode]}", flush=True)
        results: dict[tuple[str, int], tuple[float, int]] = {}
        worst = max(worst, measure(args, results))
        lines.append(verdict(mode, args, results))
    print("ack p99 of upgradebot serve / the bare Bolt app's, measured side by side in one run:")
    for line in lines:
        print("  " + line)
    return worst


TARGETS = {"full": 1.2, "read-only": 1.5}
"""The most a p99 ack of ``serve`` may be, by mode, against the bare app's at 50 and 200 at once (issue 63)."""
SERVES = {"full": "full serve (a policy file: acks and queues, its workers answer)",
          "read-only": "read-only serve (no policy file: acks and queues, its read-only worker answers)"}


def verdict(mode: str, args: argparse.Namespace, results: dict[tuple[str, int], tuple[float, int]]) -> str:
    """The line of one mode: its ratio at each concurrency above 1, by verb, against its target, and
    how many were told the bot is busy (none may be, below their quota)."""
    judged = {key: value for key, value in results.items() if key[1] > 1}
    where = f"on {args.nodes} nodes" if mode == "read-only" or args.idle else f"during a {args.nodes}-node promotion"
    shown = ", ".join(f"{verb} {ratio:.2f}x at {at}" for (verb, at), (ratio, _) in sorted(judged.items()))
    busy = sum(told for _, told in results.values())
    met = all(ratio <= TARGETS[mode] for ratio, _ in judged.values()) and busy == 0
    return (f"{mode} serve {where}: {shown or 'no concurrency above 1 measured'} (target: within "
            f"{TARGETS[mode]}x at 50 and 200); told busy: {busy} (target: none below the quota)"
            + ("" if not judged else " - met" if met else " <- MISSED"))


def measure(args: argparse.Namespace, results: dict[tuple[str, int], tuple[float, int]]) -> int:
    """One mode of ``serve`` (``args.read_only``) beside a bare app, every verb and concurrency;
    ``results`` gets each one's p99 ratio and how many were told the bot is busy."""
    from bot.storage.embedded import EmbeddedRedis
    from bot.storage.redis_store import RedisRunStore
    from tests.fakeslack import FakeSlack

    # The bot gets a Redis the bench starts and stops (without REDIS_URL, serve would
    # start a per-user daemon that outlives the bench).
    with tempfile.TemporaryDirectory(prefix="bench-ack-") as tmp, FakeSlack(token=TOKEN) as fake, \
            EmbeddedRedis() as redis_server:
        kubeconfig = Path(tmp) / "kubeconfig"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
        env = {**base, "HOME": tmp, "KUBECONFIG": str(kubeconfig), "REDIS_URL": redis_server.url,
               "SLACK_BOT_TOKEN": TOKEN,
               "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": fake.api_url,
               "UPGRADEBOT_HTTP_THREADS": str(args.threads), "PYTHONPATH": os.getcwd()}
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(json.dumps(POLICY))
        if not args.read_only:
            env["UPGRADEBOT_CONFIG"] = str(policy)
        procs: list[subprocess.Popen[str]] = []
        try:
            niced = ["nice", "-n", str(args.kubesim_nice)] if args.kubesim_nice else []
            procs.append(start([*niced, sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario",
                                "gpu-large", "--nodes", str(args.nodes), "--kubeconfig", str(kubeconfig)], env,
                               lines=2)[0])
            bot, bot_url = start([str(BIN / "upgradebot"), "serve", "--host", "127.0.0.1", "--port", "0",
                                  "--drain", "1", "--allow-volatile-redis"], env, lines=2)  # a throwaway Redis
            procs.append(bot)
            bare, bare_url = start([sys.executable, "-m", "bench.bench_ack", "--child", "bare",
                                    "--threads", str(args.threads)], env)
            procs.append(bare)
            roles = {os.getpid(): "fake Slack (this process)", procs[0].pid: "kubesim", bot.pid: "upgradebot serve",
                     bare.pid: "bare app", **({redis_server.pid: "redis-server"} if redis_server.pid else {})}
            again_url = None
            if args.noise:
                again, again_url = start([sys.executable, "-m", "bench.bench_ack", "--child", "bare",
                                               "--threads", str(args.threads)], env)
                procs.append(again)
                roles[again.pid] = "bare app again"
            for url in (bare_url, bot_url):  # warm both (first-request imports and caches); starts the client
                burst(url, "help", 1, fake.response_url("warm"))
            if args.slack_nice:
                os.nice(args.slack_nice)  # the children keep their own priority
            roles[_CLIENT[0].pid] = "client"
            cpu = CpuTally(roles, children={bot.pid: "upgradebot's workers"})
            store = RedisRunStore.from_url(redis_server.url)
            run_id = None if args.idle or args.read_only else promotion_running(fake, bot_url, store, args.nodes)
            worst = 0
            for verb in args.verb:
                for concurrency in args.concurrency:
                    worst = max(worst, scenario(fake, verb, args, concurrency, bare_url=bare_url, bot_url=bot_url,
                                                again_url=again_url, cpu=cpu, redis_url=redis_server.url,
                                                results=results))
            if run_id is not None:
                state = store.get(run_id).state.value  # type: ignore[union-attr]
                print(f"the promotion on {args.nodes} nodes was still running after the last burst: "
                      f"{'yes' if state == 'promoting' else 'no (' + state + ')'}")
                worst = max(worst, int(state != "promoting"))
                worst = max(worst, save_sizes(bot_url))
                if args.finish:
                    hurry(kubeconfig, args.finish_max_unavailable)
                    started = time.perf_counter()
                    ended = promotion_ended(store, run_id)
                    print(f"the promotion ended: {ended} ({time.perf_counter() - started:.0f} s after the hurry; "
                          "target: done, its last saves below counted)", flush=True)
                    worst = max(worst, int(ended != "done"))  # its end unseen (or a failed run): no verdict on it
                    worst = max(worst, save_sizes(bot_url))
            store.close()
        finally:
            for proc in reversed(procs + _CLIENT):
                stop(proc)
    return worst


def scenario(fake: FakeSlack, verb: str, args: argparse.Namespace, concurrency: int, *, bare_url: str,
             bot_url: str, again_url: str | None, cpu: CpuTally, redis_url: str,
             results: dict[tuple[str, int], tuple[float, int]] | None = None) -> int:
    """One verb: rounds of bursts to each server in turn (the bare app, the bare app again at
    ``again_url`` with ``--noise``, the bot), then the replies awaited (capped); ``cpu`` tells
    what each process used during each server's rounds."""
    idle_after = commands_drained(redis_url, timeout=args.drain)
    print(f"the bot's commands lane idle before the bare app's rounds: {idle_after}", flush=True)
    fake.clear()
    timings: dict[str, list[float]] = {"bare": [], "again": [], "bot": []}
    started = time.perf_counter()
    warm: dict[str, list[float]] = {"bare": [], "again": [], "bot": []}
    servers = [("bare", bare_url), *([("again", again_url)] if again_url else []), ("bot", bot_url)]
    spent: dict[str, tuple[float, dict[str, float]]] = {}
    in_ack = busy_in_ack = 0  # the bot's commands answered in the ack itself (help, a refusal); told busy there
    blocks = max(1, min(args.blocks, args.rounds))
    sizes = [args.rounds // blocks + (1 if b < args.rounds % blocks else 0) for b in range(blocks)]
    for block, size in enumerate(sizes):
        if block:  # the bot's answers of the block before, before the bare app's next rounds
            commands_drained(redis_url, timeout=args.drain)
        for name, url in servers:  # the bare app first, the bot's workers idle
            before, since = cpu.sample(), time.perf_counter()
            for n in range(args.warmup + size):  # the warm-up bursts: sent and answered, not timed
                seconds, carried, busy_carried = burst(url, verb, concurrency, fake.response_url(name))
                (warm if n < args.warmup else timings)[name] += seconds
                in_ack += carried if name == "bot" else 0
                busy_in_ack += busy_carried if name == "bot" else 0
            wall, used = spent.get(name, (0.0, {}))
            now = cpu.since(before)
            spent[name] = (wall + time.perf_counter() - since,
                           {role: used.get(role, 0.0) + now.get(role, 0.0) for role in {*used, *now}})
    commands = (args.warmup * blocks + args.rounds) * concurrency

    def answered() -> tuple[int, int]:
        posted = [c for c in fake.of("chat.postMessage") if "thread_ts" not in c.body]
        ephemeral = [c for c in fake.of("response_url") if c.path.endswith("/bot")]
        return len(posted), len(ephemeral) + in_ack

    deadline = time.monotonic() + args.wait
    while sum(answered()) < commands and time.monotonic() < deadline:
        time.sleep(0.1)
    posted, ephemeral = answered()
    replies = [c.body.get("text", "") for c in fake.of("response_url") if c.path.endswith("/bot")]
    busy = sum("busy" in text for text in replies) + busy_in_ack
    reads = sum(text.startswith("I am busy:") for text in replies)  # the worker's long reads all running
    limited = sum("long command(s) running" in text for text in replies)
    print(f"{args.rounds} rounds of {concurrency} concurrent signed '/upgrade {verb}' in {blocks} block(s), each "
          f"after {args.warmup} not timed, the bot's answers drained between blocks, waitress with {args.threads} "
          f"threads each, one run; a p99 of {len(timings['bot'])} acks "
          f"is drawn from their {tail_of(len(timings['bot']))} slowest")
    print(f"  {'ack latency (ms)':<34} {'p50':>9} {'p99':>9} {'max':>9}")
    bare_p50, bare_p99, _ = summary("bare Bolt app (ack only)", timings["bare"])
    if again_url:
        again_p50, again_p99, _ = summary("the same bare app again", timings["again"])
        print(f"  {'again / bare (the noise floor)':<34} {again_p50 / bare_p50:8.2f}x {again_p99 / bare_p99:8.2f}x   "
              "(no target: the same app twice, measured one after the other)")
    bot_p50, bot_p99, _ = summary("upgradebot serve", timings["bot"])
    ratio = bot_p99 / bare_p99
    most = TARGETS["read-only" if args.read_only else "full"]
    target = f"(target: p99 within {most}x)" if concurrency > 1 else \
        f"(no target: one at a time, the p99 of {len(timings['bot'])} is about their slowest)"
    print(f"  {'upgradebot / bare':<34} {bot_p50 / bare_p50:8.2f}x {ratio:8.2f}x   {target}")
    for name, (wall, used) in spent.items():  # what the machine did meanwhile: the bot's work is done beside its acks
        shown = ", ".join(f"{role} {seconds:.2f}" for role, seconds in sorted(used.items(), key=lambda kv: -kv[1])
                          if seconds >= 0.01)
        print(f"  CPU seconds while the {SERVERS[name]}'s rounds ran ({wall:.2f} s on {os.cpu_count()} cores): "
              f"{shown or ('none used 0.01 s' if used else 'not measured (no /proc)')}")
    late = sum(s >= 3.0 for s in timings["bot"] + warm["bot"])  # a late ack is late, warm-up or not
    print(f"  acks within Slack's 3 s: {commands - late}/{commands}; answered after "
          f"{time.perf_counter() - started:.1f} s: {posted} posted in the channel, {ephemeral - busy - limited} "
          f"ephemeral ({in_ack} in the ack itself), {limited} refused by a quota of long commands ({len(USERS)} people in {len(CHANNELS)} channels), "
          f"{busy} told the bot is busy ({busy - reads} a lane full, {reads} the worker's long reads all running; "
          f"target: none below 200 at once), "
          f"{commands - posted - ephemeral} still waiting for a worker")
    if results is not None:
        results[(verb, concurrency)] = (ratio, busy)
    if args.read_only:
        unanswered = unanswered_count(bot_url)
        print(f"  unanswered (upgradebot_commands_total{{outcome=\"unanswered\"}}, since serve started): {unanswered:g}")
        missed = late > 0 or unanswered > 0 or posted + ephemeral < commands or busy > 0 or \
            (concurrency > 1 and ratio > most)
        return 1 if missed else 0
    missed = late > 0 or (concurrency > 1 and ratio > most) or (concurrency < 200 and busy > 0)
    return 1 if missed else 0


def commands_drained(url: str, *, timeout: float) -> str:
    """Wait until the bot's workers have answered every command queued before (the commands
    lane: waiting, delayed and taken), so the next bare app's rounds never run beside them;
    how long that took (or that ``timeout`` seconds passed first)."""
    import redis

    from bot.jobs import NAMESPACE

    client = redis.Redis.from_url(url)
    started = time.monotonic()
    try:
        while True:
            pipe = client.pipeline(transaction=False)
            pipe.llen(f"{NAMESPACE}:commands")
            pipe.hlen(f"{NAMESPACE}:commands.DQ.msgs")
            for key in client.scan_iter(f"{NAMESPACE}:__acks__.*.commands*", count=1000):
                pipe.scard(key)
            if not sum(int(n) for n in pipe.execute()):
                return f"after {time.monotonic() - started:.0f} s"
            if time.monotonic() - started > timeout:
                return f"no: still answering after {timeout:.0f} s"
            time.sleep(0.5)
    finally:
        client.close()


def tail_of(count: int) -> int:
    """How many of ``count`` acks, the slowest, a p99 of them is drawn from (``statistics.quantiles``,
    inclusive: between the 3rd and the 4th slowest of 250, so 4: one burst's tail may be all of them)."""
    return count - int(0.99 * (count - 1))


if __name__ == "__main__":
    sys.exit(main())
