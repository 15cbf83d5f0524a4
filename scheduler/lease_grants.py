"""Worker leases at the scheduler: the thin glue between `lease_worker` requests, the
scheduler's state and the pure `scheduler/worker_leases.py` (which decides).

Contract (mixed into `scheduler.server.Scheduler`, whose registry, table, queue, windows,
warm-worker map, stats and push cache it uses):
- `_lease_worker(payload, role)` handles a client's `LeaseRequest`: it records the direct
  calls the client reports (`CallStats.record`, per target), gives back the leases it
  releases, renews or revokes those it renews, and for a `target` grants a lease, or answers
  why not (`WorkerLease` with `status` and `reason`: FUNCTION_NOT_FOUND, DAG_NOT_FOUND, or
  NO_RESOURCES when no worker has a free slot, calls wait in the queue, or the target cannot take the
  direct path: functions that retry exceptions, DAGs too large to forward).
- A grant places the whole target on one worker with a free slot (its window,
  `scheduler/window.py`, less its outstanding calls and leased slots, less the slots kept
  for the scheduler: `worker_leases.leasable`, none now), the target's warm
  worker first (`scheduler/policy.py`: the client's call that asked is placed just before),
  else the least loaded, with the slots it has free; a request with `spread` (a client whose
  calls queue at it) excludes the workers that client already holds the target on. A
  renewal grows the lease to what its worker's window leaves it now (the window learns
  from the direct calls' run times, which workers report in their heartbeats). The worker's grant
  carries the sources' schedules, built once by `scheduler/schedule.py`, filled with each call's
  id, arguments, answer address and deadline: the worker keeps them, and a client's direct
  call carries only those (so it cannot name other functions or workers). The worker is
  told first (`worker_lease`), then the client, so a direct call rarely finds its worker not yet told (and is refused,
  then sent through the scheduler, if it does).
- Every grant, renewal and revocation goes to both the worker (which admits direct calls
  only within leases it was told of: `executor/leased.py`) and the client.
- `_lease_tick(now)` revokes expired leases (later while messages wait unread: a renewal
  may be among them; the worker is told a lease for that longer time, `worker_ttl`) and, while calls wait in the queue, as many
  leases as they need (`LeaseBook.reclaim`: those on the workers running the fewest of the
  scheduler's calls first); a stopping scheduler (`scheduler/stopping.py`)
  revokes every lease and grants none, so its clients' calls go to another scheduler; `_leases_lost(worker_id, why)` revokes the leases
  on a worker that died, telling their clients `worker_died` (they retry or fail the calls in
  flight there); so does a worker's heartbeat naming a direct address other than the one its
  leases were granted at (`_note_direct`: another process under its id). `_with_leases(views)` counts leased slots as load in the workers' views.
- `_placing(placement, answer)`: the scheduler places a call (of the caller at `answer`) on
  those workers: the leases other clients hold there are revoked first, the worker told
  before the call is sent (`LeaseBook.placed`: one caller at a time on a leased worker). A
  grant never goes to a worker that runs another caller's call of this scheduler
  (`shared_workers`); a client's own call does not keep it from its warm worker.
- `_client_lease(payload)` takes a client's `lease` on its calls (to `scheduler/lifecycle.py`)
  and notes from it whether a holder of worker leases lives; `_lease_tick` then revokes
  with `holder_gone`, to the worker's schedule and control sockets, every ended lease whose
  holder is gone (`LeaseBook.gone`): the worker cancels the calls it admitted under it.
- `_cancel_direct(req)` stops a direct call where it runs (the lease's worker, and its
  control socket for a running function), as `cancel` does for a scheduled call.
"""
from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from typing import Any, Dict, Iterable, List, Sequence

from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import more

from .dag import Dag
from .registry_requests import dag_from_record
from .retries import resolve
from .schedule import FORWARD_MAX_FUNCTIONS, build_schedules
from .worker_leases import Lease, LeaseBook, Revoked, leasable, shared_workers, worker_ttl

__all__ = ["WorkerLeasing"]

log = logging.getLogger("cloudburst.scheduler")

DAG_KEY = "\0dag"     # in a DAG lease's versions: its DAG record (no function's name)


