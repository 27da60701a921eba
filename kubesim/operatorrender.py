"""The GPU operator's rendering of its device-plugin and GFD DaemonSets from a ClusterPolicy.

What NVIDIA/gpu-operator v26.7.0 does to the assets it ships (``assets/state-device-plugin/0500_daemonset.yaml``,
``assets/gpu-feature-discovery/0500_daemonset.yaml``, kept verbatim in ``kubesim/manifests/gpu-operator-v26.7.0/``)
before it creates or updates them, read from ``controllers/object_controls.go`` at that tag and written again here
(no code copied):

- ``DaemonSet``: the namespace, ``preProcessDaemonSet``, the controller reference to the ClusterPolicy
  (``controllerutil.SetControllerReference``: ``controller`` and ``blockOwnerDeletion`` true),
  ``spec.daemonsets.labels``/``annotations`` on the DaemonSet's own metadata;
- ``preProcessDaemonSet``: ``applyCommonDaemonsetConfig`` (``applyUpdateStrategyConfig``: ``OnDelete``, or
  ``RollingUpdate`` with ``rollingUpdate.maxUnavailable`` as an integer or a percentage when one is given, else the
  asset's strategy; ``priorityClassName``, ``tolerations``, ``podSecurityContext``), then the operand's transform,
  then ``applyCommonDaemonsetMetadata`` (the daemonsets' labels, but ``app`` and ``app.kubernetes.io/part-of``, and
  annotations on the pod template);
- ``TransformDevicePlugin``: ``transformValidationInitContainer`` (the validator's image, pull policy, resources,
  ``runAsUser: 0``, toolkit/driver validation env), the plugin container's image (``gpuv1.ImagePath``:
  ``repository/image:version``, ``@`` for a ``sha256:`` version, ``image`` alone when repository and version are
  empty), pull policy, pull secrets, resources (every container), ``args``, GDS/GDRCopy env,
  ``handleDevicePluginConfig`` (without ``devicePlugin.config.name`` the config-manager containers are removed; with
  it ``CONFIG_FILE``, the shared mounts and volumes, ``shareProcessNamespace``, and the config-manager containers on
  the *plugin's* image with ``DEFAULT_CONFIG`` and ``FALLBACK_STRATEGIES``), ``setRuntimeClassName``,
  ``setNRIPluginAnnotation``, ``applyMIGConfiguration``, ``transformDevicePluginCtrForCDI``, a custom MPS root,
  ``devicePlugin.env`` (``setContainerEnv``: a variable already there takes the new value in place, a new one is
  appended), ``hostNetwork``;
- ``TransformGPUDiscoveryPlugin``: the same for ``spec.gfd`` on the first container (GFD's config-manager sidecars
  also run the device plugin's image: ``transformConfigManager*Container`` reads ``spec.devicePlugin``).

Not modelled (rendered as with the chart's defaults): ``hostPaths.rootFS``/``driverInstallDir`` other than the
defaults, OpenShift, CRI-O (kubesim's nodes run containerd).
"""

from __future__ import annotations

import copy
import posixpath
from typing import Any

DEVICE_PLUGIN, GFD = "nvidia-device-plugin-daemonset", "gpu-feature-discovery"
DEFAULT_MPS_ROOT = "/run/nvidia/mps"


class RenderError(Exception):
    """The ClusterPolicy cannot be rendered (the operator's reconcile fails with this message)."""


def _spec(policy: dict[str, Any], *path: str) -> Any:
    obj: Any = policy.get("spec") or {}
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _enabled(value: Any, default: bool = True) -> bool:
    return default if value is None else bool(value)


def image_path(component: dict[str, Any], env_name: str) -> str:
    """``gpuv1.ImagePath``: the image a component's repository, image and version name."""
    repository, image, version = (str(component.get(k) or "") for k in ("repository", "image", "version"))
    if not repository and not version:
        if image:
            return image
        raise RenderError(f"empty image path provided through both ClusterPolicy CR and ENV {env_name}")
    if not (repository and image and version):
        raise RenderError("invalid image specification: repository, image and version must all be set "
                          f"(repository={repository}, image={image}, version={version})")
    return f"{repository}/{image}{'@' if version.startswith('sha256:') else ':'}{version}"


