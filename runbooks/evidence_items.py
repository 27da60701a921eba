"""A failed check's evidence as items, kind by kind: what every surface shows of a failure
(issue 61 item 4). Pure, and light: the views of a run (``status``) import it, never the
cluster steps of :mod:`runbooks.daemonset`.

A check carries its evidence as flat keys (:mod:`runbooks.daemonset.evidence` writes them:
``pod``, ``container``, ``reason``, ``message``, ``log``, ``last_state``, ``log_tail``,
``log_errors``, ``log_problem``, ``signatures``). :func:`items` reads them into a list of
items, each a JSON-ready dict with a ``kind`` and, where it has them, the generic fields
``pod``, ``container``, ``reason``, ``message`` (the cluster's own words) and ``lines``:

- ``pull-error``: ``reason`` (one of :data:`PULL_ERRORS`) and ``message``, the registry's words;
- ``log``: ``log`` (``previous``: the crashed container's last run; ``current``: the container
  running now; empty: a pod's log as a check read it), ``lines`` (its bounded tail), ``errors``
  (its error and warning lines), ``reason`` and ``exit_code`` (a previous run's end), ``problem``
  (why it could not be read);
- ``signature``: ``signature``, ``line``, ``meaning``, ``fix`` (a known failure the lines show).

Each kind is one reader in :data:`READERS`, in the order the items are shown: another kind of
evidence (a scheduler's message) is one more reader, and a renderer that does not know its kind
still shows its ``pod``, ``reason``, ``message`` and ``lines``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
Item = dict[str, Any]
Reader = Callable[[Mapping[str, Any]], list[Item]]


def _where(evidence: Mapping[str, Any]) -> Item:
    return {"pod": str(evidence.get("pod") or ""), "container": str(evidence.get("container") or "")}


def _pull_error(evidence: Mapping[str, Any]) -> list[Item]:
    if evidence.get("reason") not in PULL_ERRORS or "message" not in evidence:
        return []
    return [{"kind": "pull-error", **_where(evidence), "reason": str(evidence["reason"]),
             "message": str(evidence.get("message") or "")}]


def _scheduling(evidence: Mapping[str, Any]) -> list[Item]:
    """A pod the scheduler cannot place (:mod:`runbooks.daemonset.unschedulable`): its
    ``FailedScheduling`` message, how often it was said, and the run's change behind it."""
    if evidence.get("reason") != "FailedScheduling" or "message" not in evidence:
        return []
    item: Item = {"kind": "scheduling", **_where(evidence), "node": str(evidence.get("node") or ""),
                  "reason": "FailedScheduling", "message": str(evidence.get("message") or ""),
                  "cause": str(evidence.get("cause") or "")}
    if evidence.get("count"):
        item["count"] = evidence["count"]
    return [item]


def _log(evidence: Mapping[str, Any]) -> list[Item]:
    if not any(key in evidence for key in ("log_tail", "log_errors", "log_problem")):
        return []
    item: Item = {"kind": "log", **_where(evidence), "log": str(evidence.get("log") or ""),
                  "lines": [str(line) for line in evidence.get("log_tail") or []],
                  "errors": [str(line) for line in evidence.get("log_errors") or []]}
    last = evidence.get("last_state")
    if isinstance(last, Mapping):
        item.update(reason=str(last.get("reason") or ""), exit_code=last.get("exit_code"))
    if evidence.get("log_problem"):
        item["problem"] = str(evidence["log_problem"])
    return [item]


def _signatures(evidence: Mapping[str, Any]) -> list[Item]:
    return [{"kind": "signature", "signature": str(s.get("signature") or ""), "line": str(s.get("line") or ""),
             "meaning": str(s.get("meaning") or ""), "fix": str(s.get("fix") or "")}
            for s in evidence.get("signatures") or [] if isinstance(s, Mapping)]


READERS: tuple[Reader, ...] = (_pull_error, _scheduling, _log, _signatures)
"""The kinds of evidence, each read from a check's evidence, in the order they are shown."""


def items(evidence: Mapping[str, Any]) -> list[Item]:
    """The evidence items of one check's ``evidence`` (empty: it carries none)."""
    return [item for read in READERS for item in read(evidence)]
