"""Which large values (keys under `__values/`) a scheduler deletes, and when. Pure.

A call's arguments above 1 MiB (stored by its client, `cloudburst/big_values.py`, named in
`Call.value_keys`) and the results its functions passed downstream by reference (stored by
their workers, `executor/big_intermediates.py`, reported in a `values` message) live in the
KVS only while the call runs. The call's scheduler owns their end: it sees every way a call
ends (its result, a failure, a cancel, its client's lease running out, a retry budget spent),
and a client killed mid-call cannot delete anything. A sink's result stored by reference is
not here: its caller reads and deletes it after the call is over.

Contract: `ValueKeys(max_keys)`; every method returns the keys to delete now (nothing here
does I/O or reads a clock).
- `add(caller, keys, until, live=True)`: keys of call `caller` (a caller's id; attempts share
  it), kept until the call ends or, at the latest, `until` (the call's deadline plus slack:
  no call runs past it, so the keys are garbage then, whatever end was missed). Keys outside
  `VALUES_PREFIX` are ignored (a scheduler deletes nothing else). With `live` False (the
  scheduler no longer has the call in flight: a worker's report can arrive after the sink's
  `done`) they are returned at once. Past `max_keys` keys in all, the calls tracked longest
  are given up first (their keys are returned: deleted early rather than kept forever).
- `end(caller)`: the call is over: its keys. A call with none costs one dict lookup.
- `expire(now)`: the keys of calls tracked past their `until`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Iterable, List, OrderedDict, Set

from faas.keys import VALUES_PREFIX

__all__ = ["ValueKeys"]


@dataclass
class _Tracked:
    until: float
    keys: Set[str] = field(default_factory=set)


class ValueKeys:
    """See the module contract."""

    def __init__(self, max_keys: int = 65536) -> None:
        self.max_keys = max_keys
        self._calls: OrderedDict[str, _Tracked] = collections.OrderedDict()
        self._n = 0

    def __len__(self) -> int:
        """How many keys are tracked."""
        return self._n

    def add(self, caller: str, keys: Iterable[str], until: float,
            live: bool = True) -> List[str]:
        keys = sorted({k for k in keys if k.startswith(VALUES_PREFIX)})
        if not keys or not live:
            return keys
        t = self._calls.get(caller)
        if t is None:
            t = self._calls[caller] = _Tracked(until)
        t.until = max(t.until, until)
        before = len(t.keys)
        t.keys.update(keys)
        self._n += len(t.keys) - before
        out: List[str] = []
        while self._n > self.max_keys and self._calls:
            oldest = next(iter(self._calls))
            out += self._drop(oldest)
        return out

    def end(self, caller: str) -> List[str]:
        return self._drop(caller) if self._calls else []

    def expire(self, now: float) -> List[str]:
        out: List[str] = []
        for caller in [c for c, t in self._calls.items() if now > t.until]:
            out += self._drop(caller)
        return out

    def _drop(self, caller: str) -> List[str]:
        t = self._calls.pop(caller, None)
        if t is None:
            return []
        self._n -= len(t.keys)
        return sorted(t.keys)
