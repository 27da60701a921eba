"""``upgradebot console`` and ``upgradebot demo`` as a person (or ``make demo``) runs them."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubesim import KubeSim

TARGET = "kube-system/nvidia-device-plugin-daemonset"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
    env.update(HOME=str(tmp_path), **extra)
    return env


def test_console_acts_as_its_account_and_numbers_buttons(cluster: KubeSim, redis_url: str, tmp_path: Path) -> None:
    """Typed lines as the account's identity: a canary request, /as refused, Approve (a number) refused
    (no approvals from the console by default), Reject by number withdraws it."""
    policy = tmp_path / "policy.yaml"
    me = pwd.getpwuid(os.geteuid()).pw_name
    policy.write_text(yaml.safe_dump({"approvers": {"users": ["U0ALICE", "U0BOB"]}, "reports": {"after": []},
                                      "identities": {"accounts": {me: "U0ALICE"}}}))
    lines = [f"/upgrade canary {TARGET} image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0 node=gpu-node1",
             "/as U0BOB", "1", "2", "runs", "/quit", "help"]
    proc = subprocess.run([sys.executable, "-m", "bot", "console"], input="\n".join(lines) + "\n", text=True,
                          capture_output=True, timeout=60,
                          env=clean_env(tmp_path, KUBECONFIG=str(cluster.kubeconfig), REDIS_URL=redis_url,
                                        UPGRADEBOT_CONFIG=str(policy)))
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr
    assert "[1] Approve  [2] Reject" in out and "(you are now" not in out
    assert "you act as U0ALICE, as the policy's identities map your account" in out
    assert "approvals from the console are off" in out
    assert "(U0ALICE clicked [2] Reject)" in out and "Rejected by @U0ALICE" in out
    assert "state rejected: the canary request was rejected by U0ALICE; nothing was changed" in out
    assert "rejected" in out.split("Runs (1)")[1] and "What I can do" not in out  # nothing read after /quit


@pytest.mark.slow
def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    """`upgradebot demo` exits 0 with every expected step of the story in its transcript."""
    proc = subprocess.run([sys.executable, "-m", "bot", "demo"], text=True, capture_output=True, timeout=110,
                          env=clean_env(tmp_path), stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-2000:]
    for step in ("inventory shows the cluster", "preflight finds nothing in the DRA objects", "waits for approval", "the requester's own approval is refused",
                 "only gpu-node1 runs the new image", "verify on gpu-node1 passes", "the run is monitoring",
                 "every GPU node runs the new image", "verify on all nodes passes", "is done",
                 "rolled back automatically", "every GPU node is back on the previous image",
                 "its smoke test got a GPU through a ResourceClaim", "the DRA driver runs the new image on every node",
                 "runs lists every run"):
        assert f"[ok] {step}" in out or any(step in line and "[ok]" in line for line in out.splitlines()), step
    assert "[MISSING]" not in out and "Simulated: the cluster" in out and "all " in out.splitlines()[-1]


def test_demo_interactive_leaves_you_at_the_prompt(tmp_path: Path) -> None:
    """`upgradebot demo --interactive` reads commands against its own Redis and kubesim until /quit."""
    proc = subprocess.run([sys.executable, "-m", "bot", "demo", "--interactive"], input="inventory\n/quit\n",
                          text=True, capture_output=True, timeout=60, env=clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "U0ALICE> inventory" in proc.stdout and "Inventory of kubesim" in proc.stdout
    assert "[ok]" not in proc.stdout, "the story is not told"
