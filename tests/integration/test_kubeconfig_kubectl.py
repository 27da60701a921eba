"""The shell's kubeconfig reader against kubesim over HTTPS, with the real kubectl as referee (issue 63).

Each kubeconfig here is kubesim's own, or one the test writes from it; the adapter
(:meth:`Cluster.from_kubeconfig`, our reader and urllib3, no kubernetes client) and kubectl
read the same file and must reach the same server, or fail the same way.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ipaddress
import json
import os
import ssl
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubesim import KubeSim
from runbooks.cluster import Cluster, RetryPolicy
from runbooks.cluster.kubeconfig import load_kubeconfig
from runbooks.cluster.resources import NODES
from runbooks.errors import ClusterConfigError, ClusterError, Unauthorized, UntrustedCluster
from tests.support import kubectl_binary

ONCE = RetryPolicy(attempts=1)


def kubectl(kubeconfig: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update(KUBECONFIG=kubeconfig, HOME=str(home))
    return subprocess.run([kubectl_binary(), *args], capture_output=True, text=True, env=env, timeout=60)


def kubectl_nodes(kubeconfig: str, *args: str, home: Path) -> set[str] | None:
    """The node names kubectl lists with this kubeconfig, or None when it fails."""
    proc = kubectl(kubeconfig, "get", "nodes", "-o", "json", *args, home=home)
    return {n["metadata"]["name"] for n in json.loads(proc.stdout)["items"]} if proc.returncode == 0 else None


def our_nodes(kubeconfig: str, context: str | None = None) -> set[str]:
    with Cluster.from_kubeconfig(kubeconfig, context, retry=ONCE) as cluster:
        return {n["metadata"]["name"] for n in cluster.list_objects(NODES)}


def sim_config(cluster: KubeSim) -> dict:
    return yaml.safe_load(cluster.kubeconfig.read_text())


def write(path: Path, config: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_kubesims_kubeconfig_reads_as_kubectl_reads_it(cluster: KubeSim, tmp_path: Path) -> None:
    """kubesim's kubeconfig: the server, CA and token we read are what ``kubectl config view --minify
    --raw`` resolves, and both list the same nodes."""
    view = json.loads(kubectl(str(cluster.kubeconfig), "config", "view", "--minify", "--raw", "-o", "json",
                              home=tmp_path).stdout)
    endpoint = load_kubeconfig(str(cluster.kubeconfig))
    assert endpoint.context == view["current-context"]
    assert endpoint.server == view["clusters"][0]["cluster"]["server"]
    assert endpoint.ca_pem == base64.b64decode(view["clusters"][0]["cluster"]["certificate-authority-data"])
    assert endpoint.auth.token == view["users"][0]["user"]["token"] == cluster.token
    nodes = our_nodes(str(cluster.kubeconfig))
    assert nodes and nodes == kubectl_nodes(str(cluster.kubeconfig), home=tmp_path)


def test_ca_file_and_token_file_relative_to_the_kubeconfig(cluster: KubeSim, tmp_path: Path) -> None:
    """certificate-authority and tokenFile as paths relative to the kubeconfig's directory, read from
    elsewhere: kubectl and we resolve them alike."""
    config = sim_config(cluster)
    conf = tmp_path / "conf"
    (conf / "pki").mkdir(parents=True)
    (conf / "pki" / "ca.crt").write_bytes(base64.b64decode(config["clusters"][0]["cluster"].pop(
        "certificate-authority-data")))
    config["clusters"][0]["cluster"]["certificate-authority"] = "pki/ca.crt"
    (conf / "token").write_text(config["users"][0]["user"].pop("token"))
    config["users"][0]["user"]["tokenFile"] = "token"
    path = write(conf / "config", config)
    assert our_nodes(path) == kubectl_nodes(path, home=tmp_path) != set()


def test_tls_server_name_and_insecure(cluster: KubeSim, tmp_path: Path) -> None:
    """tls-server-name names what the certificate is checked against (a name in kubesim's SANs works,
    another fails for both); insecure-skip-tls-verify without a CA reaches the server for both."""
    config = sim_config(cluster)
    config["clusters"][0]["cluster"]["tls-server-name"] = "kubernetes.default.svc"
    good = write(tmp_path / "good", config)
    assert our_nodes(good) == kubectl_nodes(good, home=tmp_path) != set()
    config["clusters"][0]["cluster"]["tls-server-name"] = "elsewhere.example"
    wrong = write(tmp_path / "wrong", config)
    assert kubectl_nodes(wrong, home=tmp_path) is None
    with pytest.raises(UntrustedCluster):
        our_nodes(wrong)
    config = sim_config(cluster)
    del config["clusters"][0]["cluster"]["certificate-authority-data"]
    config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    insecure = write(tmp_path / "insecure", config)
    assert our_nodes(insecure) == kubectl_nodes(insecure, home=tmp_path) != set()


def test_the_wrong_ca_is_refused_by_both(cluster: KubeSim, tmp_path: Path) -> None:
    config = sim_config(cluster)
    other = x509.CertificateBuilder().subject_name(_name("other-ca")).issuer_name(_name("other-ca"))
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    ca = (other.public_key(key.public_key()).serial_number(1).not_valid_before(now - dt.timedelta(days=1))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        ca.public_bytes(serialization.Encoding.PEM)).decode()
    path = write(tmp_path / "config", config)
    assert kubectl_nodes(path, home=tmp_path) is None
    with pytest.raises(UntrustedCluster, match="TLS handshake"):
        our_nodes(path)


def test_several_files_merged_as_kubectl_merges_them(cluster: KubeSim, tmp_path: Path) -> None:
    """KUBECONFIG=first:kubesim's: the first file's current-context and its same-named user win (a wrong
    token: both refused), and kubesim's own context is reachable by name with the first file's user."""
    config = sim_config(cluster)
    user = config["users"][0]["name"]
    first = {"apiVersion": "v1", "kind": "Config", "current-context": "elsewhere",
             "clusters": [{"name": "closed", "cluster": {"server": "https://127.0.0.1:9",
                                                          "insecure-skip-tls-verify": True}}],
             "users": [{"name": user, "user": {"token": "not-the-token-0123456789"}}],
             "contexts": [{"name": "elsewhere", "context": {"cluster": "closed", "user": user}},
                          {"name": "fine", "context": {"cluster": "kubesim", "user": "plain"}}]}
    listed = os.pathsep.join([write(tmp_path / "a" / "config", first), str(cluster.kubeconfig)])
    assert load_kubeconfig(listed).context == "elsewhere"
    assert kubectl_nodes(listed, home=tmp_path) is None
    with pytest.raises(ClusterError, match="cannot reach the API server of elsewhere"):
        our_nodes(listed)
    assert kubectl_nodes(listed, "--context", "kubesim", home=tmp_path) is None  # the first file's user
    with pytest.raises(Unauthorized) as caught:
        our_nodes(listed, "kubesim")
    assert "not-the-token-0123456789" not in str(caught.value)
    second = {**config, "users": [*config["users"], {"name": "plain", "user": {"token": cluster.token}}]}
    listed = os.pathsep.join([write(tmp_path / "a" / "config", first), write(tmp_path / "b" / "config", second)])
    assert our_nodes(listed, "fine") == kubectl_nodes(listed, "--context", "fine", home=tmp_path) != set()


PLUGIN = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps(info) + "\\n")
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": os.environ["SIM_TOKEN"], "expirationTimestamp": "2999-01-01T00:00:00Z"}}))
"""


