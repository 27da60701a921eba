"""Our errors for everything that goes wrong between the bot and a cluster.

The type carries the retry policy, as kopf's ``TemporaryError``/``PermanentError`` do:
a :class:`TemporaryClusterError` may go away when retried (the adapter retries reads
itself, within a time budget), a :class:`PermanentClusterError` will not. Every message
says what failed, on which object, and what to do next; server bodies are cut short, the
cause is chained, and credentials never appear (see :func:`scrub`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_DETAIL = 300

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)\S+"),
    re.compile(r"(?i)((?:token|password|secret|client-key-data|client-certificate-data)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
    re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),  # JWTs
    re.compile(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----", re.S),
)


_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_SECRET_PARAM = re.compile(r"(?i)^(?:.*(?:password|passwd|pwd|secret|token|key|auth|credential|signature|sig)"
                           r".*|pass|x-amz-security-token)$")


def redact_url(url: str) -> str:
    """``url`` as it may be printed: the password of its userinfo and the value of every
    query parameter named like a secret (``password``, ``token``, ``*key*``…) masked as
    ``***``; ``redis://ops:s3cret@h/0?password=x&db=1`` -> ``redis://ops:***@h/0?password=***&db=1``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority_end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            authority_end = min(authority_end, found)
    authority, tail = rest[:authority_end], rest[authority_end:]
    creds, at, host = authority.rpartition("@")
    if at:
        authority = f"{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else f"***@{host}"
    path, question, query = tail.partition("?")
    if question:
        query, hash_mark, fragment = query.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, equals, _ = pair.partition("=")
            pairs.append(f"{name}=***" if equals and _SECRET_PARAM.match(name) else pair)
        tail = f"{path}?{'&'.join(pairs)}{hash_mark}{fragment}"
    return f"{scheme}{sep}{authority}{tail}"


def scrub(text: str, *secrets: str) -> str:
    """``text`` without bearer tokens, JWTs, PEM blocks, ``token: …`` values, URL passwords
    (:func:`redact_url`) or ``secrets``."""
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, "<redacted>")
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "<redacted>", text)
    return text


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 node``, ``3 nodes``: a count and its noun, as people write it."""
    return f"{count} {one if count == 1 else (many or one + 's')}"


def shorten(text: str, limit: int = MAX_DETAIL) -> str:
    """One line of at most ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class Action:
    """What the bot tried to do: ``list daemonsets.apps in namespace kube-system``."""

    verb: str
    resource: str  # "daemonsets.apps", "pods", "/metrics", "/version"
    namespace: str | None = None
    name: str | None = None

    @property
    def object(self) -> str:
        """The object in kubectl's words: ``daemonsets.apps kube-system/foo``."""
        if self.name:
            where = f"{self.namespace}/{self.name}" if self.namespace else self.name
            return f"{self.resource} {where}"
        if self.namespace:
            return f"{self.resource} in namespace {self.namespace}"
        return self.resource

    def __str__(self) -> str:
        return f"{self.verb} {self.object}"


class ClusterError(Exception):
    """Something went wrong talking to a cluster; ``str()`` is the sentence for people."""

    retryable = False

    def __init__(
        self, message: str, *, action: Action | None = None, status: int | None = None, detail: str = "",
    ) -> None:
        super().__init__(scrub(message))
        self.action = action
        self.status = status
        self.detail = scrub(detail)
        """The API server's own message (its ``Status``), when it answered; "" otherwise."""

    @property
    def message(self) -> str:
        return str(self)


class TemporaryClusterError(ClusterError):
    """A retry may help: overload, a server error, a timeout, a dropped connection."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        action: Action | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(message, action=action, status=status, detail=detail)
        self.retry_after = retry_after


class PermanentClusterError(ClusterError):
    """Retrying will not help until someone changes something (config, RBAC, input)."""


class ClusterUnreachable(TemporaryClusterError):
    """No answer from the API server: refused, timed out, name not resolved."""


class ServerBusy(TemporaryClusterError):
    """429 or 5xx: the API server asked us to come back later or failed for a moment."""


class DisruptionRefused(TemporaryClusterError):
    """429 to an eviction: the pod's PodDisruptionBudget allows no disruption now (``detail``
    says which budget and how many healthy pods it needs); it may allow one later."""


class ListExpired(TemporaryClusterError):
    """410 Gone: a continue token or a watch is older than the server's history."""


class Conflict(TemporaryClusterError):
    """409: the object changed under us; re-read it and apply the change again."""


class ClusterConfigError(PermanentClusterError):
    """The kubeconfig or in-cluster configuration cannot be used."""


class UntrustedCluster(PermanentClusterError):
    """The TLS handshake failed: wrong CA data or a server we should not trust."""


class Unauthorized(PermanentClusterError):
    """401: the API server refused the credentials."""


class Forbidden(PermanentClusterError):
    """403: RBAC denies the bot this verb on this resource."""


class AdmissionRefused(PermanentClusterError):
    """403 from an admission plugin, not from the authorizer: Pod Security, a missing
    ServiceAccount, a terminating namespace, a RuntimeClass that does not exist, a quota, a
    webhook. ``admission`` names it; ``detail`` is the server's own message. No RBAC rule helps."""

    def __init__(self, message: str, *, admission: str, action: Action | None = None, status: int | None = None,
                 detail: str = "") -> None:
        super().__init__(message, action=action, status=status, detail=detail)
        self.admission = admission


class NotFound(PermanentClusterError):
    """404: the object (or the API) does not exist."""


class InvalidRequest(PermanentClusterError):
    """400/422 and other answers that say the request itself is wrong."""
