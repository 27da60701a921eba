"""Who the adapter is to the API server: a bearer token (given, in a file, from an exec plugin),
basic auth, or a client certificate, each got as kubectl gets it.

- ``tokenFile`` (and the pod's ServiceAccount token) is read again after a minute, as
  client-go's cached token source does: the kubelet rotates bound tokens.
- An exec plugin (``client.authentication.k8s.io/v1`` or ``v1beta1``) runs as client-go's
  exec authenticator runs it (``staging/src/k8s.io/client-go/plugin/pkg/client/auth/exec/exec.go``
  in kubernetes/kubernetes): this process's environment plus the stanza's ``env``, and
  ``KUBERNETES_EXEC_INFO`` holding an ``ExecCredential`` whose ``spec.interactive`` says
  whether standard input is a terminal it may use (``interactiveMode``) and, with
  ``provideClusterInfo``, ``spec.cluster``; its standard error passes through. Its answer
  must be an ``ExecCredential`` of the same apiVersion with a token or a certificate and key
  in ``status``; it is kept until its ``expirationTimestamp``, and asked again after a 401.

Every failure is a :class:`~runbooks.errors.ClusterConfigError` of one line without the
plugin's output (it holds the credential).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from runbooks.cluster.kubeconfig import Auth, ExecPlugin
from runbooks.errors import ClusterConfigError, scrub, shorten


@dataclass(frozen=True)
class _Issued:
    token: str | None
    pair: tuple[bytes, bytes] | None
    expires: dt.datetime | None


TOKEN_FILE_PERIOD = 60.0
"""Seconds a token file's content is used before it is read again (client-go: one minute)."""
PLUGIN_TIMEOUT = 120.0
"""Seconds an exec plugin may take (kubectl waits for ever; a bot's worker must not)."""
_ISSUED: dict[str, _Issued] = {}
"""What each exec plugin issued, shared by the connections of this process (client-go keeps one
cache per process too): a worker that connects per step does not run the plugin per step."""
_ISSUED_LOCK = threading.Lock()


