"""Kubernetes object names as the API server requires them, for the policy's models.

:data:`Namespace` is a DNS-1123 label (at most 63 lower-case letters, digits and '-',
starting and ending with a letter or digit), the one rule for every namespace the policy
names (a target's, ``migrations.namespaces``, the smoke test's); :data:`ObjectName` a
DNS-1123 subdomain (most object names). Used as field types, a refused value is reported
under its key (``migrations.namespaces.1``) with one sentence saying what a name is.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def namespace_name(value: str) -> str:
    """``value`` if it is a namespace name (a DNS-1123 label), else ``ValueError`` saying what one is."""
    if not DNS1123_LABEL.fullmatch(value):
        raise ValueError(f"{value!r} is not a namespace name: at most 63 lower-case letters, digits and '-', "
                         "starting and ending with a letter or digit (e.g. kube-system)")
    return value


def object_name(value: str) -> str:
    """``value`` if it is an object name (a DNS-1123 subdomain), else ``ValueError``."""
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not an object name: at most 253 lower-case letters, digits, '-' and '.', "
                         "starting and ending with a letter or digit (e.g. nvidia-device-plugin-daemonset)")
    return value


Namespace = Annotated[str, AfterValidator(namespace_name)]
ObjectName = Annotated[str, AfterValidator(object_name)]


def owner_name(value: str) -> str:
    """A policy target's ``owner``: ``helm`` or ``clusterpolicy/<name>``, else ``ValueError``."""
    kind, sep, name = value.partition("/")
    if value != "helm" and (kind != "clusterpolicy" or not sep or not DNS1123_SUBDOMAIN.fullmatch(name)):
        raise ValueError(f"{value!r} is not an owner: use helm or clusterpolicy/<name> (e.g. clusterpolicy/cluster-policy)")
    return value


OwnerName = Annotated[str, AfterValidator(owner_name)]
