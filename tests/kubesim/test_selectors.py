"""Tests for kubesim.selectors: label/field selectors, node affinity, tolerations."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesim.selectors import (
    FIELD_SELECTORS,
    FieldSelector,
    LabelSelector,
    Requirement,
    SelectorError,
    field_selectors_for,
    label_selector_from_spec,
    node_affinity_matches,
    node_selector_term_matches,
    parse_field_selector,
    parse_label_selector,
    tolerates,
    untolerated_taints,
)

_settings = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

GPU_LABEL = "feature.node.kubernetes.io/pci-10de.present"


def _node(name: str = "gpu-1", labels: dict | None = None, taints: list | None = None,
          **spec: Any) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or [], **spec}}


# ------------------------------------------------------------ label selectors
@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=x", {"app": "x"}, True),
        ("app=x", {"app": "y"}, False),
        ("app=x", {}, False),
        ("app==x", {"app": "x"}, True),
        ("app!=x", {"app": "y"}, True),
        ("app!=x", {}, True),
        ("app!=x", {"app": "x"}, False),
        ("tier in (a,b)", {"tier": "b"}, True),
        ("tier in (a,b)", {"tier": "c"}, False),
        ("tier in (a,b)", {}, False),
        ("tier notin (a,b)", {"tier": "c"}, True),
        ("tier notin (a,b)", {}, True),
        ("tier notin (a,b)", {"tier": "a"}, False),
        ("gpu", {"gpu": ""}, True),
        ("gpu", {}, False),
        ("!gpu", {}, True),
        ("!gpu", {"gpu": "true"}, False),
        ("app=x,tier in (a, b),!legacy", {"app": "x", "tier": "a"}, True),
        ("app=x,tier in (a, b),!legacy", {"app": "x", "tier": "a", "legacy": "1"}, False),
        (" app = x ,  tier   notin ( a , b ) ", {"app": "x", "tier": "c"}, True),
        (f"{GPU_LABEL}=true", {GPU_LABEL: "true"}, True),
        (f"{GPU_LABEL}=true", {GPU_LABEL: "false"}, False),
        (f"!{GPU_LABEL}", {"other": "x"}, True),
        ("gen>3", {"gen": "4"}, True),
        ("gen>3", {"gen": "3"}, False),
        ("gen<3", {"gen": "-1"}, True),
        ("gen<3", {"gen": "x"}, False),
        ("gen<3", {}, False),
        ("empty=", {"empty": ""}, True),
        ("empty=", {"empty": "x"}, False),
        ("v in ()", {"v": ""}, True),
        ("v in (,a)", {"v": ""}, True),
        ("x in (in, notin)", {"x": "notin"}, True),
        ("", {"anything": "goes"}, True),
        ("", {}, True),
    ],
)
def test_label_selector_matches(selector: str, labels: dict, expected: bool) -> None:
    """Each selector operator matches labels as the API server does."""
    assert parse_label_selector(selector).matches(labels) is expected


def test_label_selector_matches_none_labels() -> None:
    """An object without labels is treated as having an empty label set."""
    assert parse_label_selector("!a").matches(None)
    assert not parse_label_selector("a").matches(None)
    assert parse_label_selector("").matches(None)


def test_label_selector_parses_structure() -> None:
    """Requirements are sorted by key and set values are sorted and deduplicated."""
    sel = parse_label_selector("z=1, a in (c,b,c), !m")
    assert sel.requirements == (
        Requirement("a", "in", ("b", "c")),
        Requirement("m", "!"),
        Requirement("z", "=", ("1",)),
    )
    assert str(sel) == "a in (b,c),!m,z=1"
    assert parse_label_selector("").empty()
    assert not sel.empty()


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("a=b$", 'unable to parse requirement: values[0][a]: Invalid value: "b$"'),
        ("A_/b=c", 'unable to parse requirement: <nil>: Invalid value: "A_/b": prefix part'),
        ("a/b/c=d", "unable to parse requirement: <nil>: Invalid value"),
        ("-a=b", "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must"),
        ("k>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt'"),
        ("k<-1", 'unable to parse requirement: values[0][k]: Invalid value: "-1": a valid label'),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        (",a", "found ',', expected: !, identifier, or 'end of string'"),
        ("==a", "found '==', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
    ],
)
def test_label_selector_errors(selector: str, message: str) -> None:
    """Malformed selectors raise SelectorError with the API server's wording."""
    with pytest.raises(SelectorError) as err:
        parse_label_selector(selector)
    assert str(err.value).startswith(message)


