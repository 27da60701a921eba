"""Image references in one spelling, so that every comparison of images agrees: the
compatibility matrix's rows, the policy's image rules (``images.allow_latest``), the run a
stage went through before (``targets[].stages``).

:func:`parse` reads a reference (the distribution grammar, :data:`IMAGE_REFERENCE`) into an
:class:`ImageName`; its ``str`` (:func:`normalise`) is the canonical spelling, equal for two
spellings a container runtime pulls from the same repository (containerd and Docker follow
github.com/distribution/reference, ``normalize.go``):

- the registry host in lower case (host names are case-insensitive): ``NVCR.IO`` is ``nvcr.io``;
- the https default port dropped (registries are spoken to over https): ``nvcr.io:443`` is
  ``nvcr.io``. Any other explicit port is kept: ``registry.local:5000`` is another endpoint
  than ``registry.local`` (a mirror, another registry), so another repository;
- Docker Hub: no registry, ``docker.io``, ``index.docker.io`` and ``registry-1.docker.io``
  are ``docker.io``, and a one-component name there is under ``library/`` (``busybox`` is
  ``docker.io/library/busybox``). The first component is a registry when it has a ``.`` or
  a ``:``, is ``localhost`` or has a capital letter, as distribution's ``splitDockerDomain`` decides;
- the tag kept as written (tags are case-sensitive), the digest kept beside it.

:func:`release` splits a tag into its version (the ``[v]MAJOR.MINOR.PATCH`` part) and the
suffixes after it (``v0.17.0-ubi9-local``: ``v0.17.0`` with ``ubi9`` and ``local``);
which suffixes name published builds of the release is the compatibility matrix's to say,
row by row (``ubi9`` for v0.17: its Makefile; ``local``, or kubesim's old ``driver550``, none). :func:`same_image` is the stricter question, whether two
references pull the same content. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
IMAGE_REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$",
    re.ASCII,  # the grammar's \w is [A-Za-z0-9_]: no other script's digits or letters
)
"""``[registry[:port]/]repository[:tag][@sha256:<64 hex>]``, ASCII only."""

DOCKER_HUB = "docker.io"
DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
"""The host names Docker Hub is pulled from under (distribution's ``legacyDefaultDomain`` and
``defaultDomain``, and the endpoint both resolve to)."""
HTTPS_PORT = "443"
_HOST_PORT = re.compile(r"(?P<host>\[[0-9a-f:]+\]|[^:]+)(?::(?P<port>[0-9]+))?")
_RELEASE = re.compile(r"(?P<version>v?\d+\.\d+\.\d+)(?P<suffixes>(?:-[\w.]+)*)", re.ASCII)


@dataclass(frozen=True)
class ImageName:
    """A reference in its canonical parts: ``registry`` (``docker.io``, ``nvcr.io``,
    ``registry.local:5000``), ``path`` (``library/busybox``), ``tag`` and ``digest`` ('' when
    absent)."""

    registry: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        """``registry/path``: what the compatibility matrix's rows list."""
        return f"{self.registry}/{self.path}"

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def registry_host(domain: str) -> str:
    """The canonical registry of a reference's first component: lower case, no ``:443``,
    Docker Hub's aliases as ``docker.io``."""
    lowered = domain.lower()
    found = _HOST_PORT.fullmatch(lowered)
    if found is None:
        return lowered
    host, port = found.group("host"), found.group("port")
    if host in DOCKER_HUB_ALIASES:
        host = DOCKER_HUB
    if port is not None and port.isdigit():
        port = str(int(port))  # a port is a number: 0443 is dialled as 443
    return host if port in (None, HTTPS_PORT) else f"{host}:{port}"


def _is_domain(first: str) -> bool:
    return "." in first or ":" in first or first.startswith("[") or first == "localhost" or first != first.lower()


def parse(image: str) -> ImageName:
    """The canonical parts of ``image`` (surrounding blanks ignored); ``ValueError`` when it is
    not an image reference (a repository alone, without tag or digest, is one)."""
    match = IMAGE_REFERENCE.fullmatch(image.strip())
    if match is None:
        raise ValueError(f"{image!r} is not an image reference")
    name = match.group("name")
    first, sep, rest = name.partition("/")
    if sep and _is_domain(first):
        registry, path = registry_host(first), rest
    else:
        registry, path = DOCKER_HUB, name
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return ImageName(registry=registry, path=path, tag=match.group("tag") or "", digest=match.group("digest") or "")


def normalise(image: str) -> str:
    """The canonical spelling of ``image`` (see the module's docstring); ``ValueError`` when it
    is not an image reference."""
    return str(parse(image))


def repository(image: str) -> str:
    """The canonical ``registry/path`` of ``image`` (a repository alone is accepted)."""
    return parse(image).repository


def release(tag: str) -> tuple[str, tuple[str, ...]] | None:
    """``("v0.17.0", ("ubi9", "local"))`` of ``v0.17.0-ubi9-local``: the version a tag
    names and the ``-``-separated suffixes after it; None for a tag with no
    ``[v]MAJOR.MINOR.PATCH`` at its start (``latest``, ``devel``, ``v0.17``)."""
    found = _RELEASE.fullmatch(tag)
    if found is None:
        return None
    suffixes = found.group("suffixes")
    return found.group("version"), tuple(suffixes[1:].split("-")) if suffixes else ()


def same_image(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` pull the same content: the same canonical repository and, when
    both carry a digest, the same digest (a tag beside a digest is not what is pulled); else
    the same tag and digest. ``v0.17.0`` and ``v0.17.0-ubi9`` are two tags, so two images here.
    Anything that is not a reference (``""``: a run that changes no image) is compared as written."""
    try:
        left, right = parse(a), parse(b)
    except ValueError:
        return a == b
    if left.repository != right.repository:
        return False
    if left.digest and right.digest:
        return left.digest == right.digest
    return (left.tag, left.digest) == (right.tag, right.digest)
