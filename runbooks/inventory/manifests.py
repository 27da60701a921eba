"""Findings about the plugins' manifests: the settings that break GPU nodes though the image is
fine. Pure functions over the inventory's DaemonSets and nodes, each finding with its severity,
the objects or nodes concerned and the fix, with the ``canary`` command that applies it where
a canary can (it then goes through the approvals, the verification and the rollback like an
image upgrade).

- ``fail-on-init-error`` (warn): the NVIDIA device plugin with ``FAIL_ON_INIT_ERROR`` false (as
  NVIDIA's static manifests v0.13 to v0.17 set it; unset is the plugin's default, true): a plugin that cannot
  initialise NVML runs on without registering, and its node's GPUs drop out of the scheduler
  with nothing crashing;
- ``priority-class`` (warn): not ``system-node-critical``: the plugin is evicted under pressure
  like any pod, its node's GPUs with it;
- ``device-plugin-hostpath`` (fail): a device plugin that does not mount the kubelet's
  device-plugin directory (the hostPath ``/var/lib/kubelet/device-plugins``, fixed whatever the
  kubelet's ``--root-dir``: k0s's ``/var/lib/k0s/kubelet`` does not move it) at
  ``/var/lib/kubelet/device-plugins``: its socket never reaches the kubelet; a hostPath mounted
  there from another directory is moved back by a canary (``volume=<name>:…``);
- ``tolerations-missing`` (warn): a taint on a GPU node that the plugin does not tolerate (the
  ``node.kubernetes.io/*`` ones the DaemonSet controller adds by itself aside);
- ``gpu-node-without-plugin`` (warn; judged when every plugin DaemonSet was read) /
  ``plugin-on-non-gpu-node`` (warn; a GPU node has the hardware labels or GPUs in its capacity);

Rules about the plugin container skip the containers NVIDIA's chart runs from the same image
that are not the plugin (gpu-feature-discovery, the MPS control daemon, the config manager).
- ``privilege-escalation`` (warn): a device plugin container that is not privileged and leaves
  ``allowPrivilegeEscalation`` unset or true, or drops no capabilities (a DRA kubelet plugin,
  privileged by need, is left alone), or adds capabilities; NVIDIA's chart's own variant is no
  finding: ``capabilities: add: [SYS_ADMIN]`` alone, on a plugin run with a MIG strategy other
  than none, a config file (a config map) or the ``volume-mounts`` device-list strategy (the
  chart's ``requiresCapSysAdmin`` in ``templates/_helpers.tpl``, k8s-device-plugin v0.15+);
- ``resource-claimed-twice`` (fail): two device-plugin DaemonSets advertising the same resource
  on one node: the kubelet keeps whichever registered last;
- ``max-unavailable`` (warn): a RollingUpdate ``maxUnavailable`` above the policy's
  ``inventory.max_unavailable``.
"""

from __future__ import annotations

import json
import posixpath
from collections import defaultdict
from collections.abc import Sequence

from runbooks.inventory.models import ContainerFacts, DaemonSet, Finding, Node
from runbooks.plugin_containers import COMPANIONS

DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
NVIDIA_PLUGIN = "k8s-device-plugin"
NVIDIA_RESOURCE = "nvidia.com/gpu"
CRITICAL = "system-node-critical"
AUTO_TOLERATED = "node.kubernetes.io/"
"""Taints the DaemonSet controller tolerates for every daemon pod (not-ready, unreachable,
disk/memory/pid pressure, unschedulable, network-unavailable)."""


