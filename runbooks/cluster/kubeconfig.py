"""Reading a kubeconfig as kubectl reads it, without the kubernetes client (issue 63).

Importing the official client to read a kubeconfig cost a shell verb a third of a second
before its first request; what the adapter needs from the file is small: the server, how
to trust it, and who we are. :func:`load_kubeconfig` returns that as an :class:`Endpoint`,
following client-go's loader (``staging/src/k8s.io/client-go/tools/clientcmd/loader.go``
in kubernetes/kubernetes, the rules kubectl applies):

- several files (``KUBECONFIG=a:b``) are merged: the first file to name a cluster, user or
  context wins it whole (a later file's entry of the same name is ignored, even its other
  fields), and the first file that sets ``current-context`` wins; empty and missing
  entries of the list are skipped, and a list of which none exists is an error;
- relative paths (``certificate-authority``, ``client-certificate``, ``client-key``,
  ``tokenFile``, and an exec plugin's ``command`` when it holds a ``/``) are resolved against
  the directory of the file that holds them;
- ``*-data`` fields are base64; files named by a field are read now (kubectl reads them
  when it builds its client), except ``tokenFile``, read again as it rotates
  (:mod:`runbooks.cluster.credentials`).

:func:`in_cluster_endpoint` is the pod's ServiceAccount, as client-go's ``InClusterConfig``.
Nothing here sends a request or runs a plugin; every failure is one
:class:`~runbooks.errors.ClusterConfigError` line that names the file and never a credential.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbooks.errors import ClusterConfigError, scrub, shorten

EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions kubectl runs plugins with (v1alpha1 was removed in 1.24)."""
ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's ServiceAccount token and CA (client-go ``rest.InClusterConfig``)."""
_DEFAULT = "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"