@pytest.mark.parametrize("api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
def test_exec_plugin_token(cluster: KubeSim, tmp_path: Path, api_version: str) -> None:
    """An exec credential plugin (each version kubectl runs) gives kubesim's token: kubectl and we both
    run it, with the same ExecCredential request, and list the same nodes."""
    script = tmp_path / "bin" / "sim-credential"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    config = sim_config(cluster)
    calls = tmp_path / "calls.jsonl"
    config["users"][0]["user"] = {"exec": {
        "apiVersion": api_version, "command": "bin/sim-credential", "interactiveMode": "Never",
        "env": [{"name": "SIM_TOKEN", "value": cluster.token}, {"name": "CALLS", "value": str(calls)}]}}
    path = write(tmp_path / "config", config)
    assert our_nodes(path) == kubectl_nodes(path, home=tmp_path) != set()
    ours, theirs = (json.loads(line) for line in calls.read_text().splitlines())
    assert ours == theirs == {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}


def test_broken_exec_plugin_is_one_line(cluster: KubeSim, tmp_path: Path) -> None:
    config = sim_config(cluster)
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false",
                                           "interactiveMode": "Never"}}
    path = write(tmp_path / "config", config)
    assert kubectl_nodes(path, home=tmp_path) is None
    with pytest.raises(ClusterConfigError, match="executable false failed with exit code 1") as caught:
        our_nodes(path)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------ client certificates
