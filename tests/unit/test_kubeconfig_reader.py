"""The shell's own kubeconfig reader (runbooks/cluster/kubeconfig.py), on kubeconfigs the tests write.

What kubectl does with the same files is the referee (client-go's clientcmd loader rules):
several files in KUBECONFIG merged, the first to name a cluster, user or context wins and
the first to set current-context wins; relative paths resolved against the file that holds
them; *-data fields base64; exec credential plugins run as kubectl runs them. Errors are one
line and never show a credential.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
from pathlib import Path

import pytest
import yaml

from runbooks.cluster.credentials import Credentials
from runbooks.cluster.kubeconfig import in_cluster_endpoint, load_kubeconfig
from runbooks.errors import ClusterConfigError

CA = b"-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n"
CERT = b"-----BEGIN CERTIFICATE-----\nMIIBfakeCERT\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIBfakeKEY\n-----END PRIVATE KEY-----\n"
TOKEN = "t0ken-that-must-never-show-0123456789"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(*, contexts: dict[str, tuple[str, str]], clusters: dict[str, dict], users: dict[str, dict],
               current: str | None = None, namespace: str | None = None) -> dict:
    config: dict = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u, **({"namespace": namespace} if namespace else {})}}
                     for n, (c, u) in contexts.items()],
    }
    if current is not None:
        config["current-context"] = current
    return config


def write(path: Path, config: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return path


def simple(tmp_path: Path, user: dict | None = None, cluster: dict | None = None, name: str = "config") -> Path:
    return write(tmp_path / name, kubeconfig(
        contexts={"dev": ("dev-cluster", "dev-user")},
        clusters={"dev-cluster": cluster or {"server": "https://10.0.0.1:6443", "certificate-authority-data": b64(CA)}},
        users={"dev-user": user if user is not None else {"token": TOKEN}}, current="dev"))


def test_token_and_ca_data_of_the_current_context(tmp_path: Path) -> None:
    """The current context's server, its CA from certificate-authority-data and the user's token."""
    endpoint = load_kubeconfig(str(simple(tmp_path)))
    assert (endpoint.context, endpoint.server, endpoint.ca_pem, endpoint.insecure) == (
        "dev", "https://10.0.0.1:6443", CA, False)
    assert Credentials(endpoint.auth).authorization() == f"Bearer {TOKEN}"


def test_files_relative_to_the_kubeconfig_that_names_them(tmp_path: Path) -> None:
    """certificate-authority, client-certificate, client-key and tokenFile relative to their file's directory."""
    (tmp_path / "conf" / "pki").mkdir(parents=True)
    (tmp_path / "conf" / "pki" / "ca.crt").write_bytes(CA)
    (tmp_path / "conf" / "pki" / "me.crt").write_bytes(CERT)
    (tmp_path / "conf" / "pki" / "me.key").write_bytes(KEY)
    (tmp_path / "conf" / "token").write_text(TOKEN + "\n")
    path = simple(tmp_path, name="conf/config",
                  user={"client-certificate": "pki/me.crt", "client-key": "pki/me.key", "tokenFile": "token"},
                  cluster={"server": "https://k:6443", "certificate-authority": "pki/ca.crt"})
    endpoint = load_kubeconfig(str(path))
    assert endpoint.ca_pem == CA
    assert (endpoint.auth.client_certificate, endpoint.auth.client_key) == (CERT, KEY)
    assert Credentials(endpoint.auth).authorization() == f"Bearer {TOKEN}"


