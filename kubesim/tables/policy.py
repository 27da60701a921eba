"""Printer of policy/v1 PodDisruptionBudgets (``printPodDisruptionBudget``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubesim.tables.columns import _AGE_COL, _NAME_COL, _col
from kubesim.tables.formatting import _age, _int, _name

_POD_DISRUPTION_BUDGET_COLUMNS = (
    _NAME_COL,
    _col("Min Available", "string", "The minimum number of pods that must be available."),
    _col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
    _col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."),
    _AGE_COL,
)


def _int_or_string(value: Any) -> str:
    """``IntOrString.String()``; ``N/A`` when the field is not set."""
    if value is None:
        return "N/A"
    return str(value)


def _pod_disruption_budget_cells(pdb: dict, now: dt.datetime) -> list:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    return [
        _name(pdb),
        _int_or_string(spec.get("minAvailable")),
        _int_or_string(spec.get("maxUnavailable")),
        _int(status.get("disruptionsAllowed")),
        _age(pdb, now),
    ]
