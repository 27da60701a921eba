"""Inventories and replies as text for people at a terminal (the console chat reuses it).

Long lists are summarised: beyond ``MAX_ROWS`` nodes or pods, only the ones with
something to say are listed, with a count of the rest. The JSON surface prints the
model itself (``Inventory.model_dump_json``), so nothing is lost for pipelines.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from handlers.inventory import MAX_ROWS, nodes_table, nodes_title, pods_table
from handlers.replies import Message, Reply
from runbooks.inventory import DaemonSet, Inventory

SEVERITY_LABEL = {"fail": "FAIL", "warn": "WARN", "info": "INFO"}


def table(header: Sequence[str], rows: Iterable[Sequence[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell, as kubectl prints them."""
    all_rows = [list(header)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(header))]
    return [indent + "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in all_rows]


def _nodes(inv: Inventory) -> list[str]:
    nodes = nodes_table(inv)
    lines = [nodes_title(inv), *table(nodes.header, nodes.rows)]
    if nodes.note:
        lines.append(f"  {nodes.note}")
    return lines


def _daemonset(ds: DaemonSet) -> list[str]:
    lines = [
        f"{ds.ref}  ({ds.kind}{', driver ' + ', '.join(ds.drivers) if ds.drivers else ''})",
        "  images: " + ", ".join(f"{c}={i}" for c, i in ds.images.items()),
        f"  strategy {ds.update_strategy}"
        + (f" (maxUnavailable {ds.max_unavailable})" if ds.max_unavailable else "")
        + f", revision {ds.current_revision if ds.current_revision is not None else '?'}"
        + f"  desired {ds.desired} current {ds.current} updated {ds.updated} ready {ds.ready} available {ds.available}",
    ]
    pods = pods_table(ds)
    if pods.rows:
        lines += table(pods.header, pods.rows, "    ")
    if pods.note:
        tags = Counter(",".join(p.images.values()) for p in ds.pods)
        summary = "; ".join(f"{n} on {image}" for image, n in tags.most_common())
        lines.append(f"    {pods.note} ({summary})")
    return lines


def render_inventory(inv: Inventory) -> str:
    dra = inv.dra
    lines = [
        f"Inventory of {inv.context} ({inv.server}) taken {inv.taken_at:%Y-%m-%d %H:%M:%S %Z}",
        f"Kubernetes {inv.kubernetes.version}; DynamicResourceAllocation {dra.feature_gate}"
        + (f" ({dra.stage})" if dra.stage else ""),
        "resource.k8s.io: "
        + ("; ".join(f"{v} ({', '.join(dra.kinds.get(v, []))})" for v in dra.served_versions) or "not served"),
        "",
        *_nodes(inv),
        "",
        f"Plugin DaemonSets ({len(inv.daemonsets)})",
    ]
    for ds in inv.daemonsets:
        lines += ["  " + line for line in _daemonset(ds)]
    if not inv.daemonsets:
        lines.append("  none found")
    if inv.classes or inv.slices or inv.claims:
        lines += ["", "DRA"]
        lines += [f"  {c.kind} {c.name}: driver {', '.join(c.drivers) or '?'}" for c in inv.classes]
        per_driver = Counter(s.driver for s in inv.slices)
        for driver, count in sorted(per_driver.items()):
            nodes = {s.node for s in inv.slices if s.driver == driver}
            devices = sum(s.devices for s in inv.slices if s.driver == driver)
            lines.append(f"  ResourceSlices of {driver}: {count} on {len(nodes)} node(s), {devices} device(s)")
        if inv.claims:
            lines += table(
                ["NAMESPACE", "CLAIM", "STATE", "AGE", "RESERVED FOR"],
                [[c.namespace, c.name, c.state, c.age, ",".join(c.reserved_for) or "-"] for c in inv.claims[:MAX_ROWS]],
            )
            if len(inv.claims) > MAX_ROWS:
                lines.append(f"  … {len(inv.claims) - MAX_ROWS} more claims")
    lines += ["", f"Findings ({len(inv.findings)})"]
    for f in inv.findings:
        lines += [f"  {SEVERITY_LABEL[f.severity]}  {f.message}", f"        next: {f.next_step}"]
    if not inv.findings:
        lines.append("  none: the cluster looks ready for an upgrade")
    lines += [f"note: {n}" for n in inv.notes]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------ replies (console chat)
_REFERENCE = re.compile(r"<(@[UWB][A-Z0-9]+|#C[A-Z0-9]+)>|<!subteam\^(S[A-Z0-9]+)>")
TONE_LABEL = {"info": "", "ok": "OK  ", "warn": "WARN  ", "error": "ERROR  "}


def plain(text: str) -> str:
    """User, channel and group references as ``@U1``, ``#C1``, ``@S1``."""
    return _REFERENCE.sub(lambda m: m.group(1) or "@" + m.group(2), text)


def render_message(message: Message, *, indent: str = "", first_choice: int = 1) -> str:
    """One message as text; buttons become numbered choices starting at ``first_choice``."""
    lines: list[str] = []
    if message.title:
        lines.append(TONE_LABEL.get(message.tone, "") + plain(message.title))
    if message.text:
        lines += plain(message.text).split("\n")
    width = max((len(f.label) for f in message.fields), default=0)
    lines += [f"{f.label + ':':<{width + 1}} {plain(f.value)}" for f in message.fields]
    if message.table is not None:
        lines += table(message.table.header, message.table.rows)
        if message.table.note:
            lines.append("  " + message.table.note)
    if message.buttons:
        lines.append("  ".join(f"[{first_choice + i}] {b.label}" for i, b in enumerate(message.buttons)))
    return "\n".join(indent + line for line in lines) + "\n"


def render_reply(reply: Reply, *, prefix: str = "/upgrade") -> str:
    """A reply for the console: the message, its usage lines, then its thread indented."""
    out = [render_message(reply)]
    if reply.usage:
        out.append("".join(f"  {prefix} {line}\n" for line in reply.usage))
    choice = len(reply.buttons) + 1
    for item in reply.thread:
        out.append(render_message(item, indent="  | ", first_choice=choice))
        choice += len(item.buttons)
    return "".join(out)
