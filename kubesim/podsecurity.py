"""Pod Security admission, as kube-apiserver's built-in ``PodSecurity`` plugin runs it with its
default configuration (every level ``privileged:latest``, no exemptions).

Read in kubernetes/pod-security-admission v0.34.2 (the staging copy kube-apiserver 1.34 vendors):

- ``api/helpers.go`` ``PolicyToEvaluate``: a namespace's ``pod-security.kubernetes.io/enforce``,
  ``audit``, ``warn`` labels and their ``-version`` labels; an enforce level that does not parse
  is ``restricted`` (fail closed), a warn or audit one ``privileged`` (fail open); ``warn``
  without a label of its own takes the enforce level (and version) when that is stricter;
- ``admission/admission.go``: ``ValidatePod`` (a pod's create, and an update that changes an
  image; its subresources are let be), ``ValidatePodController`` (a workload's template: warnings
  only), ``ValidateNamespace`` (a label that does not parse is a 422; making ``enforce`` stricter
  warns about the pods already there, ``EvaluatePodsInNamespace``), ``EvaluatePod`` (``violates
  PodSecurity "<level>:<version>": <reasons (details)>``, ``would violate …`` for a warning);
- ``policy/registry.go``: the checks of a level and version (a ``latest`` or newer version is the
  newest the release knows: kubesim takes the simulated release's minor), baseline checks first,
  then restricted ones, each sorted by id; a restricted check replaces the baseline one it
  overrides;
- ``policy/check_*.go``: each check's reason and detail, word for word.

Not modelled: the audit annotations (kubesim keeps no audit log), the AppArmor annotations, and
the relaxations for pods in a user namespace (``hostUsers: false`` with the feature gate on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PREFIX = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")
_RANK = {level: i for i, level in enumerate(LEVELS)}
LATEST = (1, 10**6)
"""``latest``, newer than any version."""
IGNORED_POD_SUBRESOURCES = frozenset({"exec", "attach", "binding", "eviction", "log", "portforward", "proxy",
                                      "status"})
TEMPLATED = frozenset({("", "replicationcontrollers"), ("", "podtemplates"), ("apps", "replicasets"),
                       ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "daemonsets"), ("batch", "jobs"),
                       ("batch", "cronjobs")})
"""``defaultPodSpecResources`` less pods: the kinds whose template is judged for warnings."""


@dataclass(frozen=True)
class LevelVersion:
    level: str
    version: tuple[int, int]

    def __str__(self) -> str:
        return f"{self.level}:{'latest' if self.version == LATEST else f'v{self.version[0]}.{self.version[1]}'}"


@dataclass(frozen=True)
class Policy:
    enforce: LevelVersion
    audit: LevelVersion
    warn: LevelVersion


DEFAULT = LevelVersion("privileged", LATEST)


def _version(value: str) -> tuple[int, int] | None:
    if value == "latest":
        return LATEST
    if value.startswith("v1.") and value[3:].isdigit() and (value[3:] == "0" or not value[3:].startswith("0")):
        return (1, int(value[3:]))
    return None


def policy_of(labels: dict[str, str] | None) -> tuple[Policy, list[tuple[str, str]]]:
    """``PolicyToEvaluate``: the namespace's policy and its label errors as (field, message)."""
    labels = labels or {}
    errs: list[tuple[str, str]] = []
    levels = {"enforce": DEFAULT.level, "audit": DEFAULT.level, "warn": DEFAULT.level}
    versions = {"enforce": LATEST, "audit": LATEST, "warn": LATEST}
    has_enforce_level = False
    for mode in ("enforce", "audit", "warn"):
        if PREFIX + mode in labels:
            value = labels[PREFIX + mode]
            if value in LEVELS:
                levels[mode] = value
                has_enforce_level = has_enforce_level or mode == "enforce"
            else:
                levels[mode] = "restricted" if mode == "enforce" else "privileged"
                errs.append((f"metadata.labels[{PREFIX}{mode}]",
                             f'Invalid value: "{value}": must be one of {", ".join(LEVELS)}'))
        if PREFIX + mode + "-version" in labels:
            value = labels[PREFIX + mode + "-version"]
            parsed = _version(value)
            versions[mode] = parsed or LATEST
            if parsed is None:
                errs.append((f"metadata.labels[{PREFIX}{mode}-version]",
                             f'Invalid value: "{value}": must be "latest" or "v1.x"'))
    if PREFIX + "warn" not in labels and has_enforce_level and _RANK[levels["enforce"]] > _RANK[levels["warn"]]:
        levels["warn"] = levels["enforce"]
        if PREFIX + "warn-version" not in labels:
            versions["warn"] = versions["enforce"]
    return Policy(*(LevelVersion(levels[m], versions[m]) for m in ("enforce", "audit", "warn"))), errs


