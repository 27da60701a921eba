"""The failure signatures of NVIDIA's k8s-device-plugin, v0.14 to v0.20 (issue 58, item 4):
each line a real release prints when it fails is recognised with the right meaning and fix.

Every line below is a format string read at a tag of NVIDIA/k8s-device-plugin (see
/work/research-58.md, section 1.3, and the ``sources`` of each signature), rendered as klog
prints it (``Lmmdd hh:mm:ss.uuuuuu`` + the 7-wide pid + ``file:line] ``, vendor/k8s.io/klog/v2
internal/buffer/buffer.go:143-153): the file is the basename, the line the one at that tag."""

from __future__ import annotations

import pytest

from runbooks.daemonset import evidence, signatures


def klog(level: str, where: str, message: str) -> str:
    return f"{level}0102 15:04:05.123456       1 {where}] {message}"


NVML_HINTS = [  # printed after every "Failed to initialize NVML" (factory.go:<a+1>..<a+4>)
    "If this is a GPU node, did you set the docker default runtime to `nvidia`?",
    "You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
    "You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start",
    "If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on GPU nodes",
]
OLD_CHAIN = "error starting plugins: error creating plugin manager: unable to create plugin manager: "  # v0.14-v0.16
NEW_CHAIN = ("error starting plugins: error getting plugins: unable to create plugins: "  # v0.17+
             "failed to construct resource managers: ")

# (release, the factory.go line of "Failed to initialize NVML", main.go's last line, its chain, NVML's rendering)
# v0.14-v0.15 print go-nvlib's constant name; v0.16+ (go-nvml) NVML's own nvmlErrorString once the library loaded.
MISMATCH = [
    ("v0.14.5", 77, 123, OLD_CHAIN, "ERROR_LIB_RM_VERSION_MISMATCH"),
    ("v0.15.1", 72, 132, OLD_CHAIN, "ERROR_LIB_RM_VERSION_MISMATCH"),
    ("v0.16.2", 68, 149, OLD_CHAIN, "Driver/library version mismatch"),
    ("v0.17.4", 93, 173, NEW_CHAIN, "Driver/library version mismatch"),
    ("v0.18.2", 94, 185, NEW_CHAIN, "Driver/library version mismatch"),
    ("v0.19.3", 99, 185, NEW_CHAIN, "Driver/library version mismatch"),
    ("v0.20.0", 99, 198, NEW_CHAIN, "Driver/library version mismatch"),
]


def nvml_failure(factory: int, main: int, chain: str, ret: str) -> list[str]:
    return [klog("E", f"factory.go:{factory}", f"Failed to initialize NVML: {ret}."),
            *(klog("E", f"factory.go:{factory + 1 + i}", hint) for i, hint in enumerate(NVML_HINTS)),
            klog("E", f"main.go:{main}", f"{chain}nvml init failed: {ret}")]


def first(lines: list[str]) -> dict[str, str]:
    found = evidence.matches(["I0102 15:04:05.000000       1 main.go:1] Starting Plugins.", *lines])
    assert found, lines
    return found[0]


@pytest.mark.parametrize(("release", "factory", "main", "chain", "ret"), MISMATCH, ids=[m[0] for m in MISMATCH])
def test_a_driver_mismatch_is_the_hosts_problem_in_both_renderings(
        release: str, factory: int, main: int, chain: str, ret: str) -> None:
    """Issue 58: ``ERROR_LIB_RM_VERSION_MISMATCH`` (v0.14-v0.15) and ``Driver/library version
    mismatch`` (v0.16+) are the node's driver upgraded without its kernel module reloaded:
    reboot or reload the module; never "use another plugin build". Each line, alone too."""
    lines = nvml_failure(factory, main, chain, ret)
    found = evidence.matches(lines)
    assert [m["signature"] for m in found] == ["driver-mismatch"], found
    said = f"{found[0]['meaning']} {found[0]['fix']}"
    assert "kernel module" in said and "reboot" in said and "node" in said, said
    assert "plugin build" not in said and "another plugin" not in said, said
    for line in (lines[0], lines[-1]):
        assert first([line])["signature"] == "driver-mismatch", line


