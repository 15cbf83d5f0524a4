"""The scheduler service: a thin event loop between sockets and the pure cores.

Contract: `Scheduler(config)` binds a PULL socket on a free port (`address`) for every kind
listed for schedulers in proto/cloudburst.proto, plus one for Anna's pushed registry updates.
- Registry requests (`scheduler/registry_requests.py`) are answered with a `reply`; a bad
  request is answered with its typed status (INVALID_DAG, DAG_NOT_FOUND, ...), never dropped.
- A `call` with `actor` set (an actor's creation, method call or kill) is
  `scheduler.actor_calls.ActorCalls`'s; the workers that host actors take plain calls only
  when no other worker is placeable, and the worker deaths below end their actors.
- A `call` is resolved against the registry (FUNCTION_NOT_FOUND / DAG_NOT_FOUND). When every
  worker is busy it waits in `dispatch.CallQueue` (NO_RESOURCES when the queue is full,
  TIMEOUT naming the queue past its deadline) until a worker is free, after any message or
  tick (`scheduler/queueing.py` carries the queue's decisions out). It is placed by `policy.choose_executors` over the live workers (NO_RESOURCES when
  there are none), sent as one `schedule` per function (a source runs on receipt: that is
  its trigger). The caller
  gets nothing until the result (one message fewer per call); a caller whose wait times out
  asks `where` and gets the call's placement, or its place in the queue (`accepted`), to
  name the stalled stage; a `cancel` of a waiting call takes it out of the queue.
- `lease_worker` grants, renews and releases clients' worker leases (the direct call path,
  `scheduler/lease_grants.py`, deciding in `scheduler/worker_leases.py`); leased slots count
  as their worker's load, and leases are revoked on expiry, on their worker's death and
  when calls wait in the queue; `cancel` naming a lease stops a direct call on its worker.
- Heartbeats feed `membership.ExecutorTable` (`scheduler/executor_events.py`): a worker's
  own, its node's vouching for its process, or its exit. Every `tick` seconds dead workers
  (the table's "Liveness" rules) are dropped and the calls in flight on them run again
  while their retry budget lasts, else fail at their caller with EXECUTION_ERROR naming the
  worker and why (the other functions of the call are told to `abort`). A handler that kept the loop from reading for more than
  `STALL_CREDIT` s is forgiven to every worker (`ExecutorTable.credit`).
- A causal call (Call.consistency == CAUSAL; HydroCache) is placed here (CT puts the whole
  DAG on one node with `policy.choose_one_node`; every worker needs a node cache) and then
  handed to `scheduler.causal_calls.CausalCalls`, which keeps one record per call, routes
  its attempts' `done` and `causal_abort` reports and the node caches' `cache_reply`s to its
  `scheduler.causal.CausalCall` coordinator and carries out the actions it returns. A node
  cache's `cache` request (CAUSAL_GRANT: may this attempt commit?) is answered at once: the
  coordinator grants one commit per call. LWW calls take the same path as before.
- A scheduler that has not yet heard any worker holds the calls it gets (for at most
  `warmup` after it started) rather than answering NO_RESOURCES: a scheduler
  restarted under a running cluster relearns the workers from their next heartbeats. One
  that dropped its last worker for silence holds the calls that find none in its queue for
  `heartbeat_timeout` (`ExecutorTable.hold_until`): the reports may only have stalled.
- Draining (executor autoscaling; `scheduler/executor_events.py`): a `drain` (cluster keys
  only) marks a node draining, or not, at once (the state of the highest epoch wins) and is forwarded to the node, which
  reports it back in every `node_status`, so every scheduler (a restarted one too) learns
  it. Calls are placed only on workers of nodes that are not draining. `status` lists every
  executor node (`NodeState`: drain state, calls this scheduler placed there and has not
  seen finish, the node's own running/queued) and `/metrics` has them as gauges.
- Large values: a call's by-reference argument keys (`Call.value_keys`) and its functions'
  (a worker's `values` report) are deleted when the call ends (`scheduler/lifecycle.py`,
  `scheduler/values.py`), off the loop. A retried call's new sink is its result's holder
  for `Future` arguments; consumers given the old one are sent a `moved`.
- A caller's `where`, `cancel` and `status` requests are `scheduler/caller_requests.py`'s.
- `serve()` runs until `stop()` or until the parent exits. `stop(graceful=True)` (SIGTERM)
  with `stop_grace` > 0 refuses every new call with SCHEDULER_STOPPING (its client sends it
  to another scheduler) and returns once the calls accepted here are over
  (`scheduler/stopping.py`).
- Authentication (`config.key_dir`; `runtime.auth`). The request socket is a CURVE server
  open to cluster, function and client keys (audience "all"); the registry-update and GC
  sockets admit cluster keys only; every push is a CURVE client; the scheduler reads the
  keys itself. A message's sender role is its connection's ZAP User-Id: a client may send
  only `CLIENT_KINDS` (what `cloudburst.Client` sends), a function key (an executor worker)
  only `FUNCTION_KINDS` (heartbeat, done, causal_abort); any other kind from them (a forged
  `keyset`, `result`, `schedule`...) is dropped, counted per (role, kind) and
  logged at WARNING at most once per `REFUSAL_LOG_PERIOD` per (role, kind). Connections the
  handshake refuses are counted too: by the ZAP authenticator (unknown keys, logged with the
  peer's address) and by a monitor of the request socket (peers that do not speak CURVE,
  e.g. a client without keys). The checks and counts are `scheduler/admission.py`. `status` reports both in its reply's `message` as JSON
  (`{"auth": true, "refused_connections": N, "dropped": [{"role", "kind", "count"}]}`), and
  `/metrics` as counters. Without `key_dir` every socket is plain and every kind is taken
  from anyone, as before.
"""
from __future__ import annotations