def test_client_certificate_data_and_insecure(tmp_path: Path) -> None:
    """client-certificate-data / client-key-data decoded; insecure-skip-tls-verify and tls-server-name kept."""
    path = simple(tmp_path, user={"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
                  cluster={"server": "https://k:6443", "insecure-skip-tls-verify": True, "tls-server-name": "api"})
    endpoint = load_kubeconfig(str(path))
    assert (endpoint.auth.client_certificate, endpoint.auth.client_key) == (CERT, KEY)
    assert (endpoint.insecure, endpoint.ca_pem, endpoint.tls_server_name) == (True, None, "api")
    assert Credentials(endpoint.auth).authorization() is None


def test_several_files_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    """KUBECONFIG=a:b: the first file to name an entry wins it whole; the first current-context wins;
    a missing file in the list is skipped; a context of the second file is reachable by name."""
    first = write(tmp_path / "a" / "config", kubeconfig(
        contexts={"shared": ("c1", "u1")}, clusters={"c1": {"server": "https://first:6443"}},
        users={"u1": {"token": "first-token-0000"}}, current="shared"))
    second = write(tmp_path / "b" / "config", kubeconfig(
        contexts={"shared": ("c2", "u2"), "prod": ("c2", "u1")},
        clusters={"c2": {"server": "https://second:6443"}, "c1": {"server": "https://ignored:6443"}},
        users={"u1": {"token": "ignored-token-00"}, "u2": {"token": "second-token-000"}}, current="prod"))
    listed = os.pathsep.join([str(first), str(tmp_path / "missing"), str(second)])
    endpoint = load_kubeconfig(listed)
    assert (endpoint.context, endpoint.server) == ("shared", "https://first:6443")
    prod = load_kubeconfig(listed, "prod")
    assert (prod.server, Credentials(prod.auth).authorization()) == ("https://second:6443", "Bearer first-token-0000")
    assert load_kubeconfig(os.pathsep.join([str(second), str(first)])).context == "prod"


def test_namespace_of_the_context(tmp_path: Path) -> None:
    path = write(tmp_path / "config", kubeconfig(contexts={"dev": ("c", "u")}, clusters={"c": {"server": "https://k"}},
                                                 users={"u": {}}, current="dev", namespace="gpu"))
    assert load_kubeconfig(str(path)).namespace == "gpu"


@pytest.mark.parametrize(("text", "context", "said"), [
    ("clusters: [", None, "it is not valid YAML"),
    (yaml.safe_dump(kubeconfig(contexts={"a": ("c", "u")}, clusters={"c": {"server": "https://k"}}, users={"u": {}})),
     None, "has no current context: pass cluster=<context> (contexts: a)"),
    (yaml.safe_dump(kubeconfig(contexts={"a": ("c", "u"), "b": ("c", "u")}, clusters={"c": {"server": "https://k"}},
                               users={"u": {}}, current="a")),
     "prod", "no context 'prod' in"),
    (yaml.safe_dump(kubeconfig(contexts={"a": ("gone", "u")}, clusters={}, users={"u": {}}, current="a")),
     None, "context 'a' names cluster 'gone', which"),
    (yaml.safe_dump(kubeconfig(contexts={"a": ("c", "u")}, clusters={"c": {}}, users={"u": {}}, current="a")),
     None, "has no server"),
    (yaml.safe_dump(kubeconfig(contexts={"a": ("c", "u")}, clusters={"c": {"server": "https://k"}},
                               users={"u": {"client-key-data": "%%" + TOKEN}}, current="a")),
     None, "client-key-data is not base64"),
    ("- just\n- a list\n", None, "is not a kubeconfig"),
])
def test_broken_kubeconfigs_say_so_in_one_line(tmp_path: Path, text: str, context: str | None, said: str) -> None:
    """Each broken kubeconfig is a ClusterConfigError of one line naming the file, without a credential."""
    path = write(tmp_path / "config", text)
    with pytest.raises(ClusterConfigError) as caught:
        load_kubeconfig(str(path), context)
    message = str(caught.value)
    assert said in message and str(path) in message
    assert "\n" not in message and TOKEN not in message


def test_missing_files_say_where_they_were_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="missing not found"):
        load_kubeconfig(str(tmp_path / "missing"))


