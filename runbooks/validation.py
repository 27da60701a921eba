"""Checks of what people type, before anything is stored or sent to a cluster.

Each function returns the value (stripped) or raises ``ValueError`` whose message says
what is wrong and gives an example; front ends add the verb's usage line. Kubernetes'
own rules: names are DNS-1123 labels or subdomains, image references follow the
distribution grammar (``[registry[:port]/]repository[:tag][@sha256:<64 hex>]``, ASCII only,
:data:`runbooks.image_names.IMAGE_REFERENCE`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from runbooks.image_names import IMAGE_REFERENCE, parse
from runbooks.policy import DNS1123_LABEL, DNS1123_SUBDOMAIN, Target

MAX_NAME = 255


def _kubernetes_name(value: str, what: str, pattern: re.Pattern[str], rule: str) -> str:
    text = value.strip()
    if not pattern.fullmatch(text):
        raise ValueError(f"{what} {value!r} is not a valid Kubernetes name: {rule}")
    return text


def dns1123_label(value: str, what: str = "name") -> str:
    """A DNS-1123 label (namespaces, containers): at most 63 of ``a-z``, ``0-9``, ``-``."""
    return _kubernetes_name(value, what, DNS1123_LABEL, "use at most 63 lower-case letters, digits and '-', "
                            "starting and ending with a letter or digit (e.g. kube-system)")


def dns1123_subdomain(value: str, what: str = "name") -> str:
    """A DNS-1123 subdomain (most object names): labels joined by dots, at most 253 characters."""
    return _kubernetes_name(value, what, DNS1123_SUBDOMAIN, "use lower-case letters, digits, '-' and '.', "
                            "at most 253 characters, starting and ending with a letter or digit "
                            "(e.g. nvidia-device-plugin-daemonset)")


def node_name(value: str) -> str:
    """A node name (a DNS-1123 subdomain, as the API server requires)."""
    return dns1123_subdomain(value, "node")


def node_names(value: str) -> str:
    """``node=a,b``: one node name or several joined by commas (one canary node per hardware
    class), each a node name, none twice; returned joined as given."""
    names = value.split(",")
    if len(names) > 1 and any(not n for n in names):
        raise ValueError(f"node={value!r} has an empty name: join node names with single commas")
    if len(set(names)) != len(names):
        raise ValueError(f"node={value!r} names a node twice")
    return ",".join(node_name(n) for n in names)


def container_name(value: str) -> str:
    return dns1123_label(value, "container")


def image_reference(value: str, *, allow_latest: bool = True) -> str:
    """``registry/repository:tag`` or ``…@sha256:<digest>``; a tag or a digest is required,
    since an untagged image means ``:latest`` and cannot be rolled back to reliably; with
    ``allow_latest`` false (the policy's ``images.allow_latest``), an explicit ``:latest`` tag
    without a digest is refused too."""
    text = value.strip()
    match = IMAGE_REFERENCE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"image {value!r} is not a valid image reference: use registry/repository:tag or "
            "registry/repository@sha256:<64 hex digits> (e.g. nvcr.io/nvidia/k8s-device-plugin:v0.17.0); "
            "repositories are lower case"
        )
    domain = match.group("domain") or ""
    if domain and not any(c in domain for c in ".:[") and domain != "localhost" and domain != domain.lower():
        raise ValueError(f"image {value!r} is not a valid image reference: repository names are lower case")
    if len(match.group("name")) > MAX_NAME:
        raise ValueError(f"image {value!r} is not a valid image reference: the name is longer than {MAX_NAME} characters")
    if not match.group("tag") and not match.group("digest"):
        raise ValueError(
            f"image {value!r} has no tag or digest: name the version, e.g. {text}:v0.17.0 "
            "(an implicit :latest cannot be rolled back to reliably)"
        )
    name = parse(text)  # the one reading of a reference every comparison of images uses
    if not allow_latest and name.tag == "latest" and not name.digest:
        raise ValueError(
            f"image {value!r} is tagged latest, which names whatever was pushed last: name the version "
            "(e.g. :v0.17.0) or a digest; the policy's images.allow_latest: true accepts it"
        )
    return text


def target(value: str, known: Sequence[str] | None = None) -> Target:
    """``namespace/daemonset``; with ``known`` (the policy's targets, when it lists any) also
    one of those."""
    parsed = Target.parse(value)
    if known and str(parsed) not in known:
        raise ValueError(f"{parsed} is not a target of the policy: use one of {', '.join(known)}")
    return parsed
