"""Who is asking, and may they: ServiceAccount tokens and the RBAC authorizer.

As the API server does it:

- **Authentication.** The kubeconfig's admin token is ``system:masters`` (every right).
  ``POST …/serviceaccounts/<name>/token`` (``kubectl create token``) mints a JWT for a
  ServiceAccount that exists; a request bearing it acts as
  ``system:serviceaccount:<namespace>:<name>``, in the groups ``system:serviceaccounts``,
  ``system:serviceaccounts:<namespace>`` and ``system:authenticated``, for as long as the
  account exists. Any other token is 401.
- **Authorization.** A request is allowed when a rule allows it: the bootstrap roles
  every authenticated user has (discovery, ``/healthz``, ``/version``, ``/openapi``,
  creating SelfSubjectAccessReviews), the ClusterRoles of the ClusterRoleBindings naming
  the user (or one of their groups), and in a namespace the Roles and ClusterRoles of
  that namespace's RoleBindings. A rule matches on verbs, API groups, resources
  (``resource/subresource``, ``*/subresource``, ``*``), ``resourceNames`` and
  ``nonResourceURLs`` (exact, or a prefix ending in ``*``). Refusals are the API
  server's 403 with its exact message (:func:`forbidden`).
- **SelfSubjectAccessReview** (``kubectl auth can-i``) answers the same question.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubesim import errors, protowire
from kubesim.store import Store

RBAC = "rbac.authorization.k8s.io"
AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
AUTHENTICATED = "system:authenticated"
DEFAULT_TOKEN_SECONDS = 3600


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``user.Info``'s extra values (a ServiceAccount token's credential id)."""

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups


def service_account(namespace: str, name: str) -> User:
    return User(f"system:serviceaccount:{namespace}:{name}",
                ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED))


@dataclass(frozen=True)
class Attributes:
    """What a request asks: a verb on a resource (group, resource, subresource, namespace,
    name), or on a non-resource ``path``."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


BOOTSTRAP: tuple[dict[str, Any], ...] = (
    # system:discovery, system:public-info-viewer
    {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/readyz",
                                          "/version", "/version/", "/openapi", "/openapi/*"]},
    # system:basic-user
    {"verbs": ["create"], "apiGroups": [AUTHORIZATION], "resources": ["selfsubjectaccessreviews",
                                                                       "selfsubjectrulesreviews"]},
    {"verbs": ["create"], "apiGroups": [AUTHENTICATION], "resources": ["selfsubjectreviews"]},
)
"""What every authenticated user may do, as the API server's bootstrap ClusterRoles say."""
BOOTSTRAP_BY_ROLE: tuple[tuple[str, dict[str, Any]], ...] = (
    ("system:discovery", BOOTSTRAP[0]), ("system:basic-user", BOOTSTRAP[1]), ("system:basic-user", BOOTSTRAP[2]))
"""The bootstrap rules with the ClusterRole (and its ClusterRoleBinding of the same name, to
``system:authenticated``) that holds each (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go:
``system:discovery`` holds every one of these URLs)."""


