"""What an operator must fix or know before touching a plugin: rules over the inventory.

Pure functions from inventory parts to :class:`Finding` lists; each rule says what is
wrong, on which object, and the next step. ``fail`` findings make ``upgradebot inventory``
exit 1; ``warn`` findings are worth reading first; ``info`` ones say what is unknown.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from runbooks.cluster.wrapping import RBAC_HOME
from runbooks.errors import plural
from runbooks.inventory.manifests import manifest_findings
from runbooks.inventory.models import (
    DaemonSet,
    DeviceClass,
    DraInfo,
    Finding,
    Node,
    ResourceClaim,
    ResourceSlice,
)
from runbooks.owners import owner_way, puts_back


def _listing(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _device_plugin_pods(daemonsets: Sequence[DaemonSet]) -> dict[str, list[tuple[DaemonSet, str]]]:
    """``{node: [(daemonset, pod name)]}`` of the device-plugin pods."""
    index: dict[str, list[tuple[DaemonSet, str]]] = defaultdict(list)
    for ds in daemonsets:
        if ds.kind == "device-plugin":
            for pod in ds.pods:
                index[pod.node].append((ds, pod.name))
    return index


def node_findings(
    nodes: Sequence[Node], daemonsets: Sequence[DaemonSet], slices: Sequence[ResourceSlice], gpu_resources: Sequence[str]
) -> list[Finding]:
    dra_nodes = {s.node for s in slices if s.node}
    plugin_pods_on = _device_plugin_pods(daemonsets)
    out: list[Finding] = []
    for node in nodes:
        if not node.gpu_hardware:
            continue
        plugin_pods = plugin_pods_on.get(node.name, [])
        allocatable = {r: node.allocatable.get(r, 0) for r in gpu_resources}
        if not any(allocatable.values()):
            if node.name in dra_nodes and not plugin_pods:
                continue  # GPUs handed out by a DRA driver, not a device plugin
            shown = ", ".join(f"{r} capacity {node.capacity.get(r, 0)}, allocatable {a}" for r, a in allocatable.items())
            if plugin_pods:
                ds, pod = plugin_pods[0]
                step = (
                    f"read the plugin's log: kubectl -n {ds.namespace} logs {pod} (a healthy plugin logs "
                    "\"Registered device plugin for '…' with Kubelet\"); if a new image never registers, "
                    "roll the DaemonSet back"
                )
            else:
                step = (
                    "no device-plugin pod runs there: check the DaemonSet's nodeSelector and tolerations "
                    "against the node's labels and taints"
                )
            out.append(Finding(
                severity="fail", code="plugin-not-registered", object=f"node/{node.name}",
                message=f"node {node.name} has GPU hardware but no allocatable GPUs ({shown}): "
                "the device plugin has not registered with the kubelet",
                next_step=step,
            ))
            continue
        for resource, capacity in node.capacity.items():
            if 0 < allocatable.get(resource, 0) < capacity:
                out.append(Finding(
                    severity="warn", code="capacity-above-allocatable", object=f"node/{node.name}",
                    message=f"node {node.name}: {resource} capacity {capacity} but allocatable "
                    f"{allocatable[resource]}: {capacity - allocatable[resource]} GPU(s) unhealthy or withheld",
                    next_step=f"kubectl describe node {node.name}; look for unhealthy devices (XID errors) "
                    "in the plugin log and run nvidia-smi on the node",
                ))
    return out


def daemonset_findings(daemonsets: Sequence[DaemonSet]) -> list[Finding]:
    out: list[Finding] = []
    for ds in daemonsets:
        obj = f"daemonset/{ds.ref}"
        looping = sorted(p.node or p.name for p in ds.pods if p.crashloop)
        if looping:
            pod = next(p for p in ds.pods if p.crashloop)
            out.append(Finding(
                severity="fail", code="plugin-crashloop", object=obj,
                message=f"{plural(len(looping), 'pod')} of {ds.ref} are in CrashLoopBackOff on {_listing(looping)} "
                f"(image {_listing(sorted(set(pod.images.values())))})",
                next_step=f"kubectl -n {ds.namespace} logs {pod.name} --previous; roll back to the last "
                "image that worked",
            ))
        versions: dict[tuple[tuple[str, str], ...], list[str]] = defaultdict(list)
        for pod in ds.pods:
            versions[tuple(sorted(pod.images.items()))].append(pod.node or pod.name)
        if len(versions) > 1:
            parts = [
                f"{_listing(sorted(set(dict(images).values())), 2)} on {plural(len(where), 'node')} ({_listing(sorted(where), 3)})"
                for images, where in sorted(versions.items(), key=lambda kv: -len(kv[1]))
            ]
            out.append(Finding(
                severity="warn", code="mixed-plugin-versions", object=obj,
                message=f"{ds.ref} runs {len(versions)} versions: " + "; ".join(parts),
                next_step="finish or roll back the rollout in progress (upgradebot status) before "
                "starting another; with OnDelete, pods change only when deleted",
            ))
        stuck = sorted(p.node or p.name for p in ds.pods if not p.ready and not p.crashloop)
        if stuck:
            out.append(Finding(
                severity="warn", code="plugin-pods-not-ready", object=obj,
                message=f"{plural(len(stuck), 'pod')} of {ds.ref} are not Ready on {_listing(stuck)}",
                next_step=f"kubectl -n {ds.namespace} get pods -o wide; wait for them or read their events",
            ))
    return out


def class_findings(classes: Sequence[DeviceClass], daemonsets: Sequence[DaemonSet]) -> list[Finding]:
    running: set[str] = set()
    for ds in daemonsets:
        if ds.kind == "dra-kubelet-plugin" and any(p.phase == "Running" and p.ready for p in ds.pods):
            running.update(ds.drivers)
    out: list[Finding] = []
    for cls in classes:
        for driver in cls.drivers:
            if driver not in running:
                out.append(Finding(
                    severity="fail", code="class-without-plugin", object=f"{cls.kind.lower()}/{cls.name}",
                    message=f"{cls.kind} {cls.name} hands out devices of {driver}, but no kubelet plugin "
                    f"of {driver} is running: claims of this class cannot be prepared on any node",
                    next_step=_class_advice(cls, driver, running),
                ))
    return out


def _class_advice(cls: DeviceClass, driver: str, running: set[str]) -> str:
    """Repair or deploy the driver; when other drivers run, the class may name the wrong one: then the
    class is what to fix, deleted and created again (its selectors are not edited under claims)."""
    plugin = (f"find the driver's kubelet-plugin DaemonSet (kubectl get ds -A) and repair or deploy it; until then "
              f"new pods using {cls.name} stay Pending")
    if not running:
        return plugin
    return (f"the running kubelet plugins serve {', '.join(sorted(running))}: if {cls.name} misspells one, recreate "
            f"the class naming it (kubectl delete {cls.kind.lower()} {cls.name}, then apply it fixed; pods already "
            f"running keep their devices); else {plugin}")


def claim_findings(claims: Sequence[ResourceClaim]) -> list[Finding]:
    return [
        Finding(
            severity="warn", code="claim-pending", object=f"resourceclaim/{c.namespace}/{c.name}",
            message=f"ResourceClaim {c.namespace}/{c.name} is pending while pod(s) "
            f"{_listing(c.waiting_pods)} wait for it (age {c.age})",
            next_step=f"kubectl -n {c.namespace} describe pod {c.waiting_pods[0]}; check that the claim's "
            f"class ({_listing(c.classes) or 'none'}) has a running driver with free devices",
        )
        for c in claims
        if c.state == "pending" and c.waiting_pods
    ]


def gate_findings(
    dra: DraInfo, classes: Sequence[DeviceClass], slices: Sequence[ResourceSlice], claims: Sequence[ResourceClaim]
) -> list[Finding]:
    if dra.feature_gate == "unknown":
        return [Finding(
            severity="warn", code="dra-gate-unknown", object="cluster",
            message="the DynamicResourceAllocation feature gate is unknown: the API server's /metrics "
            "could not be read",
            next_step="if the API server serves /metrics, the bot's RBAC lacks the rule "
            f"{{nonResourceURLs: [/metrics], verbs: [get]}} in its ClusterRole ({RBAC_HOME})",
        )]
    objects = len(classes) + len(slices) + len(claims)
    if dra.feature_gate == "disabled" and objects:
        return [Finding(
            severity="fail", code="dra-gate-disabled", object="cluster",
            message=f"the DynamicResourceAllocation feature gate is disabled but the cluster holds "
            f"{len(classes)} class(es), {len(slices)} ResourceSlice(s) and {len(claims)} ResourceClaim(s): "
            "no claim will be allocated or prepared",
            next_step="enable the gate (--feature-gates=DynamicResourceAllocation=true) on the API server, "
            "scheduler, controller manager and kubelets before upgrading a DRA driver",
        )]
    return []


def target_findings(missing: Sequence[str]) -> list[Finding]:
    return [
        Finding(
            severity="warn", code="target-missing", object=f"daemonset/{ref}",
            message=f"the configured target {ref} does not exist on this cluster",
            next_step="fix targets in the UPGRADEBOT_CONFIG file, or check the cluster= context",
        )
        for ref in missing
    ]


def owner_findings(daemonsets: Sequence[DaemonSet]) -> list[Finding]:
    """A plugin someone else owns (:mod:`runbooks.owners`): a direct change of it does not last. GitOps and
    a foreign controller warn (a canary on it is refused); the GPU operator and Helm inform."""
    out = []
    for ds in daemonsets:
        owner = ds.owner
        if owner is None:
            continue
        out.append(Finding(
            severity="info" if owner.manager in ("operator", "helm") else "warn", code="plugin-owned",
            object=f"daemonset/{ds.ref}", message=puts_back(ds.ref, owner), next_step=owner_way(owner),
        ))
    return out


def all_findings(
    *,
    dra: DraInfo,
    nodes: Sequence[Node],
    daemonsets: Sequence[DaemonSet],
    classes: Sequence[DeviceClass],
    slices: Sequence[ResourceSlice],
    claims: Sequence[ResourceClaim],
    gpu_resources: Sequence[str],
    missing_targets: Sequence[str] = (),
    max_unavailable: str | None = None,
    every_plugin: bool = True,
) -> list[Finding]:
    """Every finding, the most severe first (``max_unavailable``: the policy's limit on a
    plugin's rolling update, None: not judged)."""
    found = [
        *manifest_findings(daemonsets, nodes, max_unavailable_limit=max_unavailable, every_plugin=every_plugin),
        *gate_findings(dra, classes, slices, claims),
        *node_findings(nodes, daemonsets, slices, gpu_resources),
        *daemonset_findings(daemonsets),
        *class_findings(classes, daemonsets),
        *claim_findings(claims),
        *target_findings(missing_targets),
        *owner_findings(daemonsets),
    ]
    order = {"fail": 0, "warn": 1, "info": 2}
    return sorted(found, key=lambda f: order[f.severity])


def by_severity(found: Sequence[Finding]) -> list[Finding]:
    """The findings, the most severe first (the order within a severity kept)."""
    order = {"fail": 0, "warn": 1, "info": 2}
    return sorted(found, key=lambda f: order[f.severity])


_MISSING_CLAIM = re.compile(r'(resourceclaim|resourceclaimtemplate) "([^"]+)" not found')


def stuck_claim_findings(
    *, waiting: Sequence[tuple[str, str, str, Sequence[str]]], claims: Sequence[ResourceClaim],
    slices: Sequence[ResourceSlice] | None, claims_served: bool,
) -> list[Finding]:
    """Pods Pending on a ResourceClaim or ResourceClaimTemplate that does not exist (the
    scheduler's ``resourceclaim "my-gpu" not found``, or a claim the pod names and the cluster
    lacks), and claims allocated on a node where their driver publishes no ResourceSlice any
    more (``slices`` None: the cluster serves no slices, nothing judged). ``waiting``: the
    Pending pods as (namespace, name, the scheduler's message, the claims they name)."""
    if not claims_served:
        return []
    out: list[Finding] = []
    existing = {(c.namespace, c.name) for c in claims}
    for ns, pod, said, named in waiting:
        found = _MISSING_CLAIM.search(said)
        if found:
            kind, name = found.group(1), found.group(2)
        else:
            name = next((n for n in named if (ns, n) not in existing), "")
            kind = "resourceclaim"
        if not name:
            continue
        what = "ResourceClaimTemplate" if kind == "resourceclaimtemplate" else "ResourceClaim"
        field = "resourceClaimTemplateName" if what == "ResourceClaimTemplate" else "resourceClaimName"
        out.append(Finding(
            severity="warn", code="claim-missing", object=f"pod/{ns}/{pod}",
            message=f"pod {ns}/{pod} is Pending on {what} {name!r}, which does not exist in {ns}"
            + (f" (the scheduler: {kind} \"{name}\" not found)" if found else ""),
            next_step=f"create the {what} {name} in {ns} (kubectl -n {ns} get {kind}s lists those there), or fix "
            f"the pod's spec.resourceClaims[].{field}; the pod is scheduled once it exists",
        ))
    if slices is None:
        return out
    served = {(s.node, s.driver) for s in slices}
    for c in claims:
        gone = sorted(d for d in c.drivers if c.node and (c.node, d) not in served)
        if c.state.startswith("allocated") and gone:
            users = _listing(c.reserved_for) or "no pod"
            out.append(Finding(
                severity="warn", code="claim-driver-gone", object=f"resourceclaim/{c.namespace}/{c.name}",
                message=f"ResourceClaim {c.namespace}/{c.name} is allocated on {c.node} to {', '.join(gone)}, which "
                f"publishes no ResourceSlice there any more (used by {users}): a pod using it cannot start there again",
                next_step=f"repair or redeploy the kubelet plugin of {', '.join(gone)} on {c.node} (kubectl get ds -A); "
                f"if it was removed on purpose, delete the pods using the claim and then the claim (kubectl -n "
                f"{c.namespace} delete resourceclaim {c.name}) so that new ones are allocated where the driver runs",
            ))
    return out