# ------------------------------------------------------------------ exec plugins
PLUGIN = """\
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open(os.environ["CALLS"], "a") as calls:
    calls.write(json.dumps({"argv": sys.argv[1:], "info": info, "extra": os.environ.get("EXTRA")}) + "\\n")
mode = os.environ.get("MODE", "token")
if mode == "fail":
    print("no credentials for you", file=sys.stderr)
    sys.exit(3)
status = {"token": os.environ["TOKEN"]} if mode == "token" else {
    "clientCertificateData": "CERT", "clientKeyData": "KEY"}
if os.environ.get("EXPIRES"):
    status["expirationTimestamp"] = os.environ["EXPIRES"]
print(json.dumps({"apiVersion": os.environ.get("ANSWER_VERSION", info["apiVersion"]), "kind": "ExecCredential",
                  "status": status}))
"""


def plugin_kubeconfig(tmp_path: Path, *, api_version: str, env: dict[str, str], **extra: object) -> Path:
    script = tmp_path / "bin" / "credential-plugin"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.jsonl"
    exec_config = {"apiVersion": api_version, "command": "bin/credential-plugin", "args": ["get-token", "--x"],
                   "env": [{"name": "CALLS", "value": str(calls)}, *({"name": k, "value": v} for k, v in env.items())],
                   **extra}
    if api_version.endswith("/v1"):
        exec_config.setdefault("interactiveMode", "Never")
    return simple(tmp_path, user={"exec": exec_config})


def calls(tmp_path: Path) -> list[dict]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
def test_exec_plugin_token(tmp_path: Path, api_version: str) -> None:
    """The plugin is run (its path relative to the kubeconfig, its args and env, KUBERNETES_EXEC_INFO
    naming the apiVersion, not interactive), once: its token is kept while it has no expiry."""
    path = plugin_kubeconfig(tmp_path, api_version=api_version, env={"TOKEN": TOKEN, "EXTRA": "yes"})
    credentials = Credentials(load_kubeconfig(str(path)).auth)
    assert credentials.authorization() == f"Bearer {TOKEN}"
    assert credentials.authorization() == f"Bearer {TOKEN}"
    [call] = calls(tmp_path)
    assert call["argv"] == ["get-token", "--x"] and call["extra"] == "yes"
    assert call["info"] == {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}


def test_exec_plugin_is_run_again_when_its_token_expired(tmp_path: Path) -> None:
    """A token whose expirationTimestamp has passed is asked for again; a 401 asks again too (as kubectl)."""
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1",
                             env={"TOKEN": TOKEN, "EXPIRES": "2000-01-01T00:00:00Z"})
    credentials = Credentials(load_kubeconfig(str(path)).auth)
    credentials.authorization()
    credentials.authorization()
    assert len(calls(tmp_path)) == 2
    fresh = plugin_kubeconfig(tmp_path / "fresh", api_version="client.authentication.k8s.io/v1",
                              env={"TOKEN": TOKEN, "EXPIRES": "2999-01-01T00:00:00Z"})
    credentials = Credentials(load_kubeconfig(str(fresh)).auth)
    credentials.authorization()
    credentials.authorization()
    assert len(calls(tmp_path / "fresh")) == 1
    assert credentials.refresh() is True  # a 401: asked again on the next request
    credentials.authorization()
    assert len(calls(tmp_path / "fresh")) == 2


def test_exec_plugin_credential_is_shared_by_the_connections_of_a_process(tmp_path: Path) -> None:
    """Two connections with the same kubeconfig (a worker connects per step) run the plugin once, as
    client-go's per-process cache does; after a 401 the next connection asks again."""
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1",
                             env={"TOKEN": TOKEN, "EXPIRES": "2999-01-01T00:00:00Z"})
    first = Credentials(load_kubeconfig(str(path)).auth)
    assert first.authorization() == Credentials(load_kubeconfig(str(path)).auth).authorization() == f"Bearer {TOKEN}"
    assert len(calls(tmp_path)) == 1
    first.refresh()
    Credentials(load_kubeconfig(str(path)).auth).authorization()
    assert len(calls(tmp_path)) == 2


def test_exec_plugin_client_certificate(tmp_path: Path) -> None:
    """A plugin may answer with a client certificate and key instead of a token."""
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1beta1", env={"MODE": "cert"})
    credentials = Credentials(load_kubeconfig(str(path)).auth)
    assert credentials.client_pair() == (b"CERT", b"KEY")
    assert credentials.authorization() is None


