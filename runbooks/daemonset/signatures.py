"""The known failures of GPU device plugins (issue 36 item 4, issue 58 item 4): what a line a
failed plugin printed means, and the fix.

Each :class:`Signature` names its ``sources``: for NVIDIA's k8s-device-plugin, the repository,
the path and the tags its lines were read at (v0.14.0 to v0.20.0, ``git show <tag>:<path>``).
The lines are klog's
(``E0102 15:04:05.123456       1 factory.go:99] Failed to initialize NVML: …``); a pattern
matches the message anywhere in the line. :func:`matches` tries the signatures in order and
explains each line once, so the specific ones come first: a real line is explained by the
signature of its real meaning before any wider one can claim it.

Two of them are not crashes: ``kubelet-unreachable`` and ``no-devices`` are printed by a
plugin that keeps running without registering (it retries every 30 s, or waits forever).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbooks.characters import shown
from runbooks.errors import shorten

DP = "NVIDIA/k8s-device-plugin"
OLD_FACTORY = "internal/plugin/manager/factory.go"  # v0.14-v0.16; internal/plugin/factory.go from v0.17
MAIN = "cmd/nvidia-device-plugin/main.go"


@dataclass(frozen=True)
class Signature:
    """A known failure: a pattern of its log line, what it means, the fix, and where its lines
    were read (``sources``). ``{value}`` in the meaning or the fix is the pattern's ``value``
    group, as the line gave it."""

    name: str
    pattern: re.Pattern[str]
    meaning: str
    fix: str
    sources: tuple[str, ...]


TOOLKIT_FIX = ("install and configure the NVIDIA Container Toolkit on the node for its container runtime "
               "(containerd or CRI-O) and run the plugin with it: the RuntimeClass the toolkit made "
               "(runtimeClassName: nvidia) or nvidia as the runtime's default; keep the plugin off nodes "
               "without GPUs (nodeSelector or affinity)")

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "driver-mismatch",
        re.compile(r"ERROR_LIB_RM_VERSION_MISMATCH|Driver/library version mismatch", re.I),
        "the node's NVIDIA driver libraries and its loaded kernel module differ: the driver was upgraded on "
        "the host and the kernel module was not reloaded (a problem of the node, not of the plugin image)",
        "drain the node, then reboot it (or unload and reload the nvidia kernel modules); nvidia-smi on the "
        "node shows the same mismatch until then",
        (f"{DP} v0.14.0-v0.15.1 {OLD_FACTORY}:77 (v0.14.x) / :72 (v0.15.1) "
         "'Failed to initialize NVML: %v.' rendered by go-nvlib pkg/nvml/return.go:76-77 as "
         "ERROR_LIB_RM_VERSION_MISMATCH (the Go constant's name: the C string is used only after a successful "
         "Init)",
         f"{DP} v0.16.0-v0.20.0 {OLD_FACTORY}:68 (v0.16.2), internal/plugin/factory.go:93 (v0.17.x) / :94 "
         "(v0.18.x-v0.19.0) / :99 (v0.19.3, v0.20.0): go-nvml renders libnvidia-ml's own nvmlErrorString "
         "('Driver/library version mismatch', the wording nvidia-smi prints; NVIDIA/go-nvml pkg/nvml/nvml.h:1323 "
         "'RM detects a driver/library version mismatch')",
         f"{DP} every tag {MAIN} last line '... nvml init failed: <ret>' (main.go:123/132/149/173/185/185/198)")),
    Signature(
        "nvml-missing",
        re.compile(r"ERROR_LIBRARY_NOT_FOUND|could not load NVML library|"
                   r"libnvidia-ml\.so\.1: cannot open shared object file", re.I),
        "the NVIDIA driver's library (libnvidia-ml.so.1) is not in the container: the NVIDIA Container Toolkit "
        "or runtime did not inject it (or the node has no NVIDIA driver)",
        TOOLKIT_FIX,
        (f"{DP} v0.14.0-v0.15.1 {OLD_FACTORY}:107 (v0.14.x) / :104 (v0.15.1) 'Detected %v platform: %v' with "
         "go-nvlib pkg/nvlib/info/info.go:59 'could not load NVML library: %v'",
         f"{DP} v0.19.1-v0.20.0 internal/plugin/factory.go:99 'Failed to initialize NVML: %v.' with "
         "NVIDIA/go-nvml pkg/nvml/init.go:20-24 (the library does not load: ERROR_LIBRARY_NOT_FOUND, "
         "pkg/nvml/return.go:68-69), and the last line at main.go:185 (v0.19.3) / :198 (v0.20.0)",
         "unverified: the dlerror tail 'libnvidia-ml.so.1: cannot open shared object file' is glibc's wording")),
    Signature(
        "toolkit-not-configured",
        re.compile(r"Incompatible (?:platform|strategy) detected|did you configure the NVIDIA Container Toolkit\?|"
                   r"Unsupported platform detected; defaulting to nvml|platform detection failed|"
                   r"invalid device discovery strategy", re.I),
        "the plugin found neither NVML nor a Tegra platform in its container: the NVIDIA Container Toolkit is "
        "not configured for the node's container runtime (or the pod does not run with it)",
        TOOLKIT_FIX,
        (f"{DP} v0.14.0-v0.15.1 {OLD_FACTORY}:115-116 (v0.14.x) / :112-113 (v0.15.1) 'Incompatible platform "
         "detected', 'If this is a GPU node, did you configure the NVIDIA Container Toolkit?', last line "
         "'... platform detection failed' (factory.go:121 / :118)",
         f"{DP} v0.16.0-v0.19.0 {OLD_FACTORY}:87-88 (v0.16.x), internal/plugin/factory.go:112-113 (v0.17.x) / "
         ":113-114 (v0.18.x, v0.19.0) 'Incompatible strategy detected %v' (auto) and the toolkit hint, last line "
         "'... invalid device discovery strategy'",
         f"{DP} v0.19.1-v0.20.0 cmd/nvidia-device-plugin/plugin-manager.go:107 (v0.19.x) / :108 (v0.20.0) "
         "'Unsupported platform detected; defaulting to nvml' (then ERROR_LIBRARY_NOT_FOUND: nvml-missing)")),
    Signature(
        "nvml-init",
        re.compile(r"Failed to initialize NVML|nvml init failed", re.I),
        "NVML could not initialise on the node with the driver it found (the line's code, e.g. "
        "ERROR_DRIVER_NOT_LOADED: the NVIDIA kernel driver is not loaded)",
        "check the driver on the node (nvidia-smi, lsmod | grep nvidia) and load it or reboot the node; "
        "keep the plugin off nodes without GPUs",
        (f"{DP} every tag v0.14.0-v0.20.0 'Failed to initialize NVML: %v.' ({OLD_FACTORY}:77/72/68, "
         "internal/plugin/factory.go:93/94/99) and 'nvml init failed: %v'; codes other than a mismatch or a "
         "missing library (NVIDIA/go-nvml pkg/nvml/nvml.h:1314 NVML_ERROR_DRIVER_NOT_LOADED)",)),
    Signature(
        "mig-strategy",
        re.compile(r"unknown (?:MIG )?strategy: (?P<value>.+?)\s*$"),
        "the plugin's MIG strategy '{value}' is not one it knows: a configuration error",
        "set MIG_STRATEGY (or --mig-strategy, or flags.migStrategy in its config file) to none, single or "
        "mixed, or roll back to the previous template",
        (f"{DP} v0.14.0-v0.16.2 cmd/nvidia-device-plugin/plugin-manager.go:36 (v0.14.x) / :37 (v0.15.1) / :39 "
         "(v0.16.2) 'unknown strategy: %v'",
         f"{DP} v0.17.0-v0.20.0 {MAIN}:215 (v0.17.x) / :227 (v0.18.2, v0.19.3) / :230 (v0.19.0) / :249 (v0.20.0) "
         "'unknown MIG strategy: %v', wrapped 'unable to validate flags: %v'",
         f"{DP} v0.14.0-v0.20.0 api/config/v1/consts.go:32-34 (none, single, mixed)")),
    Signature(
        "config",
        re.compile(r"unable to load config|unable to validate flags", re.I),
        "the plugin's configuration (flags, environment or config file) is invalid",
        "correct the option the line names, or roll back to the previous template",
        (f"{DP} v0.14.0-v0.15.1 {MAIN} loadConfig 'unable to load config: %v' (v0.14.5 main.go:237: "
         "'unable to validate flags: invalid --device-list-strategy option: invalid strategy: %v')",
         f"{DP} v0.16.0-v0.20.0 {MAIN} 'unable to validate flags: %v' (v0.16.2 main.go:297-300)")),
    Signature(
        "fs-watcher",
        re.compile(r"failed to create FS watcher", re.I),
        "the plugin could not watch /var/lib/kubelet/device-plugins with inotify and exited: 'too many open "
        "files' is the node's inotify instances used up, 'no such file or directory' the directory not mounted",
        "raise fs.inotify.max_user_instances on the node (sysctl; find what holds the instances) or mount the "
        "host's /var/lib/kubelet/device-plugins into the container as a hostPath",
        (f"{DP} v0.14.0-v0.14.5 {MAIN}:157 'failed to create FS watcher: %v', printed by main.go:123",
         f"{DP} v0.15.0-v0.20.0 {MAIN}:181 (v0.15.x) / :202 (v0.16.2) / :241 (v0.17.x) / :253 (v0.18.2, v0.19.3) / "
         ":256 (v0.19.0) / :275 (v0.20.0) 'failed to create FS watcher for %s: %v' (pluginapi.DevicePluginPath), "
         "returned from start() without the 'error starting plugins' prefix",
         "unverified: 'too many open files' is Go's text of EMFILE, which fsnotify.NewWatcher returns when "
         "inotify_init1 fails (vendor/github.com/fsnotify/fsnotify/inotify.go:37-42 at v0.14.0)")),
    Signature(
        "socket-permission",
        re.compile(r"/var/lib/kubelet/device-plugins[^\s]*:? .*permission denied|"
                   r"permission denied.*/var/lib/kubelet/device-plugins", re.I),
        "the plugin may not create its socket in /var/lib/kubelet/device-plugins (or reach kubelet.sock)",
        "mount /var/lib/kubelet/device-plugins as a hostPath and run the container privileged or as root "
        "(check SELinux/AppArmor)",
        (f"{DP} v0.14.0-v0.20.0 internal/plugin/server.go 'Could not start device plugin for '%s': %s' "
         "(v0.14 :113, v0.20.0 :138) carries Go's error; its 'permission denied' wording is Go's, unverified",)),
    Signature(
        "device-open",
        re.compile(r"failed to open device|/dev/nvidia\S*: (no such file|permission denied)", re.I),
        "the plugin cannot open a GPU device node (/dev/nvidia*)",
        "check the driver is loaded on the node (nvidia-smi) and the device nodes exist; with a device "
        "list strategy of volume-mounts or CDI, check the runtime's configuration",
        ("unverified: not printed by NVIDIA's k8s-device-plugin v0.14-v0.20 (cmd/, internal/plugin, "
         "internal/rm); kept for other plugins",)),
    Signature(
        "kubelet-unreachable",
        re.compile(r"Could not contact Kubelet|Failed to start plugin: |Could not register device plugin: |"
                   r"Could not start device plugin for |Failed to start one or more plugins\. Retrying in 30s", re.I),
        "the plugin could not serve its socket or register with the kubelet (kubelet.sock); it keeps running "
        "unregistered and retries every 30 s",
        "mount the host's /var/lib/kubelet/device-plugins into the container at the same path (a hostPath), "
        "so the plugin's socket and kubelet.sock are the kubelet's, and check the kubelet runs on the node",
        (f"{DP} v0.14.0-v0.14.5 {MAIN}:278 'Could not contact Kubelet. Did you enable the device plugin "
         "feature gate?'",
         f"{DP} v0.15.0-v0.20.0 {MAIN}:301 (v0.15.x) / :339 (v0.16.x) / :374 (v0.17.x) / :387 (v0.18.2, v0.19.3) "
         "/ :390 (v0.19.0) / :409 (v0.20.0) 'Failed to start plugin: %v'",
         f"{DP} v0.14.0-v0.20.0 internal/plugin/server.go 'Could not start device plugin for '%s': %s', "
         "'Could not register device plugin: %s' (v0.14 :113/:121, v0.17.4 :135/:143, v0.20.0 :138/:146)",
         f"{DP} v0.14.0-v0.20.0 {MAIN}:183/208/229/268/280/280/302 'Failed to start one or more plugins. "
         "Retrying in 30s...'")),
    Signature(
        "grpc-crashed",
        re.compile(r"GRPC server for '[^']*' has repeatedly crashed recently\. Quitting", re.I),
        "the plugin's gRPC server crashed more than 5 times within an hour and the plugin quit",
        "read the lines before it in the log for the server's error; check the node's kubelet and "
        "/var/lib/kubelet/device-plugins",
        (f"{DP} v0.14.0-v0.20.0 internal/plugin/server.go:177 (v0.14) / :213 (v0.15.1, v0.16.2) / :192 (v0.17.4) "
         "/ :194 (v0.18.2) / :195 (v0.19.x, v0.20.0) klog.Fatalf",)),
    Signature(
        "no-devices",
        re.compile(r"No devices found\. Waiting indefinitely\.", re.I),
        "the plugin runs but serves no GPU (no GPU visible to the container, or an NVML failure above hidden "
        "by FAIL_ON_INIT_ERROR=false); it waits without registering",
        "check the node has GPUs and that the container sees them (the nvidia runtime or RuntimeClass); set "
        "FAIL_ON_INIT_ERROR=true so an NVML failure crashes visibly",
        (f"{DP} v0.14.0-v0.20.0 {MAIN}:287 (v0.14.x) / :308 (v0.15.x) / :346 (v0.16.x) / :381 (v0.17.x) / :394 "
         "(v0.18.2, v0.19.3) / :397 (v0.19.0) / :416 (v0.20.0) 'No devices found. Waiting indefinitely.'",)),
)


def matches(lines: list[str]) -> list[dict[str, str]]:
    """Each signature found in ``lines``, once, with the first line that shows it; a line an
    earlier (more specific) signature explains is not matched again (NVML's ``Failed to
    initialize NVML: Driver/library version mismatch`` is a driver mismatch, not a missing NVML)."""
    found = []
    explained: set[int] = set()
    for sig in SIGNATURES:
        hits = [(i, m) for i, ln in enumerate(lines) if i not in explained and (m := sig.pattern.search(ln))]
        explained.update(i for i, _ in hits)
        if hits:
            index, match = hits[0]
            value = shorten(shown(match.groupdict().get("value") or ""), 80)
            found.append({"signature": sig.name, "line": shorten(lines[index].strip(), 300),
                          "meaning": sig.meaning.replace("{value}", value), "fix": sig.fix.replace("{value}", value)})
    return found
