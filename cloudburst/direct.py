"""The client's direct call path: worker leases, and calls sent straight to a leased worker.

A client (`Client(direct=True)`, the default) asks its scheduler for a worker lease on a target
(a function, or a DAG) the first time it calls it. Once granted, the target's calls go
straight to the leased worker, `slots` at a time: one message to the worker and the result
back, instead of client -> scheduler -> worker -> client plus the worker's `done`. The client
tells the scheduler afterwards, batched with the lease's renewal, how many it made.

Contract: `DirectPath(owner, context, credentials)` belongs to one client; `owner` is the
client's `LeaseOwner` side (sending to a scheduler, delivering an answer to a waiting call).
- `eligible(call, stored, inputs, references=None)`: what may go direct: plain (LWW) calls of a
  function or a DAG without an `output_key`, `Future` arguments, `Reference` arguments
  (`references`: their keys, if the caller has them; else read from `call`), arguments stored
  by reference, their own exception retries, and that are not actor calls. Everything else
  takes the scheduler's path, as does every call while no lease with a free slot is held.
- `send(call)` first has the owner read the answers that have arrived (`read_arrived`, at most
  every `READ_EVERY` s after the last read or direct answer, more often while
  calls wait here for a free slot: `cloudburst/pacing.py`): so a burst's calls go to slots
  freed while it is being sent, a lease is judged held up (below) on the answers its worker
  gave, not on answers the client had not read, and a lease revoked because its worker was
  given another caller's call is not used after its revocation arrived. It sends `call` direct
  and returns the lease's scheduler if a live lease of its target has a free slot and no call
  of this client in flight (the call then counts against it until its answer arrives). A call
  for a lease with calls in flight (its worker would run it after them anyway) is queued here
  for company and returns the lease's scheduler: the queued calls go in one `direct_batch` once
  `CORK_CALLS` wait, `CORK_SECONDS` after the first of them (`owner.flush_by` is told that
  deadline), or at a `flush(force=True)` (a caller is about to wait). A lease whose slots are
  all in use while calls queue is renewed early, at most every `pacing.GROW_EVERY` s, backing
  off to `GROW_MOST` while renewals do not grow it (`pacing.next_grow_wait`): the renewal takes
  its worker's window now. When the client holds live leases of the target but every slot is in
  use, the call waits in the client's own queue for a slot of those leases, as Ray's owners
  queue against the workers they lease (at most `MAX_QUEUED` calls; beyond, the scheduler's
  path), and the client asks for one more lease of the target on another worker
  (`LeaseRequest.spread`, up to `MAX_SPREAD` leases per target, again `RETRY_ASK` s after a
  refusal); it returns the scheduler of a lease. A lease whose worker is held up (its oldest
  call in flight has been out longer than the target's calls usually take:
  `cloudburst/stalls.py`; a verdict stands until the next answer or lease news, at most
  `READ_EVERY`) is passed over: the call goes to another lease of the target, else through the
  scheduler (None), which places it on a free worker, and one more lease is asked for on
  another worker; the calls queued here for held-up leases go through the scheduler at the next
  `flush`. Without a live lease it records a request for one (once per target at a time, again
  `RETRY_ASK` s after a refusal) and returns None: the caller sends the call through the
  scheduler, then `flush`es, so the scheduler places the call before it leases (the call's warm
  worker, with its slot taken, rather than a lease that makes the call wait for its own
  worker).
- Queued calls go out in `flush`, first in first out, as slots free: the calls for one worker
  in `direct_batch` messages (`DirectBatch`, each call admitted on its own by the worker) of at
  most half its lease's slots (`pacing.batch_cap`). When the target's last lease ends (lapsed,
  revoked, its worker died, or refused at the worker), its queued calls go through the
  scheduler. `drop_queued(rid)` takes a cancelled call out of the queue (True if it was there:
  it never ran).
- `on_lease(message)` and `on_result(result)` take what arrives on the client's answer socket
  (called with the client's answer lock held: they only record). `on_result` returns the result
  to deliver, or None when it is the path's own business: a call the worker refused
  (LEASE_REFUSED: it did not run) is sent again through the scheduler. A lease revoked because
  its worker died makes its calls in flight run again through the scheduler while their retry
  budget lasts, else fail with WORKER_DIED (`held_lease.after_death`).
- `flush(force=False)` does what those recorded (resends, failures, renewals and usage reports,
  the queued calls that are due), outside the lock, and gives lapsed leases back with their
  usage; it returns when the calls still held for company are due (None: none). The client's
  lease thread calls it too (`cloudburst/leases.py`), so an idle client's direct calls reach
  the scheduler's statistics within seconds. A lease in use (a call sent under it, or calls in
  flight: `flush` runs while the client waits for answers) is renewed and lapses as
  `cloudburst/held_lease.py` says (the record of one lease, its usage reports and its renewal).
- `advance_links()`: while a call link is opening, the owner reads the answers (where its
  connect and handshake advance); returns when to again, for the client's lease thread.
- `held()`: the leases held now (target, worker, slots, calls in flight), for
  `Client.worker_leases`.
- `lease_of(rid)`: (lease id, worker id) of a direct call in flight, else None (cancels go to
  the scheduler with the lease id, which stops the call on its worker; `where` names the
  worker).
- Calls go to a leased worker over its call link when the lease names one, else, or when the
  link cannot open or breaks, over ZeroMQ (`cloudburst/worker_routes.py`; `links`: the
  client's `ClientCallLinks`, None without the native module). `cloudburst/call_link.py` says
  what becomes of the calls on a link that closes: never read, through the scheduler at once;
  perhaps lost, CALL_LINK_BROKEN at once (`_unanswered`).
- `release_all()` gives every lease back (the client changed the registry: a lease runs the
  function versions it was granted for); `close()` too, and closes the path's sockets. Usage
  not yet reported goes with the release.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb

from faas.errors import CloudburstError
from .arguments import referenced_keys
from .pacing import CORK_CALLS, CORK_SECONDS, READ_EVERY, batch_cap, next_grow_wait, \
    read_every
from .held_lease import Held, Key, after_death, next_sweep, record, release, renewal, \
    renewal_due, until
from .stalls import CallTimes, held_up
from .worker_routes import WorkerRoutes

__all__ = ["DirectPath", "LeaseOwner", "RETRY_ASK", "MAX_QUEUED", "MAX_SPREAD"]

log = logging.getLogger("cloudburst.client")

RETRY_ASK = 1.0          # seconds before a target whose lease was refused is asked for again
MAX_QUEUED = 10_000      # calls waiting in a client's own queue for its leases' slots
MAX_SPREAD = 8           # leases one client holds of one target (one per worker)


class LeaseOwner(Protocol):
    """What the direct path needs from its client."""

    response_address: str

    def resend_call(self, call: pb.Call) -> str:
        """Send a call through the scheduler (it did not run direct); its scheduler."""

    def ask_lease(self, request: pb.LeaseRequest, to: Optional[str] = None) -> str:
        """Send a `lease_worker` request (to scheduler `to`, or the current one)."""

    def deliver(self, result: pb.CallResult) -> None: ...

    def read_arrived(self) -> None:
        """Hand out the answers that have arrived (`on_result`, `on_lease`), without
        waiting; nothing if another thread is reading them."""

    def flush_by(self, deadline: float) -> None:
        """Have `flush()` called at `deadline` (`time.monotonic()`) or soon after, even if
        the caller makes no other call and waits for nothing."""


class DirectPath:
    """A client's worker leases and direct calls; see the module contract."""

    def __init__(self, owner: LeaseOwner, context: zmq.Context, credentials: Any) -> None:
        self._owner = owner
        self._routes = WorkerRoutes(context, credentials, self._unanswered, owner.flush_by)
        self.links = self._routes.links       # TCP links (call_link.py), None without them
        self._lock = threading.Lock()
        self._held: Dict[Key, List[Held]] = {}              # target -> its live leases
        self._asked: Dict[Key, float] = {}      # target -> when a lease was asked/refused
        # request id -> (target, the call, when sent, its worker: "" while queued here)
        self._calls: Dict[str, Tuple[Key, pb.Call, float, str]] = {}
        self._queued: Dict[Key, Deque[pb.Call]] = {}           # waiting for a slot here
        self._queued_count = 0
        self._resend: List[pb.Call] = []
        self._fail: List[pb.CallResult] = []
        self._ask: List[Tuple[pb.LeaseRequest, Optional[str]]] = []   # and to which scheduler
        self._gone: List[Held] = []                         # released: usage to report
        # until then no lease lapses or is due for renewal: `send` and `flush` skip the
        # sweep over the leases (0: sweep; any lease news resets it)
        self._quiet_until = 0.0
        self._times = CallTimes()          # each target's usual direct-call time
        self._read_at = 0.0                # when `send` last had the answers read
        # calls wait in the queue for want of a free slot: `send` reads answers sooner
        # (`cloudburst/pacing.py`); cleared when the queue empties
        self._starved = False
        self._starved_slots = 0            # the slots of the full lease they wait for
        # when the queued calls must go at the latest (CORK_SECONDS after the first of them
        # was held for company); 0: at the next flush (they wait for a slot, not company)
        self._send_at = 0.0
        # a burst keeps hundreds of calls queued, so every flush would look for slots in
        # vain: the queue is looked at again only once something may have freed one
        # (`_stale`: an answer, lease news, a call queued while a slot was free) or the
        # leases are due to be judged again (READ_EVERY after the last look)
        self._stale = True
        self._taken_at = float("-inf")
        # target -> (when, its leases, those not held up): a lease's verdict holds until
        # the next answer or lease news, at most READ_EVERY (patience is at least
        # stalls.FLOOR, so a verdict is never more than READ_EVERY late)
        self._judged: Dict[Key, Tuple[float, List[Held], List[Held]]] = {}

    # ---- sending ----
    @staticmethod
    def eligible(call: pb.Call, stored: Sequence[str], inputs: Sequence[Any],
                 references: Optional[Sequence[str]] = None) -> bool:
        # a call naming a KVS key (a Reference) goes where that key is cached, which only
        # the scheduler knows (its locality placement), not to whichever worker is leased
        # (`references`: those keys when the caller has them at hand, else read from `call`)
        return (call.consistency == pb.LWW and not call.output_key and not stored
                and not inputs and not call.HasField("actor")
                and not (call.HasField("retry") and call.retry.has_exceptions)
                and not (referenced_keys(call) if references is None else references))

    def _live(self, key: Key, now: float) -> List[Held]:
        """The target's leases still usable (lapsed ones are dropped, their usage kept)."""
        leases = self._held.get(key, [])
        if now < self._quiet_until:
            return leases
        live = [h for h in leases if until(h) > now]
        if len(live) != len(leases):
            self._gone.extend(h for h in leases if until(h) <= now)
            self._set_leases(key, live)
        return live

    def _usable(self, key: Key, leases: List[Held], now: float) -> List[Held]:
        """The leases whose worker is not held up by a long call (`cloudburst/stalls.py`);
        judged again after an answer or lease news, at least every READ_EVERY."""
        if len(leases) == 1 and not leases[0].in_flight:
            return leases             # (a serial caller's: nothing out, so not held up)
        judged = self._judged.get(key)
        if judged is not None and judged[1] is leases and now - judged[0] < READ_EVERY:
            return judged[2]
        patience = self._times.patience(key)
        usable = [h for h in leases
                  if not held_up(next(iter(h.in_flight.values()), None), patience, now)]
        self._judged[key] = (now, leases, usable)
        return usable

    def _changed(self) -> None:
        """An answer or lease news: slots may be free and verdicts may change (lock held)."""
        self._stale = True
        if self._judged:
            self._judged.clear()

    def _set_leases(self, key: Key, leases: List[Held]) -> None:
        self._changed()
        if leases:
            self._held[key] = leases
            return
        self._held.pop(key, None)
        queued = self._queued.pop(key, None)        # no lease left: the scheduler's path
        if queued:
            self._queued_count -= len(queued)
            for call in queued:
                self._calls.pop(call.request_id, None)
                self._resend.append(call)

    def _maybe_ask(self, key: Key, now: float, spread: bool) -> None:
        asked = self._asked.get(key)
        if asked is None or now - asked >= RETRY_ASK:
            self._asked[key] = now
            self._ask.append((pb.LeaseRequest(target=key[0], dag=key[1], spread=spread), None))

    def _admit(self, held: Held, call: pb.Call, key: Key, now: float) -> None:
        """`call` counts against `held` from now (lock held)."""
        call.lease_id = held.lease_id
        held.in_flight[call.request_id] = now
        self._calls[call.request_id] = (key, call, now, held.worker_id)
        if renewal_due(held, now):
            held.renewing = True
            self._ask.append((renewal(held), held.scheduler))

    def send(self, call: pb.Call) -> Optional[str]:
        now = time.monotonic()
        if now - self._read_at >= read_every(self._starved, self._starved_slots):
            # take the answers that arrived first. With calls out, a burst's calls then go
            # to the slots freed while it is still being sent (not when its caller starts
            # to wait), and a lease is judged held up on the answers it gave, not on
            # answers the client had not read yet. With none out, a revocation that came
            # since the last answer is seen before the call goes to a worker that now
            # runs another caller's call (`scheduler/worker_leases.py`, `placed`). At most
            # every READ_EVERY s after the last read or answer (a look costs ~5 us): the
            # slots freed meanwhile take the queued calls in one direct_batch, and a
            # caller that sends again at once after its answer pays nothing
            self._read_at = now
            self._owner.read_arrived()
        key = (call.dag or call.function, bool(call.dag))
        with self._lock:
            leases = self._live(key, now)
            if not leases:
                self._maybe_ask(key, now, spread=False)
                return None
            usable = self._usable(key, leases, now)
            if not usable:                        # every one's worker is held up: around it
                if len(leases) < MAX_SPREAD:
                    self._maybe_ask(key, now, spread=True)
                return None
            held = usable[0]                      # the one with the most free slots
            free = held.slots - len(held.in_flight)
            for h in usable:                       # (a loop: no key function per call)
                if h.slots - len(h.in_flight) > free:
                    held, free = h, h.slots - len(h.in_flight)
            full = free <= 0
            if full or held.in_flight or self._queued.get(key):
                # no free slot, or the worker has calls of ours to run first: queued, to go
                # with the others in one message (a lone call on an idle lease goes now)
                if self._queued_count >= MAX_QUEUED:
                    return None                   # the client's queue is full: the long way
                cork = not self._queued_count
                if cork:
                    self._send_at = now + CORK_SECONDS
                if not full:
                    self._stale = True            # a slot is free for it at the flush
                else:       # (`held` has the most free slots): no slot anywhere
                    self._starved = True          # the answers free them: read sooner
                self._queued.setdefault(key, deque()).append(call)
                self._queued_count += 1
                self._calls[call.request_id] = (key, call, now, "")
                if full:           # (`held` has the most free slots): every lease is full
                    self._starved_slots = min(h.slots for h in usable)
                    for h in usable:
                        self._grow(h, now)
                    if len(leases) < MAX_SPREAD:
                        self._maybe_ask(key, now, spread=True)
            else:
                cork = None
                self._admit(held, call, key, now)
        if cork is not None:
            if cork:
                self._owner.flush_by(self._send_at)
            return held.scheduler
        sent = self._routes.send(held, (call,))
        if not sent:                              # the worker is not reachable: the long way
            with self._lock:
                held.in_flight.pop(call.request_id, None)
                self._calls.pop(call.request_id, None)
                self._changed()
            call.ClearField("lease_id")
            return None
        return held.scheduler

    def _grow(self, held: Held, now: float) -> None:
        """Every slot of `held` is in use while calls queue: it is renewed early (at most
        every `held.grow_wait` s). A lease granted before its worker's window was known has the
        fewest slots; a renewal takes the window now, which is larger for short calls (the
        scheduler learns it from the worker's heartbeats, about every second)."""
        if not held.renewing and now - held.grown >= held.grow_wait:
            held.grown, held.renewing = now, True
            self._ask.append((renewal(held), held.scheduler))

    def drop_queued(self, rid: str) -> bool:
        """A cancelled call still in the client's queue leaves it (True: it never ran)."""
        with self._lock:
            entry = self._calls.get(rid)
            if entry is None or entry[3]:
                return False
            queue = self._queued.get(entry[0])
            if queue is None or entry[1] not in queue:
                return False
            queue.remove(entry[1])
            self._queued_count -= 1
            del self._calls[rid]
            return True

    # ---- what arrives (the client's answer lock is held: record only) ----
    def _find(self, key: Key, lease_id: str) -> Optional[Held]:
        for h in self._held.get(key, ()):      # (a loop: once per answer, no generator)
            if h.lease_id == lease_id:
                return h
        return None

    def _drop(self, key: Key, held: Held) -> None:
        self._set_leases(key, [h for h in self._held.get(key, []) if h is not held])

    def on_lease(self, m: pb.WorkerLease) -> None:
        key = (m.target, m.dag)
        now = time.monotonic()
        with self._lock:
            self._quiet_until = 0.0
            self._changed()
            held = self._find(key, m.lease_id)
            if m.status != pb.OK:                 # refused: the scheduler's path meanwhile
                self._asked[key] = now
                log.info("no worker lease for %s: %s", m.target, m.reason)
                return
            if m.revoked:
                if held is None:
                    return
                self._gone.append(held)
                if m.worker_died:
                    self._lost(held, m.reason)
                self._drop(key, held)
                return
            if held is not None:                  # renewed
                held.expires, held.renewing = now + m.ttl, False
                held.grow_wait = next_grow_wait(held.grow_wait, m.slots > held.slots)
                held.slots = max(1, m.slots)
                return
            leases = self._held.get(key, [])
            same = next((h for h in leases if h.worker_id == m.worker_id), None)
            fresh = Held.granted(m, now)
            if same is not None:                  # another lease on that worker: keep one
                self._gone.append(same)
                fresh.in_flight = same.in_flight
                leases = [h for h in leases if h is not same]
            if len(leases) >= MAX_SPREAD:         # bounded: give the new one back
                self._gone.append(fresh)
                return
            self._held[key] = leases + [fresh]
            self._asked.pop(key, None)            # a spread lease may be asked for again

    def _lost(self, held: Held, reason: str) -> None:
        for rid in sorted(held.in_flight):
            entry = self._calls.pop(rid, None)
            if entry is None:
                continue
            failed = after_death(entry[1], held, reason)
            if failed is None:
                self._resend.append(entry[1])
            else:
                self._fail.append(failed)
        held.in_flight.clear()

    def on_result(self, result: pb.CallResult) -> Optional[pb.CallResult]:
        rid = result.request_id.split("#", 1)[0]
        with self._lock:
            entry = self._calls.get(rid)
            if entry is None or not entry[3]:     # not a direct call in flight
                return result
            del self._calls[rid]
            key, call, sent_at, _ = entry
            now = self._read_at = time.monotonic()    # answers were read just now
            held = self._find(key, call.lease_id)
            if held is not None:
                held.in_flight.pop(rid, None)
                self._changed()
            if result.status == pb.LEASE_REFUSED:     # it did not run: the long way
                log.info("%s", result.message)
                if held is not None and "no lease of that id" not in result.message:
                    self._gone.append(held)           # revoked or expired there
                    self._drop(key, held)
                call.ClearField("lease_id")
                self._resend.append(call)
                return None
            took = now - sent_at
            if result.status == pb.OK:
                self._times.observe(key, took)
            if held is not None:
                record(held, result.status == pb.OK, took)
        return result

    def _unanswered(self, ids: List[str], why: str, may_have_run: bool) -> None:
        """Calls a broken call link leaves without an answer (`call_link.py`). Ones the
        worker never read (it closed the link for a fault, and said how far it read) go
        through the scheduler, as refused ones do: none ran. Ones whose results may have
        been lost with the link (`may_have_run`) fail at once with CALL_LINK_BROKEN rather
        than at their deadline; a retry could run one twice."""
        with self._lock:
            for rid in ids:
                entry = self._calls.get(rid)
                if entry is None or not entry[3]:      # answered already, or not in flight
                    continue
                del self._calls[rid]
                call = entry[1]
                held = self._find(entry[0], call.lease_id)
                if held is not None:
                    held.in_flight.pop(rid, None)
                log.info("direct call %s: %s", rid, why)
                if may_have_run:
                    self._fail.append(pb.CallResult(
                        request_id=rid, status=pb.CALL_LINK_BROKEN, attempts=1,
                        message=f"{call.dag or call.function}: {why}"))
                    continue
                call.ClearField("lease_id")
                self._resend.append(call)
            self._changed()    # (the reader that found this flushes the path next)

    def held(self) -> List[Dict[str, Any]]:
        """The leases held now: target, whether a DAG, worker id, slots, calls in flight."""
        with self._lock:
            return [{"target": key[0], "dag": key[1], "worker_id": h.worker_id,
                     "slots": h.slots, "in_flight": len(h.in_flight)}
                    for key, leases in sorted(self._held.items()) for h in leases]

    def lease_of(self, rid: str) -> Optional[Tuple[str, str]]:
        with self._lock:
            entry = self._calls.get(rid)
            return None if entry is None or not entry[3] else (entry[1].lease_id, entry[3])

    # ---- carrying it out (no lock held) ----
    def _take_queued(self, now: float) -> List[Tuple[Held, List[pb.Call]]]:
        """Queued calls that now have a slot, per lease (lock held)."""
        self._stale, self._taken_at = False, now
        out = []
        smallest = 0                   # slots of the smallest lease left full (for reads)
        for key in list(self._queued):
            queue = self._queued[key]
            live = self._live(key, now)
            usable = self._usable(key, live, now)
            if live and not usable:               # all held up: the scheduler's path
                self._queued_count -= len(queue)
                for call in queue:
                    self._calls.pop(call.request_id, None)
                    self._resend.append(call)
                queue.clear()
                if len(live) < MAX_SPREAD:
                    self._maybe_ask(key, now, spread=True)
            for held in usable:
                # every free slot is filled, in batches of at most half the lease's slots
                # (`cloudburst/pacing.py`: the worker runs one while the next comes)
                cap = batch_cap(held.slots)
                while queue and len(held.in_flight) < held.slots:
                    batch = []
                    while queue and len(held.in_flight) < held.slots and len(batch) < cap:
                        call = queue.popleft()
                        self._queued_count -= 1
                        self._admit(held, call, key, now)
                        batch.append(call)
                    out.append((held, batch))
                if queue:                          # calls still wait for its slots
                    self._grow(held, now)
                    smallest = min(smallest or held.slots, held.slots)
            if not queue:
                self._queued.pop(key, None)
        self._starved = self._queued_count > 0    # what is left waits for a slot
        self._starved_slots = smallest
        return out

    def advance_links(self) -> Optional[float]:
        """While a call link opens, have the owner read the answers (its connect and
        handshake advance there); when to do so again (None: no link is opening)."""
        return self._routes.advance(self._owner.read_arrived)

    def flush(self, force: bool = False) -> Optional[float]:
        """Carry out what was recorded; queued calls go if they are due (`force`: now, as
        when their caller is about to wait). Returns when the queued calls are due if
        that is later (`flush_by` was told), else None."""
        now = time.monotonic()
        if now < self._quiet_until and not (self._resend or self._fail or self._ask
                                            or self._gone) and \
                (not self._queued_count or not self._stale and now - self._taken_at < READ_EVERY):
            # the common cases, nothing to do, seen without the lock (no call queued, or a
            # burst's queue looked at just now with no slot freed since): what another thread
            # records meanwhile is its own flush's (or the lease thread's) to carry out
            return self._send_at if self._queued_count and self._send_at > now else None
        with self._lock:
            due = bool(self._queued_count) and (force or now >= self._send_at
                                                or self._queued_count >= CORK_CALLS)
            if due and not self._stale and now - self._taken_at < READ_EVERY:
                due = False          # they were looked at just now, and no slot has freed
            if now < self._quiet_until and not (due or self._resend or self._fail
                                                or self._ask or self._gone):
                # the common case: nothing to do
                return self._send_at if self._queued_count and self._send_at > now else None
            if now >= self._quiet_until:
                # (before it, no lease lapses or is due for renewal: nothing to sweep)
                self._quiet_until = 0.0
                for key in list(self._held):           # lapsed: given back with their usage
                    self._live(key, now)
                for leases in self._held.values():     # in use: kept while calls run under it
                    for held in leases:
                        if held.in_flight and renewal_due(held, now):
                            held.renewing = True
                            self._ask.append((renewal(held), held.scheduler))
                self._quiet_until = min((next_sweep(h) for leases in self._held.values()
                                         for h in leases), default=0.0)
            batches = self._take_queued(now) if due else []
            if self._queued_count and due:
                self._send_at = 0.0               # left for want of a slot: not corked
            later = self._send_at if self._queued_count and self._send_at > now else None
            if not (self._resend or self._fail or self._ask or self._gone or batches):
                return later
            resend, self._resend = self._resend, []
            fail, self._fail = self._fail, []
            ask, self._ask = self._ask, []
            gone, self._gone = self._gone, []
            for held in gone:
                ask.append((release(held), held.scheduler))
            # a worker no lease names any more keeps no link of this client (its slots are
            # bounded); half-closed, so results on the way are still read
            unlinked = {h.worker_address for h in gone if h.link_address} - \
                {h.worker_address for leases in self._held.values() for h in leases}
        if unlinked:
            self._routes.drop(unlinked)
        for held, calls in batches:
            if not self._routes.send(held, calls):                           # the worker is not reachable: the long way
                with self._lock:
                    for call in calls:
                        held.in_flight.pop(call.request_id, None)
                        self._calls.pop(call.request_id, None)
                        call.ClearField("lease_id")
                    self._changed()
                resend.extend(calls)
        for result in fail:
            self._owner.deliver(result)
        for call in resend:
            try:
                self._owner.resend_call(call)
            except CloudburstError as e:
                self._owner.deliver(pb.CallResult(
                    request_id=call.request_id, status=pb.EXECUTION_ERROR,
                    message=f"{call.dag or call.function}: its direct call could not run "
                            f"and no scheduler took it again: {e}"))
        for req, to in ask:
            req.response_address = self._owner.response_address
            try:
                self._owner.ask_lease(req, to)
            except CloudburstError as e:      # no lease: the scheduler's path serves
                log.debug("lease request not sent: %s", e)
        return later

    def release_all(self) -> None:
        """Give every lease back (at the next `flush`): the registry changed."""
        with self._lock:
            for key in list(self._held):
                self._gone.extend(self._held[key])
                self._set_leases(key, [])

    def close(self) -> None:
        """Give every lease back now, and close the path's sockets and links."""
        self.release_all()
        try:
            self.flush()
        finally:
            self._routes.close()

