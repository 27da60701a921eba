"""Watch streams: the JSON lines of a ``?watch=1`` answer, as plain dicts.

No I/O of its own beyond reading the response the adapter opened: :class:`WatchStream`
splits the chunked body into lines and decodes each into ``{"type", "object"}``
(:func:`~runbooks.cluster.decoding.decode_event`: the object as a list item is). An
``ERROR`` event carrying a 410 Status (the watch's resourceVersion is older than the
server's history) raises :class:`~runbooks.errors.ListExpired`, as the same answer at the
HTTP level does, so the caller re-lists either way; any other ``ERROR`` raises a
:class:`~runbooks.errors.ClusterError`. ``close()`` may be called from another thread to
end a blocked read.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from runbooks.cluster.decoding import NotDecoded, decode_event
from runbooks.errors import Action, ClusterError, ListExpired, shorten

CHUNK = 64 * 1024


class _Response(Protocol):
    def stream(self, amt: int) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class WatchStream:
    """The events of one watch request; iterate it, then (or meanwhile) ``close()`` it."""

    def __init__(
        self, response: _Response, *, action: Action, transport_error: Callable[[BaseException], ClusterError],
        transport_errors: tuple[type[BaseException], ...] = (OSError,),
    ) -> None:
        self._response = response
        self._action = action
        self._transport_error = transport_error
        self._transport_errors = transport_errors
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        try:
            for chunk in self._response.stream(CHUNK):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._event(line)
            if buffer.strip():
                yield self._event(buffer)
        except self._transport_errors as exc:
            if self._closed:
                return
            raise self._transport_error(exc) from exc
        finally:
            self.close()

    def _event(self, line: bytes) -> dict[str, Any]:
        try:
            event = decode_event(line)
        except NotDecoded as exc:
            raise ClusterError(f"cannot {self._action}: a watch event is not JSON ({shorten(str(exc))})",
                               action=self._action) from exc
        if event["type"] == "ERROR":
            status = event.get("object") or {}
            code, message = int(status.get("code") or 0), str(status.get("message") or "")
            if code == 410:
                raise ListExpired(f"cannot {self._action}: the watch is older than the server's history "
                                  f"({shorten(message)}): list again", action=self._action, status=410)
            raise ClusterError(f"cannot {self._action}: the watch failed ({code}): {shorten(message)}",
                               action=self._action, status=code or None)
        return event

    def close(self) -> None:
        """End the stream (from any thread); a blocked read returns."""
        if self._closed:
            return
        self._closed = True
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        with contextlib.suppress(OSError, AttributeError):
            if sock is not None:  # wakes a read blocked in another thread
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError, AttributeError):
            self._response.close()
