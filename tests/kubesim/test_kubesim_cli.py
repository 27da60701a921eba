"""``python -m kubesim serve`` from a shell: URL first, a working kubeconfig, clean errors."""

from __future__ import annotations

import subprocess
import sys

from tests.support import Kubectl


def test_serve_prints_the_url_and_writes_a_kubeconfig(tmp_path) -> None:
    """The first line is the https URL; kubectl works with the kubeconfig; SIGTERM stops it."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-small",
         "--k8s-version", "1.32", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("https://127.0.0.1:")
        assert url in kubeconfig.read_text()
        assert (kubeconfig.stat().st_mode & 0o777) == 0o600
        version = Kubectl(kubeconfig)("version", "-o", "json")
        assert '"gitVersion": "v1.32.' in version
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_serve_refuses_an_unsimulated_release(tmp_path) -> None:
    """An unknown --k8s-version exits 2 with a one-line reason."""
    proc = subprocess.run(
        [sys.executable, "-m", "kubesim", "serve", "--k8s-version", "1.20",
         "--kubeconfig", str(tmp_path / "k")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "kubesim: Kubernetes 1.20 is not simulated: use 1.27 .. 1.34"
