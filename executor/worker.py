"""An executor worker process: runs the functions scheduled on it and passes results on.

Contract:
- `Worker(config, credentials)` binds a PULL socket (`address`) for `schedule`, `trigger`,
  `abort` and `msg`, and one for node-cache replies; its node publishes `address` under the
  worker's id in the KVS (for `lib.send`). It sends a `heartbeat` (id, node, address, utilization) to every scheduler and
  to its node every `heartbeat_period` from a background thread (`executor/liveness.py`), so
  a long-running function does not look dead; it dies with its node (PR_SET_PDEATHSIG).
- Readiness and argument order are `executor.dagstate.PendingCalls`'. A ready function runs
  as `executor/calling.py` says (`lib` first if it names it, awaited if async; arguments that
  do not fit fail the call with INVALID_ARGUMENTS), with its arguments and keyword arguments;
  another call's result given as an argument is fetched from the worker holding it, and the
  outcome of every call whose sink ran here is held for such fetches (`executor/sharing.py`:
  DEPENDENCY_FAILED when there is none); top-level `Reference`s are resolved through the node
  cache first, as plain data unless the `Reference` says `objects=True` (a value that is more
  fails the call with UNSAFE_VALUE naming the key and the refused global, before the function
  runs). The caller's own arguments and upstream results are unpickled fully: the caller may
  run code here anyway (it may register functions), and results come from functions that ran
  here (docs/SECURITY.md). Functions are fetched from the registry once per (name, version)
  and cached, and `Reference`s resolved, as `executor/function_inputs.py` says.
- A schedule with `actor` set runs on the worker's actor table instead of a registered
  function (`executor/actors.py`: an actor's creation, method call or kill), in arrival order
  like every call; an actor this worker does not hold fails the call with ACTOR_DIED. While
  a function runs, actor handles it was given call through the worker's `ActorCaller`
  (`executor/actor_caller.py`).
- How a run ends is `executor/run_ends.py`'s: on success the result goes as a `trigger` to
  each downstream worker (to itself without a message: a direct call's downstream functions
  here run within its run of calls, before its next call), with that worker's schedule
  attached (from `Schedule.forward`); one above 1 MiB goes to other workers by reference (`executor/big_intermediates.py`); the sink writes
  it under `output_key` (through the node cache) when asked, pushes it to the caller as a
  `result`, then tells the scheduler `done` with the time it ran (right away, unless more
  messages wait to be handled: then up to `DONE_BATCH_CALLS` calls' `done`s go together;
  or, idle, one call's for up to `DONE_HOLD_SECONDS`, dropped if a schedule's `finished`
  says the scheduler knows it: `executor/done_reports.py`).
- On an exception the caller gets EXECUTION_ERROR with the traceback, the call's other workers
  get `abort`, the scheduler gets `done`. An invocation still missing upstream results at its
  deadline makes the caller get TIMEOUT naming the function, worker and missing upstreams.
- A causal call's invocation runs as `executor/causal_run.py` says: its sink commits through
  the node cache once the scheduler grants the call's one commit (`executor/causal.py`); a
  commit (or read) refused because its attempt is fenced is reported to the scheduler as a
  `causal_abort` and nothing goes to the caller (hydrocache/DESIGN.md, "Fencing").
- Direct calls: a client holding a worker lease sends calls to the worker's direct-call
  socket; they run only within a lease its scheduler told the worker of
  (`executor/direct_calls.py`, deciding in `executor/leased.py`), and their end frees the
  lease's slot instead of sending a `done`.
- What a function prints (stdout and stderr) is captured per call (`executor/output.py`): it
  goes to the worker's log, each line tagged with the call id and function, and travels with
  the call (`Trigger.logs`, then `CallResult.logs`) to the caller, bounded by `output_limit`.
- Least privilege (`config.auth`; `runtime.auth`, `executor/privilege.py`): a worker runs
  user code, so it holds no cluster secret. Its node hands it the function role's key pair
  on stdin (`main` reads it before any user code runs); it has no key directory, no
  `anna_core.Client` and no cluster key. Every read and write goes through its node cache,
  which acts for it with a client's rights (`NotPermitted` for keys under `__anna__/` and
  `__cloudburst/`). Its schedule-and-trigger socket admits cluster and function keys and
  takes from a function key only `trigger`, `abort` and `msg` (`FUNCTION_KINDS`), never a
  `schedule`; its node-cache reply and control sockets admit only cluster keys. Its pushes
  (results to callers, triggers, heartbeats, `done`) are CURVE clients with the function
  key. `lib.send` goes only to directory entries that carry the function key
  (`executor/user_messages.py`: user messages between workers).
"""
from __future__ import annotations

