"""A worker's pending DAG invocations: when a function may run, and with which arguments.

Contract: `PendingCalls` is pure state (every method takes `now`, in seconds).
- A function invocation is identified by `(call_id, function)`. It becomes *ready* once its
  schedule has arrived and a result from every upstream named in the schedule has arrived,
  in any order (schedules and triggers come from different senders and race).
- `add_schedule(...)` / `add_trigger(...)` return a `Ready` when the invocation just became
  ready, else None. Its `args` are the call's own arguments for the function first, then the
  upstream results in the order of `upstreams` (the DAG's connection registration order).
  A source (no upstreams) is ready as soon as its schedule arrives. `inputs` (given with the
  schedule) are further named values it waits for the same way (the results of other calls
  given as arguments); they arrive by `add_trigger` under their name and come in
  `Ready.inputs`, not in `args`. `missing(call_id, function)` names a pending invocation's
  inputs and upstreams that have not arrived.
- `add_arrived(...)` is `add_schedule` then `add_trigger` in one step (a schedule that came
  with an upstream's result: a function of the same call ran on this worker), with the
  same outcome; an invocation whose one upstream is that one fires without an entry.
- Each invocation fires at most once; a trigger or schedule for one that already fired, or
  a duplicate trigger from the same upstream, is ignored.
- `Ready.deadline` is the invocation's deadline and `Ready.late` names the inputs that arrived
  after it (the caller should then report a timeout rather than run the function).
- `expire(now)` removes invocations past their deadline and returns them as `Stalled`
  (which upstreams are still missing, whether the schedule ever came). Triggers that arrive
  before their schedule wait at most `orphan_timeout`. A fired invocation is remembered
  (so ignored) at least until `orphan_timeout` past its deadline, oldest first, and at most
  `fired_memory` of them.
- `abort(call_id)` forgets every invocation of a call.
- `ran(call_id, functions, until)`: those invocations ran outside this state; remembered as
  fired (above) until `until`.
Values are opaque to this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

__all__ = ["PendingCalls", "Ready", "Stalled"]


@dataclass(slots=True)      # (one per function run: slots make it and its reads cheaper)
class Ready:
    call_id: str
    function: str
    schedule: Any
    args: List[Any]
    deadline: float = float("inf")
    late: List[str] = field(default_factory=list)   # inputs that arrived after the deadline
    inputs: Dict[str, Any] = field(default_factory=dict)   # named inputs (add_schedule)
    # the keyword arguments (`ArgumentList.kwargs`) when not the schedule's (a lease plan's
    # call passes the call's own: executor/chain_run.py); None: the schedule's
    kwargs: Any = None


@dataclass
class Stalled:
    call_id: str
    function: str
    schedule: Any                  # None if the schedule never arrived
    missing: List[str]             # upstreams (and inputs) whose result never arrived


@dataclass
class _Entry:
    deadline: float
    schedule: Any = None
    upstreams: Tuple[str, ...] = ()
    call_args: Sequence[Any] = ()
    inputs: Tuple[str, ...] = ()
    results: Dict[str, Any] = field(default_factory=dict)
    late: List[str] = field(default_factory=list)


class PendingCalls:
    """Invocations waiting for their schedule or upstream results; see the module contract."""

    def __init__(self, orphan_timeout: float = 30.0, fired_memory: int = 4096) -> None:
        self.orphan_timeout = orphan_timeout
        self._entries: Dict[Tuple[str, str], _Entry] = {}
        self._fired: Dict[Tuple[str, str], float] = {}   # recently fired -> forget-after time
        self._fired_memory = fired_memory

    def __len__(self) -> int:
        return len(self._entries)

    def add_schedule(self, call_id: str, function: str, schedule: Any,
                     upstreams: Sequence[str], call_args: Sequence[Any], deadline: float,
                     now: float, inputs: Sequence[str] = ()) -> Optional[Ready]:
        key = (call_id, function)
        if key in self._fired:
            return None
        e = self._entries.get(key)
        if e is None and not upstreams and not inputs:
            # a source waits for nothing: it fires as it comes (no entry made and dropped,
            # which every direct call would pay)
            self._remember(key, max(deadline, now))
            return Ready(call_id, function, schedule, list(call_args), deadline,
                         ["(the schedule)"] if now > deadline else [], {})
        if e is None:
            e = self._entries[key] = _Entry(deadline)
        elif e.schedule is not None:
            return None
        e.schedule, e.upstreams, e.call_args, e.deadline = schedule, tuple(upstreams), call_args, deadline
        e.inputs = tuple(inputs)
        if now > deadline:
            e.late.append("(the schedule)")
        return self._maybe_fire(key, e, now)

    def add_trigger(self, call_id: str, function: str, source: str, value: Any,
                    now: float) -> Optional[Ready]:
        key = (call_id, function)
        if key in self._fired:
            return None
        e = self._entries.get(key)
        if e is None:
            e = self._entries[key] = _Entry(now + self.orphan_timeout)
        if source in e.results:
            return None
        if e.schedule is not None and source not in e.upstreams and source not in e.inputs:
            return None
        e.results[source] = value
        if now > e.deadline and e.schedule is not None:
            e.late.append(source)
        return self._maybe_fire(key, e, now)

    def add_arrived(self, call_id: str, function: str, schedule: Any,
                    upstreams: Sequence[str], call_args: Sequence[Any], deadline: float,
                    now: float, source: str, value: Any) -> Optional[Ready]:
        """`add_schedule` then `add_trigger(source, value)`, in one step: the schedule came
        with that upstream's result (a function of the same call that ran on this worker).
        The outcome is the two calls'; an invocation whose one upstream is `source` fires
        without an entry made and dropped."""
        key = (call_id, function)
        if len(upstreams) != 1 or upstreams[0] != source or key in self._entries:
            ready = self.add_schedule(call_id, function, schedule, upstreams, call_args,
                                      deadline, now)
            return ready if ready is not None else \
                self.add_trigger(call_id, function, source, value, now)
        if key in self._fired:
            return None
        self._remember(key, max(deadline, now))
        return Ready(call_id, function, schedule, list(call_args) + [value], deadline,
                     ["(the schedule)", source] if now > deadline else [], {})

    def _maybe_fire(self, key: Tuple[str, str], e: _Entry, now: float) -> Optional[Ready]:
        if e.schedule is None or any(u not in e.results for u in e.upstreams + e.inputs):
            return None
        del self._entries[key]
        self._remember(key, max(e.deadline, now))
        args = list(e.call_args) + [e.results[u] for u in e.upstreams]
        return Ready(key[0], key[1], e.schedule, args, e.deadline, list(e.late),
                     {i: e.results[i] for i in e.inputs})

    def ran(self, call_id: str, functions: Iterable[str], until: float) -> None:
        """`functions` of `call_id` run outside this state (a direct call's functions, run
        as its lease's plan says): each is remembered as fired until `until`, as if it had
        fired here, so a schedule or trigger of it later is ignored and `known`."""
        for function in functions:
            self._remember((call_id, function), until)

    def known(self, call_id: str, function: str) -> bool:
        """Whether `function` of `call_id` has a schedule here or ran recently: another
        schedule of it would be ignored (`add_schedule` returns None)."""
        key = (call_id, function)
        if key in self._fired:
            return True
        e = self._entries.get(key)
        return e is not None and e.schedule is not None

    def missing(self, call_id: str, function: str) -> List[str]:
        """The upstreams and inputs a pending invocation still waits for ([] if none)."""
        e = self._entries.get((call_id, function))
        if e is None:
            return []
        return [u for u in e.upstreams + e.inputs if u not in e.results]

    def _remember(self, key: Tuple[str, str], until: float) -> None:
        self._fired[key] = until
        if len(self._fired) > self._fired_memory:
            # drop the oldest half (dicts keep insertion order)
            for k in list(self._fired)[: self._fired_memory // 2]:
                del self._fired[k]

    def abort(self, call_id: str) -> int:
        """Forget every pending invocation of `call_id`; returns how many were dropped."""
        keys = [k for k in self._entries if k[0] == call_id]
        for k in keys:
            del self._entries[k]
            self._remember(k, 0.0)
        return len(keys)

    def expire(self, now: float) -> List[Stalled]:
        """Remove and return the invocations whose deadline has passed."""
        out = []
        for key, e in list(self._entries.items()):
            if now > e.deadline:
                del self._entries[key]
                self._remember(key, now)   # results arriving late are ignored
                missing = [u for u in e.upstreams + e.inputs if u not in e.results]
                out.append(Stalled(key[0], key[1], e.schedule, missing))
        # oldest first, up to the first still remembered: this runs twice a second, and a
        # scan of every fired key (thousands) was a steady cost. One remembered longer behind
        # a later one is only ignored longer, as the memory's bound already allows.
        fired = self._fired
        while fired:
            key = next(iter(fired))
            if now <= fired[key] + self.orphan_timeout:
                break
            del fired[key]
        return out
