"""Direct calls at the worker: calls a client sends straight to the worker under a worker
lease, admitted by the pure `executor/leased.py`, run as the scheduler's schedules are.

Contract (mixed into `executor.worker.Worker`):
- Direct calls come on a socket of their own (`direct_address`, reported in the worker's
  heartbeats), on a ZeroMQ context of its own whose authenticator admits the authorized
  clients' public keys (which the node hands the worker with its function key), bound for
  every role (audience "all"); it takes only `direct` messages and `direct_batch`es of
  them (at most `MAX_BATCH` calls, each admitted on its own as a `direct` call is). The worker's other sockets
  know no client key (`schedule_credentials` leaves them out) and refuse clients at the
  handshake, as before. A worker handed no client key (one a worker host runs, on
  Kubernetes) binds no direct socket and reports none, so no lease is granted on it.
  `_next_frame()` waits on both (and the call links, below: one `poll`,
  `executor/hot_wait.py`) while the worker holds a lease or runs a direct call: it
  returns the schedule socket's next frame, else handles the direct calls that arrived
  (None), so a grant that arrived with a call naming it is taken first. Without either
  it receives from the schedule socket alone, as a worker did before leases, and handles
  direct calls (to refuse them) between receives, within one receive timeout. A call that arrives before its lease's grant (the grant goes to the worker
  first, then to the client, but over another connection) is refused as unknown; `Client`
  then sends it through the scheduler.
- `worker_lease` (from the cluster: a scheduler) grants, renews or revokes a lease
  (`LeaseAdmission.told`); a grant carries the schedules of the target's sources, built by
  the scheduler. A revocation with `holder_gone` (the lease's client was killed or left)
  also cancels the calls admitted under it: those waiting here are dropped, and the one
  running is stopped through the control socket, which takes that revocation too.
- `direct` (a `Call` naming `lease_id`) runs only if `LeaseAdmission.admit` admits it:
  the lease is live, the sender's role is the lease's client, a slot is free. The call supplies only its id, its arguments
  per function, its answer address, deadline, time limit and session; everything else (the
  functions, versions, where results go between them) is the scheduler's schedule, so a
  client cannot make the worker run another function or send triggers elsewhere. When
  every function of the lease's schedules runs on this worker (a lease places its whole
  target on it), its calls run as the lease's plan says (`executor/chain_plan.py`, made
  once per grant; run by `executor/chain_run.py`): the functions one after another, each
  result straight to the functions that take it, with the schedules' own failure paths,
  no pending state, and the call's bookkeeping done once per call. A call
  that is not admitted gets a `result` with status LEASE_REFUSED naming the worker and why
  (it did not run); one that names functions outside the lease's target, passes `Future`s,
  asks for an `output_key` or causal consistency gets INVALID_ARGUMENTS (those take the
  scheduler's path; `Client` never sends them direct). So does a call whose id already ran
  on this worker (ids are used once; the worker remembers recent ones).
- The results of the direct calls the worker finds waiting (several `direct` messages, or
  a `direct_batch`) go back together, one `direct_results` message per client, once no
  more wait (`executor/result_batch.py` decides: results are held only across calls
  shorter than `RESULT_HOLD_SECONDS`, and for at most that long, and never across a call
  whose lease's previous call here took that long, or that is its lease's first here); a
  lone call's result goes as soon as the socket is found empty, as a `result` (one that
  came alone as the last frame read from the call links, as soon as it is made). They run as
  one run of calls for the worker's guard (`FunctionGuard.open_run`: its timers are armed
  once for the run while they fit each call, and cleared at its end). The run stays open
  from one wake-up to the next while direct calls keep coming (a client's serial calls
  share one arming too); it ends (`close_run`) when a wait for the next frame finds
  nothing within the receive timeout, before a frame from the schedule socket is handled
  (the scheduler's calls run alone), and when the worker has no lease.
- On the direct socket any other kind is dropped and logged.
- Call links (`executor/call_links.py`): a worker with a direct socket also listens for TCP
  links from clients (`call_link_address`, reported next to `direct_address`), polled with
  the same sockets; a frame on a link is handled exactly as one on the direct socket, with
  the role of the key the link admitted. The result of a call that came on a link (alone,
  in a `direct_results`, a DAG's sink's, a refusal or a failure) goes back on that link;
  when the link is gone it goes over ZeroMQ to the call's answer address (`_reply`).
- A direct call's end frees its slot (`LeaseAdmission.finished`, from the worker's
  `done` and `abort` paths); the worker sends the scheduler no `done` for it: its client
  reports it, batched, with its lease renewals.
"""
from __future__ import annotations

import logging
import select
import time
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import zmq
from google.protobuf.message import DecodeError

