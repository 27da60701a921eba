"""A canary request, checked before anything is stored.

:func:`check_request` validates what people typed (:mod:`runbooks.validation`: DNS-1123
names, image reference, a target the policy lists). :func:`resolve` then reads the
cluster once: the kubeconfig context the target lives in (so the one-active-run lock is
per real cluster, not per "current context"), the DaemonSet, its container (``container=``
may be left out when there is one, or one that runs the plugin beside GFD, MPS or
config-manager containers: :func:`runbooks.plugin_containers.plugin_container`), and the node. A change of the template is planned
(:func:`planned_change`) and asked of the API server as dry runs (:func:`refused_by_server`),
so its own refusals come before any approver is asked. Each raises :class:`InvalidRequest`
with the reason; nothing is stored.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from runbooks import errors, templates, validation
from runbooks.cluster.resources import DAEMONSETS, NODES, PODS
from runbooks.engine.refusals import Refused, server_refuses
from runbooks.engine.runs import (
    NODE_CHOICE as NODE_CHOICE,  # kept with the run model (issue 39); named here as before
)
from runbooks.errors import NotFound
from runbooks.plugin_containers import plugin_container
from runbooks.policy import Policy
from runbooks.templates import Edits, same

AUTO_NODE = "auto"
"""``node=auto``: the steps choose the canary node (``Steps.pick_node``)."""


class InvalidRequest(Refused):
    """A bad argument: the sentence says which and how to fix it."""


@dataclass(frozen=True)
class CanaryRequest:
    namespace: str
    name: str
    image: str
    node: str
    container: str | None = None
    cluster: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def check_request(
    policy: Policy, *, target: str, image: str, node: str, container: str | None = None, cluster: str | None = None
) -> CanaryRequest:
    """The request with every field validated; :class:`InvalidRequest` for the first bad one."""
    try:
        parsed = validation.target(target, policy.target_refs)
        return CanaryRequest(
            namespace=parsed.namespace, name=parsed.name,
            image=validation.image_reference(image, allow_latest=policy.images.allow_latest) if image else "",
            node=validation.node_names(node),
            container=validation.container_name(container) if container is not None else None,
            cluster=context_name(cluster) if cluster is not None else None,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def context_name(value: str) -> str:
    """A kubeconfig context name as typed; :class:`InvalidRequest` when it cannot be one."""
    text = value.strip()
    if not text or len(text) > 253 or any(c.isspace() for c in text):
        raise InvalidRequest(f"cluster {value!r} is not a kubeconfig context name")
    return text


def containers_of(daemonset: dict[str, Any]) -> list[str]:
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [str(c.get("name")) for c in spec.get("containers") or []]


def resolve(cluster: Any, request: CanaryRequest) -> tuple[str, str]:
    """``(context, container)``: the cluster's context name and the container to change."""
    try:
        daemonset = cluster.get(DAEMONSETS, request.name, request.namespace)
    except NotFound as exc:
        raise InvalidRequest(
            f"there is no DaemonSet {request.ref} in cluster {cluster.context}: "
            "`inventory` lists the plugin DaemonSets"
        ) from exc
    for node in request.node.split(",") if request.node != AUTO_NODE else []:
        try:
            cluster.get(NODES, node)
        except NotFound as exc:
            raise InvalidRequest(f"there is no node {node} in cluster {cluster.context}: pick a GPU node from `inventory`") from exc
    names = containers_of(daemonset)
    if request.container is None:
        chosen = plugin_container(templates.containers((daemonset.get("spec") or {}).get("template") or {}))
        if chosen is None:
            raise InvalidRequest(f"{request.ref} has {len(names)} containers: name one with container=<{'|'.join(names)}>")
        return cluster.context, chosen
    if request.container not in names:
        raise InvalidRequest(f"{request.ref} has no container {request.container}: use one of {', '.join(names)}")
    return cluster.context, request.container


def planned_change(cluster: Any, run: Any, edits: Edits) -> tuple[str, str, dict[str, Any]]:
    """``(image, diff, template)`` of a canary with ``edits``: the image (the container's own when
    the request names none), the template diff the canary will write and the template it was
    made from (the canary refuses to start if the DaemonSet's is another one by then), read once
    from the DaemonSet; :class:`InvalidRequest` when the edits cannot be made or change nothing."""
    daemonset = cluster.get(DAEMONSETS, run.target.name, run.target.namespace)
    template = (daemonset.get("spec") or {}).get("template") or {}
    current = next((c.get("image", "") for c in templates.containers(template) if c.get("name") == run.container), "")
    image = run.image or current
    if edits.empty:
        return image, "", {}
    wrong = templates.problems(template, run.container, edits)
    if wrong:
        raise InvalidRequest(f"cannot change {run.target.ref}: {'; '.join(wrong)}")
    wanted = templates.apply(template, run.container, image, edits)
    if same(wanted, template):
        raise InvalidRequest(f"{run.target.ref} already has {edits.summary()}"
                             + (f" and runs {image}" if image == current else "") + ": nothing to change")
    refused_by_server(cluster, run, wanted)
    return image, templates.diff(template, wanted), template


def canary_pod(run: Any, template: dict[str, Any]) -> dict[str, Any]:
    """A pod as the DaemonSet's controller would make it from ``template`` for the canary node
    (unpinned while the node is ``auto``): what the dry run of :func:`refused_by_server` sends."""
    meta = template.get("metadata") or {}
    spec = copy.deepcopy(template.get("spec") or {})
    if run.node and run.node != AUTO_NODE:
        spec["nodeName"] = run.node.split(",")[0]
    pod_meta: dict[str, Any] = {"generateName": f"{run.target.name}-", "namespace": run.target.namespace,
                                "labels": dict(meta.get("labels") or {})}
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    return {"metadata": pod_meta, "spec": spec}


def refused_by_server(cluster: Any, run: Any, wanted: dict[str, Any]) -> None:
    """The API server's own refusals of a change, asked for at request time (``dryRun=All``), so
    no approver is asked to approve what the server will refuse (finding 9 of the security review):

    - the DaemonSet with ``wanted`` as its template, as the canary will patch it: its validation
      (a ``runAsUser`` outside 0..2147483647 is a 422);
    - a pod made from ``wanted`` for the canary node, created as a dry run: the admission chain a
      DaemonSet's pods go through and the DaemonSet does not (the Priority plugin refuses a pod
      whose ``priorityClassName`` names no PriorityClass, while the DaemonSet is stored; also
      PodSecurity, quotas, webhooks). Its RBAC is ``create`` on pods in the target's namespace,
      used for nothing but this dry run.

    :class:`InvalidRequest` names the server's reason; a 403 of RBAC (the bot may not ask) and
    any other cluster error go up as they are."""
    target = run.target
    body = [{"op": "replace", "path": "/spec/template", "value": wanted}]
    try:
        cluster.patch(DAEMONSETS, target.name, body, namespace=target.namespace, patch_type="json", dry_run=True)
        cluster.create(PODS, canary_pod(run, wanted), namespace=target.namespace, dry_run=True)
    except (errors.InvalidRequest, errors.AdmissionRefused) as exc:  # not RBAC: a Forbidden is raised as it is
        raise InvalidRequest(server_refuses(target.ref, exc.detail or str(exc))) from exc
