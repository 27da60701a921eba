"""Bad local configuration gets one line naming the file or variable, exit 2, never a traceback.

A kubeconfig that is not YAML, a KUBECONFIG naming a file that does not exist, a
kubeconfig whose certificate authority is not the cluster's (or is missing), and a
REDIS_URL that is not a URL: each is what a new user types wrong first.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from kubesim import KubeSim
from tests.integration.test_cli import assert_one_line_reason, run


def test_a_kubeconfig_that_is_not_yaml(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nclusters: [\n  - this is: {not yaml\n")
    proc = run("inventory", env={"KUBECONFIG": str(broken)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert str(broken) in proc.stderr and "YAML" in proc.stderr


def test_a_kubeconfig_file_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    proc = run("inventory", env={"KUBECONFIG": str(missing)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert str(missing) in proc.stderr and "KUBECONFIG" in proc.stderr


@pytest.mark.parametrize("how", ["wrong", "missing"])
def test_a_kubeconfig_whose_ca_is_not_the_clusters(cluster: KubeSim, tmp_path: Path, how: str) -> None:
    """Another CA (or none, so the system's): the TLS check fails; one line says to fix the CA."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    entry = config["clusters"][0]["cluster"]
    if how == "wrong":
        other_ca = _other_ca()
        entry["certificate-authority-data"] = base64.b64encode(other_ca).decode()
    else:
        entry.pop("certificate-authority-data", None)
        entry.pop("certificate-authority", None)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    proc = run("inventory", env={"KUBECONFIG": str(path)}, home=tmp_path)
    assert_one_line_reason(proc)
    assert "certificate" in proc.stderr.lower() and "AttributeError" not in proc.stderr


def test_a_redis_url_that_is_not_a_url(tmp_path: Path) -> None:
    proc = run("status", env={"REDIS_URL": "notaurl"}, home=tmp_path)
    assert_one_line_reason(proc)
    assert "REDIS_URL" in proc.stderr


def _other_ca() -> bytes:
    """A self-signed certificate of another authority, in PEM."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "another-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("url", [
    "redis://127.0.0.1:1/0?password=hunter2-secret",
    "redis://:hunter2-secret@127.0.0.1:1/0",
    "redis://ops:hunter2-secret@127.0.0.1:1/0?socket_timeout=1",
    "unix:///nowhere/redis.sock?db=0&password=hunter2-secret",
    "redis://127.0.0.1:1/0?password=hunter2-secret&db=notanumber",
])
def test_a_password_in_redis_url_is_never_printed(tmp_path: Path, url: str) -> None:
    """In the userinfo or as ``?password=``: the one-line error shows the URL with the secret masked."""
    proc = run("status", env={"REDIS_URL": url}, home=tmp_path)
    assert_one_line_reason(proc)
    assert "hunter2" not in proc.stderr + proc.stdout
    assert "***" in proc.stderr
