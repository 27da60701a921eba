"""``upgradebot serve`` acks and queues; its worker processes run the work.

Found on main before: every runbook ran in the process that acks Slack, so acks waited
behind the GIL while a promotion or a verify ran (p99 2.7 s at 5,000 nodes).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import yaml

from bot.jobs import NAMESPACE
from bot.processes import WorkerDown, WorkerProcesses
from bot.storage.layout import Keys
from bot.storage.redis_store import RedisRunStore, raw_client
from kubesim import KubeSim
from runbooks.engine.runs import RunState
from tests.e2e.harness import USERGROUPS
from tests.e2e.runs_support import (
    CANARY,
    RUN_POLICY,
    SlackClient,
    canary_approved,
    eventually,
    kept_in,
    posted_ts,
    roots,
    texts,
)
from tests.e2e.test_serve_process import SERVE
from tests.e2e.test_serve_restart import start
from tests.fakeslack import BOT_TOKEN, SIGNING_SECRET, FakeSlack, get, post, slash_command
from tests.support import reap


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                found.append(int(entry.name))
    return sorted(found)


def nice_of(pid: int) -> int:
    """The process's niceness (field 19 of /proc/<pid>/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[16])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def environment(fake: FakeSlack, sim: KubeSim, tmp_path: Path, redis_url: str) -> dict[str, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(RUN_POLICY))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(sim.kubeconfig), UPGRADEBOT_CONFIG=str(policy),
               SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=fake.api_url,
               REDIS_URL=redis_url, UPGRADEBOT_SLACK_PACE="0.01")
    return env


def test_the_run_is_driven_by_a_worker_not_by_the_process_that_acks(redis_url: str, tmp_path: Path) -> None:
    store = RedisRunStore.from_url(redis_url)
    log = tmp_path / "serve.log"
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31", speed=20) as sim:
        serve, url = start(environment(fake, sim, tmp_path, redis_url), log)
        try:
            workers = eventually(lambda: children_of(serve.pid) if len(children_of(serve.pid)) == 2 else None,
                                 "serve's two workers")
            eventually(lambda: get(url + "/readyz").status == 200, "ready once its workers run")
            eventually(lambda: [nice_of(pid) for pid in workers] == [nice_of(serve.pid) + 10] * 2,
                       "the workers' priority lowered: the acks get the CPU first")
            threads = [int(t.name) for pid in workers for t in Path(f"/proc/{pid}/task").iterdir()]
            assert len(threads) > 2 and all(nice_of(t) == nice_of(serve.pid) + 10 for t in threads), \
                "every thread of a worker runs at its lowered priority"
            canary_approved(SlackClient(url, fake, kept=kept_in(store)))
            (run,) = store.list_runs()
            owner = str(eventually(lambda: store.lease_owner(run.id), "the canary driven"))
            assert int(owner.split("/")[1]) in workers, (owner, workers)  # a worker holds the run, not serve
            eventually(lambda: store.get(run.id).state is RunState.AWAITING_PROMOTION,  # type: ignore[union-attr]
                       "the canary done", timeout=60)
            metrics = get(url + "/metrics").body.decode()
            assert 'upgradebot_job_wait_seconds_count{lane="commands"} 1.0' in metrics, "measured by the worker"
            assert 'upgradebot_job_wait_seconds_count{lane="decisions"} 1.0' in metrics
            saves = re.search(r"^upgradebot_run_save_bytes_count ([0-9.]+)$", metrics, re.M)
            assert saves is not None and float(saves.group(1)) >= 3, "the workers' run saves, their sizes observed"
            assert 'upgradebot_approvals_total{action="approve",outcome="accepted"} 1.0' in metrics
            assert metrics.count("# TYPE upgradebot_commands_total counter") == 1, "one family per name"
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=40) == 0, log.read_text()[-3000:]
            eventually(lambda: not any(alive(pid) for pid in workers), "the workers stopped with serve", timeout=10)
        finally:
            reap(serve)
            store.close()


