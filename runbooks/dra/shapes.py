"""How each ``resource.k8s.io`` version shapes a claim, and how a pod names one.

Purely data: a claim spec asking some devices of a class in the request shape of a version
(``resourceClassName`` in v1alpha2, flat requests in v1alpha3 and v1beta1, requests under
``exactly`` from v1beta2), and a pod's ``resourceClaims`` entry (under ``source`` up to 1.30).
The DRA smoke test and ``migrate`` both write them.
"""

from __future__ import annotations

from typing import Any


def claim_spec(version: str, device_class: str, count: int, request: str) -> dict[str, Any]:
    """A claim spec asking ``count`` devices of a class, in the request shape of ``version``."""
    if version == "v1alpha2":
        return {"resourceClassName": device_class}
    exact = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if version in ("v1alpha3", "v1beta1"):
        return {"devices": {"requests": [{"name": request, **exact}]}}
    return {"devices": {"requests": [{"name": request, "exactly": exact}]}}


def pod_claim(name: str, template: str, *, source: bool) -> dict[str, Any]:
    """A pod's ``resourceClaims`` entry made from a template (``source`` is the pre-1.31 shape)."""
    ref = {"resourceClaimTemplateName": template}
    return {"name": name, "source": ref} if source else {"name": name, **ref}
