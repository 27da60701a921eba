"""The adapter's HTTPS to the API server: urllib3 with the kubeconfig's TLS and credentials (issue 63).

What the kubernetes client's ``ApiClient``/``RESTClientObject`` did for the adapter, which
sent every request with ``_preload_content=False`` and decoded the JSON itself: one
``urllib3.PoolManager`` (the same library underneath), the ``Authorization`` header, the
body as JSON, a non-2xx answer raised with its status, body and headers. Without the
client's import (a third of a second and its generated models, issue 63), and with what
kubectl adds: the server name to verify (``tls-server-name``), a proxy (``proxy-url``,
else ``HTTPS_PROXY``/``NO_PROXY`` as the client read them), the credentials asked again
once after a 401 (an exec plugin's token expired early), and client certificates kept in
memory: an embedded key is written to a private temporary file only for the moment
:mod:`ssl` loads it, then deleted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

from runbooks.cluster.credentials import Credentials
from runbooks.cluster.kubeconfig import Endpoint
from runbooks.errors import ClusterConfigError

USER_AGENT = "upgradebot/0.1.0"
"""Also the field manager a server records for our writes that name none (as kubectl's is ``kubectl``)."""


class HTTPFailure(Exception):
    """A non-2xx answer: its status, body and headers (turned into our error by the adapter)."""

    def __init__(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body, self.headers = status, body, headers


class Transport:
    """Requests to one API server with one kubeconfig context's TLS and credentials."""

    def __init__(self, endpoint: Endpoint, credentials: Credentials, *, pool_size: int) -> None:
        self.server = endpoint.server
        self.credentials = credentials
        scheme = urlsplit(endpoint.server).scheme
        if scheme not in ("https", "http"):
            raise ClusterConfigError(f"cannot use {endpoint.source}: the server of context {endpoint.context!r} "
                                     f"is not an https:// URL: fix the kubeconfig")
        options: dict[str, Any] = {"num_pools": 4, "maxsize": pool_size, "retries": False}
        if scheme == "https":
            options["ssl_context"] = tls_context(endpoint, credentials)
            if endpoint.tls_server_name:
                options["server_hostname"] = endpoint.tls_server_name
            if endpoint.insecure:
                options["assert_hostname"] = False
                urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # asked for, as kubectl
        proxy = endpoint.proxy_url or _environment_proxy(endpoint.server)
        if proxy and proxy.startswith("socks"):
            raise ClusterConfigError(f"cannot use {endpoint.source}: a SOCKS proxy-url is not supported: "
                                     "use an HTTP(S) proxy")
        self._pool: urllib3.PoolManager = urllib3.ProxyManager(proxy, **options) if proxy else \
            urllib3.PoolManager(**options)

    def request(self, method: str, path: str, *, query: list[tuple[str, Any]], headers: dict[str, str],
                body: Any, timeout: tuple[float, float]) -> urllib3.BaseHTTPResponse:
        """The answer to one request, its body not read yet; :class:`HTTPFailure` when not 2xx."""
        url = self.server + path + (f"?{urlencode(query)}" if query else "")
        if body is None or isinstance(body, bytes):
            data = body
        else:
            data = body.encode() if isinstance(body, str) else json.dumps(body, default=_jsonable).encode()
        for attempt in range(2):
            sent = {"User-Agent": USER_AGENT, **headers}
            if data is not None:
                sent.setdefault("Content-Type", "application/json")
            authorization = self.credentials.authorization()
            if authorization:
                sent["Authorization"] = authorization
            response = self._pool.urlopen(method, url, body=data, headers=sent, preload_content=False,
                                          redirect=False, retries=False,
                                          timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]))
            if 200 <= response.status <= 299:
                return response
            try:
                answer = response.data
            finally:
                response.release_conn()
            if response.status == 401 and attempt == 0 and self.credentials.refresh():
                continue  # a credential that expired early: asked for again, once (client-go does)
            raise HTTPFailure(response.status, answer, dict(response.headers))
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._pool.clear()


def tls_context(endpoint: Endpoint, credentials: Credentials) -> ssl.SSLContext:
    """Trust the kubeconfig's CA (else the system's), or nothing checked when insecure; our client certificate."""
    try:
        if endpoint.insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif endpoint.ca_pem:
            context = ssl.create_default_context(cadata=endpoint.ca_pem.decode("ascii", "replace"))
        else:
            context = ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        raise ClusterConfigError(f"cannot use {endpoint.source}: the certificate authority of context "
                                 f"{endpoint.context!r} is not a PEM certificate ({_reason(exc)}): fix the "
                                 "kubeconfig") from exc
    pair = credentials.client_pair()
    if pair is not None:
        _load_pair(context, *pair, where=f"{endpoint.source}, context {endpoint.context!r}")
    return context


def _load_pair(context: ssl.SSLContext, certificate: bytes, key: bytes, *, where: str) -> None:
    """:mod:`ssl` loads a certificate chain from files only: a private directory, deleted at once."""
    scratch = tempfile.mkdtemp(prefix="upgradebot-tls-")
    try:
        cert_path, key_path = os.path.join(scratch, "client.crt"), os.path.join(scratch, "client.key")
        for path, data in ((cert_path, certificate), (key_path, key)):
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert_path, key_path)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ClusterConfigError(f"cannot use {where}: its client certificate and key cannot be loaded "
                                 f"({_reason(exc)}): fix the kubeconfig") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or type(exc).__name__)


def _environment_proxy(server: str) -> str | None:
    """``HTTPS_PROXY`` (``HTTP_PROXY`` for an http server) unless ``NO_PROXY`` names the host."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None
    import urllib.request  # only when a proxy variable is set

    parts = urlsplit(server)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    with contextlib.suppress(Exception):
        if urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):  # type: ignore[attr-defined]  # in the module, not in its stubs
            return None
    return proxy


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
