"""The release table preflight works from, checked against the API definitions each release
publishes (as ``kubernetes-validate`` ships them): every version and kind it names exists
there, and it leaves none out."""

from __future__ import annotations

import pytest

from kubesim import schemas
from runbooks.dra import releases

MINORS = range(releases.FIRST, releases.LAST + 1)


def published(minor: int) -> dict[str, set[str]]:
    """``{version: {kinds}}`` of resource.k8s.io in the release's definitions (kinds with a group-version-kind)."""
    out: dict[str, set[str]] = {}
    defs = schemas.for_release(minor)
    for (group, version, kind), name in defs.by_gvk.items():
        if group == releases.GROUP and name.startswith("io.k8s.api.resource.") and not kind.endswith("List"):
            out.setdefault(version, set()).add(kind)
    return out


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_versions_and_kinds_match_the_published_definitions(minor: int) -> None:
    table = releases.RELEASES[minor]
    assert {v: set(k) for v, k in table.kinds.items()} == published(minor)
    assert set(table.default_served) <= set(table.kinds)
    assert table.preferred in table.kinds


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_the_pod_claim_source_field_exists_until_it_is_removed(minor: int) -> None:
    rule = next(r for r in releases.STEPS if r.code == "pod-claim-source")
    fields = schemas.for_release(minor).defs["io.k8s.api.core.v1.PodResourceClaim"]["properties"]
    assert ("source" in fields) == (minor < rule.minor)


def test_removed_kinds_name_the_release_that_removed_them() -> None:
    assert releases.removed_in("ResourceClass", 35).minor == 31
    assert releases.removed_in("PodSchedulingContext", 35).minor == 32
    assert releases.removed_in("DeviceClass", 35) is None
