"""Turning what the API server answered into our errors, once, with sentences for people.

Pure functions over a status code, a body and headers, so they are tested without a
server; :mod:`runbooks.cluster.adapter` calls them on every failed request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from runbooks.characters import shown
from runbooks.cluster.permissions import rule_for, split
from runbooks.errors import (
    Action,
    AdmissionRefused,
    ClusterError,
    ClusterUnreachable,
    Conflict,
    DisruptionRefused,
    Forbidden,
    InvalidRequest,
    ListExpired,
    NotFound,
    PermanentClusterError,
    ServerBusy,
    Unauthorized,
    UntrustedCluster,
    shorten,
)

RBAC_HOME = "`upgradebot rbac` prints every rule the policy needs; docs/operations.md#rbac explains them"
"""Where the bot's RBAC is kept and explained (named in every 403 sentence)."""
READS = frozenset({"get", "list", "watch"})
_USER = re.compile(r'User "([^"]+)"')
_AUTHORIZER = re.compile(r'(?:^|\s)forbidden: User "')
"""The authorizer's refusal: apiserver's ``forbiddenMessage`` (``User "u" cannot create resource
"pods" in API group "" in the namespace "x"``, ``… cannot get path "/metrics"``) behind
apimachinery's ``NewForbidden`` (``pods is forbidden: ``, ``forbidden: `` for a path)."""
_ADMISSIONS = (  # what each admission plugin writes after "is forbidden: ", and its name
    ("violates PodSecurity ", "Pod Security admission"),
    ("error looking up service account ", "ServiceAccount admission"),
    ("because it is being terminated", "NamespaceLifecycle admission"),
    ("pod rejected: RuntimeClass ", "RuntimeClass admission"),
    ("exceeded quota: ", "ResourceQuota admission"),
)
_WEBHOOK = re.compile(r'admission webhook "([^"]+)" denied the request')


def status_message(body: bytes | str | None) -> str:
    """The ``message`` of a ``metav1.Status`` body, else the body itself, cut short."""
    if not body:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        status: Any = json.loads(text)
    except ValueError:
        return shown(shorten(text))
    if isinstance(status, dict) and status.get("message"):  # an admission webhook's words, any of them
        return shown(shorten(str(status["message"])))
    return shown(shorten(text))


def budget_causes(body: bytes | str | None) -> list[str]:
    """The ``DisruptionBudget`` causes of a ``Status`` (an eviction a budget refused), each
    cut short: ``The disruption budget web needs 2 healthy pods and has 2 currently``."""
    try:
        status: Any = json.loads(body or b"")
    except ValueError:
        return []
    if not isinstance(status, dict) or not isinstance(status.get("details"), dict):
        return []
    causes = status["details"].get("causes") or []
    return [shown(shorten(str(c.get("message") or status.get("message") or ""), 300)) for c in causes
            if isinstance(c, dict) and c.get("reason") == "DisruptionBudget"]


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """``Retry-After`` in seconds (the API server sends seconds, never a date)."""
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None


def who(message: str) -> str:
    """``the bot's ServiceAccount (system:serviceaccount:ns:name)`` or the user the server named."""
    match = _USER.search(message)
    if match is None:
        return "the bot's ServiceAccount"
    user = match.group(1)
    if user.startswith("system:serviceaccount:"):
        return f"the bot's ServiceAccount ({user})"
    return f'the bot\'s identity (user "{user}")'


def missing_rule(action: Action) -> tuple[str, str]:
    """The RBAC rule that would allow ``action``, as YAML flow, and where it belongs: looked up in
    the bot's RBAC table (:data:`runbooks.cluster.permissions.RULES`), which says whether it is a
    cluster-wide grant or one of a namespace, and whether it names the object."""
    if action.resource.startswith("/"):
        return f"{{nonResourceURLs: [{action.resource}], verbs: [{action.verb}]}}", "its ClusterRole"
    group, resource = split(action.resource)
    granted = rule_for(action)
    named = granted.names if granted is not None else ""
    names = f", resourceNames: [{action.name}]" if action.name and named else ""
    rule = f'{{apiGroups: ["{group}"], resources: [{resource}], verbs: [{action.verb}]{names}}}'
    namespaced = granted.scope not in ("cluster", "drain") if granted is not None else action.verb not in READS
    if action.namespace and namespaced:
        return rule, f"a Role of namespace {action.namespace}"
    return rule, "its ClusterRole"