class Tokens:
    """ServiceAccount tokens minted by TokenRequest (kept for the life of the simulation)."""

    def __init__(self) -> None:
        self._accounts: dict[str, tuple[str, str]] = {}
        self._jti: dict[str, str] = {}

    def mint(self, namespace: str, name: str, now: dt.datetime, seconds: int) -> tuple[str, dt.datetime]:
        expires = now + dt.timedelta(seconds=seconds)

        def part(data: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

        claims = {"iss": "https://kubernetes.default.svc.cluster.local", "sub": service_account(namespace, name).name,
                  "exp": int(expires.timestamp()), "iat": int(now.timestamp()), "jti": secrets.token_hex(8)}
        token = f"{part({'alg': 'RS256', 'kid': 'kubesim'})}.{part(claims)}.{secrets.token_urlsafe(32)}"
        self._accounts[token] = (namespace, name)
        self._jti[token] = str(claims["jti"])
        return token, expires

    def user(self, token: str, store: Store) -> User | None:
        """The ServiceAccount a token was minted for, while the account exists."""
        found = self._accounts.get(token)
        if found is None:
            return None
        namespace, name = found
        if store.get(("", "serviceaccounts"), namespace, name) is None:
            return None
        user = service_account(namespace, name)
        if store.surface.minor >= 30:  # ServiceAccountTokenJTI (beta from 1.30): the token's id in extra
            user = User(user.name, user.groups, (("authentication.kubernetes.io/credential-id",
                                                  (f"JTI={self._jti[token]}",)),))
        return user


def _bound(subjects: Any, user: User, default_namespace: str) -> dict[str, Any] | None:
    """The first of a binding's subjects that applies to ``user`` (``appliesTo``), else None."""
    for subject in subjects if isinstance(subjects, list) else []:
        if not isinstance(subject, dict):
            continue
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "ServiceAccount":
            namespace = subject.get("namespace") or default_namespace
            if user.name == f"system:serviceaccount:{namespace}:{name}":
                return subject
        elif (kind == "User" and name == user.name) or (kind == "Group" and name in user.groups):
            return subject
    return None


def _describe_subject(subject: dict[str, Any], binding_namespace: str) -> str:
    """``describeSubject`` (kubernetes pkg/registry/rbac/validation/rule.go)."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _describe(binding: dict[str, Any], subject: dict[str, Any]) -> str:
    """The clusterRoleBindingDescriber's and roleBindingDescriber's ``String()``."""
    m, ref = binding.get("metadata") or {}, binding.get("roleRef") or {}
    namespace = m.get("namespace") or ""
    if binding.get("kind") == "RoleBinding" or namespace:
        return (f'RoleBinding "{m.get("name")}/{namespace}" of {ref.get("kind")} "{ref.get("name")}" to '
                f"{_describe_subject(subject, namespace)}")
    return (f'ClusterRoleBinding "{m.get("name")}" of {ref.get("kind")} "{ref.get("name")}" to '
            f"{_describe_subject(subject, '')}")


def rule_allows(rule: dict[str, Any], ask: Attributes) -> bool:
    """Whether one PolicyRule allows the request, as RBAC's ``RuleAllows``."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and ask.verb not in verbs:
        return False
    if ask.path:
        return any(url == "*" or url == ask.path or (url.endswith("*") and ask.path.startswith(url[:-1]))
                   for url in rule.get("nonResourceURLs") or [])
    groups = rule.get("apiGroups") or []
    if "*" not in groups and ask.group not in groups:
        return False
    combined = f"{ask.resource}/{ask.subresource}" if ask.subresource else ask.resource
    if not any(r == "*" or r == combined or (ask.subresource and r == f"*/{ask.subresource}")
               for r in rule.get("resources") or []):
        return False
    names = rule.get("resourceNames") or []
    return not names or (bool(ask.name) and ask.name in names)


class Authorizer:
    """RBAC on the objects in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def allows(self, user: User, ask: Attributes) -> bool:
        return self.decide(user, ask)[0]

    def decide(self, user: User, ask: Attributes) -> tuple[bool, str]:
        """(allowed, the reason) as the authorizer chain says it: ``system:masters`` by the
        privileged-group authorizer (no reason), else RBAC's ``RBAC: allowed by <binding>``
        (plugin/pkg/auth/authorizer/rbac/rbac.go ``authorizingVisitor``), or a refusal whose
        reason lists the roles that could not be found."""
        if user.admin:
            return True, ""
        missing: list[str] = []
        for source, rule in self.sources(user, ask.namespace, missing):
            if rule_allows(rule, ask):
                return True, f"RBAC: allowed by {source}"
        if not missing:
            return False, ""
        return False, "RBAC: " + (missing[0] if len(missing) == 1 else "[" + ", ".join(missing) + "]")

    def rules(self, user: User, namespace: str) -> Iterator[dict[str, Any]]:
        for _, rule in self.sources(user, namespace, []):
            yield rule

    def sources(self, user: User, namespace: str, missing: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``VisitRulesFor``: (the binding described, a rule) for every rule bound to ``user``:
        the bootstrap bindings, the ClusterRoleBindings, then the namespace's RoleBindings."""
        if AUTHENTICATED in user.groups:
            for role, rule in BOOTSTRAP_BY_ROLE:
                yield f'ClusterRoleBinding "{role}" of ClusterRole "{role}" to Group "{AUTHENTICATED}"', rule
        for binding in self.store.list((RBAC, "clusterrolebindings")):
            subject = _bound(binding.get("subjects"), user, "")
            if subject is not None:
                described = _describe(binding, subject)
                for rule in self._role_rules(binding.get("roleRef") or {}, "", missing):
                    yield described, rule
        if namespace:
            for binding in self.store.list((RBAC, "rolebindings"), namespace):
                subject = _bound(binding.get("subjects"), user, namespace)
                if subject is not None:
                    described = _describe(binding, subject)
                    for rule in self._role_rules(binding.get("roleRef") or {}, namespace, missing):
                        yield described, rule

    def _role_rules(self, ref: dict[str, Any], namespace: str, missing: list[str]) -> list[dict[str, Any]]:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self.store.get((RBAC, "clusterroles"), "", name)
        elif kind == "Role" and namespace:
            role = self.store.get((RBAC, "roles"), namespace, name)
        else:
            role = None
        if role is None and kind in ("ClusterRole", "Role"):
            missing.append(f'{str(kind).lower()}.{RBAC} "{name}" not found')
        rules = (role or {}).get("rules")
        return [r for r in rules if isinstance(r, dict)] if isinstance(rules, list) else []


def forbidden(user: User, ask: Attributes) -> errors.ApiError:
    """The API server's 403 for ``ask``, word for word."""
    if ask.path:
        return errors.ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {ask.verb} path "{ask.path}"', {})
    resource = f"{ask.resource}/{ask.subresource}" if ask.subresource else ask.resource
    qualified = f"{ask.resource}.{ask.group}" if ask.group else ask.resource
    head = f'{qualified} "{ask.name}" is forbidden' if ask.name else f"{qualified} is forbidden"
    scope = f'in the namespace "{ask.namespace}"' if ask.namespace else "at the cluster scope"
    details: dict[str, Any] = {"kind": ask.resource}
    if ask.name:
        details["name"] = ask.name
    if ask.group:
        details["group"] = ask.group
    return errors.ApiError(
        403, "Forbidden",
        f'{head}: User "{user.name}" cannot {ask.verb} resource "{resource}" in API group "{ask.group}" {scope}',
        details)


# ---------------------------------------------------------------------- the two create-only kinds
def review_spec(body: bytes, content_type: str) -> dict[str, Any]:
    """A SelfSubjectAccessReview's ``spec``, from JSON or from kubectl's protobuf."""
    if content_type.startswith(protowire.PROTOBUF):
        try:
            review = protowire.unwrap(body)
            spec = protowire.message(review, 2)
            resource, non_resource = protowire.message(spec, 1), protowire.message(spec, 2)
        except protowire.WireError as exc:
            raise errors.bad_request(f"the request body is not a valid SelfSubjectAccessReview: {exc}") from exc
        if non_resource:
            return {"nonResourceAttributes": {"path": protowire.text(non_resource, 1),
                                              "verb": protowire.text(non_resource, 2)}}
        keys = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        return {"resourceAttributes": {k: protowire.text(resource, n) for n, k in enumerate(keys, 1)
                                       if protowire.text(resource, n)}}
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise errors.bad_request(f"the request body is not valid JSON: {exc}") from exc
    found = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(found, dict):
        raise errors.bad_request("a SelfSubjectAccessReview needs a spec")
    return found


def review(authorizer: Authorizer, user: User, spec: dict[str, Any]) -> dict[str, Any]:
    """The answered SelfSubjectAccessReview."""
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if isinstance(non_resource, dict):
        ask = Attributes(verb=str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or ""))
    elif isinstance(resource, dict):
        ask = Attributes(verb=str(resource.get("verb") or ""), group=str(resource.get("group") or ""),
                         resource=str(resource.get("resource") or ""),
                         subresource=str(resource.get("subresource") or ""),
                         namespace=str(resource.get("namespace") or ""), name=str(resource.get("name") or ""))
    else:
        raise errors.ApiError(422, "Invalid", "SelfSubjectAccessReview.authorization.k8s.io is invalid: "
                              "spec: Invalid value: exactly one of nonResourceAttributes or resourceAttributes "
                              "must be specified", {"kind": "SelfSubjectAccessReview", "group": AUTHORIZATION})
    allowed, reason = authorizer.decide(user, ask)
    status: dict[str, Any] = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {"kind": "SelfSubjectAccessReview", "apiVersion": f"{AUTHORIZATION}/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}


CLUSTER_ADMIN: tuple[dict[str, Any], ...] = (
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
)
"""The cluster-admin ClusterRole, bound to ``system:masters``."""


def rules_review_namespace(body: bytes, content_type: str) -> str:
    """A SelfSubjectRulesReview's ``spec.namespace``, from JSON or from kubectl's protobuf."""
    try:
        if content_type.startswith(protowire.PROTOBUF):
            return protowire.text(protowire.message(protowire.unwrap(body), 2), 1)
        data = json.loads(body or b"{}")
        return str(((data.get("spec") or {}).get("namespace")) or "")
    except (ValueError, TypeError, AttributeError, protowire.WireError) as exc:
        raise errors.bad_request(f"the request body is not a valid SelfSubjectRulesReview: {exc}") from exc


def rules_review(authorizer: Authorizer, user: User, namespace: str) -> dict[str, Any]:
    """The answered SelfSubjectRulesReview: the rules of the user's bindings (cluster-wide, and the
    namespace's) with what every authenticated user may do, resource and non-resource apart."""
    rules = list(CLUSTER_ADMIN) if user.admin else []
    rules += authorizer.rules(user, namespace)
    resource_rules: list[dict[str, Any]] = []
    non_resource_rules: list[dict[str, Any]] = []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                       "nonResourceURLs": list(rule["nonResourceURLs"])})
            continue
        entry: dict[str, Any] = {"verbs": list(rule.get("verbs") or [])}
        for key in ("apiGroups", "resources", "resourceNames"):
            if rule.get(key):
                entry[key] = list(rule[key])
        resource_rules.append(entry)
    return {"kind": "SelfSubjectRulesReview", "apiVersion": f"{AUTHORIZATION}/v1",
            "metadata": {"creationTimestamp": None}, "spec": {"namespace": namespace} if namespace else {},
            "status": {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}}


