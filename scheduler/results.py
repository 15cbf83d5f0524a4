"""Where the result of a call placed by this scheduler can be fetched, for later calls that
take it as an argument (a `Future` passed to a call).

Contract (pure state; every method takes `now`, in seconds):
- `placed(call_id, sink_address, now)` remembers the worker that runs the call's sink (it
  holds the call's outcome for a while: `executor/held.py`) for `ttl` seconds, at most
  `max_entries` calls (the oldest are forgotten first).
- `stamp(call, now)` sets `holder` on every `CallRef` argument (positional or keyword) of
  `call` whose call it remembers, and returns the refs it does not know (their call was
  not placed here, failed before it was placed, or was placed more than `ttl` s ago).
"""
from __future__ import annotations

import collections
from typing import List, OrderedDict, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ResultHolders"]


class ResultHolders:
    """call id -> the address of the worker holding its outcome; see the module contract."""

    def __init__(self, ttl: float = 600.0, max_entries: int = 65536) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._holders: OrderedDict[str, Tuple[str, float]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def placed(self, call_id: str, sink_address: str, now: float) -> None:
        self._holders[call_id] = (sink_address, now + self.ttl)
        self._holders.move_to_end(call_id)
        while len(self._holders) > self.max_entries:
            self._holders.popitem(last=False)

    def holder(self, call_id: str, now: float) -> str:
        """The holder's address, or "" when this scheduler does not know the call."""
        while self._holders:          # entries are in placement order: the oldest first
            oldest, (_, expires) = next(iter(self._holders.items()))
            if expires > now:
                break
            del self._holders[oldest]
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
