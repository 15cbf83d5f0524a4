"""Results that arrive later: `Future`, `CausalStats`, and waiting on many futures at once.

Contract:
- `Future.get(timeout)` (or `result(timeout)`, the `concurrent.futures` name) returns the
  call's value or raises its typed error; `Timeout` names the stage the call stalled at.
  The value is read as plain data unless the call was made with `objects=True` or `get` is
  given `objects=True`; a value that is more raises `UnsafeValue` and runs nothing
  (`faas/values.py`). The result stays, so `get(objects=True)` may follow.
  `done()` never blocks. `wait(timeout)` waits without raising and says whether it is done.
- `await future` works inside `asyncio`: the wait runs in the event loop's default
  executor, so the loop keeps running.
- `gather(futures, timeout)` returns every value in the futures' order, raising the first
  error met in that order; `timeout` bounds the whole wait, not each future.
  `wait(futures, timeout)` returns `(done, pending)` lists without raising.
- After a causal call's `get`, `Future.causal` holds its `CausalStats`, which says which
  protocol produced the result, the protocol asked for, and why they differ (HB).
- `Future.logs()` is what the call's functions printed, bounded.
- A `Future` given to another call as a top-level argument is replaced by its value where
  that call runs (`cloudburst/arguments.py`); it cannot be pickled inside another value.
- `Future.cancel()` stops the call where it runs; `get` then raises `Cancelled`. A call whose
  deadline passes while its caller waits in `get` is cancelled the same way, and so is one
  whose caller is interrupted while waiting (KeyboardInterrupt, SystemExit: cancelled, then
  re-raised), or whose `Future` is collected unawaited (cancelled by the client's lease
  thread within a second). A call with an `output_key` (`fire_and_forget`) runs on in the
  last two cases.
- An error whose call was retried (`ExecutionError`, `WorkerDied`) says in `attempts` how
  many times it ran.
- A call whose scheduler stops (its connection drops) or stops answering while the caller
  waits fails with `SchedulerUnavailable` naming the scheduler (checked every
  `Client.failover_timeout` of waiting); it is not retried: it may have run. A call a
  stopping scheduler refused (it never started there) is sent to another scheduler instead
  (`cloudburst/channel.py`), and `scheduler` then names that one.
- A `Future` reaches its client only through `CallOwner`, the small interface below, which
  the client implements (`cloudburst/channel.py`'s `FutureLink`).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

from hydro_proto import cloudburst_pb2 as pb

from faas.errors import (Cancelled, ExecutionError, SchedulerUnavailable, Timeout,
                           error_from_status)
from faas.values import loads

__all__ = ["CallOwner", "CausalStats", "Future", "SchedulerUnavailable", "explain_protocol",
           "gather", "wait"]


class CallOwner(Protocol):
    """What a `Future` needs from the client that made its call, and nothing more."""

    failover_timeout: float        # seconds between two checks that the scheduler is there

    def current_scheduler(self) -> str:
        """The scheduler the client talks to now."""

    def peek(self, rid: str) -> Optional[pb.CallResult]:
        """The call's answer if it has arrived (reads what is waiting, never blocks)."""

    def wait_taken(self, rid: str, timeout: float
                   ) -> Optional[Tuple[pb.CallResult, Optional[str]]]:
        """The call's answer, waiting up to `timeout` s, taken as `collected` takes it:
        (the answer, `collected`'s scheduler); None if it has not arrived."""

    def scheduler_lost(self, scheduler: str, since: float, rid: str) -> Optional[str]:
        """Why the call's scheduler is gone, or None while it is there."""

    def sent_to(self, rid: str) -> Optional[Tuple[str, float]]:
        """(scheduler, time sent) of the call's latest send, when a stopping scheduler
        refused it and it went to another; None otherwise (or once it is over)."""

    def where(self, rid: str, what: str, scheduler: str) -> str:
        """The stage a call stalled at, in words (for `Timeout`)."""

    def cancel(self, rid: str, scheduler: str) -> None:
        """Stop the call where it runs (no answer awaited)."""

    def forget(self, rid: str) -> None:
        """The client keeps nothing more for the call."""

    def abandon(self, rid: str, fire_and_forget: bool) -> None:
        """The Future was collected unawaited (a finalizer: must not send)."""

    def collected(self, rid: str, result: pb.CallResult) -> Optional[str]:
        """The call's result was taken: reported to the scheduler, noted in the session.
        Returns the scheduler the call was last sent to (`sent_to`'s), if it was kept."""

    def collect_arrived(self, rids: Sequence[str]
                        ) -> Dict[str, Tuple[pb.CallResult, Optional[str]]]:
        """The calls among `rids` whose answers have arrived, each taken as `collected`
        takes one: rid -> (its result, `collected`'s scheduler). Never blocks."""

    def release_values(self, keys: List[str]) -> None:
        """Delete these large values of the call from the KVS (done with them)."""

    def take_value(self, key: str, what: str) -> bytes:
        """Read (and delete) a large result stored by reference under `key`."""

