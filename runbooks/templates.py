"""Changes to a plugin's pod template beyond its image: what a canary may change, how it is
written down, applied and shown. Pure data and functions, no I/O.

A canary changes the image of one container and, optionally, :class:`Edits` of that
container and its pod: environment variables (set or removed), the container's ``args``,
its resource ``limits``/``requests``, its ``securityContext`` and the pod's, the pod's
``priorityClassName`` and tolerations (added or removed), the path of a hostPath volume of the
pod (``volume=device-plugin:/var/lib/kubelet/device-plugins``), and pod-template annotations
(what ``restart`` sets). The canary writes :func:`apply`'s result whole; the request shows
:func:`diff` of the template before and after, so the approvers approve exactly what is
written; a rollback puts back the template saved before, whole.

The words of a request (``env=FAIL_ON_INIT_ERROR=true``, ``toleration=nvidia.com/gpu:NoSchedule``,
``limits=cpu=200m,memory=512Mi``, ``security=allowPrivilegeEscalation=false,capabilities.drop=ALL``)
are parsed here by :func:`parse_edits`, so every surface reads them alike.
"""

from __future__ import annotations

import copy
import difflib
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runbooks.characters import unsafe_character

ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[mkMGTPE]|u|n)?$")
RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
CLASS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CAPABILITY = re.compile(r"^[A-Z_]{2,32}$")
VOLUME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A volume's name: a DNS-1123 label, as the API server validates it."""
HOST_PATH = re.compile(r"^/[A-Za-z0-9._+@/-]*$")
MAX_DIFF_LINES = 40
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
"""The pod-template annotation ``kubectl rollout restart`` sets: a new revision of the same
template, so every pod is replaced (``restart`` sets it too)."""

_BOOL = {"true": True, "false": False}
CONTAINER_SECURITY: dict[str, type] = {
    "allowPrivilegeEscalation": bool, "privileged": bool, "readOnlyRootFilesystem": bool, "runAsNonRoot": bool,
    "runAsUser": int, "runAsGroup": int, "capabilities.drop": list, "capabilities.add": list,
    "seccompProfile.type": str,
}
"""The container ``securityContext`` fields ``security=`` may set (dotted: nested)."""
POD_SECURITY: dict[str, type] = {
    "runAsNonRoot": bool, "runAsUser": int, "runAsGroup": int, "fsGroup": int, "seccompProfile.type": str,
}
"""The pod ``securityContext`` fields ``pod-security=`` may set."""
SECCOMP = ("RuntimeDefault", "Unconfined", "Localhost")


