"""Watches through the official client as the real API server's watch cache answers them
(kubernetes/apiserver v0.34.2, ``pkg/storage/cacher/watch_cache.go`` ``getAllEventsSinceLocked``,
``cache_watcher.go`` ``nextBookmarkTime``, ``cacher.go`` ``defaultBookmarkFrequency``): a watch from a
resourceVersion older than the cache's window gets one ``ERROR`` event at once, a 410 ``Expired``
Status ``too old resource version: X (Y)`` with Y the version the window starts after (the
cache's list at start); bookmarks only to a watch that allows them, and on an idle one only 2 s
before its timeout (or each minute), never every few seconds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config

from kubesim import KubeSim


@pytest.fixture(scope="module")
def sim() -> Iterator[KubeSim]:
    with KubeSim(scenario="gpu-small", k8s_version="1.34") as s:
        yield s


@pytest.fixture(scope="module")
def core(sim: KubeSim) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig), context="kubesim"))


def events(core: client.CoreV1Api, **query: Any) -> list[dict[str, Any]]:
    """Every event line of one watch of kube-system's pods, read to its end."""
    response = core.list_namespaced_pod("kube-system", watch=True, _preload_content=False, **query)
    try:
        return [json.loads(line) for line in response.read().decode().splitlines() if line.strip()]
    finally:
        response.release_conn()


def test_a_watch_from_before_the_window_gets_an_immediate_410(core: client.CoreV1Api, sim: KubeSim) -> None:
    listed = int(core.list_namespaced_pod("kube-system").metadata.resource_version)
    lines = events(core, resource_version="1", timeout_seconds=30)  # nothing at all, were it not expired
    assert len(lines) == 1 and lines[0]["type"] == "ERROR", lines
    status = lines[0]["object"]
    assert (status["kind"], status["status"], status["reason"], status["code"]) == ("Status", "Failure", "Expired", 410)
    head, _, window = status["message"].partition(" (")
    assert head == "too old resource version: 1"
    assert window.endswith(")") and 1 < int(window[:-1]) <= listed


def test_a_watch_from_the_lists_version_is_not_expired(core: client.CoreV1Api) -> None:
    listed = core.list_namespaced_pod("kube-system").metadata.resource_version
    lines = events(core, resource_version=listed, timeout_seconds=1)
    assert all(line["type"] != "ERROR" for line in lines), lines


def test_an_idle_watch_gets_one_bookmark_two_seconds_before_its_timeout_and_only_if_allowed(
        core: client.CoreV1Api) -> None:
    listed = core.list_namespaced_pod("kube-system", label_selector="app=nothing-matches").metadata.resource_version
    allowed = events(core, resource_version=listed, timeout_seconds=12, allow_watch_bookmarks=True,
                     label_selector="app=nothing-matches")
    assert [e["type"] for e in allowed] == ["BOOKMARK"], allowed
    assert int(allowed[0]["object"]["metadata"]["resourceVersion"]) >= int(listed)
    assert events(core, resource_version=listed, timeout_seconds=3, label_selector="app=nothing-matches") == []
