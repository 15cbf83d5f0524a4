"""The session of the call a worker runs: its floors, and what the call read and wrote.

Contract (read-your-writes and monotonic reads, `hydrocache/session.py`):
- `CallSession(floors, inherited)` is made for one function invocation from its schedule's
  session (`Schedule.session`: the caller's floors) and what its upstream functions read and
  wrote (`Trigger.session`, merged). `request(keys)` is the session a cache request for
  `keys` carries: the floors of those keys (raised by what this call read and wrote so far, so
  reads within a call are monotonic too) and the overflow.
- `note(key, timestamp)` records a plain read or write the node cache answered with the
  value's LWW timestamp; `report()` is what the call read and wrote (inherited included),
  which goes downstream with the result and, from the sink, back to the caller
  (`CallResult.session`), so the caller's next calls read those versions or newer.
- `UpstreamSessions` keeps the reports of upstream functions until their target runs, per
  call and target, for at most `max_calls` calls (the oldest call is forgotten first;
  `drop(call_id)` on an abort). Pure; no I/O.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import Floors, Session

__all__ = ["CallSession", "UpstreamSessions"]


class CallSession:
    """One invocation's session; see the module contract."""

    def __init__(self, floors: pb.Session, inherited: Optional[pb.Session] = None) -> None:
        self._floors = Session.from_proto(floors)
        self._report = Session(self._floors.max_keys)
        if inherited is not None:
            self._floors.absorb(inherited)
            self._report.absorb(inherited)
        self._index: Optional[Floors] = None

    def request(self, keys: Iterable[str]) -> pb.Session:
        if self._index is None:
            self._index = Floors(self._floors.to_proto())
        return self._index.restrict(keys)

    def note(self, key: str, timestamp: int) -> None:
        if timestamp:
            self._floors.note_plain(key, timestamp)
            self._report.note_plain(key, timestamp)
            self._index = None

    def note_merged(self, key: str) -> None:
        self._floors.note_merged(key)
        self._report.note_merged(key)
        self._index = None

    def report(self) -> pb.Session:
        return self._report.to_proto()


class UpstreamSessions:
    """Upstream reports per call and target, bounded; see the module contract."""

    def __init__(self, max_calls: int = 1024) -> None:
        self.max_calls = max_calls
        self._calls: Dict[str, Dict[str, Session]] = {}

    def add(self, call_id: str, target: str, report: pb.Session) -> None:
        if call_id not in self._calls and len(self._calls) >= self.max_calls:
            self._calls.pop(next(iter(self._calls)))
        targets = self._calls.setdefault(call_id, {})
        if target not in targets:
            targets[target] = Session()
        targets[target].absorb(report)

    def take(self, call_id: str, function: str) -> Optional[pb.Session]:
        targets = self._calls.get(call_id)
        if not targets:
            return None
        got = targets.pop(function, None)
        if not targets:
            del self._calls[call_id]
        return None if got is None else got.to_proto()

    def drop(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
