"""Lists and watches as the adapter decodes them (issue 39): plain dicts, without the fields
no caller reads, on kubesim over HTTPS with the official client, checked by the real kubectl."""

from __future__ import annotations

from pathlib import Path

from kubesim import KubeSim
from runbooks.cluster import Cluster
from runbooks.cluster.resources import NODES
from tests.support import Kubectl

NODE = "gpu-node1"


def label(cluster: Cluster, value: str) -> None:
    cluster.patch(NODES, NODE, {"metadata": {"labels": {"example.com/decoded": value}}}, patch_type="merge")


def test_listed_and_watched_objects_drop_managed_fields(cluster: KubeSim, tmp_path: Path) -> None:
    """issue 39: a node the API server sends with metadata.managedFields (kubectl shows them)
    is listed and watched without them, every other field as the server sent it."""
    kubectl = Kubectl(cluster.kubeconfig)
    with Cluster.from_kubeconfig(cluster.kubeconfig) as api:
        label(api, "one")
        sent = kubectl.json("get", "node", NODE, "--show-managed-fields")
        assert sent["metadata"]["managedFields"]  # the server does send them

        items, version = api.list_versioned(NODES, field_selector=f"metadata.name={NODE}", page_size=1)
        (listed,) = items
        assert "managedFields" not in listed["metadata"]
        assert listed["metadata"]["labels"]["example.com/decoded"] == "one"
        assert listed["status"]["capacity"] == sent["status"]["capacity"]
        assert {k for k in sent["metadata"] if k != "managedFields"} == set(listed["metadata"])

        stream = api.watch(NODES, resource_version=version, field_selector=f"metadata.name={NODE}",
                           timeout_seconds=30)
        label(api, "two")
        try:
            for event in stream:
                if event["type"] == "MODIFIED":
                    break
        finally:
            stream.close()
        watched = event["object"]
        assert watched["metadata"]["labels"]["example.com/decoded"] == "two"
        assert "managedFields" not in watched["metadata"]


def test_every_page_of_a_list_is_read(cluster: KubeSim) -> None:
    """issue 39: a list read one object a page follows every continue token to the end, and
    returns the same objects (names and resourceVersions) as one page of all."""
    with Cluster.from_kubeconfig(cluster.kubeconfig) as api:
        one_by_one = api.list_objects(NODES, page_size=1, project=lambda o: (o["metadata"]["name"],
                                                                             o["metadata"]["resourceVersion"]))
        at_once = api.list_objects(NODES, project=lambda o: (o["metadata"]["name"], o["metadata"]["resourceVersion"]))
    assert len(one_by_one) > 1
    assert one_by_one == at_once
