"""The shell SIGKILLed at every step boundary and inside the canary, promotion and rollback steps.

Each scenario drives one run with real ``upgradebot`` processes against its own kubesim
and its own Redis database. ``UPGRADEBOT_TEST_KILL_AT`` makes the process SIGKILL itself
at a named engine checkpoint (see ``runbooks/engine/driving.py``); ``upgradebot resume`` then
finishes the run. kubesim's mutation log must equal the one of an uninterrupted run: no
mutation is applied twice, none is lost. Scenarios run a few at a time to keep the test
near a minute.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from kubesim.certs import serving_cert
from runbooks.cluster import Cluster
from runbooks.daemonset.steps import DaemonSetSteps
from runbooks.engine.approving import Actor
from runbooks.engine.commands import Engine
from runbooks.policy import Policy
from tests.integration.test_drain_kubesim import apply, trainer
from tests.support import TEST_BUILDS, Kubectl, kubesim_mirrors, pinned, shell_identities

UPGRADEBOT = str(Path(sys.executable).parent / "upgradebot")
TARGET = "kube-system/nvidia-device-plugin-daemonset"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
IDENTITIES, TOKENS = shell_identities("U0BOB", "U0CAROL")
POLICY = """
approvers: {users: [U0BOB, U0CAROL]}
shell: {approvals: true}
reports: {after: []}
steps: {observe_window: 1s, poll_interval: 0.1s, ready_timeout: 60s}
""" + IDENTITIES
KILLED = -signal.SIGKILL
SPEED = 60
"""kubesim's clock: the pods' pulls, starts, terminations and crash back-offs (seconds on it) take
a sixtieth of them on the wall clock; the bot's processes keep theirs (the 1 s windows, the lease)."""


@dataclass(frozen=True)
class Scenario:
    """A run to its end, killed at ``canary_kill`` during the canary phase and ``promotion_kill``."""

    canary_kill: str | None = None
    promotion_kill: str | None = None
    crash: bool = False  # a -crash image: the canary fails and is rolled back
    drain: bool = False  # the target drains: trainers on gpu-node1 and gpu-node2 are evicted first

    @property
    def end(self) -> str:
        return "rolled_back" if self.crash else "done"


PROMOTING = [
    Scenario("transition:canary_rolling", "transition:promoting"),
    Scenario("progress:canary_rolling:1", "progress:promoting:1"),
    Scenario("record:canary_rolling:canary.strategy", "record:promoting:promote.strategy"),
    Scenario("record:canary_rolling:canary.image", "record:promoting:promote.node"),
    Scenario("record:canary_rolling:canary.delete-pod", "after:promoting"),
    Scenario("after:canary_rolling", "transition:verifying"),
    Scenario("transition:canary_verifying", "after:verifying"),
    Scenario("after:canary_verifying", "transition:monitoring"),
    Scenario("transition:awaiting_promotion", None),
]
ROLLING_BACK = [
    Scenario("transition:rolling_back", crash=True),
    Scenario("record:rolling_back:rollback.template", crash=True),
    Scenario("record:rolling_back:rollback.strategy", crash=True),
    Scenario("after:rolling_back", crash=True),
]
DRAINING = [
    Scenario("record:canary_rolling:canary.drain.cordon", "record:promoting:promote.wave1.drain.cordon", drain=True),
    Scenario("record:canary_rolling:canary.drain.evict", "record:promoting:promote.wave1.drain.evict", drain=True),
    Scenario("record:canary_verifying:verify_canary.uncordon", "record:promoting:promote.wave1.uncordon", drain=True),
]
REFERENCES = [Scenario(), Scenario(crash=True), Scenario(drain=True)]
DRAIN_TARGET = {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset", "drain": {"timeout": "60s"}}


@dataclass
class Played:
    scenario: Scenario
    state: str
    exits: list[int]
    mutations: list[tuple[str, str]]
    images: set[str]
    audit: list[dict]


def successful_mutations(sim: KubeSim) -> list[tuple[str, str]]:
    return [(m["method"], m["path"]) for m in sim.mutations() if int(m["code"]) < 400 and not m["dryRun"]]


def shape(mutations: list[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """Mutations with pod names blurred (they are random per cluster), evictions left out: the canary's
    node is drained again before wave 1 (to move to the digest it verified), and whether its trainer
    was back by then to be evicted again is a race with the scheduler (:func:`evictions`)."""
    return Counter((method, re.sub(r"/pods/[^/]+(/eviction)?$", r"/pods/*\1", path)) for method, path in mutations
                   if not path.endswith("/eviction"))


def evictions(mutations: list[tuple[str, str]]) -> Counter[str]:
    """Each evicted pod, with how many times it was evicted."""
    return Counter(path for method, path in mutations if method == "POST" and path.endswith("/eviction"))


def play(scenario: Scenario, redis_url: str, home: Path) -> Played:
    home.mkdir(parents=True)
    (home / "policy.yaml").write_text(POLICY + (f"targets: [{json.dumps(DRAIN_TARGET)}]\n" if scenario.drain else ""))
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.31", speed=SPEED, kubeconfig=home / "kubeconfig") as sim:
        with (home / "policy.yaml").open("a") as policy:  # digests asked of kubesim's registry
            policy.write(f"images: {json.dumps({'mirrors': kubesim_mirrors(sim.url, sim.kubeconfig)})}\n")
        if scenario.drain:
            kubectl = Kubectl(sim.kubeconfig)
            kubectl("delete", "pod", "-n", "ml-team", "trainer-0", "trainer-1", "--wait=false")  # bare pods
            apply(kubectl, trainer("trainer-1", "gpu-node1"), trainer("trainer-2", "gpu-node2"))
            for name in ("trainer-1", "trainer-2"):
                kubectl("rollout", "status", f"deployment/{name}", "-n", "ml-team", "--timeout=60s", timeout=90)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "REDIS"))}
        env = {**base, "HOME": str(home), "KUBECONFIG": str(sim.kubeconfig), "REDIS_URL": redis_url,
               "UPGRADEBOT_CONFIG": str(home / "policy.yaml")}

        def bot(*args: str, kill: str | None = None, who: str = "U0BOB") -> int:
            extra = {"UPGRADEBOT_TEST_KILL_AT": kill} if kill else {}
            extra["UPGRADEBOT_TOKEN"] = TOKENS[who]
            proc = subprocess.run([UPGRADEBOT, *args], capture_output=True, text=True, env={**env, **extra}, timeout=180)
            assert "Traceback" not in proc.stderr, proc.stderr
            return proc.returncode

        store = RedisRunStore.from_url(redis_url)
        policy = Policy.model_validate({"targets": [DRAIN_TARGET]}) if scenario.drain else Policy()
        engine = Engine(store=store, steps=DaemonSetSteps(), policy=policy,
                        connect=lambda context: Cluster.from_kubeconfig(sim.kubeconfig, context))
        image = NEW + ("-crash" if scenario.crash else "")
        run_id = engine.request_canary(actor=Actor("U0ALICE"), target=TARGET, image=image, node="gpu-node1").run.id
        def approve(gate: str, kill: str | None, who: str = "U0BOB") -> list[int]:
            """The approval's exit, then ``resume``'s where a kill was asked for (none is needed after a whole phase)."""
            return [bot("approve", run_id, gate, kill=kill, who=who)] + ([bot("resume")] if kill else [])

        exits = approve("canary", scenario.canary_kill)
        if not scenario.crash:
            exits += approve("promotion", scenario.promotion_kill, who="U0CAROL")
        run = store.get(run_id)
        assert run is not None
        pods = Kubectl(sim.kubeconfig).json("get", "pods", "-n", "kube-system")["items"]
        images = {p["spec"]["containers"][0]["image"] for p in pods if p["metadata"]["name"].startswith("nvidia-device-plugin-")}
        return Played(scenario, run.state.value, exits, successful_mutations(sim), images, store.audit(run_id))