@pytest.mark.parametrize(("release", "lines"), [
    ("v0.19.3", [klog("I", "plugin-manager.go:100", "Detected platform: unknown"),
                 klog("W", "plugin-manager.go:107", "Unsupported platform detected; defaulting to nvml"),
                 klog("I", "plugin-manager.go:50", "Using device discovery strategy: nvml"),
                 *nvml_failure(99, 185, NEW_CHAIN, "ERROR_LIBRARY_NOT_FOUND")]),
    ("v0.20.0", [klog("I", "plugin-manager.go:101", "Detected platform: unknown"),
                 klog("W", "plugin-manager.go:108", "Unsupported platform detected; defaulting to nvml"),
                 klog("I", "plugin-manager.go:50", "Using device discovery strategy: nvml"),
                 *nvml_failure(99, 198, NEW_CHAIN, "ERROR_LIBRARY_NOT_FOUND")]),
])
def test_no_driver_library_in_the_container_is_the_toolkits(release: str, lines: list[str]) -> None:
    """Issue 58: v0.19.1+ default an unknown platform to nvml, then fail with
    ``ERROR_LIBRARY_NOT_FOUND``: the toolkit/runtime did not inject the driver's library;
    the fix names the NVIDIA Container Toolkit and the RuntimeClass."""
    found = evidence.matches(lines)
    names = [m["signature"] for m in found]
    assert set(names) == {"toolkit-not-configured", "nvml-missing"}, found
    for m in found:
        assert "NVIDIA Container Toolkit" in m["fix"] and "RuntimeClass" in m["fix"], m
    library = next(m for m in found if m["signature"] == "nvml-missing")
    assert "ERROR_LIBRARY_NOT_FOUND" in library["line"] and "libnvidia-ml" in library["meaning"], library
    assert first([lines[-1]])["signature"] == "nvml-missing"
    assert first([lines[3]])["signature"] == "nvml-missing"
    assert first([lines[1]])["signature"] == "toolkit-not-configured"


INCOMPATIBLE = [  # (release, the Incompatible line, the hint's line, main.go's last line, its message)
    ("v0.14.5", ("factory.go:115", "Incompatible platform detected"), "factory.go:116", "main.go:123",
     f"{OLD_CHAIN}platform detection failed"),
    ("v0.15.1", ("factory.go:112", "Incompatible platform detected"), "factory.go:113", "main.go:132",
     f"{OLD_CHAIN}platform detection failed"),
    ("v0.16.2", ("factory.go:87", "Incompatible strategy detected auto"), "factory.go:88", "main.go:149",
     f"{OLD_CHAIN}invalid device discovery strategy"),
    ("v0.17.4", ("factory.go:112", "Incompatible strategy detected auto"), "factory.go:113", "main.go:173",
     f"{NEW_CHAIN}invalid device discovery strategy"),
    ("v0.18.2", ("factory.go:113", "Incompatible strategy detected auto"), "factory.go:114", "main.go:185",
     f"{NEW_CHAIN}invalid device discovery strategy"),
    ("v0.19.0", ("factory.go:113", "Incompatible strategy detected auto"), "factory.go:114", "main.go:188",
     f"{NEW_CHAIN}invalid device discovery strategy"),
]


@pytest.mark.parametrize(("release", "incompatible", "hint", "main", "last"), INCOMPATIBLE,
                         ids=[i[0] for i in INCOMPATIBLE])