from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import CLIENT_PREFIX, Credentials, Security, credentials_of, role_of
from runtime.framing import FrameError, code_of, more, parse, recv_frame
from runtime.sockets import bind_pull

from .call_links import ROUTE_GRACE, WorkerCallLinks
from .chain_plan import ChainPlan
from .chain_run import fill, fill_args, fill_session
from .failures import what_runs
from .hot_wait import DIRECT, LINKS, PULL, Sources
from .leased import CANCELLED, MAX_LEASES, LeaseAdmission
from .result_batch import RESULT_HOLD_SECONDS, ResultBatch

__all__ = ["DirectCalls", "CLIENT_KINDS", "schedule_credentials"]

log = logging.getLogger("cloudburst.worker")

CLIENT_KINDS = frozenset({"direct", "direct_batch"})     # what the direct socket takes
MAX_BATCH = 256                          # calls in one direct_batch message
_DIRECT = code_of("direct")
_RCVTIMEO = int(zmq.RCVTIMEO)


def schedule_credentials(credentials: Credentials) -> Credentials:
    """A worker's credentials without the clients' keys: for every socket but the direct one."""
    return Credentials(credentials.keypair, credentials.role,
                       {k: r for k, r in credentials.allowed.items()
                        if not r.startswith(CLIENT_PREFIX)}, credentials.domain)


