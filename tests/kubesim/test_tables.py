"""kubesim.tables: the meta.k8s.io/v1 Table that kube-apiserver sends to ``kubectl get``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubesim.tables import (
    format_label_selector,
    format_labels,
    human_duration,
    short_human_duration,
    to_table,
)

NOW = dt.datetime(2026, 11, 30, 10, 0, 0, tzinfo=dt.UTC)
CREATED = "2026-11-30T05:00:00Z"  # five hours before NOW


def ago(seconds: float) -> str:
    """RFC3339 timestamp ``seconds`` before NOW."""
    return (NOW - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, **extra: Any) -> dict:
    """Object metadata with a name and the standard creation time."""
    return {"name": name, "creationTimestamp": CREATED, **extra}


def columns(table: dict) -> list[tuple[str, int]]:
    """(name, priority) of each column definition."""
    return [(c["name"], c["priority"]) for c in table["columnDefinitions"]]


def cells(resource: str, obj: dict, **kwargs: Any) -> list:
    """Cells of the single row rendered for ``obj``."""
    table = to_table(resource, [obj], now=NOW, **kwargs)
    assert len(table["rows"]) == 1
    return table["rows"][0]["cells"]


def row_for(resource: str, obj: dict) -> dict:
    """The single row rendered for ``obj``."""
    return to_table(resource, [obj], now=NOW)["rows"][0]


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1.5, "0s"),
        (0, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (123, "2m3s"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600 + 20 * 60, "3h20m"),
        (5 * 3600, "5h"),
        (8 * 3600 + 59 * 60, "8h"),
        (47 * 3600, "47h"),
        (2 * 86400, "2d"),
        (2 * 86400 + 5 * 3600, "2d5h"),
        (8 * 86400, "8d"),
        (45 * 86400, "45d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (740 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, expected: str) -> None:
    """HumanDuration matches apimachinery's thresholds and two-unit forms."""
    assert human_duration(dt.timedelta(seconds=seconds)) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (59, "59s"),
        (61, "1m"),
        (3600 * 5 + 59, "5h"),
        (86400 * 45, "45d"),
        (86400 * 800, "2y"),
    ],
)
def test_short_human_duration(seconds: float, expected: str) -> None:
    """ShortHumanDuration keeps a single unit."""
    assert short_human_duration(dt.timedelta(seconds=seconds)) == expected


def test_age_uses_the_simulated_clock_and_unknown_without_timestamp() -> None:
    """AGE is now - creationTimestamp; a missing timestamp prints <unknown>."""
    assert cells("namespaces", {"metadata": meta("a")})[2] == "5h"
    assert cells("namespaces", {"metadata": {"name": "b"}})[2] == "<unknown>"
    naive_now = NOW.replace(tzinfo=None)
    assert (
        to_table("namespaces", [{"metadata": meta("c")}], now=naive_now)["rows"][0]["cells"][2]
        == "5h"
    )


# ------------------------------------------------------------------ envelope


def test_table_envelope_and_column_definition_keys() -> None:
    """The Table carries kind, apiVersion, list metadata and five-key column definitions."""
    table = to_table(
        "namespaces", [], now=NOW, list_meta={"resourceVersion": "42", "continue": "abc"}
    )
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "42", "continue": "abc"}
    assert table["rows"] == []
    for column in table["columnDefinitions"]:
        assert set(column) == {"name", "type", "format", "description", "priority"}
    assert table["columnDefinitions"][0]["format"] == "name"
    assert table["columnDefinitions"][0]["description"].startswith("Name must be unique")


def test_default_list_meta_comes_from_the_objects() -> None:
    """Without list_meta the Table takes the (newest) object's resourceVersion."""
    objs = [
        {"metadata": meta("a", resourceVersion="9")},
        {"metadata": meta("b", resourceVersion="12")},
    ]
    assert to_table("namespaces", objs, now=NOW)["metadata"] == {"resourceVersion": "12"}
    assert to_table("namespaces", [], now=NOW)["metadata"] == {}


def test_include_object_metadata_is_partial_object_metadata() -> None:
    """includeObject=Metadata (the default) embeds PartialObjectMetadata."""
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "labels": {"x": "y"}}}
    row = to_table("namespaces", [obj], now=NOW)["rows"][0]
    assert row["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": "a", "labels": {"x": "y"}, "creationTimestamp": None},
    }
    assert (
        to_table("namespaces", [obj], now=NOW, include_object="")["rows"][0]["object"]["kind"]
        == "PartialObjectMetadata"
    )