import atexit
import collections
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import zmq
from google.protobuf.message import DecodeError

from runtime.auth import (FUNCTION, Credentials, KeyFileError, Security, credentials_of,
                          decode_handoff, role_of)
from runtime.framing import FrameError, parse, recv_frame
from runtime.sockets import PushCache, bind_pull
from faas.values import loads
from hydro_proto import cloudburst_pb2 as pb

from hydrocache.writer import ExecutorWriter

from .actor_caller import ActorCaller
from .actors import ActorTable
from .big_intermediates import ByReference, by_reference, store
from .busy import BusyClock
from .cache_client import CacheClient
from .calling import Entry
from .call_session import CallSession, UpstreamSessions
from .causal import CausalInvocation
from .causal_run import CausalRunning
from .chain_run import ChainRuns
from .config import WorkerConfig
from .dagstate import PendingCalls, Ready
from .direct_calls import DirectCalls, schedule_credentials
from .done_reports import DoneReports
from .function_inputs import FunctionInputs
from .guard import FunctionGuard
from .reuse import Reuses
from .run_ends import RUN_FAILURES, RunEnds, serialized
from .held import HeldResults, Outcome
from .library import UserLibrary
from .liveness import Doorbell, Heartbeat, RunReports, die_with_parent, heartbeat_loop
from .run_slot import SlotReports
from .output import CallOutput, Capture, UpstreamLogs, join_logs, section
from .privilege import drop_capabilities, hide_paths
from .failures import named, what_runs
from .references import FunctionError
from .sharing import ResultSharing, Unavailable, call_inputs
from .user_messages import UserMessaging

__all__ = ["Worker", "FUNCTION_KINDS"]

log = logging.getLogger("cloudburst.worker")
# what another worker (a function key) may send a worker; schedules come from the cluster only
FUNCTION_KINDS = frozenset({"trigger", "abort", "msg", "fetch"})
# `done` frees the worker's slot at the scheduler, which may hold the next call for it
# (scheduler/dispatch.py): sent as soon as the result is, except that at most this many
# calls' `done`s wait for the messages already queued to be handled, and one call's `done`
# waits up to DONE_HOLD_SECONDS for its caller's next call (executor/done_reports.py)
DONE_BATCH_CALLS = 4
DONE_HOLD_SECONDS = 0.005


