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
  here (docs/SECURITY.md). Functions are fetched from the registry (through the node cache,
  which never caches registry keys) once per (name, version), deserialized once, and cached; a stateful class is instantiated once per worker
  and its `run` called.
- A schedule with `actor` set runs on the worker's actor table instead of a registered
  function (`executor/actors.py`: an actor's creation, method call or kill), in arrival order
  like every call; an actor this worker does not hold fails the call with ACTOR_DIED. While
  a function runs, actor handles it was given call through the worker's `ActorCaller`
  (`executor/actor_caller.py`).
- On success the result goes as a `trigger` to each downstream worker (to itself without a
  socket hop), with that worker's schedule attached (from `Schedule.forward`); the sink writes
  it under `output_key` (through the node cache) when asked, pushes it to the caller as a
  `result`, then tells the scheduler `done` (batched within `DONE_BATCH_SECONDS`).
- On an exception the caller gets EXECUTION_ERROR with the traceback, the call's other workers
  get `abort`, the scheduler gets `done`. An invocation still missing upstream results at its
  deadline makes the caller get TIMEOUT naming the function, worker and missing upstreams.
- A causal call's sink commits through the node cache once the scheduler grants the call's
  one commit (`executor/causal.py`); a commit (or read) refused because its attempt is fenced
  (`Fenced`: released, failed, or another attempt holds the commit) is reported to the
  scheduler as a `causal_abort` and nothing goes to the caller: the scheduler owns that
  call's outcome (hydrocache/DESIGN.md, "Fencing").
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
  key. `lib.send` goes only to directory entries that carry the function key.
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
import traceback
from typing import Any, Deque, Dict, List, Optional, Tuple

import zmq
from google.protobuf.message import DecodeError

from runtime.keys import function_key, worker_key
from runtime.auth import (FUNCTION, Credentials, KeyFileError, Security, credentials_of,
                          decode_handoff, parse_address, role_of)
from runtime.framing import FrameError, encode, parse, recv_frame
from runtime.sockets import PushCache, bind_pull
from runtime.values import dumps, loads
from runtime.errors import (CorruptRecord, InvalidArguments, ObjectNotFound, Timeout,
                            ValueTooLarge)
from anna_core.config import DEFAULT_MAX_VALUE_BYTES
from runtime.values import Reference
from hydro_proto import cloudburst_pb2 as pb

from hydrocache import versionset as vs
from hydrocache.writer import ExecutorWriter

from .actor_caller import ActorCaller
from .actors import ActorGone, ActorTable, ActorTableFull, describe
from .big_results import result_fields
from .cache_client import CacheClient, Fenced
from .calling import Entry, entry_of
from .call_session import CallSession, UpstreamSessions
from .causal import CausalAbortError, CausalInvocation, Reusable, inputs_digest
from .config import WorkerConfig
from .dagstate import PendingCalls, Ready
from .guard import FunctionGuard, Interrupted
from .retrying import exception_names, may_retry, retry_request
from .held import HeldResults, Outcome
from .library import UserLibrary
from .liveness import die_with_parent, heartbeat_loop
from .output import CallOutput, Capture, UpstreamLogs, join_logs, section
from .privilege import drop_capabilities, hide_paths
from .references import ArgumentRefused, FunctionError, load_reference, resolve
from .sharing import DependencyError, ResultSharing, Unavailable, call_inputs, prepare

__all__ = ["Worker", "FUNCTION_KINDS"]

log = logging.getLogger("cloudburst.worker")
# what another worker (a function key) may send a worker; schedules come from the cluster only
FUNCTION_KINDS = frozenset({"trigger", "abort", "msg", "fetch"})
_INBOX_LIMIT = 10000
# `done` frees the worker's slot at the scheduler, which may hold the next call for it
# (scheduler/dispatch.py): sent as soon as the result is, not held back to batch
DONE_BATCH_SECONDS = 0.0
_MSG_CODE = encode("msg", pb.UserMessage())[:1]


class Worker(ResultSharing):
    """One executor worker; see the module contract."""

    def __init__(self, config: WorkerConfig, credentials: Optional[Credentials] = None) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self._context = zmq.Context()
        if config.auth and credentials is None:
            raise KeyFileError(f"worker {config.worker_id} was started with authentication "
                               f"but no function keys were handed to it")
        # the ZAP handler runs before any bind
        self._security = None if credentials is None else \
            Security.of_credentials(self._context, credentials)
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
        self._peers: Dict[str, str] = {}
        self._local: Deque[Tuple[str, Any]] = collections.deque()
        self._backlog: Deque[Any] = collections.deque()
        self._inbox: Deque[Tuple[str, bytes]] = collections.deque()
        self._busy_since: Optional[float] = None
        self._busy_total = 0.0
        self._stopping = threading.Event()
        self._done: Dict[str, Tuple[List[str], List[str]]] = {}   # scheduler -> (ok, failed)
        self._done_since = 0.0
        self.invocation: Optional[CausalInvocation] = None   # the causal function running now
        self._writer = ExecutorWriter(self.worker_id)
        self.output = Capture(config.output_limit)
        self._printed = ""    # what the last function run printed
        # what upstream functions printed, per call and target, until the target runs
        self._upstream_logs = UpstreamLogs()
        self._sessions = UpstreamSessions()    # what upstream functions read and wrote
        self._reuse: Dict[Tuple[str, str], Reusable] = {}
        self.held = HeldResults(config.result_ttl, max_bytes=config.result_bytes)
        # the actors placed on this worker, and the caller of handles used inside functions
        self.actors = ActorTable(config.max_actors, lambda body: loads(body, objects=True))
        self.actor_caller = ActorCaller(self.worker_id, self._context, self._push, config.ip,
                                        config.ipc_dir, creds)
        self._handlers = {"schedule": self._on_schedule, "trigger": self._on_trigger,
                          "abort": self._on_abort, "msg": self._on_msg, "fetch": self._on_fetch}

    # ---- lifecycle ----
    def stop(self) -> None:
        self._stopping.set()

    def serve(self) -> None:
        beat = threading.Thread(target=heartbeat_loop, args=(self,), name="heartbeat",
                                daemon=True)
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
                if self.config.parent_pid and os.getppid() != self.config.parent_pid:
                    log.warning("parent process exited; stopping")
                    break
            while self._local or self._backlog:
                if self._local:
                    kind, message = self._local.popleft()
                    self._handlers[kind](message)
                else:
                    self._dispatch(self._backlog.popleft())
            try:
                frame = self._admitted(recv_frame(self._pull, copy=False))
            except zmq.Again:
                frame = None
            if frame is not None:
                self._dispatch(frame)
            if self._done and time.monotonic() - self._done_since >= DONE_BATCH_SECONDS:
                self._flush_done()
        self._flush_done()
        self._stopping.set()
        beat.join(2)
        self.close()

    def _call_done(self, scheduler_address: str, call_id: str, ok: bool = True) -> None:
        """Tell the scheduler a call finished (its load accounting depends on it), batched
        within DONE_BATCH_SECONDS so the scheduler is not woken once per call while the caller
        receives its result (a caller also reports the calls it got results for)."""
        if not self._done:
            self._done_since = time.monotonic()
            self._pull.setsockopt(zmq.RCVTIMEO, max(1, int(DONE_BATCH_SECONDS * 1000)))
        done, failed = self._done.setdefault(scheduler_address, ([], []))
        (done if ok else failed).append(call_id)

    def _flush_done(self) -> None:
        for address, (ids, failed) in self._done.items():
            self._push.send(address, "done", pb.CallDone(call_ids=ids, failed_ids=failed))
        if self._done:
            self._done = {}
            self._pull.setsockopt(zmq.RCVTIMEO, 100)

    def close(self) -> None:
        self.actor_caller.close()
        self._push.close()
        self._pull.close(0)
        self._replies.close(0)
        self._control.close(0)      # the heartbeat thread that reads it has ended (serve)
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
                           "msg": pb.UserMessage, "fetch": pb.ResultRequest}[kind].FromString(payload)
            except DecodeError as e:
                raise FrameError(f"{kind!r} payload does not parse ({e})") from None
            handler(message)
        except FrameError as e:
            log.warning("dropped a malformed message: %s", e)
        except Exception:
            log.exception("error while handling a message")

    def _on_schedule(self, s: pb.Schedule) -> None:
        now = time.monotonic()
        inputs = call_inputs(s.args)      # other calls' results given as arguments
        ready = self.pending.add_schedule(s.call_id, s.function, s, list(s.upstreams),
                                          list(s.args.args), now + s.timeout, now, list(inputs))
        if ready is not None:
            self._run(ready)
        elif inputs:
            self._request_inputs(s)

    def _on_trigger(self, t: pb.Trigger) -> None:
        if t.HasField("schedule"):
            self._on_schedule(t.schedule)
        value = (bytes(t.value), t.causal) if t.HasField("causal") else bytes(t.value)
        if t.status != pb.OK:          # a fetched input without a value (executor/sharing.py)
            value = Unavailable(t.status, t.message)
        if t.logs:
            self._upstream_logs.add(t.call_id, t.target, t.logs)
        if t.HasField("session"):
            self._sessions.add(t.call_id, t.target, t.session)
        ready = self.pending.add_trigger(t.call_id, t.target, t.source, value, time.monotonic())
        if ready is not None:
            self._run(ready)

    def _on_abort(self, message: pb.CallDone) -> None:
        self.pending.abort(message.call_id)
        self._keep_outcome(message.call_id, Outcome(
            message.status or pb.CANCELLED, message=message.message or "it was stopped"))
        self._upstream_logs.drop(message.call_id)
        self._sessions.drop(message.call_id)

    def _call_logs(self, s: pb.Schedule, printed: str) -> str:
        """The upstream functions' output and this function's, bounded (executor/output.py)."""
        inherited = self._upstream_logs.take(s.call_id, s.function)
        return join_logs(inherited + [section(s.function, printed)], self.output.limit)

    def _call_function(self, s: pb.Schedule, fn: Entry, args: List[Any],
                       kwargs: Dict[str, Any], deadline: float) -> Any:
        """Run the function (`executor/calling.py`: with `lib` if it takes it, awaited if
        async; `InvalidArguments` first if the arguments do not fit) with its output captured
        into `self._printed` (kept whether it returns or raises), stopped (`Interrupted`)
        past its time limit or the call's deadline, or when the call is cancelled."""
        fn.check(args, kwargs)
        limit = s.time_limit or self._time_limits.get(s.function) or \
            self.config.function_time_limit
        left = deadline - time.monotonic()
        reason = f"its time limit of {limit:g} s" if limit <= left else \
            f"the call's deadline ({s.timeout:g} s after it was scheduled)"
        seconds = min(limit, left)
        self.output.begin(s.call_id, s.function)
        # the node learns when this function's limit passes, so a function stuck in C code
        # (deaf to the guard's signal) fails its call at the limit (executor/liveness.py)
        self._tell_node(pb.WorkerStatus(running=1, call_id=s.call_id,
                                        deadline=time.monotonic() + seconds))
        try:
            # a handle passed to the function calls its actor through this worker
            with self.actor_caller.during(s.scheduler_address, time.monotonic() + seconds):
                return self.guard.run(s.call_id, seconds, reason,
                                      lambda: fn.call(self.lib, args, kwargs))
        finally:
            self._printed = self.output.end()
            self._tell_node(pb.WorkerStatus(running=0, call_id=s.call_id))

    def _tell_node(self, status: pb.WorkerStatus) -> None:
        status.worker_id, status.node_id = self.worker_id, self.config.node_id
        self._push.send(self.config.cache_address, "heartbeat", status)

    def _on_control(self) -> None:
        """Cancels (heartbeat thread): stop the running function if it belongs to the call."""
        while self._control.poll(0):
            try:
                kind, payload = parse(recv_frame(self._control))
                if kind != "abort":
                    raise FrameError(f"kind {kind!r} is not a control message")
                call_id = pb.CallDone.FromString(payload).call_id
            except Exception as e:
                log.warning("dropped a malformed control message: %s", e)
                continue
            self.guard.cancel(call_id)

    def _on_msg(self, m: pb.UserMessage) -> None:
        if len(self._inbox) >= _INBOX_LIMIT:
            dropped = self._inbox.popleft()
            log.warning("inbox full; dropped a message from %s", dropped[0])
        self._inbox.append((m.sender, bytes(m.payload)))

    # ---- running a function ----
    def _function(self, name: str, version: str, deadline: float) -> Entry:
        """The callable for `name`: cached per version; a different version is fetched from the
        registry (a newer registration than the schedule's wins: the scheduler learns of it
        within a gossip epoch)."""
        cached = self._functions.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        key = function_key(name)
        data = self.cache.get([key]).get(key)
        try:
            record = None if data is None else pb.FunctionRecord.FromString(bytes(data))
        except (DecodeError, TypeError) as e:
            raise CorruptRecord(f"the registry record {key!r} of function {name!r} does not "
                                f"parse ({type(e).__name__})", key) from None
        if record is None or record.deleted:
            raise FunctionError(f"function {name!r} is not in the registry")
        if cached is not None and cached[0] == record.version:
            return cached[1]
        try:
            obj = loads(record.body, objects=True)     # a registration is code by design
        except ModuleNotFoundError as e:
            raise FunctionError(
                f"function {name!r} needs module {e.name!r}, which this executor cannot "
                f"import: install it on the executors, or register the function with "
                f"modules=[{e.name}] to ship the module with it") from None
        if record.stateful:
            cls, init_args = obj
            instance = cls(*init_args)
            method = entry_of(cls)
            fn = instance if method == "__call__" else getattr(instance, method or "run")
        else:
            fn = obj
        fn = Entry(fn, name)
        self._functions[name] = (record.version, fn)
        self._time_limits[name] = record.time_limit
        return fn

    def _arguments(self, ready: Ready, what: str) -> Tuple[List[Any], Dict[str, Any]]:
        """The call's arguments (pb.Argument), other calls' results and upstream results
        (bytes) as `(args, kwargs)`, with top-level `Reference`s resolved (module contract)."""
        values, kwvalues = prepare(ready, what)
        refs = [v for v in values + list(kwvalues.values()) if isinstance(v, Reference)]
        if not refs:
            return values, kwvalues
        keys = sorted({r.key for r in refs})
        found = self.cache.get(keys)
        missing = [k for k in keys if found.get(k) is None]
        if missing:
            raise FunctionError(f"referenced key(s) {missing} hold no object")
        resolved = {r: load_reference(r, found[r.key]) for r in refs}
        return ([resolved[v] if isinstance(v, Reference) else v for v in values],
                {k: resolved[v] if isinstance(v, Reference) else v for k, v in kwvalues.items()})

    def _run(self, ready: Ready) -> None:
        s: pb.Schedule = ready.schedule
        what = f"function {s.function!r}" + (f" of DAG {s.dag!r}" if s.dag and s.dag != s.function else "")
        if s.HasField("actor"):
            what = f"{s.actor.method!r} of {describe(s.actor)}"
        start = time.monotonic()
        if ready.late:
            stage = (f"the input(s) {ready.late} of {what} on worker {self.worker_id}, which "
                     f"arrived after the call's deadline")
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
            return
        self._printed = ""
        if s.consistency == pb.CAUSAL:
            return self._run_causal(ready, what, start)
        self._busy_since = start
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
            except FunctionError as e:
                raise FunctionError(f"{what} on worker {self.worker_id}: {e}") from None
            except (ArgumentRefused, CorruptRecord, ActorGone, ActorTableFull, InvalidArguments,
                    DependencyError):
                raise
            except Exception as e:
                raise FunctionError(f"{what} raised {type(e).__name__}: {e}",
                                     traceback.format_exc(), exception_names(type(e))) from None
            try:
                value = dumps(result)
            except Exception as e:
                raise FunctionError(f"the result of {what} could not be serialized: {e}",
                                     traceback.format_exc()) from None
            fields = self._result_fields(s, value, what)
            if s.sink and s.output_key:
                try:
                    self.cache.put(s.output_key, value)
                except Exception as e:
                    raise FunctionError(f"storing the result of {what} under "
                                         f"{s.output_key!r} failed: {e}") from None
        except FunctionError as e:
            if may_retry(s, e.types):     # the scheduler runs the call again, or fails it
                self._push.send(s.scheduler_address, "done", retry_request(
                    s, str(e), e.tb, self._call_logs(s, self._printed), e.types))
                self._printed = ""
                self._abort_others(s)
            else:
                self._fail(s, pb.EXECUTION_ERROR, str(e), e.tb)
            return
        except ArgumentRefused as e:
            self._fail(s, pb.UNSAFE_VALUE, f"{what} on worker {self.worker_id}: {e}")
            return
        except CorruptRecord as e:
            self._fail(s, pb.CORRUPT_RECORD, f"{what} on worker {self.worker_id}: {e}")
            return
        except InvalidArguments as e:
            self._fail(s, pb.INVALID_ARGUMENTS, f"{what}: {e}")
            return
        except DependencyError as e:
            self._fail(s, pb.DEPENDENCY_FAILED, str(e))
            return
        except ActorGone as e:          # executor/actors.py: the instance is not here
            self._fail(s, pb.ACTOR_DIED, f"{what} on worker {self.worker_id}: {e}")
            return
        except ActorTableFull as e:
            self._fail(s, pb.NO_RESOURCES, f"{what}: {e}")
            return
        except ValueTooLarge as e:
            self._fail(s, pb.VALUE_TOO_LARGE, f"{e} (worker {self.worker_id})")
            return
        except Interrupted as e:
            self._stopped(s, what, e)
            return
        finally:
            self._busy_total += time.monotonic() - start
            self._busy_since = None
            self.cache.session = None
        logs = self._call_logs(s, self._printed)
        report = session.report() if session is not None else None
        self._send_downstream(s, ready, value, logs=logs, session=report)
        if s.sink:
            self._keep_outcome(s.call_id, Outcome(pb.OK, value))   # for Future arguments
            self._push.send(s.response_address, "result",
                            pb.CallResult(request_id=s.call_id, status=pb.OK, logs=logs,
                                          session=report, **fields))
            self._call_done(s.scheduler_address, s.call_id)

    def _result_fields(self, s: pb.Schedule, value: bytes, what: str) -> Dict[str, Any]:
        """The result's CallResult fields; ValueTooLarge above the KVS's limit (big_results)."""
        try:
            return result_fields(self.cache, s, value, what, DEFAULT_MAX_VALUE_BYTES)
        except ValueTooLarge:
            raise
        except Exception as e:
            raise FunctionError(f"storing the large result of {what} in the KVS failed: "
                                f"{e}") from None

    def _send_downstream(self, s: pb.Schedule, ready: Ready, value: bytes,
                         causal: Optional[pb.CausalContext] = None, logs: str = "",
                         session: Optional[pb.Session] = None) -> None:
        for target in s.targets:
            trigger = pb.Trigger(call_id=s.call_id, source=s.function, target=target, value=value,
                                 logs=logs, session=session)
            if causal is not None:
                trigger.causal.CopyFrom(causal)
            for f in s.forward:
                if f.function == target:
                    trigger.schedule.CopyFrom(f)
                    trigger.schedule.forward.extend(s.forward)
                    if s.HasField("session"):
                        trigger.schedule.session.CopyFrom(s.session)
                    # the call's deadline, not a fresh one: what is left of this function's
                    trigger.schedule.timeout = max(0.0, ready.deadline - time.monotonic())
                    break
            address = s.locations[target]
            if address == self.address:
                self._local.append(("trigger", trigger))
            else:
                self._push.send(address, "trigger", trigger)

    # ---- causal calls (hydrocache/DESIGN.md) ----
    def _run_causal(self, ready: Ready, what: str, start: float) -> None:
        s: pb.Schedule = ready.schedule
        plan = s.causal
        n_up = len(s.upstreams)
        raw_args = list(ready.args[:len(ready.args) - n_up])
        upstream = list(ready.args[len(ready.args) - n_up:])
        contexts = [u[1] if isinstance(u, tuple) else pb.CausalContext() for u in upstream]
        results = [u[0] if isinstance(u, tuple) else u for u in upstream]
        inv = CausalInvocation(self.cache, s, contexts, ready.deadline - time.monotonic())
        self._busy_since = start
        try:
            try:
                fn = self._function(s.function, s.version, start + s.timeout)
                values, kwvalues = prepare(Ready(ready.call_id, ready.function, s,
                                                 raw_args + results, inputs=ready.inputs), what)
                refs = [v.key for v in values + list(kwvalues.values())
                        if isinstance(v, Reference)]
                reuse_key = (plan.call_id, s.function)
                reuse = self._reuse.get(reuse_key) if plan.reuse_attempt else None
                inv.bind(refs + (sorted(reuse.read_clocks) if reuse else []))
                digest = inputs_digest(raw_args, results)
                if reuse is not None and reuse.read_clocks == inv.read_clocks() \
                        and reuse.inputs_digest == digest:
                    value = reuse.value         # HB: same read versions, same inputs (4.3.5)
                else:
                    args = [resolve(inv, v) if isinstance(v, Reference) else v for v in values]
                    kwargs = {k: resolve(inv, v) if isinstance(v, Reference) else v
                              for k, v in kwvalues.items()}
                    self.invocation = inv
                    try:
                        result = self._call_function(s, fn, args, kwargs, ready.deadline)
                    finally:
                        self.invocation = None
                    value = dumps(result)
                    if plan.requested == pb.HB and plan.protocol == pb.OPT:
                        self._reuse[reuse_key] = Reusable(ready.deadline + 30.0,
                                                           inv.read_clocks(), digest, value)
                fields = self._result_fields(s, value, what)
                versions = []
                if s.sink:
                    extra = {s.output_key: value} if s.output_key else None
                    versions = inv.commit(self._writer, extra)
            except (CausalAbortError, Timeout, ArgumentRefused, Fenced, CorruptRecord,
                    InvalidArguments, DependencyError, ValueTooLarge):
                raise
            except FunctionError as e:
                raise FunctionError(f"{what} on worker {self.worker_id}: {e}") from None
            except ObjectNotFound as e:
                raise FunctionError(f"{what} on worker {self.worker_id}: {e}") from None
            except Exception as e:
                raise FunctionError(f"{what} raised {type(e).__name__}: {e}",
                                     traceback.format_exc()) from None
        except CausalAbortError as e:
            self._causal_abort(s, e)
            return
        except Fenced as e:
            # the scheduler released or failed this attempt, or granted the call's commit to
            # another: it owns the call's outcome, so the caller hears nothing from here
            log.info("%s: attempt %s fenced: %s", what, s.call_id, e)
            self._causal_abort(s, CausalAbortError(f"fenced: {e}"))
            return
        except ArgumentRefused as e:
            self._fail(s, pb.UNSAFE_VALUE, f"{what} on worker {self.worker_id}: {e}")
            return
        except CorruptRecord as e:
            self._fail(s, pb.CORRUPT_RECORD, f"{what} on worker {self.worker_id}: {e}")
            return
        except InvalidArguments as e:
            self._fail(s, pb.INVALID_ARGUMENTS, f"{what}: {e}")
            return
        except DependencyError as e:
            self._fail(s, pb.DEPENDENCY_FAILED, str(e))
            return
        except ValueTooLarge as e:
            self._fail(s, pb.VALUE_TOO_LARGE, f"{e} (worker {self.worker_id})")
            return
        except Timeout as e:     # a protocol stage (or the function's own wait) ran out of time
            stage = f"{e.stage} ({what}, worker {self.worker_id}, {pb.Protocol.Name(plan.protocol)})"
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
            return
        except FunctionError as e:
            self._fail(s, pb.EXECUTION_ERROR, str(e), e.tb)
            return
        except Interrupted as e:
            self._stopped(s, what, e)
            return
        finally:
            self._busy_total += time.monotonic() - start
            self._busy_since = None
        logs = self._call_logs(s, self._printed)
        self._send_downstream(s, ready, value, inv.context(), logs)
        if s.sink:
            stats = pb.CausalStats(protocol=plan.protocol, aborts=plan.attempt,
                                   remote_fetches=inv.remote_fetches, requested=plan.requested)
            stats.read_set.extend(vs.to_proto(inv.read_set))
            stats.writes.extend(vs.to_proto(vs.of_versions(versions)))
            self._push.send(s.response_address, "result", pb.CallResult(
                request_id=plan.call_id, status=pb.OK, causal=stats, logs=logs, **fields))
            self._call_done(s.scheduler_address, s.call_id)

    def _causal_abort(self, s: pb.Schedule, e: CausalAbortError) -> None:
        """Tell the scheduler (it retries or fails the call) and the attempt's other workers."""
        self._push.send(s.scheduler_address, "causal_abort", pb.CausalAbort(
            attempt_id=s.call_id, call_id=s.causal.call_id, reason=e.reason,
            function=s.function, new_keys=e.new_keys, stale_keys=e.stale_keys))
        for fn, address in s.locations.items():
            if fn != s.function:
                if address == self.address:
                    self.pending.abort(s.call_id)
                else:
                    self._push.send(address, "abort", pb.CallDone(call_id=s.call_id))

    def _expire_reuse(self, now: float) -> None:
        for key, entry in list(self._reuse.items()):
            if now > entry.expires:
                del self._reuse[key]

    def _fail(self, s: pb.Schedule, status: int, message: str, tb: str = "",
              stage: str = "") -> None:
        self._push.send(s.response_address, "result", pb.CallResult(
            request_id=s.causal.call_id or s.call_id, status=status, message=message,
            traceback=tb, stage=stage, logs=self._call_logs(s, self._printed)))
        self._printed = ""
        if s.consistency != pb.CAUSAL:
            self._keep_outcome(s.call_id, Outcome(status, message=message))
        self._abort_others(s, status, message)
        self._call_done(s.scheduler_address, s.call_id, ok=False)

    def _abort_others(self, s: pb.Schedule, status: int = 0, message: str = "") -> None:
        """The call's other functions (here or on other workers) drop it."""
        for fn, address in s.locations.items():
            if fn != s.function:
                if address == self.address:
                    self.pending.abort(s.call_id)
                else:
                    self._push.send(address, "abort", pb.CallDone(
                        call_id=s.call_id, status=status, message=message))

    def _stopped(self, s: pb.Schedule, what: str, e: Interrupted) -> None:
        """A function stopped by its time limit (TIMEOUT naming it) or by a cancel."""
        if e.status == pb.TIMEOUT:
            waiting = f"; {', '.join(repr(t) for t in s.targets)} waited for its result" \
                if s.targets else ""
            stage = (f"{what} to finish within {e.reason} on worker {self.worker_id} "
                     f"(it was stopped{waiting})")
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
        else:
            self._fail(s, pb.CANCELLED, f"{what} on worker {self.worker_id} was stopped: "
                                        f"{e.reason}")

    def _on_stalled(self, stalled: Any) -> None:
        s = stalled.schedule
        if s is None:
            log.warning("dropped result(s) for %s of call %s: its schedule never arrived",
                        stalled.function, stalled.call_id)
            return
        self._printed = ""
        stage = (f"upstream result(s) {stalled.missing} of function {s.function!r} "
                 f"(DAG {s.dag!r}) on worker {self.worker_id}")
        self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)

    # ---- user messages ----
    def send_user_message(self, dest: str, data: bytes) -> None:
        address = self._peers.get(dest)
        if address is None:
            key = worker_key(dest)
            entry = self.cache.get([key]).get(key)
            if entry is None or not isinstance(entry, memoryview) and \
                    not isinstance(entry, bytes):
                raise ValueError(f"lib.send: no executor worker has id {dest!r}")
            address = bytes(entry).decode("utf-8", "replace")
            self._check_peer(dest, address)
            self._peers[dest] = address
        message = pb.UserMessage(sender=self.worker_id, payload=data)
        if address == self.address:
            self._on_msg(message)
        else:
            self._push.send(address, "msg", message)

    def _check_peer(self, dest: str, address: str) -> None:
        """An authenticated worker sends user messages only to an address carrying the
        function key (its own): only its node (the cluster) writes the directory, and only a
        process holding the function secret completes a handshake with that key."""
        if self.credentials is None:
            return
        try:
            key = parse_address(address)[1]
        except ValueError:
            key = None
        if key != self.credentials.keypair.public:
            raise ValueError(f"lib.send: the directory entry of worker {dest!r} is not a "
                             f"cluster address ({address[:120]!r}); not sent")

    def receive_user_messages(self, timeout: float) -> List[Tuple[str, bytes]]:
        deadline = time.monotonic() + max(0.0, timeout)
        while not self._inbox:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timeout > 0:
                    raise Timeout(f"a message to worker {self.worker_id} (lib.recv)", timeout)
                return []
            if not self._pull.poll(int(remaining * 1000) + 1):
                continue
            frame = self._admitted(recv_frame(self._pull, copy=False))
            if frame is None:
                continue
            if frame[:1] == _MSG_CODE:
                try:
                    self._on_msg(pb.UserMessage.FromString(frame[1:]))
                except Exception as e:
                    log.warning("dropped a malformed user message: %s", e)
            else:
                self._backlog.append(frame)  # handled after the running function returns
        out = list(self._inbox)
        self._inbox.clear()
        return out


def main() -> None:
    import argparse

    from runtime.limits import raise_descriptor_limit
    from runtime.logs import configure_logging
    from runtime.process import announce_ready

    parser = argparse.ArgumentParser(prog="python -m executor.worker")
    parser.add_argument("--config", required=True, help="WorkerConfig as JSON")
    config = WorkerConfig.from_json(parser.parse_args().config)
    log_ = configure_logging(config.log_level, f"worker {config.worker_id}")
    raise_descriptor_limit()
    die_with_parent(config.parent_pid)
    try:
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
        worker = Worker(config, credentials)
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