def pull_policy(value: Any) -> str:
    """``gpuv1.ImagePullPolicy``: anything but Always or Never is IfNotPresent."""
    return value if value in ("Always", "Never") else "IfNotPresent"


def set_env(ctr: dict[str, Any], name: str, value: Any) -> None:
    """``setContainerEnv``: in place when the variable is there (its ``value`` replaced), else appended."""
    env = ctr.setdefault("env", [])
    for var in env:
        if var.get("name") == name:
            var["value"] = "" if value is None else str(value)  # a valueFrom stays, as in the Go code
            return
    env.append({"name": name, "value": "" if value is None else str(value)})


def _container(ctrs: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((c for c in ctrs if c.get("name") == name), None)


def _resources(ctr: dict[str, Any], resources: Any) -> None:
    """``applyResourceRequirements`` / the per-container resource loop: requests and limits replaced."""
    if not isinstance(resources, dict):
        return
    out = {k: resources[k] for k in ("requests", "limits") if resources.get(k)}
    if out:
        ctr["resources"] = out
    else:
        ctr.pop("resources", None)


def _pull_secrets(pod: dict[str, Any], secrets: Any) -> None:
    for name in secrets or []:
        refs = pod.setdefault("imagePullSecrets", [])
        if not any(r.get("name") == name for r in refs):
            refs.append({"name": name})


def _update_strategy(ds: dict[str, Any], daemonsets: dict[str, Any]) -> None:
    """``applyUpdateStrategyConfig``."""
    strategy = daemonsets.get("updateStrategy")
    if strategy == "OnDelete":
        ds["spec"]["updateStrategy"] = {"type": "OnDelete"}
        return
    max_unavailable = str((daemonsets.get("rollingUpdate") or {}).get("maxUnavailable") or "")
    if not max_unavailable:
        return
    value: int | str = max_unavailable
    if not max_unavailable.endswith("%"):
        try:
            value = int(max_unavailable, 10)
        except ValueError:
            raise RenderError(f'failed to apply rolling update config: strconv.ParseInt: parsing '
                              f'"{max_unavailable}": invalid syntax') from None
    ds["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": value}}


