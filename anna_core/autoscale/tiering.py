"""Cross-tier data movement (Algorithm 1, dissertation 3.3.1), pure.

Contract:
- `plan_promotions(keys, current, room, config, period, blocked, limit)`: the disk-only keys
  (no memory replica) accessed faster than P, hottest first, each promoted (one replica moves
  from disk to memory: R_M + 1, R_E - 1) while its size fits in `room` bytes of the memory
  tier (`room` None: no capacity known, everything fits). Keys that do not fit are the
  `overflow`: the caller adds memory nodes for them or makes room by demotion.
- `plan_demotions(keys, current, need, config, period, blocked, limit, colder_than)`: memory
  keys, coldest first, demoted (every replica to disk: R_M = 0, R_E = k + 1, one thread
  each) until at least `need` bytes are freed; only keys accessed slower than `colder_than`
  (accesses/s; None: any key, the LRU fallback of 3.3.1). A key frees size x R_M x T_M.
- `rate(key, period)`: accesses per second.
`current(key_summary)` gives the key's replication as the engine knows it; `blocked(key)`
says a key must not change now (its cooldown). Both plans hold at most `limit` actions.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence, Tuple

from ..config import Replication
from .actions import Demote, Promote
from .policy_config import PolicyConfig
from .summaries import KeySummary
from .words import amount, per_window

__all__ = ["MovementPlan", "plan_promotions", "plan_demotions", "rate"]

Current = Callable[[KeySummary], Replication]
Blocked = Callable[[str], bool]


def rate(key: KeySummary, period: float) -> float:
    """The key's accesses per second over the period."""
    return key.accesses / period


@dataclass(frozen=True)
class MovementPlan:
    """Promotions that fit, and the hot disk keys that did not."""

    promotions: Tuple[Promote, ...] = ()
    promoted_bytes: int = 0
    overflow: Tuple[KeySummary, ...] = ()
    overflow_bytes: int = 0


def plan_promotions(keys: Sequence[KeySummary], current: Current, room: Optional[float],
                    config: PolicyConfig, period: float, blocked: Blocked,
                    limit: int) -> MovementPlan:
    """Algorithm 1 line 1-2 for every key, within `room` bytes of memory."""
    threshold = config.promote_rate()
    promotions: List[Promote] = []
    overflow: List[KeySummary] = []
    used = 0
    overflow_bytes = 0
    for key in sorted(keys, key=lambda k: (-k.accesses, k.key)):
        r = current(key)
        if r.memory_global > 0 or rate(key, period) <= threshold or blocked(key.key):
            continue
        if room is not None and used + key.size > room:
            overflow.append(key)
            overflow_bytes += key.size
            continue
        if len(promotions) >= limit:
            break
        used += key.size
        promotions.append(Promote(
            key.key, replace(r, memory_global=1, disk_global=max(0, r.disk_global - 1)),
            f"promoted {key.key!r} to memory: {per_window(key.accesses, period, config)} > "
            f"P = {config.promote_accesses:g} per {config.promote_window:g} s"))
    return MovementPlan(tuple(promotions), used, tuple(overflow), overflow_bytes)


def plan_demotions(keys: Sequence[KeySummary], current: Current, need: float,
                   config: PolicyConfig, period: float, blocked: Blocked, limit: int,
                   colder_than: Optional[float], why: str) -> Tuple[List[Demote], int]:
    """Algorithm 1 line 3-4 under memory pressure: free `need` bytes, coldest keys first.

    `why` ends each reason (the pressure that made room necessary)."""
    demotions: List[Demote] = []
    freed = 0
    target = config.demoted_replication()
    for key in sorted(keys, key=lambda k: (k.accesses, k.key)):
        if freed >= need or len(demotions) >= limit:
            break
        r = current(key)
        if r.memory_global == 0 or key.size <= 0 or blocked(key.key):
            continue
        if colder_than is not None and rate(key, period) >= colder_than:
            break   # sorted coldest first: nothing colder follows
        freed += key.size * r.memory_global * max(1, r.memory_local)
        demotions.append(Demote(
            key.key, target,
            f"demoted {key.key!r} to disk ({amount(key.size)}): "
            f"{per_window(key.accesses, period, config)}; {why}"))
    return demotions, freed
