"""What an image tag resolves to now, asked of its registry (the OCI distribution API).

``HEAD /v2/<path>/manifests/<tag>`` answers the digest of the manifest (or index) the tag names
in ``Docker-Content-Digest``: the digest a container runtime would pull now (containerd's
resolver asks the same, remotes/docker/resolver.go). An anonymous pull token is fetched when the
registry asks for one (``401`` with ``WWW-Authenticate: Bearer realm=…,service=…,scope=…``, the
distribution token flow); no credential is read or sent otherwise, and the token never leaves
this module.

A registry may be reached through a mirror (policy ``images.mirrors``: the registry host ->
``{url, ca_file}``), asked as containerd asks a mirror, with the registry in the ``ns`` query
parameter. A registry that cannot be asked, or answers without a digest, raises
:class:`DigestUnknown` with the reason: the caller says ``unknown``, never a match.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from runbooks.image_names import parse

ACCEPT = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json",
))
"""The manifest media types containerd accepts for a tag (an index first: its digest is the repo digest)."""
_DOCKER_HUB = "registry-1.docker.io"
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class DigestUnknown(Exception):
    """The tag's digest could not be learnt; the message says why (one line, no secret)."""


@dataclass(frozen=True)
class Mirror:
    """Where a registry is asked instead of itself: its base URL and the CA bundle that signs it."""

    url: str
    ca_file: str | None = None


def _context(ca_file: str | None) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()


def _token(challenge: str, *, context: ssl.SSLContext, timeout: float) -> str:
    """An anonymous pull token for a ``Bearer`` challenge."""
    fields = dict(_CHALLENGE.findall(challenge))
    realm = fields.pop("realm", "")
    if not challenge.lower().startswith("bearer") or not realm.startswith("https://"):
        raise DigestUnknown("the registry asks for credentials upgradebot does not have")
    url = realm + "?" + urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as answer:
            body = json.loads(answer.read(65536) or b"{}")
    except (OSError, ValueError) as exc:
        raise DigestUnknown(f"no pull token from {urllib.parse.urlsplit(realm).netloc}: {_why(exc)}") from None
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    if not token:
        raise DigestUnknown(f"no pull token from {urllib.parse.urlsplit(realm).netloc}")
    return str(token)


def _why(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def tag_digest(image: str, *, mirrors: Mapping[str, Mirror] | None = None, timeout: float = 10.0) -> str:
    """``sha256:<hex>``, the digest ``image``'s tag resolves to in its registry now."""
    name = parse(image)
    if not name.tag:
        raise DigestUnknown(f"{image} names no tag")
    mirror = (mirrors or {}).get(name.registry)
    base = mirror.url.rstrip("/") if mirror else f"https://{_DOCKER_HUB if name.registry == 'docker.io' else name.registry}"
    url = f"{base}/v2/{name.path}/manifests/{urllib.parse.quote(name.tag)}"
    if mirror:
        url += "?" + urllib.parse.urlencode({"ns": name.registry})
    context = _context(mirror.ca_file if mirror else None)
    where = urllib.parse.urlsplit(base).netloc
    headers = {"Accept": ACCEPT}
    for attempt in range(2):
        request = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as answer:
                digest = answer.headers.get("Docker-Content-Digest") or ""
        except urllib.error.HTTPError as exc:
            challenge = exc.headers.get("WWW-Authenticate") or ""
            if exc.code == 401 and attempt == 0 and challenge:
                realm = urllib.parse.urlsplit(dict(_CHALLENGE.findall(challenge)).get("realm", "")).netloc
                trust = context if realm == where else _context(None)  # a token service elsewhere: the system's CAs
                headers = {**headers, "Authorization": f"Bearer {_token(challenge, context=trust, timeout=timeout)}"}
                continue
            if exc.code == 404:
                raise DigestUnknown(f"{where} has no tag {name.tag} in {name.path} now") from None
            raise DigestUnknown(f"{where} answered HTTP {exc.code} for {name.path}:{name.tag}") from None
        except (OSError, ValueError) as exc:
            raise DigestUnknown(f"cannot reach {where}: {_why(exc)}") from None
        if not _DIGEST.match(digest):
            raise DigestUnknown(f"{where} answered no Docker-Content-Digest for {name.path}:{name.tag}")
        return digest
    raise DigestUnknown(f"{where} refused the pull token for {name.path}")