def test_include_object_object_and_none() -> None:
    """includeObject=Object embeds a copy of the object; None serializes a null object."""
    obj = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": meta("a"),
        "status": {"phase": "Active"},
    }
    full = to_table("namespaces", [obj], now=NOW, include_object="Object")["rows"][0]["object"]
    assert full == obj
    assert full is not obj
    row = to_table("namespaces", [obj], now=NOW, include_object="None")["rows"][0]
    assert "object" in row
    assert row["object"] is None


def test_include_object_rejects_unknown_values() -> None:
    """An unknown includeObject value is a bad request."""
    with pytest.raises(ValueError, match="includeObject"):
        to_table("namespaces", [], now=NOW, include_object="Everything")


def test_default_convertor_for_other_resources() -> None:
    """Unknown resources get Name and a 'Created At' date column with RFC3339 cells."""
    obj = {"metadata": {"name": "cm", "creationTimestamp": "2026-11-30T09:00:00.250000+01:00"}}
    table = to_table("customresourcedefinitions", [obj], now=NOW)
    assert columns(table) == [("Name", 0), ("Created At", 0)]
    assert table["columnDefinitions"][1]["type"] == "date"
    assert table["rows"][0]["cells"] == ["cm", "2026-11-30T08:00:00Z"]
    assert cells("customresourcedefinitions", {"metadata": {"name": "x"}}) == ["x", "0001-01-01T00:00:00Z"]


def test_default_convertor_with_no_objects_has_null_rows() -> None:
    """The default convertor never allocates its rows, so an empty list gives rows: null."""
    assert to_table("customresourcedefinitions", [], now=NOW)["rows"] is None
    assert to_table("pods", [], now=NOW)["rows"] == []