def test_an_incompatible_platform_or_strategy_is_the_toolkit_not_configured(
        release: str, incompatible: tuple[str, str], hint: str, main: str, last: str) -> None:
    """Issue 58: ``Incompatible platform detected`` (v0.14-v0.15) and ``Incompatible strategy
    detected auto`` (v0.16-v0.19.0), with NVIDIA's ``did you configure the NVIDIA Container
    Toolkit?`` hint and the last line, are the toolkit not configured."""
    lines = [klog("E", *incompatible),
             klog("E", hint, "If this is a GPU node, did you configure the NVIDIA Container Toolkit?"),
             klog("E", main, last)]
    found = evidence.matches(lines)
    assert [m["signature"] for m in found] == ["toolkit-not-configured"], found
    assert "NVIDIA Container Toolkit" in found[0]["fix"] and "RuntimeClass" in found[0]["fix"]
    for line in lines:
        assert first([line])["signature"] == "toolkit-not-configured", line


def test_v014s_non_nvml_platform_line_is_the_library_missing() -> None:
    """Issue 58: v0.14-v0.15 print ``Detected non-NVML platform: could not load NVML library: …``
    (manager/factory.go:107 / :104, go-nvlib info.go:59) before ``Incompatible platform detected``."""
    lines = [klog("I", "factory.go:107", "Detected non-NVML platform: could not load NVML library: "
                  "libnvidia-ml.so.1: cannot open shared object file: No such file or directory"),
             klog("E", "factory.go:115", "Incompatible platform detected")]
    assert [m["signature"] for m in evidence.matches(lines)] == ["nvml-missing", "toolkit-not-configured"]


@pytest.mark.parametrize(("release", "line"), [
    ("v0.14.5", klog("E", "main.go:123", "error starting plugins: error creating plugin manager: unknown strategy: foo")),
    ("v0.15.1", klog("E", "main.go:132", "error starting plugins: error creating plugin manager: unknown strategy: foo")),
    ("v0.16.2", klog("E", "main.go:149", "error starting plugins: error creating plugin manager: unknown strategy: foo")),
    ("v0.17.4", klog("E", "main.go:173", "error starting plugins: unable to validate flags: unknown MIG strategy: foo")),
    ("v0.18.2", klog("E", "main.go:185", "error starting plugins: unable to validate flags: unknown MIG strategy: foo")),
    ("v0.19.3", klog("E", "main.go:185", "error starting plugins: unable to validate flags: unknown MIG strategy: foo")),
    ("v0.20.0", klog("E", "main.go:198", "error starting plugins: unable to validate flags: unknown MIG strategy: foo")),
])
def test_an_unknown_mig_strategy_is_a_configuration_error_naming_the_value(release: str, line: str) -> None:
    """Issue 58: ``unknown strategy: X`` (v0.14-v0.16) and ``unable to validate flags: unknown
    MIG strategy: X`` (v0.17+) name the plugin's MIG_STRATEGY / --mig-strategy and the value."""
    found = first([line])
    assert found["signature"] == "mig-strategy", found
    said = f"{found['meaning']} {found['fix']}"
    assert "'foo'" in said and "MIG_STRATEGY" in said and "--mig-strategy" in said, said
    assert "none, single or mixed" in said and "configuration" in said, said