class Toleration(BaseModel):
    """A toleration as the pod spec writes it (no key: every taint; no effect: every effect)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first used (issue 39)

    key: str = ""
    operator: str = "Exists"
    value: str = ""
    effect: str = ""

    def as_spec(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect}
        return {k: v for k, v in out.items() if v}

    def __str__(self) -> str:
        key = self.key or "*"
        return key + (f"={self.value}" if self.value else "") + (f":{self.effect}" if self.effect else "")


class Edits(BaseModel):
    """What a canary changes besides the image (nothing, by default)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first used (issue 39)

    env: dict[str, str | None] = Field(default_factory=dict, description="name -> value; None removes it")
    args: list[str] | None = Field(None, description="the container's args, whole; [] removes them")
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)
    security: dict[str, Any] = Field(default_factory=dict, description="container securityContext fields (dotted)")
    pod_security: dict[str, Any] = Field(default_factory=dict, description="pod securityContext fields (dotted)")
    priority: str | None = Field(None, description="priorityClassName; '' removes it")
    tolerate: list[Toleration] = Field(default_factory=list, description="tolerations added")
    untolerate: list[Toleration] = Field(default_factory=list, description="tolerations removed")
    annotations: dict[str, str] = Field(default_factory=dict, description="pod template annotations (restart)")
    volumes: dict[str, str] = Field(default_factory=dict, description="hostPath volume name -> its new path")

    @field_validator("env")
    @classmethod
    def _env(cls, values: dict[str, str | None]) -> dict[str, str | None]:
        for name, value in values.items():
            if not ENV_NAME.fullmatch(name) or name in (".", ".."):
                raise ValueError(f"{name!r} is not an environment variable name")
            if value is not None and len(value) > 4096:
                raise ValueError(f"the value of {name} is longer than 4096 characters")
            if value is not None and (found := unsafe_character(value)):
                raise ValueError(f"the value of {name} holds {found}: a value is one line of plain text")
        return values

    @field_validator("args")
    @classmethod
    def _args(cls, values: list[str] | None) -> list[str] | None:
        for value in values or []:
            if found := unsafe_character(value):
                raise ValueError(f"an argument holds {found}: each is one line of plain text")
        return values

    @field_validator("limits", "requests")
    @classmethod
    def _quantities(cls, values: dict[str, str]) -> dict[str, str]:
        for name, value in values.items():
            if not RESOURCE_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a resource name (e.g. cpu, memory)")
            if not QUANTITY.fullmatch(value):
                raise ValueError(f"{value!r} is not a quantity for {name} (e.g. 200m, 512Mi, 1)")
        return values

    @field_validator("priority")
    @classmethod
    def _priority(cls, value: str | None) -> str | None:
        if value and not CLASS_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a PriorityClass name (e.g. system-node-critical)")
        return value

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, values: dict[str, str]) -> dict[str, str]:
        for name, path in values.items():
            if not VOLUME_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a volume name (lower-case letters, digits and -, as the "
                                 "template's volumes are named: device-plugin)")
            host_path(path)
        return values

    @property
    def empty(self) -> bool:
        return self == Edits()

    def summary(self) -> str:
        """One line for people: ``env FAIL_ON_INIT_ERROR=true; priorityClassName system-node-critical``."""
        parts: list[str] = []
        for name, value in self.env.items():
            parts.append(f"env {name} removed" if value is None else f"env {name}={value}")
        if self.args is not None:
            parts.append(f"args {' '.join(self.args)}" if self.args else "args removed")
        for kind, values in (("limits", self.limits), ("requests", self.requests)):
            if values:
                parts.append(f"{kind} " + ",".join(f"{k}={v}" for k, v in values.items()))
        for kind, values in (("securityContext", self.security), ("pod securityContext", self.pod_security)):
            if values:
                parts.append(f"{kind} " + ",".join(f"{k}={_text(v)}" for k, v in values.items()))
        if self.priority is not None:
            parts.append(f"priorityClassName {self.priority}" if self.priority else "priorityClassName removed")
        parts += [f"toleration {t} added" for t in self.tolerate] + [f"toleration {t} removed" for t in self.untolerate]
        parts += [f"volume {name} hostPath {path}" for name, path in self.volumes.items()]
        parts += [f"a restart (pods replaced, {RESTARTED_AT}={v})" if k == RESTARTED_AT else f"annotation {k}={v}"
                  for k, v in self.annotations.items()]
        return "; ".join(parts)

    @property
    def change(self) -> Edits:
        """The edits without the annotations that only mark a moment (a restart's time): what two
        runs must share to count as the same change (stages)."""
        return self.model_copy(update={"annotations": {k: v for k, v in self.annotations.items() if k != RESTARTED_AT}})


def host_path(path: str) -> str:
    """``path`` when it is a clean absolute path (as ``path.Clean`` leaves it: no ``..``, ``.``, ``//``
    or trailing ``/``, and only letters, digits and ``._+@/-``), else ``ValueError`` saying why."""
    if not path.startswith("/"):
        raise ValueError(f"{path!r} is not an absolute path: a hostPath starts with / "
                         "(/var/lib/kubelet/device-plugins)")
    if posixpath.normpath(path) != path or path.startswith("//") or not HOST_PATH.fullmatch(path):
        raise ValueError(f"{path!r} is not a clean path: no .., ., // or trailing /, and only letters, digits "
                         "and . _ + @ / - (/var/lib/kubelet/device-plugins)")
    return path


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "+".join(str(v) for v in value)
    return str(value)


# ------------------------------------------------------------------ the words
EDIT_KEYS = ("env", "args", "limits", "requests", "security", "pod-security", "priority", "toleration", "volume")
"""The canary arguments that edit the template (``env``, ``toleration`` and ``volume`` may repeat)."""
REPEATABLE = ("env", "toleration", "volume")


def parse_edits(pairs: Mapping[str, str], repeated: Mapping[str, Sequence[str]]) -> Edits:
    """The :class:`Edits` of a request's words; ``ValueError`` naming the first bad one."""
    env: dict[str, str | None] = {}
    for word in repeated.get("env", ()):
        name, sep, value = word.partition("=")
        if not sep and name.endswith("-"):
            env[name[:-1]] = None  # env=NAME- removes it, as `kubectl set env` does
        elif not sep:
            raise ValueError(f"env={word} needs a value: env=NAME=value, or env=NAME- to remove it")
        else:
            env[name] = value
    tolerate: list[Toleration] = []
    untolerate: list[Toleration] = []
    for word in repeated.get("toleration", ()):
        (untolerate if word.endswith("-") else tolerate).append(parse_toleration(word.removesuffix("-")))
    args = pairs.get("args")
    if args is not None and args != "-" and "" in args.split(","):
        raise ValueError(f"args={args}: an empty argument (two commas, or one at an end)")
    priority = pairs.get("priority")
    return Edits(
        env=env, tolerate=tolerate, untolerate=untolerate, volumes=_volume_words(repeated.get("volume", ())),
        args=None if args is None else ([] if args == "-" else args.split(",")),
        limits=_assignments(pairs.get("limits", ""), "limits"), requests=_assignments(pairs.get("requests", ""), "requests"),
        security=_security(pairs.get("security", ""), CONTAINER_SECURITY, "security"),
        pod_security=_security(pairs.get("pod-security", ""), POD_SECURITY, "pod-security"),
        priority=None if priority is None else ("" if priority == "-" else priority),
    )


