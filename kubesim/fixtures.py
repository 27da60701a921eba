"""Objects the scenarios load in a settled state: nodes, namespaces, DaemonSets with their
revisions and running pods, workload pods. Built directly as stored dicts (fast enough
for thousands of nodes); pods of one template share their unchanging spec parts, admitted
once as the API server's admission chain admits a pod (:class:`Admitted`)."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any

from kubesim import admission
from kubesim import podstatus as ps
from kubesim.daemonsets import node_name_affinity, owner_ref, template_generation
from kubesim.nodestatus import node_conditions
from kubesim.resources import git_version
from kubesim.revisions import HASH_LABEL, TEMPLATE_GENERATION, compute_hash, revision_data
from kubesim.validation import PRIORITY_CLASSES

NFD_GPU = "feature.node.kubernetes.io/pci-10de.present"
generate_name = admission.generate_name


def node_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 4}"


def pod_cidr(index: int) -> str:
    return f"10.{244 - index // 256}.{index % 256}.0/24"


def pod_ip(index: int, slot: int) -> str:
    return pod_cidr(index).split("/")[0].rsplit(".", 1)[0] + f".{slot}"


def make_node(name: str, index: int, minor: int, *, gpus: int, created: str,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Ready node as its kubelet registers it; ``labels`` are added to the kubelet's own
    (e.g. failure-domain labels a cloud provider sets)."""
    extra, labels = labels, {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
    }
    cpu = "96" if gpus else "32"
    capacity = {"cpu": cpu, "ephemeral-storage": "203056560Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "1056479168Ki" if gpus else "131912840Ki", "pods": "110"}
    allocatable = {**capacity, "ephemeral-storage": "187136925387",
                   "memory": "1056376768Ki" if gpus else "131810440Ki"}
    if gpus:
        labels.update({NFD_GPU: "true", "nvidia.com/gpu.present": "true"})
        capacity["nvidia.com/gpu"] = allocatable["nvidia.com/gpu"] = str(gpus)
    if extra:
        labels.update(extra)
    cidr = pod_cidr(index)
    seed = uuid.uuid5(uuid.NAMESPACE_DNS, name)
    info = {
        "architecture": "amd64", "bootID": str(uuid.uuid5(seed, "boot")), "containerRuntimeVersion": "containerd://1.7.13",
        "kernelVersion": "5.15.0-105-generic", "kubeletVersion": git_version(minor), "machineID": seed.hex,
        "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS", "systemUUID": str(uuid.uuid5(seed, "system")),
    }
    if minor <= 30:
        info["kubeProxyVersion"] = git_version(minor)
    return {
        "metadata": {
            "name": name, "labels": labels, "creationTimestamp": created,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "addresses": [{"address": node_ip(index), "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": node_conditions(created, heartbeat=created),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": info,
        },
    }


def make_namespace(name: str, created: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}, "creationTimestamp": created},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent", "resources": extra.pop("resources", {}),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", **extra,
    }


def pod_spec(containers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "containers": containers, "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "restartPolicy": "Always",
        "schedulerName": "default-scheduler", "securityContext": {}, "serviceAccount": extra.get("serviceAccountName", "default"),
        "serviceAccountName": "default", "terminationGracePeriodSeconds": 30, **extra,
    }


def make_daemonset(ns: str, name: str, labels: dict[str, str], spec: dict[str, Any], created: str,
                   *, ds_labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": str(uuid.uuid4()), "generation": 1,
                            "creationTimestamp": created, "annotations": {TEMPLATE_GENERATION: "1"}}
    if ds_labels:
        meta["labels"] = ds_labels
    return {
        "metadata": meta,
        "spec": {
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": spec},
            "updateStrategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}, "type": "RollingUpdate"},
        },
    }


def revision_for(ds: dict[str, Any], created: str) -> dict[str, Any]:
    hash_ = compute_hash(ds["spec"]["template"])
    m = ds["metadata"]
    return {
        "metadata": {"name": f"{m['name']}-{hash_}", "namespace": m["namespace"], "creationTimestamp": created,
                     "labels": {**ds["spec"]["template"]["metadata"]["labels"], HASH_LABEL: hash_},
                     "annotations": dict(m.get("annotations") or {}), "ownerReferences": [owner_ref(ds)]},
        "data": revision_data(ds["spec"]["template"]),
        "revision": 1,
    }


def settle_daemonset(ds: dict[str, Any], count: int) -> None:
    ds["status"] = {"currentNumberScheduled": count, "desiredNumberScheduled": count, "numberMisscheduled": 0,
                    "numberReady": count, "observedGeneration": 1}
    if count:
        ds["status"].update(updatedNumberScheduled=count, numberAvailable=count)


class DaemonPods:
    """Settled pods of one DaemonSet, sharing the spec parts that never differ."""

    def __init__(self, ds: dict[str, Any], minor: int) -> None:
        from kubesim.daemonsets import daemon_tolerations

        self.ds, self.minor = ds, minor
        self.hash = compute_hash(ds["spec"]["template"])
        template = ds["spec"]["template"]
        proto = dict(template["spec"])
        proto["tolerations"] = daemon_tolerations(proto)
        self.admitted = Admitted(proto)
        self.proto = self.admitted.proto
        self.labels = {**template["metadata"]["labels"], HASH_LABEL: self.hash,
                       "pod-template-generation": template_generation(ds)}
        self.owner = [owner_ref(ds)]
        self.qos = ps.qos_class(self.proto)
        self.names: set[str] = set()

    def pod(self, node: str, index: int, slot: int, started: dt.datetime) -> dict[str, Any]:
        name = generate_name(self.ds["metadata"]["name"] + "-")
        while name in self.names:
            name = generate_name(self.ds["metadata"]["name"] + "-")
        self.names.add(name)
        when = ps.stamp(started)
        spec = self.admitted.spec()
        spec["nodeName"] = node
        spec["affinity"] = node_name_affinity(None, node)
        uid = str(uuid.uuid4())
        pod = {
            "metadata": {"name": name, "generateName": self.ds["metadata"]["name"] + "-", "namespace": self.ds["metadata"]["namespace"],
                         "uid": uid, "creationTimestamp": when, "labels": dict(self.labels), "ownerReferences": self.owner},
            "spec": spec,
        }
        host = node_ip(index)
        ip = host if spec.get("hostNetwork") else pod_ip(index, slot)
        pod["status"] = ps.settled_status(pod, minor=self.minor, host_ip=host, pod_ip=ip, started=started, qos=self.qos)
        return pod


TOKEN_POOL = 256
"""How many token volume names the seeded pods of one template share (see :class:`Admitted`)."""


class Admitted:
    """A pod template's spec as the admission chain leaves it, for seeding thousands of pods:
    :func:`kubesim.admission.admit_spec` once, and up to :data:`TOKEN_POOL` specs each with its own
    token volume (:func:`kubesim.admission.mount_token`), shared by the pods that draw it. A
    token volume's name only has to be unique within its pod, so pods sharing one look as
    they would in a cluster, and no pod costs more than a copy of its spec's top level."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proto = dict(spec)
        admission.admit_spec(self.proto, PRIORITY_CLASSES.get)
        self.mounted: list[dict[str, Any]] = []

    def spec(self) -> dict[str, Any]:
        """A new top-level copy of an admitted spec, token volume mounted."""
        if len(self.mounted) < TOKEN_POOL:
            mounted = dict(self.proto)
            admission.mount_token(mounted)
            self.mounted.append(mounted)
        else:
            mounted = random.choice(self.mounted)
        return dict(mounted)


_WORKLOAD_PROTOS: dict[Any, tuple[Admitted, str]] = {}


def _workload_proto(name: str, image: str, gpus: int, claims: list[dict[str, Any]] | None) -> tuple[Admitted, str]:
    """The admitted spec (minus nodeName) shared by workload pods of one shape, and its QoS class."""
    key = (name, image, gpus, repr(claims))
    hit = _WORKLOAD_PROTOS.get(key)
    if hit is not None:
        return hit
    resources: dict[str, Any] = {}
    if gpus:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"nvidia.com/gpu": str(gpus)}}
    if claims:
        resources = {"claims": [{"name": c["name"]} for c in claims]}
    extra: dict[str, Any] = {}
    if claims:
        extra["resourceClaims"] = claims
    admitted = Admitted(pod_spec([container(name, image, resources=resources)], **extra))
    if len(_WORKLOAD_PROTOS) > 256:
        _WORKLOAD_PROTOS.clear()
    hit = _WORKLOAD_PROTOS[key] = (admitted, ps.qos_class(admitted.proto))
    return hit


def workload_pod(ns: str, name: str, node: str, index: int, slot: int, image: str, started: dt.datetime, minor: int,
                 *, gpus: int = 0, labels: dict[str, str] | None = None, claims: list[dict[str, Any]] | None = None,
                 uid: str | None = None, container_name: str | None = None) -> dict[str, Any]:
    """A settled pod of a workload; pods of one shape share their unchanging spec parts."""
    admitted, qos = _workload_proto(container_name or name.split("-", 1)[0], image, gpus, claims)
    spec = admitted.spec()
    spec["nodeName"] = node
    when = ps.stamp(started)
    pod = {"metadata": {"name": name, "namespace": ns, "uid": uid or str(uuid.uuid4()), "creationTimestamp": when,
                        "labels": labels or {}}, "spec": spec}
    pod["status"] = ps.settled_status(pod, minor=minor, host_ip=node_ip(index), pod_ip=pod_ip(index, slot),
                                      started=started, qos=qos)
    return pod