# ------------------------------------------------------------------ wide columns


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        (
            "nodes",
            [
                ("Name", 0),
                ("Status", 0),
                ("Roles", 0),
                ("Age", 0),
                ("Version", 0),
                ("Internal-IP", 1),
                ("External-IP", 1),
                ("OS-Image", 1),
                ("Kernel-Version", 1),
                ("Container-Runtime", 1),
            ],
        ),
        (
            "pods",
            [
                ("Name", 0),
                ("Ready", 0),
                ("Status", 0),
                ("Restarts", 0),
                ("Age", 0),
                ("IP", 1),
                ("Node", 1),
                ("Nominated Node", 1),
                ("Readiness Gates", 1),
            ],
        ),
        ("namespaces", [("Name", 0), ("Status", 0), ("Age", 0)]),
        (
            "events",
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ],
        ),
        (
            "daemonsets",
            [
                ("Name", 0),
                ("Desired", 0),
                ("Current", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Node Selector", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ],
        ),
        (
            "deployments",
            [
                ("Name", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ],
        ),
        ("controllerrevisions", [("Name", 0), ("Controller", 0), ("Revision", 0), ("Age", 0)]),
        ("resourceclaims", [("Name", 0), ("State", 0), ("Age", 0)]),
        ("resourceclaimtemplates", [("Name", 0), ("Age", 0)]),
        ("deviceclasses", [("Name", 0), ("Age", 0)]),
        ("resourceclasses", [("Name", 0), ("DriverName", 0), ("Age", 0)]),
        ("resourceslices", [("Name", 0), ("Node", 0), ("Driver", 0), ("Pool", 0), ("Age", 0)]),
        ("podschedulingcontexts", [("Name", 0), ("SelectedNode", 0), ("Age", 0)]),
    ],
)
def test_column_names_and_priorities(resource: str, expected: list[tuple[str, int]]) -> None:
    """Each kind has the printer's columns; priority 1 marks the -o wide ones."""
    assert columns(to_table(resource, [], now=NOW)) == expected


def test_rows_always_carry_the_wide_cells() -> None:
    """Like the server (Wide: true), every row has one cell per column, wide ones included."""
    objs = {
        "nodes": {"metadata": meta("n")},
        "pods": {"metadata": meta("p")},
        "events": {"metadata": meta("e")},
        "daemonsets": {"metadata": meta("d")},
        "deployments": {"metadata": meta("d")},
    }
    for resource, obj in objs.items():
        table = to_table(resource, [obj], now=NOW)
        assert len(table["rows"][0]["cells"]) == len(table["columnDefinitions"]), resource


# ------------------------------------------------------------------ nodes


def node(
    ready: str | None = "True", *, unschedulable: bool = False, labels: dict | None = None
) -> dict:
    """A Node with an optional Ready condition."""
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append({"type": "Ready", "status": ready})
    return {
        "metadata": meta("gpu-node-1", labels=labels or {}),
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": conditions,
            "addresses": [
                {"type": "Hostname", "address": "gpu-node-1"},
                {"type": "InternalIP", "address": "10.0.0.11"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.31.2",
                "osImage": "Ubuntu 22.04.4 LTS",
                "kernelVersion": "5.15.0-105-generic",
                "containerRuntimeVersion": "containerd://1.7.13",
            },
        },
    }


def test_node_cells() -> None:
    """A ready worker node prints Ready, <none> roles, its version and the wide cells."""
    assert cells("nodes", node()) == [
        "gpu-node-1",
        "Ready",
        "<none>",
        "5h",
        "v1.31.2",
        "10.0.0.11",
        "<none>",
        "Ubuntu 22.04.4 LTS",
        "5.15.0-105-generic",
        "containerd://1.7.13",
    ]


@pytest.mark.parametrize(
    ("ready", "unschedulable", "expected"),
    [
        ("True", False, "Ready"),
        ("False", False, "NotReady"),
        ("Unknown", False, "NotReady"),
        (None, False, "Unknown"),
        ("True", True, "Ready,SchedulingDisabled"),
        ("False", True, "NotReady,SchedulingDisabled"),
        (None, True, "Unknown,SchedulingDisabled"),
    ],
)
def test_node_status(ready: str | None, unschedulable: bool, expected: str) -> None:
    """STATUS comes from the Ready condition, plus SchedulingDisabled when cordoned."""
    assert cells("nodes", node(ready, unschedulable=unschedulable))[1] == expected


def test_node_roles_are_sorted_and_deduplicated() -> None:
    """ROLES lists node-role.kubernetes.io/<role> keys and kubernetes.io/role, sorted."""
    labels = {
        "node-role.kubernetes.io/worker": "",
        "node-role.kubernetes.io/control-plane": "",
        "node-role.kubernetes.io/": "",
        "kubernetes.io/role": "worker",
        "nvidia.com/gpu.present": "true",
    }
    assert cells("nodes", node(labels=labels))[2] == "control-plane,worker"


def test_node_wide_cells_without_node_info() -> None:
    """Missing node info prints <unknown> and missing addresses <none>."""
    obj = {
        "metadata": meta("bare"),
        "status": {"addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}]},
    }
    assert cells("nodes", obj)[4:] == [
        "",
        "<none>",
        "1.2.3.4",
        "<unknown>",
        "<unknown>",
        "<unknown>",
    ]


# ------------------------------------------------------------------ pods


def pod(
    *statuses: dict,
    phase: str = "Running",
    ready_condition: str | None = "True",
    containers: int | None = None,
    **extra_status: Any,
) -> dict:
    """A pod with the given container statuses (one container per status by default)."""
    count = len(statuses) if containers is None else containers
    conditions = []
    if ready_condition is not None:
        conditions.append({"type": "Ready", "status": ready_condition})
    return {
        "metadata": meta("nvidia-device-plugin-daemonset-abcde", namespace="kube-system"),
        "spec": {"nodeName": "gpu-node-1", "containers": [{"name": f"c{i}"} for i in range(count)]},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": list(statuses),
            **extra_status,
        },
    }


RUNNING = {
    "name": "c0",
    "ready": True,
    "restartCount": 0,
    "state": {"running": {"startedAt": CREATED}},
}


def test_pod_running_cells() -> None:
    """A ready running pod prints 1/1 Running 0 and its IP and node in the wide cells."""
    obj = pod(RUNNING, podIP="10.244.1.7", podIPs=[{"ip": "10.244.1.7"}])
    assert cells("pods", obj) == [
        "nvidia-device-plugin-daemonset-abcde",
        "1/1",
        "Running",
        "0",
        "5h",
        "10.244.1.7",
        "gpu-node-1",
        "<none>",
        "<none>",
    ]


def test_pod_ip_falls_back_to_pod_ip_field() -> None:
    """Only status.podIP set still shows the IP (as v1->internal conversion fills podIPs)."""
    assert cells("pods", pod(RUNNING, podIP="10.244.1.8"))[5] == "10.244.1.8"
    assert cells("pods", pod(RUNNING))[5] == "<none>"


def test_pod_crash_loop_back_off_with_restarts_ago() -> None:
    """A crash-looping container shows CrashLoopBackOff and 'N (age ago)' restarts."""
    status = {
        "name": "c0",
        "ready": False,
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(25)}},
    }
    assert cells("pods", pod(status, ready_condition="False"))[1:4] == [
        "0/1",
        "CrashLoopBackOff",
        "3 (25s ago)",
    ]


