"""The executor node: the node cache service and the supervisor of the node's worker processes.

Contract:
- `ExecutorNode(config, preforked)` binds a PULL socket for `cache` requests from its workers
  and one for Anna's pushed UPDATEs, then `start_workers()` spawns `config.workers` worker
  processes (`python -m executor.worker`, or children forked at the node's start:
  `executor/prefork.py`), each with a unique id, and waits for them to be ready.
- The node cache is the one place where the node's reads and writes pass. Its plain side
  (CACHE_GET, CACHE_PUT, Anna's pushed LWW updates) is `executor/lww_service.py`, the I/O
  around the pure, bounded `executor/cache.py`: a GET hit is answered from memory at once; a
  miss is fetched from Anna on the fetch threads (`runtime.fairpool`, in bounded pieces that
  take turns between requests), cached, and the key subscribed so that Anna's pushes keep it
  fresh; a PUT is written through to Anna (an LWW lattice with this node's timestamp) and
  cached before it is acknowledged; a write to Anna (a PUT, a causal commit) is acknowledged
  once `config.write_quorum` replicas hold it (every replica by default). The plain cache
  keeps at most `config.plain_cache_bytes` / `plain_cache_entries`, evicting the least
  recently used keys (and unsubscribing them). A GET carrying its caller's session treats a
  copy older than the key's floor as a miss and reads it at least that new; every plain
  entry of an answer carries its LWW timestamp. Anna errors reach the worker as a failed
  `CacheResponse` naming the key; an LWW read of a causal key is an error saying so.
- Causal keys and every CAUSAL_* operation belong to HydroCache (`hydrocache/service.py`, the
  I/O around the pure core `hydrocache/node_cache.py`): the node's loop hands it those
  requests and Anna's pushed MULTI_CAUSAL values, polls its sockets (answers from other caches,
  results of its Anna I/O on the fetch pool), ticks it every iteration and wakes up by its
  next deadline, and sweeps it (temporary versions, capacity) every `heartbeat_period`.
- Every `heartbeat_period` the node reports its key set to every scheduler (when it changed,
  and at least every 10 periods).
- A worker process that exits is restarted under the same id, with back-off (a function that
  kills its worker every time is retried ever more slowly, and the node keeps serving). The
  node tells every scheduler at once, so the calls placed on the dead worker fail with an
  error naming it instead of waiting for missed heartbeats.
- Liveness is not CPU: every `heartbeat_period` the node vouches to every scheduler for each
  worker whose process is running (a `WorkerStatus` with the worker's id and no address), so
  a worker that holds the interpreter in a long C call (unpickling a large argument) and
  misses its own heartbeats is not declared dead (`scheduler/membership.py`, "Liveness").
  Workers also send their heartbeats to the node; a worker whose process runs but that has
  not heartbeaten for `unresponsive_timeout` is killed (SIGKILL) and restarted like any
  worker that exits. A worker also tells its node when a function starts (with the moment its
  time limit passes) and ends (a far deadline's end comes with the worker's next heartbeat,
  `WorkerStatus.ended_run`; `executor/liveness.py`); a function still running two heartbeat periods past its
  limit, on a worker not heard from since the limit (stuck in C code, deaf to its time-limit
  signal), is reported to every scheduler at once (`WorkerStatus.overran`), which fails its
  call with `Timeout` then; the worker's guard kills it a grace period later
  (`executor/guard.py`) and the node restarts it. Workers die with their node (`executor/worker.py`: PR_SET_PDEATHSIG), so
  a node that is restarted starts new workers and leaves no orphans.
- Authentication (`config.key_dir`; `runtime.auth`): the node reads the cluster's keys; its
  request socket (workers, schedulers, other node caches) admits cluster and function keys,
  HydroCache's reply socket only cluster keys (a client key is refused at the handshake);
  every push (replies, heartbeats, vouching, key sets, cache-to-cache requests) is a CURVE
  client. The socket Anna pushes updates to and the node's `anna_core.Client`s use the same
  keys (the KVS shares the key directory).
- Least privilege (`executor/privilege.py`, `executor/permissions.py`): workers run user
  code, so they get no cluster secret: the node hands each the function role's key pair on
  its stdin (a pipe) and, when the node is root, starts it under `config.worker_user`; with
  `config.worker_host`, a worker host runs them instead, where the node's key directory is
  not (`executor/workerhost.py`; the node drives it through `executor/backends.py`). The
  node acts for its workers with a client's rights: from a function key it takes only
  `heartbeat` and the cache operations workers send, and a write of a key under `__anna__/`
  or `__cloudburst/` is answered NOT_PERMITTED naming the key (the worker raises
  `NotPermitted`). What a worker wrote as the cluster before, its directory entry
  (`__cloudburst/worker/<id>` -> its address, for `lib.send`), the node writes when the
  worker is ready. Registry keys (`__cloudburst/`) read through the cache are read from
  Anna every time, never cached (a worker fetching a newly registered function sees it).
- Draining (executor autoscaling, `cloudburst/autoscaler.py`). A `drain` message
  (`DrainRequest`, from a scheduler, cluster keys only) sets the node's drain state; the
  state of the highest epoch wins. Every `heartbeat_period`, and at once when the state
  changes, the node sends every scheduler one `node_status` snapshot: draining, its epoch,
  workers running, and the functions running and invocations queued on them (from the
  workers' last heartbeats). Schedulers stop placing calls on a draining node; the node
  itself still runs every call that reaches it (one placed before the drain was known), so a
  drain never loses a call. A restarted scheduler relearns the drain from these snapshots.
- `serve()` runs until `stop()`; then workers get SIGTERM (then SIGKILL) and are reaped.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from typing import Any, Dict, List, Optional

import zmq

from anna_core.wire import tuple_to_lattice
from runtime.process import ManagedProcess, RestartPolicy, Supervisor
from runtime.auth import (FUNCTION, AuthConfig, Security, credentials_of, encode_handoff,
                          function_credentials, role_of)
from runtime.fairpool import FairPool
from runtime.framing import FrameError, more, parse, recv_frame
from faas.keys import PREFIX as REGISTRY_PREFIX, worker_key
from runtime.sockets import PushCache, bind_pull
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb

from hydrocache.service import HydroCacheService

from .backends import worker_backend
from .liveness import RunningCalls
from .config import NodeConfig, WorkerConfig
from .lww_service import LwwCacheService, send_reply
from .permissions import refusal
from .prefork import Preforked
from .run_slot import RunSlots, sync

__all__ = ["ExecutorNode"]

log = logging.getLogger("cloudburst.node")



class ExecutorNode:
    """One executor node process; see the module contract."""

    def __init__(self, config: NodeConfig, preforked: Optional[Preforked] = None) -> None:
        self.config = config
        self._context = zmq.Context()
        # authentication: the keys are read here, and the ZAP handler runs before any bind
        self.auth = AuthConfig(config.key_dir) if config.key_dir else None
        self._security = Security.start(self._context, self.auth)
        creds = self._credentials = credentials_of(self._security)
        # what its workers run with: the function pair (handed over a pipe), another uid
        # (and the authorized clients' public keys: their direct calls, executor/direct_calls.py)
        self._handoff = None if creds is None else encode_handoff(function_credentials(
            creds.keypair.public, self.auth.function_keypair(), creds.domain, creds.allowed),
            hide=[os.path.abspath(config.key_dir)])
        # where workers run: the node's children (another uid or Landlock), or a worker host
        self._backend, self._worker_ipc_dir = worker_backend(config, self._context, creds,
                                                             self.auth, self._handoff, preforked)
        # what local workers run, read from shared slots (executor/run_slot.py); a worker
        # host's workers tell it by message
        self._slots = None if config.worker_host else RunSlots(self._backend.uid,
                                                               self._backend.gid)
        self._requests, self.cache_address = bind_pull(self._context, config.ip,
                                                       ipc_dir=config.ipc_dir, auth=creds,
                                                       audience=FUNCTION)
        # Anna pushes subscribed keys here
        self._updates, self.update_address = bind_pull(
            self._context, config.ip, auth=creds)
        self._push = PushCache(self._context, auth=creds)
        self._pool = FairPool(max(1, config.fetch_threads), "cache-fetch")
        self.plain = LwwCacheService(config.node_id, config.kvs_address, context=self._context,
                                     credentials=creds, auth=self.auth,
                                     update_address=self.update_address, ip=config.ip,
                                     submit=self._pool.submit,
                                     fetch_threads=config.fetch_threads,
                                     write_quorum=config.write_quorum, push=self._push,
                                     uncached_prefix=REGISTRY_PREFIX,
                                     max_bytes=config.plain_cache_bytes,
                                     max_entries=config.plain_cache_entries)
        self.causal = HydroCacheService(config.node_id, self.cache_address, self.update_address,
                                        config.kvs_address, self._context, self._pool.submit,
                                        self._push, ip=config.ip,
                                        capacity_bytes=config.cache_bytes,
                                        ipc_dir=config.ipc_dir, auth=creds,
                                        kvs_auth=self.auth, write_quorum=config.write_quorum)
        self.workers: List[ManagedProcess] = []
        self.worker_info: List[Dict[str, Any]] = []
        self.supervisor = Supervisor(RestartPolicy(initial=config.restart_backoff,
                                                   maximum=config.restart_backoff_max),
                                     on_ready=self._worker_ready,
                                     restart=config.restart_workers)
        self._worker_ids: Dict[str, str] = {}     # process name -> worker id
        self._heard: Dict[str, float] = {}        # worker id -> its last heartbeat to the node
        self._calls = RunningCalls()              # what each worker runs, until when
        self._load: Dict[str, "tuple[int, int]"] = {}   # worker id -> (running, queued)
        self.draining = False                     # schedulers place no new call here
        self.drain_epoch = 0                      # of `draining` (highest seen wins)
        self._stopping = False

    # ---- workers ----
    def start_workers(self) -> List[Dict[str, Any]]:
        for i in range(self.config.workers):
            wid = f"{self.config.node_id}.w{i}-{uuid.uuid4().hex[:6]}"
            wc = WorkerConfig(worker_id=wid, node_id=self.config.node_id,
                              kvs_address=self.config.kvs_address,
                              cache_address=self.cache_address,
                              scheduler_addresses=list(self.config.scheduler_addresses),
                              ip=self.config.ip, heartbeat_period=self.config.heartbeat_period,
                              log_level=self.config.log_level, parent_pid=os.getpid(),
                              ipc_dir=self._worker_ipc_dir,
                              function_time_limit=self.config.function_time_limit,
                              unix_links=self.config.unix_links,
                              auth=self._handoff is not None,
                              run_slot=self._slots.create(wid) if self._slots else "")
            p = self._backend.make(f"worker-{wid}", wc)
            self._worker_ids[p.name] = wid
            self.workers.append(p.spawn())
        self._backend.wait_ready(self.workers, self.config.worker_start_timeout)
        self.worker_info = [dict(p.info, pid=p.pid) for p in self.workers]
        for info in self.worker_info:
            self._publish(info["worker_id"], info["address"])
        now = time.monotonic()
        for p in self.workers:
            self.supervisor.watch(p, now)
        return self.worker_info

    # ---- loop ----
    def stop(self) -> None:
        self._stopping = True

    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._requests, zmq.POLLIN)
        poller.register(self._updates, zmq.POLLIN)
        for sock in self.causal.sockets:
            poller.register(sock, zmq.POLLIN)
        causal = self.causal
        period = self.config.heartbeat_period
        next_tick = time.monotonic()
        reported_version, periods_since_report = None, 0
        while not self._stopping:
            due = next_tick
            wakeup = causal.next_wakeup()        # HydroCache's next deadline or re-read
            if wakeup is not None and wakeup < due:
                due = wakeup
            wait = max(0.0, due - time.monotonic())
            for sock, _ in poller.poll(int(wait * 1000) + 1):
                if sock is self._requests or sock is self._updates:
                    requests = sock is self._requests
                    for _ in range(1000):
                        if requests:                # copy=False: the sender's role
                            frame = recv_frame(sock, copy=False)
                            self._on_request(frame.bytes, role_of(frame))
                        else:
                            self._on_update(recv_frame(sock))
                        if not more(sock):
                            break
                else:
                    causal.on_readable(sock)
            now = time.monotonic()
            causal.tick(now)
            if now >= next_tick:
                next_tick = now + period
                periods_since_report += 1
                self.causal.sweep(now)
                keyset_version = (self.plain.keyset_version, self.causal.keyset_version())
                if keyset_version != reported_version or periods_since_report >= 10:
                    reported_version = keyset_version
                    periods_since_report = 0
                    self._report_keys()
                self._check_workers(now)
                self._vouch(now)
                self._report_overruns(now)
                self._report_status()
                if self.config.parent_pid and os.getppid() != self.config.parent_pid:
                    log.warning("parent process exited; stopping")
                    break
        self.close()

    def close(self) -> None:
        self._backend.stop(self.workers, timeout=5.0)
        self._backend.close()
        if self._slots is not None:
            self._slots.close()
        self._pool.shutdown(wait=True)
        self.causal.close()
        self.plain.close()
        self._push.close()
        self._requests.close(0)
        self._updates.close(0)
        if self._security is not None:
            self._security.stop()
        self._context.term()

    def _report_overruns(self, now: float) -> None:
        """Tell the schedulers of every function stuck past its time limit (module contract)."""
        if self._slots is not None:
            for p in self.workers:
                wid = self._worker_ids[p.name]
                sync(self._calls, wid, p.pid if p.running() else None, self._slots.read(wid))
        for wid, call_id in self._calls.overran(now, 2 * self.config.heartbeat_period):
            log.warning("worker %s: call %s is past its time limit and the worker is silent "
                        "(stuck in C code); failing the call, the worker will be killed",
                        wid, call_id)
            status = pb.WorkerStatus(worker_id=wid, node_id=self.config.node_id,
                                     call_id=call_id, overran=True)
            for address in self.config.scheduler_addresses:
                self._push.send(address, "heartbeat", status)

    def _check_workers(self, now: float) -> None:
        """Restart exited workers (with back-off) and tell the schedulers at once."""
        self._backend.poll()
        for exit in self.supervisor.check(now):
            self._calls.forget(self._worker_ids[exit.process.name])
            status = pb.WorkerStatus(worker_id=self._worker_ids[exit.process.name],
                                     node_id=self.config.node_id, exited=True,
                                     exit_code=exit.code if exit.code is not None else -1)
            for address in self.config.scheduler_addresses:
                self._push.send(address, "heartbeat", status)

    def _vouch(self, now: float) -> None:
        """Vouch for every worker whose process runs; kill one silent for too long."""
        limit = self.config.worker_unresponsive_timeout()
        for p in self.workers:
            wid = self._worker_ids[p.name]
            if not p.running():
                self._heard.pop(wid, None)        # its restart starts with a fresh clock
                continue
            heard = self._heard.setdefault(wid, now)
            if now - heard > limit:
                log.error("worker %s has not heartbeaten for %.0f s though its process runs; "
                          "killing it (it will be restarted)", wid, now - heard)
                p.signal(signal.SIGKILL)
                self._heard.pop(wid, None)
                continue
            status = pb.WorkerStatus(worker_id=wid, node_id=self.config.node_id)
            for address in self.config.scheduler_addresses:
                self._push.send(address, "heartbeat", status)

    def _on_worker_heartbeat(self, payload: bytes) -> None:
        status = pb.WorkerStatus.FromString(payload)
        if status.worker_id in self._worker_ids.values():
            now = self._heard[status.worker_id] = time.monotonic()
            self._calls.heard(status.worker_id, now)
            if status.call_id:             # a function's start or end, from the main thread
                if status.running:
                    self._calls.started(status.worker_id, status.call_id, status.deadline,
                                        status.run)
                else:
                    self._calls.ended(status.worker_id, status.call_id, status.run)
                return
            if status.ended_run:           # a function's end, told by the heartbeat thread
                self._calls.ended_run(status.worker_id, status.ended_run)
            self._load[status.worker_id] = (min(1, status.running), status.queued)

    def _on_drain(self, payload: bytes) -> None:
        """A scheduler forwards a drain (or undrain); the highest epoch wins."""
        req = pb.DrainRequest.FromString(payload)
        if req.node_id != self.config.node_id or req.epoch < self.drain_epoch:
            return
        changed = req.draining != self.draining
        self.draining, self.drain_epoch = req.draining, req.epoch
        if changed:
            log.info("node %s %s (epoch %d)", self.config.node_id,
                     "is draining: schedulers place no new call here" if req.draining
                     else "takes calls again", req.epoch)
        self._report_status()

    def status(self) -> pb.NodeStatus:
        """One snapshot: the drain state with the load of the running workers."""
        running = queued = workers = 0
        for p in self.workers:
            wid = self._worker_ids[p.name]
            if not p.running():
                continue
            workers += 1
            r, q = self._load.get(wid, (0, 0))
            running += r
            queued += q
        return pb.NodeStatus(node_id=self.config.node_id, draining=self.draining,
                             drain_epoch=self.drain_epoch, workers=workers, running=running,
                             queued=queued)

    def _report_status(self) -> None:
        status = self.status()
        for address in self.config.scheduler_addresses:
            self._push.send(address, "node_status", status)

    def _worker_ready(self, p: ManagedProcess) -> None:
        log.info("%s is back (restart %d)", p.name, self.supervisor.restarts[p.name])
        for info in self.worker_info:
            if info["worker_id"] == self._worker_ids[p.name]:
                info.update(p.info, pid=p.pid)
                if "address" in p.info:
                    self._pool.submit(p.name, self._publish, info["worker_id"], p.info["address"])

    def _publish(self, worker_id: str, address: str) -> None:
        """The worker's directory entry (for `lib.send`), written with the cluster key."""
        try:
            self.plain.kvs().put_all(worker_key(worker_id), address.encode())
        except Exception as e:        # lib.send to it fails naming the id; the node serves on
            log.error("could not publish the address of worker %s: %s", worker_id, e)

    def _report_keys(self) -> None:
        keys = sorted(set(self.plain.keys()) | set(self.causal.keys()))
        message = pb.CacheKeySet(node_id=self.config.node_id, keys=keys)
        for address in self.config.scheduler_addresses:
            self._push.send(address, "keyset", message)

    # ---- cache requests ----
    def _on_request(self, frame: Any, role: Optional[str] = None) -> None:
        try:
            kind, payload = parse(frame)
            if role == FUNCTION and kind not in ("heartbeat", "cache"):
                raise FrameError(f"kind {kind!r} is not for a function key to send")
            if kind == "heartbeat":
                return self._on_worker_heartbeat(payload)
            if kind == "drain":
                return self._on_drain(payload)
            if kind != "cache":
                raise FrameError(f"kind {kind!r} is not for a node cache")
            req = pb.CacheRequest.FromString(payload)
        except Exception as e:
            log.warning("dropped a malformed message: %s", e)
            return
        if role == FUNCTION:
            refused = refusal(req)
            if refused is not None:       # the function gets it as NotPermitted naming the key
                log.warning("refused a function's %s: %s", pb.CacheOp.Name(req.op)
                            if req.op in pb.CacheOp.values() else req.op, refused)
                return send_reply(self._push, req.response_address, pb.CacheResponse(
                    request_id=req.request_id, status=pb.NOT_PERMITTED,
                    message=f"node cache {self.config.node_id}: {refused}"), [])
        if req.op in (pb.CACHE_GET, pb.CACHE_PUT):
            self.plain.handle(req)
        else:
            self.causal.handle(req)

    def _on_update(self, frame: bytes) -> None:
        try:
            message = anna_pb2.KeyResponse.FromString(frame)
            for t in message.tuples:
                if t.error == anna_pb2.KEY_DNE:     # deleted in Anna: a later read misses
                    self.plain.on_deleted(t.key)
                    continue
                if t.error != anna_pb2.NO_ERROR or not t.payload:
                    continue
                lattice = tuple_to_lattice(t)
                if lattice.lattice_type == anna_pb2.MULTI_CAUSAL:
                    self.causal.on_update(t.key, lattice)
                    continue
                if lattice.lattice_type == anna_pb2.LWW:
                    self.plain.on_update(t.key, lattice)
        except Exception as e:
            log.warning("ignored a pushed update: %s", e)