PROTOCOL_NAMES = {pb.HB: "hb", pb.CT: "ct", pb.OPT: "opt", pb.CON: "con"}


def explain_protocol(requested: str, protocol: str, aborts: int = 0) -> str:
    """Why a causal call's result came from `protocol` when it asked for `requested`: one
    sentence, for `CausalStats.why` (pure)."""
    retried = f", after {aborts} aborted attempt(s)" if aborts else ""
    if requested == "hb" and protocol == "opt":
        return ("hb runs the call optimistically (opt) while it takes the snapshot con would "
                "need; opt's reads formed a causal snapshot, so its result is the call's and "
                f"con was not needed{retried}")
    if requested == "hb" and protocol == "con":
        return ("hb runs the call optimistically (opt) while it takes the snapshot con would "
                "need; opt's reads did not form a causal snapshot (its attempt aborted), so con "
                f"finished the call on that snapshot{retried}")
    if requested == protocol:
        return f"{protocol}, as asked{retried}"
    return f"{protocol} (asked for {requested}){retried}"


@dataclass
class CausalStats:
    """How a causal call's protocol went (`cloudburst.CausalStats` as Python values).

    protocol: the protocol that produced the result ("ct", "opt" or "con"; HB reports the
    one its result came from); aborts: attempts aborted before it; remote_fetches: versions
    the final attempt fetched from other caches; read_set / writes: key -> vector clock of
    the versions the DAG read and the sink committed; requested: the protocol the call asked
    for ("hb" by default); why: in words, why `protocol` produced the result (for HB: that
    OPT's optimistic attempt was a valid snapshot, or that it aborted and CON finished).
    """

    protocol: str
    aborts: int = 0
    remote_fetches: int = 0
    read_set: Dict[str, Dict[str, int]] = field(default_factory=dict)
    writes: Dict[str, Dict[str, int]] = field(default_factory=dict)
    requested: str = ""
    why: str = ""

    @classmethod
    def from_proto(cls, m: "pb.CausalStats") -> "CausalStats":
        protocol = PROTOCOL_NAMES.get(m.protocol, str(m.protocol))
        requested = PROTOCOL_NAMES.get(m.requested, str(m.requested))
        if requested == "hb" and protocol in ("ct", "hb"):
            requested = protocol     # HB never ends as CT: a sender without the field
        return cls(protocol=protocol, aborts=m.aborts, remote_fetches=m.remote_fetches,
                   read_set={kv.key: dict(kv.vc) for kv in m.read_set},
                   writes={kv.key: dict(kv.vc) for kv in m.writes}, requested=requested,
                   why=explain_protocol(requested, protocol, m.aborts))


