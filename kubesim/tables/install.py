"""Printers of the kinds an install writes besides workloads (``printers.go``): Secrets,
ConfigMaps, ServiceAccounts, Services, NetworkPolicies, Ingresses, PriorityClasses, RuntimeClasses,
Leases."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubesim.tables.columns import _AGE_COL, _NAME_COL, _col
from kubesim.tables.formatting import (
    _age,
    _meta,
    _name,
    _parse_time,
    format_label_selector,
    format_labels,
    human_duration,
)

_SECRET_COLUMNS = (
    _NAME_COL,
    _col("Type", "string", "The type of secret"),
    _col("Data", "string", "The number of entries in the secret"),
    _AGE_COL,
)


def _secret_cells(secret: dict, now: dt.datetime) -> list:
    return [_name(secret), secret.get("type") or "", len(secret.get("data") or {}), _age(secret, now)]


_CONFIG_MAP_COLUMNS = (_NAME_COL, _col("Data", "string", "Number of data in configmap"), _AGE_COL)


def _config_map_cells(cm: dict, now: dt.datetime) -> list:
    return [_name(cm), len(cm.get("data") or {}) + len(cm.get("binaryData") or {}), _age(cm, now)]


_SERVICE_ACCOUNT_COLUMNS = (_NAME_COL, _col("Secrets", "string", "Secrets is a list of the secrets in the same "
                                            "namespace that pods running using this ServiceAccount are allowed to use."),
                            _AGE_COL)


def _service_account_cells(sa: dict, now: dt.datetime) -> list:
    return [_name(sa), len(sa.get("secrets") or []), _age(sa, now)]


_SERVICE_COLUMNS = (
    _NAME_COL,
    _col("Type", "string", "The type of service."),
    _col("Cluster-IP", "string", "The IP address of the service."),
    _col("External-IP", "string", "The external IP address of the service."),
    _col("Port(s)", "string", "The ports of the service."),
    _AGE_COL,
    _col("Selector", "string", "The selector of the service.", priority=1),
)


def _load_balancer(status: dict) -> str:
    entries = ((status.get("loadBalancer") or {}).get("ingress")) or []
    return ",".join(e.get("ip") or e.get("hostname") or "" for e in entries if e.get("ip") or e.get("hostname"))


def _external_ip(spec: dict, status: dict) -> str:
    """``getServiceExternalIP``."""
    kind, external = spec.get("type") or "ClusterIP", spec.get("externalIPs") or []
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        return ",".join([p for p in [_load_balancer(status)] if p] + external) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _ports(ports: list[dict[str, Any]]) -> str:
    """``makePortString``: ``6379/TCP``, ``80:30080/TCP`` with a node port."""
    cells = []
    for port in ports:
        node = f":{port['nodePort']}" if port.get("nodePort") else ""
        cells.append(f"{port.get('port')}{node}/{port.get('protocol') or 'TCP'}")
    return ",".join(cells) or "<none>"


def _service_cells(svc: dict, now: dt.datetime) -> list:
    spec, status = svc.get("spec") or {}, svc.get("status") or {}
    return [_name(svc), spec.get("type") or "ClusterIP", spec.get("clusterIP") or "<none>", _external_ip(spec, status),
            _ports(spec.get("ports") or []), _age(svc, now), format_labels(spec.get("selector"))]


_NETWORK_POLICY_COLUMNS = (
    _NAME_COL,
    _col("Pod-Selector", "string", "A label selector query over pods. Selects the pods to which this policy applies."),
    _AGE_COL,
)


def _network_policy_cells(np: dict, now: dt.datetime) -> list:
    return [_name(np), format_label_selector((np.get("spec") or {}).get("podSelector") or {}), _age(np, now)]


_INGRESS_COLUMNS = (
    _NAME_COL,
    _col("Class", "string", "The name of the IngressClass resource that should be used for ingress."),
    _col("Hosts", "string", "Hosts that incoming requests are matched against before the ingress rule"),
    _col("Address", "string", "Address is a list containing ingress points for the load-balancer"),
    _col("Ports", "string", "Ports of TLS configurations that open"),
    _AGE_COL,
)


def _hosts(rules: list[dict[str, Any]]) -> str:
    """``formatHosts``: up to four hosts, then ``+ N more...``; ``*`` when no rule names one."""
    hosts = [r["host"] for r in rules if r.get("host")]
    shown = ",".join(hosts[:4])
    if len(hosts) > 4:
        shown += f" + {len(hosts) - 4} more..."
    return shown or "*"


def _ingress_cells(ing: dict, now: dt.datetime) -> list:
    spec = ing.get("spec") or {}
    klass = spec.get("ingressClassName") or (_meta(ing).get("annotations") or {}).get("kubernetes.io/ingress.class")
    return [_name(ing), klass or "<none>", _hosts(spec.get("rules") or []), _load_balancer(ing.get("status") or {}),
            "80, 443" if spec.get("tls") else "80", _age(ing, now)]


_PRIORITY_CLASS_COLUMNS = (
    _NAME_COL,
    _col("Value", "integer", "The value of this priority class. This is the actual priority that pods receive "
         "when they have the name of this class in their pod spec."),
    _col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as "
         "the default priority for pods that do not have any priority class."),
    _AGE_COL,
    _col("PreemptionPolicy", "string", "PreemptionPolicy is the Policy for preempting pods with lower priority."),
)


def _priority_class_cells(pc: dict, now: dt.datetime) -> list:
    return [_name(pc), int(pc.get("value") or 0), bool(pc.get("globalDefault")), _age(pc, now),
            pc.get("preemptionPolicy") or "PreemptLowerPriority"]


_RUNTIME_CLASS_COLUMNS = (_NAME_COL, _col("Handler", "string", ""), _AGE_COL)
"""``runtimeClassColumnDefinitions``: the Handler column's description is ``ObjectMeta``'s doc of
``handler``, a key it has not, so empty."""


def _runtime_class_cells(rc: dict, now: dt.datetime) -> list:
    return [_name(rc), rc.get("handler") or "", _age(rc, now)]


_LEASE_COLUMNS = (_NAME_COL, _col("Holder", "string", "The holder of the lease"), _AGE_COL)


def _lease_cells(lease: dict, now: dt.datetime) -> list:
    return [_name(lease), (lease.get("spec") or {}).get("holderIdentity") or "", _age(lease, now)]


PRINTERS = {
    "secrets": (_SECRET_COLUMNS, _secret_cells),
    "configmaps": (_CONFIG_MAP_COLUMNS, _config_map_cells),
    "serviceaccounts": (_SERVICE_ACCOUNT_COLUMNS, _service_account_cells),
    "services": (_SERVICE_COLUMNS, _service_cells),
    "networkpolicies": (_NETWORK_POLICY_COLUMNS, _network_policy_cells),
    "ingresses": (_INGRESS_COLUMNS, _ingress_cells),
    "priorityclasses": (_PRIORITY_CLASS_COLUMNS, _priority_class_cells),
    "runtimeclasses": (_RUNTIME_CLASS_COLUMNS, _runtime_class_cells),
    "leases": (_LEASE_COLUMNS, _lease_cells),
}
"""``resource -> (columns, cells)``, registered with the other printers in :mod:`kubesim.tables`."""


_JOB_COLUMNS = (
    _NAME_COL,
    _col("Status", "string", "Status of the job."),
    _col("Completions", "string", "The desired number of successfully finished pods the job should be run with."),
    _col("Duration", "string", "Time required to complete the job."),
    _AGE_COL,
    _col("Containers", "string", "Names of each container in the template.", priority=1),
    _col("Images", "string", "Images referenced by each container in the template.", priority=1),
    _col("Selector", "string", "Query over pods that should match the pod count.", priority=1),
)


def _job_status(job: dict) -> str:
    conditions = {c.get("type") for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    for kind in ("Failed", "Complete", "Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if kind in conditions:
            return kind
    return "Running"


def _job_cells(job: dict, now: dt.datetime) -> list:
    """``printJob``: ``1/1``, or ``0/1 of 3`` for a parallel job without completions."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = _parse_time(status.get("startTime")), _parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration((end or now) - start)
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [_name(job), _job_status(job), completions, duration, _age(job, now),
            ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers),
            format_label_selector(spec.get("selector"))]


PRINTERS["jobs"] = (_JOB_COLUMNS, _job_cells)
