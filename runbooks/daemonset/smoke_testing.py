"""The optional smoke test: a pod that uses a GPU through the plugin, in one fixed namespace.

``settings.smoke_test`` gives ``image``, ``command`` (optional), ``expect`` (a line the
log must contain, default ``Test PASSED``), ``namespace`` (default ``upgradebot-smoke``:
created by the install, never by the bot, so it needs no right on namespaces),
``timeout`` (seconds, default 120) and ``gpus`` (default 1). The pod
(``gpu-smoke-test-<6 hex>``) asks for the first GPU resource, tolerates its taint, is
pinned to the node under test (by node affinity, so the scheduler still judges it; it
tolerates the cordon's taint, since a target that drains verifies a cordoned node) and
never restarts. It is deleted afterwards whatever happened, so nothing is left behind; a
cleanup that failed is said in the check. A namespace that does not exist makes the
check unknown, with the reason.

The pod's ``runtimeClassName`` (:func:`runtime_class`) is ``runtime_class`` when set, else the
RuntimeClass the target's own pods run with, if any: where ``nvidia`` is not the container
runtime's default, NVIDIA's README has GPU pods name a RuntimeClass (``nvidia``), and a smoke
pod without it gets no GPU. :func:`request_check` creates the pod as a dry run at request time,
so a class the cluster does not have (the RuntimeClass admission plugin's ``pod rejected:
RuntimeClass "x" not found``) refuses the request before anything changes.
"""

from __future__ import annotations

import secrets
from typing import Any

from runbooks.characters import shown
from runbooks.cluster import Cluster
from runbooks.cluster.resources import PODS
from runbooks.daemonset.observing import wait_for
from runbooks.engine.recording import failed, passed, unknown
from runbooks.engine.scoping import SMOKE_NAMESPACE, SMOKE_POD_PREFIX
from runbooks.engine.steps import Check, CheckStatus, Clock
from runbooks.errors import AdmissionRefused, ClusterError, Forbidden, InvalidRequest, NotFound

CONTAINER = "smoke"
CORDONED = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
MANAGED = {"app.kubernetes.io/managed-by": "upgradebot", "app.kubernetes.io/component": "smoke-test"}


def smoke_pod(spec: dict[str, Any], *, name: str, node: str | None, resources: dict[str, Any],
              **pod_fields: Any) -> dict[str, Any]:
    """The smoke-test pod: the image (and command) with ``resources``, never restarted, pinned to
    ``node`` by node affinity (so the scheduler still judges it); ``pod_fields`` join its spec."""
    container: dict[str, Any] = {"name": CONTAINER, "image": spec["image"], "resources": resources}
    command = spec.get("command")
    if command:
        container["command"] = command if isinstance(command, list) else ["sh", "-c", str(command)]
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container], **pod_fields}
    # the node under test may be cordoned (a target that drains): the pod still goes there
    pod_spec["tolerations"] = [*pod_fields.get("tolerations", []), dict(CORDONED)]
    if node:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        pod_spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {"metadata": {"name": name, "labels": dict(MANAGED)}, "spec": pod_spec}


def pod_body(spec: dict[str, Any], *, name: str, node: str | None, resource: str,
             runtime_class: str | None = None) -> dict[str, Any]:
    """A device plugin's smoke pod: ``gpus`` of ``resource``, tolerating the taint named after it,
    with ``runtime_class`` as its ``runtimeClassName`` when given."""
    extra: dict[str, Any] = {"runtimeClassName": runtime_class} if runtime_class else {}
    return smoke_pod(spec, name=name, node=node, resources={"limits": {resource: str(int(spec.get("gpus", 1)))}},
                     tolerations=[{"key": resource, "operator": "Exists", "effect": "NoSchedule"}], **extra)


def runtime_class(spec: dict[str, Any], ds: dict[str, Any]) -> str | None:
    """The smoke pod's RuntimeClass: the policy's ``runtime_class``, else the one the DaemonSet
    ``ds``'s pod template names, else none."""
    configured = spec.get("runtime_class")
    if configured:
        return str(configured)
    own = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("runtimeClassName")
    return str(own) if own else None


def request_check(cluster: Cluster, spec: dict[str, Any], ds: dict[str, Any], *, resource: str) -> list[Check]:
    """At request time, when the smoke pod will name a RuntimeClass: the pod created as a dry run in
    its namespace, so the API server's refusal (no such RuntimeClass) fails the request. Nothing to
    say when no class applies, when there is no image, or when the namespace or the bot's right
    is missing (verify and the request's RBAC check say those)."""
    klass = runtime_class(spec, ds)
    if not klass or not spec.get("image"):
        return []
    namespace = str(spec.get("namespace") or SMOKE_NAMESPACE)
    body = pod_body(spec, name=f"{SMOKE_POD_PREFIX}{secrets.token_hex(3)}", node=None, resource=resource,
                    runtime_class=klass)
    try:
        cluster.create(PODS, body, namespace=namespace, dry_run=True)
    except (NotFound, Forbidden):  # no namespace, or no RBAC: verify and the request's RBAC check say those
        return []
    except (AdmissionRefused, InvalidRequest) as exc:
        origin = "steps.smoke_test.runtime_class" if spec.get("runtime_class") else "the plugin's pod template"
        return [failed("smoke-test", f"the smoke pod with runtimeClassName {klass} (from {origin}) would be refused: "
                       f"{shown(exc.detail or str(exc))}: create that RuntimeClass (NVIDIA's README: handler nvidia) "
                       "or set steps.smoke_test.runtime_class to one the cluster has")]
    return []


