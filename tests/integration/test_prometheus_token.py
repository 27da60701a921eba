"""The Prometheus bearer token (policy ``prometheus.bearer_token_file``) reaches Prometheus and
nothing else (issue 37, item 3; a security.md row).

In front of the real Prometheus sits an authenticating proxy, as kube-rbac-proxy guards a
cluster's Prometheus: it forwards a query only with ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runbooks.metrics import MetricsUnavailable
from runbooks.metrics.prometheus import PrometheusClient
from runbooks.metrics.spec import PrometheusPolicy
from tests.prometheus_support import Prometheus

TOKEN = "tok-7f3a9c-never-logged"


def serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def guarded(prometheus: Prometheus) -> Iterator[tuple[str, list[str]]]:
    """An authenticating proxy to ``prometheus``; yields its URL and the Authorization headers it saw."""
    seen: list[str] = []

    class Proxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get("Authorization") or "")
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b"Unauthorized")
                return
            request = urllib.request.Request(f"{prometheus.url}{self.path}", data=body, method="POST",
                                             headers={"Content-Type": "application/x-www-form-urlencoded"})
            with urllib.request.urlopen(request, timeout=30) as resp:
                answer = resp.read()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            return

    server, url = serve(Proxy)
    yield url, seen
    server.shutdown()


def test_the_token_from_its_file_is_sent_and_never_in_an_error_or_a_log(
    guarded: tuple[str, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 37 item 3: the token read from ``bearer_token_file`` is sent as a bearer token (the
    proxy answers); a wrong token is refused with a sentence naming the file, not the token; the
    token is in no log record, error or repr."""
    url, seen = guarded
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    client = PrometheusClient(PrometheusPolicy(url=url, bearer_token_file=str(token_file)))
    caplog.set_level(logging.DEBUG)
    assert client.vector("vector(3)") == {"": 3.0}
    assert seen == [f"Bearer {TOKEN}"]

    token_file.write_text("rotated-but-wrong\n")  # read at each query: a rotated token is picked up
    with pytest.raises(MetricsUnavailable) as refused:
        client.vector("vector(3)")
    assert str(refused.value) == (f"{url} refused the query (HTTP 401): check prometheus.bearer_token_file and "
                                  "what its token may read")
    assert seen[-1] == "Bearer rotated-but-wrong"
    token_file.unlink()
    with pytest.raises(MetricsUnavailable) as missing:
        client.vector("vector(3)")
    assert str(missing.value) == f"cannot read the bearer token file {token_file}: No such file or directory"
    said = caplog.text + repr(client) + str(refused.value) + str(missing.value) + str(vars(client))
    assert TOKEN not in said and "rotated-but-wrong" not in said


def test_a_redirect_is_not_followed_so_the_token_goes_nowhere_else(tmp_path: Path) -> None:
    """Issue 37 item 3: a server answering a redirect gets an error back, and the place it points
    to never receives the token (urllib would resend the Authorization header)."""
    elsewhere: list[str] = []

    class Catcher(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            elsewhere.append(self.headers.get("Authorization") or "")
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            return

    catcher, catcher_url = serve(Catcher)

    class Redirector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"{catcher_url}/api/v1/query")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    redirector, url = serve(Redirector)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    try:
        with pytest.raises(MetricsUnavailable) as redirected:
            PrometheusClient(PrometheusPolicy(url=url, bearer_token_file=str(token_file))).vector("up")
    finally:
        redirector.shutdown()
        catcher.shutdown()
    assert "answered a redirect (HTTP 302), which is not followed" in str(redirected.value)
    assert elsewhere == []
