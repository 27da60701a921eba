"""The pure part of digest pinning (:mod:`runbooks.digests`): reading an ``imageID``, the pinned
reference, the refusal when a tag moved, and what a rollback writes back."""

from __future__ import annotations

from runbooks import digests

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64
PLUGIN = "nvcr.io/nvidia/k8s-device-plugin"


def test_an_image_id_gives_its_digest_and_a_reference_its_pinned_form() -> None:
    assert digests.digest_in(f"{PLUGIN}@{A}") == A and digests.digest_in(A) == A
    assert digests.digest_in("") == "" and digests.digest_in(f"{PLUGIN}@sha256:short") == ""
    assert digests.pinned(f"{PLUGIN}:v0.17.0", A) == f"{PLUGIN}@{A}"
    assert digests.pinned(f"{PLUGIN}:v0.17.0@{B}", A) == f"{PLUGIN}@{A}"
    assert digests.pinned("registry.local:5000/plugin:v1", A) == f"registry.local:5000/plugin@{A}"
    assert digests.pinned("busybox:1.36", A) == f"busybox@{A}"


def test_the_promotion_writes_the_verified_digest_only_when_pinning() -> None:
    progress = {"digests": {"tag": f"{PLUGIN}:v0.17.0", "verified": A, "now": A}}
    assert digests.promoted_image(f"{PLUGIN}:v0.17.0", progress, pin=True) == f"{PLUGIN}@{A}"
    assert digests.promoted_image(f"{PLUGIN}:v0.17.0", progress, pin=False) == f"{PLUGIN}:v0.17.0"
    assert digests.promoted_image(f"{PLUGIN}:v0.17.0", {}, pin=True) == f"{PLUGIN}:v0.17.0"


def test_a_moved_tag_refuses_and_an_unknown_one_does_not() -> None:
    moved = digests.mismatch({"digests": {"tag": f"{PLUGIN}:v0.17.0", "verified": A, "now": B}})
    assert moved and f"now resolves to {B}, not to {A}" in moved and "\n" not in moved
    assert digests.mismatch({"digests": {"verified": A, "now": A}}) is None
    assert digests.mismatch({"digests": {"verified": A, "now": "", "unknown": "cannot reach nvcr.io"}}) is None


def test_a_rollback_pins_the_one_digest_the_nodes_ran_else_keeps_the_tag() -> None:
    old = f"{PLUGIN}:v0.14.2"
    one = {"pre_run_digests": {"n1": {"ctr": f"{PLUGIN}@{A}"}, "n2": {"ctr": f"{PLUGIN}@{A}"}}}
    assert digests.rollback_image(one, "ctr", old) == (f"{PLUGIN}@{A}", "")
    two = {"pre_run_digests": {"n1": {"ctr": f"{PLUGIN}@{A}"}, "n2": {"ctr": f"{PLUGIN}@{B}"}}}
    image, why = digests.rollback_image(two, "ctr", old)
    assert image == old and "2 digests" in why
    assert digests.rollback_image({}, "ctr", old)[0] == old


def test_the_pre_run_digests_are_read_from_the_pods_image_ids() -> None:
    pods = [
        {"metadata": {"name": "p1"}, "spec": {"nodeName": "n1"},
         "status": {"containerStatuses": [{"name": "ctr", "imageID": f"{PLUGIN}@{A}"}]}},
        {"metadata": {"name": "p2", "deletionTimestamp": "x"}, "spec": {"nodeName": "n2"},
         "status": {"containerStatuses": [{"name": "ctr", "imageID": f"{PLUGIN}@{B}"}]}},
        {"metadata": {"name": "p3"}, "spec": {"nodeName": "n3"},
         "status": {"containerStatuses": [{"name": "ctr", "imageID": ""}]}},
    ]
    assert digests.pre_run(pods) == {"n1": {"ctr": f"{PLUGIN}@{A}"}}