def test_pod_restarts_without_finished_at_is_the_bare_count() -> None:
    """Restarts with no last termination time print just the count."""
    status = {**RUNNING, "restartCount": 2}
    assert cells("pods", pod(status))[3] == "2"
    status = {**RUNNING, "restartCount": 2, "lastState": {"terminated": {"exitCode": 1}}}
    assert cells("pods", pod(status))[3] == "2"


def test_pod_container_creating() -> None:
    """A waiting container's reason (ContainerCreating) becomes the status."""
    status = {
        "name": "c0",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    assert cells("pods", pod(status, phase="Pending", ready_condition="False"))[1:3] == [
        "0/1",
        "ContainerCreating",
    ]


def test_pod_pending_without_statuses_shows_phase() -> None:
    """An unscheduled pod shows its phase, or SchedulingGated when gated."""
    assert cells("pods", pod(phase="Pending", ready_condition=None, containers=1))[1:3] == [
        "0/1",
        "Pending",
    ]
    gated = pod(phase="Pending", ready_condition=None, containers=1)
    gated["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    assert cells("pods", gated)[2] == "SchedulingGated"


def test_pod_running_but_not_ready_stays_running() -> None:
    """A running container that is not ready keeps STATUS Running with READY 0/1."""
    status = {**RUNNING, "ready": False}
    assert cells("pods", pod(status, ready_condition="False"))[1:3] == ["0/1", "Running"]


def test_pod_not_ready_when_completed_container_and_ready_false() -> None:
    """Completed + still-running containers print NotReady if the Ready condition is false."""
    completed = {
        "name": "c0",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    running = {**RUNNING, "name": "c1"}
    assert cells("pods", pod(completed, running, ready_condition="False"))[1:3] == [
        "1/2",
        "NotReady",
    ]
    assert cells("pods", pod(completed, running, ready_condition="True"))[1:3] == ["1/2", "Running"]


def test_pod_completed_with_row_condition() -> None:
    """A succeeded pod prints Completed and carries the Completed row condition."""
    done = {
        "name": "c0",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    row = row_for("pods", pod(done, phase="Succeeded", ready_condition="False"))
    assert row["cells"][1:3] == ["0/1", "Completed"]
    assert row["conditions"] == [
        {
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        }
    ]
    assert "conditions" not in row_for("pods", pod(RUNNING))


def test_pod_failed_with_exit_code_and_signal() -> None:
    """A terminated container without reason prints ExitCode:N or Signal:N; failed pods get the Failed condition."""
    exit_code = {"name": "c0", "restartCount": 0, "state": {"terminated": {"exitCode": 2}}}
    row = row_for("pods", pod(exit_code, phase="Failed", ready_condition="False"))
    assert row["cells"][2] == "ExitCode:2"
    assert row["conditions"][0]["reason"] == "Failed"
    signal = {
        "name": "c0",
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "signal": 9}},
    }
    assert cells("pods", pod(signal, phase="Failed"))[2] == "Signal:9"


def test_pod_terminating() -> None:
    """A deletionTimestamp on a non-terminal pod prints Terminating."""
    obj = pod(RUNNING)
    obj["metadata"]["deletionTimestamp"] = ago(10)
    assert cells("pods", obj)[1:3] == ["1/1", "Terminating"]


def test_pod_deleted_but_terminal_keeps_its_status() -> None:
    """A deleted pod that already completed is not shown as Terminating."""
    done = {
        "name": "c0",
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    obj = pod(done, phase="Succeeded")
    obj["metadata"]["deletionTimestamp"] = ago(10)
    assert cells("pods", obj)[2] == "Completed"


def test_pod_on_lost_node_prints_unknown() -> None:
    """A deleted pod with status.reason NodeLost prints Unknown."""
    obj = pod(RUNNING, reason="NodeLost")
    obj["metadata"]["deletionTimestamp"] = ago(10)
    assert cells("pods", obj)[2] == "Unknown"


def test_pod_init_containers() -> None:
    """Init containers print Init:i/n, Init:<reason> and hide main-container restarts."""
    obj = pod({**RUNNING, "restartCount": 0}, phase="Pending", ready_condition="False")
    obj["spec"]["initContainers"] = [{"name": "wait-gpu"}, {"name": "copy"}]
    done = {"name": "wait-gpu", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}
    obj["status"]["initContainerStatuses"] = [
        done,
        {"name": "copy", "restartCount": 0, "state": {"running": {}}},
    ]
    assert cells("pods", obj)[1:4] == ["0/1", "Init:1/2", "0"]
    crashing = {
        "name": "copy",
        "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(70)}},
    }
    obj["status"]["initContainerStatuses"] = [done, crashing]
    assert cells("pods", obj)[2:4] == ["Init:CrashLoopBackOff", "4 (70s ago)"]
    failed = {
        "name": "copy",
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
    }
    obj["status"]["initContainerStatuses"] = [done, failed]
    assert cells("pods", obj)[2] == "Init:Error"


def test_pod_sidecar_init_container_counts_as_container() -> None:
    """A restartable (sidecar) init container adds to READY's total and ready count."""
    obj = pod(RUNNING)
    obj["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    obj["status"]["initContainerStatuses"] = [
        {
            "name": "proxy",
            "ready": True,
            "started": True,
            "restartCount": 1,
            "state": {"running": {}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}},
        }
    ]
    obj["status"]["conditions"].append({"type": "Initialized", "status": "True"})
    assert cells("pods", obj)[1:4] == ["2/2", "Running", "1 (5m ago)"]


def test_pod_readiness_gates_and_nominated_node() -> None:
    """Wide cells count true readiness gates and show the nominated node."""
    obj = pod(RUNNING, nominatedNodeName="gpu-node-2")
    obj["spec"]["readinessGates"] = [
        {"conditionType": "example.com/a"},
        {"conditionType": "example.com/b"},
    ]
    obj["status"]["conditions"].append({"type": "example.com/a", "status": "True"})
    assert cells("pods", obj)[7:] == ["gpu-node-2", "1/2"]


# ------------------------------------------------------------------ namespaces


def test_namespace_cells() -> None:
    """Namespaces print their phase."""
    assert cells(
        "namespaces", {"metadata": meta("gpu-operator"), "status": {"phase": "Terminating"}}
    ) == [
        "gpu-operator",
        "Terminating",
        "5h",
    ]


# ------------------------------------------------------------------ events


def event(**fields: Any) -> dict:
    """A core/v1 Event about a device-plugin pod."""
    base = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": meta("nvidia-device-plugin-daemonset-abcde.17f9a"),
        "involvedObject": {
            "kind": "Pod",
            "name": "nvidia-device-plugin-daemonset-abcde",
            "fieldPath": "spec.containers{nvidia-device-plugin-ctr}",
        },
        "reason": "BackOff",
        "message": "Back-off restarting failed container\n",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "gpu-node-1"},
    }
    return {**base, **fields}


