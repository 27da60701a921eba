"""``POST .../pods/<name>/eviction``: the API server's eviction subresource
(``pkg/registry/core/pod/storage/eviction.go``).

The body is a ``policy/v1`` (or ``policy/v1beta1``) Eviction, JSON or kubectl's protobuf,
naming the pod of the URL, with optional ``deleteOptions`` (``gracePeriodSeconds``,
``preconditions``, ``propagationPolicy``, ``dryRun``) that the pod's deletion honours. Answers:

- the pod does not exist: 404 ``pods "<name>" not found``;
- the pod is Pending, Succeeded, Failed or already terminating: deleted without looking at
  budgets, 201 ``Status`` Success;
- no budget guards the pod: deleted gracefully, 201 Success;
- one budget: when its status is stale (observedGeneration behind) 429 "is still being
  processed"; when it allows no disruption 429 ``Cannot evict pod as it would violate the
  pod's disruption budget.`` with the cause ``DisruptionBudget`` "The disruption budget <name>
  needs <desired> healthy pods and has <current> currently"; otherwise its
  ``disruptionsAllowed`` is decremented and the pod recorded in ``disruptedPods`` (one status
  write, before the pod is deleted, so two quick evictions cannot both spend a budget of
  one), then the pod is deleted: 201 Success. A pod that is not Ready is deleted without
  spending the budget when the budget is met (or its ``unhealthyPodEvictionPolicy`` is
  ``AlwaysAllow``);
- more than one budget: 500 "This pod has more than one PodDisruptionBudget, which the
  eviction subresource does not support."

Before deleting, the pod gets the ``DisruptionTarget`` condition (reason
``EvictionByEvictionAPI``), as the ``PodDisruptionConditions`` feature (on in every simulated
release) has it. A dry run changes nothing.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from kubesim import errors, protowire
from kubesim import podstatus as ps
from kubesim.clock import rfc3339
from kubesim.disruption import PDBS, PODS, budgets_for, update_allowed_condition
from kubesim.simulation import Simulation

VERSIONS = ("policy/v1", "policy/v1beta1")
MAX_DISRUPTED_PODS = 2000
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
TWO_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


# ------------------------------------------------------------------ the body
def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _from_protobuf(raw: bytes) -> dict[str, Any]:
    """An Eviction from kubectl's protobuf (``runtime.Unknown`` around ``policy.Eviction``)."""
    if not raw.startswith(protowire.MAGIC):
        raise protowire.WireError("no k8s protobuf envelope")
    envelope = protowire.fields(raw[len(protowire.MAGIC):])
    type_meta = protowire.message(envelope, 1)
    body = protowire.unwrap(raw)
    meta, options = protowire.message(body, 1), protowire.message(body, 2)
    out: dict[str, Any] = {"apiVersion": protowire.text(type_meta, 1), "kind": protowire.text(type_meta, 2),
                           "metadata": {"name": protowire.text(meta, 1), "namespace": protowire.text(meta, 3)}}
    if 2 in body:
        delete: dict[str, Any] = {}
        grace = options.get(1, [None])[-1]
        if isinstance(grace, int):
            delete["gracePeriodSeconds"] = _signed(grace)
        if 2 in options:
            pre = protowire.message(options, 2)
            delete["preconditions"] = {k: protowire.text(pre, n) for n, k in ((1, "uid"), (2, "resourceVersion"))
                                       if n in pre}
        if 4 in options:
            delete["propagationPolicy"] = protowire.text(options, 4)
        runs = [v.decode() for v in options.get(5, []) if isinstance(v, bytes)]
        if runs:
            delete["dryRun"] = runs
        out["deleteOptions"] = delete
    return out


def decode(raw: bytes, content_type: str) -> dict[str, Any]:
    """The Eviction a request carries, JSON or protobuf, as a JSON-shaped dict."""
    try:
        if content_type.startswith(protowire.PROTOBUF):
            return _from_protobuf(raw)
        body = json.loads(raw or b"{}")
    except (ValueError, protowire.WireError) as exc:
        raise errors.bad_request(f"the request body is not a valid Eviction: {exc}") from None
    if not isinstance(body, dict):
        raise errors.bad_request("the request body must be a JSON object")
    return body


def _options(eviction: dict[str, Any], namespace: str, name: str, query_dry_run: bool) -> dict[str, Any]:
    """The checked DeleteOptions, the request's dry run propagated into them (``propagateDryRun``)."""
    api_version = eviction.get("apiVersion") or VERSIONS[0]
    if api_version not in VERSIONS:
        raise errors.bad_request(f"the API version in the data ({api_version}) does not match the expected "
                                 f"API version ({VERSIONS[0]})")
    if eviction.get("kind") not in (None, "", "Eviction"):
        raise errors.bad_request(f"not a Eviction object: *{api_version.partition('/')[0]}.{eviction['kind']}")
    meta = eviction.get("metadata") or {}
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
    if meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = copy.deepcopy(eviction.get("deleteOptions") or {})
    if not isinstance(options, dict):
        raise errors.bad_request("deleteOptions must be an object")
    asked = ["All"] if query_dry_run else []
    given = list(options.get("dryRun") or [])
    if given and asked and given != asked:
        raise errors.ApiError(500, "", f"Non-matching dry-run options in request and content: "
                                       f"[{' '.join(asked)}] and [{' '.join(given)}]")
    options["dryRun"] = given or asked
    return options


