"""Label selectors, field selectors, node affinity and taint tolerations.

The label selector grammar, validation and error messages follow
``k8s.io/apimachinery/pkg/labels``; field selectors follow
``k8s.io/apimachinery/pkg/fields`` plus the per-kind field label conversion
functions of the API server; node affinity follows
``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FIELD_SELECTORS",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "field_selectors_for",
    "label_selector_from_spec",
    "node_affinity_matches",
    "node_selector_term_matches",
    "parse_field_selector",
    "parse_label_selector",
    "tolerates",
    "untolerated_taints",
]


class SelectorError(ValueError):
    """A selector could not be parsed (message modelled on the API server's)."""


# ------------------------------------------------------------------ validation
_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
             "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
             "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_DNS_MSG = ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', "
              "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
              "or 'my_value',  or '12345', regex used for validation is "
              "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def _key_errors(key: str) -> list[str]:
    prefix, sep, name = key.rpartition("/")
    if "/" in prefix:
        return ["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character with an optional DNS "
                "subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs = []
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    elif not _NAME_RE.fullmatch(name):
        errs.append(_NAME_MSG)
    if sep and not prefix:
        errs.append("prefix part must be non-empty")
    elif sep and len(prefix) > 253:
        errs.append("prefix part must be no more than 253 bytes")
    elif sep and not _DNS1123_RE.fullmatch(prefix):
        errs.append(_DNS_MSG)
    return errs


def _q(value: Any) -> str:
    """Quote like Go's ``%q`` (and field errors' JSON rendering of lists)."""
    return json.dumps(value, ensure_ascii=False)


def _value_errors(value: str) -> list[str]:
    if len(value) > 63:
        return ["must be no more than 63 bytes"]
    return [] if value == "" or _NAME_RE.fullmatch(value) else [_VALUE_MSG]


# -------------------------------------------------------------- label selectors
_OPS = ("in", "notin", "=", "==", "!=", "gt", "lt")  # binary operators, as Go lists them


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` requirement; operators use Go's ``selection`` spelling."""

    key: str
    operator: str  # in notin = == != gt lt exists !
    values: tuple[str, ...] = ()

    @classmethod
    def make(cls, key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
        """Validate like ``labels.NewRequirement`` (raises ``SelectorError``)."""
        vals = tuple(values)
        errs = [f"key: Invalid value: {_q(key)}: {'; '.join(e)}"
                for e in [_key_errors(key)] if e]
        where = f"values: Invalid value: {_q(list(vals))}: "
        if operator in ("in", "notin") and not vals:
            errs.append(where + "for 'in', 'notin' operators, values set can't be empty")
        elif operator in ("=", "==", "!=") and len(vals) != 1:
            errs.append(where + "exact-match compatibility requires one single value")
        elif operator in ("exists", "!") and vals:
            errs.append(where + "values set must be empty for exists and does not exist")
        elif operator in ("gt", "lt"):
            if len(vals) != 1:
                errs.append(where + "for 'Gt', 'Lt' operators, exactly one value is required")
            errs += [f"values[{i}]: Invalid value: {_q(v)}: for 'Gt', 'Lt' operators, the "
                     "value must be an integer" for i, v in enumerate(vals) if not _is_int(v)]
        elif operator not in (*_OPS, "exists", "!"):
            errs.append(f"operator: Unsupported value: {_q(operator)}")
        errs += [f"values[{i}][{key}]: Invalid value: {_q(v)}: {'; '.join(_value_errors(v))}"
                 for i, v in enumerate(vals) if _value_errors(v)]
        if errs:
            raise SelectorError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
        return cls(key, operator, vals)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement (Go ``Requirement.Matches``)."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator in ("in", "=", "=="):
            return present and value in self.values
        if self.operator in ("notin", "!="):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("gt", "lt") and value is not None and _is_int(value) and len(self.values) == 1:
            have, want = int(value), int(self.values[0])
            return have > want if self.operator == "gt" else have < want
        return False

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return "!" + self.key
        vals = ",".join(sorted(self.values))
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({vals})"
        symbol = {"gt": ">", "lt": "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{vals}"


def _is_int(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value) is not None \
        and -(2**63) <= int(value) < 2**63


@dataclass(frozen=True)
class LabelSelector:
    """AND of requirements; no requirements selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


_SPECIAL = "=!(),><"
_TOKENS = {")", ",", "!", "==", "=", ">", "in", "<", "!=", "notin", "("}


def _lex(s: str) -> list[tuple[str, str]]:
    """Tokens as (kind, literal); kind is 'id', 'end' or the literal itself."""
    out, i = [], 0
    while True:
        while i < len(s) and s[i] in " \t\r\n":
            i += 1
        if i >= len(s):
            out.append(("end", ""))
            return out
        if s[i] in _SPECIAL:  # longest operator prefix
            j, best = i, 0
            while j < len(s) and s[j] in _SPECIAL:
                j += 1
                if s[i:j] in _TOKENS:
                    best = j
                elif best:
                    break
            if not best:
                raise SelectorError(f"unable to parse requirement: unexpected {s[i]!r} in {s!r}")
            out.append((s[i:best], s[i:best]))
            i = best
        else:
            j = i
            while j < len(s) and s[j] not in _SPECIAL and s[j] not in " \t\r\n":
                j += 1
            word = s[i:j]
            out.append((word if word in ("in", "notin") else "id", word))
            i = j


def parse_label_selector(s: str) -> LabelSelector:
    """Parse a ``labelSelector`` query string (``labels.Parse``)."""
    toks, pos = _lex(s), 0

    def peek(values: bool = True) -> tuple[str, str]:
        kind, lit = toks[pos]
        return ("id" if values and kind in ("in", "notin") else kind), lit

    def take(values: bool = True) -> tuple[str, str]:
        nonlocal pos
        pos += 1
        kind, lit = toks[pos - 1]
        return ("id" if values and kind in ("in", "notin") else kind), lit

    def requirement() -> Requirement:
        kind, key = take()
        negate = kind == "!"
        if negate:
            kind, key = take()
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        if errs := _key_errors(key):
            raise SelectorError(f"<nil>: Invalid value: {_q(key)}: {'; '.join(errs)}")
        if negate or peek()[0] in ("end", ","):
            return Requirement.make(key, "!" if negate else "exists")
        kind, lit = take(values=False)
        op = {"in": "in", "notin": "notin", "=": "=", "==": "==", "!=": "!=",
              ">": "gt", "<": "lt"}.get(kind)
        if op is None:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_OPS)}")
        if op not in ("in", "notin"):
            if peek()[0] in ("end", ","):
                return Requirement.make(key, op, [""])
            kind, lit = take()
            if kind != "id":
                raise SelectorError(f"found '{lit}', expected: identifier")
            return Requirement.make(key, op, [lit])
        kind, lit = take()
        if kind != "(":
            raise SelectorError(f"found '{lit}' expected: '('")
        values: set[str] = set()
        if peek()[0] == ")":
            take()
            return Requirement.make(key, op, [""])
        if peek()[0] not in ("id", ","):
            raise SelectorError(f"found '{peek()[1]}', expected: ',', ')' or identifier")
        while True:  # comma separated, possibly empty identifiers
            kind, lit = take()
            if kind == "id":
                values.add(lit)
                nxt, nlit = peek()
                if nxt == ")":
                    break
                if nxt != ",":
                    raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            elif kind == ",":
                if not values or peek()[0] in (")", ","):
                    values.add("")
                if peek()[0] == ")":
                    break
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")
        take()  # the ')'
        return Requirement.make(key, op, sorted(values))

    reqs: list[Requirement] = []
    while True:
        kind, lit = peek()
        if kind == "end":
            break
        if kind not in ("id", "!"):
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
        try:
            reqs.append(requirement())
        except SelectorError as exc:
            raise SelectorError(f"unable to parse requirement: {exc}") from None
        kind, lit = take()
        if kind == "end":
            break
        if kind != ",":
            raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
        if peek()[0] not in ("id", "!"):
            raise SelectorError(f"found '{peek()[1]}', expected: identifier after ','")
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


_SPEC_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_spec(spec: Mapping[str, Any] | None) -> LabelSelector:
    """Build a selector from a ``metav1.LabelSelector`` (None/empty selects everything)."""
    reqs = [Requirement.make(k, "=", [v]) for k, v in ((spec or {}).get("matchLabels") or {}).items()]
    for expr in (spec or {}).get("matchExpressions") or []:
        op = _SPEC_OPS.get(expr.get("operator"))
        if op is None:
            raise SelectorError(f"{_q(expr.get('operator'))} is not a valid label selector operator")
        reqs.append(Requirement.make(expr.get("key", ""), op, expr.get("values") or []))
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


# ------------------------------------------------------ node affinity, taints
_NODE_OPS = {**_SPEC_OPS, "Gt": "gt", "Lt": "lt"}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def node_selector_term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """One ``nodeSelectorTerm``: expressions on labels AND ``matchFields`` on metadata.name."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    labels = _labels(node)
    for expr in exprs:
        op = _NODE_OPS.get(expr.get("operator"))
        try:
            req = Requirement.make(expr.get("key", ""), op or "?", expr.get("values") or [])
        except SelectorError:
            return False  # an invalid term never matches
        if not req.matches(labels):
            return False
    name = (node.get("metadata") or {}).get("name") or ""
    if not name:
        return True  # the node has no fields to match against
    for expr in fields:
        values, op = expr.get("values") or [], expr.get("operator")
        if expr.get("key") != "metadata.name" or op not in ("In", "NotIn") or len(values) != 1:
            return False
        if (name == values[0]) != (op == "In"):
            return False
    return True


def node_affinity_matches(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """``spec.nodeSelector`` AND the required node affinity terms (ORed)."""
    labels = _labels(node)
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(node_selector_term_matches(t or {}, node)
               for t in required.get("nodeSelectorTerms") or [])


def _tolerates_one(tol: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def tolerates(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> bool:
    """Whether any toleration tolerates ``taint`` (Go ``Toleration.ToleratesTaint``)."""
    return any(_tolerates_one(t, taint) for t in tolerations or [])


def untolerated_taints(pod_spec: Mapping[str, Any], node: Mapping[str, Any],
                       effects: Iterable[str] = ("NoSchedule", "NoExecute")) -> list[dict]:
    """The node's taints with one of ``effects`` that the pod does not tolerate."""
    effects = set(effects)
    return [t for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in effects and not tolerates(pod_spec.get("tolerations"), t)]


# -------------------------------------------------------------- field selectors
_META = frozenset({"metadata.name", "metadata.namespace"})

#: resource plural -> field labels the API server accepts in ``fieldSelector``.
FIELD_SELECTORS: dict[str, frozenset[str]] = {
    "default": _META,
    "pods": _META | {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                     "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                     "status.podIP", "status.podIPs", "status.nominatedNodeName", "spec.host"},
    "events": _META | {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                       "involvedObject.uid", "involvedObject.apiVersion",
                       "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                       "reportingComponent", "source", "type"},
    "nodes": frozenset({"metadata.name", "spec.unschedulable"}),
    "namespaces": frozenset({"metadata.name", "status.phase"}),
    "secrets": _META | {"type"},
    "services": _META | {"spec.clusterIP", "spec.type"},
    "replicationcontrollers": _META | {"status.replicas"},
    "daemonsets": _META,
    "controllerrevisions": _META,
    "deployments": _META,
    "resourceclaims": _META,
    "resourceslices": frozenset({"metadata.name", "spec.nodeName", "spec.driver"}),
}


def field_selectors_for(plural: str) -> frozenset[str]:
    """The accepted field labels for a resource, falling back to ``default``."""
    return FIELD_SELECTORS.get(plural, FIELD_SELECTORS["default"])


_BOOL_FIELDS = {"spec.unschedulable", "spec.hostNetwork"}  # Go formats these, default false


def _field_value(obj: Mapping[str, Any], field: str) -> str:
    if field == "spec.host":
        field = "spec.nodeName"
    if field == "source":  # events: source.component, else reportingController
        return ((obj.get("source") or {}).get("component") or obj.get("reportingComponent")
                or "")
    if field == "status.podIP":
        ips = (obj.get("status") or {}).get("podIPs") or []
        if ips:
            return ips[0].get("ip") or ""
    value: Any = obj
    for part in field.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or (value is None and field in _BOOL_FIELDS):
        return "true" if value else "false"
    if value is None or isinstance(value, (Mapping, list)):
        return ""
    return str(value)


@dataclass(frozen=True)
class FieldSelector:
    """AND of ``(field, operator, value)`` terms; operator is ``=``, ``==`` or ``!=``."""

    terms: tuple[tuple[str, str, str], ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's field values satisfy every term."""
        return all((_field_value(obj, f) == v) == (op != "!=") for f, op, v in self.terms)

    def __str__(self) -> str:
        esc = str.maketrans({"\\": "\\\\", ",": "\\,", "=": "\\="})
        return ",".join(f"{f}{op}{v.translate(esc)}" for f, op, v in self.terms)


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise SelectorError("invalid field selector: invalid escape sequence: "
                                    + value[i:i + 2])
            out.append(value[i + 1])
            i += 2
            continue
        if c in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        out.append(c)
        i += 1
    return "".join(out)


def parse_field_selector(s: str, allowed: AbstractSet[str]) -> FieldSelector:
    """Parse a ``fieldSelector`` query string, rejecting fields not in ``allowed``."""
    parts, start, slash = [], 0, False
    for i, c in enumerate(s):
        if slash:
            slash = False
        elif c == "\\":
            slash = True
        elif c == ",":
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    terms = []
    for part in sorted(p for p in parts if p):
        match = re.search(r"!=|==|=", part)
        if match is None:
            raise SelectorError(f"invalid selector: '{s}'; can't understand '{part}'")
        field, op = part[:match.start()], match.group()
        value = _unescape(part[match.end():])
        if field not in allowed:
            if set(allowed) == _META:  # kinds without their own conversion function
                raise SelectorError(f'"{field}" is not a known field selector: only '
                                    '"metadata.name", "metadata.namespace"')
            raise SelectorError(f"field label not supported: {field}")
        terms.append((field, op, value))
    return FieldSelector(tuple(terms))