class Credentials:
    """The credentials of one :class:`~runbooks.cluster.kubeconfig.Auth`, got when first asked for."""

    def __init__(self, auth: Auth, *, monotonic: Callable[[], float] = time.monotonic,
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.auth = auth
        self._monotonic = monotonic
        self._now = now
        self._lock = threading.Lock()
        self._file_token: tuple[str, float] | None = None
        self._issued: _Issued | None = None
        self.legacy_token: Callable[[], str | None] | None = None
        """The kubernetes client's token of a legacy ``auth-provider`` (set by the adapter)."""

    def authorization(self) -> str | None:
        """The ``Authorization`` header value, or None when only a certificate authenticates."""
        auth = self.auth
        if auth.exec_plugin is not None:
            issued = self._from_plugin(auth.exec_plugin)
            if issued.token:
                return f"Bearer {issued.token}"
        if auth.token:
            return f"Bearer {auth.token}"
        if auth.token_file:
            return f"Bearer {self._read_token_file(auth.token_file)}"
        if self.legacy_token is not None:
            token = self.legacy_token()
            return token if token and token.lower().startswith("bearer ") else (f"Bearer {token}" if token else None)
        if auth.username and auth.password:
            pair = f"{auth.username}:{auth.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    def client_pair(self) -> tuple[bytes, bytes] | None:
        """The client certificate and key (PEM), from the kubeconfig or the exec plugin, or None."""
        if self.auth.client_certificate and self.auth.client_key:
            return self.auth.client_certificate, self.auth.client_key
        if self.auth.exec_plugin is not None:
            return self._from_plugin(self.auth.exec_plugin).pair
        return None

    def refresh(self) -> bool:
        """After a 401: forget what a plugin issued or a token file said; whether asking again may help."""
        with self._lock:
            changed = self._issued is not None or self._file_token is not None
            if self._issued is not None and self.auth.exec_plugin is not None:
                with _ISSUED_LOCK:
                    if _ISSUED.get(repr(self.auth.exec_plugin)) is self._issued:
                        del _ISSUED[repr(self.auth.exec_plugin)]
            self._issued, self._file_token = None, None
        return changed

    def secrets(self) -> list[str]:
        """What an error message must never show: the tokens and password known now."""
        found = self.auth.secrets()
        if self._file_token:
            found.append(self._file_token[0])
        if self._issued and self._issued.token:
            found.append(self._issued.token)
        return found

    # ------------------------------------------------------------------ sources
    def _read_token_file(self, path: str) -> str:
        with self._lock:
            if self._file_token is not None and self._monotonic() - self._file_token[1] < TOKEN_FILE_PERIOD:
                return self._file_token[0]
            try:
                with open(path, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise ClusterConfigError(f"cannot read the token file {path} "
                                         f"({exc.strerror or type(exc).__name__}): fix the kubeconfig") from exc
            self._file_token = (token, self._monotonic())
            return token

    def _from_plugin(self, plugin: ExecPlugin) -> _Issued:
        key = repr(plugin)
        with self._lock:
            issued = self._issued
            if issued is None:
                with _ISSUED_LOCK:
                    issued = _ISSUED.get(key)
            if issued is None or (issued.expires is not None and self._now() >= issued.expires):
                issued = run_plugin(plugin)
                with _ISSUED_LOCK:
                    _ISSUED[key] = issued
            self._issued = issued
            return issued


def run_plugin(plugin: ExecPlugin) -> _Issued:
    """Run the exec plugin once and read its ExecCredential."""
    name = plugin.command
    terminal = sys.stdin is not None and sys.stdin.isatty()
    if plugin.interactive_mode == "Always" and not terminal:
        raise ClusterConfigError(f"exec plugin {name} needs a terminal (interactiveMode: Always) and standard "
                                 "input is not one: run it where you can answer it, or use another credential")
    interactive = terminal and plugin.interactive_mode != "Never"
    spec: dict[str, object] = {"interactive": interactive}
    if plugin.cluster_info is not None:
        spec["cluster"] = dict(plugin.cluster_info)
    info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
    env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    hint = f": {plugin.install_hint.strip()}" if plugin.install_hint.strip() else ""
    try:
        proc = subprocess.run([name, *plugin.args], env=env, stdout=subprocess.PIPE,
                              stdin=None if interactive else subprocess.DEVNULL, timeout=PLUGIN_TIMEOUT, check=False)
    except FileNotFoundError as exc:
        raise ClusterConfigError(f"exec plugin: executable {name} not found{hint}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ClusterConfigError(f"exec plugin {name} gave no credential within {PLUGIN_TIMEOUT:.0f} s") from exc
    except OSError as exc:
        raise ClusterConfigError(f"exec plugin: cannot run {name} ({exc.strerror or type(exc).__name__}){hint}") from exc
    if proc.returncode != 0:
        raise ClusterConfigError(f"exec plugin: executable {name} failed with exit code {proc.returncode}{hint}")
    return _issued(plugin, proc.stdout)


def _issued(plugin: ExecPlugin, stdout: bytes) -> _Issued:
    name = plugin.command

    def bad(problem: str) -> ClusterConfigError:
        return ClusterConfigError(f"exec plugin {name} {problem}")

    try:
        answer = json.loads(stdout)
    except ValueError as exc:
        raise bad("did not print an ExecCredential (its output is not JSON)") from exc
    if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
        raise bad("did not print an ExecCredential")
    if answer.get("apiVersion") != plugin.api_version:
        raise bad(f"answered apiVersion {shorten(str(answer.get('apiVersion')), 80)!r}, "
                  f"not {plugin.api_version!r} as the kubeconfig asks")
    status = answer.get("status")
    if not isinstance(status, dict):
        raise bad("answered an ExecCredential without a status")
    token = status.get("token") or None
    cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
    if bool(cert) != bool(key):
        raise bad("answered a client certificate without its key, or a key without its certificate")
    if not token and not cert:
        raise bad("answered neither a token nor a client certificate and key")
    expires = None
    if status.get("expirationTimestamp"):
        try:
            expires = dt.datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
        except ValueError as exc:
            raise bad(f"answered an expirationTimestamp that is not RFC 3339 "
                      f"({scrub(shorten(str(status['expirationTimestamp']), 40))})") from exc
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=dt.UTC)
    pair = (str(cert).encode(), str(key).encode()) if cert and key else None
    return _Issued(token=str(token) if token else None, pair=pair, expires=expires)
