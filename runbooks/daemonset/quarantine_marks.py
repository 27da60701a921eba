"""The marks a quarantine leaves on the cluster, and the pod template's affinity term: pure data, no I/O.

A node is quarantined from one plugin DaemonSet (``quarantine <target> node=<n>``) by three marks
that together keep the plugin off it and say who put them there:

- the node label ``<namespace>.quarantine.upgradebot.io/<daemonset>`` (the bot's label domain,
  ``upgradebot.io``, as the migration canary's ``upgradebot.io/canary``), valued with the id of
  the run that set it;
- the node annotation of the same key: ``{"run": <id>, "cordoned": <bool>}``, whether that run
  cordoned the node (``release`` uncordons only then);
- in the DaemonSet's pod template a required node-affinity expression ``<key> DoesNotExist``,
  added to every ``nodeSelectorTerms`` entry (terms are ORed, expressions ANDed: ``(T1 or T2) and
  q`` is ``(T1 and q) or (T2 and q)``, so what the owners wrote keeps its meaning), and the
  DaemonSet annotation :data:`SAVED` holding the ``updateStrategy`` and template ``affinity`` as
  they were before the first quarantine of it, which the last ``release`` writes back exactly.

The DaemonSet controller then deletes the plugin's pod from the labelled node only
(``NodeShouldRunDaemonPod``: a node that no longer matches the required affinity should neither
run nor keep running the pod), and the scheduler places none there again.
"""

from __future__ import annotations

import copy
import json
from typing import Any

QUARANTINE_DOMAIN = "quarantine.upgradebot.io"
SAVED = f"{QUARANTINE_DOMAIN}/saved"
"""The DaemonSet annotation: ``{"run", "updateStrategy", "affinity"}`` as they were before its first quarantine."""
ON_DELETE = {"type": "OnDelete"}
LABEL_NAME_MAX = 63


class BadMark(ValueError):
    """The target's name cannot make a label key (longer than a label name may be)."""


def label_key(namespace: str, name: str) -> str:
    """``kube-system.quarantine.upgradebot.io/nvidia-device-plugin-daemonset``: one key per target."""
    if len(name) > LABEL_NAME_MAX:
        raise BadMark(f"the DaemonSet name {name!r} is longer than a label name may be ({LABEL_NAME_MAX} "
                      "characters): a node cannot be quarantined from it by a label")
    return f"{namespace}.{QUARANTINE_DOMAIN}/{name}"


def expression(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "DoesNotExist"}


def _terms(affinity: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    required = (((affinity or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) and terms else None


def has_term(affinity: dict[str, Any] | None, key: str) -> bool:
    """Every term of the required node affinity carries ``<key> DoesNotExist``."""
    terms = _terms(affinity)
    return terms is not None and all(expression(key) in (t.get("matchExpressions") or []) for t in terms)


def with_term(affinity: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """``affinity`` with ``<key> DoesNotExist`` in every required node-selector term (a term of
    its own when there is none); every other part left as it is."""
    out = copy.deepcopy(affinity) if affinity else {}
    node_affinity = out.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        required["nodeSelectorTerms"] = [{"matchExpressions": [expression(key)]}]
        return out
    for term in terms:
        found = term.setdefault("matchExpressions", [])
        if expression(key) not in found:
            found.append(expression(key))
    return out


def without_term(affinity: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """``affinity`` with ``<key> DoesNotExist`` taken out of every term, and what only held it
    (a term, the required part, ``nodeAffinity``, the affinity itself) gone: the inverse of
    :func:`with_term` when someone changed the template meanwhile."""
    if not affinity:
        return affinity
    out = copy.deepcopy(affinity)
    node_affinity = out.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        return out
    kept = []
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e != expression(key)]
        if exprs:
            term["matchExpressions"] = exprs
        else:
            term.pop("matchExpressions", None)
        if term:
            kept.append(term)
    if kept:
        required["nodeSelectorTerms"] = kept
        return out
    node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if not node_affinity:
        out.pop("nodeAffinity", None)
    return out or None


def saved_of(ds: dict[str, Any]) -> dict[str, Any] | None:
    """The DaemonSet's :data:`SAVED` annotation, parsed; None when it has none (or it is not ours)."""
    text = ((ds.get("metadata") or {}).get("annotations") or {}).get(SAVED)
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "updateStrategy" in value else None


def node_mark(node: dict[str, Any], key: str) -> tuple[str | None, dict[str, Any] | None]:
    """(the quarantine label's value, the parsed annotation) of ``node``; None for what is absent."""
    meta = node.get("metadata") or {}
    label = (meta.get("labels") or {}).get(key)
    text = (meta.get("annotations") or {}).get(key)
    try:
        note = json.loads(text) if text else None
    except ValueError:
        note = None
    return label, note if isinstance(note, dict) else None


def escape(key: str) -> str:
    """A JSON Pointer token (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


def quarantined_sentence(namespace: str, name: str) -> str:
    """Why an upgrade of a DaemonSet with a quarantined node is refused, and what to do."""
    key = f"{namespace}.{QUARANTINE_DOMAIN}/{name}"
    return (f"{namespace}/{name} has a quarantined node (`kubectl get nodes -l {key}`): it stays OnDelete until the "
            "last `release`, so a promotion would roll nothing; release the node first")