class Future:
    """The eventual result of one call; see the module contract."""

    # What a collected Future owes its client is settled in `__del__`, not with
    # `weakref.finalize`: two finalizers cost a burst of calls more than its calls' own
    # bookkeeping (a finalizer each, registered and detached, ~3 us a call)
    _owed = False          # the call's end was not seen: a dropped Future abandons it
    _stored: Sequence[str] = ()

    def __init__(self, client: CallOwner, request_id: str, what: str, timeout: float,
                 scheduler: str = "", sent_at: Optional[float] = None,
                 objects: bool = False, stored: Sequence[str] = (),
                 consistency: str = "lww", fire_and_forget: bool = False,
                 inputs: Sequence["Future"] = ()) -> None:
        self._client = client
        # the Futures passed to this call as arguments: held so that dropping them (which
        # cancels their calls) cannot take away a value this call still has to fetch
        self._inputs = tuple(inputs)
        self.request_id = request_id
        self.what = what
        self.scheduler = scheduler or client.current_scheduler()   # where the call was sent
        now = time.monotonic()
        self._sent_at = now if sent_at is None else sent_at
        self._timeout = timeout
        self._deadline = now + timeout
        self._result: Optional[pb.CallResult] = None
        self._lost: Optional[str] = None     # why its scheduler is gone (SchedulerUnavailable)
        self.causal: Optional[CausalStats] = None   # set by get() for causal calls
        self._cancelled = False
        self.objects = objects       # read the value as Python objects, not only plain data
        # an output_key call: kept running when its caller leaves or drops this Future
        self.fire_and_forget = fire_and_forget
        self.consistency = consistency   # of the call: "lww" or "causal"
        # large values of this call in the KVS (its arguments, then its result): deleted once
        # the call is over, or when the future is dropped unread
        self._stored = list(stored)
        self._value: Optional[bytes] = None
        self._owed = True

    def __del__(self) -> None:
        """Collected: a call still out (not fire-and-forget) is cancelled by the client's
        lease thread (`CallOwner.abandon` only records it: this may run inside any
        allocation), and the call's large values still in the KVS are deleted."""
        try:
            if self._owed:
                self._owed = False
                self._client.abandon(self.request_id, self.fire_and_forget)
            if self._stored:
                stored, self._stored = self._stored, []
                self._client.release_values(stored)
        except Exception:       # (at interpreter exit the client may be half torn down)
            pass

    def __repr__(self) -> str:
        return f"<Future {self.what} {'done' if self._result is not None else 'pending'}>"

    def __reduce__(self) -> Any:
        raise TypeError(f"a Future ({self.what}) cannot be pickled: pass it to a call as a "
                        f"top-level argument (positional or keyword), where its value is "
                        f"fetched on the executor, or pass future.get()")

    def done(self) -> bool:
        """True if the result (or error) has arrived, or the call was cancelled."""
        if self._cancelled:
            return True
        if self._result is None:
            self._result = self._client.peek(self.request_id)
            if self._result is not None:
                self._collected()
        return self._result is not None or self._lost is not None

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to `timeout` seconds (the call's own deadline if None); True once done."""
        if self._cancelled or self._lost is not None:
            return True
        if self._result is None:
            try:
                taken = self._await_slot(timeout)
            except (KeyboardInterrupt, SystemExit):
                # the caller stopped waiting (Ctrl-C, exit): nothing keeps running for it
                if not self.fire_and_forget:
                    self.cancel()
                raise
            if taken is None:
                return self.done() or self._lost is not None
            self._result = taken[0]
            self._settled(taken[1])
        return True

    def _await_slot(self, timeout: Optional[float]
                    ) -> Optional[Tuple[pb.CallResult, Optional[str]]]:
        """The answer, taken (`CallOwner.wait_taken`); None when `timeout` passed first or
        the scheduler was lost (`_lost` set) or the result came through `done()`."""
        client = self._client
        deadline = time.monotonic() + (self._timeout if timeout is None else max(0.0, timeout))
        while True:
            left = deadline - time.monotonic()
            taken = client.wait_taken(self.request_id,
                                      max(0.0, min(left, client.failover_timeout)))
            if taken is not None:
                return taken
            if time.monotonic() >= deadline:
                return None
            # a stopping scheduler may have refused the call, which went elsewhere
            self.scheduler, self._sent_at = client.sent_to(self.request_id) or (
                self.scheduler, self._sent_at)
            lost = client.scheduler_lost(self.scheduler, self._sent_at, self.request_id)
            if self.done():                  # the result came meanwhile
                return None
            if lost is not None:
                self._lost = f"{self.what}: {lost} while the call was in flight; it was " \
                             f"not retried (it may or may not have run)"
                self._owed = False
                client.forget(self.request_id)
                return None

    def cancel(self) -> bool:
        """Stop the call: its functions are stopped or never start, and `get` raises
        `Cancelled`. False if the result had already arrived (nothing to cancel)."""
        if self._cancelled:
            return True
        if self.done():
            return False
        self._cancelled = True
        self._owed = False
        self._client.cancel(self.request_id, self.scheduler)
        self._client.forget(self.request_id)
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def get(self, timeout: Optional[float] = None, *, objects: Optional[bool] = None) -> Any:
        """The call's value; raises the call's typed error, or `Timeout` after `timeout` s.
        A `timeout` shorter than the call's deadline only stops this wait; once the call's
        own deadline has passed, the call is cancelled (nothing runs for a caller that left).
        `objects` (default: as the call said) unpickles the value fully instead of as plain
        data (`UnsafeValue` if it is more); see the module contract."""
        if self._cancelled:
            raise Cancelled(f"{self.what} was cancelled")
        if not self.wait(timeout):
            wait = self._timeout if timeout is None else timeout
            where = self._client.where(self.request_id, self.what, self.scheduler)
            if not self.done():           # the result may have come while we asked where
                past_deadline = time.monotonic() >= self._deadline
                # cancelling fails when the result arrives just now: then report the result
                if not (past_deadline and not self.cancel() and self.done()):
                    raise Timeout(where, wait)
            if self._cancelled:
                raise Cancelled(f"{self.what} was cancelled")
        if self._lost is not None and self._result is None:
            raise SchedulerUnavailable(self._lost)
        r = self._result
        if self.causal is None and r.HasField("causal"):
            self.causal = CausalStats.from_proto(r.causal)
        if r.status == pb.OK:
            if r.value_key and self._value is None:     # a large result, by reference
                self._value = self._client.take_value(r.value_key, f"the result of {self.what}")
                if r.value_key in self._stored:
                    self._stored.remove(r.value_key)
            return loads(r.value if not r.value_key else self._value,
                         self.objects if objects is None else objects,
                         what=f"the result of {self.what}",
                         opt_in="objects=True on the call or on Future.get")
        error = error_from_status(r.status, r.message, r.traceback, r.stage)
        if r.attempts > 1 and isinstance(error, ExecutionError):
            error.attempts = r.attempts
        raise error

    result = get

    def logs(self, timeout: Optional[float] = None) -> str:
        """What the call's functions printed (stdout and stderr), in `[function]` sections,
        upstream first, bounded by the workers' `output_limit` (the oldest text is dropped
        first). Available once the call has finished, successfully or not; `Timeout` if it
        has not finished within `timeout`."""
        if not self.wait(timeout):
            wait = self._timeout if timeout is None else timeout
            raise Timeout(self._client.where(self.request_id, self.what, self.scheduler), wait)
        return self._result.logs if self._result is not None else ""

    def __await__(self):
        """`await future` from asyncio: waits in the loop's executor, then returns `get()`."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.get).__await__()

    def _collected(self) -> None:
        self._settled(self._client.collected(self.request_id, self._result))

    def _settled(self, moved: Optional[str]) -> None:
        """The result was taken from the client (`moved`: where a stopping scheduler's
        refusal sent the call, if it did)."""
        self._owed = False
        self.scheduler = moved or self.scheduler
        arguments = self._stored
        self._stored = [self._result.value_key] \
            if self._result is not None and self._result.value_key else []   # until get()
        if arguments:
            self._client.release_values(arguments)


TAKE_AHEAD = 32      # futures `gather` looks at in one step when one is not yet done


def gather(futures: Iterable[Future], timeout: Optional[float] = None) -> List[Any]:
    """Every future's value, in order; the first error (in order) is raised."""
    futures = list(futures)
    _take_arrived(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
    out = []
    for i, f in enumerate(futures):
        if f._result is None:
            # what arrived while an earlier one was waited for, taken in one step for the
            # next few (answers come in batches; a bounded look, however many are out)
            _take_arrived(futures[i:i + TAKE_AHEAD])
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        out.append(f.get(left))
    return out


def _take_arrived(futures: Sequence[Future]) -> None:
    """The results already arrived for any of `futures`, taken in one step per client
    (`CallOwner.collect_arrived`) rather than one wait each: a burst's gather finds most of
    its answers in."""
    pending: Dict[Any, Dict[str, Future]] = {}
    for f in futures:
        if f._result is None and not f._cancelled and f._lost is None:
            pending.setdefault(f._client, {})[f.request_id] = f
    for owner, by_id in pending.items():
        for rid, (result, moved) in owner.collect_arrived(list(by_id)).items():
            f = by_id[rid]
            f._result = result
            f._settled(moved)


def wait(futures: Sequence[Future], timeout: Optional[float] = None
         ) -> Tuple[List[Future], List[Future]]:
    """Wait until every future is done or `timeout` passes; returns (done, pending)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for f in futures:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not f.wait(left):
            break
    done = [f for f in futures if f.done()]
    return done, [f for f in futures if not f.done()]