@pytest.mark.parametrize(("release", "lines"), [
    ("v0.14.5", [klog("E", "main.go:278", "Could not contact Kubelet. Did you enable the device plugin feature gate?"),
                 klog("E", "main.go:279", "You can check the prerequisites at: "
                      "https://github.com/NVIDIA/k8s-device-plugin#prerequisites"),
                 klog("I", "main.go:183", "Failed to start one or more plugins. Retrying in 30s...")]),
    # the error's text is Go's context.DeadlineExceeded (grpc's blocking dial timing out, research 1.3D)
    ("v0.15.1", [klog("E", "main.go:301", "Failed to start plugin: context deadline exceeded"),
                 klog("I", "main.go:208", "Failed to start one or more plugins. Retrying in 30s...")]),
    ("v0.16.2", [klog("E", "main.go:339", "Failed to start plugin: context deadline exceeded"),
                 klog("I", "main.go:229", "Failed to start one or more plugins. Retrying in 30s...")]),
    ("v0.17.4", [klog("E", "server.go:143", "Could not register device plugin: context deadline exceeded"),
                 klog("E", "main.go:374", "Failed to start plugin: context deadline exceeded"),
                 klog("I", "main.go:268", "Failed to start one or more plugins. Retrying in 30s...")]),
    ("v0.18.2", [klog("E", "main.go:387", "Failed to start plugin: context deadline exceeded"),
                 klog("I", "main.go:280", "Failed to start one or more plugins. Retrying in 30s...")]),
    ("v0.20.0", [klog("E", "server.go:146", "Could not register device plugin: context deadline exceeded"),
                 klog("E", "main.go:409", "Failed to start plugin: context deadline exceeded"),
                 klog("I", "main.go:302", "Failed to start one or more plugins. Retrying in 30s...")]),
])
def test_a_plugin_that_cannot_reach_the_kubelet_runs_on_unregistered(release: str, lines: list[str]) -> None:
    """Issue 58: ``Could not contact Kubelet`` (v0.14) / ``Failed to start plugin`` (v0.15+) and
    ``Retrying in 30s...``: the plugin keeps running unregistered; the fix names the kubelet
    socket and the device-plugin directory's mount."""
    found = evidence.matches(lines)
    assert [m["signature"] for m in found] == ["kubelet-unreachable"], found
    said = f"{found[0]['meaning']} {found[0]['fix']}"
    assert "30 s" in said and "kubelet.sock" in said and "/var/lib/kubelet/device-plugins" in said, said
    assert "hostPath" in said, said


@pytest.mark.parametrize(("release", "main"), [
    ("v0.14.5", 287), ("v0.15.1", 308), ("v0.16.2", 346), ("v0.17.4", 381), ("v0.18.2", 394), ("v0.19.0", 397),
    ("v0.19.3", 394), ("v0.20.0", 416)])
def test_no_devices_found_is_a_plugin_that_never_registers(release: str, main: int) -> None:
    """Issue 58: ``No devices found. Waiting indefinitely.``: running, never registered: no GPU
    visible to the container."""
    found = first([klog("I", f"main.go:{main}", "No devices found. Waiting indefinitely.")])
    assert found["signature"] == "no-devices", found
    said = f"{found['meaning']} {found['fix']}"
    assert "no GPU" in said and "container" in said and "FAIL_ON_INIT_ERROR" in said, said


def test_no_devices_after_an_nvml_failure_names_the_nvml_failure_first() -> None:
    """Issue 58: with FAIL_ON_INIT_ERROR=false the v0.14 plugin prints ``Incompatible platform
    detected`` then ``No devices found``: the cause is named first, the symptom after it."""
    lines = [klog("E", "factory.go:115", "Incompatible platform detected"),
             klog("I", "main.go:287", "No devices found. Waiting indefinitely.")]
    names = [m["signature"] for m in evidence.matches(lines)]
    assert names == ["toolkit-not-configured", "no-devices"], names


@pytest.mark.parametrize("line", [
    klog("E", "factory.go:77", "Failed to initialize NVML: ERROR_DRIVER_NOT_LOADED."),
    klog("E", "main.go:123", f"{OLD_CHAIN}nvml init failed: ERROR_DRIVER_NOT_LOADED"),
])
def test_another_nvml_failure_is_not_called_a_mismatch_or_a_missing_library(line: str) -> None:
    """Issue 58: another NVML return code (``ERROR_DRIVER_NOT_LOADED`` as v0.14 renders it) is
    NVML failing on the node, with its code, neither a mismatch nor a missing library."""
    found = first([line])
    assert found["signature"] == "nvml-init", found
    assert "driver" in found["meaning"] and "nvidia-smi" in found["fix"], found


@pytest.mark.parametrize("line", [
    klog("E", "main.go:149", "error starting plugins: unable to validate flags: invalid --device-list-strategy "
         "option: invalid strategy: foo"),  # v0.16.2
    klog("E", "main.go:123", "error starting plugins: unable to load config: unable to validate flags: "
         "invalid --device-list-strategy option: invalid strategy: foo"),  # v0.14.5
])
def test_other_flag_errors_are_the_configuration(line: str) -> None:
    """Issue 58: v0.16+ validate flags outside ``loadConfig`` (``unable to validate flags: …``)."""
    assert first([line])["signature"] == "config"


