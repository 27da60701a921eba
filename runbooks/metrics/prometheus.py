"""The Prometheus HTTP API client: the one module of the bot that queries a metrics system.

:class:`PrometheusClient` posts instant queries to ``<url>/api/v1/query`` with the bearer
token read from ``bearer_token_file`` at each query (a rotated ServiceAccount token is
picked up without a restart). The token goes in the ``Authorization`` header only: it is
never kept on the object, sent after a redirect, put in an error, or logged; errors name the server by scheme,
host and port and say why it did not answer.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from runbooks.characters import shown
from runbooks.metrics import MetricsUnavailable, key_of
from runbooks.metrics.spec import PrometheusPolicy

NODE_LABELS = ("Hostname", "hostname", "node", "instance")
"""The label naming a series' node, in order: dcgm-exporter's (up to 4.5.3-4.8.2, then its main
branch's), kube-state-metrics', the target's."""
MAX_ANSWER = 16 * 1024 * 1024


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: urllib would resend the ``Authorization`` header to wherever it points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


class PrometheusClient:
    """:class:`~runbooks.metrics.MetricSource` over Prometheus' HTTP API."""

    def __init__(self, policy: PrometheusPolicy) -> None:
        self.url = policy.url
        self.token_file = policy.bearer_token_file
        self.timeout = policy.timeout
        parts = urllib.parse.urlsplit(policy.url)
        self.where = f"{parts.scheme}://{parts.netloc}"

    def __repr__(self) -> str:
        return f"PrometheusClient({self.where})"

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise MetricsUnavailable(f"cannot read the bearer token file {self.token_file}: "
                                         f"{exc.strerror or type(exc).__name__}") from None
            if not token:
                raise MetricsUnavailable(f"the bearer token file {self.token_file} is empty")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _post(self, promql: str) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}/api/v1/query", method="POST", headers=self._headers(),
                                         data=urllib.parse.urlencode({"query": promql}).encode())
        try:
            with _OPENER.open(request, timeout=self.timeout) as resp:
                body = resp.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise MetricsUnavailable(f"{self.where} answered a redirect (HTTP {exc.code}), which is not "
                                         "followed (the token would go with it): set prometheus.url to the "
                                         "server itself") from None
            if exc.code in (401, 403):
                raise MetricsUnavailable(f"{self.where} refused the query (HTTP {exc.code}): check "
                                         "prometheus.bearer_token_file and what its token may read") from None
            raise MetricsUnavailable(f"{self.where} answered HTTP {exc.code}: {_error_of(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise MetricsUnavailable(f"{self.where} did not answer: {_words(reason)}") from None
        except http.client.HTTPException as exc:  # a status line, header or body that is not HTTP
            raise MetricsUnavailable(f"{self.where} answered something that is not HTTP "
                                     f"({type(exc).__name__})") from None
        if len(body) > MAX_ANSWER:
            raise MetricsUnavailable(f"{self.where} answered more than {MAX_ANSWER // 2**20} MiB: narrow the query")
        try:
            answer = json.loads(body)
        except ValueError:
            raise MetricsUnavailable(f"{self.where} answered something that is not Prometheus' JSON") from None
        if not isinstance(answer, dict):
            raise MetricsUnavailable(f"{self.where} answered JSON that is not Prometheus' answer (a "
                                     f"{type(answer).__name__}, not an object)")
        return answer

    def vector(self, promql: str) -> dict[str, float]:
        answer = self._post(promql)
        if answer.get("status") != "success":
            raise MetricsUnavailable(f"{self.where} refused the query: {shown(str(answer.get('error', '?'))[:300])}")
        return vector_of(answer.get("data"), self.where)


def vector_of(data: Any, where: str) -> dict[str, float]:
    """``{key: value}`` of a query's ``data`` (:func:`~runbooks.metrics.key_of`; values of one key
    added up); :class:`MetricsUnavailable` naming what is wrong when it is not an instant vector
    or a scalar as Prometheus' API documents them."""
    if not isinstance(data, dict):
        raise MetricsUnavailable(f"{where} answered success without a data object")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        return {"": _number(result, where)}
    if kind != "vector":
        raise MetricsUnavailable(f"the query answered a {str(kind)[:40]}, not an instant vector")
    if not isinstance(result, list):
        raise MetricsUnavailable(f"{where} answered a vector whose result is not a list")
    found: dict[str, float] = {}
    for row in result:
        labels = row.get("metric") if isinstance(row, dict) else None
        if not isinstance(labels, dict):
            raise MetricsUnavailable(f"{where} answered a vector sample without its labels")
        node = next((str(labels[k]) for k in NODE_LABELS if labels.get(k)), "")
        key = key_of(node, shown(str(labels["gpu"])) if labels.get("gpu") not in (None, "") else None)
        found[key] = found.get(key, 0.0) + _number(row.get("value"), where)
    return found


def _number(sample: Any, where: str) -> float:
    """The value of a ``[time, "value"]`` sample (NaN and infinities as Prometheus writes them)."""
    if not isinstance(sample, list) or len(sample) != 2 or not isinstance(sample[1], str):
        raise MetricsUnavailable(f"{where} answered a sample that is not [time, \"value\"]: {shown(str(sample)[:80])}")
    try:
        return float(sample[1])
    except ValueError:
        raise MetricsUnavailable(f"{where} answered a value that is not a number: {shown(repr(sample[1][:40]))}") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        return shown(str(json.loads(exc.read(65536)).get("error", exc.reason))[:300])
    except (ValueError, OSError, AttributeError):
        return shown(str(exc.reason)[:300])


def _words(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)[:300] or type(reason).__name__


def client_of(policy: PrometheusPolicy | None) -> PrometheusClient | None:
    return PrometheusClient(policy) if policy is not None else None
