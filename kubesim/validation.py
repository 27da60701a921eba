"""What the API server's registry strategies reset and validate on a client's write, for the
kinds kubesim checks (today: ``policy/v1`` PodDisruptionBudget).

- ``prepare_for_create``: a PodDisruptionBudget starts with an empty status (its counts
  written as zeros), whatever the client sent, as ``PrepareForCreate`` does;
- ``validate``: a pod spec's (or a pod template's) user and group IDs in their securityContexts,
  ``runAsUser``, ``runAsGroup`` and ``fsGroup``, between 0 and 2147483647 (``IsValidUserID``,
  ``IsValidGroupID``: the API server refuses 9999999999 though the field is int64);
  ``ValidatePodDisruptionBudgetSpec`` (``minAvailable`` and
  ``maxUnavailable`` not both set; each a non-negative integer or a percentage of at most
  100%; a valid label selector) on create and update, and the status counts non-negative on
  a status update. Refusals are the API server's 422 with its field errors, worded as
  ``k8s.io/apimachinery/pkg/util/validation/field`` renders them.

- ``admit_priority_class``: the Priority admission plugin's refusal of a pod whose
  ``priorityClassName`` names no PriorityClass (403, ``pods "x" is forbidden: no PriorityClass
  with name x was found``); a DaemonSet or Deployment naming one is stored all the same, and
  its controller's pods are refused (a ``FailedCreate`` event), as on a real cluster.

The store calls them (controllers' own writes go through ``Store.mutate`` and are not checked,
as a real controller's writes are trusted to be valid).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kubesim import apivalidation, errors
from kubesim.resources import ResourceType
from kubesim.selectors import SelectorError, label_selector_from_spec

PDBS = ("policy", "poddisruptionbudgets")
_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_MSG = ("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
                "regex used for validation is '[0-9]+%')")
_STATUS_COUNTS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
_POLICIES = ("AlwaysAllow", "IfHealthyBudget")

Cause = tuple[str, str, str]
PODS = ("", "pods")
POD_SPECS = (PODS, ("apps", "daemonsets"), ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
             ("batch", "jobs"))
"""The kinds whose pod spec (a pod's own, or its template's) kubesim validates."""
MAX_ID = 2**31 - 1
PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
"""The PriorityClasses every cluster has (the API server creates them at start-up)."""


def prepare_for_create(res: ResourceType, obj: dict[str, Any]) -> None:
    if res.group_resource == PDBS:
        obj["status"] = {}


def validate(res: ResourceType, obj: dict[str, Any], *, subresource: str | None = None,
             old: dict[str, Any] | None = None, minor: int = apivalidation.badvalues.JSON_FROM) -> None:
    """Raise the API server's 422 when ``obj`` (as it would be stored; ``old`` the stored one on an
    update) is invalid, as release ``1.<minor>`` words it."""
    if subresource is None:
        causes = apivalidation.causes(res, obj, old=old, minor=minor)
        if res.group_resource in POD_SPECS:
            causes += _pod_spec_ids((obj.get("spec") or {}), "spec") if res.group_resource == PODS else \
                _pod_spec_ids(((obj.get("spec") or {}).get("template") or {}).get("spec") or {}, "spec.template.spec")
        if causes:
            raise errors.invalid_object(res, (obj.get("metadata") or {}).get("name") or "", causes)
    if res.group_resource != PDBS:
        return
    causes = _pdb_status(obj.get("status") or {}) if subresource == "status" else _pdb_spec(obj.get("spec") or {})
    if causes:
        raise errors.invalid_object(res, (obj.get("metadata") or {}).get("name") or "", causes)


def _int_or_string(value: Any) -> str:
    """A bad IntOrString as field errors print it (``%#v`` of the Go struct)."""
    if isinstance(value, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{value}"}}'
    return f"intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:\"\"}}"


def _int_or_percent(value: Any, field: str) -> list[Cause]:
    """``ValidatePositiveIntOrPercent`` and ``IsNotMoreThan100Percent``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return [(field, "FieldValueInvalid",
                 f"Invalid value: {_int_or_string(value)}: must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        if value < 0:
            return [(field, "FieldValueInvalid", f"Invalid value: {value}: must be greater than or equal to 0")]
        return []
    if not _PERCENT.fullmatch(value):
        return [(field, "FieldValueInvalid", f"Invalid value: {_int_or_string(value)}: {_PERCENT_MSG}")]
    if int(value[:-1]) > 100:
        return [(field, "FieldValueInvalid", f"Invalid value: {_int_or_string(value)}: must not be greater than 100%")]
    return []


def _spec_value(spec: dict[str, Any]) -> str:
    """The internal spec as ``%#v`` prints it (pointers as addresses) in the both-set refusal."""
    def ptr(kind: str, value: Any, address: str) -> str:
        return f"({kind})(nil)" if value is None else f"({kind})({address})"

    return ("policy.PodDisruptionBudgetSpec{"
            f"MinAvailable:{ptr('*intstr.IntOrString', spec.get('minAvailable'), '0xc000a2e0a0')}, "
            f"Selector:{ptr('*v1.LabelSelector', spec.get('selector'), '0xc000a2e0c0')}, "
            f"MaxUnavailable:{ptr('*intstr.IntOrString', spec.get('maxUnavailable'), '0xc000a2e0e0')}, "
            "UnhealthyPodEvictionPolicy:"
            f"{ptr('*policy.UnhealthyPodEvictionPolicyType', spec.get('unhealthyPodEvictionPolicy'), '0xc000a2e100')}}}")


def _pdb_spec(spec: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        causes.append(("spec", "FieldValueInvalid",
                       f"Invalid value: {_spec_value(spec)}: minAvailable and maxUnavailable cannot be both set"))
    if min_available is not None:
        causes += _int_or_percent(min_available, "spec.minAvailable")
    if max_unavailable is not None:
        causes += _int_or_percent(max_unavailable, "spec.maxUnavailable")
    selector = spec.get("selector")
    if selector is not None:
        try:
            label_selector_from_spec(selector)
        except SelectorError as exc:
            causes.append(("spec.selector", "FieldValueInvalid", f"Invalid value: {exc}"))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in _POLICIES:
        causes.append(("spec.unhealthyPodEvictionPolicy", "FieldValueNotSupported",
                       f'Unsupported value: "{policy}": supported values: "{_POLICIES[0]}", "{_POLICIES[1]}"'))
    return causes


def _pdb_status(status: dict[str, Any]) -> list[Cause]:
    return [(f"status.{key}", "FieldValueInvalid", f"Invalid value: {status[key]}: must be greater than or equal to 0")
            for key in _STATUS_COUNTS if isinstance(status.get(key), int) and status[key] < 0]


def _ids(context: dict[str, Any], field: str, keys: tuple[str, ...]) -> list[Cause]:
    causes: list[Cause] = []
    for key in keys:
        value = context.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= MAX_ID:
            causes.append((f"{field}.{key}", "FieldValueInvalid",
                           f"Invalid value: {value}: must be between 0 and {MAX_ID}, inclusive"))
    return causes


def _pod_spec_ids(spec: dict[str, Any], field: str) -> list[Cause]:
    """``ValidatePodSecurityContext`` and ``ValidateSecurityContext``: the IDs of the pod's
    securityContext, then of each container's, init containers first (the API server's order)."""
    causes = _ids(spec.get("securityContext") or {}, f"{field}.securityContext", ("runAsUser", "runAsGroup", "fsGroup"))
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            if isinstance(container, dict):
                causes += _ids(container.get("securityContext") or {}, f"{field}.{kind}[{index}].securityContext",
                               ("runAsUser", "runAsGroup"))
    return causes


def admit_priority_class(res: ResourceType, obj: dict[str, Any], name: str,
                         known: Callable[[str], bool] = PRIORITY_CLASSES.__contains__) -> None:
    """The Priority admission plugin on a pod's create: its ``priorityClassName`` must name a
    PriorityClass; ``name`` is how the refusal names the pod (its ``generateName`` when the
    name is generated, as ``NewForbidden`` does); ``known`` says whether a PriorityClass exists
    (the store's: :func:`kubesim.installkinds.priority_value`)."""
    if res.group_resource != PODS:
        return
    wanted = (obj.get("spec") or {}).get("priorityClassName")
    if wanted and not known(wanted):
        raise errors.forbidden(res, name, f"no PriorityClass with name {wanted} was found")