def _common(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``applyCommonDaemonsetConfig``."""
    daemonsets = _spec(policy, "daemonsets") or {}
    _update_strategy(ds, daemonsets)
    pod = ds["spec"]["template"]["spec"]
    if daemonsets.get("priorityClassName"):
        pod["priorityClassName"] = daemonsets["priorityClassName"]
    if daemonsets.get("tolerations"):
        pod["tolerations"] = copy.deepcopy(daemonsets["tolerations"])
    if daemonsets.get("podSecurityContext") is not None:
        pod["securityContext"] = copy.deepcopy(daemonsets["podSecurityContext"])


def _metadata(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``applyCommonDaemonsetMetadata``: the daemonsets' labels and annotations on the pod template."""
    daemonsets = _spec(policy, "daemonsets") or {}
    template = ds["spec"]["template"].setdefault("metadata", {})
    labels = {k: v for k, v in (daemonsets.get("labels") or {}).items() if k not in ("app", "app.kubernetes.io/part-of")}
    if labels:
        template["labels"] = {**(template.get("labels") or {}), **labels}
    if daemonsets.get("annotations"):
        template["annotations"] = {**(template.get("annotations") or {}), **daemonsets["annotations"]}


def _validation_init(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``transformValidationInitContainer``."""
    validator = _spec(policy, "validator") or {}
    pod = ds["spec"]["template"]["spec"]
    for ctr in pod.get("initContainers") or []:
        if "validation" not in ctr["name"]:
            continue
        for prefix in ("driver", "toolkit"):
            if ctr["name"].startswith(prefix):
                for env in ((validator.get(prefix) or {}).get("env") or []):
                    set_env(ctr, env["name"], env.get("value"))
        ctr["image"] = image_path(validator, "VALIDATOR_IMAGE")
        if validator.get("imagePullPolicy"):
            ctr["imagePullPolicy"] = pull_policy(validator["imagePullPolicy"])
        _resources(ctr, validator.get("resources"))
        ctr.setdefault("securityContext", {})["runAsUser"] = 0
    _pull_secrets(pod, validator.get("imagePullSecrets"))


def _shared_mounts(ctr: dict[str, Any], config_name: str) -> None:
    """``addSharedMountsForPluginConfig``."""
    ctr.setdefault("volumeMounts", []).extend([{"name": "config", "mountPath": "/config"},
                                               {"name": config_name, "mountPath": "/available-configs"}])


def _plugin_config(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``handleDevicePluginConfig`` with ``transformConfigManagerInitContainer``/``SidecarContainer``."""
    plugin = _spec(policy, "devicePlugin") or {}
    config = plugin.get("config") or {}
    pod = ds["spec"]["template"]["spec"]
    if not config.get("name"):
        pod["initContainers"] = [c for c in pod.get("initContainers") or [] if c["name"] != "config-manager-init"]
        pod["containers"] = [c for c in pod["containers"] if c["name"] != "config-manager"]
        return
    name = str(config["name"])
    for ctr in pod["containers"]:
        if ctr["name"] in ("nvidia-device-plugin", "gpu-feature-discovery", "mps-control-daemon-ctr"):
            set_env(ctr, "CONFIG_FILE", "/config/config.yaml")
            _shared_mounts(ctr, name)
    if not pod.get("hostPID"):
        pod["shareProcessNamespace"] = True
    pod.setdefault("volumes", []).extend([{"name": name, "configMap": {"name": name}},
                                          {"name": "config", "emptyDir": {}}])
    image = image_path(plugin, "DEVICE_PLUGIN_IMAGE")
    gfd = _container(pod["containers"], "gpu-feature-discovery") is not None
    for ctr, init in ((_container(pod.get("initContainers") or [], "config-manager-init"), True),
                      (_container(pod["containers"], "config-manager"), False)):
        if ctr is None:
            continue
        ctr["image"] = image
        if plugin.get("imagePullPolicy"):
            ctr["imagePullPolicy"] = pull_policy(plugin["imagePullPolicy"])
        if init:
            _resources(ctr, (_spec(policy, "gfd") or {}).get("resources") if gfd else plugin.get("resources"))
        set_env(ctr, "DEFAULT_CONFIG", config.get("default") or "")
        set_env(ctr, "FALLBACK_STRATEGIES", "empty")
        _shared_mounts(ctr, name)


def _runtime_class(pod: dict[str, Any], policy: dict[str, Any]) -> None:
    """``setRuntimeClassName`` on containerd: the operator's runtime class, unless the NRI plugin injects CDI."""
    if _enabled(_spec(policy, "cdi", "nriPluginEnabled"), False):
        return
    pod["runtimeClassName"] = _spec(policy, "operator", "runtimeClass") or "nvidia"


def _nri_annotation(ds: dict[str, Any], policy: dict[str, Any], container: str) -> None:
    if _enabled(_spec(policy, "cdi", "nriPluginEnabled"), False):
        meta = ds["spec"]["template"].setdefault("metadata", {})
        meta.setdefault("annotations", {})[f"nvidia.cdi.k8s.io/container.{container}"] = "management.nvidia.com/gpu=all"


def _mig(ctr: dict[str, Any], strategy: Any) -> None:
    """``applyMIGConfiguration``."""
    if not strategy:
        set_env(ctr, "NVIDIA_MIG_MONITOR_DEVICES", "all")
        return
    set_env(ctr, "MIG_STRATEGY", strategy)
    if strategy != "none":
        set_env(ctr, "NVIDIA_MIG_MONITOR_DEVICES", "all")


def _host_network(pod: dict[str, Any], value: Any) -> None:
    if value is True:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"


def _operand(ctr: dict[str, Any], pod: dict[str, Any], component: dict[str, Any], env_name: str) -> None:
    """What both transforms do alike to their main container: image, pull policy, secrets, resources, args."""
    ctr["image"] = image_path(component, env_name)
    ctr["imagePullPolicy"] = pull_policy(component.get("imagePullPolicy"))
    _pull_secrets(pod, component.get("imagePullSecrets"))
    if isinstance(component.get("resources"), dict):
        for each in pod["containers"]:
            _resources(each, component["resources"])
    if component.get("args"):
        ctr["args"] = [str(a) for a in component["args"]]


def transform_device_plugin(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``TransformDevicePlugin``."""
    pod = ds["spec"]["template"]["spec"]
    main = _container(pod["containers"], "nvidia-device-plugin")
    if main is None:
        raise RenderError('failed to find device plugin container "nvidia-device-plugin"')
    _validation_init(ds, policy)
    plugin = _spec(policy, "devicePlugin") or {}
    _operand(main, pod, plugin, "DEVICE_PLUGIN_IMAGE")
    if _enabled(_spec(policy, "gds", "enabled"), False):
        set_env(main, "GDS_ENABLED", "true")
        set_env(main, "MOFED_ENABLED", "true")
    if _enabled(_spec(policy, "gdrcopy", "enabled"), False):
        set_env(main, "GDRCOPY_ENABLED", "true")
    _plugin_config(ds, policy)
    _runtime_class(pod, policy)
    _nri_annotation(ds, policy, "nvidia-device-plugin")
    _mig(main, _spec(policy, "mig", "strategy"))
    if _enabled(_spec(policy, "cdi", "enabled")):
        set_env(main, "CDI_ENABLED", "true")
        set_env(main, "DEVICE_LIST_STRATEGY", "cdi-annotations,cdi-cri")
        set_env(main, "CDI_ANNOTATION_PREFIX", "cdi.k8s.io/")
        if _enabled(_spec(policy, "toolkit", "enabled")):
            install_dir = str(_spec(policy, "toolkit", "installDir") or "")
            set_env(main, "NVIDIA_CDI_HOOK_PATH", posixpath.normpath(posixpath.join(install_dir, "toolkit/nvidia-cdi-hook")))
    root = str((plugin.get("mps") or {}).get("root") or "")
    if root and root != DEFAULT_MPS_ROOT:
        for volume in pod.get("volumes") or []:
            if volume["name"] == "mps-root":
                volume["hostPath"]["path"] = root
            elif volume["name"] == "mps-shm":
                volume["hostPath"]["path"] = posixpath.normpath(posixpath.join(root, "shm"))
        set_env(main, "MPS_ROOT", root)
    for env in plugin.get("env") or []:
        set_env(main, env["name"], env.get("value"))
    _host_network(pod, plugin.get("hostNetwork"))


def transform_gfd(ds: dict[str, Any], policy: dict[str, Any]) -> None:
    """``TransformGPUDiscoveryPlugin``."""
    pod = ds["spec"]["template"]["spec"]
    main = pod["containers"][0]
    _validation_init(ds, policy)
    gfd = _spec(policy, "gfd") or {}
    _operand(main, pod, gfd, "GFD_IMAGE")
    for env in gfd.get("env") or []:
        set_env(main, env["name"], env.get("value"))
    _plugin_config(ds, policy)
    _runtime_class(pod, policy)
    _nri_annotation(ds, policy, main["name"])
    _mig(main, _spec(policy, "mig", "strategy"))
    _host_network(pod, gfd.get("hostNetwork"))


TRANSFORMS = {DEVICE_PLUGIN: transform_device_plugin, GFD: transform_gfd}
STATES = {DEVICE_PLUGIN: ("state-device-plugin", "devicePlugin"), GFD: ("gpu-feature-discovery", "gfd")}
"""DaemonSet -> (the operator's state name, the ClusterPolicy's key for it)."""


def enabled(policy: dict[str, Any], name: str) -> bool:
    """``isStateEnabled``: the component's ``enabled`` (true when unset)."""
    return _enabled(_spec(policy, STATES[name][1], "enabled"))


def render(asset: dict[str, Any], policy: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The DaemonSet the operator wants for ``asset`` under ``policy`` (``DaemonSet`` up to the hash)."""
    ds = copy.deepcopy(asset)
    ds["metadata"]["namespace"] = namespace
    _common(ds, policy)
    TRANSFORMS[ds["metadata"]["name"]](ds, policy)
    _metadata(ds, policy)
    meta = ds["metadata"]
    pm = policy["metadata"]
    meta["ownerReferences"] = [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": pm["name"],
                                "uid": pm["uid"], "controller": True, "blockOwnerDeletion": True}]
    daemonsets = _spec(policy, "daemonsets") or {}
    meta["labels"] = {**(meta.get("labels") or {}), **(daemonsets.get("labels") or {})}
    meta["annotations"] = {**(meta.get("annotations") or {}), **(daemonsets.get("annotations") or {})}
    return ds