class DirectCalls:
    """Direct calls' glue; mixed into the worker (module contract)."""

    leased: LeaseAdmission

    def _init_direct_calls(self, credentials: Optional[Credentials]) -> None:
        self.leased = LeaseAdmission()
        # lease id -> (its schedules, the functions they name, its plan): once per grant
        self._lease_functions: Dict[str, Tuple[List[pb.Schedule], FrozenSet[str],
                                               Optional[ChainPlan]]] = {}
        self._answers = ResultBatch(RESULT_HOLD_SECONDS)    # direct results, per client
        self._last_run: Dict[str, float] = {}     # lease id -> how long its last call took
        self._direct = None
        self._sources: Optional[Sources] = None
        self.direct_address = ""
        self._links: Optional[WorkerCallLinks] = None    # call links (executor/call_links.py)
        self.call_link_address = ""
        if credentials is not None and not any(r.startswith(CLIENT_PREFIX)
                                               for r in credentials.allowed.values()):
            # no client key was handed over (a worker host's workers): no client could
            # connect, so none is told of a direct socket and no lease is granted here
            return
        self._direct_context = zmq.Context()
        self._direct_security = None if credentials is None else \
            Security.of_credentials(self._direct_context, credentials)
        self._direct, self.direct_address = bind_pull(
            self._direct_context, self.config.ip, ipc_dir=self.config.ipc_dir,
            auth=credentials_of(self._direct_security), audience="all")
        # the same calls over TCP links read on this thread (no ZeroMQ I/O thread)
        self._links = WorkerCallLinks.open(self.config.ip, credentials,
                                           f"worker {self.worker_id}: ",
                                           unix_links=self.config.unix_links)
        if self._links is not None:
            self.call_link_address = self._links.address
            self._links_idle = select.poll()      # looked at without a lease (below)
            self._links_idle.register(self._links.fileno(), select.POLLIN)
        # with a lease: one wait on the three (executor/hot_wait.py)
        self._sources = Sources(self._pull, self._direct,
                                -1 if self._links is None else self._links.fileno())

    def _close_direct_calls(self) -> None:
        if self._direct is None:
            return
        self._direct.close(0)
        self._links = None            # closes its listener and links
        if self._direct_security is not None:
            self._direct_security.stop()
        self._direct_context.term()

    def _next_frame(self) -> Any:
        if self._direct is None:
            return recv_frame(self._pull, copy=False)
        if not self.leased.busy():
            # no lease here: the schedule socket as before (one blocking receive), and a
            # direct call (to be refused) is seen within one receive timeout
            self._sources.stirred(PULL | DIRECT)
            links = self._links is not None and bool(self._links_idle.poll(0))
            if links or more(self._direct):
                self._read_direct(links)
            self.guard.close_run()
            return recv_frame(self._pull, copy=False)
        ready = self._sources.wait(self._pull.get(_RCVTIMEO))
        if ready & PULL:             # first: it may hold the grant of the lease a call names
            self.guard.close_run()   # the scheduler's calls run alone, as always
            return recv_frame(self._pull, zmq.NOBLOCK, copy=False)
        if ready:
            self._read_direct(bool(ready & LINKS), bool(ready & DIRECT))
        else:                        # nothing came within a receive timeout: the run ends
            self.guard.close_run()
        return None       # (not zmq.Again: an exception per wake-up costs more than the call)

    def _stirred_pull(self) -> None:
        """The schedule socket was received from (or polled) outside `_next_frame`."""
        if self._sources is not None:
            self._sources.stirred(PULL)

    def _read_direct(self, links: bool = False, direct: bool = True) -> None:
        """Run the direct calls that have arrived. Their results are held while more wait
        (`ResultBatch`: at most `RESULT_HOLD_SECONDS`, and never across a call that long),
        so a client that keeps a worker busy gets one message per run of calls, not one
        per call; a lone call's result goes as soon as the socket is found empty."""
        self._answers.open()
        # one kill-timer arming for many calls, also from one wake-up to the next: the run
        # stays open while calls keep coming, and ends when a wait finds none (`_next_frame`)
        self.guard.open_run()
        try:
            if direct:
                self._read_waiting()
            if links:                # and what came on call links
                frames = self._links.frames()
                for i, (link, data, role) in enumerate(frames):
                    self._from_client(data, role, link, i == len(frames) - 1)
        finally:
            self._answers.close()
            self._send_answers()

    def _read_waiting(self) -> None:
        """Handle the frames waiting on the direct socket."""
        # asks the socket rather than catching zmq.Again at the end of every run
        while more(self._direct):
            try:
                frame = recv_frame(self._direct, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            data = frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)
            self._from_client(data, role_of(frame) or "")

    def _on_worker_lease(self, m: pb.WorkerLease) -> None:
        if m.revoked and m.holder_gone:     # its client is gone: what it sent is cancelled
            for call_id in self.leased.calls_of(m.lease_id):
                self._on_abort(pb.CallDone(call_id=call_id, status=pb.CANCELLED,
                                           message=f"its client is gone: {m.reason}"))
        self.leased.told(m.lease_id, m.client, m.slots, m.ttl, time.monotonic(),
                         list(m.templates) if m.templates else None, m.revoked, m.reason)

    def _from_client(self, data: bytes, role: str, link: int = 0, last: bool = False) -> None:
        """A frame on the direct socket (or call link `link`): only a direct call is taken.
        `last`: no frame was read after it; then a lone call's result is not held at all
        (nothing waits to go with it) and goes as soon as it is made, before the worker's
        bookkeeping of the call."""
        try:
            if data[:1] == _DIRECT:      # (the common case, without `parse`'s checks: the same)
                kind, payload = "direct", memoryview(data)[1:]
            else:
                kind, payload = parse(data)
            if kind not in CLIENT_KINDS:
                raise FrameError(f"a worker's direct socket takes only "
                                 f"{sorted(CLIENT_KINDS)}, not {kind!r}")
            calls = [pb.Call.FromString(payload)] if kind == "direct" else \
                list(pb.DirectBatch.FromString(payload).calls)
            if len(calls) > MAX_BATCH:
                raise FrameError(f"a direct_batch holds at most {MAX_BATCH} calls, "
                                 f"not {len(calls)}")
        except (FrameError, DecodeError) as e:
            log.warning("dropped a message from client %s: %s", role, e)
            return
        if last and len(calls) == 1 and not self._answers:
            self._answers.close()
        for call in calls:     # their results are held (`_read_direct`) and go together
            if self._answers.due_before(self._last_run.get(call.lease_id)):
                self._send_answers()    # not held behind a call that may be long
            start = time.monotonic()
            if link:       # its result goes back on the link it came on
                self._links.arrived(call.request_id, link,
                                    start + max(0.0, call.timeout) + ROUTE_GRACE, start)
            self._on_direct(call, role, link)
            now = time.monotonic()
            self._ran(call.lease_id, now - start)
            if self._answers.due(now, now - start):
                self._send_answers()

    def _ran(self, lease_id: str, seconds: float) -> None:
        """How long the lease's last direct call took here (bounded, the oldest forgotten)."""
        self._last_run.pop(lease_id, None)
        self._last_run[lease_id] = seconds
        if len(self._last_run) > 2 * MAX_LEASES:
            self._last_run.pop(next(iter(self._last_run)))

    def _answer(self, address: str, result: pb.CallResult, link: Optional[int] = None) -> None:
        """Send a call's result: held with the others of a `direct_batch` being run, so one
        message answers several of a client's calls; else at once. `link`: the link (0:
        ZeroMQ) it goes to, else the one its call id came on."""
        if link is None:
            link = self._links.route(result.request_id) if self._links is not None else 0
        if not self._answers.add((address, link), result, time.monotonic()):
            self._reply(address, "result", result, link)

    def _send_answers(self) -> None:
        for (address, link), results in self._answers.take():
            if len(results) == 1:
                self._reply(address, "result", results[0], link)
            else:
                self._reply(address, "direct_results", pb.DirectResults(results=results),
                            link, [r.request_id for r in results])

    def _reply(self, address: str, kind: str, message: Any, link: Optional[int] = None,
               ids: Optional[List[str]] = None) -> None:
        """Send a call's result (or a batch of them, `ids`) on the link the call came on,
        else (no link, or it is gone) over ZeroMQ to `address`."""
        if self._links is not None:
            for call_id in ids or [message.request_id]:
                if link is None:
                    link = self._links.route(call_id)
                self._links.finished(call_id, link)
            if link and self._links.send(link, kind, message):
                return
        self._push.send(address, kind, message)

    def _on_direct(self, call: pb.Call, role: str, link: int = 0) -> None:
        """Admit and run a direct call that came on `link` (0: the ZeroMQ socket); a refusal
        goes back where the call came from."""
        now = time.monotonic()
        why, templates = self.leased.admit(call.lease_id, role, call.request_id,
                                           now + max(0.0, call.timeout), now)
        if why == CANCELLED:                 # its cancel overtook it: it never runs
            return self._refuse_direct(call, pb.CANCELLED, why, link)
        if why is not None:
            return self._refuse_direct(call, pb.LEASE_REFUSED, why, link)
        names, plan = self._plan_of(call.lease_id, templates)
        problem = _not_direct(call, names)
        if not problem and self._known(call.request_id, templates):
            # a call id is used once: the worker would ignore the schedule, and the client
            # would wait for an answer that never comes
            problem = f"call id {call.request_id} already ran here; a call needs an id of its own"
        if problem:
            self.leased.finished(call.request_id)
            return self._refuse_direct(call, pb.INVALID_ARGUMENTS, problem, link)
        if plan is not None:    # the whole DAG here: run as the plan says (chain_run.py)
            return self._run_chain(call, plan)
        for template in templates:    # no inputs: a direct call passes no Futures
            self._place(_schedule_of(call, template), [])
        # its downstream functions here run now: in this run of calls (one kill-timer
        # arming), before the next call, and counted in its time (`_ran`)
        self._run_local()

    def _known(self, call_id: str, templates: List[pb.Schedule]) -> bool:
        """Whether a call of this id already ran here (or waits to)."""
        for t in templates:
            if self.pending.known(call_id, t.function):
                return True
        return False

    def _plan_of(self, lease_id: str, templates: List[pb.Schedule]
                 ) -> Tuple[FrozenSet[str], Optional[ChainPlan]]:
        """The functions a lease's schedules name, and its plan if the whole DAG runs here
        (`executor/chain_plan.py`): made once per grant, not per call."""
        known = self._lease_functions.get(lease_id)
        if known is not None and known[0] is templates:
            return known[1], known[2]
        if len(self._lease_functions) >= 2 * MAX_LEASES:   # bounded: forget the oldest
            self._lease_functions.pop(next(iter(self._lease_functions)))
        names = frozenset(_functions(templates))
        plan = ChainPlan.of(templates, self.address, what_runs)
        self._lease_functions[lease_id] = (templates, names, plan)
        return names, plan

    def _refuse_direct(self, call: pb.Call, status: int, why: str, link: int) -> None:
        log.info("refused direct call %s: %s", call.request_id, why)
        if call.response_address:
            self._answer(call.response_address, pb.CallResult(
                request_id=call.request_id, status=status,
                message=f"worker {self.worker_id} refused direct call {call.request_id}: "
                        f"{why}"), link)