class WorkerLeasing:
    """Worker leases' glue; mixed into the scheduler (module contract)."""

    worker_leases: LeaseBook

    def _init_worker_leases(self) -> None:
        self.worker_leases = LeaseBook(self.config.worker_lease_ttl)
        self._direct_addresses: Dict[str, str] = {}   # worker id -> its direct socket
        self._link_addresses: Dict[str, str] = {}     # worker id -> its call links

    def _note_direct(self, worker_id: str, address: str, link_address: str = "") -> None:
        known = self._direct_addresses.get(worker_id)
        if known is not None and known != address:
            # Another process under the worker's id (restarted, and a heartbeat of the dead
            # one came after its exit report): leases granted at the old address send their
            # calls to nobody, so they end as for a death and their calls in flight retry.
            self._leases_lost(worker_id, f"was restarted (its direct address changed from "
                                         f"{known} to {address})")
        self._direct_addresses[worker_id] = address
        self._link_addresses[worker_id] = link_address

    # ---- requests ----
    def _lease_worker(self, payload: Any, role: str) -> None:
        req = pb.LeaseRequest.FromString(payload)
        now = time.monotonic()
        book = self.worker_leases
        book.heard(req.response_address, None, now)           # its holder lives
        for usage in req.usage:
            lease = book.lease(usage.lease_id)
            if lease is None or lease.client != role:
                continue
            latencies = list(usage.latencies)[:usage.calls]
            for i in range(usage.calls):
                self.stats.record(lease.target, i >= usage.failed,
                                  latencies[i] if i < len(latencies) else 0.0)
            # each took at least its run on the worker: a bound on its window's run times,
            # known long before the worker's heartbeat reports them (scheduler/window.py)
            self._windows.bound(lease.worker_id, len(latencies), sum(latencies))
        for lease_id in req.release:
            lease = book.release(lease_id, role)
            if lease is not None:
                self._tell_worker(lease, revoked=True, reason="its client gave it back")
        waiting = len(self._queue) + len(self._deferred)
        for lease_id in req.renew:
            held = book.lease(lease_id)
            renewed = book.renew(lease_id, role, now, waiting,
                                 self._versions(held) if held is not None else None)
            if isinstance(renewed, Lease):
                self._resize(renewed)
                self._tell(renewed, request_id=req.request_id)
            elif isinstance(renewed, Revoked):
                self._revoke([renewed])
            else:
                self._push.send(req.response_address, "worker_lease", pb.WorkerLease(
                    lease_id=lease_id, revoked=True, request_id=req.request_id,
                    reason="the scheduler holds no such lease of this client (it expired or "
                           "was revoked)", scheduler_address=self.address))
        if req.target:
            self._grant(req, role, now, waiting)

    def _resize(self, lease: Lease) -> None:
        """A renewed lease takes the worker's window now, less what else it holds (the
        window learns from the direct calls' run times too: scheduler/window.py)."""
        view = next((w for w in self._placeable() if w.worker_id == lease.worker_id), None)
        if view is not None:
            others = view.outstanding - lease.slots
            self.worker_leases.resize(lease.lease_id,
                                      leasable(self._windows.slots(lease.worker_id), others))

    def _widened(self, worker_id: str) -> None:
        """The worker's window widened: its leases grow now, and their clients are told
        (module contract)."""
        if not len(self.worker_leases):
            return
        now = time.monotonic()
        for lease in self.worker_leases.on_worker(worker_id):
            before = lease.slots
            self._resize(lease)
            if lease.slots > before:
                self._tell_worker(lease)
                message = self._message(lease)
                message.ttl = max(0.0, lease.expires - now)    # grown, not renewed
                self._push.send(lease.answer, "worker_lease", message)

    def _client_lease(self, payload: bytes) -> None:
        """A client's `lease` on its calls (scheduler/lifecycle.py), which also says whether
        the holder of worker leases lives (its direct calls are held under it too)."""
        now = time.monotonic()
        self.lifecycle.lease(payload, now)
        lease = pb.ClientLease.FromString(payload)
        if lease.ttl > 0:
            self.worker_leases.heard(lease.client, lease.ttl, now)
        else:
            self.worker_leases.left(lease.client)

    def _versions(self, lease: Lease) -> Dict[str, Any]:
        """The registered versions of the lease's functions now (None: not registered)."""
        out: Dict[str, Any] = {}
        for fn in lease.versions:
            if fn == DAG_KEY:
                record = self.registry.dag(lease.target)
                out[fn] = None if record is None else \
                    record.SerializeToString(deterministic=True)
                continue
            f = self.registry.function(fn)
            out[fn] = f.version if f is not None else None
        return out

    def _refuse_lease(self, req: Any, status: int, reason: str) -> None:
        self._push.send(req.response_address, "worker_lease", pb.WorkerLease(
            target=req.target, dag=req.dag, request_id=req.request_id, status=status,
            reason=reason, scheduler_address=self.address))

    def _grant(self, req: Any, role: str, now: float, waiting: int) -> None:
        if not self.config.worker_leases:
            return self._refuse_lease(req, pb.NO_RESOURCES, "this scheduler grants no worker leases")
        if self._graceful.refuses():
            return self._refuse_lease(req, pb.NO_RESOURCES, f"the scheduler at {self.address} is "
                                                      f"stopping: it grants no lease")
        if req.dag:
            record = self.registry.dag(req.target)
            if record is None:
                return self._refuse_lease(req, pb.DAG_NOT_FOUND,
                                    f"no DAG named {req.target!r} is registered")
            dag = dag_from_record(record)
        else:
            dag = Dag.create(req.target, [req.target])
        if len(dag.functions) > FORWARD_MAX_FUNCTIONS:
            return self._refuse_lease(req, pb.NO_RESOURCES, f"DAG {req.target!r} has more than "
                                f"{FORWARD_MAX_FUNCTIONS} functions: it takes the "
                                f"scheduler's path")
        versions, policies = {}, []
        for fn in dag.functions:
            f = self.registry.function(fn)
            if f is None:
                return self._refuse_lease(req, pb.FUNCTION_NOT_FOUND,
                                    f"no function named {fn!r} is registered")
            versions[fn] = f.version
        if req.dag:              # the DAG deleted or registered again revokes it (renew)
            versions[DAG_KEY] = record.SerializeToString(deterministic=True)
            policies.append(f.retry if f.HasField("retry") else None)
        policy = resolve(None, policies, self.lifecycle.default)
        if policy.exceptions:
            return self._refuse_lease(req, pb.NO_RESOURCES, (
                f"{req.target!r} retries exceptions, which the scheduler decides: it takes "
                f"the scheduler's path"))
        # never on a worker running another caller's call: a direct call would wait behind it
        shared = shared_workers(self.table.callers(), req.response_address)
        views = [w for w in self._placeable()
                 if w.worker_id in self._direct_addresses and w.worker_id not in shared]
        if req.spread:         # another worker than those this client holds the target on
            mine = set(self.worker_leases.workers_of(role, req.response_address, req.target,
                                                     req.dag, now))
            views = [w for w in views if w.worker_id not in mine]
            # a fresh worker's window is not known yet: the target's calls take on it what
            # they take where the client leases them already
            like = max((self._windows.slots(w) for w in mine), default=None)
        else:
            like = None
        room = {w.worker_id: leasable(self._windows.slots(w.worker_id, like), w.outstanding)
                for w in views}
        open_ = [w for w in views if room[w.worker_id] > 0]
        if not open_:
            return self._refuse_lease(req, pb.NO_RESOURCES, "no executor worker has a free slot (" +
                                ", ".join(f"{w.worker_id}: {w.outstanding} call(s) or leased "
                                          f"slot(s)" for w in views) + ")")
        warm = self._warm.get(dag.sink()) or self._warm.get(dag.functions[0])
        worker = next((w for w in open_ if w.worker_id == warm),
                      min(open_, key=lambda w: (w.outstanding, w.utilization, w.worker_id)))
        granted = self.worker_leases.grant(
            secrets.token_hex(16), role, req.response_address, req.target, req.dag,
            worker.worker_id, room[worker.worker_id], now, waiting, versions, req.spread)
        if isinstance(granted, str):
            return self._refuse_lease(req, pb.NO_RESOURCES, granted)
        placement = {fn: worker.worker_id for fn in dag.functions}
        templates = [s for _, s in build_schedules(
            pb.Call(), dag, placement, {worker.worker_id: worker.address}, versions,
            self.address, 0.0)]
        for fn in dag.functions:
            self._warm[fn] = worker.worker_id
        self._tell(granted, templates=templates, max_retries=policy.max_retries,
                   request_id=req.request_id)

    # ---- telling the worker and the client ----
    def _message(self, lease: Lease, **fields: Any) -> pb.WorkerLease:
        return pb.WorkerLease(
            lease_id=lease.lease_id, target=lease.target, dag=lease.dag,
            worker_id=lease.worker_id,
            worker_address=self._direct_addresses.get(lease.worker_id, ""),
            link_address=self._link_addresses.get(lease.worker_id, ""),
            slots=lease.slots, ttl=self.worker_leases.ttl, client=lease.client,
            scheduler_address=self.address, **fields)

    def _tell_worker(self, lease: Lease, templates: Sequence[pb.Schedule] = (),
                     **fields: Any) -> None:
        address = self.table.address(lease.worker_id)
        if address:
            message = self._message(lease, **fields)
            message.ttl = worker_ttl(self.worker_leases.ttl)   # it outlives a late renewal
            message.templates.extend(templates)
            self._push.send(address, "worker_lease", message)

    def _tell(self, lease: Lease, templates: Sequence[pb.Schedule] = (),
              **fields: Any) -> None:
        """The worker first (with the schedules it runs direct calls on), then the client
        (see the module contract)."""
        self._tell_worker(lease, templates,
                          **{k: v for k, v in fields.items() if k != "request_id"})
        self._push.send(lease.answer, "worker_lease", self._message(lease, **fields))

    def _revoke(self, revoked: Iterable[Revoked]) -> None:
        for r in revoked:
            log.info("worker lease %s on %s for %s revoked: %s", r.lease.lease_id[:8],
                     r.lease.worker_id, r.lease.target, r.reason)
            fields = dict(revoked=True, reason=r.reason, worker_died=r.worker_died,
                          holder_gone=r.holder_gone)
            if r.holder_gone:    # the worker cancels what it admitted under it, running too
                self._tell_worker(r.lease, **fields)
                control = self.table.control_address(r.lease.worker_id)
                if control:
                    self._push.send(control, "worker_lease", self._message(r.lease, **fields))
                continue
            if not r.worker_died:
                self._tell_worker(r.lease, **fields)
            self._push.send(r.lease.answer, "worker_lease", self._message(r.lease, **fields))

    # ---- time, lost workers, load ----
    def _lease_tick(self, now: float) -> None:
        if self.worker_leases.idle():
            return
        # messages waiting unread may hold renewals sent in time (worker_leases.py `expire`)
        revoked = self.worker_leases.expire(now, behind=more(self._pull))
        if self._graceful.refuses():      # stopping: its clients' calls go elsewhere
            revoked += self.worker_leases.revoke_all(
                f"its scheduler {self.address} is stopping")
        if self._queue:     # idle workers' leases first (worker_leases.py `reclaim`)
            loads = {w.worker_id: w.outstanding
                     for w in self.table.placeable()}
            revoked += self.worker_leases.reclaim(len(self._queue), loads)
        self._revoke(revoked + self.worker_leases.gone(now))

    def _placing(self, placement: Dict[str, str], answer: str) -> None:
        """A call of the caller at `answer` goes to these workers: other clients' leases there
        are revoked first (`LeaseBook.placed`), the worker told before the call is sent."""
        if len(self.worker_leases):
            self._revoke(self.worker_leases.placed(placement.values(), answer))

    def _leases_lost(self, worker_id: str, why: str) -> None:
        self._direct_addresses.pop(worker_id, None)     # a restarted worker reports anew
        self._link_addresses.pop(worker_id, None)
        if len(self.worker_leases):
            self._revoke(self.worker_leases.worker_lost(worker_id, why))

    def _with_leases(self, views: List[Any]) -> List[Any]:
        if not len(self.worker_leases):
            return views
        reserved = self.worker_leases.reserved()
        return [dataclasses.replace(w, outstanding=w.outstanding + reserved[w.worker_id],
                                    leased=reserved[w.worker_id])
                if w.worker_id in reserved else w for w in views]

    def _cancel_direct(self, req: Any) -> None:
        lease = self.worker_leases.lease(req.lease_id)
        if lease is None:
            return     # gone with its worker, or expired: the call ended or will at its limit
        abort = pb.CallDone(call_id=req.name, status=pb.CANCELLED,
                            message="its caller cancelled it")
        for address in (self.table.address(lease.worker_id),
                        self.table.control_address(lease.worker_id)):
            if address:
                self._push.send(address, "abort", abort)