def admission_of(message: str) -> str | None:
    """The admission that wrote a 403's ``message``, or None when the authorizer did (or the
    server said nothing): only the authorizer's refusal is a matter of RBAC."""
    if not message or _AUTHORIZER.search(message):
        return None
    webhook = _WEBHOOK.search(message)
    if webhook:
        return f'admission webhook "{webhook.group(1)}"'
    for words, name in _ADMISSIONS:
        if words in message:
            return name
    return "an admission plugin"


def forbidden_sentence(action: Action, server_message: str) -> str:
    """What was refused, and the rule that is missing: ``… may not patch daemonsets.apps
    kube-system/x: its RBAC lacks {apiGroups: ["apps"], …} in a Role of namespace kube-system …``."""
    if action.resource.startswith("/"):
        what = f"{action.resource} (a non-resource URL)"
    elif action.name:
        what = f"{action.resource} {action.namespace}/{action.name}" if action.namespace else \
            f"{action.resource} {action.name}"
    else:
        what = f"{action.resource} in namespace {action.namespace}" if action.namespace else \
            f"{action.resource} at cluster scope"
    rule, where = missing_rule(action)
    return (f"{who(server_message)} may not {action.verb} {what}: its RBAC lacks the rule {rule} in {where} "
            f"({RBAC_HOME}), or use a kubeconfig context that may")


def error_for_status(
    status: int,
    body: bytes | str | None,
    headers: Mapping[str, str] | None,
    *,
    action: Action,
    context: str,
) -> ClusterError:
    """Our error for an HTTP answer ``status`` to ``action`` on the cluster ``context``."""
    detail = status_message(body)
    said = f" (the server said: {detail})" if detail else ""
    admission = admission_of(detail) if status == 403 else None
    if admission is not None:
        return AdmissionRefused(
            f"cannot {action}: {context}'s {admission} refused it (the server said: {detail})"
            if not admission.startswith("an ") else
            f"cannot {action}: {admission} of {context} refused it (the server said: {detail})",
            admission=admission, action=action, status=status, detail=detail)
    if status == 403:
        return Forbidden(forbidden_sentence(action, detail), action=action, status=status, detail=detail)
    budget = budget_causes(body) if status == 429 else []
    if budget:  # the eviction API: a PodDisruptionBudget, not an overloaded server
        return DisruptionRefused(
            f"cannot {action}: {'; '.join(budget)}", action=action, status=status,
            retry_after=retry_after_seconds(headers), detail="; ".join(budget))
    if status == 429 or status >= 500:
        kind = "is overloaded (429)" if status == 429 else f"failed ({status})"
        return ServerBusy(
            f"cannot {action}: the API server of {context} {kind}{said}: try again later",
            action=action, status=status, retry_after=retry_after_seconds(headers),
        )
    answers: dict[int, tuple[type[ClusterError], str]] = {
        401: (Unauthorized, f"cannot {action}: the API server of {context} refused the bot's credentials (401): "
                            "renew the token or certificate in the kubeconfig"),
        404: (NotFound, f"cannot {action.verb} {action.object}: not found on {context}: check the name "
                        "(and that the cluster serves this API)"),
        409: (Conflict, f"cannot {action}: it changed meanwhile{said}: read it again and retry"),
        410: (ListExpired, f"cannot {action}: the list expired on the server{said}: start the list again"),
    }
    error, sentence = answers.get(
        status, (InvalidRequest, f"cannot {action}: the API server of {context} rejected the request ({status}){said}"))
    return error(sentence, action=action, status=status, detail=detail)


def error_for_transport(exc: BaseException, *, action: Action, context: str, server: str) -> ClusterError:
    """Our error for a request that got no HTTP answer at all."""
    text = shorten(f"{type(exc).__name__}: {exc}", 200)
    if "SSL" in type(exc).__name__ or "CERTIFICATE" in str(exc).upper():
        return UntrustedCluster(
            f"cannot {action}: the TLS handshake with {server} ({context}) failed ({text}): "
            "check certificate-authority-data in the kubeconfig",
            action=action,
        )
    if "timed out" in text.lower() or "timeout" in type(exc).__name__.lower():
        return ClusterUnreachable(
            f"the API server of {context} at {server} did not answer in time to {action} ({text}): "
            "it may be overloaded; try again later",
            action=action,
        )
    return ClusterUnreachable(
        f"cannot reach the API server of {context} at {server} to {action} ({text}): "
        "check that the cluster is up and the kubeconfig points at it",
        action=action,
    )


def is_permanent(error: ClusterError) -> bool:
    return isinstance(error, PermanentClusterError)
