"""Which node a scale-in removes: a pure rule.

A workload's controller decides which pod a scale-down deletes. A Deployment deletes the
pod with the lowest `pod-deletion-cost` (once every pod is Ready), so the pool can remove
the node the policy chose. A StatefulSet always deletes its highest ordinal (`<name>-<n>`
with the largest n), so the pool must remove that one, whatever the policy chose.

`removal(requested, nodes, rule)` answers which node actually leaves:
- `rule == CHOSEN` (Deployments): `requested`.
- `rule == HIGHEST_ORDINAL` (StatefulSets): the running node with the highest ordinal.
Either way, `requested` must be one of `nodes` (the pool's running nodes not leaving),
else `UnknownNode`; the answer is always one of `nodes`. `ordinal(name)` parses a pod
name's ordinal (None when it has none).
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from .errors import UnknownNode

__all__ = ["CHOSEN", "HIGHEST_ORDINAL", "RULES", "ordinal", "removal"]

CHOSEN = "chosen"
HIGHEST_ORDINAL = "highest-ordinal"
RULES = (CHOSEN, HIGHEST_ORDINAL)

_ORDINAL = re.compile(r"-(0|[1-9][0-9]*)$")


def ordinal(name: str) -> Optional[int]:
    """The ordinal of a StatefulSet pod's name (`anna-disk-3` -> 3); None without one."""
    m = _ORDINAL.search(name)
    return int(m.group(1)) if m else None


def removal(requested: str, nodes: Sequence[str], rule: str, pool: str = "") -> str:
    """The node that leaves when `requested` is asked to; see the module contract."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if requested not in nodes:
        raise UnknownNode(f"cannot remove node {requested} from the {pool} pool: it is not a "
                          f"running node; running: {list(nodes)}", node_id=requested, pool=pool)
    if rule == CHOSEN:
        return requested
    numbered = [(ordinal(n), n) for n in nodes]
    if any(o is None for o, _ in numbered):
        raise ValueError(f"the {pool} pool's nodes do not all carry an ordinal: {list(nodes)}")
    return max(numbered)[1]
