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
  (`CallResult.session`), so the caller's next calls read those versions or newer; None
  when the call (and its upstreams) read and wrote nothing, so no empty session travels.
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
    """One invocation's session; see the module contract. The caller's floors are looked up
    in its message, indexed on first use (not copied: a session may hold 1,024 keys, and most
    calls read a few)."""

    def __init__(self, floors: pb.Session, inherited: Optional[pb.Session] = None) -> None:
        self._floors = floors
        self._index: Optional[Floors] = None
        # what the call read and wrote: made at the first thing to note (most functions of a
        # warm call read nothing through the cache, and one is made for every function run)
        self._report: Optional[Session] = None
        if inherited is not None:
            self._noted().absorb(inherited)

    def _noted(self) -> Session:
        if self._report is None:
            self._report = Session()
        return self._report

    def request(self, keys: Iterable[str]) -> pb.Session:
        if self._index is None:
            self._index = Floors(self._floors)
        out = self._index.restrict(keys)
        if self._report is None:                 # nothing read or written so far
            return out
        own = self._report.to_proto(keys)        # raised by what the call did so far
        if own.keys or own.plain_keys:
            merged = Session.from_proto(out)
            merged.absorb(own)
            out = merged.to_proto()
            out.overflow_timestamp = max(out.overflow_timestamp,
                                         self._floors.overflow_timestamp)
            out.overflow_causal = out.overflow_causal or self._floors.overflow_causal
        return out

    def note(self, key: str, timestamp: int) -> None:
        if timestamp:
            self._noted().note_plain(key, timestamp)

    def note_merged(self, key: str) -> None:
        self._noted().note_merged(key)

    def report(self) -> Optional[pb.Session]:
        r = self._report
        if r is None or not len(r) and not r.overflow_timestamp and not r.overflow_causal:
            return None                 # nothing read or written: nothing to raise anywhere
        return r.to_proto()


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
