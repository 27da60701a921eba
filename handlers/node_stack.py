"""The node stack in the inventory's reply: the hardware classes, and each node's OS, kernel,
runtime, kubelet, GPU product and count, driver and CUDA. What a node does not say is
written ``unknown``, and GPU nodes without GPU Feature Discovery labels are named.

Every surface shows these messages (shell text, Slack thread, console); ``--json`` carries
the same facts as the inventory's ``nodes`` and ``classes``.
"""

from __future__ import annotations

from collections.abc import Sequence

from handlers.replies import Item, Message, Table
from runbooks.inventory import HardwareClass, Inventory, Node
from runbooks.inventory.stacks import UNKNOWN, is_gpu_node

MAX_ROWS = 30
"""Beyond this many nodes the per-node table is left out (the classes sum them up)."""
NAMED_NODES = 5
"""Nodes named per class or per sentence; the rest are counted."""
CLASS_HEADER = ["GPU PRODUCT", "DRIVER", "CUDA", "RUNTIME", "KERNEL", "OS IMAGE", "NODES"]
NODE_HEADER = ["NAME", "GPU PRODUCT", "GPUS", "DRIVER", "CUDA", "OS IMAGE", "KERNEL", "RUNTIME", "KUBELET"]
NO_GFD = "no GPU Feature Discovery labels"


def classes_title(count: int) -> str:
    return f"Hardware classes ({count}: GPU product / driver branch / runtime)"


def no_gfd_sentence(nodes: Sequence[str]) -> str:
    """GPU nodes whose product, driver and CUDA are unknown, said plainly, with what to do."""
    return (f"Stack unknown on {_named(nodes)}: {NO_GFD}, so the GPU product, driver and CUDA versions are "
            "unknown. Deploy GPU Feature Discovery (or the GPU operator) on them so their driver can be told.")


def no_gpu_nodes() -> str:
    return "No GPU nodes: no hardware class."


def node_table_note(count: int) -> str:
    return f"… {count} nodes: their stacks are summed up in the hardware classes"


def _named(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[:NAMED_NODES])
    return shown + (f" and {len(nodes) - NAMED_NODES} more" if len(nodes) > NAMED_NODES else "")


def _values(values: Sequence[str]) -> str:
    return ", ".join(values) or UNKNOWN


def _class_row(klass: HardwareClass) -> list[str]:
    return [klass.gpu_product or f"{UNKNOWN} ({NO_GFD})", _values(klass.drivers), _values(klass.cuda),
            klass.runtime or UNKNOWN, _values(klass.kernels), _values(klass.os_images),
            f"{len(klass.nodes)}: {_named(klass.nodes)}"]


def unknown_nodes(inv: Inventory) -> list[str]:
    """GPU nodes without a GPU product or driver from GFD's labels."""
    return [n.name for n in inv.nodes if is_gpu_node(n) and (n.gpu_product is None or n.driver is None)]


def classes_message(inv: Inventory) -> Message:
    """The hardware classes: per class the drivers, CUDA, runtime, kernels, OS images and nodes."""
    classes = inv.classes[:MAX_ROWS]
    unknown = unknown_nodes(inv)
    text = no_gfd_sentence(unknown) if unknown else ("" if classes else no_gpu_nodes())
    more = len(inv.classes) - len(classes)
    table = Table(header=CLASS_HEADER, rows=[_class_row(c) for c in classes],
                  note=f"… {more} more classes" if more else "")
    return Message(title=classes_title(len(inv.classes)), text=text, table=table if classes else None,
                   tone="warn" if unknown else "info")


def _node_row(node: Node) -> list[str]:
    gpu = is_gpu_node(node)
    missing = UNKNOWN if gpu else "-"
    count = node.gpu_count if node.gpu_count is not None else (sum(node.capacity.values()) if gpu else None)
    return [node.name, node.gpu_product or missing, missing if count is None else str(count), node.driver or missing,
            node.cuda or missing, node.os_image or UNKNOWN, node.kernel or UNKNOWN, node.runtime or UNKNOWN,
            node.kubelet_version or UNKNOWN]


def nodes_message(inv: Inventory) -> Message:
    """Each node's stack, when there are at most ``MAX_ROWS`` nodes."""
    if len(inv.nodes) > MAX_ROWS:
        return Message(title="Node stack", text=node_table_note(len(inv.nodes)))
    return Message(title="Node stack", table=Table(header=NODE_HEADER, rows=[_node_row(n) for n in inv.nodes]))


def summary_item(inv: Inventory) -> Item:
    """One field of the summary: how many classes, and how many GPU nodes have an unknown stack."""
    unknown = len(unknown_nodes(inv))
    value = f"{len(inv.classes)} hardware class(es)"
    return Item(label="GPU stack", value=value + (f", {unknown} GPU node(s) with {NO_GFD}" if unknown else ""))


def messages(inv: Inventory) -> list[Message]:
    """The thread items of the node stack."""
    return [classes_message(inv), nodes_message(inv)]
