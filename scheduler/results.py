"""Where the result of a call placed by this scheduler can be fetched, for later calls that
take it as an argument (a `Future` passed to a call).

Contract (pure state; every method takes `now`, in seconds):
- `placed(call_id, sink_address, now)` remembers the worker that runs the call's sink (it
  holds the call's outcome for a while: `executor/held.py`) for `ttl` seconds, at most
  `max_entries` calls (the oldest are forgotten first).
- `stamp(call, now)` sets `holder` on every `CallRef` argument (positional or keyword) of
  `call` whose call it remembers, and returns the refs it does not know (their call was
  not placed here, failed before it was placed, or was placed more than `ttl` s ago).
- A producer that runs again (a retry, placed under its caller's id again) moves: `placed`
  then returns the addresses of the workers that were given the old holder (`watch(call,
  addresses)`, after a consumer's placement: `addresses` maps each of its functions to its
  worker), so the scheduler tells them the new one (a `moved` message); at most
  `max_watchers` per producer, forgotten with the producer.
"""
from __future__ import annotations

import collections
from typing import Dict, List, OrderedDict, Set, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ResultHolders"]


class ResultHolders:
    """call id -> the address of the worker holding its outcome; see the module contract."""

    def __init__(self, ttl: float = 600.0, max_entries: int = 65536,
                 max_watchers: int = 64) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.max_watchers = max_watchers
        self._holders: OrderedDict[str, Tuple[str, float]] = collections.OrderedDict()
        self._watchers: Dict[str, Set[str]] = {}     # producer -> consumers' workers

    def __len__(self) -> int:
        return len(self._holders)

    def placed(self, call_id: str, sink_address: str, now: float) -> List[str]:
        old = self._holders.get(call_id)
        self._holders[call_id] = (sink_address, now + self.ttl)
        self._holders.move_to_end(call_id)
        while len(self._holders) > self.max_entries:
            gone, _ = self._holders.popitem(last=False)
            self._watchers.pop(gone, None)
        if old is None or old[0] == sink_address or not self._watchers:
            return []
        return sorted(self._watchers.get(call_id, ()))

    def watch(self, call: pb.Call, addresses: Dict[str, str]) -> None:
        for fn, arglist in call.args.items():
            address = addresses.get(fn)
            if not address:
                continue
            for arg in list(arglist.args) + list(arglist.kwargs.values()):
                if arg.WhichOneof("kind") == "call" and arg.call.call_id in self._holders:
                    watchers = self._watchers.setdefault(arg.call.call_id, set())
                    if len(watchers) < self.max_watchers:
                        watchers.add(address)

    def holder(self, call_id: str, now: float) -> str:
        """The holder's address, or "" when this scheduler does not know the call."""
        while self._holders:          # entries are in placement order: the oldest first
            oldest, (_, expires) = next(iter(self._holders.items()))
            if expires > now:
                break
            del self._holders[oldest]
            self._watchers.pop(oldest, None)
        entry = self._holders.get(call_id)
        return entry[0] if entry is not None else ""

    def stamp(self, call: pb.Call, now: float) -> List[pb.CallRef]:
        unknown = []
        for arglist in call.args.values():
            for arg in list(arglist.args) + list(arglist.kwargs.values()):
                if arg.WhichOneof("kind") == "call":
                    arg.call.holder = self.holder(arg.call.call_id, now)
                    if not arg.call.holder:
                        unknown.append(arg.call)
        return unknown