class Worker(ResultSharing, FunctionInputs, CausalRunning, RunEnds, UserMessaging,
             DirectCalls, ChainRuns):
    """One executor worker; see the module contract."""

    def __init__(self, config: WorkerConfig, credentials: Optional[Credentials] = None,
                 run_reports: Optional[SlotReports] = None) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self._context = zmq.Context()
        if config.auth and credentials is None:
            raise KeyFileError(f"worker {config.worker_id} was started with authentication "
                               f"but no function keys were handed to it")
        # the ZAP handler runs before any bind
        # (the clients' keys only for the direct socket, on a context of its own)
        self._security = None if credentials is None else \
            Security.of_credentials(self._context, schedule_credentials(credentials))
        creds = self.credentials = credentials_of(self._security)
        self._pull, self.address = bind_pull(self._context, config.ip, ipc_dir=config.ipc_dir,
                                             auth=creds, audience=FUNCTION)
        self._replies, reply_address = bind_pull(self._context, config.ip,
                                                 ipc_dir=config.ipc_dir, auth=creds)
        self._push = PushCache(self._context, auth=creds)
        self.cache = CacheClient(self._push, config.cache_address, self._replies, reply_address,
                                 config.cache_timeout)
        self.pending = PendingCalls()
        self.lib = UserLibrary(self)
        self._functions: Dict[str, Tuple[str, Entry]] = {}
        self._time_limits: Dict[str, float] = {}     # function -> its registered limit (0: none)
        # cancels reach a running function through this socket, read by the heartbeat thread
        self._control, self.control_address = bind_pull(self._context, config.ip,
                                                        ipc_dir=config.ipc_dir, auth=creds)
        self.guard = FunctionGuard()
        # a kill timer a run of direct calls left armed never outlasts a wait for the cache
        self.cache.before_wait = self.guard.settle
        self._peers: Dict[str, str] = {}
        # what this worker sends itself (a downstream function's input), handled in order
        self._local: Deque[Tuple[Callable[[Any], None], Any]] = collections.deque()
        self._backlog: Deque[Any] = collections.deque()
        self._inbox: Deque[Tuple[str, bytes]] = collections.deque()
        # a long function is told at once: a start rings the heartbeat thread (liveness)
        self._doorbell = Doorbell()
        self.busy = BusyClock(self._doorbell.ring)  # time spent running functions (heartbeats)
        # what the node is told of functions (liveness): a shared slot, else messages
        self.run_reports = run_reports or RunReports()
        self.direct_work = (0, 0.0)         # direct calls finished, their seconds (totals)
        self._stopping = threading.Event()
        self.dones = DoneReports(DONE_HOLD_SECONDS, DONE_BATCH_CALLS)   # `done`s owed
        self.invocation: Optional[CausalInvocation] = None   # the causal function running now
        self._writer = ExecutorWriter(self.worker_id)
        self.output = Capture(config.output_limit)
        self._printed = ""    # what the last function run printed
        # what upstream functions printed, per call and target, until the target runs
        self._upstream_logs = UpstreamLogs()
        self._sessions = UpstreamSessions()    # what upstream functions read and wrote
        self._reuse = Reuses()     # HB's results kept for a CON attempt (bounded)
        self.held = HeldResults(config.result_ttl, max_bytes=config.result_bytes)
        self._waiting_on: Dict[str, List[pb.Schedule]] = {}   # fetches a `moved` redirects
        # the actors placed on this worker, and the caller of handles used inside functions
        self.actors = ActorTable(config.max_actors, lambda body: loads(body, objects=True))
        self.actor_caller = ActorCaller(self.worker_id, self._context, self._push, config.ip,
                                        config.ipc_dir, creds)
        self._handlers = {"schedule": self._on_schedule, "trigger": self._on_trigger,
                          "abort": self._on_abort, "msg": self._on_msg, "fetch": self._on_fetch,
                          "moved": self._on_moved, "worker_lease": self._on_worker_lease}
        self._init_direct_calls(credentials)     # clients' direct calls: their own socket

    # ---- lifecycle ----
    def stop(self) -> None:
        self._stopping.set()

    def serve(self) -> None:
        c = self.config
        beat = threading.Thread(target=heartbeat_loop, name="heartbeat", daemon=True, args=(
            Heartbeat(self.worker_id, c.node_id, self.address, self.control_address,
                      c.cache_address, c.scheduler_addresses, c.heartbeat_period,
                      self._context, self.credentials, self.busy, self.run_reports,
                      self.pending.__len__, self._control, self._on_control, self._stopping,
                      self.direct_address, lambda: self.direct_work, self._doorbell,
                      self.call_link_address),))
        beat.start()
        self._pull.setsockopt(zmq.RCVTIMEO, 100)
        next_sweep = time.monotonic() + 0.5
        while not self._stopping.is_set():
            now = time.monotonic()
            if now >= next_sweep:  # first: a long function may have outlived others' deadlines
                next_sweep = now + 0.5
                for stalled in self.pending.expire(now):
                    self._on_stalled(stalled)
                self._expire_reuse(now)
                self._expire_held(now)
                self.leased.expire(now)
                if self.config.parent_pid and os.getppid() != self.config.parent_pid:
                    log.warning("parent process exited; stopping")
                    break
            while self._local or self._backlog:
                if self._local:
                    self._run_local()
                else:
                    self._dispatch(self._backlog.popleft())
            try:
                # the schedule socket's next frame; direct calls are handled on the way
                raw = self._next_frame()       # None: direct calls were handled
                frame = None if raw is None else self._admitted(raw)
            except zmq.Again:
                frame = None
            if frame is not None:
                self._dispatch(frame)
            if self.dones:
                self._stirred_pull()        # (the look below may poll the socket)
                if self.dones.due(time.monotonic(), not (
                        self._local or self._backlog or self._pull.poll(0))):
                    self._flush_done()
        self.guard.close_run()           # a run of direct calls left open: timers cleared
        self._flush_done()
        self._stopping.set()
        beat.join(2)
        self.close()

    def _call_done(self, scheduler_address: str, call_id: str, ok: bool = True,
                   hold: Optional[Any] = None) -> None:
        """Tell the scheduler a call finished (its load accounting depends on it), when
        `executor/done_reports.py` says: batched while messages wait, one held briefly for
        the caller's own report if `hold` (the call's locations) are all here. A direct
        call's client reports it instead."""
        if self.leased.finished(call_id):
            calls, busy = self.direct_work      # one assignment: the heartbeat reads it
            self.direct_work = (calls + 1, busy + self.busy.take_finished())
            return
        hold = bool(hold) and all(a == self.address for a in hold.values())
        if not self.dones:       # the loop comes back to send them (at the hold's end)
            self._pull.setsockopt(zmq.RCVTIMEO, max(1, round(DONE_HOLD_SECONDS * 1000)))
        self.dones.add(scheduler_address, call_id, ok, self.busy.take_finished(),
                       time.monotonic(), hold)

    def _flush_done(self) -> None:
        for address, ids, failed, busy in self.dones.take():
            self._push.send(address, "done", pb.CallDone(
                call_ids=ids, failed_ids=failed, worker_id=self.worker_id,
                busy_seconds=busy))
        self._pull.setsockopt(zmq.RCVTIMEO, 100)

    def close(self) -> None:
        self.actor_caller.close()
        self._push.close()
        self._pull.close(0)
        self._replies.close(0)
        self._control.close(0)      # the heartbeat thread that reads it has ended (serve)
        self._doorbell.close()
        self._close_direct_calls()
        if self._security is not None:
            self._security.stop()
        self._context.term()

    # ---- messages ----
    def _admitted(self, frame: zmq.Frame) -> Optional[bytes]:
        """The frame's bytes if its sender may send its kind (module contract), else None."""
        data = frame.bytes
        if self.credentials is not None and data and role_of(frame) == FUNCTION:
            try:
                kind = parse(data)[0]
            except FrameError:
                kind = None
            if kind not in FUNCTION_KINDS:
                log.warning("dropped a %r message from a function key: a worker takes only "
                            "%s from one", kind, ", ".join(sorted(FUNCTION_KINDS)))
                return None
        return data

    def _dispatch(self, frame: Any) -> None:
        try:
            kind, payload = parse(frame)
            handler = self._handlers.get(kind)
            if handler is None:
                raise FrameError(f"kind {kind!r} is not for a worker")
            try:
                message = {"schedule": pb.Schedule, "trigger": pb.Trigger, "abort": pb.CallDone,
                           "msg": pb.UserMessage, "fetch": pb.ResultRequest,
                           "moved": pb.CallRef,
                           "worker_lease": pb.WorkerLease}[kind].FromString(payload)
            except DecodeError as e:
                raise FrameError(f"{kind!r} payload does not parse ({e})") from None
            handler(message)
        except FrameError as e:
            log.warning("dropped a malformed message: %s", e)
        except Exception:
            log.exception("error while handling a message")

    def _on_schedule(self, s: pb.Schedule) -> None:
        if s.finished:                   # the scheduler knows: no `done` for them
            self.dones.acknowledged(s.finished)
            if not self.dones:
                self._pull.setsockopt(zmq.RCVTIMEO, 100)
        inputs = call_inputs(s.args)      # other calls' results given as arguments
        if not self._place(s, list(inputs)) and inputs:
            self._request_inputs(s)

    def _place(self, s: pb.Schedule, inputs: List[str]) -> bool:
        """Hold the schedule until its upstream results and `inputs` are here; run it now if
        they are (True: it ran)."""
        now = time.monotonic()
        ready = self.pending.add_schedule(s.call_id, s.function, s, s.upstreams,
                                          s.args.args, now + s.timeout, now, inputs)
        if ready is None:
            return False
        self._run(ready)
        return True

    def _on_trigger(self, t: pb.Trigger) -> None:
        value = (bytes(t.value), t.causal) if t.HasField("causal") else bytes(t.value)
        if t.status != pb.OK:          # a fetched input without a value (executor/sharing.py)
            value = Unavailable(t.status, t.message)
        elif t.value_key:              # a large upstream result (executor/big_intermediates.py)
            value = ByReference(t.value_key, t.source)
        self._arrived(t.schedule if t.HasField("schedule") else None, t.call_id, t.source,
                      t.target, value, t.logs, t.session if t.HasField("session") else None)

    def _arrived(self, schedule: Optional[pb.Schedule], call_id: str, source: str,
                 target: str, value: Any, logs: str, session: Optional[pb.Session]) -> None:
        """`source`'s result for `target` of the call: from a `trigger`, or (no message) from
        a function of the call that ran here (`executor/run_ends.py`); with the target's
        schedule if it travelled with the result."""
        # the common case, a forwarded schedule with no other call's result as an input:
        # placed with its upstream's result in one step (`PendingCalls.add_arrived`)
        direct = schedule is not None and not schedule.finished and \
            schedule.function == target and schedule.call_id == call_id and \
            not call_inputs(schedule.args)
        if schedule is not None and not direct:
            self._on_schedule(schedule)
        if logs:
            self._upstream_logs.add(call_id, target, logs)
        if session is not None:
            self._sessions.add(call_id, target, session)
        now = time.monotonic()
        ready = self.pending.add_arrived(
            call_id, target, schedule, schedule.upstreams, schedule.args.args,
            now + schedule.timeout, now, source, value) if direct else \
            self.pending.add_trigger(call_id, target, source, value, now)
        if ready is not None:
            self._run(ready)

    def _run_local(self) -> None:
        """Handle what this worker sent itself, in order (a downstream function of a call
        that ran here runs now)."""
        while self._local:
            handle, message = self._local.popleft()
            handle(message)

    def _on_abort(self, message: pb.CallDone) -> None:
        self.pending.abort(message.call_id)
        self.leased.cancel(message.call_id, time.monotonic())   # a direct call's slot is free
        if message.status and not message.retried:   # a verdict, for Future arguments
            self._keep_outcome(message.call_id, Outcome(
                message.status, message=message.message or "it was stopped"))
        self._upstream_logs.drop(message.call_id)
        self._sessions.drop(message.call_id)

    def _call_logs(self, s: pb.Schedule, printed: str) -> str:
        """The upstream functions' output and this function's, bounded (executor/output.py)."""
        inherited = self._upstream_logs.take(s.call_id, s.function)
        if not inherited and not printed:      # the common case: nothing to join or bound
            return ""
        return join_logs(inherited + [section(s.function, printed)], self.output.limit)

    def _call_function(self, s: pb.Schedule, fn: Entry, args: List[Any],
                       kwargs: Dict[str, Any], deadline: float) -> Any:
        """Run the function (`executor/calling.py`: with `lib` if it takes it, awaited if
        async; `InvalidArguments` first if the arguments do not fit) with its output captured
        into `self._printed` (kept whether it returns or raises), stopped (`Interrupted`)
        past its time limit or the call's deadline, or when the call is cancelled."""
        fn.check(args, kwargs)
        now = time.monotonic()
        seconds, reason = self._time_limit(s, deadline, now)
        until = now + seconds
        try:
            # a handle passed to the function calls its actor through this worker
            with self.actor_caller.during(s.scheduler_address, until):
                return self._guarded(s, fn, args, kwargs, seconds, reason, until)
        finally:
            # a downstream function of the call that runs here next starts at once
            targets = s.targets
            follows = bool(targets) and any(s.locations.get(t) == self.address
                                            for t in targets)
            end = self.run_reports.end(s.call_id, until, time.monotonic(), follows)
            if end is not None:
                self._tell_node(end)

    def _time_limit(self, s: pb.Schedule, deadline: float,
                    now: float) -> Tuple[float, Callable[[], str]]:
        """The seconds the function of `s` may run from `now`: its time limit, or what is
        left of the call's `deadline` if less; and the reason it is stopped at the end."""
        limit = s.time_limit or self._time_limits.get(s.function) or \
            self.config.function_time_limit
        # (the reason is worded only if the limit is reached)
        if limit <= deadline - now:
            return limit, lambda: f"its time limit of {limit:g} s"
        return deadline - now, \
            lambda: f"the call's deadline ({s.timeout:g} s after it was scheduled)"

    def _guarded(self, s: pb.Schedule, fn: Entry, args: List[Any], kwargs: Dict[str, Any],
                 seconds: float, reason: Callable[[], str], until: float) -> Any:
        """The function called under the guard for `seconds`, its output captured (into
        `self._printed`), the node told it runs until `until` (`executor/liveness.py`: a
        function stuck in C code, deaf to the guard's signal, fails its call there)."""
        call_id = s.call_id
        self.output.begin(call_id, s.function)
        start = self.run_reports.start(call_id, until)   # None: the node knows (liveness)
        if start is not None:
            self._tell_node(start)
        try:
            return self.guard.run(call_id, seconds, reason,
                                  lambda: fn.call(self.lib, args, kwargs))
        finally:
            self._printed = self.output.end()

    def _tell_node(self, status: pb.WorkerStatus) -> None:
        status.worker_id, status.node_id = self.worker_id, self.config.node_id
        self._push.send(self.config.cache_address, "heartbeat", status)

    def _on_control(self) -> None:
        """Cancels (heartbeat thread): stop the running function if it belongs to the call,
        or to a lease whose holder is gone (executor/direct_calls.py)."""
        while self._control.poll(0):
            try:
                kind, payload = parse(recv_frame(self._control))
                if kind == "abort":
                    call_ids = [pb.CallDone.FromString(payload).call_id]
                elif kind == "worker_lease":
                    m = pb.WorkerLease.FromString(payload)
                    call_ids = self.leased.calls_of(m.lease_id) if m.holder_gone else []
                else:
                    raise FrameError(f"kind {kind!r} is not a control message")
            except Exception as e:
                log.warning("dropped a malformed control message: %s", e)
                continue
            for call_id in call_ids:
                self.guard.cancel(call_id)

    # ---- running a function (causal calls: executor/causal_run.py; its end: run_ends.py) ----
    def _run(self, ready: Ready) -> None:
        ran = self._execute(ready, what_runs(ready.schedule))
        if ran is not None:
            self._succeeded(ready.schedule, ready, *ran)

    def _execute(self, ready: Ready, what: str) -> Optional[Tuple[bytes, Dict[str, Any],
                                                                   str, Optional[pb.Session]]]:
        """Run the ready function (`what`: `what_runs` of its schedule): its serialized
        result, CallResult fields, KVS key for other workers and session report, for
        `_succeeded`; None when it failed (reported: `executor/run_ends.py`) or was a
        causal invocation (which reports its own end)."""
        s: pb.Schedule = ready.schedule
        start = time.monotonic()
        if ready.late:
            stage = (f"the input(s) {ready.late} of {what} on worker {self.worker_id}, which "
                     f"arrived after the call's deadline")
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
            return None
        self._printed = ""
        if s.consistency == pb.CAUSAL:
            self._run_causal(ready, what, start)
            return None
        self.busy.start(start)
        inherited = self._sessions.take(s.call_id, s.function)
        session = self.cache.session = CallSession(s.session, inherited) \
            if s.HasField("session") else None
        try:
            try:
                fn = Entry(self.actors.target(s.actor, self.worker_id), what) \
                    if s.HasField("actor") else \
                    self._function(s.function, s.version, start + s.timeout)
                args, kwargs = self._arguments(ready, what)
                result = self._call_function(s, fn, args, kwargs, ready.deadline)
            except Exception as e:
                raise named(e, what, self.worker_id) from None
            value = serialized(result, what)
            fields = self._result_fields(s, value, what)
            downstream = store(self.cache, self._push, s, value, what) \
                if by_reference(s, len(value), self.address) else ""
            if s.sink and s.output_key:
                try:
                    self.cache.put(s.output_key, value)
                except Exception as e:
                    raise FunctionError(f"storing the result of {what} under "
                                         f"{s.output_key!r} failed: {e}") from None
        except RUN_FAILURES as e:
            self._ended(s, what, e)
            return None
        finally:
            self.busy.stop(time.monotonic())
            self.cache.session = None
        return value, fields, downstream, session.report() if session is not None else None



