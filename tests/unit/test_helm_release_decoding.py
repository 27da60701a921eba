"""The image a Helm release of NVIDIA's chart renders, decoded from the Secret Helm 3 stores (issue 60 item 4)."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from kubesim.helmrelease import release_json, secret
from runbooks.helm_release import ReleaseUnread, decoded


def stored(config: dict[str, object], *, gzipped: bool = True) -> dict[str, object]:
    release = release_json(release="nvdp", namespace="nvidia-device-plugin", revision=3, config=config,
                           manifest="", deployed="2026-12-07T00:00:00Z")
    out = secret(release, created="2026-12-07T00:00:00Z", created_unix=0)
    if not gzipped:  # releases stored before Helm compressed them
        raw = base64.b64encode(json.dumps(release).encode())
        out["data"] = {"release": base64.b64encode(raw).decode()}
    return out


@pytest.mark.parametrize(("config", "image"), [
    ({"gfd": {"enabled": True}}, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),  # tag "": v<appVersion>
    ({"image": {"tag": "v0.19.3"}}, "nvcr.io/nvidia/k8s-device-plugin:v0.19.3"),
    ({"image": {"repository": "registry.example/nvdp", "tag": "v0.18.0"}}, "registry.example/nvdp:v0.18.0"),
    ({"image": {"tag": ""}}, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"),
])
def test_the_image_is_the_charts_values_overridden_by_the_config(config: dict[str, object], image: str) -> None:
    got = decoded(stored(config))
    assert (got.revision, got.chart, got.image) == (3, "nvidia-device-plugin-0.17.0", image)


def test_a_release_stored_before_compression_still_decodes() -> None:
    assert decoded(stored({}, gzipped=False)).image == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


def test_a_secret_that_holds_no_release_says_so_without_its_contents() -> None:
    bad = {"metadata": {"name": "sh.helm.release.v1.nvdp.v4"},
           "data": {"release": base64.b64encode(b"password=hunter2").decode()}}
    with pytest.raises(ReleaseUnread) as raised:
        decoded(bad)
    assert str(raised.value) == "Secret sh.helm.release.v1.nvdp.v4 does not hold a release as Helm 3 stores it"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert "hunter2" not in repr(raised.value)


def test_another_chart_renders_no_known_image() -> None:
    release = release_json(release="x", namespace="n", revision=1, config={}, manifest="", deployed="")
    release["chart"]["metadata"]["name"] = "other"
    raw = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    got = decoded({"metadata": {"name": "s"}, "data": {"release": base64.b64encode(raw.encode()).decode()}})
    assert got.image is None and got.chart == "other-0.17.0"
