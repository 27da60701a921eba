"""A Prometheus that answers "success" with a body that is not what its API documents
(issue 57, finding 4): every such answer is ``unknown`` with the reason, never an internal
error, and a canary measured against it is rolled back by ``verify.unknown``, not halted.

The hostile server is a plain HTTP server on loopback answering each query with one fixed body.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from kubesim import KubeSim
from runbooks.engine.runs import RunState
from runbooks.metrics import MetricsUnavailable
from runbooks.metrics.prometheus import PrometheusClient
from runbooks.metrics.spec import PrometheusPolicy
from tests.engine_support import kubesim_engine
from tests.integration.test_metric_checks import ALICE, BOB, NEW, TARGET, entries, policy
from tests.integration.test_prometheus_token import serve

MALFORMED: dict[str, tuple[Any, str]] = {
    "value-not-a-number": ({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"Hostname": "gpu-node1"}, "value": [1.0, "lots"]}]}}, "a value that is not a number: 'lots'"),
    "value-missing": ({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"Hostname": "gpu-node1"}}]}}, "a sample that is not [time, \"value\"]"),
    "body-a-list": ([{"status": "success"}], "JSON that is not Prometheus' answer (a list, not an object)"),
    "result-a-dict": ({"status": "success", "data": {"resultType": "vector", "result": {"gpu-node1": 1}}},
                      "a vector whose result is not a list"),
    "data-missing": ({"status": "success"}, "success without a data object"),
    "labels-missing": ({"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "1"]}]}},
                       "a vector sample without its labels"),
    "scalar-malformed": ({"status": "success", "data": {"resultType": "scalar", "result": "3"}},
                         "a sample that is not [time, \"value\"]"),
}


def hostile(body: Any) -> str:
    """A server that answers every query with ``body`` (HTTP 200, JSON); its URL."""
    payload = json.dumps(body).encode()

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            return

    _, url = serve(Answer)
    return url


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_success_answer_is_unavailable_with_the_reason(kind: str) -> None:
    body, reason = MALFORMED[kind]
    client = PrometheusClient(PrometheusPolicy(url=hostile(body)))
    with pytest.raises(MetricsUnavailable) as raised:
        client.vector("up")
    assert reason in str(raised.value), raised.value


def test_a_canary_measured_against_malformed_answers_is_rolled_back_not_halted(
    fresh_cluster: KubeSim, redis_url: str,
) -> None:
    """Finding 4: Prometheus answering values that are not numbers at the canary's start and
    through verify: the metric checks are ``unknown`` naming what was wrong, and ``verify.unknown:
    fail`` rolls the canary back (before: an internal error halted the run with its node changed)."""
    url = hostile(MALFORMED["value-not-a-number"][0])
    engine = kubesim_engine(fresh_cluster, redis_url, policy(url, built_in=True))
    run = engine.request_canary(actor=ALICE, target=TARGET, image=NEW, node="gpu-node1").run
    engine.approve(run.id, actor=BOB)
    run = engine.advance(run.id)
    assert run.state is RunState.ROLLED_BACK, (run.state, run.reason)
    xid = entries(engine, run, "verify_canary.metric:xid-errors")[0]
    assert xid["status"] == "unknown" and "a value that is not a number: 'lots'" in xid["detail"], xid


def test_an_answer_that_is_not_http_is_unavailable_with_the_reason() -> None:
    """A second attack run (N2): a status line that is not HTTP (``BadStatusLine``) escaped as an
    internal error: at the request it was a traceback, mid-verify it halted the run with the
    canary's node changed. It is ``MetricsUnavailable``, so the checks are ``unknown``."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def answer() -> None:  # the one query's connection; the listener closed after it ends the thread
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            conn.sendall(b"HELLO\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    client = PrometheusClient(PrometheusPolicy(url=f"http://127.0.0.1:{listener.getsockname()[1]}"))
    try:
        with pytest.raises(MetricsUnavailable, match="answered something that is not HTTP"):
            client.vector("up")
    finally:
        listener.close()
