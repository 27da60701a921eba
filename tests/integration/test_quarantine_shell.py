"""``quarantine`` and ``release`` from the shell, as a person or a pipeline runs them (issue 61,
item 5): the request exits 0 with the run waiting for an approver, the requester's own approval
is refused, a second person's approval from the shell runs it to the end; bad input exits 2 with
one line saying why and leaves no run behind."""

from __future__ import annotations

import json

from kubesim import KubeSim
from tests.integration.test_run_cli import TARGET, bot, env, refused, sim
from tests.support import Kubectl

__all__ = ["env", "sim"]  # the fixtures of the run verbs' shell tests
KEY = "kube-system.quarantine.upgradebot.io/nvidia-device-plugin-daemonset"


def plugin_nodes(kubectl: Kubectl) -> set[str]:
    pods = kubectl.json("get", "pods", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds")["items"]
    return {p["spec"]["nodeName"] for p in pods if not p["metadata"].get("deletionTimestamp")}


def test_quarantine_and_release_from_the_shell(env: dict[str, str], sim: KubeSim) -> None:
    kubectl = Kubectl(sim.kubeconfig)
    proc = bot(env, "quarantine", TARGET, "node=gpu-node2", "--json")
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)
    assert (run["kind"], run["state"], run["node"]) == ("quarantine", "awaiting_approval", "gpu-node2")
    assert "ml-team/trainer-1" in run["change"]["summary"]
    refused(bot(env, "approve", run["id"], "quarantine"), "another approver must approve it")
    proc = bot(env, "approve", run["id"], "quarantine", "--json", who="U0BOB")
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "done", (proc.stdout, proc.stderr)
    assert plugin_nodes(kubectl) == {"gpu-node1", "gpu-node3"}
    assert kubectl.json("get", "nodes", "-l", KEY)["items"][0]["metadata"]["name"] == "gpu-node2"
    proc = bot(env, "status", run["id"])
    assert "Quarantine" in proc.stdout and "gpu-node2" in proc.stdout, proc.stdout

    refused(bot(env, "quarantine", TARGET, "node=gpu-node2"), f"gpu-node2 is quarantined from {TARGET} already")
    refused(bot(env, "canary", TARGET, "image=nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "node=gpu-node1"),
            "has a quarantined node")

    proc = bot(env, "release", TARGET, "node=gpu-node2", "--json")
    assert proc.returncode == 0, proc.stderr
    released = json.loads(proc.stdout)
    proc = bot(env, "approve", released["id"], "release", "--json", who="U0BOB")
    assert proc.returncode == 0 and json.loads(proc.stdout)["state"] == "done", (proc.stdout, proc.stderr)
    assert plugin_nodes(kubectl) == {"gpu-node1", "gpu-node2", "gpu-node3"}
    assert kubectl.json("get", "nodes", "-l", KEY)["items"] == []
    assert not kubectl.json("get", "node", "gpu-node2")["spec"].get("unschedulable")


def test_bad_quarantine_and_release_requests_exit_2_in_one_line(env: dict[str, str]) -> None:
    refused(bot(env, "quarantine", TARGET, "node=cpu-node1"), f"{TARGET} runs no pod on cpu-node1")
    refused(bot(env, "quarantine", TARGET, "node=gpu-node9"), "node gpu-node9 does not exist")
    refused(bot(env, "release", TARGET, "node=gpu-node1"), f"gpu-node1 is not quarantined from {TARGET}")
    refused(bot(env, "quarantine", TARGET), "node= is required", lines=2)  # the reason and the usage line
    refused(bot(env, "release", "kube-system", "node=gpu-node1"), "'kube-system' is not a target", lines=2)
    proc = bot(env, "runs", "--json")
    assert json.loads(proc.stdout)["runs"] == []
    proc = bot(env, "--help")
    assert "quarantine     keep a plugin off one node" in proc.stdout, proc.stdout
    assert "release        give a quarantined node back" in proc.stdout, proc.stdout