def test_runs_killed_anywhere_finish_after_resume_without_repeating_a_mutation(redis_url: str, tmp_path: Path) -> None:
    """SIGKILL at every step boundary and mid-step, then resume: each run ends right, mutations equal an unkilled run's."""
    check_played(REFERENCES[:2] + PROMOTING + ROLLING_BACK, redis_url, tmp_path)


def test_draining_runs_killed_mid_drain_finish_after_resume_without_repeating_a_cordon_or_eviction(
        redis_url: str, tmp_path: Path) -> None:
    """A target that drains, killed after its cordon, after its eviction and after its uncordon,
    in the canary and in the promotion: each run ends done with the mutations of an unkilled one
    (one cordon, one eviction and one uncordon per node)."""
    check_played(REFERENCES[2:] + DRAINING, redis_url, tmp_path)


def phase(kill: str | None) -> list[str | None]:
    """The kill points of one phase's processes: the approval's, then ``resume``'s (never killed) if it was killed."""
    return [kill, None] if kill else [None]


def check_played(scenarios: list[Scenario], redis_url: str, tmp_path: Path) -> None:
    """Play the scenarios (their references, unkilled, first) and hold each to its reference."""
    serving_cert()  # made once before the threads: its lru_cache does not stop two threads making two
    with ThreadPoolExecutor(max_workers=4) as pool:
        played = list(pool.map(
            lambda indexed: play(indexed[1], f"{redis_url}?db={indexed[0] + 1}", tmp_path / f"s{indexed[0]}"),
            enumerate(scenarios),
        ))
    references = {(r.scenario.crash, r.scenario.drain): r for r in played if r.scenario in REFERENCES}
    for (crash, drain), ref in references.items():
        # promoted: every node names the digest the canary verified (images.pin_digest)
        assert ref.state == ("rolled_back" if crash else "done") and ref.images == {OLD if crash else pinned(NEW)}, \
            ref.audit[-3:]
        if drain:
            assert sum(evictions(ref.mutations).values()) in (2, 3)  # trainer-1 again if back on the canary's node
            assert Counter(p for m, p in ref.mutations if "/nodes/" in p) == {  # a cordon and an uncordon each,
                "/api/v1/nodes/gpu-node1": 4, "/api/v1/nodes/gpu-node2": 2, "/api/v1/nodes/gpu-node3": 2}  # the canary's twice
    for result in played:
        s = result.scenario
        reference = {s.crash: references[s.crash, s.drain]}
        label = f"{s.canary_kill} / {s.promotion_kill}"
        assert result.state == s.end, (label, [e["detail"] for e in result.audit if e["status"] == "failed"][-3:])
        kills = phase(s.canary_kill) + ([] if s.crash else phase(s.promotion_kill))
        assert [code == KILLED for code in result.exits] == [k is not None for k in kills], (label, result.exits)
        assert result.images == reference[s.crash].images, label
        assert shape(result.mutations) == shape(reference[s.crash].mutations), (label, result.mutations)
        deleted = Counter(path for method, path in result.mutations if method == "DELETE")
        assert all(n == 1 for n in deleted.values()), (label, deleted)
        assert all(n == 1 for n in evictions(result.mutations).values()), (label, result.mutations)  # none repeated
        assert sum(evictions(result.mutations).values()) in ((2, 3) if s.drain else (0,)), (label, result.mutations)
        transitions = [e["name"] for e in result.audit if e["kind"] == "transition"]
        assert transitions == [e["name"] for e in reference[s.crash].audit if e["kind"] == "transition"], label