def test_label_selector_rejects_overlong_names() -> None:
    """Label names over 63 characters and values over 63 characters are rejected."""
    with pytest.raises(SelectorError, match="no more than 63 bytes"):
        parse_label_selector("a" * 64)
    with pytest.raises(SelectorError, match="no more than 63 bytes"):
        parse_label_selector("a=" + "b" * 64)


def test_label_selector_from_spec_operators() -> None:
    """matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) are ANDed."""
    spec = {
        "matchLabels": {"app": "dp"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "zone", "operator": "NotIn", "values": ["bad"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    sel = label_selector_from_spec(spec)
    assert sel.matches({"app": "dp", "tier": "a", "gpu": ""})
    assert not sel.matches({"app": "dp", "tier": "a", "gpu": "", "legacy": "1"})
    assert not sel.matches({"app": "dp", "tier": "a", "gpu": "", "zone": "bad"})
    assert not sel.matches({"app": "dp", "tier": "c", "gpu": ""})
    assert not sel.matches({"app": "other", "tier": "a", "gpu": ""})


@pytest.mark.parametrize("spec", [None, {}, {"matchLabels": {}}, {"matchExpressions": []}])
def test_label_selector_from_empty_spec_matches_everything(spec: dict | None) -> None:
    """A missing or empty metav1.LabelSelector selects everything."""
    sel = label_selector_from_spec(spec)
    assert sel.empty()
    assert sel.matches({"x": "y"})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
         '"Gt" is not a valid label selector operator'),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
         "values set can't be empty"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
         "values set must be empty"),
        ({"matchLabels": {"a": "b c"}}, "a valid label must be"),
        ({"matchLabels": {"": "b"}}, "name part must be non-empty"),
    ],
)
def test_label_selector_from_spec_errors(spec: dict, message: str) -> None:
    """Invalid LabelSelector objects raise SelectorError."""
    with pytest.raises(SelectorError, match=message):
        label_selector_from_spec(spec)


_name = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?", fullmatch=True)
_prefix = st.from_regex(r"[a-z0-9]{1,6}(\.[a-z0-9]{1,6}){0,2}/", fullmatch=True)
_label_keys = st.builds(lambda p, n: p + n, st.just("") | _prefix, _name)
_label_values = st.just("") | _name
_requirements = st.one_of(
    st.builds(lambda k, op, v: Requirement(k, op, (v,)), _label_keys,
              st.sampled_from(["=", "==", "!="]), _label_values),
    st.builds(lambda k, op, vs: Requirement(k, op, tuple(sorted(vs))), _label_keys,
              st.sampled_from(["in", "notin"]), st.sets(_label_values, min_size=1, max_size=3)),
    st.builds(lambda k, op: Requirement(k, op), _label_keys, st.sampled_from(["exists", "!"])),
    st.builds(lambda k, op, n: Requirement(k, op, (str(n),)), _label_keys,
              st.sampled_from(["gt", "lt"]), st.integers(0, 10**6)),  # "-1" is no label value
)


@_settings
@given(st.lists(_requirements, max_size=4))
def test_label_selector_round_trips_through_string(reqs: list[Requirement]) -> None:
    """Rendering a selector and parsing it back yields the same selector."""
    sel = LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))
    assert parse_label_selector(str(sel)) == sel
    assert parse_label_selector(str(parse_label_selector(str(sel)))) == sel


@_settings
@given(st.dictionaries(_label_keys, _label_values, max_size=5),
       st.dictionaries(_label_keys, _label_values, max_size=3))
def test_equality_selector_from_labels_matches_them(labels: dict, extra: dict) -> None:
    """A selector of k=v for every label matches those labels (plus any others)."""
    text = ",".join(f"{k}={v}" for k, v in labels.items())
    assert parse_label_selector(text).matches({**extra, **labels})
    assert label_selector_from_spec({"matchLabels": labels}).matches({**extra, **labels})


@_settings
@given(st.lists(_requirements, max_size=4), st.dictionaries(_label_keys, _label_values, max_size=4))
def test_selector_is_conjunction_of_requirements(reqs: list[Requirement], labels: dict) -> None:
    """A selector matches exactly when every one of its requirements matches."""
    sel = LabelSelector(tuple(reqs))
    assert sel.matches(labels) == all(r.matches(labels) for r in reqs)