def _listing(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _canary(ds: DaemonSet, change: str) -> str:
    return f"`canary {ds.ref} {change} node=auto`, then promote it (approved and verified like an image)"


def _plugin_containers(ds: DaemonSet) -> list[ContainerFacts]:
    """The containers of ``ds`` that run NVIDIA's device plugin (not the chart's feature
    discovery, MPS daemon or config manager, which share its image)."""
    if ds.kind != "device-plugin":
        return []
    return [c for c in ds.manifest.containers if NVIDIA_PLUGIN in c.image
            and not any(word in " ".join([*c.command, *c.args]) for word in COMPANIONS)]


def _setting(ctr: ContainerFacts, flag: str, variable: str) -> str | None:
    """A plugin setting as the plugin reads it: the ``--flag=value`` argument, else the variable."""
    given = next((a.partition("=")[2] for a in ctr.args if a.startswith(f"--{flag}=")), None)
    return given if given is not None else ctr.env.get(variable)


def charts_sys_admin(ctr: ContainerFacts) -> bool:
    """The securityContext NVIDIA's chart gives the plugin on purpose (``requiresCapSysAdmin``):
    SYS_ADMIN added, nothing else, with a MIG strategy other than none, a config file (the chart
    sets CONFIG_FILE when a config map is used) or the volume-mounts device-list strategy."""
    if ctr.adds != ["SYS_ADMIN"]:
        return False
    mig = _setting(ctr, "mig-strategy", "MIG_STRATEGY")
    lists = _setting(ctr, "device-list-strategy", "DEVICE_LIST_STRATEGY") or ""
    return (mig not in (None, "", "none") or bool(_setting(ctr, "config-file", "CONFIG_FILE"))
            or "volume-mounts" in lists)



def fail_on_init_error(ds: DaemonSet) -> list[Finding]:
    """FAIL_ON_INIT_ERROR false (the flag, else the variable; unset is the plugin's default, true)."""
    out = []
    for ctr in _plugin_containers(ds):
        flag = next((a.partition("=")[2] or "true" for a in ctr.args if a.startswith("--fail-on-init-error")), None)
        value = flag if flag is not None else ctr.env.get("FAIL_ON_INIT_ERROR")
        if value is None or value.lower() != "false":
            continue
        out.append(Finding(
            severity="warn", code="fail-on-init-error", object=f"daemonset/{ds.ref}",
            message=f"{ds.ref} (container {ctr.name}) runs with FAIL_ON_INIT_ERROR {value!r}: a plugin that cannot "
            "initialise NVML keeps running without registering, and its node's GPUs drop out of the scheduler "
            "with nothing crashing",
            next_step=_canary(ds, "env=FAIL_ON_INIT_ERROR=true"),
        ))
    return out


def priority_class(ds: DaemonSet) -> list[Finding]:
    if ds.manifest.priority_class == CRITICAL:
        return []
    has = f"priorityClassName {ds.manifest.priority_class}" if ds.manifest.priority_class else "no priorityClassName"
    return [Finding(
        severity="warn", code="priority-class", object=f"daemonset/{ds.ref}",
        message=f"{ds.ref} has {has}: under memory or disk pressure the kubelet may evict the plugin like any pod, "
        "and the node's GPUs go with it",
        next_step=_canary(ds, f"priority={CRITICAL}"),
    )]


def device_plugin_hostpath(ds: DaemonSet) -> list[Finding]:
    """The plugin must mount the kubelet's device-plugin directory at ``DEVICE_PLUGIN_DIR``: the
    hostPath ``DEVICE_PLUGIN_DIR`` itself, which the kubelet keeps whatever its ``--root-dir``
    (``pluginapi.KubeletSocket``). A hostPath from another directory mounted there is moved back by
    a canary."""
    plugins = _plugin_containers(ds)
    wrong = ""
    for ctr in plugins:
        volume = ctr.mounts.get(DEVICE_PLUGIN_DIR)
        path = ds.manifest.host_paths.get(volume or "", "")
        if volume is not None and posixpath.normpath(path or ".") == DEVICE_PLUGIN_DIR:
            return []
        wrong = wrong or (volume if volume is not None and path else "")
    if not plugins:
        return []
    if wrong:
        fix = (f"move the volume back: {_canary(ds, f'volume={wrong}:{DEVICE_PLUGIN_DIR}')}; the kubelet keeps "
               f"{DEVICE_PLUGIN_DIR} whatever its --root-dir (on k0s too)")
    else:
        fix = (f"give the DaemonSet a hostPath volume with path {DEVICE_PLUGIN_DIR} mounted at the same path "
               f"(kubectl -n {ds.namespace} edit daemonset {ds.name}), or roll back to the manifest that had it")
    mounted = [f"{path} <- {ds.manifest.host_paths.get(name, 'not a hostPath')}" for ctr in ds.manifest.containers
               for path, name in ctr.mounts.items() if "device-plugins" in path or name in ds.manifest.host_paths]
    return [Finding(
        severity="fail", code="device-plugin-hostpath", object=f"daemonset/{ds.ref}",
        message=f"{ds.ref} does not mount the kubelet's {DEVICE_PLUGIN_DIR} at {DEVICE_PLUGIN_DIR} "
        f"({_listing(mounted) or 'no such mount'}): its socket never reaches the kubelet, so it never registers",
        next_step=fix,
    )]


def _tolerates(tolerations: Sequence[dict[str, str]], key: str, value: str, effect: str) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != effect:
            continue
        if not t.get("key") and t.get("operator") == "Exists":
            return True
        if t.get("key") != key:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == value:
            return True
    return False


def tolerations_missing(ds: DaemonSet, nodes: Sequence[Node]) -> list[Finding]:
    missed: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for node in nodes:
        if not node.gpu_hardware:
            continue
        for taint in node.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not taint.key.startswith(AUTO_TOLERATED) \
                    and not _tolerates(ds.manifest.tolerations, taint.key, taint.value, taint.effect):
                missed[(taint.key, taint.value, taint.effect)].append(node.name)
    on = {p.node for p in ds.pods}
    out = []
    for (key, value, effect), where in sorted(missed.items()):
        written = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
        kept_off = [n for n in where if n not in on]
        out.append(Finding(
            severity="warn", code="tolerations-missing", object=f"daemonset/{ds.ref}",
            message=f"{ds.ref} does not tolerate the taint {written} of GPU node(s) {_listing(where)}"
            + (f": no plugin pod runs on {_listing(kept_off)}" if kept_off and effect == "NoSchedule" else "")
            + (": its pods are evicted there" if effect == "NoExecute" else ""),
            next_step=_canary(ds, f"toleration={written}"),
        ))
    return out


def _gpu_node(node: Node) -> bool:
    """GPU hardware labels, or GPUs in its capacity (a node without NFD or the GPU operator)."""
    return node.gpu_hardware or any(v > 0 for v in node.capacity.values())


def coverage(daemonsets: Sequence[DaemonSet], nodes: Sequence[Node], *, every_plugin: bool) -> list[Finding]:
    """GPU nodes no plugin runs on (judged only when ``every_plugin`` DaemonSet was read, not
    just the policy's targets), and plugin pods on nodes without GPUs."""
    on: dict[str, list[DaemonSet]] = defaultdict(list)
    for ds in daemonsets:
        for pod in ds.pods:
            on[pod.node].append(ds)
    out = []
    bare = [n.name for n in nodes if n.gpu_hardware and not on.get(n.name)]
    if bare and daemonsets and every_plugin:
        out.append(Finding(
            severity="warn", code="gpu-node-without-plugin", object=f"node/{bare[0]}",
            message=f"GPU node(s) {_listing(bare)} run no pod of any plugin DaemonSet "
            f"({_listing([d.ref for d in daemonsets])}): their GPUs are not offered to the scheduler",
            next_step="compare the DaemonSets' nodeSelector, affinity and tolerations with those nodes' labels and "
            f"taints (kubectl describe node {bare[0]})",
        ))
    gpu = {n.name for n in nodes if _gpu_node(n)}
    known = {n.name for n in nodes}
    for ds in daemonsets:
        stray = sorted({p.node for p in ds.pods if p.node and p.node in known and p.node not in gpu})
        if stray:
            out.append(Finding(
                severity="warn", code="plugin-on-non-gpu-node", object=f"daemonset/{ds.ref}",
                message=f"{ds.ref} runs on node(s) {_listing(stray)} without the GPU hardware label (NFD's "
                "pci-10de or nvidia.com/gpu.present): a pod there finds no device, or advertises a wrong one",
                next_step=f"select GPU nodes only: a nodeSelector or node affinity on those labels in {ds.ref}",
            ))
    return out


def privilege_escalation(ds: DaemonSet) -> list[Finding]:
    out = []
    for ctr in _plugin_containers(ds):
        if ctr.privileged or charts_sys_admin(ctr):
            continue  # privileged: asked for the node's devices outright, a matter for review, not this rule
        wrong = []
        if ctr.allow_privilege_escalation is not False:
            wrong.append("allowPrivilegeEscalation is " + ("unset" if ctr.allow_privilege_escalation is None else "true"))
        if not ctr.drops_all:
            wrong.append("no capability is dropped")
        if ctr.adds:
            wrong.append(f"it adds {', '.join(ctr.adds)} (NVIDIA's chart adds SYS_ADMIN alone, and only for MIG, "
                         "a config map or volume-mounts device lists)")
        if wrong:
            out.append(Finding(
                severity="warn", code="privilege-escalation", object=f"daemonset/{ds.ref}",
                message=f"{ds.ref} container {ctr.name}: {' and '.join(wrong)}, though a device plugin needs "
                "neither (the hardened securityContext of NVIDIA's own chart)",
                next_step=_canary(ds, "security=allowPrivilegeEscalation=false,capabilities.drop=ALL"),
            ))
    return out


def claimed_twice(daemonsets: Sequence[DaemonSet]) -> list[Finding]:
    by_node: dict[tuple[str, str], list[str]] = defaultdict(list)
    for ds in daemonsets:
        if _plugin_containers(ds):
            for node in sorted({p.node for p in ds.pods if p.node}):
                by_node[(NVIDIA_RESOURCE, node)].append(ds.ref)
    clashes: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
    for (resource, node), refs in by_node.items():
        if len(refs) > 1:
            clashes[(resource, tuple(sorted(refs)))].append(node)
    return [Finding(
        severity="fail", code="resource-claimed-twice", object=f"daemonset/{refs[0]}",
        message=f"{' and '.join(refs)} both advertise {resource} on node(s) {_listing(sorted(nodes))}: the kubelet "
        "keeps the plugin that registered last, and the other one's restarts flip the node's GPUs",
        next_step=f"keep one: delete the other DaemonSet, or give them nodeSelectors that do not overlap "
        f"(kubectl -n {refs[1].split('/')[0]} get daemonset {refs[1].split('/')[1]} -o yaml)",
    ) for (resource, refs), nodes in sorted(clashes.items())]


def _resolve(value: str, total: int) -> int:
    """A count or a percentage (rounded up, as the DaemonSet controller does) of ``total``."""
    if value.endswith("%"):
        return -(-int(value[:-1]) * total // 100)
    return int(value)


def max_unavailable(ds: DaemonSet, limit: str | None) -> list[Finding]:
    if limit is None or ds.update_strategy != "RollingUpdate":
        return []
    value = ds.max_unavailable or "1"
    try:
        total = max(ds.desired, 1)
        allowed, has = _resolve(limit, total), _resolve(value, total)
    except ValueError:
        return []
    if has <= allowed:
        return []
    wanted: int | str = limit if limit.endswith("%") else int(limit)
    patch = {"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": wanted}}}}
    return [Finding(
        severity="warn", code="max-unavailable", object=f"daemonset/{ds.ref}",
        message=f"{ds.ref} rolls with maxUnavailable {value} ({has} of {ds.desired} pods at once), above the policy's "
        f"limit {limit} ({allowed}): a bad image takes that many nodes' GPUs out before the first one fails",
        next_step=f"kubectl -n {ds.namespace} patch daemonset {ds.name} --type=merge -p '{json.dumps(patch)}' "
        "(or promote with waves, which keep their own pace)",
    )]


def manifest_findings(daemonsets: Sequence[DaemonSet], nodes: Sequence[Node], *,
                      max_unavailable_limit: str | None = None, every_plugin: bool = True) -> list[Finding]:
    """Every manifest finding of the plugin DaemonSets (``every_plugin``: the inventory read every
    plugin DaemonSet, not only the policy's targets)."""
    out: list[Finding] = []
    for ds in daemonsets:
        out += fail_on_init_error(ds) + priority_class(ds) + device_plugin_hostpath(ds)
        out += tolerations_missing(ds, nodes) + privilege_escalation(ds) + max_unavailable(ds, max_unavailable_limit)
    return out + coverage(daemonsets, nodes, every_plugin=every_plugin) + claimed_twice(daemonsets)
