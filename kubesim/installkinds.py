"""What the API server does to the kinds an install writes besides its workloads.

- Secrets: ``type`` defaults to ``Opaque``; ``stringData`` is merged into ``data`` (base64)
  on every write and never stored, as the Secret's conversion does.
- Services: the defaults of ``SetDefaults_Service`` (type ``ClusterIP``, ``sessionAffinity``,
  each port's protocol and ``targetPort``, the IP family fields), and a cluster IP from the
  service CIDR (``10.96.0.0/12``), unique among Services; one asked for must be free and
  in the range, or the create is refused as the IP allocator refuses it.
- Jobs: their defaults and generated selector (:func:`kubesim.batchjobs.prepare_job`).
- PriorityClasses: the API server's built-in ``system-node-critical`` and
  ``system-cluster-critical`` (:class:`BuiltinObjects` stores them, with the ``kubernetes``
  Service of ``default``); the Priority admission plugin resolves a pod's
  ``priorityClassName`` from the stored classes (:func:`priority_value`), so one a user
  creates admits pods, and one that does not exist refuses them.
- RuntimeClasses: the RuntimeClass admission plugin refuses a pod whose ``runtimeClassName``
  names no stored class (``pod rejected: RuntimeClass "x" not found``, 403, as
  ``plugin/pkg/admission/runtimeclass`` does); a class's ``overhead`` and ``scheduling``
  are not applied to the pod.
"""

from __future__ import annotations

import base64
import ipaddress
from typing import TYPE_CHECKING, Any

from kubesim import admission, batchjobs, errors, podsecurity, validation
from kubesim.resources import ResourceType

if TYPE_CHECKING:
    from kubesim.simulation import Simulation
    from kubesim.store import Store

SECRETS = ("", "secrets")
SERVICES = ("", "services")
PRIORITY_CLASSES = ("scheduling.k8s.io", "priorityclasses")
RUNTIME_CLASSES = ("node.k8s.io", "runtimeclasses")
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
KUBERNETES_SERVICE_IP = "10.96.0.1"
_BUILTIN_CLASS_DESCRIPTION = "Used for system critical pods that must not be moved from their current node."


def secret(obj: dict[str, Any]) -> None:
    """``SetDefaults_Secret`` and the v1 conversion: ``Opaque``, ``stringData`` folded into ``data``."""
    if not obj.get("type"):
        obj["type"] = "Opaque"
    plain = obj.pop("stringData", None)
    if isinstance(plain, dict) and plain:
        data: dict[str, Any] = obj["data"] if isinstance(obj.get("data"), dict) else {}
        obj["data"] = {**data, **{str(k): base64.b64encode(str(v).encode()).decode() for k, v in plain.items()}}


def service(obj: dict[str, Any]) -> None:
    """``SetDefaults_Service``: what ``kubectl get svc -o yaml`` shows that the client never sent."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    ip = spec.get("clusterIP")
    if ip and ip != "None" and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [ip]
    if ip and spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


def _taken(store: Store) -> set[str]:
    return {str((s.get("spec") or {}).get("clusterIP")) for s in store.iter(SERVICES)}


def allocate_cluster_ip(store: Store, res: ResourceType, obj: dict[str, Any]) -> None:
    """A new Service's ``spec.clusterIP``: the one asked for if it is free, else the lowest free one."""
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict) or spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
        return
    taken = _taken(store)
    wanted = spec.get("clusterIP")
    name = (obj.get("metadata") or {}).get("name", "")
    if wanted:
        try:
            inside = ipaddress.ip_address(wanted) in SERVICE_CIDR
        except ValueError:
            inside = False
        why = None if inside else f"failed to allocate IP {wanted}: the provided IP ({wanted}) is not in the valid range. " \
            f"The range of valid IPs is {SERVICE_CIDR}"
        if inside and wanted in taken:
            why = f"failed to allocate IP {wanted}: provided IP is already allocated"
        if why:
            raise errors.invalid(res, name, [("spec.clusterIPs", f'Invalid value: []string{{"{wanted}"}}: {why}')])
        return
    for address in SERVICE_CIDR.hosts():
        if str(address) not in taken and str(address) != KUBERNETES_SERVICE_IP:
            spec["clusterIP"] = str(address)
            spec["clusterIPs"] = [str(address)]
            return
    raise errors.ApiError(500, "InternalError", "Internal error occurred: failed to allocate a serviceIP: range is full")


def priority_value(store: Store, name: str) -> int | None:
    """The value of the PriorityClass ``name`` as stored; the built-in classes always resolve."""
    stored = store.get(PRIORITY_CLASSES, "", name)
    if stored is not None:
        return int(stored.get("value") or 0)
    return validation.PRIORITY_CLASSES.get(name)


