"""The image a Helm release renders for NVIDIA's device plugin, read from the release Secret Helm 3 keeps.

Helm 3's Secret driver (helm/helm v3.16.4, ``pkg/storage/driver/secrets.go``, ``util.go``) stores each
revision of a release in the release's namespace as a Secret of type ``helm.sh/release.v1`` labelled
``owner=helm``, ``name=<release>``, ``status`` and ``version``; its data ``release`` is the release's JSON,
gzipped and base64-encoded (``encodeRelease``). The release in force is the newest revision whose status is
``deployed`` (``pkg/storage/storage.go`` ``Deployed``). The bot lists those Secrets by label (their names
carry the revision, so RBAC cannot pin them by name: docs/security.md), decodes each one page by page and
keeps only what it compares: the revision, the chart and the image the release renders. The release's
values may hold secrets: nothing of them is logged, kept or put in an error.

The image is what NVIDIA's chart renders (``nvidia-device-plugin.fullimage`` in ``templates/_helpers.tpl``,
the same from v0.14.0 to v0.20.0): ``image.repository`` and ``image.tag`` of the chart's values overridden
by the values the user set (the release's ``config``), the tag defaulting to ``v<appVersion>``.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runbooks.cluster.resources import SECRETS

CHART = "nvidia-device-plugin"
GZIP_MAGIC = b"\x1f\x8b\x08"


class ReleaseUnread(Exception):
    """The release could not be read; ``str()`` says why, without any of its contents."""


@dataclass(frozen=True)
class Rendered:
    """What the bot keeps of one revision of a release."""

    revision: int
    chart: str
    """``<name>-<version>`` of the release's chart."""
    image: str | None
    """The plugin's image the revision renders; None for a chart whose values the bot does not know."""


def _value(given: Mapping[str, Any], defaults: Mapping[str, Any], key: str) -> Any:
    return given[key] if given.get(key) is not None else defaults.get(key)


def rendered_image(release: Mapping[str, Any]) -> str | None:
    """The image NVIDIA's chart renders for ``release`` (its JSON), None for another chart."""
    chart = release.get("chart") or {}
    metadata = chart.get("metadata") or {}
    if metadata.get("name") != CHART:
        return None
    defaults = (chart.get("values") or {}).get("image") or {}
    given = (release.get("config") or {}).get("image") or {}
    repository = _value(given, defaults, "repository")
    tag = _value(given, defaults, "tag") or f"v{metadata.get('appVersion', '')}"
    return f"{repository}:{tag}" if repository else None


def decoded(secret: Mapping[str, Any]) -> Rendered:
    """One release Secret as the API serves it (``data.release``: base64 of Helm's base64 of the gzipped
    JSON), reduced to what is compared; :class:`ReleaseUnread` when it holds no release Helm 3 wrote."""
    name = str((secret.get("metadata") or {}).get("name", ""))
    try:
        raw = base64.b64decode(base64.b64decode(str((secret.get("data") or {})["release"]), validate=True),
                               validate=True)
        if raw[:3] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        release = json.loads(raw)
        metadata = (release.get("chart") or {}).get("metadata") or {}
        return Rendered(revision=int(release.get("version") or 0),
                        chart=f"{metadata.get('name', '')}-{metadata.get('version', '')}",
                        image=rendered_image(release))
    except (KeyError, TypeError, ValueError, AttributeError, OSError, EOFError, binascii.Error, zlib.error):
        raise ReleaseUnread(f"Secret {name} does not hold a release as Helm 3 stores it") from None


def deployed(cluster: Any, *, release: str, namespace: str) -> Rendered:
    """The newest deployed revision of ``release`` in ``namespace`` (a ``ClusterError`` when the Secrets
    cannot be listed; :class:`ReleaseUnread` when none is deployed or it cannot be decoded)."""
    selector = f"owner=helm,name={release},status=deployed"
    found: list[Rendered] = cluster.list_objects(SECRETS, namespace=namespace, label_selector=selector,
                                                 project=decoded)
    if not found:
        raise ReleaseUnread(f"no deployed revision of it in namespace {namespace}")
    return max(found, key=lambda r: r.revision)