def test_event_cells() -> None:
    """Events print last seen, type, reason, kind/name, trimmed message and the wide cells."""
    obj = event(firstTimestamp=ago(300), lastTimestamp=ago(30), count=5)
    assert cells("events", obj) == [
        "30s",
        "Warning",
        "BackOff",
        "pod/nvidia-device-plugin-daemonset-abcde",
        "spec.containers{nvidia-device-plugin-ctr}",
        "kubelet, gpu-node-1",
        "Back-off restarting failed container",
        "5m",
        5,
        "nvidia-device-plugin-daemonset-abcde.17f9a",
    ]


def test_event_last_seen_has_no_repeat_suffix() -> None:
    """The server's LAST SEEN is a bare age; '(xN over ...)' is kubectl describe/events only."""
    assert (
        cells("events", event(firstTimestamp=ago(600), lastTimestamp=ago(5), count=12))[0] == "5s"
    )


def test_event_time_fallbacks() -> None:
    """LAST SEEN falls back to firstTimestamp, then eventTime; a missing count prints 1."""
    assert cells("events", event(firstTimestamp=ago(90)))[0] == "90s"
    row = cells(
        "events",
        event(eventTime=(NOW - dt.timedelta(seconds=42)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
    )
    assert (row[0], row[7], row[8]) == ("42s", "42s", 1)
    assert cells("events", event())[0] == "<unknown>"


def test_event_series_and_reporting_fields() -> None:
    """A series sets LAST SEEN and COUNT; reportingComponent/Instance fill an empty source."""
    obj = event(
        eventTime="2026-11-30T09:00:00.000000Z",
        series={"count": 7, "lastObservedTime": ago(3)},
        source={},
        reportingComponent="dra-controller",
        reportingInstance="",
    )
    row = cells("events", obj)
    assert (row[0], row[5], row[7], row[8]) == ("3s", "dra-controller", "60m", 7)


def test_event_object_without_name_and_events_v1_shape() -> None:
    """OBJECT is the lower-cased kind alone without a name; events.k8s.io/v1 fields are mapped."""
    obj = event(involvedObject={"kind": "Node"})
    assert cells("events", obj)[3] == "node"
    v1 = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": meta("e1"),
        "regarding": {"kind": "DaemonSet", "name": "nvidia-device-plugin-daemonset"},
        "note": "Created pod",
        "reason": "SuccessfulCreate",
        "type": "Normal",
        "deprecatedFirstTimestamp": ago(120),
        "deprecatedLastTimestamp": ago(60),
        "deprecatedCount": 2,
        "reportingController": "daemonset-controller",
    }
    assert cells("events", v1) == [
        "60s",
        "Normal",
        "SuccessfulCreate",
        "daemonset/nvidia-device-plugin-daemonset",
        "",
        "daemonset-controller",
        "Created pod",
        "2m",
        2,
        "e1",
    ]


# ------------------------------------------------------------------ daemonsets / deployments


def daemonset(**spec: Any) -> dict:
    """The NVIDIA device-plugin DaemonSet."""
    template = {
        "metadata": {"labels": {"name": "nvidia-device-plugin-ds"}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux"},
            "containers": [
                {
                    "name": "nvidia-device-plugin-ctr",
                    "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
                },
                {"name": "sidecar", "image": "busybox:1.36"},
            ],
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta("nvidia-device-plugin-daemonset", namespace="kube-system"),
        "spec": {
            "selector": {"matchLabels": {"name": "nvidia-device-plugin-ds"}},
            "template": template,
            **spec,
        },
        "status": {
            "desiredNumberScheduled": 4,
            "currentNumberScheduled": 4,
            "numberReady": 3,
            "updatedNumberScheduled": 2,
            "numberAvailable": 3,
        },
    }


def test_daemonset_cells() -> None:
    """DaemonSets print integer counts, the node selector and the wide container cells."""
    assert cells("daemonsets", daemonset()) == [
        "nvidia-device-plugin-daemonset",
        4,
        4,
        3,
        2,
        3,
        "kubernetes.io/os=linux,nvidia.com/gpu.present=true",
        "5h",
        "nvidia-device-plugin-ctr,sidecar",
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.0,busybox:1.36",
        "name=nvidia-device-plugin-ds",
    ]


def test_daemonset_without_node_selector_or_status() -> None:
    """No node selector prints <none>; missing status counts print 0."""
    obj = daemonset()
    del obj["spec"]["template"]["spec"]["nodeSelector"]
    del obj["status"]
    assert cells("daemonsets", obj)[1:7] == [0, 0, 0, 0, 0, "<none>"]


def test_deployment_cells() -> None:
    """Deployments print ready/desired, integer up-to-date/available and the selector."""
    obj = {
        "metadata": meta("dra-controller"),
        "spec": {
            "replicas": 2,
            "selector": {
                "matchLabels": {"app": "dra"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}],
            },
            "template": {"spec": {"containers": [{"name": "ctrl", "image": "dra:1.0"}]}},
        },
        "status": {"readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1},
    }
    assert cells("deployments", obj) == [
        "dra-controller",
        "1/2",
        2,
        1,
        "5h",
        "ctrl",
        "dra:1.0",
        "app=dra,tier in (api,web)",
    ]


def test_deployment_defaults_replicas_and_empty_selector() -> None:
    """Unset replicas default to 1; no selector renders as an empty string."""
    obj = {"metadata": meta("d"), "spec": {"template": {"spec": {"containers": []}}}}
    assert cells("deployments", obj) == ["d", "0/1", 0, 0, "5h", "", "", ""]


# ------------------------------------------------------------------ selectors


def test_format_labels() -> None:
    """FormatLabels sorts k=v strings and prints <none> when empty."""
    assert format_labels({"b": "2", "a": "1"}) == "a=1,b=2"
    assert format_labels({}) == "<none>"
    assert format_labels(None) == "<none>"


def test_format_label_selector() -> None:
    """FormatLabelSelector renders requirements sorted by key and <none>/<error> edge cases."""
    selector = {
        "matchLabels": {"z": "1"},
        "matchExpressions": [
            {"key": "gpu", "operator": "Exists"},
            {"key": "cpu", "operator": "DoesNotExist"},
            {"key": "mode", "operator": "NotIn", "values": ["b", "a"]},
            {"key": "os", "operator": "In", "values": ["linux"]},
        ],
    }
    assert format_label_selector(selector) == "!cpu,gpu,mode notin (a,b),os in (linux),z=1"
    assert format_label_selector({}) == "<none>"
    assert format_label_selector(None) == "<none>"
    assert (
        format_label_selector(
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}
        )
        == "<error>"
    )
    assert (
        format_label_selector({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
        == "<error>"
    )
    assert format_label_selector({"matchLabels": {"bad key": "x"}}) == "<error>"


# ------------------------------------------------------------------ controllerrevisions


def test_controller_revision_cells() -> None:
    """CONTROLLER is kind.group/name of the controller owner; REVISION is an integer."""
    owner = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "nvidia-device-plugin-daemonset",
        "controller": True,
        "uid": "u",
    }
    obj = {
        "metadata": meta("nvidia-device-plugin-daemonset-6d4f8b7c9", ownerReferences=[owner]),
        "revision": 3,
    }
    assert cells("controllerrevisions", obj) == [
        "nvidia-device-plugin-daemonset-6d4f8b7c9",
        "daemonset.apps/nvidia-device-plugin-daemonset",
        3,
        "5h",
    ]


def test_controller_revision_without_controller_or_group() -> None:
    """No controller owner prints <none>; a core-group owner prints kind/name."""
    not_controller = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x"}
    assert (
        cells(
            "controllerrevisions",
            {"metadata": meta("r", ownerReferences=[not_controller]), "revision": 1},
        )[1]
        == "<none>"
    )
    core = {"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": True}
    assert (
        cells(
            "controllerrevisions", {"metadata": meta("r", ownerReferences=[core]), "revision": 1}
        )[1]
        == "pod/p"
    )


# ------------------------------------------------------------------ resource.k8s.io


def claim(
    *,
    allocated: bool = False,
    reserved: bool = False,
    deleted: bool = False,
    api: str = "resource.k8s.io/v1beta1",
) -> dict:
    """A ResourceClaim in the requested state."""
    metadata = meta("gpu-claim", namespace="default")
    if deleted:
        metadata["deletionTimestamp"] = ago(5)
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {
            "devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]}
        }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "trainer", "uid": "u1"}]
    return {
        "apiVersion": api,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {},
        "status": status,
    }


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({}, "pending"),
        ({"allocated": True}, "allocated"),
        ({"allocated": True, "reserved": True}, "allocated,reserved"),
        ({"deleted": True}, "deleted"),
        ({"deleted": True, "allocated": True}, "deleted,allocated"),
        ({"deleted": True, "allocated": True, "reserved": True}, "deleted,allocated,reserved"),
        ({"reserved": True}, "pending"),
    ],
)
def test_resource_claim_state(state: dict, expected: str) -> None:
    """STATE summarizes deletion, allocation and reservation like resourceClaimState."""
    assert cells("resourceclaims", claim(**state)) == ["gpu-claim", expected, "5h"]