import logging
import os
import random
import time
from typing import Any, Callable, Dict, List, Optional

import zmq
from google.protobuf.message import DecodeError

import anna_core
from runtime.auth import AuthConfig, Security, credentials_of, role_of
from runtime.framing import FrameError, more, parse, recv_frame
from faas.keys import PREFIX
from runtime.sockets import PushCache, bind_pull
from faas.errors import CorruptRecord, NoResources
from runtime.http import TextEndpoint
from hydro_proto import cloudburst_pb2 as pb

from .actor_calls import ActorCalls
from .admission import CLIENT_KINDS, Admission
from .binding import bind_exactly as _bind_exactly
from .config import SchedulerConfig
from .gc import GcCoordinator
from .dag import Dag, foreign_arguments
from .dispatch import CallQueue, Waiting
from .window import Windows
from .executor_events import ExecutorEvents
from .membership import CallRecord, ExecutorTable
from .caller_requests import CallerRequests
from .causal_calls import CausalCalls
from .policy import choose_executors, choose_one_node, dag_relations
from .queueing import CallQueueing
from .registry import Registry
from .registry_requests import RegistryRequests, dag_from_record
from .lifecycle import CallLifecycle
from .lease_grants import WorkerLeasing
from .retries import caller_of_attempt
from .results import ResultHolders
from .value_deleter import ValueDeleter
from .schedule import build_schedules, references_by_function
from hydrocache.session import refusal
from .stats import CallStats
from .stopping import GracefulStop

__all__ = ["Scheduler", "CLIENT_KINDS"]

log = logging.getLogger("cloudburst.scheduler")


METRICS_PERIOD = 1.0      # seconds between refreshes of the /metrics text
MAX_WARM = 10000          # functions whose last worker is remembered (bounded)
STALL_CREDIT = 0.1        # a handler longer than this is forgiven to every worker's liveness

