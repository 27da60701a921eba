"""Digests pinned (policy ``images.pin_digest``): exactly what the canary verified reaches the fleet.

A tag can be pushed again (rebuilt for a CVE, re-synced by a mirror): the canary's pod pulled one
digest of it (``status.containerStatuses[].imageID``), and a promotion that writes the tag lets
every other node pull whatever the tag names by then. With ``pin_digest`` the run keeps, in its
progress (``digests``):

- ``tag``: the image as requested; ``verified``: the digest (``sha256:…``) the canary's pods pulled
  and ran (``imageID``; every canary pod the same one, else the canary fails);
- ``now``: the digest the tag resolves to in its registry when last asked
  (:func:`runbooks.registries.tag_digest`), with ``checked_at``; or ``unknown``, why it could not be
  asked.

The promotion writes ``<repository>@<verified>`` (:func:`promoted_image`), and an approval of the
promotion is refused while ``now`` differs from ``verified`` (:func:`mismatch`): the tag names
other bytes than those verified; the canary is to be made again. ``unknown`` does not refuse: the
pinned digest is what the promotion writes either way, and the request shows it is unknown.

Before its first change the canary saves the digest each node's pod ran (``pre_run_digests``:
node -> container -> ``imageID``); a rollback once the promotion began writes the saved template
back with that digest (:func:`rollback_image`) when every node ran one digest, else the saved
template as it was. A canary's rollback puts the exact saved template back: another template,
even naming the same bytes, would replace the pod on every node.
Pure, except :func:`look_now`, which asks the registry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the thread and `status` read digests without the policy or the registry client
    from runbooks.policy import ImagesPolicy
    from runbooks.registries import Mirror

KEY = "digests"
PRE_RUN = "pre_run_digests"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def digest_in(image_id: str) -> str:
    """``sha256:<hex>`` of an ``imageID`` (``repo@sha256:…``, or a bare digest); '' when none."""
    found = _DIGEST.fullmatch(str(image_id or "").rpartition("@")[2])
    return found.group(0) if found else ""


def without_tag(image: str) -> str:
    """The reference without its tag or digest, as written (``nvcr.io/nvidia/k8s-device-plugin``)."""
    name = image.partition("@")[0]
    head, _, last = name.rpartition("/")
    return (head + "/" if head else "") + last.partition(":")[0]


def pinned(image: str, digest: str) -> str:
    """``<repository>@<digest>``: the reference a runtime pulls exactly ``digest`` by."""
    return f"{without_tag(image)}@{digest}"


def of(progress: Mapping[str, Any]) -> dict[str, Any]:
    return dict(progress.get(KEY) or {})


def promoted_image(image: str, progress: Mapping[str, Any], *, pin: bool) -> str:
    """The image the promotion writes: pinned to the verified digest, or ``image`` (``pin`` off,
    or the canary verified none)."""
    verified = of(progress).get("verified") or ""
    return pinned(image, verified) if pin and verified else image


def mirrors_of(images: ImagesPolicy) -> dict[str, Mirror]:
    """Policy ``images.mirrors`` as the registry client takes them."""
    from runbooks.registries import Mirror

    return {host: Mirror(url=m.url, ca_file=m.ca_file) for host, m in images.mirrors.items()}


def look_now(image: str, mirrors: Mapping[str, Mirror], *, at: str) -> dict[str, Any]:
    """What ``image``'s tag resolves to now: ``{"now": digest, "checked_at": at}`` or
    ``{"now": "", "unknown": why, "checked_at": at}``."""
    from runbooks.registries import DigestUnknown, tag_digest

    try:
        return {"now": tag_digest(image, mirrors=mirrors), "unknown": "", "checked_at": at}
    except DigestUnknown as exc:
        return {"now": "", "unknown": str(exc), "checked_at": at}


def mismatch(progress: Mapping[str, Any]) -> str | None:
    """Why the promotion must be refused: the tag now resolves to another digest than verified."""
    found = of(progress)
    verified, now = found.get("verified") or "", found.get("now") or ""
    if verified and now and verified != now:
        return (f"{found.get('tag')} now resolves to {now}, not to {verified}, the digest the canary verified: "
                "the tag was pushed again since the canary; reject this promotion (the canary is rolled back) and "
                "request the canary again to verify the new build")
    return None


def pre_run(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """node -> container -> ``imageID`` of the pods listed (those without one left out)."""
    out: dict[str, dict[str, str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName") or ""
        ids = {str(s.get("name")): str(s.get("imageID")) for s in (pod.get("status") or {}).get("containerStatuses") or []
               if s.get("name") and digest_in(str(s.get("imageID") or ""))}
        if node and ids and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            out[node] = ids
    return out


def rollback_image(progress: Mapping[str, Any], container: str, saved_image: str) -> tuple[str, str]:
    """``(image, why)``: the saved image pinned to the one digest every node's pod ran before the
    run; the saved image itself (and why) when they ran several, or none was saved."""
    saved = progress.get(PRE_RUN) or {}
    digests = {digest_in(ids.get(container, "")) for ids in saved.values()} - {""}
    if not saved or not digests:
        return saved_image, "no digest was saved before the run"
    if len(digests) > 1:
        return saved_image, (f"the nodes ran {len(digests)} digests of {saved_image} before the run: the tag is "
                             "written back, not one of them")
    return pinned(saved_image, digests.pop()), ""