# ------------------------------------------------------------- node affinity
def _pod_spec(terms: list | None = None, node_selector: dict | None = None) -> dict:
    spec: dict[str, Any] = {}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return spec


def test_node_selector_term_expressions_are_anded() -> None:
    """All matchExpressions of a term must hold on the node's labels."""
    term = {"matchExpressions": [
        {"key": GPU_LABEL, "operator": "In", "values": ["true"]},
        {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
        {"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["90000"]},
        {"key": "maintenance", "operator": "DoesNotExist"},
        {"key": "zone", "operator": "NotIn", "values": ["a"]},
        {"key": "kubernetes.io/os", "operator": "Exists"},
    ]}
    labels = {GPU_LABEL: "true", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
              "kubernetes.io/os": "linux"}
    assert node_selector_term_matches(term, _node(labels=labels))
    assert not node_selector_term_matches(term, _node(labels={**labels, "maintenance": "1"}))
    assert not node_selector_term_matches(term, _node(labels={**labels, "nvidia.com/gpu.count": "2"}))
    assert not node_selector_term_matches(term, _node(labels={**labels, "zone": "a"}))


def test_node_selector_term_match_fields_pin_by_name() -> None:
    """matchFields on metadata.name (how the DaemonSet controller pins pods) In/NotIn."""
    pin = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
    avoid = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-1"]}]}
    assert node_selector_term_matches(pin, _node("gpu-1"))
    assert not node_selector_term_matches(pin, _node("gpu-2"))
    assert node_selector_term_matches(avoid, _node("gpu-2"))
    assert not node_selector_term_matches(avoid, _node("gpu-1"))


@pytest.mark.parametrize(
    "term",
    [
        {},
        {"matchExpressions": [], "matchFields": []},
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["1"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "n"]}]},
        {"matchFields": [{"key": "spec.podCIDR", "operator": "In", "values": ["n"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]},
    ],
)
def test_empty_or_invalid_node_selector_terms_match_nothing(term: dict) -> None:
    """An empty term, or one the API would reject, never matches."""
    assert not node_selector_term_matches(term, _node("n", labels={"a": "1"}))


def test_node_affinity_terms_are_ored_and_anded_with_node_selector() -> None:
    """Terms are ORed; the result is ANDed with spec.nodeSelector."""
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-9"]}]},
    ]
    spec = _pod_spec(terms, node_selector={GPU_LABEL: "true"})
    gpu = {GPU_LABEL: "true"}
    assert node_affinity_matches(spec, _node("gpu-1", {**gpu, "zone": "a"}))
    assert node_affinity_matches(spec, _node("gpu-9", gpu))
    assert not node_affinity_matches(spec, _node("gpu-2", gpu))
    assert not node_affinity_matches(spec, _node("gpu-9", {"zone": "a"}))


def test_node_affinity_without_constraints_matches_any_node() -> None:
    """A pod with no nodeSelector and no required affinity fits every node."""
    assert node_affinity_matches({}, _node())
    assert node_affinity_matches({"affinity": {"nodeAffinity": {}}}, _node())
    assert node_affinity_matches(_pod_spec(node_selector={}), _node())


def test_node_affinity_with_empty_terms_matches_nothing() -> None:
    """A required node affinity with no terms selects no node."""
    assert not node_affinity_matches(_pod_spec([]), _node())


def test_node_selector_requires_exact_label_values() -> None:
    """spec.nodeSelector needs every key present with an equal value."""
    spec = _pod_spec(node_selector={"a": "1", "b": "2"})
    assert node_affinity_matches(spec, _node(labels={"a": "1", "b": "2", "c": "3"}))
    assert not node_affinity_matches(spec, _node(labels={"a": "1"}))
    assert not node_affinity_matches(spec, _node(labels={"a": "1", "b": "3"}))


# ---------------------------------------------------------------- tolerations
_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, True),
        ({"key": "nvidia.com/gpu", "value": "present"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Equal"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Bogus", "value": "present"}, False),
    ],
)
def test_tolerates_single_toleration(toleration: dict, expected: bool) -> None:
    """Toleration semantics follow v1.Toleration.ToleratesTaint."""
    assert tolerates([toleration], _GPU_TAINT) is expected