def test_every_signature_cites_its_source() -> None:
    """Issue 58: each signature names where its lines come from: NVIDIA's repository, path and
    tag(s), or says it is kubesim's (or unverified) wording."""
    for sig in signatures.SIGNATURES:
        assert sig.sources, sig.name
        for source in sig.sources:
            assert source.startswith(("NVIDIA/k8s-device-plugin ", "NVIDIA/go-nvml ", "kubesim ", "unverified")), source


def test_an_unregistered_plugins_log_is_read_for_its_signature() -> None:
    """Issue 58: a plugin that runs without registering (``Failed to start plugin`` … ``Retrying
    in 30s...``) never crash-loops, so only the registration check sees it: the log it read
    keeps its last lines (scrubbed), and the failed check names the signature's meaning and fix."""
    from runbooks.daemonset import checks as judge
    from runbooks.daemonset.observing import Snapshot
    from runbooks.engine.steps import CheckStatus
    from runbooks.inventory import PluginPod
    from runbooks.inventory.plugins import LogRead, read_registrations

    log = "\n".join([klog("I", "main.go:294", "Starting Plugins."),
                     klog("I", "main.go:330", "token: s3cr3t-value-1234567890"),
                     klog("E", "main.go:409", "Failed to start plugin: context deadline exceeded"),
                     klog("I", "main.go:302", "Failed to start one or more plugins. Retrying in 30s...")])
    read = LogRead(daemonset="ds", namespace="ns", pod="plugin-0", containers=["c"], kind="device-plugin")
    result = read_registrations([read], lambda ns, pod, container: log)[("ns", "plugin-0")]
    assert result.registered is False and result.tail and "s3cr3t-value-1234567890" not in "\n".join(result.tail)
    pods = [PluginPod(name="plugin-0", node="n000", phase="Running", ready=True, restarts=0, crashloop=False)]
    check = judge.registered(Snapshot(ds={}, pods=pods, revisions=[]), ["n000"], {"n000": result},
                             kind="device-plugin", everywhere=True)
    assert check.status is CheckStatus.FAIL
    assert "it did not register" in check.detail and "retries every 30 s" in check.detail, check.detail
    assert "hostPath" in check.detail, check.detail
    assert [s["signature"] for s in check.evidence["signatures"]] == ["kubelet-unreachable"], check.evidence
    assert check.evidence["signatures_of"] == "n000"


FS_WATCHER = [  # (release, main.go line printing it, the error as start() returns it, without a prefix)
    ("v0.14.5", 123, "failed to create FS watcher: too many open files"),
    ("v0.15.1", 132, "failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"),
    ("v0.17.4", 173, "failed to create FS watcher for /var/lib/kubelet/device-plugins/: too many open files"),
    ("v0.20.0", 198, "failed to create FS watcher for /var/lib/kubelet/device-plugins/: no such file or directory"),
]


@pytest.mark.parametrize(("release", "main", "message"), FS_WATCHER, ids=[f[0] for f in FS_WATCHER])
def test_the_fs_watchers_failure_names_inotify_and_the_directory(release: str, main: int, message: str) -> None:
    """Issue 58: the plugin exits when it cannot watch /var/lib/kubelet/device-plugins
    (``fsnotify.NewWatcher``'s EMFILE once the node's inotify instances are used up, or the
    directory missing); the fix is the node's inotify limit or the hostPath, not the image."""
    found = first([klog("I", "main.go:154", "Starting FS watcher."), klog("E", f"main.go:{main}", message)])
    assert found["signature"] == "fs-watcher", found
    assert "fs.inotify.max_user_instances" in found["fix"] and "hostPath" in found["fix"], found