def self_subject_review(user: User, store: Store) -> dict[str, Any]:
    """The answered SelfSubjectReview (``kubectl auth whoami``): the requester's user info; a
    ServiceAccount's UID is the account's."""
    info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
    prefix = "system:serviceaccount:"
    if user.name.startswith(prefix):
        namespace, _, name = user.name[len(prefix):].partition(":")
        account = store.get(("", "serviceaccounts"), namespace, name)
        if account is not None:
            info["uid"] = account["metadata"]["uid"]
    if user.extra:
        info["extra"] = {key: list(values) for key, values in user.extra}
    return {"kind": "SelfSubjectReview", "apiVersion": f"{AUTHENTICATION}/v1",
            "metadata": {"creationTimestamp": None}, "status": {"userInfo": info}}


def token_seconds(body: bytes, content_type: str) -> int:
    """``spec.expirationSeconds`` of a TokenRequest (JSON; protobuf: field 2 of the spec), default 1 h."""
    try:
        if content_type.startswith(protowire.PROTOBUF):
            spec = protowire.message(protowire.unwrap(body), 2)
            value = spec.get(4, [DEFAULT_TOKEN_SECONDS])[-1]
            return int(value) if isinstance(value, int) else DEFAULT_TOKEN_SECONDS
        data = json.loads(body or b"{}")
        return int(((data.get("spec") or {}).get("expirationSeconds")) or DEFAULT_TOKEN_SECONDS)
    except (ValueError, TypeError, AttributeError, protowire.WireError) as exc:
        raise errors.bad_request(f"the request body is not a valid TokenRequest: {exc}") from exc


def token_request(namespace: str, name: str, token: str, now: dt.datetime, expires: dt.datetime,
                  seconds: int) -> dict[str, Any]:
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"kind": "TokenRequest", "apiVersion": f"{AUTHENTICATION}/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": stamp},
            "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"], "expirationSeconds": seconds,
                     "boundObjectRef": None},
            "status": {"token": token,
                       "expirationTimestamp": expires.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