def _volume_words(words: Sequence[str]) -> dict[str, str]:
    """``volume=<name>:<hostPath>`` words, each name once."""
    out: dict[str, str] = {}
    for word in words:
        name, sep, path = word.partition(":")
        if not sep or not name or not path:
            raise ValueError(f"volume={word}: use volume=<name>:<hostPath>, e.g. "
                             "volume=device-plugin:/var/lib/kubelet/device-plugins")
        if name in out:
            raise ValueError(f"volume {name} given twice: give each volume once")
        out[name] = path
    return out


def parse_toleration(text: str) -> Toleration:
    """``key[=value][:Effect]``, or ``*`` (every taint): Equal with a value, Exists without."""
    if text == "*":
        return Toleration()
    rest, _, effect = text.partition(":")
    key, sep, value = rest.partition("=")
    if effect and effect not in EFFECTS:
        raise ValueError(f"{effect!r} is not a taint effect ({', '.join(EFFECTS)})")
    if not key or not RESOURCE_NAME.fullmatch(key):
        raise ValueError(f"toleration {text!r}: use key[=value][:Effect], e.g. nvidia.com/gpu:NoSchedule")
    if value and not LABEL_VALUE.fullmatch(value):
        raise ValueError(f"toleration {text!r}: {value!r} is not a taint value (letters, digits, -, _ and ., "
                         "at most 63)")
    return Toleration(key=key, operator="Equal" if sep else "Exists", value=value, effect=effect)