# ------------------------------------------------------------------ the checks (policy/check_*.go)
Result = tuple[str, str] | None
"""(ForbiddenReason, ForbiddenDetail) of a failed check, None when it passes."""


def containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``visitContainers``: init containers, containers, ephemeral containers."""
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for ctr in spec.get(kind) or []:
            if isinstance(ctr, dict):
                yield ctr


def _sc(ctr: dict[str, Any]) -> dict[str, Any]:
    return ctr.get("securityContext") or {}


def _pod_sc(spec: dict[str, Any]) -> dict[str, Any]:
    return spec.get("securityContext") or {}


def _quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _windows(spec: dict[str, Any]) -> bool:
    return ((spec.get("os") or {}).get("name")) == "windows"


def _named(noun: str, names: list[str]) -> str:
    return f"{_plural(noun, noun + 's', len(names))} {_quote(names)}"


def _setters(pod_bad: bool, containers: list[str]) -> str:
    setters = (["pod"] if pod_bad else []) + ([_named("container", containers)] if containers else [])
    return " and ".join(setters)


def privileged(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad = [c.get("name", "") for c in containers(spec) if _sc(c).get("privileged") is True]
    return ("privileged", f"{_named('container', bad)} must not set securityContext.privileged=true") if bad else None


_DEFAULT_CAPS = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                           "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def capabilities_baseline(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad, caps = [], set()
    for c in containers(spec):
        added = [str(x) for x in ((_sc(c).get("capabilities") or {}).get("add") or []) if str(x) not in _DEFAULT_CAPS]
        if added:
            bad.append(c.get("name", ""))
            caps.update(added)
    if not bad:
        return None
    return ("non-default capabilities",
            f"{_named('container', bad)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add")


def host_namespaces(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    shared = [f"{f}=true" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True]
    return ("host namespaces", ", ".join(shared)) if shared else None


def host_path_volumes(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if isinstance(v, dict) and v.get("hostPath") is not None]
    return ("hostPath volumes", _named("volume", bad)) if bad else None


def host_ports(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = [int(p.get("hostPort") or 0) for p in c.get("ports") or [] if isinstance(p, dict)]
        if any(used):
            bad.append(c.get("name", ""))
            ports.update(str(p) for p in used if p)
    if not bad:
        return None
    return ("hostPort", f"{_named('container', bad)} {_plural('uses', 'use', len(bad))} "
                        f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")


def proc_mount(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad, kinds = [], set()
    for c in containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            kinds.add(str(mount))
    if not bad:
        return None
    return ("procMount", f"{_named('container', bad)} must not set securityContext.procMount to {_quote(sorted(kinds))}")


_SECCOMP_OK = ("RuntimeDefault", "Localhost")


def seccomp_baseline(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    """``seccompProfileBaseline_1_19``."""
    profile = _pod_sc(spec).get("seccompProfile")
    pod_bad = profile is not None and (profile or {}).get("type") not in _SECCOMP_OK
    values = {str((profile or {}).get("type") or "")} if pod_bad else set()
    bad = []
    for c in containers(spec):
        own = _sc(c).get("seccompProfile")
        if own is not None and (own or {}).get("type") not in _SECCOMP_OK:
            bad.append(c.get("name", ""))
            values.add(str((own or {}).get("type") or ""))
    if not pod_bad and not bad:
        return None
    return ("seccompProfile",
            f"{_setters(pod_bad, bad)} must not set securityContext.seccompProfile.type to {_quote(sorted(values))}")


def seccomp_restricted(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    """``seccompProfileRestricted_1_19`` (1.25 on: Windows pods are let be)."""
    profile = _pod_sc(spec).get("seccompProfile")
    pod_bad = profile is not None and (profile or {}).get("type") not in _SECCOMP_OK
    pod_set = profile is not None and not pod_bad
    values = {str((profile or {}).get("type") or "")} if pod_bad else set()
    explicit, implicit = [], []
    for c in containers(spec):
        own = _sc(c).get("seccompProfile")
        if own is not None:
            if (own or {}).get("type") not in _SECCOMP_OK:
                explicit.append(c.get("name", ""))
                values.add(str((own or {}).get("type") or ""))
        elif not pod_set:
            implicit.append(c.get("name", ""))
    if pod_bad or explicit:
        return ("seccompProfile", f"{_setters(pod_bad, explicit)} must not set securityContext.seccompProfile.type "
                                  f"to {_quote(sorted(values))}")
    if implicit:
        return ("seccompProfile", f'pod or {_named("container", implicit)} must set securityContext.seccompProfile.type '
                                  'to "RuntimeDefault" or "Localhost"')
    return None


def sysctls(allowed: frozenset[str]) -> Callable[[dict[str, Any], dict[str, Any]], Result]:
    def check(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
        bad = [str(s.get("name")) for s in _pod_sc(spec).get("sysctls") or [] if s.get("name") not in allowed]
        return ("forbidden sysctls", ", ".join(bad)) if bad else None
    return check


_SYSCTLS_1_0 = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"})
_SYSCTLS_1_27 = _SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
_SYSCTLS_1_29 = _SYSCTLS_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                                 "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
_SYSCTLS_1_32 = _SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def windows_host_process(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad = [c.get("name", "") for c in containers(spec)
           if (_sc(c).get("windowsOptions") or {}).get("hostProcess") is True]
    pod_bad = (_pod_sc(spec).get("windowsOptions") or {}).get("hostProcess") is True
    if not bad and not pod_bad:
        return None
    return ("hostProcess", f"{_setters(pod_bad, bad)} must not set securityContext.windowsOptions.hostProcess=true")


def allow_privilege_escalation(windows_exempt: bool) -> Callable[[dict[str, Any], dict[str, Any]], Result]:
    def check(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
        if windows_exempt and _windows(spec):
            return None
        bad = [c.get("name", "") for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
        return ("allowPrivilegeEscalation != false",
                f"{_named('container', bad)} must set securityContext.allowPrivilegeEscalation=false") if bad else None
    return check


def capabilities_restricted(windows_exempt: bool) -> Callable[[dict[str, Any], dict[str, Any]], Result]:
    def check(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
        if windows_exempt and _windows(spec):
            return None
        missing, adding, caps = [], [], set()
        for c in containers(spec):
            capabilities = _sc(c).get("capabilities")
            if capabilities is None:
                missing.append(c.get("name", ""))
                continue
            if "ALL" not in (capabilities.get("drop") or []):
                missing.append(c.get("name", ""))
            extra = [str(x) for x in capabilities.get("add") or [] if x != "NET_BIND_SERVICE"]
            if extra:
                adding.append(c.get("name", ""))
                caps.update(extra)
        details = []
        if missing:
            details.append(f'{_named("container", missing)} must set securityContext.capabilities.drop=["ALL"]')
        if adding:
            details.append(f"{_named('container', adding)} must not include {_quote(sorted(caps))} in "
                           "securityContext.capabilities.add")
        return ("unrestricted capabilities", "; ".join(details)) if details else None
    return check


_ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim",
                    "projected", "secret")
_RESTRICTED_VOLUMES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi",
                       "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile",
                       "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "portworxVolume", "scaleIO",
                       "storageos")


def restricted_volumes(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    bad, kinds = [], set()
    for volume in spec.get("volumes") or []:
        if not isinstance(volume, dict) or any(volume.get(k) is not None for k in _ALLOWED_VOLUMES):
            continue
        bad.append(volume.get("name", ""))
        kinds.add(next((k for k in _RESTRICTED_VOLUMES if volume.get(k) is not None), "unknown"))
    if not bad:
        return None
    return ("restricted volume types", f"{_named('volume', bad)} {_plural('uses', 'use', len(bad))} "
            f"{_plural('restricted volume type', 'restricted volume types', len(kinds))} {_quote(sorted(kinds))}")


def run_as_non_root(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    pod_value = _pod_sc(spec).get("runAsNonRoot")
    pod_bad, pod_ok = pod_value is False, pod_value is True
    explicit, implicit = [], []
    for c in containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is not None:
            if value is False:
                explicit.append(c.get("name", ""))
        elif not pod_ok:
            implicit.append(c.get("name", ""))
    if pod_bad or explicit:
        return ("runAsNonRoot != true", f"{_setters(pod_bad, explicit)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return ("runAsNonRoot != true", f"pod or {_named('container', implicit)} must set securityContext.runAsNonRoot=true")
    return None


def _is_root(uid: Any) -> bool:
    return type(uid) is int and uid == 0


def run_as_user(meta: dict[str, Any], spec: dict[str, Any]) -> Result:
    pod_bad = _is_root(_pod_sc(spec).get("runAsUser"))
    bad = [c.get("name", "") for c in containers(spec) if _is_root(_sc(c).get("runAsUser"))]
    if not pod_bad and not bad:
        return None
    return ("runAsUser=0", f"{_setters(pod_bad, bad)} must not set runAsUser=0")


CheckFn = Callable[[dict[str, Any], dict[str, Any]], Result]
CHECKS: dict[str, tuple[str, list[tuple[tuple[int, int], CheckFn]], tuple[str, ...]]] = {
    # id: (level, [(minimum version, check)], ids it overrides)
    "privileged": ("baseline", [((1, 0), privileged)], ()),
    "capabilities_baseline": ("baseline", [((1, 0), capabilities_baseline)], ()),
    "hostNamespaces": ("baseline", [((1, 0), host_namespaces)], ()),
    "hostPathVolumes": ("baseline", [((1, 0), host_path_volumes)], ()),
    "hostPorts": ("baseline", [((1, 0), host_ports)], ()),
    "procMount": ("baseline", [((1, 0), proc_mount)], ()),
    "seccompProfile_baseline": ("baseline", [((1, 19), seccomp_baseline)], ()),
    "sysctls": ("baseline", [((1, 0), sysctls(_SYSCTLS_1_0)), ((1, 27), sysctls(_SYSCTLS_1_27)),
                             ((1, 29), sysctls(_SYSCTLS_1_29)), ((1, 32), sysctls(_SYSCTLS_1_32))], ()),
    "windowsHostProcess": ("baseline", [((1, 0), windows_host_process)], ()),
    "allowPrivilegeEscalation": ("restricted", [((1, 8), allow_privilege_escalation(False)),
                                                ((1, 25), allow_privilege_escalation(True))], ()),
    "capabilities_restricted": ("restricted", [((1, 22), capabilities_restricted(False)),
                                               ((1, 25), capabilities_restricted(True))],
                                ("capabilities_baseline",)),
    "restrictedVolumes": ("restricted", [((1, 0), restricted_volumes)], ("hostPathVolumes",)),
    "runAsNonRoot": ("restricted", [((1, 0), run_as_non_root)], ()),
    "runAsUser": ("restricted", [((1, 23), run_as_user)], ()),
    "seccompProfile_restricted": ("restricted", [((1, 19), seccomp_restricted), ((1, 25), seccomp_restricted)],
                                  ("seccompProfile_baseline",)),
}
"""The checks kubesim runs (``DefaultChecks`` less appArmorProfile, seLinuxOptions and, from 1.34,
hostProbesAndHostLifecycle); seccompProfile_baseline's annotation form before 1.19 is left out."""
_ORDER = sorted(i for i, c in CHECKS.items() if c[0] == "baseline") + \
    sorted(i for i, c in CHECKS.items() if c[0] == "restricted")