def pending_reason(pod: dict[str, Any]) -> str:
    """``: <the scheduler's message>`` of a pod that is not scheduled or not ready, else ""."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "False" and cond.get("message"):
            return f": {shown(str(cond['message'])[:200])}"
    return ""


def smoke_test(
    cluster: Cluster, spec: dict[str, Any], *, node: str | None, resource: str, clock: Clock, interval: float,
    runtime_class: str | None = None,
) -> Check:
    """Run the smoke-test pod on ``node`` (or anywhere), with ``runtime_class`` when given, and judge
    its log; always clean up."""
    scope = node or "any GPU node"
    if not spec.get("image"):
        return unknown("smoke-test", "smoke_test has no image: set smoke_test.image in the policy", scope)
    namespace = str(spec.get("namespace") or SMOKE_NAMESPACE)
    name = f"{SMOKE_POD_PREFIX}{secrets.token_hex(3)}"
    created, cleanup_error = False, ""
    try:
        cluster.create(PODS, pod_body(spec, name=name, node=node, resource=resource, runtime_class=runtime_class),
                       namespace=namespace)
        created = True
        check = _run(cluster, spec, namespace=namespace, name=name, clock=clock, interval=interval, scope=scope,
                     runtime_class=runtime_class)
    except NotFound as exc:
        check = unknown("smoke-test", f"cannot run the smoke test: namespace {namespace} does not exist (the "
                        f"install creates it; or set smoke_test.namespace): {exc}", scope)
    except Forbidden as exc:  # also what a missing namespace looks like to a least-privilege bot
        check = unknown("smoke-test", f"cannot run the smoke test in namespace {namespace} (it must exist, and the "
                        f"bot's Role there must let it create, get and delete pods and read their logs): {exc}", scope)
    except ClusterError as exc:
        check = failed("smoke-test", f"the smoke test could not run: {exc}", scope)
    finally:
        if created:
            try:
                cluster.delete(PODS, name, namespace=namespace)
            except NotFound:
                pass
            except ClusterError as exc:
                cleanup_error = str(exc)
    evidence = {**check.evidence, "namespace": namespace, "pod": name, "cleaned_up": created and not cleanup_error}
    if cleanup_error:
        return check.model_copy(update={
            "status": CheckStatus.WARN if check.status is CheckStatus.PASS else check.status,
            "detail": f"{check.detail}; its pod {namespace}/{name} was not deleted ({cleanup_error}): delete it by hand",
            "evidence": evidence,
        })
    return check.model_copy(update={"evidence": evidence})


def _run(
    cluster: Cluster, spec: dict[str, Any], *, namespace: str, name: str, clock: Clock, interval: float, scope: str,
    runtime_class: str | None,
) -> Check:
    expect = str(spec.get("expect", "Test PASSED"))
    timeout = float(spec.get("timeout", 120))
    last: dict[str, Any] = {}

    def finished() -> dict[str, Any] | None:
        nonlocal last
        last = cluster.get(PODS, name, namespace)
        return last if (last.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    pod = wait_for(clock, timeout=timeout, interval=interval, probe=finished)
    evidence: dict[str, Any] = {"image": spec["image"], "node": (last.get("spec") or {}).get("nodeName")}
    if runtime_class:
        evidence["runtime_class"] = runtime_class
    ran = f"{spec['image']} (runtime class {runtime_class})" if runtime_class else spec["image"]
    if pod is None:
        phase = (last.get("status") or {}).get("phase", "unknown")
        return failed("smoke-test", f"the smoke-test pod did not finish in {timeout:g}s (phase {phase}{pending_reason(last)})",
                      scope, **evidence)
    log = cluster.pod_log(namespace, name, container=CONTAINER, tail_lines=200)
    phase = pod["status"]["phase"]
    evidence.update(phase=phase, log_tail=log.strip().splitlines()[-5:])
    if phase == "Succeeded" and expect in log:
        return passed("smoke-test", f"{ran} ran on {evidence['node']} and logged {expect!r}", scope, **evidence)
    said = "without logging" if expect not in log else "although it logged"
    return failed("smoke-test", f"the smoke-test pod {phase} on {evidence['node']} {said} {expect!r}", scope, **evidence)
