"""The API server's defaulting of pod specs and its default admission chain's changes to a pod
created through the API (issue 35 item 2).

Defaulting (``SetDefaults_PodSpec``, ``SetDefaults_Container``), wherever a pod spec is decoded,
so a pod's and a workload's pod template alike: ``dnsPolicy: ClusterFirst``, ``restartPolicy:
Always``, ``terminationGracePeriodSeconds: 30``, ``securityContext: {}``, ``schedulerName:
default-scheduler``; each container's ``terminationMessagePath``, ``terminationMessagePolicy`` and
``imagePullPolicy`` (``Always`` for a ``:latest`` or untagged image, else ``IfNotPresent``); a pod
(not a template) also ``enableServiceLinks: true`` (``SetDefaults_Pod``).

Admission, on a pod's create only (templates are not admitted), whoever creates it: a client,
kubesim's workload controllers (through :meth:`kubesim.store.Store.create`) or a scenario
seeding settled pods (:mod:`kubesim.fixtures`, through :func:`admit_spec` and :func:`mount_token`):

- ServiceAccount: ``serviceAccountName: default`` when none is named, and unless
  ``automountServiceAccountToken`` is false or a container already mounts the token path, a
  ``kube-api-access-<5 random>`` projected volume (the token for 3607 s, ``kube-root-ca.crt``'s
  ``ca.crt``, the namespace from the downward API) mounted read-only at
  ``/var/run/secrets/kubernetes.io/serviceaccount`` in every container;
- DefaultTolerationSeconds: ``node.kubernetes.io/not-ready`` and ``unreachable`` ``NoExecute``
  tolerated for 300 s unless a toleration already covers them;
- Priority: ``priority`` from the named PriorityClass (0 when none is named) and
  ``preemptionPolicy: PreemptLowerPriority`` (an unknown class is refused by
  :func:`kubesim.validation.admit_priority_class`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3607
TOLERATION_SECONDS = 300
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
TEMPLATED = (("apps", "daemonsets"), ("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
             ("batch", "jobs"))
"""The kinds whose pod template the API server defaults."""
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's rand.String alphabet (no vowels, no 0/1/3)


def generate_name(prefix: str) -> str:
    """``names.SimpleNameGenerator``: the prefix and five random characters (math/rand's, not crypto's)."""
    return prefix + "".join(random.choices(_NAME_CHARS, k=5))


def pull_policy(image: str) -> str:
    """``SetDefaults_Container``'s pull policy: ``Always`` when the tag is ``latest`` (or none)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def default_pod_spec(spec: dict[str, Any]) -> None:
    """``SetDefaults_PodSpec`` and ``SetDefaults_Container`` on ``spec``, in place."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    spec.setdefault("schedulerName", "default-scheduler")
    for kind in ("initContainers", "containers"):
        for ctr in spec.get(kind) or []:
            if not isinstance(ctr, dict):
                continue
            ctr.setdefault("terminationMessagePath", "/dev/termination-log")
            ctr.setdefault("terminationMessagePolicy", "File")
            if not ctr.get("imagePullPolicy") and isinstance(ctr.get("image"), str):
                ctr["imagePullPolicy"] = pull_policy(ctr["image"])


def default_pod(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)


def default_template(obj: dict[str, Any]) -> None:
    spec = ((obj.get("spec") or {}).get("template") or {}).get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)


def _tolerated(tolerations: list[dict[str, Any]], key: str) -> bool:
    return any(isinstance(t, dict) and t.get("key") in (key, None, "") and t.get("effect") in ("NoExecute", None, "")
               for t in tolerations)


TOKEN_SOURCES: dict[str, Any] = {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
    {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
    {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                "path": "namespace"}]}}]}
"""The token volume's ``projected`` part, the same in every pod: shared, as stored objects are read-only."""


def mount_token(spec: dict[str, Any]) -> None:
    """ServiceAccount admission's token volume (a new ``kube-api-access-<5>`` name) mounted in every
    container, in place; container dicts are replaced, never changed, so a spec may share them."""
    kinds = [kind for kind in ("initContainers", "containers") if spec.get(kind)]
    containers = [c for kind in kinds for c in spec[kind] if isinstance(c, dict)]
    if spec.get("automountServiceAccountToken") is False or any(
            m.get("mountPath") == TOKEN_PATH for c in containers for m in c.get("volumeMounts") or []):
        return
    name = generate_name("kube-api-access-")
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": name, "projected": TOKEN_SOURCES}]
    mount = {"mountPath": TOKEN_PATH, "name": name, "readOnly": True}
    for kind in kinds:
        spec[kind] = [{**c, "volumeMounts": [*(c.get("volumeMounts") or []), mount]} if isinstance(c, dict) else c
                      for c in spec[kind]]


def admit_spec(spec: dict[str, Any], value_of: Callable[[str], int | None]) -> None:
    """The chain's changes that depend on the spec alone (all but the token volume's name), in
    place: ServiceAccount's account, Priority (``value_of``: a PriorityClass's value by name,
    :func:`kubesim.installkinds.priority_value`), DefaultTolerationSeconds. A scenario seeding
    thousands of pods of one template applies it once and shares the result."""
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    wanted = spec.get("priorityClassName")
    if wanted and not spec.get("priority"):
        spec["priority"] = value_of(wanted) or 0
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = list(spec.get("tolerations") or [])
    for key in (NOT_READY, UNREACHABLE):
        if not _tolerated(tolerations, key):
            tolerations.append({"effect": "NoExecute", "key": key, "operator": "Exists",
                                "tolerationSeconds": TOLERATION_SECONDS})
    spec["tolerations"] = tolerations


def admit_pod(obj: dict[str, Any], value_of: Callable[[str], int | None]) -> None:
    """The default admission chain's changes to a pod being created, in place: every pod the
    store creates, a client's or a controller's (:meth:`kubesim.store.Store.create`)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    admit_spec(spec, value_of)
    mount_token(spec)