def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _issue(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, signer: ec.EllipticCurvePrivateKey,
           *, ca: bool = False, server: bool = False) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
               .not_valid_after(now + dt.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                        critical=False)
    return builder.sign(signer, hashes.SHA256())


def _pem(item: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    if isinstance(item, x509.Certificate):
        return item.public_bytes(serialization.Encoding.PEM)
    return item.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())


@pytest.fixture
def mutual_tls(tmp_path: Path) -> Iterator[tuple[str, bytes, bytes, bytes]]:
    """An HTTPS server on loopback that requires a client certificate of its CA (as kube-apiserver's
    --client-ca-file) and answers ``/version`` with the client's CN as ``platform`` (so the test
    sees who connected). Yields its URL, its CA, and a client certificate and key it trusts."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(_name("test-ca"), _name("test-ca"), ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _issue(_name("apiserver"), ca.subject, server_key, ca_key, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue(_name("upgradebot-admin", "system:masters"), ca.subject, client_key, ca_key)
    (tmp_path / "server.crt").write_bytes(_pem(server_cert))
    (tmp_path / "server.key").write_bytes(_pem(server_key))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.load_verify_locations(cadata=_pem(ca).decode())
    context.verify_mode = ssl.CERT_REQUIRED

    class Version(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()  # type: ignore[attr-defined]
            subject = dict(item[0] for item in peer["subject"])
            body = json.dumps({"major": "1", "minor": "31", "gitVersion": "v1.31.0",
                               "platform": subject["commonName"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Version)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", _pem(ca), _pem(client_cert), _pem(client_key)
    finally:
        server.shutdown()
        server.server_close()


def test_client_certificate_data_and_files(mutual_tls: tuple[str, bytes, bytes, bytes], tmp_path: Path) -> None:
    """A user's client-certificate(-data) and client-key(-data) are presented in the TLS handshake:
    the server saw our CN, for both kubectl and us; no certificate file is left behind."""
    url, ca, cert, key = mutual_tls
    (tmp_path / "me.crt").write_bytes(cert)
    (tmp_path / "me.key").write_bytes(key)
    for user in ({"client-certificate-data": base64.b64encode(cert).decode(),
                  "client-key-data": base64.b64encode(key).decode()},
                 {"client-certificate": "me.crt", "client-key": "me.key"}):
        path = write(tmp_path / "config", {
            "apiVersion": "v1", "kind": "Config", "current-context": "mtls",
            "clusters": [{"name": "mtls", "cluster": {"server": url,
                                                      "certificate-authority-data": base64.b64encode(ca).decode()}}],
            "users": [{"name": "me", "user": user}],
            "contexts": [{"name": "mtls", "context": {"cluster": "mtls", "user": "me"}}]})
        seen = json.loads(kubectl(path, "version", "-o", "json", home=tmp_path).stdout)["serverVersion"]["platform"]
        with Cluster.from_kubeconfig(path, retry=ONCE) as cluster:
            assert cluster.version().platform == seen == "upgradebot-admin"
    without = write(tmp_path / "anonymous", {
        "apiVersion": "v1", "kind": "Config", "current-context": "mtls",
        "clusters": [{"name": "mtls", "cluster": {"server": url, "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": "me", "user": {}}], "contexts": [{"name": "mtls", "context": {"cluster": "mtls", "user": "me"}}]})
    with Cluster.from_kubeconfig(without, retry=ONCE) as cluster, pytest.raises(ClusterError):
        cluster.version()
