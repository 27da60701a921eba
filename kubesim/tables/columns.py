"""Column definitions and their descriptions, as the built-in printers declare them."""

from __future__ import annotations

TABLE_API_VERSION = "meta.k8s.io/v1"


INCLUDE_OBJECT_VALUES = ("None", "Object", "Metadata")


_DOC = {
    "ObjectMeta.creationTimestamp": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    "ObjectMeta.name": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "ControllerRevision.revision": "revision indicates the revision of the state represented by Data.",
    "DaemonSetSpec.selector": "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    "DaemonSetStatus.currentNumberScheduled": "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    "DaemonSetStatus.desiredNumberScheduled": "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    "DaemonSetStatus.numberAvailable": "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    "DaemonSetStatus.numberReady": "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    "DaemonSetStatus.updatedNumberScheduled": "The total number of nodes that are running updated daemon pod",
    "DeploymentSpec.selector": "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    "DeploymentStatus.availableReplicas": "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    "DeploymentStatus.updatedReplicas": "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    "Event.count": "The number of times this event has occurred.",
    "Event.firstTimestamp": "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    "Event.involvedObject": "The object that this event is about.",
    "Event.lastTimestamp": "The time at which the most recent occurrence of this event was recorded.",
    "Event.message": "A human-readable description of the status of this operation.",
    "Event.reason": "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    "Event.source": "The component reporting this event. Should be a short machine understandable string.",
    "Event.type": "Type of this event (Normal, Warning), new types could be added in the future",
    "NodeStatus.addresses": "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).",
    "NodeSystemInfo.containerRuntimeVersion": "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    "NodeSystemInfo.kernelVersion": "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    "NodeSystemInfo.kubeletVersion": "Kubelet Version reported by the node.",
    "NodeSystemInfo.osImage": "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    "ObjectReference.fieldPath": 'If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: "spec.containers{name}" (where "name" refers to the name of the container that triggered the event) or if no container name is specified "spec.containers[2]" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.',
    "PodSpec.nodeName": "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    "PodSpec.nodeSelector": "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
    "PodSpec.readinessGates": 'If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to "True" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates',
    "PodStatus.nominatedNodeName": "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
    "PodStatus.podIP": "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    "ReplicaSetSpec.replicas": "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller",
    "ReplicaSetSpec.selector": "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    "ReplicaSetStatus.readyReplicas": "readyReplicas is the number of pods targeted by this ReplicaSet with a Ready Condition.",
    "ReplicaSetStatus.replicas": "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller/#what-is-a-replicationcontroller",
    "ResourcePool.name": "Name is used to identify the pool. For node-local devices, this is often the node name, but this is not required.\n\nIt must not be longer than 253 characters and must consist of one or more DNS sub-domains separated by slashes. This field is immutable.",
    "ResourceSliceSpec.driver": "Driver identifies the DRA driver providing the capacity information. A field selector can be used to list only ResourceSlice objects with a certain driver name.\n\nMust be a DNS subdomain and should end with a DNS domain owned by the vendor of the driver. It should use only lower case characters. This field is immutable.",
    "ResourceSliceSpec.nodeName": "NodeName identifies the node which provides the resources in this pool. A field selector can be used to list only ResourceSlice objects belonging to a certain node.\n\nThis field can be used to limit access from nodes to ResourceSlices with the same node name. It also indicates to autoscalers that adding new nodes of the same type as some old node might also make new resources available.\n\nExactly one of NodeName, NodeSelector, AllNodes, and PerDeviceNodeSelection must be set. This field is immutable.",
    "v1alpha2.PodSchedulingContextSpec.selectedNode": 'SelectedNode is the node for which allocation of ResourceClaims that are referenced by the Pod and that use "WaitForFirstConsumer" allocation is to be attempted.',
    "v1alpha2.ResourceClaimSpec.allocationMode": 'Allocation can start immediately or when a Pod wants to use the resource. "WaitForFirstConsumer" is the default.',
    "v1alpha2.ResourceClaimSpec.resourceClassName": "ResourceClassName references the driver and additional parameters via the name of a ResourceClass that was created as part of the driver deployment.",
    "v1alpha2.ResourceClass.driverName": "DriverName defines the name of the dynamic resource driver that is used for allocation of a ResourceClaim that uses this class.\n\nResource drivers have a unique name in forward domain order (acme.example.com).",
}


_DOC_CONTAINERS = "Names of each container in the template."


_DOC_IMAGES = "Images referenced by each container in the template."


def _col(name: str, type_: str, description: str, *, fmt: str = "", priority: int = 0) -> dict:
    """One ``TableColumnDefinition`` (all five keys are always serialized)."""
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


_NAME_COL = _col("Name", "string", _DOC["ObjectMeta.name"], fmt="name")


_AGE_COL = _col("Age", "string", _DOC["ObjectMeta.creationTimestamp"])