@dataclass(frozen=True)
class ExecPlugin:
    """A ``users[].user.exec`` stanza: the command kubectl runs for credentials."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    cluster_info: Mapping[str, Any] | None = None
    """The cluster as the plugin is told it (``provideClusterInfo: true``), else None."""


@dataclass(frozen=True)
class Auth:
    """Who we are to the server: at most one way to get a bearer token, and a client certificate."""

    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    client_certificate: bytes | None = field(default=None, repr=False)
    client_key: bytes | None = field(default=None, repr=False)
    exec_plugin: ExecPlugin | None = None
    auth_provider: str | None = None
    """The name of a legacy ``auth-provider`` (``oidc``, ``gcp``, ``azure``): read by the kubernetes
    client, which :mod:`runbooks.cluster.adapter` then loads for this kubeconfig alone."""

    def secrets(self) -> list[str]:
        return [s for s in (self.token, self.password) if s]


@dataclass(frozen=True)
class Endpoint:
    """One context of a kubeconfig, resolved: where the API server is, how to trust it, who we are."""

    context: str
    server: str
    auth: Auth
    ca_pem: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    namespace: str | None = None
    source: str = ""
    """The kubeconfig path(s) it was read from, as the user named them (for messages)."""


def load_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None, *,
                    home: Path | None = None) -> Endpoint:
    """The ``context`` (default: the current one) of the kubeconfig at ``path`` (``:``-separated
    files merged; ``None``: ``KUBECONFIG``, else ``~/.kube/config``, as the kubernetes client read it)."""
    where = os.fspath(path) if path is not None else (os.environ.get("KUBECONFIG") or None)
    shown = where or _DEFAULT
    listed = [p for p in dict.fromkeys((where or "").split(os.pathsep)) if p] or \
        [str((home or Path.home()) / ".kube" / "config")]
    merged = _Merged(shown)
    for name in listed:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ClusterConfigError(f"cannot use {shown}: cannot read {name} ({type(exc).__name__}): "
                                     "fix the file or point KUBECONFIG at another") from exc
        merged.add(name, _parse(text, shown))
    if not merged.files:
        raise ClusterConfigError(f"kubeconfig {where or listed[0]} not found: create it, or point KUBECONFIG "
                                 "(or --kubeconfig) at a file that exists")
    return merged.endpoint(context)


def _parse(text: str, shown: str) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterConfigError(
            f"cannot use {shown}: it is not valid YAML ({shorten(scrub(' '.join(str(exc).split())), 160)}): "
            "fix the file or point KUBECONFIG at another") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ClusterConfigError(f"cannot use {shown}: it is not a kubeconfig (a YAML mapping with clusters, users "
                                 "and contexts): fix the file or point KUBECONFIG at another")
    return data


class _Merged:
    """The entries of several kubeconfig files, each name kept from the first file that has it."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.files: list[str] = []
        self.current: str | None = None
        self.entries: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {"clusters": {}, "users": {}, "contexts": {}}

    def add(self, name: str, data: dict[str, Any]) -> None:
        self.files.append(name)
        base = Path(name).resolve().parent
        for kind, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in data.get(kind) or []:
                if not isinstance(entry, dict) or not entry.get("name"):
                    raise self.error(f"an entry of {kind} has no name")
                body = entry.get(inner) or {}
                if not isinstance(body, dict):
                    raise self.error(f"{kind[:-1]} {entry['name']!r} is not a mapping")
                self.entries[kind].setdefault(str(entry["name"]), (body, base))
        if not self.current and data.get("current-context"):
            self.current = str(data["current-context"])

    def error(self, problem: str) -> ClusterConfigError:
        return ClusterConfigError(f"cannot use {self.shown}: {problem}: fix the file or point KUBECONFIG at another")

    def endpoint(self, context: str | None) -> Endpoint:
        names = list(self.entries["contexts"])
        chosen = context or self.current
        if not chosen:
            raise ClusterConfigError(f"{self.shown} has no current context: pass cluster=<context> ({_names(names)})")
        if chosen not in self.entries["contexts"]:
            raise ClusterConfigError(f"no context {chosen!r} in {self.shown} ({_names(names)})")
        ctx, _ = self.entries["contexts"][chosen]
        cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
        if cluster_name not in self.entries["clusters"]:
            raise self.error(f"context {chosen!r} names cluster {cluster_name!r}, which it does not define")
        cluster, cluster_base = self.entries["clusters"][cluster_name]
        if user_name and user_name not in self.entries["users"]:
            raise self.error(f"context {chosen!r} names user {user_name!r}, which it does not define")
        user, user_base = self.entries["users"].get(user_name, ({}, cluster_base))
        server = str(cluster.get("server") or "")
        if not server:
            raise self.error(f"cluster {cluster_name!r} has no server")
        insecure = bool(cluster.get("insecure-skip-tls-verify"))
        ca = None if insecure else self.pem(cluster, "certificate-authority", cluster_base)
        auth = self.auth(user, user_base, cluster, server, ca)
        return Endpoint(context=chosen, server=server.rstrip("/"), auth=auth, ca_pem=ca, insecure=insecure,
                        tls_server_name=cluster.get("tls-server-name") or None,
                        proxy_url=cluster.get("proxy-url") or None, namespace=ctx.get("namespace") or None,
                        source=self.shown)

    def pem(self, stanza: dict[str, Any], key: str, base: Path) -> bytes | None:
        """``key-data`` decoded, else the file ``key`` names read, else None."""
        data = stanza.get(f"{key}-data")
        if data:
            try:
                return base64.b64decode(str(data), validate=True)
            except (binascii.Error, ValueError) as exc:
                raise self.error(f"{key}-data is not base64") from exc
        named = stanza.get(key)
        if not named:
            return None
        try:
            return (base / str(named)).read_bytes()
        except OSError as exc:
            raise self.error(f"cannot read {key} {base / str(named)} ({exc.strerror or type(exc).__name__})") from exc

    def auth(self, user: dict[str, Any], base: Path, cluster: dict[str, Any], server: str,
             ca: bytes | None) -> Auth:
        token_file = user.get("tokenFile")
        provider = user.get("auth-provider")
        return Auth(
            token=str(user["token"]) if user.get("token") else None,
            token_file=str(base / str(token_file)) if token_file else None,
            username=user.get("username") or None, password=user.get("password") or None,
            client_certificate=self.pem(user, "client-certificate", base),
            client_key=self.pem(user, "client-key", base),
            exec_plugin=self.plugin(user["exec"], base, cluster, server, ca) if user.get("exec") else None,
            auth_provider=str(provider.get("name") or "?") if isinstance(provider, dict) else None,
        )

    def plugin(self, stanza: Any, base: Path, cluster: dict[str, Any], server: str, ca: bytes | None) -> ExecPlugin:
        if not isinstance(stanza, dict) or not stanza.get("command"):
            raise self.error("the user's exec plugin has no command")
        version = str(stanza.get("apiVersion") or "")
        if version not in EXEC_VERSIONS:
            raise self.error(f"exec plugin apiVersion {version or '(none)'} is not supported "
                             f"(kubectl runs {' and '.join(EXEC_VERSIONS)})")
        command = str(stanza["command"])
        mode = stanza.get("interactiveMode") or ("IfAvailable" if version.endswith("v1beta1") else "")
        if mode not in ("Never", "IfAvailable", "Always"):
            raise self.error("exec plugin interactiveMode must be Never, IfAvailable or Always")
        env = tuple((str(e.get("name")), str(e.get("value", ""))) for e in stanza.get("env") or [] if isinstance(e, dict))
        info = None
        if stanza.get("provideClusterInfo"):
            extensions = {e.get("name"): e.get("extension") for e in cluster.get("extensions") or []
                          if isinstance(e, dict)}
            info = {"server": server, "tls-server-name": cluster.get("tls-server-name") or None,
                    "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
                    "certificate-authority-data": base64.b64encode(ca).decode() if ca else None,
                    "proxy-url": cluster.get("proxy-url") or None,
                    "config": extensions.get("client.authentication.k8s.io/exec")}
            info = {k: v for k, v in info.items() if v not in (None, False)}
        return ExecPlugin(api_version=version, command=str(base / command) if "/" in command else command,
                          args=tuple(str(a) for a in stanza.get("args") or []), env=env, interactive_mode=mode,
                          install_hint=str(stanza.get("installHint") or ""), cluster_info=info)


