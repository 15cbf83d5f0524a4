"""The client's channel to its schedulers: sending with failover, request/answer slots,
registry requests, and telling why a call stalled or lost its scheduler.

Contract (the "Failover" and threading parts of `cloudburst/client.py`'s contract are
implemented here): `SchedulerChannel` is a mixin of `Client`, which sets up the state it
works on (`addresses`, `_current`, `_connections`, `_pull`, `_send_lock`, `_cond` (its lock:
`_mutex`), `_slots`, `_reading`, `_waiting` (threads waiting on `_cond`), `_prefix`, `_seq`,
`_leases`, `_security`, `timeout`, `failover_timeout`).
- `_send` puts a message on the current scheduler's connection if it is up (ZeroMQ
  `IMMEDIATE`), else on the next one that is, which becomes current; `SchedulerUnavailable`
  when none took it within `failover_timeout`, `AuthenticationRequired` /
  `AuthenticationError` when the schedulers refused the handshake.
- `_ask` sends a registry request and waits for its `pb.Reply`; unanswered within
  `failover_timeout`, the same request id goes to the next scheduler (the first answer
  wins); it raises `Timeout` naming the schedulers asked, or the reply's typed error.
- Every request has a slot (`_new_slot`); whichever thread waits (`_wait`) reads the answer
  socket and hands each answer to its slot (`_store`); an answer for an unknown request is
  dropped, as is a frame a function key may not send (anything but a `result`).
- A call's `result` that says it never started there (`never_started`: SCHEDULER_STOPPING
  from a stopping scheduler, or NO_RESOURCES for a first attempt) is not handed to its slot: after the lock is released the
  call (kept by `_keep_call` while in flight) is sent again, same request id, to a scheduler
  that has not refused it, which becomes current; `_sent_to` tells its `Future` where it
  went. With no such scheduler left, the refusal is handed to the slot (the call's error).
- `_scheduler_lost` says why a call's scheduler is gone (its connection dropped, or it does
  not answer a `where` within `failover_timeout`), None while it is there; `_where` names
  the stage a call stalled at; `_cancel` asks a scheduler to stop a call (no answer awaited).
- Direct calls (`cloudburst/direct.py`, when the client has `_direct`): `worker_lease`
  messages (from the cluster only) and results go through the direct path first, which
  may keep a result for itself (a refused direct call, sent again through the scheduler);
  what it recorded is carried out once the answer lock is released. A direct call's cancel
  names its lease; its `where` names its worker. A registry change gives the leases back (a
  lease runs the versions of the functions it was granted for).
- The answers that come on the direct path's call links are read where the answer socket
  is, by the same thread, and handled as the socket's (`_drain`); a link carries only
  results. `_drain` is the only reader of the socket: it tells the links' wait when its
  own last look at the socket's events found no message (the socket's edge-triggered
  ZMQ_FD then signals any later one), and the wait skips its look; after anything else
  (a message read, an error) the wait looks first.
- `ClientLink(channel)` is the one door a `Future` (`futures.CallOwner`) and the direct path
  (`direct.LeaseOwner`) have to their client.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Dict, List, Optional, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb

from runtime.auth import FUNCTION, role_of
from runtime.framing import more, parse, recv_frame, send
from .call_link import answers_of
from .errors import (AuthenticationError, AuthenticationRequired, CloudburstError, Timeout,
                     error_from_status)
from .futures import SchedulerUnavailable

__all__ = ["SchedulerChannel", "finished_notes", "never_started"]

_ANSWERS = {"reply": pb.Reply, "accepted": pb.Accepted, "result": pb.CallResult,
            "worker_lease": pb.WorkerLease}
_REGISTRY_CHANGES = frozenset({"register_fn", "register_dag", "delete_dag", "delete_fn"})
MAX_FINISHED = 4096       # finished calls kept to report with the next call (bounded)
_PREFER_CURRENT = 0.5     # seconds a send waits for the current scheduler before the others
log = logging.getLogger("cloudburst.client")    # the client's logger: same records as before


def finished_notes() -> "deque[str]":
    """An empty record of calls whose results were taken, to report with the next call
    through a scheduler: the newest `MAX_FINISHED`, the oldest dropped in O(1) (a serial
    caller of direct calls notes one per call and reports them only when a call goes
    through a scheduler, so the record stays full)."""
    return deque(maxlen=MAX_FINISHED)


def never_started(result: Any) -> bool:
    """Whether a call's `result` says the call never started at the scheduler that sent it,
    so that another scheduler may take it under the same request id: a stopping scheduler's
    refusal, or a first attempt refused for want of resources (a scheduler that has not
    heard its executors yet, as one made again in a rolling upgrade, or whose queue is
    full). A retried attempt's answer ("<id>#r<n>") never qualifies: an earlier attempt ran."""
    if result.status == pb.SCHEDULER_STOPPING:
        return True
    return result.status == pb.NO_RESOURCES and "#" not in result.request_id