def test_exec_plugin_cluster_info(tmp_path: Path) -> None:
    """provideClusterInfo: the cluster's server and CA go to the plugin in KUBERNETES_EXEC_INFO."""
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1", env={"TOKEN": TOKEN},
                             provideClusterInfo=True)
    Credentials(load_kubeconfig(str(path)).auth).authorization()
    cluster = calls(tmp_path)[0]["info"]["spec"]["cluster"]
    assert cluster["server"] == "https://10.0.0.1:6443" and cluster["certificate-authority-data"] == b64(CA)


@pytest.mark.parametrize(("env", "extra", "said"), [
    ({"MODE": "fail"}, {}, "failed with exit code 3"),
    ({"TOKEN": TOKEN, "ANSWER_VERSION": "client.authentication.k8s.io/v1beta1"}, {},
     "answered apiVersion 'client.authentication.k8s.io/v1beta1', not 'client.authentication.k8s.io/v1'"),
    ({"TOKEN": TOKEN}, {"interactiveMode": "Always"}, "needs a terminal"),
    ({"TOKEN": TOKEN}, {"command": "no-such-plugin-anywhere", "installHint": "install it from the wiki"},
     "executable no-such-plugin-anywhere not found: install it from the wiki"),
])
def test_exec_plugin_failures_say_so_in_one_line(tmp_path: Path, env: dict[str, str], extra: dict, said: str) -> None:
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1", env=env, **extra)
    credentials = Credentials(load_kubeconfig(str(path)).auth)
    with pytest.raises(ClusterConfigError) as caught:
        credentials.authorization()
    assert said in str(caught.value) and "\n" not in str(caught.value) and TOKEN not in str(caught.value)


def test_exec_plugin_of_an_unknown_api_version(tmp_path: Path) -> None:
    path = plugin_kubeconfig(tmp_path, api_version="client.authentication.k8s.io/v1alpha1", env={"TOKEN": TOKEN})
    with pytest.raises(ClusterConfigError, match="v1alpha1 is not supported"):
        load_kubeconfig(str(path))


# ------------------------------------------------------------------ in a pod
def test_in_cluster_service_account(tmp_path: Path) -> None:
    """In a pod: KUBERNETES_SERVICE_HOST/PORT, the ServiceAccount's CA and its token (read again as it rotates)."""
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "token").write_text(TOKEN)
    endpoint = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                                   account_dir=tmp_path)
    assert (endpoint.context, endpoint.server, endpoint.ca_pem) == ("in-cluster", "https://10.96.0.1:443", CA)
    assert Credentials(endpoint.auth).authorization() == f"Bearer {TOKEN}"
    ipv6 = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                               account_dir=tmp_path)
    assert ipv6.server == "https://[fd00::1]:443"


def test_in_cluster_outside_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="set KUBECONFIG or pass --kubeconfig"):
        in_cluster_endpoint({}, account_dir=tmp_path)
    with pytest.raises(ClusterConfigError, match="set KUBECONFIG or pass --kubeconfig"):
        in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                            account_dir=tmp_path / "none")


# ------------------------------------------------------------------ legacy auth-provider
def test_a_legacy_auth_provider_is_read_by_the_kubernetes_client(tmp_path: Path) -> None:
    """An ``auth-provider`` (here oidc with an id-token that has not expired) is the one case the
    kubernetes client still reads: its token is the one sent."""
    from runbooks.cluster.adapter import Cluster

    def part(data: dict) -> str:
        return base64.b64encode(json.dumps(data).encode()).decode().rstrip("=")

    id_token = f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': 'me', 'exp': 32503680000})}.c2ln"
    path = simple(tmp_path, user={"auth-provider": {"name": "oidc", "config": {
        "id-token": id_token, "client-id": "upgradebot", "idp-issuer-url": "https://idp.example"}}},
        cluster={"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True})
    endpoint = load_kubeconfig(str(path))
    assert endpoint.auth.auth_provider == "oidc"
    with Cluster.from_kubeconfig(path) as cluster:
        assert cluster._transport.credentials.authorization() == f"Bearer {id_token}"
