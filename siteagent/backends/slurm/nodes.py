"""Nodes as ``sinfo --json`` (22.05) or ``scontrol --json show nodes`` (23.02+) show them."""

from __future__ import annotations

from typing import Any, List, Mapping

from siteagent.backends.slurm.layout import as_text, check_errors, number, state_words
from siteagent.core.values import NodeState

#: Base states whose node takes no new work (docs/slurm.md §5 table).
UNUSABLE_STATES = frozenset({"down", "unknown", "future", "error", "fail", "drained"})
#: Flags that take a node out of service. RESERVED and MAINTENANCE are not among them: the
#: reservation holding the node is part of the snapshot and takes its capacity there.
UNUSABLE_FLAGS = frozenset(
    {
        "DRAIN",
        "DRAINING",
        "DRAINED",
        "FAIL",
        "FAILING",
        "NOT_RESPONDING",
        "NO_RESPOND",
        "INVALID",
        "INVALID_REG",
        "REBOOT_ISSUED",
        "POWERING_DOWN",
    }
)


def parse_nodes(doc: Mapping[str, Any]) -> List[NodeState]:
    """Nodes of a per-node document: ``sinfo --json`` (22.05) or ``scontrol --json show nodes``.

    Raises ValueError for the grouped ``sinfo`` layout of 23.02+, which has no per-node list.
    """
    check_errors(doc, "node list")
    recs = doc.get("nodes")
    if not isinstance(recs, list):
        raise ValueError("no per-node 'nodes' list in the document")
    nodes = []
    for rec in recs:
        base, flags = state_words(rec.get("state"), rec.get("state_flags"))
        usable = base not in UNUSABLE_STATES and not UNUSABLE_FLAGS.intersection(flags)
        parts = rec.get("partitions") or []
        if isinstance(parts, str):
            parts = [p for p in parts.split(",") if p]
        nodes.append(
            NodeState(
                name=as_text(rec.get("name")),
                cores=number(rec.get("cpus")) or 0,
                alloc_cores=number(rec.get("alloc_cpus")) or 0,
                state="+".join([base, *(f.lower() for f in flags)]),
                usable=usable,
                memory_mb=number(rec.get("real_memory")) or 0,
                partitions=tuple(str(p) for p in parts),
                reason=as_text(rec.get("reason")),
                weight=number(rec.get("weight")) or 1,
            )
        )
    return nodes