def test_tolerates_any_and_none() -> None:
    """Any matching toleration is enough; no tolerations tolerate nothing."""
    assert tolerates([{"key": "x", "operator": "Exists"}, {"operator": "Exists"}], _GPU_TAINT)
    assert not tolerates(None, _GPU_TAINT)
    assert not tolerates([], _GPU_TAINT)
    assert tolerates([{"key": "k", "operator": "Equal"}], {"key": "k", "effect": "NoSchedule"})


def test_untolerated_taints_filters_by_effect_and_toleration() -> None:
    """Only NoSchedule/NoExecute taints the pod doesn't tolerate are returned by default."""
    taints = [
        _GPU_TAINT,
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "evict", "effect": "NoExecute"},
    ]
    node = _node(taints=taints)
    spec = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    assert untolerated_taints(spec, node) == [taints[1], taints[3]]
    assert untolerated_taints(spec, node, effects=("NoExecute",)) == [taints[3]]
    assert untolerated_taints({"tolerations": [{"operator": "Exists"}]}, node) == []
    assert untolerated_taints({}, {"metadata": {}}) == []


# ------------------------------------------------------------ field selectors
def test_field_selector_tables_cover_real_api_server_fields() -> None:
    """FIELD_SELECTORS lists the fields the API server accepts per resource."""
    for plural in ("default", "pods", "events", "daemonsets", "controllerrevisions",
                   "deployments", "resourceclaims"):
        assert {"metadata.name", "metadata.namespace"} <= FIELD_SELECTORS[plural]
    assert {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "status.phase", "status.podIP",
            "status.nominatedNodeName"} <= FIELD_SELECTORS["pods"]
    assert {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
            "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
            "involvedObject.fieldPath", "reason", "reportingComponent", "source",
            "type"} <= FIELD_SELECTORS["events"]
    assert FIELD_SELECTORS["nodes"] == {"metadata.name", "spec.unschedulable"}
    assert FIELD_SELECTORS["namespaces"] == {"metadata.name", "status.phase"}
    assert FIELD_SELECTORS["resourceslices"] == {"metadata.name", "spec.nodeName", "spec.driver"}
    assert field_selectors_for("widgets") == FIELD_SELECTORS["default"]
    assert field_selectors_for("pods") == FIELD_SELECTORS["pods"]


