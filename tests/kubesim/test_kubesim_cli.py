"""``python -m kubesim serve`` from a shell: URL first, a working kubeconfig, clean errors."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import Kubectl


def test_serve_prints_the_url_and_writes_a_kubeconfig(tmp_path) -> None:
    """The first line is the https URL; kubectl works with the kubeconfig; SIGTERM stops it."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "serve", "--port", "0", "--scenario", "gpu-small",
         "--k8s-version", "1.32", "--kubeconfig", str(kubeconfig),
         "--push", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-crash"],
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
        kubectl = Kubectl(kubeconfig)
        pushed = json.loads(kubectl("get", "--raw", "/sim/v1/registry"))["pushed"]
        assert "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-crash" in pushed, pushed
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


def test_serve_refuses_a_push_that_is_not_an_image_reference(tmp_path) -> None:
    """Issue 58: ``--push`` takes ``repository:tag``; anything else exits 2 with one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "kubesim", "serve", "--push", "nvcr.io/nvidia/k8s-device-plugin",
         "--kubeconfig", str(tmp_path / "k")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("kubesim: 'nvcr.io/nvidia/k8s-device-plugin' is not a tagged image reference "
                                   "(repository:tag[@sha256:<64 hex>])")


def test_serve_stops_cleanly_on_sigterm_from_before_it_announces_itself(tmp_path, monkeypatch) -> None:
    """SIGTERM and SIGINT are caught before the cluster is built, so before the URL is printed:
    a supervisor that stops kubesim as soon as it reads the URL gets exit 0, never death by the
    signal (CI caught one dying, -15, between the last line printed and the handlers set)."""
    import signal

    from kubesim import __main__ as cli

    seen: dict[int, object] = {}

    class Recording:
        def __init__(self, **_: object) -> None:
            pass

        def start(self) -> None:
            for sig in (signal.SIGTERM, signal.SIGINT):
                seen[sig] = signal.getsignal(sig)
            raise OSError("stop here")

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(cli, "KubeSim", Recording)
    try:
        assert cli.main(["serve", "--kubeconfig", str(tmp_path / "k")]) == 2
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert all(callable(h) and h not in (signal.default_int_handler,) for h in seen.values()), seen