def test_v1alpha2_resource_claims_use_the_old_printer() -> None:
    """A v1alpha2 server printed class name and allocation mode, and a deallocating state."""
    obj = claim(allocated=True, api="resource.k8s.io/v1alpha2")
    obj["spec"] = {"resourceClassName": "gpu.nvidia.com"}
    table = to_table("resourceclaims", [obj], now=NOW)
    assert columns(table) == [
        ("Name", 0),
        ("ResourceClassName", 0),
        ("AllocationMode", 0),
        ("State", 0),
        ("Age", 0),
    ]
    assert table["rows"][0]["cells"] == [
        "gpu-claim",
        "gpu.nvidia.com",
        "WaitForFirstConsumer",
        "allocated",
        "5h",
    ]
    obj["status"]["deallocationRequested"] = True
    assert cells("resourceclaims", obj)[3] == "allocated,deallocating"
    deleted = claim(allocated=True, deleted=True, api="resource.k8s.io/v1alpha2")
    assert cells("resourceclaims", deleted)[3] == "deleted,allocated,deallocating"
    empty = to_table("resourceclaims", [], now=NOW, api_version="resource.k8s.io/v1alpha2")
    assert [c["name"] for c in empty["columnDefinitions"]][1:3] == [
        "ResourceClassName",
        "AllocationMode",
    ]


