"""What Helm 3 writes beside the objects of a release: their ownership metadata and the release Secret.

Read from helm/helm at v3.16.4:

- ``pkg/action/validate.go`` ``setMetadataVisitor`` (called by ``install.go``, ``upgrade.go`` and
  ``rollback.go`` on every object of the release, force on): the label ``app.kubernetes.io/managed-by: Helm``
  and the annotations ``meta.helm.sh/release-name`` / ``meta.helm.sh/release-namespace`` (:func:`owned`);
- ``pkg/storage/driver/secrets.go`` ``newSecretsObject`` and ``Create``: the release is kept in a Secret of
  the release's namespace named ``sh.helm.release.v1.<release>.v<revision>`` (``pkg/storage/storage.go``
  ``makeKey``), type ``helm.sh/release.v1``, labels ``name``, ``owner: helm``, ``status``, ``version`` and
  ``createdAt``, and one data key ``release``: ``encodeRelease`` of ``pkg/storage/driver/util.go``, the
  release's JSON gzipped (best compression) and base64-encoded, a string the Secret then holds as its bytes
  (so the API serves it base64-encoded once more);
- ``pkg/release/release.go``, ``info.go``, ``pkg/chart/chart.go``, ``metadata.go``: the release's JSON
  fields (``name``, ``info``, ``chart`` with ``metadata``, ``lock``, ``templates``, ``values``, ``schema``,
  ``files``; ``config``, the values the user set; ``manifest``; ``version``; ``namespace``).

The chart is NVIDIA's device-plugin chart at v0.17.0, its ``Chart.yaml`` and ``values.yaml`` kept verbatim in
``kubesim/charts/nvidia-device-plugin-0.17.0/`` (NVIDIA/k8s-device-plugin, tag v0.17.0,
``deployments/helm/nvidia-device-plugin/``). Not kept: the chart's templates and files (``templates`` and
``files`` are empty here; nothing in kubesim renders them).
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import yaml

CHARTS = Path(__file__).parent / "charts"
MANAGED_BY, RELEASE_NAME, RELEASE_NAMESPACE = ("app.kubernetes.io/managed-by", "meta.helm.sh/release-name",
                                               "meta.helm.sh/release-namespace")
RELEASE_TYPE = "helm.sh/release.v1"
RELEASE_NAME_DEFAULT, CHART = "nvdp", "nvidia-device-plugin-0.17.0"


def owned(obj: dict[str, Any], release: str, namespace: str) -> dict[str, Any]:
    """``obj`` with what ``setMetadataVisitor`` merges into every object Helm installs or upgrades."""
    meta = obj["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), MANAGED_BY: "Helm"}
    meta["annotations"] = {**(meta.get("annotations") or {}), RELEASE_NAME: release, RELEASE_NAMESPACE: namespace}
    return obj


def chart(name: str = CHART) -> dict[str, Any]:
    """The chart as the release's JSON holds it (``metadata`` from Chart.yaml, ``values`` from values.yaml)."""
    with (CHARTS / name / "Chart.yaml").open(encoding="utf-8") as fh:
        metadata = yaml.safe_load(fh)
    with (CHARTS / name / "values.yaml").open(encoding="utf-8") as fh:
        values = yaml.safe_load(fh)
    return {"metadata": metadata, "lock": None, "templates": [], "values": values, "schema": None, "files": []}


def release_json(*, release: str, namespace: str, revision: int, config: dict[str, Any], manifest: str,
                 deployed: str, status: str = "deployed", chart_name: str = CHART) -> dict[str, Any]:
    """The release as ``json.Marshal`` writes it (``pkg/release/release.go``)."""
    description = "Install complete" if revision == 1 else "Upgrade complete"
    return {"name": release,
            "info": {"first_deployed": deployed, "last_deployed": deployed, "deleted": "",
                     "description": description, "status": status},
            "chart": chart(chart_name), "config": config, "manifest": manifest, "version": revision,
            "namespace": namespace}


def encode(release: dict[str, Any]) -> str:
    """``encodeRelease``: base64 of the gzipped JSON."""
    return base64.b64encode(gzip.compress(json.dumps(release).encode(), compresslevel=9)).decode()


def secret(release: dict[str, Any], *, created: str, created_unix: int) -> dict[str, Any]:
    """The release Secret ``newSecretsObject`` builds (as the API serves it: ``data`` base64 of its bytes)."""
    name, revision = release["name"], int(release["version"])
    stored = encode(release).encode()
    return {"apiVersion": "v1", "kind": "Secret", "type": RELEASE_TYPE,
            "metadata": {"name": f"sh.helm.release.v1.{name}.v{revision}", "namespace": release["namespace"],
                         "creationTimestamp": created,
                         "labels": {"createdAt": str(created_unix), "name": name, "owner": "helm",
                                    "status": release["info"]["status"], "version": str(revision)}},
            "data": {"release": base64.b64encode(stored).decode()}}