class _Slot:
    __slots__ = ("answer",)

    def __init__(self) -> None:
        self.answer: Any = None          # pb.Reply, pb.Accepted or pb.CallResult


class ClientLink:
    """`futures.CallOwner` and `direct.LeaseOwner` over a client's channel (module contract)."""

    def __init__(self, channel: "SchedulerChannel") -> None:
        self._channel = channel

    # ---- CallOwner (cloudburst/futures.py) ----
    @property
    def failover_timeout(self) -> float:
        return self._channel.failover_timeout

    def current_scheduler(self) -> str:
        return self._channel.address

    def peek(self, rid: str) -> Any:
        return self._channel._peek(rid)

    def wait_taken(self, rid: str, timeout: float) -> Optional[Tuple[Any, Optional[str]]]:
        return self._channel._wait_taken(rid, timeout)

    def scheduler_lost(self, scheduler: str, since: float, rid: str) -> Optional[str]:
        return self._channel._scheduler_lost(scheduler, since, rid)

    def sent_to(self, rid: str) -> Optional[Tuple[str, float]]:
        return self._channel._sent_to(rid)

    def where(self, rid: str, what: str, scheduler: str) -> str:
        return self._channel._where(rid, what, scheduler)

    def cancel(self, rid: str, scheduler: str) -> None:
        self._channel._cancel(rid, scheduler)

    def forget(self, rid: str) -> None:
        self._channel._forget(rid)

    def abandon(self, rid: str, fire_and_forget: bool) -> None:
        self._channel._abandon(rid, fire_and_forget)

    def collected(self, rid: str, result: Any) -> Optional[str]:
        return self._channel._collected(rid, result)

    def collect_arrived(self, rids: Any) -> Dict[str, Tuple[Any, Optional[str]]]:
        return self._channel._collect_arrived(rids)

    def release_values(self, keys: List[str]) -> None:
        self._channel._courier.release(keys)

    def take_value(self, key: str, what: str) -> bytes:
        return self._channel._courier.take(key, what)

    # ---- LeaseOwner (cloudburst/direct.py) ----
    @property
    def response_address(self) -> str:
        return self._channel.response_address

    def resend_call(self, call: pb.Call) -> str:
        client = self._channel
        return client._send("call", call)

    def ask_lease(self, request: pb.LeaseRequest, to: Optional[str] = None) -> str:
        client = self._channel
        return client._send("lease_worker", request, to=to)

    def flush_by(self, deadline: float) -> None:
        self._channel._leases.flush_by(deadline)

    def deliver(self, result: pb.CallResult) -> None:
        with self._channel._cond:
            self._channel._store([("result", result)])
            self._channel._cond.notify_all()

    def read_arrived(self) -> None:
        self._channel._read_arrived()


