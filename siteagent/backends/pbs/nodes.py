"""Vnodes as ``pbsnodes -av -F json`` shows them (docs/pbs.md §4): their state words and
resources."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping

from siteagent.backends.pbs.values import as_text, check_header, number, parse_size_kb, words
from siteagent.core.values import NodeState

#: State words of a vnode that is up and schedulable (§4): free, or in use by jobs or a
#: running reservation. Every other word (down, offline, state-unknown, stale, busy,
#: provisioning, maintenance, sleep, unresolvable, initializing, ...) takes it out.
USABLE_WORDS = frozenset({"free", "job-busy", "job-exclusive", "resv-exclusive"})
#: State words that make the whole vnode used, whatever its assigned ncpus say (§4).
EXCLUSIVE_WORDS = frozenset({"job-exclusive", "resv-exclusive"})
#: ``sharing`` values under which every job gets whole vnodes.
FORCED_EXCLUSIVE = frozenset({"force_excl", "force_exclhost"})


@dataclass(frozen=True)
class PbsNode:
    """A vnode: the planner's NodeState, and its ``sharing`` (whether jobs get it whole)."""

    node: NodeState
    sharing: str = "default_shared"


def parse_nodes(doc: Mapping[str, Any]) -> List[PbsNode]:
    """Vnodes of a ``pbsnodes -av -F json`` document.

    Cores are ``resources_available.ncpus``; allocated cores ``resources_assigned.ncpus``
    (absent means 0, §4) or all of them when the state says exclusive. The vnode's ``queue``
    (if associated with one) goes in ``partitions``; its ``comment`` in ``reason``.
    """
    check_header(doc, "pbsnodes")
    nodes = doc.get("nodes")
    if not isinstance(nodes, dict):
        raise ValueError("pbsnodes: no 'nodes' object")
    out = []
    for name, rec in nodes.items():
        if not isinstance(rec, dict):
            raise ValueError(f"pbsnodes: vnode {name} is not an object")
        if "Error" in rec:
            raise ValueError(f"pbsnodes: {name}: {rec['Error']}")
        avail = rec.get("resources_available")
        avail = avail if isinstance(avail, dict) else {}
        assigned = rec.get("resources_assigned")
        assigned = assigned if isinstance(assigned, dict) else {}
        state = as_text(rec.get("state"))
        state_words = set(words(state))
        cores = number(avail.get("ncpus")) or number(rec.get("pcpus")) or 0
        alloc = number(assigned.get("ncpus")) or 0
        if state_words & EXCLUSIVE_WORDS:
            alloc = cores
        queue = as_text(rec.get("queue"))
        node = NodeState(
            name=str(name),
            cores=cores,
            alloc_cores=min(alloc, cores),
            state=state,
            usable=bool(state_words) and state_words <= USABLE_WORDS,
            memory_mb=(parse_size_kb(avail.get("mem")) or 0) // 1024,
            partitions=(queue,) if queue else (),
            reason=as_text(rec.get("comment")),
        )
        out.append(PbsNode(node=node, sharing=as_text(rec.get("sharing")) or "default_shared"))
    return out
