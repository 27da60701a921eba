"""The cluster adapter: every request to the API server, and the one module that may import
the official ``kubernetes`` client.

:class:`Cluster` sends every request over its :class:`~runbooks.cluster.transport.Transport`
(urllib3, with the kubeconfig's TLS and credentials as :mod:`runbooks.cluster.kubeconfig`
and :mod:`runbooks.cluster.credentials` read them) and decodes the JSON itself into plain
dicts, page by page (:mod:`runbooks.cluster.decoding`, with msgspec): listing 50,000 pods
through the client's generated models takes about 5 times as long and 1.4 times the memory
(``bench/bench_inventory.py``), and the models cannot represent API versions the client does
not know (``resource.k8s.io/v1alpha2``). Every failure is turned into one of
:mod:`runbooks.errors` here, once (``_send``). Reads are retried as the
:class:`~runbooks.cluster.retrying.RetryPolicy` says (``_read``); writes go through ``_send``
and retry only what is safe to repeat. Nothing the adapter returns is a client object.

The kubernetes client itself is imported for one case only: a kubeconfig user with a legacy
``auth-provider`` (oidc, gcp, azure), whose token only the client knows how to get
(``_legacy_token``). Reading a kubeconfig with it cost every shell verb a third of a second
(issue 63); the shell reads its kubeconfig without it.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

import urllib3

from runbooks.cluster.credentials import Credentials
from runbooks.cluster.decoding import (
    NotDecoded,
    TypedPage,
    decode_json,
    decode_object,
    decode_page,
)
from runbooks.cluster.discovering import Discovery
from runbooks.cluster.kubeconfig import Endpoint, in_cluster_endpoint, load_kubeconfig
from runbooks.cluster.metrics import MetricSample, lines_of, samples_of
from runbooks.cluster.resources import (
    Resource,
    ServerVersion,
    leading_int,
)
from runbooks.cluster.retrying import RetryPolicy, call_with_retries
from runbooks.cluster.streaming import WatchStream
from runbooks.cluster.transport import HTTPFailure, Transport
from runbooks.cluster.wrapping import error_for_status, error_for_transport
from runbooks.cluster.writing import Query, Writes
from runbooks.errors import (
    Action,
    ClusterConfigError,
    ClusterError,
    Forbidden,
    ListExpired,
    NotFound,
    scrub,
    shorten,
)

T = TypeVar("T")
A = TypeVar("A")
S = TypeVar("S")
PAGE_SIZE = 500
FIRST_PAGE = 50
"""The first page of a list whose caller waits for it (``first_page``): it shows the list's moment sooner."""
TIMEOUT = (5.0, 30.0)  # seconds to connect, seconds between bytes read
POOL_SIZE = 16  # parallel requests the connection pool keeps open (log reads)