def _functions(templates: List[pb.Schedule]) -> set:
    names = set()
    for t in templates:
        names.add(t.function)
        names.update(f.function for f in t.forward)
    return names


def _not_direct(call: pb.Call, functions: FrozenSet[str]) -> str:
    """Why `call` cannot run as a direct call ("" if it can); `functions`: the lease's."""
    if call.timeout <= 0:
        return "a direct call needs a deadline (Call.timeout)"
    if call.output_key or call.consistency != pb.LWW or call.HasField("actor"):
        return "calls with an output_key, causal calls and actor calls take the scheduler's path"
    for name in call.args:              # (a map's items() is the slow, abc way)
        arglist = call.args[name]
        if name not in functions:
            foreign = sorted(set(call.args) - functions)
            return f"arguments for {foreign}, which the lease's target does not have"
        for a in arglist.args:
            if a.WhichOneof("kind") == "call":
                return "Future arguments take the scheduler's path"
        if arglist.kwargs and any(a.WhichOneof("kind") == "call"
                                  for a in arglist.kwargs.values()):
            return "Future arguments take the scheduler's path"
    return ""


def _schedule_of(call: pb.Call, template: pb.Schedule) -> pb.Schedule:
    """The scheduler's schedule of one source, filled with the call's own fields."""
    s = pb.Schedule()
    s.CopyFrom(template)
    args = call.args
    fill(s, call)
    fill_args(s, args)
    if template.forward:            # (a one-function target has none: no list made)
        for one in s.forward:
            fill(one, call)
            fill_args(one, args)
    s.timeout = call.timeout
    fill_session(s, call)
    return s
