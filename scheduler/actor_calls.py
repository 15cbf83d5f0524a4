"""The scheduler's side of actors: placing them, routing their method calls, killing them.

Contract (`ActorCalls`, driven by the scheduler's loop; decisions are `scheduler/actors.py`'s):
- `call(call, now)` handles a `Call` with `actor` set:
  - ACTOR_CREATE: places the actor on one worker (`choose_actor_worker`), stores an
    `ActorRecord` (`faas.keys.actor_key`, written to every replica) so that every
    scheduler routes its calls to that worker, and sends the worker the creation as a
    one-function schedule. NO_RESOURCES when no worker is placeable. Only a client may
    create an actor (`scheduler/admission.py`).
    The creation's `max_restarts` (0: never; -1: without limit) is kept in the record with
    the creation itself, and this scheduler is recorded as the actor's owner.
  - ACTOR_METHOD: routes the call to the actor's worker (its record is read from the KVS
    when this scheduler has not seen the actor) as a one-function schedule. The worker runs
    its calls one at a time in arrival order, and one scheduler sends a worker its messages
    in order, so the calls of one caller that go through one scheduler run in the order they
    were made. ACTOR_DIED naming the actor and why when it is dead (its worker gone or
    restarted since, killed, constructor failed) or unknown; EXECUTION_ERROR, before
    anything runs, for a call made by a function on the actor's own worker (it would wait
    for itself: a worker runs one function at a time); ACTOR_CALL_CYCLE, before anything
    runs, for a call made by a function on worker C to an actor whose worker waits, through
    the actor calls in flight that this scheduler sent, on C (the message names the chain
    of workers): the calls would wait for each other until their deadlines. A cycle through
    calls sent by several schedulers is not seen (those wait until their deadlines).
  - ACTOR_KILL: the actor is dead at once for this scheduler (later calls: ACTOR_DIED), its
    record says so for the others, and the worker drops the instance after the calls it
    received before the kill. Killing a dead or unknown actor succeeds.
  Calls are counted on the worker like any call (`ExecutorTable.start_call`), so the
  placement of plain calls sees an actor's queue as load.
- `finished(call_id, ok)`: a call's `done`; a failed creation makes the actor dead.
- `worker_lost(worker_id, why)`: the worker died; its actors are dead (logged). Those this
  scheduler owns with restarts left are re-created at once on another placeable worker:
  their constructor runs again there from the recorded creation (the state is new), the
  record names the new incarnation, and later method calls go there. The calls in flight
  on the dead worker fail with ACTOR_DIED all the same (not re-run: methods are not
  idempotent). A scheduler that finds an actor's worker gone and does not own it reads
  the record again, and routes to the new incarnation once the owner has recorded it
  (until then: ACTOR_DIED saying it is being re-created). No placeable worker: it stays dead.
  A re-creation has no caller: its result goes nowhere, and its `done` (a failed
  constructor ends the actor) comes back as any call's.
- `states(node_of)`: every actor known here as `ActorState`s for `status`.
- `orphaned(call_id, status, message)`: the status and message for a call in flight on a
  worker that died: ACTOR_DIED naming the actor for an actor's call (TIMEOUT stays TIMEOUT,
  for the method that overran its limit and got its worker killed, and names the actor's
  death too), else unchanged.
- `placeable(workers)`: where plain calls may go (`prefer_free`).
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, List, Optional, Tuple

from anna_core import KeyNotFound
from hydro_proto import cloudburst_pb2 as pb
from faas.errors import CorruptRecord, NoResources
from faas.keys import actor_key
from faas.values import dumps

from .actors import (CREATE, KILL, METHOD, ActorDirectory, ActorEntry, choose_actor_worker,
                     prefer_free)
from .membership import CallRecord, ExecutorTable
from .policy import WorkerView

__all__ = ["ActorCalls"]

log = logging.getLogger("cloudburst.scheduler.actors")

_OPS = {pb.ACTOR_CREATE: CREATE, pb.ACTOR_METHOD: METHOD, pb.ACTOR_KILL: KILL}


class ActorCalls:
    """Actor creation, method calls and kills for one scheduler; see the module contract."""

    def __init__(self, push: Any, table: ExecutorTable, kvs: Any, stats: Any, address: str,
                 call_timeout: float, rng: random.Random) -> None:
        self._push = push
        self._table = table
        self._kvs = kvs
        self._stats = stats
        self._address = address
        self._call_timeout = call_timeout
        self._rng = rng
        self.directory = ActorDirectory()

    # ---- calls ----
    def call(self, call: pb.Call, now: float) -> None:
        a = call.actor
        if not a.actor_id or a.op not in _OPS:
            return self._fail(call, pb.BAD_REQUEST, "an actor call needs an actor id and a "
                                                    "known operation")
        if a.op == pb.ACTOR_CREATE:
            return self._create(call, now)
        entry, why = self._route(a.actor_id)
        if a.op == pb.ACTOR_KILL:
            return self._kill(call, entry, why, now)
        if entry is None:
            return self._fail(call, pb.ACTOR_DIED, (
                f"actor {a.actor_id} ({a.class_name}) is unknown: no scheduler placed it "
                f"(or its record was lost)"))
        if why is not None:
            return self._fail(call, pb.ACTOR_DIED, f"{entry.describe()} is dead: {why}")
        if a.caller_worker and a.caller_worker == entry.worker_id:
            return self._fail(call, pb.EXECUTION_ERROR, (
                f"method {a.method!r} of {entry.describe()} was called from a function "
                f"running on the actor's own worker {entry.worker_id}; a worker runs one "
                f"function at a time, so the call would wait for itself. Call it from the "
                f"client, or from a function on another worker"))
        if a.caller_worker:
            chain = self.directory.wait_cycle(a.caller_worker, entry.worker_id)
            if chain is not None:
                return self._fail(call, pb.ACTOR_CALL_CYCLE, (
                    f"method {a.method!r} of {entry.describe()} was called from a function on "
                    f"worker {a.caller_worker}, but the actor's worker {entry.worker_id} waits "
                    f"for it through the actor calls in flight ({' -> '.join(chain)} -> "
                    f"{a.caller_worker}, each running a function that called the next); a "
                    f"worker runs one function at a time, so these calls would wait for each "
                    f"other until their deadlines"))
        self._send(call, entry, METHOD, now)

    def _create(self, call: pb.Call, now: float) -> None:
        a = call.actor
        if self.directory.get(a.actor_id) is not None:
            return self._fail(call, pb.BAD_REQUEST, f"actor {a.actor_id} exists already")
        try:
            view = choose_actor_worker(self._table.placeable(), self.directory.hosting(),
                                       self._rng)
        except NoResources as e:
            return self._fail(call, pb.NO_RESOURCES, f"actor {a.actor_id} ({a.class_name}): {e}")
        if a.max_restarts < -1:
            return self._fail(call, pb.BAD_REQUEST, f"actor {a.actor_id}: max_restarts must "
                                                    f"be >= 0, or -1 for no limit")
        entry = ActorEntry(a.actor_id, a.class_name, view.worker_id,
                           self._table.restarts(view.worker_id), max_restarts=a.max_restarts,
                           owner=self._address,
                           creation=a.SerializeToString() if a.max_restarts else b"")
        self._store(entry)
        self.directory.placed(entry)
        log.info("placed %s on worker %s", entry.describe(), entry.worker_id)
        self._send(call, entry, CREATE, now)

    def _kill(self, call: pb.Call, entry: Optional[ActorEntry], why: Optional[str],
              now: float) -> None:
        if entry is None or why is not None:       # nothing to kill: done already
            self._push.send(call.response_address, "result", pb.CallResult(
                request_id=call.request_id, status=pb.OK, value=dumps(None)))
            return
        self.directory.ended(entry.actor_id, "it was killed")
        self._store(entry)
        log.info("killing %s on worker %s", entry.describe(), entry.worker_id)
        self._send(call, entry, KILL, now)

    def _send(self, call: pb.Call, entry: ActorEntry, op: str, now: float) -> None:
        a = call.actor
        address = self._table.address(entry.worker_id)
        timeout = call.timeout if call.timeout > 0 else self._call_timeout
        name = f"{entry.class_name}.{a.method or op}"
        s = pb.Schedule(call_id=call.request_id, function=name, sink=True,
                        response_address=call.response_address,
                        scheduler_address=self._address, timeout=timeout,
                        time_limit=call.time_limit)
        s.locations[name] = address or ""
        if a.method in call.args:
            s.args.CopyFrom(call.args[a.method])
        s.actor.CopyFrom(a)
        if call.HasField("session"):       # the caller's read-your-writes floors
            s.session.CopyFrom(call.session)
        if not self._push.send(address or "", "schedule", s):
            return self._fail(call, pb.NO_RESOURCES, (
                f"{entry.describe()}: its worker {entry.worker_id} did not accept the call"))
        self._table.start_call(CallRecord(call.request_id, name, {name: entry.worker_id},
                                          call.response_address, now + timeout + 5))
        self.directory.call_started(call.request_id, entry.actor_id, op,
                                    call.actor.caller_worker, entry.worker_id)
        self._stats.started(call.request_id, name, now)

    def _fail(self, call: pb.Call, status: int, message: str) -> None:
        self._push.send(call.response_address, "result", pb.CallResult(
            request_id=call.request_id, status=status, message=message))

    # ---- events ----
    def finished(self, call_id: str, ok: bool) -> None:
        entry = self.directory.call_finished(call_id, ok)
        if entry is not None:
            log.info("%s is dead: %s", entry.describe(), entry.dead)

    def worker_lost(self, worker_id: str, why: str) -> None:
        for entry in self.directory.worker_lost(worker_id, why):
            log.warning("%s is dead: %s", entry.describe(), entry.dead)
            self._maybe_restart(entry, time.monotonic(), exclude=worker_id)

    def _maybe_restart(self, entry: ActorEntry, now: float, exclude: str = "") -> bool:
        """Re-create a dead actor this scheduler owns (module contract); True if sent."""
        if not self.directory.restartable(entry, self._address):
            return False
        workers = [w for w in self._table.placeable()
                   if w.worker_id not in (exclude, entry.worker_id)]
        try:
            view = choose_actor_worker(workers, self.directory.hosting(), self._rng)
        except NoResources:
            entry.dead = f"{entry.dead}; no other worker could take it again"
            entry.lost_worker = False
            self._store(entry)
            log.warning("%s is dead: %s", entry.describe(), entry.dead)
            return False
        new = self.directory.restarted(entry, view.worker_id,
                                       self._table.restarts(view.worker_id))
        self._store(new)
        limit = "no limit" if new.max_restarts < 0 else f"of {new.max_restarts}"
        log.warning("re-creating %s on worker %s (restart %d, %s)", new.describe(),
                    new.worker_id, new.incarnation, limit)
        creation = pb.Call(request_id=f"{new.actor_id}-restart{new.incarnation}",
                           function=f"{new.class_name}.__init__")   # no caller: no result
        creation.actor.ParseFromString(new.creation)
        self._send(creation, new, CREATE, now)
        return True

    def states(self, node_of: Any) -> List[pb.ActorState]:
        """Every actor known here, for `status` (`node_of(worker_id)`: its node or "")."""
        calls = self.directory.calls_of()
        return [pb.ActorState(actor_id=e.actor_id, class_name=e.class_name,
                              worker_id=e.worker_id,
                              node_id=node_of(e.worker_id) if e.dead is None else "",
                              calls=calls.get(e.actor_id, 0), restarts=e.incarnation,
                              max_restarts=e.max_restarts, dead=e.dead or "")
                for e in self.directory.entries()]

    def orphaned(self, call_id: str, status: int, message: str) -> Tuple[int, str]:
        entry = self.directory.actor_of_call(call_id)
        if entry is None:
            return status, message
        self.directory.call_finished(call_id, False)
        again = ""
        if entry.dead is None and entry.incarnation > 0:
            again = (f" (it was re-created on worker {entry.worker_id}, restart "
                     f"{entry.incarnation}, with new state: later calls go there)")
        if status == pb.TIMEOUT:   # the method overran its limit in C code: say both
            return status, f"{message}; {entry.describe()} died with the worker{again}"
        return pb.ACTOR_DIED, f"{entry.describe()} died with its worker: {message}{again}"

    def placeable(self, workers: List[WorkerView]) -> List[WorkerView]:
        return prefer_free(workers, self.directory.hosting())

    # ---- the record in the KVS ----
    def _route(self, actor_id: str) -> Tuple[Optional[ActorEntry], Optional[str]]:
        entry, why = self.directory.route(actor_id, self._restarts_of)
        if entry is None:
            record = self._load(actor_id)
            if record is not None:
                self.directory.placed(_entry_of(record))
                entry, why = self.directory.route(actor_id, self._restarts_of)
        if entry is not None and why is not None and entry.lost_worker:
            if entry.owner == self._address:
                if self._maybe_restart(entry, time.monotonic()):
                    entry, why = self.directory.route(actor_id, self._restarts_of)
            elif entry.restarts_left():
                # another scheduler owns it: it may have re-created it already
                record = self._load(actor_id)
                if record is not None and record.incarnation > entry.incarnation:
                    self.directory.placed(_entry_of(record))
                    entry, why = self.directory.route(actor_id, self._restarts_of)
                elif record is not None and not record.dead:
                    why = (f"{why}; it is being re-created by scheduler {entry.owner} "
                           f"(restart {entry.incarnation + 1}): call again")
        return entry, why

    def _restarts_of(self, worker_id: str) -> Optional[int]:
        if self._table.address(worker_id) is None:
            return None
        return self._table.restarts(worker_id)

    def _store(self, entry: ActorEntry) -> None:
        record = pb.ActorRecord(actor_id=entry.actor_id, class_name=entry.class_name,
                                worker_id=entry.worker_id, restarts=entry.restarts,
                                dead=entry.dead is not None, reason=entry.dead or "",
                                max_restarts=entry.max_restarts,
                                incarnation=entry.incarnation, owner=entry.owner,
                                creation=entry.creation)
        self._kvs.put_all(actor_key(entry.actor_id), record.SerializeToString())

    def _load(self, actor_id: str) -> Optional[pb.ActorRecord]:
        key = actor_key(actor_id)
        try:
            data = self._kvs.get(key)
        except KeyNotFound:
            return None
        try:
            record = pb.ActorRecord.FromString(bytes(data))
        except Exception as e:
            raise CorruptRecord(f"the actor record {key!r} does not parse "
                                f"({type(e).__name__})", key) from None
        if record.actor_id != actor_id or not record.worker_id:
            raise CorruptRecord(f"the actor record {key!r} names actor "
                                f"{record.actor_id[:80]!r} on worker {record.worker_id!r}", key)
        return record


def _entry_of(record: pb.ActorRecord) -> ActorEntry:
    """A directory entry from another scheduler's record."""
    return ActorEntry(record.actor_id, record.class_name, record.worker_id, record.restarts,
                      record.reason or None if record.dead else None,
                      max_restarts=record.max_restarts, incarnation=record.incarnation,
                      owner=record.owner, creation=record.creation)