def _at(versions: list[tuple[tuple[int, int], CheckFn]], version: tuple[int, int]) -> CheckFn | None:
    found = None
    for minimum, fn in versions:
        if minimum <= version:
            found = fn
    return found


def evaluate(lv: LevelVersion, meta: dict[str, Any], spec: dict[str, Any], *, minor: int) -> list[tuple[str, str]]:
    """``EvaluatePod``'s failed checks of ``lv`` for a pod or template: (reason, detail) in order."""
    if lv.level == "privileged":
        return []
    version = min(lv.version, (1, minor))
    active = {i: fn for i, (level, versions, _) in CHECKS.items()
              if (level == "baseline" or lv.level == "restricted") and (fn := _at(versions, version)) is not None}
    if lv.level == "restricted":
        for i in list(active):
            level, _, overrides = CHECKS[i]
            if level == "restricted":
                for other in overrides:
                    active.pop(other, None)
    failed = []
    for i in _ORDER:
        if i in active:
            result = active[i](meta, spec)
            if result is not None:
                failed.append(result)
    return failed


def detail(failed: list[tuple[str, str]]) -> str:
    """``ForbiddenDetail``: ``reason (detail), reason (detail)``."""
    return ", ".join(f"{reason} ({said})" if said else reason for reason, said in failed)