class SchedulerChannel:
    """The request/answer plumbing `Client` inherits; see the module contract."""

    _direct: Any = None        # cloudburst.direct.DirectPath when direct calls are on
    _quiet = False             # `_drain`: its last look at the answer socket found nothing

    def _new_slot(self) -> str:
        with self._mutex:
            self._seq += 1
            rid = f"{self._prefix}-{self._seq}"
            self._slots[rid] = _Slot()
        return rid

    def _send(self, kind: str, message: Any, to: Optional[str] = None,
              patience: Optional[float] = None) -> str:
        """Send to scheduler `to` only, or by the failover rule (module contract); returns the
        address it went to. `SchedulerUnavailable` when no scheduler took it within
        `patience` seconds (default `failover_timeout`)."""
        if self.closed:
            raise CloudburstError("this Client is closed")
        with self._send_lock:
            if to is not None:
                order = [to]
            else:
                order = self.addresses[self._current:] + self.addresses[:self._current]
            start = time.monotonic()
            deadline = start + (self.failover_timeout if patience is None else patience)
            while True:
                # the current scheduler first, alone for a moment (it may be reconnecting)
                alone = len(order) > 1 and time.monotonic() < start + _PREFER_CURRENT
                for a in order[:1] if alone else order:
                    push = self._connections.socket(a)
                    if push.poll(0, zmq.POLLOUT) and send(push, kind, message):
                        if to is None and a != self.address:
                            log.warning("scheduler %s is not reachable; using %s",
                                        self.address, a)
                            self._current = self.addresses.index(a)
                        return a
                left = deadline - time.monotonic()
                refused = self._connections.refusals(order[:1] if alone else order)
                if refused and (left <= 0 or len(refused) == len(order)):
                    # a client without keys told so gets AuthenticationRequired
                    required = all(r for r, _ in refused.values())
                    raise (AuthenticationRequired if required else AuthenticationError)(
                        f"no {kind!r} message was sent: " + "; ".join(
                            f"the scheduler at {a} {why}" for a, (_, why) in refused.items()))
                if left <= 0:
                    raise SchedulerUnavailable(
                        f"no scheduler accepted a {kind!r} message within "
                        f"{self.failover_timeout:g} s (tried {', '.join(order)})")
                poller = zmq.Poller()
                for a in order[:1] if alone else order:
                    poller.register(self._connections.socket(a), zmq.POLLOUT)
                poller.poll(max(1, int(min(left, 0.05) * 1000)))

    def _ask(self, kind: str, message: Any, what: str, timeout: Optional[float] = None) -> pb.Reply:
        if kind in _REGISTRY_CHANGES and self._direct is not None:
            self._direct.release_all()      # leases run the versions they were granted for
        rid = self._new_slot()
        message.request_id = rid
        message.response_address = self.response_address
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        asked: List[str] = []
        try:
            while True:
                asked.append(self._send(kind, message))
                left = deadline - time.monotonic()
                # several schedulers: the next one is asked too after failover_timeout
                slot = self._wait(rid, min(left, self.failover_timeout)
                                  if len(self.addresses) > 1 else left)
                if slot is not None or time.monotonic() >= deadline:
                    break
                log.warning("scheduler %s did not answer %r within %g s; asking the next",
                            asked[-1], kind, self.failover_timeout)
                self._current = (self.addresses.index(asked[-1]) + 1) % len(self.addresses)
        finally:
            self._forget(rid)
        if slot is None:
            who = ", ".join(dict.fromkeys(asked))
            if self._security is not None and self._security.authenticator.refused:
                raise AuthenticationError(
                    f"the scheduler{'s' if len(set(asked)) > 1 else ''} at {who} did not "
                    f"answer {what!r} within {wait:g} s, and this client refused "
                    f"{self._security.authenticator.refused} connection(s) to its answer "
                    f"socket: is {self.auth.key_dir}/cluster.key the cluster's key?")
            raise Timeout(f"the scheduler{'s' if len(set(asked)) > 1 else ''} at {who} to "
                          f"{what}", wait)
        reply: pb.Reply = slot.answer
        if reply.status != pb.OK:
            raise error_from_status(reply.status, reply.message)
        return reply

    def _cancel(self, rid: str, scheduler: Optional[str] = None) -> None:
        """Ask the scheduler to stop call `rid` wherever it runs (no answer is awaited)."""
        if self._direct is not None and self._direct.drop_queued(rid):
            return      # it waited in this client's own queue for a leased slot: never ran
        lease = self._direct.lease_of(rid) if self._direct is not None else None
        try:
            self._send("cancel", pb.NameRequest(name=rid, lease_id=lease[0] if lease else ""),
                       to=scheduler)
        except (SchedulerUnavailable, AuthenticationError):
            pass    # nothing runs for a scheduler that is gone but what it already placed

    def _dropped_since(self, scheduler: str, since: float) -> bool:
        """True if the connection to `scheduler` dropped at or after `since`."""
        with self._send_lock:
            return self._connections.dropped_since(scheduler, since)

    def _scheduler_lost(self, scheduler: str, since: float, rid: str) -> Optional[str]:
        """Why call `rid`, sent to `scheduler` at `since`, has lost its scheduler; None if
        the scheduler is still there (it answers a `where` within `failover_timeout`)."""
        why = None
        if self._dropped_since(scheduler, since):
            why = f"the scheduler at {scheduler} stopped (its connection dropped)"
        else:
            qid = self._new_slot()
            try:
                self._send("where", pb.NameRequest(request_id=qid, name=rid,
                                                   response_address=self.response_address),
                           to=scheduler)
                if self._wait(qid, self.failover_timeout) is None:
                    why = (f"the scheduler at {scheduler} did not answer within "
                           f"{self.failover_timeout:g} s")
            except SchedulerUnavailable:
                why = f"the scheduler at {scheduler} is not reachable"
            except AuthenticationError as e:
                why = f"the scheduler at {scheduler} refused this client ({e})"
            finally:
                self._forget(qid)
        if why is not None and self.address == scheduler and len(self.addresses) > 1:
            self._current = (self.addresses.index(scheduler) + 1) % len(self.addresses)
        return why

    def _forget(self, rid: str, finished: bool = False) -> Optional[str]:
        """The client keeps nothing more for `rid`; `finished`: its result was taken, to be
        reported with the next call (bounded: the worker's own `done` reports it anyway).
        Returns the scheduler a kept call was last sent to."""
        with self._mutex:
            self._slots.pop(rid, None)
            kept = self._kept_calls.pop(rid, None)
            if finished:
                self._note_finished((rid,))
        self._leases.release(rid)
        return kept[2] if kept is not None else None

    def _note_finished(self, rids: Any) -> None:
        """Calls whose results were taken, reported with the next call (bounded: the
        worker's own `done` reports them anyway). Called with the mutex held."""
        self._finished.extend(rids)          # (`finished_notes`: bounded)

    def _keep_call(self, rid: str, call: Any, scheduler: str, sent_at: float) -> None:
        """Keep call `rid`, sent to `scheduler`, until it is over: a stopping scheduler may
        refuse it and it then goes to another one."""
        with self._mutex:
            kept = self._kept_calls.get(rid)
            if rid in self._slots and (kept is None or not kept[1]):
                # (an entry already resent elsewhere keeps where it went since)
                self._kept_calls[rid] = (call, (), scheduler, sent_at)

    def _sent_to(self, rid: str) -> Optional[Tuple[str, float]]:
        """(scheduler, time sent) of call `rid`'s latest send, if it is kept."""
        with self._cond:
            kept = self._kept_calls.get(rid)
        return (kept[2], kept[3]) if kept is not None else None

    def _resend_refused(self) -> None:
        """Send the calls stopping schedulers refused to schedulers that have not (module
        contract); called without the lock."""
        while True:
            with self._cond:
                if not self._refused:
                    return
                rid, answer = self._refused.pop(0)
                kept = self._kept_calls.get(rid)
                slot = self._slots.get(rid)
                if kept is None or slot is None:
                    continue
                call, refused_by, sent_to, _ = kept
                refused_by = refused_by + (sent_to,)
                left = [a for a in self.addresses if a not in refused_by]
                if not left:
                    slot.answer = answer            # nowhere else to go: the refusal stands
                    self._cond.notify_all()
                    continue
            if self.address in refused_by:
                self._current = self.addresses.index(left[0])
            log.info("%s; sending call %s to %s", answer.message, rid, left[0])
            try:
                to = self._send("call", call)
            except (SchedulerUnavailable, AuthenticationError) as e:
                with self._cond:
                    if slot.answer is None:
                        slot.answer = pb.CallResult(request_id=rid, status=answer.status,
                                                    message=f"{answer.message}; {e}")
                        self._cond.notify_all()
                continue
            with self._cond:
                if rid in self._kept_calls:
                    self._kept_calls[rid] = (call, refused_by, to, time.monotonic())
            self._leases.moved(rid, to)

    def _collected(self, rid: str, result: Any) -> Optional[str]:
        """A Future took its result: forget the call, report it with the next call, note
        what it read in the session; returns where it was last sent (a kept call)."""
        sent_to = self._forget(rid, finished=True)
        self._observed(result)
        return sent_to

    def _collect_arrived(self, rids: List[str]) -> Dict[str, Tuple[Any, Optional[str]]]:
        """`_collected` for each of `rids` whose answer has arrived, in one step: the
        answers waiting are read first (and calls held for company sent: their callers
        are about to wait)."""
        if self._direct is not None:
            self._direct.flush(force=True)
        self._read_arrived()
        out: Dict[str, Tuple[Any, Optional[str]]] = {}
        with self._mutex:
            for rid in rids:
                slot = self._slots.get(rid)
                if slot is None or slot.answer is None:
                    continue
                out[rid] = (slot.answer, self._taken(rid))
            self._note_finished(out)
        self._leases.release_all(out)
        for result, _ in out.values():
            self._observed(result)
        return out

    def _abandon(self, rid: str, fire_and_forget: bool) -> None:
        """A `Future` was collected: forget its slot; a call still in flight (not
        fire-and-forget) is cancelled by the lease thread (a finalizer must not send)."""
        with self._cond:
            slot = self._slots.pop(rid, None)
        if slot is not None and slot.answer is None and not fire_and_forget:
            self._leases.abandon(rid)
        else:
            self._leases.release(rid)

    def _peek(self, rid: str) -> Any:
        with self._cond:
            slot = self._slots.get(rid)
            if slot is not None and slot.answer is not None:
                return slot.answer
        self._read_arrived()                    # opportunistically read what has arrived
        with self._cond:
            slot = self._slots.get(rid)
            return slot.answer if slot is not None else None

    def _read_arrived(self) -> None:
        """Hand out what has arrived on the answer socket, unless a thread is reading it."""
        if self._cond.acquire(blocking=False):
            try:
                if not self._reading:
                    self._store(self._drain(0))
            finally:
                self._cond.release()
            if self._direct is not None:
                self._direct.flush()
            if self._refused:
                self._resend_refused()

    def _where(self, rid: str, what: str, scheduler: Optional[str] = None) -> str:
        """Name the stage a call stalled at: ask the scheduler where it placed the call."""
        scheduler = scheduler or self.address
        lease = self._direct.lease_of(rid) if self._direct is not None else None
        if lease is not None:
            return (f"the result of {what} (sent directly to executor worker {lease[1]} under "
                    f"a worker lease)")
        qid = self._new_slot()
        try:
            self._send("where", pb.NameRequest(request_id=qid, response_address=self.response_address,
                                               name=rid), to=scheduler)
            slot = self._wait(qid, min(1.0, self.timeout))
        except (SchedulerUnavailable, AuthenticationError):
            slot = None
        finally:
            self._forget(qid)
        if slot is None:
            return f"the result of {what}; the scheduler at {scheduler} does not answer either"
        placement = slot.answer.placement
        if slot.answer.queued_position:
            return (f"the result of {what}; it has not started: it waits in the queue of the "
                    f"scheduler at {scheduler} for a free executor worker (place "
                    f"{slot.answer.queued_position}, for {slot.answer.queued_seconds:.1f} s)")
        if not placement:
            return (f"the result of {what}; the scheduler at {scheduler} has no record of it "
                    "in flight (not received, or finished and its result was lost)")
        where = ", ".join(f"{f} on {w}" for f, w in sorted(placement.items()))
        return f"the result of {what} (placed: {where})"

    def _wait(self, rid: str, timeout: float) -> Optional[_Slot]:
        """Wait for request `rid`'s answer; None when `timeout` passes first."""
        got = self._await(rid, timeout, False)
        return None if got is None else got[0]

    def _wait_taken(self, rid: str, timeout: float) -> Optional[Tuple[Any, Optional[str]]]:
        """Wait for call `rid`'s answer and take it as `_collected` does, in the same hold
        of the lock that found it (a serial caller's answer, found and taken in one step):
        (the answer, where the call was last sent if it was kept); None when `timeout`
        passes first."""
        got = self._await(rid, timeout, True)
        if got is None:
            return None
        self._leases.release(rid)
        self._observed(got[0].answer)
        return got[0].answer, got[1]

    def _taken(self, rid: str) -> Optional[str]:
        """Call `rid`'s answer is taken: its slot and kept call are forgotten (the lock held;
        the caller notes it finished). Returns where the call was last sent, if kept."""
        self._slots.pop(rid, None)      # (gone if another thread forgot it meanwhile)
        kept = self._kept_calls.pop(rid, None)
        return kept[2] if kept is not None else None

    def _await(self, rid: str, timeout: float, take: bool
               ) -> Optional[Tuple[_Slot, Optional[str]]]:
        """`_wait`'s loop: the answered slot, and with `take` the answer taken (`_taken`,
        noted finished) and where the call was last sent; None when `timeout` passes."""
        deadline = time.monotonic() + timeout
        if self._direct is not None:      # calls held for company go before their caller waits
            self._direct.flush(force=True)
        while True:
            # (`_mutex` is `_cond`'s lock: taken directly, the common case costs less)
            with self._mutex:
                slot = self._slots.get(rid)
                if slot is None:
                    raise CloudburstError(f"request {rid} is unknown (already collected?)")
                if slot.answer is not None:
                    if not take:
                        return slot, None
                    moved = self._taken(rid)
                    self._note_finished((rid,))
                    return slot, moved
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                if self._reading:
                    self._waiting += 1
                    try:
                        self._cond.wait(min(remaining, 0.05))
                    finally:
                        self._waiting -= 1
                    continue
                self._reading = True
            messages: List[Tuple[str, Any]] = []
            try:
                messages = self._drain(min(remaining, 0.05))
            finally:
                with self._mutex:
                    self._reading = False
                    self._store(messages)
                    if self._waiting:         # (a lone caller wakes nobody)
                        self._cond.notify_all()
                    answered = slot.answer is not None
                    moved = None
                    if answered and take:
                        moved = self._taken(rid)
                        self._note_finished((rid,))
            if self._direct is not None:
                self._direct.flush()
            if self._refused:
                self._resend_refused()
            if answered:                      # its own answer came with what it read
                return slot, moved

    def _drain(self, timeout: float) -> List[Tuple[str, Any]]:
        """Read what arrives within `timeout` (then everything queued), without the lock."""
        out: List[Tuple[str, Any]] = []
        if self.closed:
            return out
        # `_quiet`: the last look at the socket's events (ours: only `_drain`, one reader at
        # a time, reads the socket) found no message, so one coming since signals its ZMQ_FD
        # and the call links' wait need not look first (a look is two system calls). Any
        # other way out of here (a message read, an error) leaves it False: look first.
        quiet, self._quiet = self._quiet, False
        links = self._direct.links if self._direct is not None else None
        if links is not None and links.active():   # the answers on call links too
            waiting, out = links.wait(self._pull, timeout, quiet)
            if not waiting:
                self._quiet = True                  # (its last look found nothing)
                return out
        # without waiting, one look at the socket's events, cheaper than a poll (a client
        # looks before its direct calls: `cloudburst/direct.py`)
        elif not (more(self._pull) if timeout <= 0 else self._pull.poll(int(timeout * 1000))):
            return out
        while True:
            frame = recv_frame(self._pull, copy=False)   # copy=False: the sender's role
            try:
                kind, payload = parse(frame.bytes)
                if kind in ("result", "direct_results") or role_of(frame) == FUNCTION:
                    out.extend(answers_of(frame.bytes))   # a worker's: results only
                else:
                    out.append((kind, _ANSWERS[kind].FromString(payload)))
            except Exception as e:  # malformed or not for a client: dropped, and said
                log.warning("dropped a message a client cannot take (%d bytes): %s",
                            len(frame.bytes), e)
            if not more(self._pull):
                self._quiet = True
                return out

    def _store(self, messages: List[Tuple[str, Any]]) -> None:
        """Hand messages to their slots (caller holds the lock); unknown ids are dropped."""
        for kind, m in messages:
            if self._direct is not None:
                if kind == "worker_lease":
                    self._direct.on_lease(m)
                    continue
                if kind == "result":
                    m = self._direct.on_result(m)
                    if m is None:           # the direct path's own (sent again)
                        continue
            elif kind == "worker_lease":
                continue
            # a retried call's attempt answers as "<request id>#r<n>" (scheduler/retries.py)
            rid = m.request_id.split("#", 1)[0]
            slot = self._slots.get(rid)
            if slot is None:
                continue
            if kind == "result" and never_started(m) and rid in self._kept_calls:
                self._refused.append((rid, m))      # sent elsewhere once the lock is free
                continue
            if slot.answer is None:
                slot.answer = m