def main() -> None:
    from runtime.config import parse_config, role_parser
    from runtime.limits import raise_descriptor_limit
    from runtime.logs import configure_logging
    from runtime.process import announce_ready

    parser = role_parser(WorkerConfig, "python -m executor.worker",
                         "One executor worker (started by its node).")
    config, _ = parse_config(parser, WorkerConfig)
    log_ = configure_logging(config.log_level, f"worker {config.worker_id}")
    raise_descriptor_limit()
    die_with_parent(config.parent_pid)
    try:
        # the node's shared slot is opened before the sandbox below (executor/run_slot.py)
        run_reports = SlotReports(config.run_slot) if config.run_slot else None
        # the function keys come on stdin, never on the command line or in the environment;
        # the key directory is hidden from this process before any user code runs
        credentials = None
        if config.auth:
            credentials, hide = decode_handoff(sys.stdin.buffer.read(4096))
            # files a function makes with `tempfile` go to a directory of its own, made
            # before the sandbox so that it stays readable (executor/privilege.py)
            scratch = tempfile.mkdtemp(prefix=f"cloudburst-{config.worker_id}-")
            atexit.register(shutil.rmtree, scratch, True)
            os.environ["TMPDIR"] = tempfile.tempdir = scratch
            if hide and not hide_paths(hide):
                log_.warning("this kernel has no Landlock: %s stays readable by this "
                             "worker's uid %d", ", ".join(hide), os.getuid())
        if os.geteuid() == 0:          # the node could not give it another uid
            drop_capabilities()
        worker = Worker(config, credentials, run_reports)
    except (KeyFileError, OSError) as e:  # missing or malformed keys, or no sandbox: named
        log_.error("cannot start: %s", e)
        sys.exit(2)
    finally:
        sys.stdin.close()
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    # what functions print goes to this worker's log, tagged by call, and to their callers
    sys.stdout = CallOutput(sys.__stdout__, worker.output)
    sys.stderr = CallOutput(sys.__stderr__, worker.output)
    worker.guard.install()
    announce_ready({"worker_id": worker.worker_id, "address": worker.address,
                    "pid": os.getpid()})
    worker.serve()


if __name__ == "__main__":
    main()