def test_field_selector_pods() -> None:
    """Pod field selectors compare spec and status values, ANDing the terms."""
    pod = {"metadata": {"name": "p", "namespace": "gpu"},
           "spec": {"nodeName": "gpu-1", "restartPolicy": "Always"},
           "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}]}}
    pods = FIELD_SELECTORS["pods"]
    assert parse_field_selector("spec.nodeName=gpu-1", pods).matches(pod)
    assert parse_field_selector("spec.nodeName==gpu-1,status.phase!=Failed", pods).matches(pod)
    assert not parse_field_selector("spec.nodeName=gpu-1,status.phase=Pending", pods).matches(pod)
    assert parse_field_selector("status.podIP=10.0.0.5", pods).matches(pod)
    assert parse_field_selector("spec.host=gpu-1", pods).matches(pod)
    assert parse_field_selector("spec.hostNetwork=false", pods).matches(pod)
    assert parse_field_selector("metadata.namespace=gpu,metadata.name=p", pods).matches(pod)


def test_field_selector_missing_values_compare_as_empty_string() -> None:
    """A missing field equals '' (so `spec.nodeName=` selects unscheduled pods)."""
    pods = FIELD_SELECTORS["pods"]
    unscheduled = {"metadata": {"name": "p"}, "spec": {}}
    assert parse_field_selector("spec.nodeName=", pods).matches(unscheduled)
    assert not parse_field_selector("spec.nodeName!=", pods).matches(unscheduled)
    assert parse_field_selector("status.nominatedNodeName=", pods).matches({})


def test_field_selector_booleans_compare_as_strings() -> None:
    """spec.unschedulable compares as 'true'/'false' and defaults to 'false'."""
    nodes = FIELD_SELECTORS["nodes"]
    cordoned = _node(unschedulable=True)
    assert parse_field_selector("spec.unschedulable=true", nodes).matches(cordoned)
    assert parse_field_selector("spec.unschedulable=false", nodes).matches(_node())
    assert not parse_field_selector("spec.unschedulable=false", nodes).matches(cordoned)
    assert not parse_field_selector("spec.unschedulable=True", nodes).matches(cordoned)


def test_field_selector_events() -> None:
    """Event selectors read involvedObject, reason, type and source (or reportingComponent)."""
    event = {"metadata": {"name": "e", "namespace": "gpu"},
             "involvedObject": {"kind": "Pod", "name": "p", "namespace": "gpu", "uid": "u1",
                                "fieldPath": "spec.containers{ctr}"},
             "reason": "BackOff", "type": "Warning", "source": {"component": "kubelet"}}
    events = FIELD_SELECTORS["events"]
    text = ("involvedObject.kind=Pod,involvedObject.name=p,involvedObject.namespace=gpu,"
            "involvedObject.uid=u1,reason=BackOff,type=Warning,source=kubelet,"
            "involvedObject.fieldPath=spec.containers{ctr}")
    assert parse_field_selector(text, events).matches(event)
    assert not parse_field_selector("type=Normal", events).matches(event)
    new_style = {"reportingComponent": "daemonset-controller", "source": {}}
    assert parse_field_selector("source=daemonset-controller", events).matches(new_style)
    assert parse_field_selector("reportingComponent=daemonset-controller",
                                events).matches(new_style)


def test_field_selector_escaped_values() -> None:
    r"""Values may contain escaped '\,', '\=' and '\\'."""
    sel = parse_field_selector(r"metadata.name=a\,b\=c\\d", FIELD_SELECTORS["default"])
    assert sel.terms == (("metadata.name", "=", "a,b=c\\d"),)
    assert sel.matches({"metadata": {"name": "a,b=c\\d"}})
    assert str(sel) == r"metadata.name=a\,b\=c\\d"


@pytest.mark.parametrize(
    ("text", "allowed", "message"),
    [
        ("spec.foo=1", FIELD_SELECTORS["pods"], "field label not supported: spec.foo"),
        ("metadata.namespace=x", FIELD_SELECTORS["nodes"],
         "field label not supported: metadata.namespace"),
        ("spec.driver=x", FIELD_SELECTORS["events"], "field label not supported: spec.driver"),
        ("spec.nodeName=x", FIELD_SELECTORS["daemonsets"],
         '"spec.nodeName" is not a known field selector: only "metadata.name", '
         '"metadata.namespace"'),
        ("metadata.name", FIELD_SELECTORS["pods"],
         "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("metadata.name=a=b", FIELD_SELECTORS["pods"],
         "invalid field selector: unescaped character in value: 61"),
        ("metadata.name=a\\x", FIELD_SELECTORS["pods"],
         "invalid field selector: invalid escape sequence: \\x"),
    ],
)
def test_field_selector_errors(text: str, allowed: frozenset, message: str) -> None:
    """Unknown fields and malformed terms raise SelectorError with the server's message."""
    with pytest.raises(SelectorError) as err:
        parse_field_selector(text, allowed)
    assert str(err.value) == message


def test_empty_field_selector_matches_everything() -> None:
    """An empty field selector (or empty terms) has no terms and matches any object."""
    assert parse_field_selector("", FIELD_SELECTORS["pods"]).terms == ()
    assert parse_field_selector(",", FIELD_SELECTORS["pods"]).matches({})


_field_values = st.text(alphabet="ab,=\\!-. ", max_size=8)


@_settings
@given(st.lists(st.tuples(st.sampled_from(sorted(FIELD_SELECTORS["pods"])),
                          st.sampled_from(["=", "==", "!="]), _field_values), max_size=4))
def test_field_selector_round_trips_through_string(terms: list) -> None:
    """Rendering a field selector (with escaping) and parsing it back gives the same terms."""
    sel = FieldSelector(tuple(sorted(terms)))
    parsed = parse_field_selector(str(sel), FIELD_SELECTORS["pods"])
    assert sorted(parsed.terms) == sorted(sel.terms)


@_settings
@given(st.text(alphabet="ab-.", min_size=1, max_size=6), st.text(alphabet="ab-.", max_size=6))
def test_field_selector_equal_and_not_equal_are_complements(name: str, want: str) -> None:
    """For any object, `f=v` matches exactly when `f!=v` does not."""
    obj = {"metadata": {"name": name}}
    default = FIELD_SELECTORS["default"]
    eq = parse_field_selector(f"metadata.name={want}", default).matches(obj)
    ne = parse_field_selector(f"metadata.name!={want}", default).matches(obj)
    assert eq != ne
    assert eq == (name == want)