# ------------------------------------------------------------------ the handler
def _too_many(message: str, retry_after: int = 0) -> errors.ApiError:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": message}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return errors.ApiError(429, "TooManyRequests", BUDGET_MESSAGE, details)


def _still_processing(name: str) -> errors.ApiError:
    return _too_many(f"The disruption budget {name} is still being processed by the server.", 10)


def _forbidden(name: str, why: str) -> errors.ApiError:
    return errors.ApiError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
                           {"name": name, "group": "policy", "kind": "poddisruptionbudget"})


def evict(sim: Simulation, namespace: str, name: str, eviction: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    """Evict the pod as the API server does: the ``Status`` answered with 201, or an ApiError."""
    options = _options(eviction, namespace, name, dry_run)
    dry = "All" in options["dryRun"]
    store = sim.store
    pod = store.get(PODS, namespace, name)
    if pod is None:
        raise errors.not_found(store.storage_type(PODS), name)
    phase = (pod.get("status") or {}).get("phase")
    terminating = bool(pod["metadata"].get("deletionTimestamp"))
    if phase in ("Pending", "Succeeded", "Failed") or terminating:  # canIgnorePDB
        pinned = options
        if not terminating and phase == "Pending" and not _rv_set(options):  # shouldEnforceResourceVersion
            pinned = _with_rv(options, pod["metadata"]["resourceVersion"])
        _delete(sim, pod, pinned, dry)
        return dict(SUCCESS)

    budgets = budgets_for(store, pod)
    if len(budgets) > 1:
        raise errors.ApiError(500, "", TWO_BUDGETS)
    pin_version = False
    if budgets:
        pdb = budgets[0]
        status = pdb.get("status") or {}
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
        current, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
        if not ps.is_pod_ready(pod) and (policy == "AlwaysAllow" or (current >= desired and desired > 0)):
            pin_version = True  # an unready pod while the budget is met: deleted without spending it
        else:
            _check_and_decrement(sim, name, pdb, dry)
    deleting = _with_rv(options, pod["metadata"]["resourceVersion"]) if pin_version else options
    try:
        _delete(sim, pod, deleting, dry)
    except errors.ApiError as exc:
        if exc.code == 409 and pin_version and not _rv_set(options):
            raise _still_processing(budgets[0]["metadata"]["name"]) from None
        raise
    return dict(SUCCESS)


def _rv_set(options: dict[str, Any]) -> bool:
    return bool((options.get("preconditions") or {}).get("resourceVersion"))


def _with_rv(options: dict[str, Any], rv: str) -> dict[str, Any]:
    out = copy.deepcopy(options)
    out.setdefault("preconditions", {})["resourceVersion"] = rv
    return out


def _check_and_decrement(sim: Simulation, pod: str, pdb: dict[str, Any], dry: bool) -> None:
    """``checkAndDecrement``: refuse, or spend one disruption and record the pod (one status write)."""
    m, status = pdb["metadata"], copy.deepcopy(pdb.get("status") or {})
    name = m["name"]
    if int(status.get("observedGeneration") or 0) < int(m.get("generation") or 0):
        raise _still_processing(name)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _forbidden(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _forbidden(name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller")
    if allowed == 0:
        raise _too_many(f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} "
                              f"healthy pods and has {int(status.get('currentHealthy') or 0)} currently")
    now = rfc3339(sim.clock.now())
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        update_allowed_condition(status, now)
    if dry:
        return
    status.setdefault("disruptedPods", {})[pod] = now
    sim.store.mutate(PDBS, m["namespace"], name, lambda obj: obj.__setitem__("status", status))


def _conflict(name: str, why: str) -> errors.ApiError:
    return errors.ApiError(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": {why}',
                           {"name": name, "kind": "Pod"})


def _delete(sim: Simulation, pod: dict[str, Any], options: dict[str, Any], dry: bool) -> None:
    """``addConditionAndDeletePod``: the DisruptionTarget condition, then the (graceful) delete."""
    store, m = sim.store, pod["metadata"]
    namespace, name = m["namespace"], m["name"]
    preconditions = dict(options.get("preconditions") or {})
    if not dry:
        current = store.get(PODS, namespace, name) or pod
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != current["metadata"]["uid"]:
            raise _conflict(name, f"the UID in the precondition ({uid}) does not match the UID in record "
                                  f"({current['metadata']['uid']}). The object might have been deleted and then recreated")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise _conflict(name, f"the ResourceVersion in the precondition ({rv}) does not match the "
                                  f"ResourceVersion in record ({current['metadata']['resourceVersion']}). "
                                  "The object might have been modified")
        now = rfc3339(sim.clock.now())

        def mark(obj: dict[str, Any]) -> None:
            st = obj.setdefault("status", {})
            target = ps.condition("DisruptionTarget", True, now, "EvictionByEvictionAPI", "Eviction API: evicting")
            st["conditions"] = ps.merge_conditions(
                st.get("conditions"), [*(c for c in st.get("conditions") or [] if c.get("type") != "DisruptionTarget"),
                                       target])

        updated = store.mutate(PODS, namespace, name, mark) or current
        if rv:
            preconditions["resourceVersion"] = updated["metadata"]["resourceVersion"]
    grace = options.get("gracePeriodSeconds")
    store.delete(PODS, namespace, name, dry_run=dry, grace_seconds=None if grace is None else int(grace),
                 propagation=options.get("propagationPolicy"), preconditions=preconditions or None)
