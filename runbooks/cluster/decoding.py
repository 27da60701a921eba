"""The API server's JSON, decoded: list pages, single objects and watch events, as plain dicts.

Pure (no I/O): the adapter and the watch stream hand it the bytes they read. ``msgspec``
decodes in one pass in C, about 1.6 times as fast as ``json.loads`` on a page of 500 pods
and without its transient copies; a list page's envelope is a typed struct (its items,
the continue token, the resourceVersion), the items plain dicts of the shape the callers
read. Typed structs turned back into dicts cost more than decoding the dicts directly, so
the lists that run to thousands of objects, the cluster's pods, nodes and ResourceSlices, are
decoded straight into shapes (``decode_page(data, item=PodShape)``; :class:`PodShape`,
:class:`NodeShape`, :class:`SliceShape`): typed structs with only the fields the inventory
and the upgrade steps read, which msgspec fills skipping everything else without building it
(issue 39: at 5,000 nodes, 50,000 pods decoded in a fifth of the time, no page of them ever
in memory as dicts). The readers of :mod:`runbooks.inventory.reading` take either the shape
or the dict (a watch cache holds dicts, read as they are); tests keep the two readings equal.

Each item loses what no caller reads and servers write at length: ``metadata.managedFields``
(who set which field, often a third of an object's bytes), dropped as the page is decoded,
so lists, watch events and the watch caches holding them never keep it.

A body that is not the JSON expected raises :class:`NotDecoded` (a ``ValueError``) with
msgspec's reason; the adapter says which request it answered.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

import msgspec

T = TypeVar("T")

DROPPED = ("managedFields",)
"""``metadata`` fields no caller reads, removed from every listed or watched object."""


class NotDecoded(ValueError):
    """The body is not the JSON expected; the message is the decoder's reason."""


class _ListMeta(msgspec.Struct):
    resourceVersion: str | None = None
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Event(msgspec.Struct):
    type: str = ""
    object: dict[str, Any] | None = None