def in_cluster_endpoint(environ: Mapping[str, str], *, account_dir: Path = ACCOUNT_DIR) -> Endpoint:
    """The API server of the pod this runs in (``KUBERNETES_SERVICE_HOST``/``_PORT``), trusted by the
    ServiceAccount's CA, with its token (re-read as the kubelet rotates it)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    token = account_dir / "token"
    if not host or not port or not token.exists():
        missing = "KUBERNETES_SERVICE_HOST and _PORT are unset" if not host or not port else f"no {token}"
        raise ClusterConfigError(f"not running in a pod with a ServiceAccount ({missing}): "
                                 "set KUBECONFIG or pass --kubeconfig")
    try:
        ca = (account_dir / "ca.crt").read_bytes()
    except OSError as exc:
        raise ClusterConfigError(f"cannot read the ServiceAccount's CA {account_dir / 'ca.crt'} "
                                 f"({exc.strerror or type(exc).__name__}): set KUBECONFIG or pass --kubeconfig") from exc
    shown_host = f"[{host}]" if ":" in host else host
    return Endpoint(context="in-cluster", server=f"https://{shown_host}:{port}", auth=Auth(token_file=str(token)),
                    ca_pem=ca, source="the pod's ServiceAccount")


def _names(names: list[str]) -> str:
    return "contexts: " + ", ".join(names) if names else "it defines no contexts"
