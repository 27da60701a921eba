"""Discovery documents, ``/version`` and ``/metrics`` as a real API server of each release serves them."""

from __future__ import annotations

from typing import Any

from kubesim import featuregates
from kubesim.resources import ApiSurface, ResourceType, git_version

_NO_WATCH = ("create", "delete", "get", "list", "patch", "update")


def version_info(minor: int) -> dict[str, Any]:
    gv = git_version(minor)
    return {
        "major": "1",
        "minor": str(minor),
        "gitVersion": gv,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.22.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(surface: ApiSurface, group: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(surface: ApiSurface) -> dict[str, Any]:
    groups = [
        _group(surface, g, vs) for g, vs in surface.group_versions().items() if g
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(surface: ApiSurface, group: str) -> dict[str, Any] | None:
    versions = surface.group_versions().get(group)
    if not group or not versions:
        return None
    body = _group(surface, group, versions)
    body.update(kind="APIGroup", apiVersion="v1")
    return body


def _resource_entries(res: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": res.plural,
        "singularName": res.singular,
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": list(res.verbs),
        "storageVersionHash": "",
    }
    if res.short_names:
        main["shortNames"] = list(res.short_names)
    if res.categories:
        main["categories"] = list(res.categories)
    out = [main]
    for sub in res.subresources:
        verbs = {"status": ["get", "patch", "update"], "log": ["get"], "eviction": ["create"],
                 "scale": ["get", "patch", "update"], "token": ["create"], "exec": ["create", "get"]}[sub]
        kind = {"log": "Pod", "eviction": "Eviction", "scale": "Scale", "token": "TokenRequest",
                "exec": "PodExecOptions"}.get(sub, res.kind)
        entry: dict[str, Any] = {
            "name": f"{res.plural}/{sub}", "singularName": "", "namespaced": res.namespaced,
            "kind": kind, "verbs": verbs,
        }
        if sub in ("eviction", "scale", "token"):
            entry["group"] = {"eviction": "policy", "scale": "autoscaling", "token": "authentication.k8s.io"}[sub]
            entry["version"] = "v1"
        out.append(entry)
    return out


def api_resource_list(surface: ApiSurface, group: str, version: str) -> dict[str, Any] | None:
    resources = surface.in_group_version(group, version)
    if not resources:
        return None
    entries = [e for res in resources for e in _resource_entries(res)]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def metrics_text(
    minor: int, feature_gates: dict[str, bool], object_counts: dict[str, int], requests: dict[tuple[str, str, int], int],
    sizes: dict[tuple[str, str], tuple[int, int]] | None = None,
) -> str:
    """Prometheus text: feature gates (as ``kubernetes_feature_enabled``), stored objects, requests,
    and the bytes answered (``sizes``: (verb, resource) -> (responses or watch events, bytes)) as
    the API server's ``apiserver_response_sizes`` (every verb but watch) and
    ``apiserver_watch_events_sizes`` (watch), sum and count (one bucket: +Inf)."""
    lines = [
        "# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage "
        "and enablement of a k8s feature.",
        "# TYPE kubernetes_feature_enabled gauge",
    ]
    for name, (stage, default) in featuregates.gates(minor).items():
        enabled = feature_gates.get(name, default)
        lines.append(f'kubernetes_feature_enabled{{name="{name}",stage="{stage}"}} {int(enabled)}')
    lines += [
        "# HELP apiserver_storage_objects [STABLE] Number of stored objects at the time of last "
        "check split by kind.",
        "# TYPE apiserver_storage_objects gauge",
    ]
    for resource, count in sorted(object_counts.items()):
        lines.append(f'apiserver_storage_objects{{resource="{resource}"}} {count}')
    lines += [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for "
        "each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
        "# TYPE apiserver_request_total counter",
    ]
    for (verb, resource, code), count in sorted(requests.items()):
        lines.append(
            f'apiserver_request_total{{code="{code}",resource="{resource}",verb="{verb}"}} {count}'
        )
    for name, helptext, watching in (
        ("apiserver_response_sizes", "Response size distribution in bytes for each group, version, verb, resource, "
         "subresource, scope and component.", False),
        ("apiserver_watch_events_sizes", "Watch event size distribution in bytes", True),
    ):
        lines += [f"# HELP {name} [ALPHA] {helptext}", f"# TYPE {name} histogram"]
        for (verb, resource), (count, total) in sorted((sizes or {}).items()):
            if (verb == "watch") is not watching:
                continue
            labels = f'resource="{resource}"' + ("" if watching else f',verb="{verb}"')
            lines += [f'{name}_bucket{{{labels},le="+Inf"}} {count}', f"{name}_sum{{{labels}}} {total}",
                      f"{name}_count{{{labels}}} {count}"]
    return "\n".join(lines) + "\n"