class Cluster(Writes, Discovery):
    """A Kubernetes API server the bot reads and (through :class:`Writes`) changes."""

    def __init__(
        self,
        transport: Transport,
        *,
        context: str,
        retry: RetryPolicy | None = None,
        timeout: tuple[float, float] = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self.context = context
        self.server: str = transport.server
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._sleep = sleep
        self._monotonic = monotonic

    # ------------------------------------------------------------------ connecting
    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: tuple[float, float] = TIMEOUT,
    ) -> Cluster:
        """The cluster of ``context`` (default: the current one) in the kubeconfig at ``path``.

        ``path`` may list several files separated by ``:`` as ``KUBECONFIG`` does, merged as
        kubectl merges them; ``None`` means ``KUBECONFIG``, else ``~/.kube/config``. Read by
        :mod:`runbooks.cluster.kubeconfig`, not the kubernetes client (issue 63).
        """
        endpoint = load_kubeconfig(path, context)
        return cls._connect(endpoint, path=path, retry=retry, timeout=timeout)

    @classmethod
    def in_cluster(cls, *, retry: RetryPolicy | None = None, timeout: tuple[float, float] = TIMEOUT) -> Cluster:
        """The cluster the bot runs in, with its ServiceAccount's token."""
        return cls._connect(in_cluster_endpoint(os.environ), path=None, retry=retry, timeout=timeout)

    @classmethod
    def _connect(cls, endpoint: Endpoint, *, path: str | os.PathLike[str] | None, retry: RetryPolicy | None,
                 timeout: tuple[float, float]) -> Cluster:
        credentials = Credentials(endpoint.auth)
        if endpoint.auth.auth_provider is not None:
            credentials.legacy_token = _legacy_token(path, endpoint)
        return cls(Transport(endpoint, credentials, pool_size=POOL_SIZE), context=endpoint.context, retry=retry,
                   timeout=timeout)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------------- requests
    def _send(
        self, method: str, path: str, *, action: Action, query: Query | None = None,
        body: Any = None, content_type: str | None = None, timeout: tuple[float, float] | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """One request, its failure turned into our error (no retry here)."""
        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            return self._transport.request(method, path, query=list(query or []), headers=headers, body=body,
                                           timeout=timeout or self.timeout)
        except HTTPFailure as exc:
            raise self._clean(error_for_status(exc.status, exc.body, exc.headers, action=action,
                                               context=self.context)) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._clean(error_for_transport(exc, action=action, context=self.context, server=self.server)) from exc

    def _clean(self, error: ClusterError) -> ClusterError:
        error.args = (scrub(str(error), *self._transport.credentials.secrets()),)
        return error

    def _read(self, path: str, *, action: Action, query: Query | None = None) -> bytes:
        """The body of a GET, retried as the policy allows."""

        def attempt() -> bytes:
            response = self._send("GET", path, action=action, query=query)
            try:
                return response.data
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise self._clean(error_for_transport(exc, action=action, context=self.context, server=self.server)) from exc
            finally:
                response.release_conn()

        return call_with_retries(attempt, self.retry, sleep=self._sleep, monotonic=self._monotonic)

    def get_json(self, path: str, *, action: Action, query: Query | None = None) -> dict[str, Any]:
        return _decoded(decode_object, self._read(path, action=action, query=query), action)

    def write_json(
        self, method: str, path: str, *, action: Action, body: Any = None, content_type: str | None = None,
        query: Query | None = None,
    ) -> dict[str, Any]:
        """One mutating request, not retried (see :mod:`runbooks.cluster.writing`); the answer's object."""
        response = self._send(method, path, action=action, body=body, content_type=content_type, query=query)
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._clean(error_for_transport(exc, action=action, context=self.context, server=self.server)) from exc
        finally:
            response.release_conn()
        answer = _decoded(decode_json, data, action) if data else {}
        return answer if isinstance(answer, dict) else {}

    # ----------------------------------------------------------------------- reads
    def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        action = Action("get", resource.qualified, namespace, name)
        return self.get_json(resource.path(namespace, name), action=action)

    @overload
    def list_objects(
        self, resource: Resource, *, namespace: str | None = ..., label_selector: str | None = ...,
        field_selector: str | None = ..., project: None = ..., page_size: int = ..., item: None = ...,
    ) -> list[dict[str, Any]]: ...

    @overload
    def list_objects(
        self, resource: Resource, *, namespace: str | None = ..., label_selector: str | None = ...,
        field_selector: str | None = ..., project: Callable[[dict[str, Any]], T], page_size: int = ...,
        item: None = ...,
    ) -> list[T]: ...

    @overload
    def list_objects(
        self, resource: Resource, *, namespace: str | None = ..., label_selector: str | None = ...,
        field_selector: str | None = ..., project: Callable[[S], T], page_size: int = ..., item: type[S],
    ) -> list[T]: ...

    def list_objects(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        project: Callable[[Any], Any] | None = None,
        page_size: int = PAGE_SIZE,
        item: type[Any] | None = None,
    ) -> list[Any]:
        """Every object, fetched ``page_size`` at a time, each passed through ``project``.

        Projecting page by page keeps only what the caller needs, so 50,000 pods never
        sit in memory whole. ``item`` (a shape of :mod:`runbooks.cluster.decoding`) decodes
        each object as that shape, skipping the fields no caller reads, instead of as a dict.
        A list whose continue token expires (410) starts again.
        """
        keep: Callable[[Any], Any] = project or (lambda obj: obj)
        action = Action("list", resource.qualified, namespace)
        for restart in range(3):
            try:
                return [keep(obj) for page in self._pages(resource, namespace, label_selector, field_selector,
                                                          page_size, action, item=item) for obj in page]
            except ListExpired:
                if restart == 2:
                    raise
        raise AssertionError("unreachable")

    def fold_objects(
        self, resource: Resource, *, start: Callable[[], A], add: Callable[[A, Any], None],
        item: type[Any] | None = None, namespace: str | None = None, label_selector: str | None = None,
        field_selector: str | None = None, page_size: int = PAGE_SIZE,
    ) -> A:
        """Every object passed to ``add`` into what ``start()`` made, page by page, and that returned.

        One pass that keeps what ``add`` keeps (counts, a few objects), nothing per object;
        ``item`` (a shape of :mod:`runbooks.cluster.decoding`, e.g. ``PodShape``) decodes each
        object as that shape, the fields no caller reads skipped, instead of as a dict. A list
        whose continue token expires (410) starts again, from a fresh ``start()``.
        """
        action = Action("list", resource.qualified, namespace)
        for restart in range(3):
            into = start()
            try:
                for page in self._pages(resource, namespace, label_selector, field_selector, page_size, action,
                                        item=item):
                    for obj in page:
                        add(into, obj)
                return into
            except ListExpired:
                if restart == 2:
                    raise
        raise AssertionError("unreachable")

    def _pages(
        self, resource: Resource, namespace: str | None, label_selector: str | None,
        field_selector: str | None, page_size: int, action: Action, meta: dict[str, str] | None = None,
        first_size: int | None = None, *, item: type[Any] | None = None,
    ) -> Iterator[list[Any]]:
        """The items of each page in turn, decoded as it arrives (one page's bytes held at a time),
        as dicts or (``item``) as that shape; ``first_size``: the first page's size (default ``page_size``)."""
        query: Query = [("limit", page_size)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        token = ""
        while True:
            limit = [("limit", first_size)] if first_size and not token else query[:1]
            page: TypedPage[Any] = _decoded(lambda data: decode_page(data, item=item), self._read(
                resource.path(namespace), action=action,
                query=limit + query[1:] + ([("continue", token)] if token else []),
            ), action)
            if meta is not None and not token:
                meta["resourceVersion"] = page.resource_version
            token = page.token
            yield page.objects
            if not token:
                return

    def list_versioned(
        self, resource: Resource, *, namespace: str | None = None, field_selector: str | None = None,
        label_selector: str | None = None, page_size: int = PAGE_SIZE, first_page: Callable[[], None] | None = None,
        project: Callable[[Any], Any] | None = None, item: type[Any] | None = None,
    ) -> tuple[list[Any], str]:
        """Every object (each passed through ``project``, page by page, as :meth:`list_objects` does;
        decoded as ``item`` when given, as it does) and the list's resourceVersion, from which a
        :meth:`watch` goes on; ``first_page()`` is
        called when the first page (of at most :data:`FIRST_PAGE` objects, to come sooner) is in:
        the moment the list shows (its resourceVersion's), the later pages continuing from it
        (again if an expired list starts over)."""
        action = Action("list", resource.qualified, namespace)
        for restart in range(3):
            meta: dict[str, str] = {}
            try:
                items: list[Any] = []
                pages = self._pages(resource, namespace, label_selector, field_selector, page_size, action, meta,
                                    first_size=min(FIRST_PAGE, page_size) if first_page is not None else None,
                                    item=item)
                for number, page in enumerate(pages):
                    if number == 0 and first_page is not None:
                        first_page()
                    items.extend(page if project is None else map(project, page))
                return items, meta.get("resourceVersion", "")
            except ListExpired:
                if restart == 2:
                    raise
        raise AssertionError("unreachable")

    def watch(
        self, resource: Resource, *, resource_version: str, namespace: str | None = None,
        label_selector: str | None = None, field_selector: str | None = None, timeout_seconds: int = 300,
    ) -> WatchStream:
        """Changes after ``resource_version``, with bookmarks, for up to ``timeout_seconds``.

        :class:`~runbooks.errors.ListExpired` (now or while iterating) when that version is
        older than the server's history: list again (:meth:`list_versioned`) and watch from there.
        """
        action = Action("watch", resource.qualified, namespace)
        query: Query = [("watch", "1"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                        ("timeoutSeconds", timeout_seconds)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        response = self._send("GET", resource.path(namespace), action=action, query=query,
                              timeout=(self.timeout[0], timeout_seconds + self.timeout[1]))
        return WatchStream(
            response, action=action,
            transport_error=lambda exc: self._clean(
                error_for_transport(exc, action=action, context=self.context, server=self.server)),
            transport_errors=(urllib3.exceptions.HTTPError, OSError, AttributeError, ValueError),
        )

    def version(self) -> ServerVersion:
        """``/version``, with the server's clock from the answer's ``Date`` header."""
        action = Action("get", "/version")

        def attempt() -> tuple[bytes, str | None]:
            response = self._send("GET", "/version", action=action)
            try:
                return response.data, response.headers.get("Date")
            finally:
                response.release_conn()

        data, date = call_with_retries(attempt, self.retry, sleep=self._sleep, monotonic=self._monotonic)
        body = _decoded(decode_object, data, action)
        return ServerVersion(
            git_version=str(body.get("gitVersion", "")),
            major=leading_int(str(body.get("major", ""))),
            minor=leading_int(str(body.get("minor", ""))),
            platform=str(body.get("platform", "")),
            server_time=_http_date(date),
        )

    def server_time(self) -> dt.datetime:
        """The API server's clock (its ``Date`` header), else ours: event times are the server's."""
        return self.version().server_time or dt.datetime.now(dt.UTC)

    def metric_samples(self, name: str) -> list[MetricSample] | None:
        """Samples of one metric from the API server's ``/metrics``; ``None`` if forbidden or absent.

        The text is streamed and the read stops after the metric's block, since a large
        API server's ``/metrics`` runs to megabytes.
        """
        action = Action("get", "/metrics")
        try:
            response = call_with_retries(
                lambda: self._send("GET", "/metrics", action=action), self.retry,
                sleep=self._sleep, monotonic=self._monotonic,
            )
        except (Forbidden, NotFound):
            return None
        try:
            return samples_of(name, lines_of(response.stream(64 * 1024)))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._clean(error_for_transport(exc, action=action, context=self.context, server=self.server)) from exc
        finally:
            response.close()

    def pod_log(
        self, namespace: str, name: str, *, container: str | None = None, tail_lines: int = 200,
        previous: bool = False,
    ) -> str:
        """The last ``tail_lines`` lines of a container's log."""
        query: Query = [("tailLines", tail_lines)]
        if container:
            query.append(("container", container))
        if previous:
            query.append(("previous", "true"))
        action = Action("get", "pods/log", namespace, name)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        return self._read(path, action=action, query=query).decode("utf-8", "replace")


def _legacy_token(path: str | os.PathLike[str] | None, endpoint: Endpoint) -> Callable[[], str | None]:
    """The token of a legacy ``auth-provider`` (oidc, gcp, azure), which only the kubernetes client
    reads and refreshes: the one case that imports it, for this kubeconfig alone."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=os.fspath(path) if path is not None else None, context=endpoint.context,
                                client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        raise ClusterConfigError(
            f"cannot use {endpoint.source}: the auth-provider {endpoint.auth.auth_provider!r} of context "
            f"{endpoint.context!r} gave no credential ({shorten(scrub(str(exc)), 200)}): fix the kubeconfig, "
            "or use an exec credential plugin") from exc

    def token() -> str | None:
        hook = configuration.refresh_api_key_hook
        if hook is not None:
            hook(configuration)
        keys = configuration.api_key or {}
        return keys.get("BearerToken") or keys.get("authorization")  # the key of client 36, else of before

    return token


def _decoded(decode: Callable[[bytes], T], data: bytes, action: Action) -> T:
    """``decode(data)``, a body that is not the JSON expected said as the request's failure."""
    try:
        return decode(data)
    except NotDecoded as exc:
        raise ClusterError(f"cannot {action}: the answer is not the JSON expected ({shorten(str(exc))})",
                           action=action) from exc


def _http_date(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(dt.UTC)
    except (TypeError, ValueError):
        return None