def service_account(store: Store, res: ResourceType, obj: dict[str, Any]) -> None:
    """The ServiceAccount admission plugin's lookup (``plugin/pkg/admission/serviceaccount``,
    ``Admit``): a pod naming an account its namespace lacks is refused. ``default`` is let be: the
    plugin retries it ten times while the ServiceAccount controller makes it."""
    m = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
    namespace = str(m.get("namespace") or "")
    if account != "default" and store.get(("", "serviceaccounts"), namespace, account) is None:
        raise errors.forbidden(res, str(m.get("name") or ""), f"error looking up service account {namespace}/{account}: "
                                                          f'serviceaccount "{account}" not found')


def _namespace_labels(store: Store, obj: dict[str, Any]) -> dict[str, str]:
    ns = store.get(("", "namespaces"), "", str((obj.get("metadata") or {}).get("namespace") or ""))
    return dict(((ns or {}).get("metadata") or {}).get("labels") or {})


def pod_security(store: Store, res: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None,
                 warnings: list[str]) -> None:
    """The PodSecurity admission plugin (:mod:`kubesim.podsecurity`) on a create (``old`` None) or
    an update: a pod refused by its namespace's ``enforce`` level, the ``warn`` level's warnings
    (a pod's, a workload template's), a namespace's labels refused or warned about."""
    minor = store.surface.minor
    m = obj.get("metadata") or {}
    if res.group_resource == validation.PODS:
        if old is not None and [c.get("image") for c in podsecurity.containers(obj.get("spec") or {})] == \
                [c.get("image") for c in podsecurity.containers(old.get("spec") or {})]:
            return  # isSignificantPodUpdate: only a new image is judged again
        refused, said = podsecurity.judge_pod(_namespace_labels(store, obj), m, obj.get("spec") or {}, minor=minor)
        if refused:
            raise errors.forbidden(res, str(m.get("name") or ""), refused)
        warnings.extend(said)
    elif res.group_resource in podsecurity.TEMPLATED:
        spec = obj.get("spec") or {}
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") \
            if res.plural == "cronjobs" else spec.get("template")
        if isinstance(template, dict):
            warnings.extend(podsecurity.judge_template(_namespace_labels(store, obj), template.get("metadata") or {},
                                                       template.get("spec") or {}, minor=minor))
    elif res.group_resource == ("", "namespaces"):
        before = ((old or {}).get("metadata") or {}).get("labels")
        causes = podsecurity.label_errors(before, m.get("labels"), create=old is None)
        if causes:
            raise errors.invalid(res, str(m.get("name") or ""), causes)
        if old is not None:
            pods = store.list(validation.PODS, namespace=str(m.get("name") or ""))
            warnings.extend(podsecurity.namespace_change(before, m.get("labels"), pods, name=str(m.get("name") or ""),
                                                         minor=minor))


def admit(store: Store, res: ResourceType, obj: dict[str, Any], shown: str) -> None:
    """Admission of a create: a pod's (:func:`kubesim.admission.admit_pod`, its PriorityClass and
    RuntimeClass read from the store), a Service's cluster IP. Pod Security, a validating
    plugin, runs after the object's validation (:func:`pod_security`)."""
    if res.group_resource == validation.PODS:
        service_account(store, res, obj)
    validation.admit_priority_class(res, obj, shown, known=lambda name: priority_value(store, name) is not None)
    if res.group_resource == validation.PODS:
        wanted = (obj.get("spec") or {}).get("runtimeClassName")
        if wanted and store.get(RUNTIME_CLASSES, "", str(wanted)) is None:
            raise errors.forbidden(res, shown, f'pod rejected: RuntimeClass "{wanted}" not found')
    if res.group_resource == validation.PODS:  # the default admission chain, on every pod created
        admission.admit_pod(obj, lambda name: priority_value(store, name))
    if res.group_resource == batchjobs.JOBS:
        batchjobs.prepare_job(res, obj)
    if res.group_resource == SERVICES:
        service(obj)
        allocate_cluster_ip(store, res, obj)
        service(obj)


def builtin_priority_classes() -> list[dict[str, Any]]:
    return [{"metadata": {"name": name}, "value": value, "description": _BUILTIN_CLASS_DESCRIPTION,
             "preemptionPolicy": "PreemptLowerPriority"}
            for name, value in validation.PRIORITY_CLASSES.items()]


def kubernetes_service() -> dict[str, Any]:
    """``default/kubernetes``: the API server's own Service, as every cluster has it."""
    svc = {"metadata": {"name": "kubernetes", "namespace": "default",
                        "labels": {"component": "apiserver", "provider": "kubernetes"}},
           "spec": {"clusterIP": KUBERNETES_SERVICE_IP,
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}}
    service(svc)
    return svc


class BuiltinObjects:
    """The objects the API server makes itself at start-up (PriorityClasses, the ``kubernetes`` Service)."""

    def start(self, sim: Simulation) -> None:
        store = sim.store
        classes = [c for c in builtin_priority_classes() if store.get(PRIORITY_CLASSES, "", c["metadata"]["name"]) is None]
        store.load(PRIORITY_CLASSES, classes)
        if store.get(SERVICES, "default", "kubernetes") is None:
            store.load(SERVICES, [kubernetes_service()])
