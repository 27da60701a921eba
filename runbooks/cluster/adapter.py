"""The one module that imports the official ``kubernetes`` client.

:class:`Cluster` sends every request through the client's ``ApiClient`` with
``_preload_content=False`` and decodes the JSON itself into plain dicts, page by page
(:mod:`runbooks.cluster.decoding`, with msgspec): listing 50,000
pods through the client's generated models takes about 5 times as long and 1.4 times the
memory (``bench/bench_inventory.py``), and the models cannot represent API versions the
client does not know (``resource.k8s.io/v1alpha2``). Every failure is turned into one of
:mod:`runbooks.errors` here, once (``_send``). Reads are retried as the
:class:`~runbooks.cluster.retrying.RetryPolicy` says (``_read``); writes, when the upgrade
steps add them, go through ``_send`` and retry only what is safe to repeat. Nothing the
adapter returns is a client object.

The client itself is imported on the first connection (:meth:`Cluster.from_kubeconfig`,
:meth:`Cluster.in_cluster`), not with this module: importing it takes most of a second
and tens of MiB, and the verbs that never reach a cluster (``upgradebot status``,
``--help``) import this module through the handlers all the same.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, overload

import urllib3

from runbooks.cluster.decoding import (
    NotDecoded,
    TypedPage,
    decode_json,
    decode_object,
    decode_page,
)
from runbooks.cluster.discovering import Discovery
from runbooks.cluster.metrics import MetricSample, lines_of, samples_of
from runbooks.cluster.resources import (
    Resource,
    ServerVersion,
    leading_int,
)
from runbooks.cluster.retrying import RetryPolicy, call_with_retries
from runbooks.cluster.streaming import WatchStream
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

if TYPE_CHECKING:
    from kubernetes import client

T = TypeVar("T")
A = TypeVar("A")
S = TypeVar("S")
PAGE_SIZE = 500
FIRST_PAGE = 50
"""The first page of a list whose caller waits for it (``first_page``): it shows the list's moment sooner."""
TIMEOUT = (5.0, 30.0)  # seconds to connect, seconds between bytes read
POOL_SIZE = 16  # parallel requests the connection pool keeps open (log reads)
_LOADING = threading.Lock()
"""One kubeconfig load at a time: the client writes an embedded certificate to a temporary
file it remembers before writing it, so a thread loading the same kubeconfig meanwhile got
the empty file (``NO_CERTIFICATE_OR_CRL_FOUND``, said as an untrusted cluster)."""


class Cluster(Writes, Discovery):
    """A Kubernetes API server the bot reads and (through :class:`Writes`) changes."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        context: str,
        retry: RetryPolicy | None = None,
        timeout: tuple[float, float] = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self.context = context
        self.server: str = api.configuration.host
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self._sleep = sleep
        self._monotonic = monotonic
        self._secrets = [str(v) for v in (api.configuration.api_key or {}).values()]

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

        ``path`` may list several files separated by ``:`` as ``KUBECONFIG`` does; ``None``
        means the client's default (``KUBECONFIG``, else ``~/.kube/config``).
        """
        import yaml
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        where = os.fspath(path) if path is not None else None
        shown = where or "the default kubeconfig ($KUBECONFIG or ~/.kube/config)"
        listed = [p for p in (where or "").split(os.pathsep) if p]
        if listed and not any(os.path.exists(p) for p in listed):  # the client would say "Invalid kube-config file"
            raise ClusterConfigError(f"kubeconfig {where} not found: create it, or point KUBECONFIG (or --kubeconfig) "
                                     "at a file that exists")
        try:
            contexts, active = config.list_kube_config_contexts(config_file=where)
            names = [c["name"] for c in contexts or []]
            chosen = context or (active or {}).get("name")
            if not chosen:
                raise ClusterConfigError(f"{shown} has no current context: pass cluster=<context> ({_names(names)})")
            if chosen not in names:
                raise ClusterConfigError(f"no context {chosen!r} in {shown} ({_names(names)})")
            configuration = client.Configuration()
            with _LOADING:
                config.load_kube_config(
                    config_file=where, context=chosen, client_configuration=configuration,
                    persist_config=False,
                )
        except yaml.YAMLError as exc:
            raise ClusterConfigError(
                f"cannot use {shown}: it is not valid YAML ({shorten(' '.join(str(exc).split()), 160)}): "
                "fix the file or point KUBECONFIG at another"
            ) from exc
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
            raise ClusterConfigError(
                f"cannot use {shown}: {shorten(scrub(str(exc)), 200)}: fix the file or point KUBECONFIG at another"
            ) from exc
        return cls(_api_client(configuration), context=chosen, retry=retry, timeout=timeout)

    @classmethod
    def in_cluster(cls, *, retry: RetryPolicy | None = None, timeout: tuple[float, float] = TIMEOUT) -> Cluster:
        """The cluster the bot runs in, with its ServiceAccount's token."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            raise ClusterConfigError(
                f"not running in a pod with a ServiceAccount ({shorten(str(exc), 200)}): "
                "set KUBECONFIG or pass --kubeconfig"
            ) from exc
        return cls(_api_client(configuration), context="in-cluster", retry=retry, timeout=timeout)

    def close(self) -> None:
        self._api.close()

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
        # loaded since the connection was made: here a lookup in sys.modules
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json, */*"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response: urllib3.BaseHTTPResponse = self._api.call_api(
                path, method, query_params=list(query or []), header_params=headers, body=body,
                auth_settings=["BearerToken"], _return_http_data_only=True,
                _preload_content=False, _request_timeout=timeout or self.timeout,
            )
            return response
        except ApiException as exc:
            if exc.status == 0:
                error: ClusterError = error_for_transport(exc, action=action, context=self.context, server=self.server)
            else:
                error = error_for_status(
                    exc.status, exc.body, dict(exc.headers or {}), action=action, context=self.context,
                )
            raise self._clean(error) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self._clean(error_for_transport(exc, action=action, context=self.context, server=self.server)) from exc
        except AttributeError as exc:
            # The client turns a transport failure (a TLS handshake refused: the wrong CA) into
            # ApiException(status=0) without a body, then fails decoding that body: the cause is
            # the exception it was handling.
            cause = exc.__context__
            if not (isinstance(cause, ApiException) and cause.status == 0):
                raise
            raise self._clean(error_for_transport(cause, action=action, context=self.context,
                                                  server=self.server)) from cause

    def _clean(self, error: ClusterError) -> ClusterError:
        error.args = (scrub(str(error), *self._secrets),)
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


def _api_client(configuration: client.Configuration) -> client.ApiClient:
    from kubernetes import client

    configuration.connection_pool_maxsize = POOL_SIZE
    configuration.retries = False  # the adapter retries, with its own budget
    return client.ApiClient(configuration)


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


def _names(names: list[str]) -> str:
    return "contexts: " + ", ".join(names) if names else "it defines no contexts"