def test_a_dead_worker_is_started_again_and_a_killed_serve_takes_its_workers_along(redis_url: str,
                                                                                    tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        serve, url = start(environment(fake, sim, tmp_path, redis_url), log)
        try:
            first = eventually(lambda: children_of(serve.pid) if len(children_of(serve.pid)) == 2 else None,
                               "serve's two workers")
            eventually(lambda: get(url + "/readyz").status == 200, "ready")
            os.kill(first[0], signal.SIGKILL)
            again = eventually(lambda: (lambda c: c if len(c) == 2 and first[0] not in c else None)(
                children_of(serve.pid)), "the worker started again", timeout=20)
            eventually(lambda: get(url + "/readyz").status == 200, "ready again", timeout=20)
            client = SlackClient(url, fake)
            started = time.monotonic()
            assert client.command("runs", user="U0ANA").status == 200
            eventually(lambda: fake.of("response_url") or fake.of("chat.postEphemeral") or fake.of("chat.postMessage"),
                       "runs answered by the workers")
            assert time.monotonic() - started < 20
            assert "exited with -9" in log.read_text()
            serve.send_signal(signal.SIGKILL)
            serve.wait(timeout=10)
            eventually(lambda: not any(alive(pid) for pid in again), "the workers gone with serve", timeout=10)
        finally:
            reap(serve)


def test_a_worker_that_cannot_start_keeps_serve_not_ready(tmp_path: Path) -> None:
    """A worker that exits at once (here: no policy file) is started again with a growing
    pause, and readiness says which lane has no worker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
    env["HOME"] = str(tmp_path)
    workers = WorkerProcesses([("decisions",)], env=env, drain=1).start()
    try:
        def down() -> str | None:
            try:
                workers.check()
            except WorkerDown as exc:
                return str(exc)
            return None

        assert eventually(down, "readiness failing") == "worker process not running: decisions"
    finally:
        assert workers.stop(timeout=5)
    assert not Path(workers.metrics_dir).exists()


def test_workers_on_another_machine_take_what_serve_queues(redis_url: str, tmp_path: Path) -> None:
    """UPGRADEBOT_WORKER_PROCESSES=0: serve starts none; it acks and queues, but /readyz says
    ``consumers`` failed until an ``upgradebot worker`` started on its own (as on another
    machine) has beaten once (issue 40, item 4); that worker answers the command."""
    log = tmp_path / "serve.log"
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = environment(fake, sim, tmp_path, redis_url)
        serve, url = start({**env, "UPGRADEBOT_WORKER_PROCESSES": "0"}, log)
        worker = None
        try:
            eventually(lambda: front_answers(url), "Slack and Redis answer; no consumer yet")
            assert get(url + "/readyz").status == 503
            assert children_of(serve.pid) == []
            client = SlackClient(url, fake)
            assert client.command("runs", user="U0ANA").status == 200
            time.sleep(1.0)
            assert not fake.of("response_url"), "nobody took the command yet"
            queued = [m.decode() for m in raw_client(redis_url).hvals(f"{NAMESPACE}:commands.msgs")]
            assert len(queued) == 1 and '"text":"runs"' in queued[0].replace(" ", "")
            assert "verification-token" not in queued[0], "Slack's verification token is not kept in Redis"
            with log.open("a") as stderr:
                worker = subprocess.Popen([*SERVE[:3], "worker", "--lanes", "decisions,commands,runs", "--drain", "5"],
                                          env=env, stderr=stderr, stdout=subprocess.DEVNULL)
            eventually(lambda: fake.of("response_url"), "runs answered by the worker", timeout=30)
            eventually(lambda: get(url + "/readyz").status == 200, "ready once the worker beat", timeout=30)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            reap(serve, worker)


def test_two_worker_processes_share_one_quota_of_long_commands(redis_url: str, tmp_path: Path) -> None:
    """Two ``upgradebot worker`` processes: the first runs a user's two verifies (the per-user
    quota); while it is paused, a third verify can only go to the second, which refuses it.
    Each process used to count its own, so the second ran it."""
    log = tmp_path / "serve.log"
    target = "kube-system/nvidia-device-plugin-daemonset"
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = environment(fake, sim, tmp_path, redis_url)
        serve, url = start({**env, "UPGRADEBOT_WORKER_PROCESSES": "0"}, log)
        workers: list[subprocess.Popen[bytes]] = []

        def worker() -> subprocess.Popen[bytes]:
            with log.open("a") as stderr:
                workers.append(subprocess.Popen([*SERVE[:3], "worker", "--lanes", "commands", "--drain", "5"],
                                                env=env, stderr=stderr, stdout=subprocess.DEVNULL))
            return workers[-1]

        def verified() -> int:
            return sum(c.body.get("text", "").startswith(f"Verify of {target}") for c in fake.of("chat.postMessage"))

        def refused() -> int:
            return sum("already has 2 long command(s) running" in c.body.get("text", "") for c in fake.of("response_url"))

        try:
            eventually(lambda: get(url + "/readyz").status in (200, 503), "serve answering")
            client = SlackClient(url, fake)
            first = worker()
            for _ in range(2):
                assert client.command(f"verify {target} window=10s", user="U0ANA").status == 200
            jobs = raw_client(redis_url)
            eventually(lambda: jobs.llen(f"{NAMESPACE}:commands") == 0 and jobs.hlen(f"{NAMESPACE}:commands.msgs") == 2,
                       "both verifies taken by the first worker", timeout=30)
            eventually(lambda: jobs.zcard(Keys.quota("user", "U0ANA")) == 2,
                       "both verifies counted in the shared quota", timeout=30)
            first.send_signal(signal.SIGSTOP)
            second = worker()
            assert client.command(f"verify {target} window=1s", user="U0ANA").status == 200
            eventually(lambda: refused() == 1, "the third refused by the second worker", timeout=30)
            first.send_signal(signal.SIGCONT)
            eventually(lambda: verified() == 2, "the first worker's two verifies answered", timeout=60)
            lane = f"{NAMESPACE}:commands"  # nothing queued, delayed or running (acked once answered): no answer to come
            eventually(lambda: not any((jobs.llen(lane), jobs.hlen(f"{lane}.msgs"), jobs.llen(f"{lane}.DQ"),
                                        jobs.hlen(f"{lane}.DQ.msgs"))), "the commands lane empty", timeout=30)
            assert (verified(), refused()) == (2, 1), log.read_text()[-3000:]
            for proc in (first, second):
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=30) == 0, log.read_text()[-3000:]
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            for proc in workers:
                proc.send_signal(signal.SIGCONT)
            reap(serve, *workers)


LONG_VERIFY = "verify kube-system/nvidia-device-plugin-daemonset window=10m"
WATCHERS = ("U0W1", "U0W2", "U0W3", "U0W4")


def test_long_reads_leave_workers_for_short_reads_and_requests(redis_url: str, tmp_path: Path) -> None:
    """Finding 3 of the security review (starvation by legal commands): four users each run two
    ``verify … window=10m`` in their own direct message, all within their quotas. While those
    watch their window, another user's ``help``, ``runs`` and ``status`` are answered and a
    requester's canary posts its request: long reads never take every thread of the commands
    worker. The eight verifies held all eight, and nothing else was answered before a window ended.
    The two verifies beyond the six long reads wait their turn, neither refused nor run (issue 39)."""
    log = tmp_path / "serve.log"
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = environment(fake, sim, tmp_path, redis_url)
        dms = {f"D{user[1:]}": {"cluster": "kubesim"} for user in WATCHERS}
        Path(env["UPGRADEBOT_CONFIG"]).write_text(yaml.safe_dump(
            {**RUN_POLICY, "channels": {**RUN_POLICY["channels"], **dms}}))  # type: ignore[dict-item]
        serve, url = start(env, log)
        try:
            eventually(lambda: get(url + "/readyz").status == 200, "ready once its workers run", timeout=30)
            for user in WATCHERS:
                for number in range(2):
                    body = slash_command(LONG_VERIFY, user=user, channel=f"D{user[1:]}",
                                         response_url=fake.response_url(f"verify-{user}-{number}"))
                    assert post(url + "/slack/events", body).status == 200
            jobs = raw_client(redis_url)
            eventually(lambda: jobs.llen(f"{NAMESPACE}:commands") == 0, "the eight verifies taken", timeout=30)
            client = SlackClient(url, fake)
            for text in ("runs", "status"):
                body = slash_command(text, user="U0EVE", response_url=fake.response_url(f"short-{text}"))
                assert post(url + "/slack/events", body).status == 200
            help_body = slash_command("help", user="U0EVE", response_url=fake.response_url("short-help"))
            assert "What I can do" in post(url + "/slack/events", help_body).message["text"]  # in the ack itself
            assert client.command(CANARY, user="U0BEN").status == 200

            def answered(text: str) -> bool:  # ephemeral on its response_url, or posted in the channel
                return any(c.path.endswith(f"/short-{text}") for c in fake.of("response_url")) or any(
                    f"<@U0EVE> ran `/upgrade {text}`" in texts(c) for c in fake.of("chat.postMessage"))

            for text in ("runs", "status"):
                eventually(lambda text=text: answered(text), f"{text} answered while the verifies run", timeout=20)
            (root,) = eventually(lambda: roots(fake), "the canary's run posted", timeout=20)  # type: ignore[misc]
            client.gate(posted_ts(root))
            verified = [c for c in fake.of("chat.postMessage") if texts(c).startswith("Verify of")]
            assert not verified, "the verifies were still watching their window"
            # the two verifies beyond the six long-read slots wait their turn on the lane's delay queue (issue 39)
            eventually(lambda: jobs.hlen(f"{NAMESPACE}:commands.DQ.msgs") >= 1, "the verifies beyond six waiting")
            said = [texts(c) for c in fake.of("response_url") if "/verify-" in c.path]
            assert not said, said  # neither refused ("I am busy") nor run: the six hold their slots
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            reap(serve)


def front_answers(url: str) -> bool:
    """Whether serve's front end says Slack and Redis answer (its ``consumers`` check may still
    fail: with ``UPGRADEBOT_WORKER_PROCESSES=0`` no worker beats until one is started)."""
    checks = json.loads(get(url + "/readyz").body).get("checks") or {}
    return checks.get("slack") == "ok" and checks.get("redis") == "ok"


def test_twenty_inventories_at_once_wait_their_turn_and_are_all_answered(redis_url: str, tmp_path: Path) -> None:
    """Issue 39: twenty users each send ``inventory`` at once to a worker with three command
    threads, two of them for long reads (``UPGRADEBOT_RESERVED_WORKERS=1``). A long read that
    finds both long-read slots taken waits its turn on its lane instead of being told "I am busy"
    (before, the free thread went through the queue refusing each one): all twenty are answered
    with the inventory, none "busy", and a ``runs`` sent meanwhile is answered by the reserved thread."""
    log = tmp_path / "serve.log"
    users = [f"U0I{n:02d}" for n in range(20)]
    with FakeSlack(usergroups=USERGROUPS) as fake, KubeSim(scenario="gpu-small", k8s_version="1.31") as sim:
        env = environment(fake, sim, tmp_path, redis_url)
        env.update(UPGRADEBOT_WORKERS="3", UPGRADEBOT_RESERVED_WORKERS="1", UPGRADEBOT_WORKER_PROCESSES="1")
        dms = {f"D{user[1:]}": {"cluster": "kubesim"} for user in users}
        Path(env["UPGRADEBOT_CONFIG"]).write_text(yaml.safe_dump(
            {**RUN_POLICY, "channels": {**RUN_POLICY["channels"], **dms}}))  # type: ignore[dict-item]
        serve, url = start(env, log)
        try:
            eventually(lambda: get(url + "/readyz").status == 200, "ready once its workers run", timeout=30)
            for user in users:
                body = slash_command("inventory", user=user, channel=f"D{user[1:]}",
                                     response_url=fake.response_url(f"inventory-{user}"))
                assert post(url + "/slack/events", body).status == 200
            short_body = slash_command("runs", user="U0EVE", response_url=fake.response_url("short-runs"))
            assert post(url + "/slack/events", short_body).status == 200

            def said_to(user: str) -> list[str]:  # ephemeral on its response_url, or posted in the DM
                return [texts(c) for c in fake.of("response_url") if c.path.endswith(f"/inventory-{user}")] + [
                    texts(c) for c in fake.of("chat.postMessage") if c.body.get("channel") == f"D{user[1:]}"]

            eventually(lambda: any(c.path.endswith("/short-runs") for c in fake.of("response_url"))
                       or any("<@U0EVE> ran `/upgrade runs`" in texts(c) for c in fake.of("chat.postMessage")),
                       "runs answered while the inventories run or wait", timeout=30)
            eventually(lambda: all(said_to(user) for user in users), "every inventory answered", timeout=120)
            answers = {user: said_to(user) for user in users}
            busy = {user: said for user, said in answers.items() if any("I am busy" in text for text in said)}
            assert not busy, busy
            assert all(any("Inventory of kubesim" in text for text in said) for said in answers.values()), answers
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, log.read_text()[-3000:]
        finally:
            reap(serve)