def judge_pod(labels: dict[str, str] | None, meta: dict[str, Any], spec: dict[str, Any], *,
              minor: int) -> tuple[str | None, list[str]]:
    """A pod's create: (the refusal after ``is forbidden: ``, or None; the warnings)."""
    policy, errs = policy_of(labels)
    if not errs and all(lv.level == "privileged" for lv in (policy.enforce, policy.audit, policy.warn)):
        return None, []
    enforced = evaluate(policy.enforce, meta, spec, minor=minor)
    if enforced:
        return f'violates PodSecurity "{policy.enforce}": {detail(enforced)}', []
    return None, _warnings(policy, meta, spec, minor=minor)


def judge_template(labels: dict[str, str] | None, meta: dict[str, Any], spec: dict[str, Any], *,
                   minor: int) -> list[str]:
    """A workload's template (``ValidatePodController``): the warnings only."""
    policy, errs = policy_of(labels)
    if not errs and policy.warn.level == "privileged" and policy.audit.level == "privileged":
        return []
    return _warnings(policy, meta, spec, minor=minor)


def _warnings(policy: Policy, meta: dict[str, Any], spec: dict[str, Any], *, minor: int) -> list[str]:
    failed = evaluate(policy.warn, meta, spec, minor=minor)
    return [f'would violate PodSecurity "{policy.warn}": {detail(failed)}'] if failed else []


