"""The API server's semantic validation of the fields kubesim checks beyond ``kubesim.validation``
(issue 35 item 1), worded as ``k8s.io/apimachinery/pkg/util/validation/field`` renders errors:

- object names by kind (``ValidateServiceName`` is a DNS-1035 label, ``ValidateNamespaceName``
  a DNS-1123 label; the others a DNS-1123 subdomain, checked by the store) and ``metadata.labels``
  (``ValidateLabels``: qualified keys, values of at most 63 characters matching the label regex),
  on the object and on a workload's pod template;
- in a pod spec (a pod's or a template's), ``validateContainers``: each container's name a DNS-1123
  label and unique, each ``volumeMounts[].name`` a declared volume (``Not found``), each
  ``resources.claims[]`` a declared ``spec.resourceClaims`` entry;
- a DaemonSet, Deployment, ReplicaSet or StatefulSet whose selector does not select its template's
  labels (``spec.template.metadata.labels: Invalid value: map[string]string{…}: `selector` does not
  match template `labels```); a StatefulSet's template is checked for its labels only, as
  ``ValidatePodTemplateSpecForStatefulSet`` does;
- ``resource.k8s.io``: a ResourceClass's ``driverName`` (1.27) and a ResourceSlice's ``spec.driver``
  a DNS-1123 subdomain once lower-cased (``ValidateCSIDriverName``); each DeviceClass selector has a
  ``cel`` expression;
- on update, the workload selectors and a ResourceClaim's whole ``spec`` (``ValidateImmutableField``:
  ``field is immutable``, the new value printed as :mod:`kubesim.badvalues` says each release prints
  it). A DeviceClass's spec (a 1.27 ResourceClass's fields) may change: ``ValidateDeviceClassUpdate``
  (``ValidateClassUpdate``) validates the new object and checks only the metadata for immutability.

Each check answers causes ``(field, reason, body)`` for :func:`kubesim.errors.invalid_object`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from kubesim import badvalues, selectors
from kubesim.resources import ResourceType

Cause = tuple[str, str, str]

LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
             "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
             "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
               "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
               "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
SELECTOR_MISMATCH = "`selector` does not match template `labels`"
IMMUTABLE = "field is immutable"
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

PODS = ("", "pods")
CLAIMS = ("resource.k8s.io", "resourceclaims")
WORKLOADS = (("apps", "daemonsets"), ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"))
IMMUTABLE_SELECTORS = (("apps", "daemonsets"), ("apps", "deployments"), ("apps", "replicasets"))
"""The kinds whose ``spec.selector`` cannot change (a StatefulSet's spec has its own rule)."""
_NAME_RULES = {("", "services"): (_DNS1035, DNS1035_MSG), ("", "namespaces"): (_LABEL, LABEL_MSG)}


def go_quote(value: str) -> str:
    """Go's ``%q`` of a string (the printable ASCII cases field errors meet)."""
    return json.dumps(value, ensure_ascii=False)


def _invalid(field: str, value: str, detail: str) -> Cause:
    return (field, "FieldValueInvalid", f"Invalid value: {go_quote(value)}: {detail}")


def dns1123_label(value: str, field: str) -> list[Cause]:
    """``ValidateDNS1123Label``: one cause per message of ``IsDNS1123Label``."""
    causes = []
    if len(value) > 63:
        causes.append(_invalid(field, value, "must be no more than 63 characters"))
    if not _LABEL.fullmatch(value):
        causes.append(_invalid(field, value, LABEL_MSG))
    return causes


def driver_name(value: Any, field: str) -> list[Cause]:
    """``ValidateCSIDriverName``, the rule of a DRA driver's name."""
    if not value:
        return [(field, "FieldValueRequired", "Required value")]
    if not isinstance(value, str):
        return []
    return [_invalid(field, value, SUBDOMAIN_MSG)] if not _SUBDOMAIN.fullmatch(value.lower()) else []


def _labels(metadata: Mapping[str, Any], field: str) -> list[Cause]:
    """``ValidateLabels``: each key a qualified name, each value a label value."""
    causes: list[Cause] = []
    for key, value in sorted((metadata.get("labels") or {}).items()):
        causes += [_invalid(field, key, msg) for msg in selectors._key_errors(key)]
        if isinstance(value, str):
            causes += [_invalid(field, value, msg) for msg in selectors._value_errors(value)]
    return causes


def _containers(spec: Mapping[str, Any], field: str) -> list[Cause]:
    """``validateContainers`` then ``validateInitContainers``: names, mounts and claims."""
    volumes = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    claims = sorted({str(c["name"]) for c in spec.get("resourceClaims") or [] if isinstance(c, dict) and c.get("name")})
    causes: list[Cause] = []
    seen: set[str] = set()
    for kind in ("containers", "initContainers"):
        for index, ctr in enumerate(spec.get(kind) or []):
            if not isinstance(ctr, dict):
                continue
            path = f"{field}.{kind}[{index}]"
            name = ctr.get("name") or ""
            causes += dns1123_label(name, f"{path}.name") if name else \
                [(f"{path}.name", "FieldValueRequired", "Required value")]
            for m, mount in enumerate(ctr.get("volumeMounts") or []):
                if isinstance(mount, dict) and mount.get("name") not in volumes:
                    causes.append((f"{path}.volumeMounts[{m}].name", "FieldValueNotFound",
                                   f"Not found: {go_quote(str(mount.get('name') or ''))}"))
            for c, claim in enumerate(((ctr.get("resources") or {}).get("claims")) or []):
                wanted = claim.get("name") if isinstance(claim, dict) else None
                if wanted and wanted not in claims:
                    known = f": {', '.join(claims)}" if claims else " which is empty"
                    causes.append((f"{path}.resources.claims[{c}]", "FieldValueNotFound",
                                   f"Not found: {go_quote(wanted)}: must be one of the names in "
                                   f"pod.spec.resourceClaims{known}"))
            if name and name in seen:
                causes.append((f"{path}.name", "FieldValueDuplicate", f"Duplicate value: {go_quote(name)}"))
            seen.add(name)
    return causes


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool | None:
    """Whether the selector selects ``labels``; None when the selector cannot be parsed."""
    try:
        parsed = selectors.label_selector_from_spec(selector)
    except selectors.SelectorError:
        return None
    return parsed.matches(labels)


def _workload(spec: Mapping[str, Any], *, statefulset: bool, minor: int) -> list[Cause]:
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels")
    causes: list[Cause] = []
    selector = spec.get("selector")
    if selector is not None and _selector_matches(selector, labels or {}) is False:
        shown = badvalues.render(labels, badvalues.LABELS, minor=minor)
        causes.append(("spec.template.metadata.labels", "FieldValueInvalid",
                       f"Invalid value: {shown}: {SELECTOR_MISMATCH}"))
    causes += _labels(template.get("metadata") or {}, "spec.template.metadata.labels")
    if statefulset:  # ValidatePodTemplateSpecForStatefulSet leaves the pod spec out (its mounts may
        return causes  # name volumeClaimTemplates, which are no volumes of the template)
    return causes + _containers(template.get("spec") or {}, "spec.template.spec")


def _dra(res: ResourceType, obj: Mapping[str, Any]) -> list[Cause]:
    if res.plural == "resourceclasses":
        return driver_name(obj.get("driverName"), "driverName")
    if res.plural == "resourceslices":  # spec.driver from v1alpha3 (1.31), driverName before
        spec = obj.get("spec")
        if isinstance(spec, dict) and "driver" in spec:
            return driver_name(spec["driver"], "spec.driver")
        return driver_name(obj["driverName"], "driverName") if "driverName" in obj else []
    if res.plural == "deviceclasses":
        return [(f"spec.selectors[{i}].cel", "FieldValueRequired", "Required value")
                for i, sel in enumerate((obj.get("spec") or {}).get("selectors") or [])
                if isinstance(sel, dict) and not sel.get("cel")]
    return []


def causes(res: ResourceType, obj: Mapping[str, Any], *, old: Mapping[str, Any] | None = None,
           minor: int = badvalues.JSON_FROM) -> list[Cause]:
    """The causes the API server of release ``1.<minor>``'s ``Validate``/``ValidateUpdate`` gives ``obj``
    for the rules above."""
    metadata = obj.get("metadata") or {}
    found: list[Cause] = []
    rule = _NAME_RULES.get(res.group_resource)
    name = metadata.get("name") or ""
    if rule is not None and name and not rule[0].fullmatch(name):
        found.append(_invalid("metadata.name", name, rule[1]))
    found += _labels(metadata, "metadata.labels")
    raw = obj.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if res.group_resource == PODS:
        found += _containers(spec, "spec")
    elif res.group_resource in WORKLOADS:
        found += _workload(spec, statefulset=res.plural == "statefulsets", minor=minor)
    elif res.group == "resource.k8s.io":
        found += _dra(res, obj)
    if old is not None and res.group_resource in IMMUTABLE_SELECTORS:
        before, after = (old.get("spec") or {}).get("selector"), spec.get("selector")
        if before != after:
            shown = badvalues.render(after, badvalues.LABEL_SELECTOR, minor=minor)
            found.append(("spec.selector", "FieldValueInvalid", f"Invalid value: {shown}: {IMMUTABLE}"))
    if old is not None and res.group_resource == CLAIMS and (old.get("spec") or {}) != spec:
        # ValidateClaimUpdate (1.27) / ValidateResourceClaimUpdate: after the metadata, the spec
        # (then the new spec validated again, which adds nothing here for a spec valid on create)
        shown = badvalues.render(spec, badvalues.claim_spec(minor), minor=minor)
        found.append(("spec", "FieldValueInvalid", f"Invalid value: {shown}: {IMMUTABLE}"))
    return found