class TypedPage(msgspec.Struct, Generic[T]):
    """One page of a list: its objects (decoded as one shape, :class:`PodShape`, or as dicts:
    :data:`Page`), and the list's resourceVersion and continue token."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[T] | None = None

    @property
    def objects(self) -> list[T]:
        return self.items or []

    @property
    def token(self) -> str:
        """The continue token of the next page ("" on the last)."""
        return self.metadata.continue_ or ""

    @property
    def resource_version(self) -> str:
        return self.metadata.resourceVersion or ""


Page = TypedPage[dict[str, Any]]
"""A page whose objects are dicts."""

_PAGE = msgspec.json.Decoder(Page)
_OBJECT = msgspec.json.Decoder(dict[str, Any])
_ANY = msgspec.json.Decoder()
_EVENT = msgspec.json.Decoder(_Event)
_TYPED: dict[type[Any], msgspec.json.Decoder[Any]] = {}


@overload
def decode_page(data: bytes, *, item: None = ...) -> Page: ...


@overload
def decode_page(data: bytes, *, item: type[T]) -> TypedPage[T]: ...


def decode_page(data: bytes, *, item: type[T] | None = None) -> Page | TypedPage[T]:
    """A list answer (``{"metadata": …, "items": […]}``): its items as dicts without :data:`DROPPED`
    fields, or with ``item`` (a shape of this module) as that shape."""
    try:
        if item is not None:
            decoder = _TYPED.get(item)
            if decoder is None:
                decoder = _TYPED[item] = msgspec.json.Decoder(TypedPage[item])  # type: ignore[valid-type]
            typed: TypedPage[T] = decoder.decode(data)
            return typed
        page = _PAGE.decode(data)
    except msgspec.DecodeError as exc:
        raise NotDecoded(str(exc)) from exc
    for obj in page.items or ():
        lean(obj)
    return page


def decode_object(data: bytes) -> dict[str, Any]:
    """A JSON object (one resource, a Status, ``/version``)."""
    try:
        return _OBJECT.decode(data)
    except msgspec.DecodeError as exc:
        raise NotDecoded(str(exc)) from exc


def decode_json(data: bytes) -> Any:
    """Any JSON value (a write's answer, which may be empty or not an object)."""
    try:
        return _ANY.decode(data)
    except msgspec.DecodeError as exc:
        raise NotDecoded(str(exc)) from exc


def decode_event(line: bytes) -> dict[str, Any]:
    """One line of a watch: ``{"type", "object"}``, the object without :data:`DROPPED` fields."""
    try:
        event = _EVENT.decode(line)
    except msgspec.DecodeError as exc:
        raise NotDecoded(str(exc)) from exc
    if event.object is not None and event.type != "ERROR":
        lean(event.object)
    return {"type": event.type, "object": event.object if event.object is not None else {}}


def lean(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without the :data:`DROPPED` metadata fields (changed in place, and returned)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for name in DROPPED:
            meta.pop(name, None)
    return obj


# ------------------------------------------------------------------------ shapes
class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """The fields of an object some caller reads, by their Kubernetes names; the rest skipped.
    Leaves the callers read tolerantly (``or 0``, ``or ""``) are left untyped (``Any``), so an
    odd value is theirs to judge, not a reason to refuse the whole list."""


class OwnerShape(_Shape):
    uid: Any = None
    controller: Any = None


class MetaShape(_Shape):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    labels: dict[str, Any] | None = None
    owner_references: list[OwnerShape] | None = None
    deletion_timestamp: Any = None


class ResourcesShape(_Shape):
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class ContainerShape(_Shape):
    name: Any = None
    image: Any = None
    resources: ResourcesShape | None = None


class ClaimSourceShape(_Shape):
    resource_claim_name: Any = None


class PodClaimShape(_Shape):
    """``spec.resourceClaims[]`` (its ``source`` before 1.31) and ``status.resourceClaimStatuses[]``."""

    name: Any = None
    resource_claim_name: Any = None
    resource_claim_template_name: Any = None
    source: ClaimSourceShape | None = None


class FieldRequirementShape(_Shape):
    key: Any = None
    operator: Any = None
    values: list[Any] | None = None


class NodeTermShape(_Shape):
    match_fields: list[FieldRequirementShape] | None = None


class NodeSelectorShape(_Shape):
    node_selector_terms: list[NodeTermShape] | None = None


class NodeAffinityShape(_Shape):
    required_during_scheduling_ignored_during_execution: NodeSelectorShape | None = None


class AffinityShape(_Shape):
    """The required node affinity a DaemonSet pins its pods with (``matchFields`` on ``metadata.name``)."""

    node_affinity: NodeAffinityShape | None = None


class PodSpecShape(_Shape):
    node_name: Any = None
    affinity: AffinityShape | None = None
    containers: list[ContainerShape] | None = None
    resource_claims: list[PodClaimShape] | None = None


class ConditionShape(_Shape):
    type: Any = None
    status: Any = None
    reason: Any = None
    message: Any = None


class WaitingShape(_Shape):
    reason: Any = None


class RunningShape(_Shape):
    started_at: Any = None


class StateShape(_Shape):
    waiting: WaitingShape | None = None
    running: RunningShape | None = None


class ContainerStatusShape(_Shape):
    name: Any = None
    restart_count: Any = None
    image_id: Any = msgspec.field(default=None, name="imageID")
    state: StateShape | None = None


class PodStatusShape(_Shape):
    phase: Any = None
    conditions: list[ConditionShape] | None = None
    container_statuses: list[ContainerStatusShape] | None = None
    resource_claim_statuses: list[PodClaimShape] | None = None


class PodShape(_Shape):
    """A pod as the inventory and the upgrade steps read it: who it is, whose, where, what it
    requests and names, and how its containers are."""

    metadata: MetaShape | None = None
    spec: PodSpecShape | None = None
    status: PodStatusShape | None = None


class TaintShape(_Shape):
    key: Any = None
    value: Any = None
    effect: Any = None


class NodeSpecShape(_Shape):
    unschedulable: Any = None
    taints: list[TaintShape] | None = None


class NodeStatusShape(_Shape):
    capacity: dict[str, Any] | None = None
    allocatable: dict[str, Any] | None = None
    conditions: list[ConditionShape] | None = None
    node_info: dict[str, Any] | None = None


class NodeShape(_Shape):
    """A node as the inventory reads it: name, labels, taints, GPU capacity, conditions, nodeInfo
    (not its images, addresses, annotations)."""

    metadata: MetaShape | None = None
    spec: NodeSpecShape | None = None
    status: NodeStatusShape | None = None


class CountedShape(_Shape):
    """An item only counted: its fields all skipped."""


class PoolShape(_Shape):
    name: Any = None
    generation: Any = None
    resource_slice_count: Any = None


class SliceSpecShape(_Shape):
    node_name: Any = None
    driver: Any = None
    pool: PoolShape | None = None
    devices: list[CountedShape] | None = None


class NamedResourcesShape(_Shape):
    instances: list[CountedShape] | None = None


class SliceOwnerShape(_Shape):
    kind: Any = None
    name: Any = None


class WriteShape(_Shape):
    time: Any = None


class SliceMetaShape(_Shape):
    """What says who published a slice, and when: its owner (a kubelet plugin's Node), its
    creation and the times of its writes (``managedFields``)."""

    name: Any = None
    creation_timestamp: Any = None
    owner_references: list[SliceOwnerShape] | None = None
    managed_fields: list[WriteShape] | None = None


class SliceShape(_Shape):
    """A ResourceSlice as the inventory reads it: driver, node, pool (name, generation, slice
    count), who published it and when, and how many devices (not the devices' attributes);
    v1alpha2's top-level fields too."""

    metadata: SliceMetaShape | None = None
    spec: SliceSpecShape | None = None
    node_name: Any = None
    driver_name: Any = None
    named_resources: NamedResourcesShape | None = None