def _assignments(text: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in [p for p in text.split(",") if p]:
        name, sep, value = part.partition("=")
        if not sep or not value:
            raise ValueError(f"{what}={text}: use {what}=cpu=200m,memory=512Mi")
        out[name] = value
    return out


def _security(text: str, fields: Mapping[str, type], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in _assignments(text, what).items():
        kind = fields.get(name)
        if kind is None:
            raise ValueError(f"{what}: {name} is not one of {', '.join(fields)}")
        out[name] = _typed(name, value, kind, what)
    return out


def _typed(name: str, value: str, kind: type, what: str) -> Any:
    if kind is bool:
        if value.lower() not in _BOOL:
            raise ValueError(f"{what}: {name} is true or false, not {value!r}")
        return _BOOL[value.lower()]
    if kind is int:
        if not re.fullmatch(r"[0-9]{1,10}", value):
            raise ValueError(f"{what}: {name} is a number, not {value!r}")
        return int(value)
    if kind is list:
        caps = [v for v in value.split("+") if v]
        bad = [c for c in caps if not CAPABILITY.fullmatch(c)]
        if bad or not caps:
            raise ValueError(f"{what}: {name} takes capabilities joined by + (e.g. ALL, or NET_ADMIN+SYS_ADMIN)")
        return caps
    if name == "seccompProfile.type" and value not in SECCOMP:
        raise ValueError(f"{what}: seccompProfile.type is one of {', '.join(SECCOMP)}")
    return value


# ------------------------------------------------------------------ applying
def semantic(value: Any) -> Any:
    """A value as typed objects compare it: an absent field, ``null``, ``{}`` and ``[]`` are the same."""
    if isinstance(value, dict):
        return {k: v for k, v in ((k, semantic(v)) for k, v in value.items()) if v not in (None, {}, [])}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    return bool(semantic(a) == semantic(b))



def containers(template: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(((template.get("spec") or {}).get("containers")) or [])


def apply(template: Mapping[str, Any], container: str, image: str, edits: Edits) -> dict[str, Any]:
    """A copy of the pod ``template`` with ``image`` on ``container`` and ``edits`` made."""
    out: dict[str, Any] = copy.deepcopy(dict(template))
    spec = out.setdefault("spec", {})
    for ctr in spec.get("containers") or []:
        if ctr.get("name") != container:
            continue
        ctr["image"] = image
        _edit_env(ctr, edits.env)
        if edits.args is not None:
            _set(ctr, "args", list(edits.args) or None)
        for kind, values in (("limits", edits.limits), ("requests", edits.requests)):
            if values:
                resources = ctr.setdefault("resources", {})
                resources[kind] = {**(resources.get(kind) or {}), **values}
        if edits.security:
            ctr["securityContext"] = _merged(ctr.get("securityContext") or {}, edits.security)
    if edits.pod_security:
        spec["securityContext"] = _merged(spec.get("securityContext") or {}, edits.pod_security)
    if edits.priority is not None:
        _set(spec, "priorityClassName", edits.priority or None)
        spec.pop("priority", None)  # resolved again from the class, as on create
    if edits.tolerate or edits.untolerate:
        current = [t for t in spec.get("tolerations") or [] if not any(_matches(t, u) for u in edits.untolerate)]
        current += [t.as_spec() for t in edits.tolerate if not any(_matches(c, t) for c in current)]
        _set(spec, "tolerations", current or None)
    for volume in spec.get("volumes") or []:
        if volume.get("name") in edits.volumes and isinstance(volume.get("hostPath"), dict):
            volume["hostPath"]["path"] = edits.volumes[volume["name"]]
    if edits.annotations:
        meta = out.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **edits.annotations}
    return out


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def _edit_env(ctr: dict[str, Any], env: Mapping[str, str | None]) -> None:
    """Set or remove each variable; a name listed more than once (the kubelet takes the last)
    is written once, where it first stood."""
    current = list(ctr.get("env") or [])
    for name, value in env.items():
        at = next((i for i, e in enumerate(current) if e.get("name") == name), None)
        current = [e for i, e in enumerate(current) if e.get("name") != name or i == at]
        if value is None:
            current = [e for e in current if e.get("name") != name]
        elif at is None:
            current.append({"name": name, "value": value})
        else:
            current[at] = {"name": name, "value": value}
    _set(ctr, "env", current or None)


def _merged(context: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(context))
    for dotted, value in fields.items():
        head, _, tail = dotted.partition(".")
        if tail:
            out[head] = {**(out.get(head) or {}), tail: value}
        else:
            out[head] = value
    return out


def _matches(spec: Mapping[str, Any], toleration: Toleration) -> bool:
    return (str(spec.get("key") or ""), str(spec.get("value") or ""), str(spec.get("effect") or "")) == (
        toleration.key, toleration.value, toleration.effect)


def problems(template: Mapping[str, Any], container: str, edits: Edits) -> list[str]:
    """What in ``edits`` cannot be made to ``template`` (a variable to remove that is not set, a
    toleration to remove that is not there), as sentences."""
    out: list[str] = []
    ctr = next((c for c in containers(template) if c.get("name") == container), None)
    if ctr is None:
        return [f"the pod template has no container {container!r}"]
    names = {e.get("name") for e in ctr.get("env") or []}
    out += [f"env {name} is not set on container {container}: nothing to remove"
            for name, value in edits.env.items() if value is None and name not in names]
    tolerations = ((template.get("spec") or {}).get("tolerations")) or []
    out += [f"the template has no toleration {t}: nothing to remove" for t in edits.untolerate
            if not any(_matches(s, t) for s in tolerations)]
    return out + _volume_problems(template, edits)


def _volume_problems(template: Mapping[str, Any], edits: Edits) -> list[str]:
    """A volume to move that the template lacks, or that is not a hostPath."""
    volumes = {str(v.get("name")): v for v in ((template.get("spec") or {}).get("volumes")) or []}
    out = []
    for name in edits.volumes:
        volume = volumes.get(name)
        if volume is None:
            out.append(f"the pod template has no volume {name} (its volumes: {', '.join(volumes) or 'none'})")
        elif not isinstance(volume.get("hostPath"), dict):
            kind = next((k for k in volume if k != "name"), "an unknown")
            out.append(f"volume {name} is a {kind} volume, not a hostPath: only a hostPath's path can be changed")
    return out


def diff(before: Mapping[str, Any], after: Mapping[str, Any], *, limit: int = MAX_DIFF_LINES) -> str:
    """The changed lines of the template as YAML (``-`` before, ``+`` after, with a line of
    context; ``…`` between two places), at most ``limit`` lines; "" when nothing changes."""
    import yaml  # loaded by the diff of two manifests only: reading a run does without it (issue 39)

    old = yaml.safe_dump(dict(before), sort_keys=True, default_flow_style=False).splitlines()
    new = yaml.safe_dump(dict(after), sort_keys=True, default_flow_style=False).splitlines()
    lines = [line for line in difflib.unified_diff(old, new, lineterm="", n=1) if not line.startswith(("---", "+++"))]
    lines = ["…" if line.startswith("@@") else line for line in lines][1:]  # hunks apart, no line numbers
    if len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more line(s)"]
    return "\n".join(lines)