class Scheduler(RegistryRequests, CallQueueing, ExecutorEvents, WorkerLeasing,
                CallerRequests):
    """One scheduler process' state and loop; see the module contract."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._context = zmq.Context()
        # authentication: the keys are read here, and the ZAP handler runs before any bind
        self.auth = AuthConfig(config.key_dir) if config.key_dir else None
        self._security = Security.start(self._context, self.auth)
        creds = credentials_of(self._security)
        if config.bind_address:        # a restarted scheduler keeps its address
            self._pull, self.address = _bind_exactly(self._context, config.bind_address,
                                                     config.max_frame_bytes, creds)
        else:
            self._pull, self.address = bind_pull(self._context, config.ip, port=config.port,
                                                 ipc_dir=config.ipc_dir,
                                                 max_frame_bytes=config.max_frame_bytes,
                                                 auth=creds, audience="all")
        # Anna pushes registry updates here
        self._updates, self.update_address = bind_pull(
            self._context, config.ip, max_frame_bytes=config.max_frame_bytes,
            auth=creds)
        self._push = PushCache(self._context, auth=creds)
        self._kvs = anna_core.Client(config.kvs_address, timeout=2.0, ip=config.ip,
                                     context=self._context, auth=self.auth)
        # who may send what, and what the authentication refused (scheduler/admission.py)
        self.admission = Admission(self.address, self._security, self._pull)
        self.registry = Registry(self._kvs, self.update_address)
        self.table = ExecutorTable(config.heartbeat_timeout, config.unresponsive_timeout)
        self._rng = random.Random(config.seed)
        # calls that wait for a free worker, placed when one is (scheduler/dispatch.py)
        # how many calls each worker may hold: more when its calls are short (window.py)
        self._windows = Windows(config.worker_slots, config.max_worker_slots,
                                config.queued_work)
        self._queue = CallQueue(config.max_queued_calls, config.worker_slots, self.address,
                                enabled=config.queue_calls, window=self._windows.slots)
        self._dags: Dict[str, Any] = {}   # name -> (version, Dag, concurrent_with, neighbours)
        self._stopping = False
        self._graceful = GracefulStop(config.stop_grace)
        # a scheduler (re)started after its workers holds the calls it gets before it has
        # heard any worker, for up to `warmup` s, instead of NO_RESOURCES
        self._warming: Optional[float] = time.monotonic() + config.warmup
        self._deferred: List[bytes] = []
        # called once when the warm-up ends (python -m scheduler writes its --ready-file)
        self.on_warm: Optional[Callable[[int], None]] = None
        self._new_call_only = False     # the message just handled was a call freeing nothing
        self._warm: Dict[str, str] = {}     # function -> the worker it last ran on (policy)
        self._handlers = {
            "register_fn": self._register_fn, "register_dag": self._register_dag,
            "delete_dag": self._delete_dag, "delete_fn": self._delete_fn,
            "list": self._list, "info": self._info,
            "call": self._call, "heartbeat": self._heartbeat, "keyset": self._keyset,
            "done": self._done, "where": self._where, "cancel": self._cancel,
            "status": self._status,
            "causal_abort": self._causal_abort, "cache_reply": self._cache_reply,
            "cache": self._cache_request,
            "drain": self._drain, "node_status": self._node_status,
            "lease": self._client_lease,     # scheduler/lease_grants.py
            "values": self._value_keys,
        }
        self._init_worker_leases()        # the direct call path (scheduler/lease_grants.py)
        # causal calls in flight; `_causal` (caller's id -> record) is their one table, and
        # empty whenever none is in flight: the LWW path tests it before anything else
        self._causal_calls = CausalCalls(self._push, self.table, self.address,
                                         config.max_causal_retries, config.hb_snapshot)
        self._causal = self._causal_calls.records
        # what this scheduler saw of its calls (`status`, and `/metrics` when asked for)
        self.stats = CallStats()
        # retries (at least once) and client leases (scheduler/lifecycle.py)
        # (a retry waits in the call queue for a free worker, as a new call does)
        # large values of calls in flight, deleted off the loop when they end
        self._deleter = ValueDeleter(self._context, config.kvs_address, config.ip, self.auth)
        self.lifecycle = CallLifecycle(self._push.send, self._requeue, self.cancel_call,
                                       lambda: True, self.stats, self._causal_calls,
                                       config.max_retries, self._deleter.delete)
        self._results = ResultHolders()    # where calls' results are held (Future arguments)
        # actors: placement, routing of method calls, kills (scheduler/actor_calls.py)
        self._actors = ActorCalls(self._push, self.table, self._kvs, self.stats, self.address,
                                  config.call_timeout, self._rng)
        self._metrics_text = ""
        self.metrics = TextEndpoint(config.ip, config.metrics_port,
                                    {"/metrics": lambda: self._metrics_text}) \
            if config.metrics_port is not None else None
        if self.metrics is not None:
            self._publish_metrics()
        # dependency GC: the live caches, republished by the loop every tick for the GC thread
        self._live_caches: List[str] = []
        self._gc = GcCoordinator(self._context, config.kvs_address, lambda: self._live_caches,
                                 config.gc_period, ip=config.ip, auth=creds,
                                 kvs_auth=self.auth).start() \
            if config.gc_period > 0 else None

    def _end_warmup(self) -> None:
        """Heard from a worker, or waited `warmup`: place the deferred calls, and say the
        scheduler is ready for traffic (`on_warm`, given the live workers' count)."""
        self._warming = None
        live = len(self.table.live())
        log.info("warm-up over: %d live executor worker(s)%s; %d held call(s) placed", live,
                 "" if live else f" after waiting {self.config.warmup:g} s",
                 len(self._deferred))
        if self.on_warm is not None:
            self.on_warm(live)
        deferred, self._deferred = self._deferred, []
        for payload in deferred:
            self._call(payload)

    # ---- loop ----
    def stop(self, graceful: bool = False) -> None:
        """Stop serving: at once, or (`graceful`) as `scheduler/stopping.py` says."""
        if graceful and self.config.stop_grace > 0:
            self._graceful.begin(time.monotonic())
            log.info("stopping: new calls are refused; exiting once the %d call(s) in flight "
                     "are over (at most %g s)", self._in_flight(), self.config.stop_grace)
        else:
            self._stopping = True

    def _in_flight(self) -> int:
        """Calls accepted here and not over: placed, queued or held."""
        return (sum(w.outstanding for w in self.table.live()) + len(self._queue)
                + len(self._deferred))

    def serve(self, tick: float = 0.1) -> None:
        # One blocking recv per message (no poll, no exception) keeps the per-call cost low;
        # registry updates and liveness are handled every `tick`.
        self._pull.setsockopt(zmq.RCVTIMEO, int(tick * 1000))
        next_tick = time.monotonic() + tick
        next_metrics = next_tick
        # authenticated: a frame (not bytes) carries its sender's role
        copy = self._security is None
        while not self._stopping:
            try:
                frame = recv_frame(self._pull, copy=copy)
            except zmq.Again:
                frame = None
            if frame is not None:
                start = time.monotonic()
                self._new_call_only = False
                self._dispatch(frame)
                # a call done, a worker joined, a drain lifted... (a new call that reports
                # no finished call frees nothing: with many waiting, not pumping after each
                # one is most of the scheduler's time at saturation)
                if self._queue and not self._new_call_only:
                    self._pump(time.monotonic())
                took = time.monotonic() - start
                if took > STALL_CREDIT:    # heartbeats queued meanwhile were not read yet
                    self.table.credit(took)
                    self.lifecycle.credit(took)
            now = time.monotonic()
            if now >= next_tick:
                next_tick = now + tick
                while more(self._updates):
                    self._on_registry_update(recv_frame(self._updates))
                self.admission.check_handshakes(now)
                self._expire(now)
                self._pump(now)
                self._live_caches = sorted({w.cache_address for w in self.table.live()
                                            if w.cache_address})
                if self._causal or self._causal_calls.holding():
                    self._causal_calls.tick(now)
                self.lifecycle.tick(now)
                self._lease_tick(now)
                if self._warming is not None and (self.table.live() or now >= self._warming):
                    self._end_warmup()
                if self.metrics is not None and now >= next_metrics:
                    next_metrics = now + METRICS_PERIOD
                    self._publish_metrics()
                if self._graceful.finished(now, self._in_flight()):
                    log.info("stopped after refusing %d call(s)", self._graceful.refusals)
                    break
                if self.config.parent_pid and os.getppid() != self.config.parent_pid:
                    log.warning("parent process exited; stopping")
                    break
        self.close()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        if self._gc is not None:
            self._gc.stop()
        self._deleter.close()
        self._kvs.close()
        self._push.close()
        self.admission.close()
        self._pull.close(0)
        self._updates.close(0)
        if self._security is not None:
            self._security.stop()
        self._context.term()

    def _dispatch(self, frame: Any) -> None:
        kind = "?"
        try:
            kind, payload = parse(frame)
            if not self.admission.admits(frame, kind, payload):
                return
            if kind == "lease_worker":    # a lease is its client's: the sender's role matters
                return self._lease_worker(payload, role_of(frame) or "")
            handler = self._handlers.get(kind)
            if handler is None:
                raise FrameError(f"kind {kind!r} is not for a scheduler")
            handler(payload)
        except CorruptRecord as e:       # a damaged registry record: the caller learns which
            log.error("%r failed: %s", kind, e)
            self._answer_failure(kind, payload, e)
        except (FrameError, DecodeError) as e:     # bad input is dropped, never an error
            log.warning("dropped a malformed %r message: %s", kind, e)
        except Exception as e:
            log.exception("error while handling a %r message", kind)
            self._answer_failure(kind, payload, e)

    _REQUESTS = {"register_fn": pb.RegisterFunction, "register_dag": pb.RegisterDag,
                 "delete_dag": pb.NameRequest, "delete_fn": pb.NameRequest,
                 "list": pb.NameRequest, "info": pb.NameRequest,
                 "where": pb.NameRequest}

    def _answer_failure(self, kind: str, payload: Any, error: Exception) -> None:
        """Never fail silently: a request that raised gets an answer with the reason:
        CORRUPT_RECORD naming the key for a damaged registry record, INTERNAL otherwise."""
        message = f"scheduler {self.address} failed handling {kind!r}: {type(error).__name__}: {error}"
        status = pb.INTERNAL
        if isinstance(error, CorruptRecord):
            status, message = pb.CORRUPT_RECORD, str(error)
        try:
            if kind == "call":
                call = pb.Call.FromString(payload)
                self._fail(call, status, message)
            elif kind in self._REQUESTS:
                req = self._REQUESTS[kind].FromString(payload)
                self._reply(req.response_address, pb.Reply(request_id=req.request_id,
                                                           status=status, message=message))
        except Exception:
            log.exception("could not report the failure to the caller")

    # ---- registry requests: scheduler/registry_requests.py;
    # ---- executors' reports and lost workers: scheduler/executor_events.py
    # ---- calls (the call queue's glue: scheduler/queueing.py) ----
    def _refuse(self, call: pb.Call) -> None:
        """A stopping scheduler's answer to a new call: it never starts here."""
        for call_id in call.finished:           # the client's notes still count
            self._finish_one(self.lifecycle.finished(call_id))
        self._graceful.refused(time.monotonic())
        self._fail(call, pb.SCHEDULER_STOPPING, f"the scheduler at {self.address} is "
                   f"stopping; the call did not start there")

    def _fail(self, call: pb.Call, status: int, message: str) -> None:
        self._push.send(call.response_address, "result",
                        pb.CallResult(request_id=call.request_id, status=status, message=message))

    def _call(self, payload: bytes) -> None:
        if self._graceful.refuses():
            return self._refuse(pb.Call.FromString(payload))
        if self._warming is not None:
            if not self.table.live() and time.monotonic() < self._warming:
                self._deferred.append(payload)   # a fresh scheduler: workers not heard yet
                return
            self._end_warmup()
        call = pb.Call.FromString(payload)
        if call.output_key.startswith(PREFIX):   # the registry and worker directory live there
            return self._fail(call, pb.BAD_REQUEST, (
                f"output_key {call.output_key[:120]!r}: keys starting with {PREFIX!r} are "
                f"reserved for Cloudburst"))
        refused = refusal(call.session) if call.HasField("session") else None
        if refused:
            return self._fail(call, pb.BAD_REQUEST, f"call refused: {refused}")
        for call_id in call.finished:
            self._finish_one(self.lifecycle.finished(call_id))
        self._new_call_only = not call.finished
        if call.value_keys:          # its arguments by reference: deleted when it is over
            self.lifecycle.values_of(call.request_id, call.value_keys, time.monotonic(),
                                     call.timeout or self.config.call_timeout)
        # a producing call still waiting in the queue is placed first (first in, first out)
        for ref in [r for r in self._results.stamp(call, time.monotonic())
                    if r.call_id not in self._queue][:1]:
            return self._unknown_result(call, ref)
        if call.HasField("actor"):
            self._actors.call(call, time.monotonic())
            record = self.table.call(call.request_id)    # placed: its worker holds its result
            for wid in (record.placement.values() if record is not None else ()):
                self._results.placed(call.request_id, self.table.address(wid) or "",
                                     time.monotonic())
            return
        if call.dag:
            record = self.registry.dag(call.dag)
            if record is None:
                return self._fail(call, pb.DAG_NOT_FOUND,
                                  f"call_dag: no DAG named {call.dag!r} is registered")
            if len(record.functions) > self.config.max_dag_functions:
                return self._fail(call, pb.INVALID_DAG, (
                    f"call_dag: DAG {call.dag!r} has {len(record.functions)} functions; this "
                    f"scheduler runs at most {self.config.max_dag_functions} "
                    f"(max_dag_functions)"))
            cached = self._dags.get(call.dag)
            if cached is None or cached[0] != record.version:
                dag = dag_from_record(record)
                cached = self._dags[call.dag] = (record.version, dag, *dag_relations(dag))
            _, dag, concurrent, neighbours = cached
        else:
            dag = Dag.create(call.function, [call.function])
            concurrent, neighbours = None, None
        versions: Dict[str, str] = {}
        records = []
        for fn in dag.functions:
            f = self.registry.function(fn)
            if f is None:
                where = f" (used by DAG {call.dag!r})" if call.dag else ""
                return self._fail(call, pb.FUNCTION_NOT_FOUND,
                                  f"no function named {fn!r} is registered{where}")
            versions[fn] = f.version
            records.append(f)
        foreign = foreign_arguments(dag, call.args)
        if foreign:
            return self._fail(call, pb.INVALID_ARGUMENTS, foreign)
        now = time.monotonic()
        self.stats.started(call.request_id, dag.name, now)
        timeout = call.timeout if call.timeout > 0 else self.config.call_timeout
        self.lifecycle.begin(call, records, (dag, versions, concurrent, neighbours), now, timeout)
        self._carry(self._queue.offer(Waiting(call.request_id, dag.name, now, now + timeout,
                                              (call, dag, versions, concurrent, neighbours)),
                                      self._placeable(), now, self.table.hold_until()), now)

    def _unknown_result(self, call: pb.Call, ref: Any) -> None:
        self._fail(call, pb.DEPENDENCY_FAILED, (
            f"{call.dag or call.function}: the result of {ref.what or 'call ' + ref.call_id} "
            f"is an argument, and the scheduler at {self.address} has no record of where "
            f"it is held: that call was sent to another scheduler, failed before it was "
            f"placed, is causal, or was placed more than {self._results.ttl:g} s ago"))

    def _start(self, call: pb.Call, dag: Dag, versions: Dict[str, str], concurrent: Any,
               neighbours: Any, timeout: float) -> None:
        """Place a call and send its schedules; its workers get `timeout` seconds."""
        for ref in self._results.stamp(call, time.monotonic())[:1]:   # it waited: again
            self.stats.finished(call.request_id, False, time.monotonic())
            return self._unknown_result(call, ref)
        if call.consistency == pb.CAUSAL:
            return self._causal_call(call, dag, versions, concurrent, neighbours, timeout)
        placement = self._place(call, dag, choose_executors, concurrent, neighbours, self._warm)
        if placement is None:
            self.stats.finished(caller_of_attempt(call.request_id), False, time.monotonic())
            self.lifecycle.finished(call.request_id)
            return
        if len(self._warm) > MAX_WARM:
            self._warm.clear()
        self._warm.update(placement)      # this function's warm worker (scheduler/policy.py)
        addresses = {wid: self.table.address(wid) for wid in set(placement.values())}
        for address, schedule in build_schedules(call, dag, placement, addresses, versions,
                                                 self.address, timeout):
            self.lifecycle.mark(schedule, call.request_id)
            schedule.finished.extend(call.finished)   # their workers need send no `done`
            self._push.send(address, "schedule", schedule)
        # a retry moves the result: the consumers given the old holder are told the new one
        caller = caller_of_attempt(call.request_id)
        for address in self._results.placed(caller, addresses[placement[dag.sink()]],
                                            time.monotonic()):
            self._push.send(address, "moved", pb.CallRef(
                call_id=caller, holder=addresses[placement[dag.sink()]]))
        self._results.watch(call, {fn: addresses[w] for fn, w in placement.items()})
        self.table.start_call(CallRecord(call.request_id, dag.name, dict(placement),
                                         call.response_address, time.monotonic() + timeout + 5))

    def _done(self, payload: bytes) -> None:
        done = pb.CallDone.FromString(payload)
        now = time.monotonic()
        if done.HasField("retry"):     # a function raised an exception its call may retry
            # that attempt is over (its worker aborted the rest): its workers are free again,
            # not held until its deadline, whether it runs again or fails
            self._finish_one(done.retry.request_id)
            return self.lifecycle.exception(done, now)
        finished = [(cid, True) for cid in ([done.call_id] if done.call_id else [])]
        finished += [(cid, True) for cid in done.call_ids]
        finished += [(cid, False) for cid in done.failed_ids]
        if done.worker_id:
            self._windows.observe(done.worker_id, len(finished), done.busy_seconds)
        for call_id, ok in finished:          # every report counts, whichever field it used
            self.stats.finished(caller_of_attempt(call_id), ok, now)
            self.lifecycle.finished(call_id)
            self._finish_one(call_id)
            self._actors.finished(call_id, ok)

    def _value_keys(self, payload: bytes) -> None:
        """A worker passed a result downstream by reference (scheduler/values.py)."""
        report = pb.ValueKeys.FromString(payload)
        self.lifecycle.values_of(report.call_id, report.keys, time.monotonic(),
                                 self.config.call_timeout,
                                 live=self.table.call(report.call_id) is not None)

    def _finish_one(self, call_id: str) -> None:
        if not (self._causal and self._causal_calls.done(call_id, time.monotonic())):
            self.table.finish_call(call_id)

    # ---- placement; causal calls (scheduler/causal_calls.py carries them out) ----
    def _place(self, call: pb.Call, dag: Dag, place: Any, concurrent: Any,
               neighbours: Any, warm: Optional[Dict[str, str]] = None
               ) -> Optional[Dict[str, str]]:
        """function -> worker id by the policy `place`; None (and the caller told
        NO_RESOURCES) when no worker can take the call."""
        colocate = self.config.colocate_chains
        try:
            placement = place(dag.functions, references_by_function(call), self._placeable(),
                              self.table.node_keys(), self._rng,
                              busy_outstanding=self.config.busy_outstanding,
                              busy_utilization=self.config.busy_utilization,
                              concurrent_with=concurrent if colocate else None,
                              neighbours=neighbours if colocate else None,
                              **({"warm": warm} if warm is not None else {}))
        except NoResources as e:
            self._fail(call, pb.NO_RESOURCES, f"{dag.name}: {e}")
            return None
        self._placing(placement, call.response_address)   # other clients' leases there end
        return placement

    def _causal_call(self, call: pb.Call, dag: Dag, versions: Dict[str, str],
                     concurrent: Any, neighbours: Any, timeout: float) -> None:
        if call.request_id in self._causal:
            return   # a duplicate of a call in flight
        place = choose_one_node if call.protocol == pb.CT else choose_executors
        if concurrent is None and len(dag.functions) > 1:
            concurrent, neighbours = dag_relations(dag)
        placement = self._place(call, dag, place, concurrent, neighbours)
        if placement is None:
            return
        caches: Dict[str, str] = {}
        for fn, wid in placement.items():
            cache = self.table.cache_address(wid)
            if not cache:
                return self._fail(call, pb.NO_RESOURCES, (
                    f"{dag.name}: executor worker {wid} reports no node cache address; causal "
                    "calls need HydroCache on every node"))
            caches[fn] = cache
        self._causal_calls.begin(call, dag, versions, placement, caches, timeout,
                                 time.monotonic())

    def _causal_abort(self, payload: bytes) -> None:
        self._causal_calls.abort(pb.CausalAbort.FromString(payload), time.monotonic())

    def _cache_reply(self, payload: bytes) -> None:
        self._causal_calls.cache_reply(pb.CacheResponse.FromString(payload), time.monotonic())

    def _cache_request(self, payload: bytes) -> None:
        """A node cache's request to the scheduler: only CAUSAL_GRANT (a sink's commit)."""
        req = pb.CacheRequest.FromString(payload)
        if req.op != pb.CAUSAL_GRANT:
            log.warning("dropped a cache request with op %s (a scheduler answers only "
                        "CAUSAL_GRANT)", req.op)
            return
        self._causal_calls.grant(req, time.monotonic())