def namespace_change(old: dict[str, str] | None, new: dict[str, str] | None, pods: list[dict[str, Any]], *,
                     name: str, minor: int) -> list[str]:
    """A namespace update (``ValidateNamespace``): the warnings about its pods when ``enforce``
    gets stricter (``EvaluatePodsInNamespace``; the label errors are refused by :func:`label_errors`)."""
    before, _ = policy_of(old)
    after, _ = policy_of(new)
    if after.enforce == before.enforce or after.enforce.level == "privileged":
        return []
    if after.enforce.version == before.enforce.version and _RANK[after.enforce.level] <= _RANK[before.enforce.level]:
        return []
    counts: dict[str, list[Any]] = {}  # reason -> [first pod by name, count]
    order: list[str] = []
    seen_owners: set[str] = set()
    ranked: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    for pod in pods:  # prioritizePods: one pod per controller first
        owner = next((o.get("uid") for o in (pod.get("metadata") or {}).get("ownerReferences") or []
                      if o.get("controller")), None)
        if owner and owner in seen_owners:
            duplicates.append(pod)
            continue
        if owner:
            seen_owners.add(owner)
        ranked.append(pod)
    for pod in ranked + duplicates:
        failed = evaluate(after.enforce, pod.get("metadata") or {}, pod.get("spec") or {}, minor=minor)
        if not failed:
            continue
        reason = ", ".join(r for r, _ in failed)
        pod_name = (pod.get("metadata") or {}).get("name", "")
        if reason not in counts:
            counts[reason] = [pod_name, 0]
            order.append(reason)
        elif pod_name < counts[reason][0]:
            counts[reason][0] = pod_name
        counts[reason][1] += 1
    if not order:
        return []
    decorated = []
    for reason in order:
        first, count = counts[reason]
        others = "" if count == 1 else " (and 1 other pod)" if count == 2 else f" (and {count - 1} other pods)"
        decorated.append(f"{first}{others}: {reason}")
    return [f'existing pods in namespace "{name}" violate the new PodSecurity enforce level "{after.enforce}"',
            *sorted(decorated)]


def label_errors(old: dict[str, str] | None, new: dict[str, str] | None, *, create: bool) -> list[tuple[str, str]]:
    """The 422 causes of a namespace's create or update whose labels do not parse (an update
    keeps errors it already had)."""
    _, errs = policy_of(new)
    if not errs or create:
        return errs
    _, before = policy_of(old)
    return errs if not before or before != errs else []