def test_resource_claim_templates() -> None:
    """Claim templates print NAME AGE; v1alpha2 ones also class name and allocation mode."""
    obj = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "metadata": meta("gpu-template"),
        "spec": {"spec": {}},
    }
    assert cells("resourceclaimtemplates", obj) == ["gpu-template", "5h"]
    old = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "metadata": meta("gpu-template"),
        "spec": {"spec": {"resourceClassName": "gpu.example.com", "allocationMode": "Immediate"}},
    }
    assert cells("resourceclaimtemplates", old) == [
        "gpu-template",
        "gpu.example.com",
        "Immediate",
        "5h",
    ]


def test_device_and_resource_classes() -> None:
    """DeviceClasses print NAME AGE; v1alpha2 ResourceClasses add DRIVERNAME."""
    assert cells("deviceclasses", {"metadata": meta("gpu.nvidia.com")}) == ["gpu.nvidia.com", "5h"]
    rc = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "metadata": meta("gpu"),
        "driverName": "gpu.resource.nvidia.com",
    }
    assert cells("resourceclasses", rc) == ["gpu", "gpu.resource.nvidia.com", "5h"]


def test_resource_slices_new_and_v1alpha2_shapes() -> None:
    """Slices print node, driver and pool from spec; v1alpha2 slices from top-level fields."""
    new = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "metadata": meta("gpu-node-1-gpu.nvidia.com-x7k2p"),
        "spec": {
            "nodeName": "gpu-node-1",
            "driver": "gpu.nvidia.com",
            "pool": {"name": "gpu-node-1", "generation": 1},
        },
    }
    assert cells("resourceslices", new) == [
        "gpu-node-1-gpu.nvidia.com-x7k2p",
        "gpu-node-1",
        "gpu.nvidia.com",
        "gpu-node-1",
        "5h",
    ]
    network = {
        "metadata": meta("net"),
        "spec": {"allNodes": True, "driver": "net.example.com", "pool": {"name": "fabric"}},
    }
    assert cells("resourceslices", network)[1:4] == ["", "net.example.com", "fabric"]
    old = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "metadata": meta("old"),
        "nodeName": "gpu-node-2",
        "driverName": "gpu.resource.nvidia.com",
    }
    assert cells("resourceslices", old) == [
        "old",
        "gpu-node-2",
        "gpu.resource.nvidia.com",
        "",
        "5h",
    ]


def test_pod_scheduling_contexts() -> None:
    """PodSchedulingContexts print the selected node (empty until chosen)."""
    ctx = {
        "apiVersion": "resource.k8s.io/v1alpha2",
        "metadata": meta("trainer"),
        "spec": {"selectedNode": "gpu-node-1"},
    }
    assert cells("podschedulingcontexts", ctx) == ["trainer", "gpu-node-1", "5h"]
    assert cells("podschedulingcontexts", {"metadata": meta("t2"), "spec": {}})[1] == ""
