"""The smoke test of a DRA driver: a pod that gets its device through a ResourceClaim.

For a DRA kubelet plugin the device-plugin smoke test proves nothing (it asks for
``nvidia.com/gpu``, which the DRA driver does not serve). This one follows the DRA
upgrade guide: in the smoke test's namespace it creates a ResourceClaimTemplate in the
version the cluster serves (each version's request shape), asking one device of the
driver's class that asks for a GPU (:mod:`runbooks.dra.classes`: by its selectors, never by name
order; or the policy's ``smoke_test.device_class``), and a pod that uses it, pinned to the node under test and asking
no extended resource. It checks that the claim was allocated a device of the driver on
that node, that the pod logged ``expect`` (``Test PASSED``). Then the guide's negative test: a
second pod (``<name>-hold``, the same image told to ``sleep``) holds a claim of the same
template, the claim is deleted under it, and the check says what it saw (the pod kept
running; the claim stayed Terminating while reserved, was not made again, and went once the
pod was gone). Last it deletes the pod and its claim and checks the device is free again.
Everything it made is deleted whatever happened. The template and pod are named
``gpu-smoke-test-<6 hex>``, as the engine's scope allows in that namespace.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from typing import Any

from runbooks.cluster import Cluster
from runbooks.cluster.resources import PODS, Resource
from runbooks.daemonset.observing import wait_for
from runbooks.daemonset.smoke_testing import CONTAINER, MANAGED, pending_reason, smoke_pod
from runbooks.dra.classes import Chosen, choose_class
from runbooks.dra.shapes import claim_spec, pod_claim
from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.scoping import SMOKE_NAMESPACE, SMOKE_POD_PREFIX
from runbooks.engine.steps import Check, CheckStatus, Clock
from runbooks.errors import ClusterError, Forbidden, NotFound
from runbooks.inventory.plugins import drivers_by_slices, serving, template_drivers
from runbooks.inventory.reading import class_from, slice_from

POD_CLAIM = "gpu"
RELEASE_SECONDS = 30.0
"""How long the device may take to be free again once its claim is deleted."""


def pod_body(spec: dict[str, Any], *, name: str, node: str | None, template: str, v1alpha2: bool) -> dict[str, Any]:
    """A DRA driver's smoke pod: its one resource is the claim made from ``template``; with the
    spec's ``runtime_class`` (as :func:`~runbooks.daemonset.smoke_testing.runtime_class` resolved it)
    as its ``runtimeClassName``."""
    extra: dict[str, Any] = {"runtimeClassName": spec["runtime_class"]} if spec.get("runtime_class") else {}
    return smoke_pod(spec, name=name, node=node, resources={"claims": [{"name": POD_CLAIM}]},
                     resourceClaims=[pod_claim(POD_CLAIM, template, source=v1alpha2)], **extra)


def allocated(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(driver, pool, device)`` of each device allocated to a claim (v1alpha2: the driver only)."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    if results:
        return [(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in results]
    if allocation and status.get("driverName"):
        return [(status["driverName"], "", "")]
    return []


def device_class_for(cluster: Cluster, drivers: list[str], chosen: dict[str, Resource],
                     named: str | None = None) -> Chosen:
    """The device class (v1alpha2: resource class) the claim asks a device of: ``named`` (the
    policy's ``smoke_test.device_class``) if the cluster has it, else the one whose selectors ask a
    GPU of one of ``drivers`` (:func:`runbooks.dra.classes.choose_class`; never by name order)."""
    kind = next((k for k in ("DeviceClass", "ResourceClass") if k in chosen), None)
    if kind is None:
        return Chosen(None, problem="this cluster serves no DeviceClass API")
    classes = [{**obj, "kind": kind} for obj in cluster.list_objects(chosen[kind])]
    if named:
        if any((c.get("metadata") or {}).get("name") == named for c in classes):
            return Chosen(named, f"{named}: the policy's smoke_test.device_class")
        return Chosen(None, problem=f"the policy's smoke_test.device_class {named} is no {kind} of this cluster")
    return choose_class(classes, drivers)


def request_check(cluster: Cluster, spec: dict[str, Any], ds: dict[str, Any], *, nodes: Iterable[str],
                  container: str | None) -> list[Check]:
    """At request time, for a DRA driver's smoke test: the class its claim would ask a device of
    (:func:`device_class_for`, for the drivers ``container`` serves: those its pod template names,
    else those with slices on its ``nodes``), so a class that is ambiguous, missing or absent fails
    the request in one line before anything changes. Nothing to say without an image, or when no
    driver of the DaemonSet is known (verify says so)."""
    if not spec.get("image"):
        return []
    chosen = cluster.dra_apis().chosen
    if "ResourceClaimTemplate" not in chosen:
        return []
    named = str(spec.get("device_class") or "") or None
    classes = [class_from(o, k) for k in ("DeviceClass", "ResourceClass") if k in chosen
               for o in cluster.list_objects(chosen[k])]
    named_drivers = template_drivers(ds, {d for c in classes for d in c.drivers})
    if not named_drivers and "ResourceSlice" in chosen:
        slice_nodes: dict[str, set[str]] = {}
        for found in cluster.list_objects(chosen["ResourceSlice"], project=slice_from):
            if found.node:
                slice_nodes.setdefault(found.driver, set()).add(found.node)
        named_drivers = drivers_by_slices(set(nodes), slice_nodes)
    drivers = list(serving(ds, named_drivers, container=container))
    if not drivers and not named:
        return []
    klass = device_class_for(cluster, drivers, chosen, named)
    if klass.name is None:
        return [failed("smoke-test", f"the DRA smoke test could not choose its device class: {klass.problem}")]
    return []


def dra_smoke_test(cluster: Cluster, spec: dict[str, Any], *, node: str | None, drivers: list[str], clock: Clock,
                   interval: float) -> Check:
    """Run the DRA smoke test on ``node`` (or anywhere); always clean up."""
    scope = node or "any GPU node"
    if not spec.get("image"):
        return unknown("smoke-test", "smoke_test has no image: set smoke_test.image in the policy", scope)
    chosen = cluster.dra_apis().chosen
    if "ResourceClaimTemplate" not in chosen or "ResourceClaim" not in chosen:
        return unknown("smoke-test", "this cluster serves no ResourceClaimTemplate API: the DRA smoke test "
                       "cannot run", scope)
    klass = device_class_for(cluster, drivers, chosen, str(spec.get("device_class") or "") or None)
    if klass.name is None:
        return unknown("smoke-test", f"the DRA smoke test did not run: {klass.problem}", scope)
    device_class = klass.name
    namespace = str(spec.get("namespace") or SMOKE_NAMESPACE)
    name = f"{SMOKE_POD_PREFIX}{secrets.token_hex(3)}"
    templates, claims = chosen["ResourceClaimTemplate"], chosen["ResourceClaim"]
    made: list[tuple[Resource, str]] = []
    try:
        cluster.create(templates, {"metadata": {"name": name, "labels": dict(MANAGED)},
                                   "spec": {"spec": claim_spec(templates.version, device_class, 1, POD_CLAIM)}},
                       namespace=namespace)
        made.append((templates, name))
        cluster.create(PODS, pod_body(spec, name=name, node=node, template=name,
                                      v1alpha2=templates.version == "v1alpha2"), namespace=namespace)
        made.append((PODS, name))
        check = _run(cluster, spec, namespace=namespace, name=name, claims=claims, drivers=drivers,
                     device_class=device_class, clock=clock, interval=interval, scope=scope, made=made)
    except NotFound as exc:
        check = unknown("smoke-test", f"cannot run the DRA smoke test: namespace {namespace} does not exist (the "
                        f"install creates it; or set smoke_test.namespace): {exc}", scope)
    except Forbidden as exc:
        check = unknown("smoke-test", f"cannot run the DRA smoke test in namespace {namespace} (the bot's Role "
                        "there must let it create, get and delete pods and resourceclaimtemplates, and get, list "
                        f"and delete resourceclaims): {exc}", scope)
    except ClusterError as exc:
        check = failed("smoke-test", f"the DRA smoke test could not run: {exc}", scope)
    left = _clean_up(cluster, made, namespace)
    evidence = {**check.evidence, "namespace": namespace, "pod": name, "device_class": device_class,
                "device_class_why": klass.why, "cleaned_up": not left}
    if left:
        return check.model_copy(update={
            "status": CheckStatus.WARN if check.status is CheckStatus.PASS else check.status,
            "detail": f"{check.detail}; not deleted: {', '.join(left)}: delete by hand", "evidence": evidence})
    return check.model_copy(update={"evidence": evidence})


def _claim_of(cluster: Cluster, pod: dict[str, Any], claims: Resource, namespace: str) -> dict[str, Any] | None:
    """The claim generated for the pod (its status names it; 1.27 names it ``<pod>-<claim>``)."""
    for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if entry.get("name") == POD_CLAIM and entry.get("resourceClaimName"):
            return cluster.get(claims, entry["resourceClaimName"], namespace)
    try:
        return cluster.get(claims, f"{pod['metadata']['name']}-{POD_CLAIM}", namespace)
    except NotFound:
        return None


def _run(cluster: Cluster, spec: dict[str, Any], *, namespace: str, name: str, claims: Resource, drivers: list[str],
         device_class: str, clock: Clock, interval: float, scope: str, made: list[tuple[Resource, str]]) -> Check:
    expect = str(spec.get("expect", "Test PASSED"))
    timeout = float(spec.get("timeout", 120))
    last: dict[str, Any] = {}
    devices: list[tuple[str, str, str]] = []

    def finished() -> dict[str, Any] | None:
        nonlocal last, devices
        last = cluster.get(PODS, name, namespace)
        if not devices:
            claim = _claim_of(cluster, last, claims, namespace)
            if claim is not None:
                if (claims, claim["metadata"]["name"]) not in made:
                    made.insert(0, (claims, claim["metadata"]["name"]))
                devices = allocated(claim)
        return last if (last.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    pod = wait_for(clock, timeout=timeout, interval=interval, probe=finished)
    node = (last.get("spec") or {}).get("nodeName")
    evidence: dict[str, Any] = {"image": spec["image"], "node": node, "devices": [list(d) for d in devices]}
    if pod is None:
        phase = (last.get("status") or {}).get("phase", "unknown")
        return failed("smoke-test", f"the DRA smoke-test pod did not finish in {timeout:g}s (phase {phase}"
                      f"{pending_reason(last)}); its claim of {device_class} was "
                      f"{'allocated' if devices else 'never allocated'}", scope, **evidence)
    if not devices:
        return failed("smoke-test", f"the DRA smoke-test pod {pod['status']['phase']} but its claim of "
                      f"{device_class} shows no allocated device", scope, **evidence)
    wrong = [d for d in devices if d[0] not in drivers]
    if wrong:
        return failed("smoke-test", f"the claim was allocated devices of another driver: {wrong}", scope, **evidence)
    log = cluster.pod_log(namespace, name, container=CONTAINER, tail_lines=200)
    phase = pod["status"]["phase"]
    evidence.update(phase=phase, log_tail=log.strip().splitlines()[-5:])
    if not (phase == "Succeeded" and expect in log):
        said = "without logging" if expect not in log else "although it logged"
        return failed("smoke-test", f"the DRA smoke-test pod {phase} on {node} {said} {expect!r}", scope, **evidence)
    seen = _claim_deleted_under_a_running_pod(cluster, spec, namespace=namespace, name=name, claims=claims,
                                               node=node, made=made, clock=clock, interval=interval, timeout=timeout)
    evidence["negative"] = seen
    if seen["problem"]:
        return failed("smoke-test", f"the negative test (a claim deleted under a running pod): {seen['problem']}",
                      scope, **evidence)
    released = _release(cluster, namespace, name, claims, devices, made, clock=clock, interval=interval)
    if released:
        return failed("smoke-test", f"{released} still allocated {RELEASE_SECONDS:g}s after the smoke test's claim "
                      "was deleted", scope, **evidence)
    shown = ", ".join(d[2] or d[0] for d in devices)
    return passed("smoke-test", f"{spec['image']} got {shown} of {device_class} through a claim on {node}, logged "
                  f"{expect!r}, and the device was free again once the claim was deleted; a claim deleted under a "
                  f"running pod: {seen['said']}", scope, **evidence)


def _claim_deleted_under_a_running_pod(cluster: Cluster, spec: dict[str, Any], *, namespace: str, name: str,
                                       claims: Resource, node: str | None, made: list[tuple[Resource, str]],
                                       clock: Clock, interval: float, timeout: float) -> dict[str, Any]:
    """The guide's negative test: a pod holding a claim of the same template (told to ``sleep``, so it
    keeps running) has its claim deleted. Kubernetes keeps the claim, ``deletionTimestamp``-ed, while
    it is reserved (its ``delete-protection`` finalizer), makes the pod no other one, and removes it
    once the pod is gone. What was seen is reported: ``said`` (one line) and ``problem`` ("" unless
    the pod stopped or the claim outlived its pod)."""
    hold = f"{name}-hold"
    body = pod_body({**spec, "command": ["sleep", "infinity"]}, name=hold, node=node, template=name,
                    v1alpha2=claims.version == "v1alpha2")
    cluster.create(PODS, body, namespace=namespace)
    made.append((PODS, hold))
    out: dict[str, Any] = {"pod": hold, "claim": None, "said": "", "problem": ""}

    def holding() -> tuple[dict[str, Any], dict[str, Any]] | None:
        pod = cluster.get(PODS, hold, namespace)
        claim = _claim_of(cluster, pod, claims, namespace)
        if (pod.get("status") or {}).get("phase") != "Running" or claim is None:
            return None
        return (pod, claim) if pod["metadata"]["uid"] in _reserved(claim) and allocated(claim) else None

    held = wait_for(clock, timeout=timeout, interval=interval, probe=holding)
    if held is None:
        out["problem"] = f"the pod {hold} did not run with an allocated claim in {timeout:g}s"
        return out
    pod, claim = held
    uid, claim_name = pod["metadata"]["uid"], claim["metadata"]["name"]
    out["claim"] = claim_name
    made.insert(0, (claims, claim_name))
    cluster.delete(claims, claim_name, namespace=namespace)

    def after_delete() -> dict[str, Any] | None:
        try:
            live = cluster.get(claims, claim_name, namespace)
        except NotFound:
            return {}
        return live if live["metadata"].get("deletionTimestamp") else None

    live = wait_for(clock, timeout=RELEASE_SECONDS, interval=interval, probe=after_delete) or {}
    phase = (cluster.get(PODS, hold, namespace).get("status") or {}).get("phase")
    others = sorted(c["metadata"]["name"] for c in cluster.list_objects(claims)
                    if c["metadata"]["name"] != claim_name and c["metadata"].get("namespace") == namespace
                    and any(o.get("uid") == uid for o in c["metadata"].get("ownerReferences") or []))
    seen = ["pod kept running" if phase == "Running" else f"the pod stopped ({phase})"]
    if not live:
        seen.append("the claim was removed at once, though reserved (no delete protection)")
    elif uid in _reserved(live):
        seen.append("claim stayed Terminating while reserved")
    else:
        seen.append("claim stayed Terminating, no longer reserved")
    made[:0] = [(claims, other) for other in others]
    with contextlib.suppress(NotFound):
        cluster.delete(PODS, hold, namespace=namespace, grace_seconds=0)

    def gone() -> bool | None:
        try:
            cluster.get(claims, claim_name, namespace)
        except NotFound:
            return True
        return None

    removed = bool(wait_for(clock, timeout=RELEASE_SECONDS, interval=interval, probe=gone))
    if live:
        seen.append("removed after the pod" if removed else f"still there {RELEASE_SECONDS:g}s after the pod was "
                    "deleted")
    seen.append(f"a new claim was made for the pod ({', '.join(others)})" if others else "no new claim was made")
    out["said"] = "; ".join(seen)
    if phase != "Running" or not removed:
        out["problem"] = out["said"]
    return out


def _reserved(claim: dict[str, Any]) -> list[str]:
    return [str(r.get("uid", "")) for r in (claim.get("status") or {}).get("reservedFor") or []]


def _release(cluster: Cluster, namespace: str, name: str, claims: Resource, devices: list[tuple[str, str, str]],
             made: list[tuple[Resource, str]], *, clock: Clock, interval: float) -> str:
    """Delete the pod and its claim; "" once no claim holds the devices any more, else what still does."""
    for resource, what in [m for m in made if m[0] in (PODS, claims)]:
        with contextlib.suppress(NotFound):
            cluster.delete(resource, what, namespace=namespace, grace_seconds=0 if resource is PODS else None)
        made.remove((resource, what))
    wanted = {d for d in devices if d[2]}
    holders: list[str] = []

    def free() -> bool | None:
        nonlocal holders
        holders = [f"{c['metadata'].get('namespace')}/{c['metadata']['name']}"
                   for c in cluster.list_objects(claims) if wanted & set(allocated(c))]
        return True if not holders else None

    if not wanted:
        return ""
    if wait_for(clock, timeout=RELEASE_SECONDS, interval=interval, probe=free):
        return ""
    return f"{', '.join(sorted(d[2] for d in wanted))} (held by {', '.join(holders)})"


def _clean_up(cluster: Cluster, made: list[tuple[Resource, str]], namespace: str) -> list[str]:
    """Delete what is left (pod first, then claim, then template); what could not be deleted."""
    order = sorted(made, key=lambda m: {"Pod": 0, "ResourceClaim": 1}.get(m[0].kind, 2))
    left = []
    for resource, name in order:
        try:
            cluster.delete(resource, name, namespace=namespace)
        except NotFound:
            pass
        except ClusterError as exc:
            left.append(f"{resource.kind} {namespace}/{name} ({exc})")
    return left
