"""The causal calls in flight at one scheduler: one record per call, its coordinator's
actions carried out.

Contract: `CausalCalls(push, table, address, max_retries, hb_snapshot)` is the I/O side of
`scheduler.causal`; the scheduler's loop hands it the causal events with `now`.
`hb_snapshot` says when an HB call takes its snapshot round: "adaptive" (per DAG, eager while
its OPT attempts abort often: `scheduler.hb_policy.SnapshotPolicy`, which learns from every
HB call that ends), "always" (at the start, as written) or "on_abort" (only after OPT aborted).
- `begin(call, dag, versions, placement, caches, timeout, now)`: keeps an `InFlight` record
  (the caller's `Call`, the DAG, the function versions, the placement, the coordinator),
  counts the call's load on its workers at once (a reservation under the caller's id in the
  `ExecutorTable` until the first attempt starts: CON and HB coordinate first) and starts
  the coordinator; a duplicate of a call in flight is ignored.
- `owner(call_id)`: the record a caller's id or an attempt id belongs to, or None (another
  call). Ids are routed by their form (`scheduler.causal.caller_of`) and checked against
  the record, so nothing is indexed per attempt or per cache request.
- `done(call_id, now)` (a sink's `done`, or a caller reporting the result),
  `abort(CausalAbort, now)`, `cache_reply(CacheResponse, now)`,
  `worker_died(record, message, now, status)` (a table record of the call lost a worker),
  `stop(record, now)` (the call runs again under another id: end this one silently) and
  `tick(now)` feed the coordinator.
- `grant(CacheRequest, now)`: a node cache's CAUSAL_GRANT for a sink's commit; answered at
  once on the request's `response_address` (a `cache_reply`: OK when granted, otherwise
  `fenced` with the reason). The reply also hands the asking cache (`requester`) the
  releases held for it (`HeldRelease`, `scheduler.release_batch`); `tick` sends the others
  once they waited `MAX_DELAY` (`holding()`: some are held). An attempt of no call in flight here is refused: a call this
  scheduler failed, finished or forgot can never commit. Its actions: `StartAttempt` sends one `schedule` per
  source worker (the plan in every function's schedule) and tracks the attempt's load;
  `CacheSend` sends a `cache` request; `AbortAttempt` drops the attempt's load and sends
  `abort` to its workers; `Fail` sends the caller a `result` with the status and
  CausalStats; `Finished` forgets the record and its table entries.
- `records` (caller's id -> InFlight) is empty whenever no causal call is in flight, so the
  LWW path costs one truth test of it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional

from hydro_proto import cloudburst_pb2 as pb

from .causal import CausalCall, caller_of
from .hb_policy import SnapshotPolicy
from .causal_records import (AbortAttempt, Action, AttemptState, CacheSend, Fail, Finished,
                             HeldRelease, StartAttempt)
from .dag import Dag
from .membership import CallRecord, ExecutorTable
from .mtcc import HbFlow
from .release_batch import ReleaseBatch
from .schedule import build_schedules, references_by_function

__all__ = ["CausalCalls", "InFlight", "HB_SNAPSHOT_MODES"]

HB_SNAPSHOT_MODES = ("adaptive", "always", "on_abort")

log = logging.getLogger("cloudburst.scheduler")


@dataclass
class InFlight:
    """Everything the scheduler keeps about one causal call in flight."""

    call: pb.Call                  # the caller's request; each attempt sends a copy
    dag: Dag
    versions: Dict[str, str]       # function -> registered version
    placement: Dict[str, str]      # function -> worker id, fixed for the whole call
    coordinator: CausalCall


class CausalCalls:
    """The causal calls in flight; see the module contract."""

    def __init__(self, push: object, table: ExecutorTable, address: str,
                 max_retries: int, hb_snapshot: str = "adaptive") -> None:
        if hb_snapshot not in HB_SNAPSHOT_MODES:
            raise ValueError(f"hb_snapshot must be one of {HB_SNAPSHOT_MODES}, "
                             f"not {hb_snapshot!r}")
        self._hb_snapshot = hb_snapshot
        self.hb_policy = SnapshotPolicy()
        self._push = push              # anything with send(address, kind, message)
        self._table = table
        self._address = address
        self._max_retries = max_retries
        self.records: Dict[str, InFlight] = {}
        self.releases = ReleaseBatch()

    # ---- routing ----
    def owner(self, call_id: str) -> Optional[InFlight]:
        rec = self.records.get(call_id)
        if rec is not None:
            return rec
        rec = self.records.get(caller_of(call_id))
        if rec is not None and call_id in rec.coordinator.attempts:
            return rec
        return None

    # ---- events ----
    def begin(self, call: pb.Call, dag: Dag, versions: Dict[str, str],
              placement: Mapping[str, str], caches: Mapping[str, str], timeout: float,
              now: float) -> None:
        if call.request_id in self.records:
            return   # a duplicate of a call in flight
        coordinator = CausalCall(
            call.request_id, call.protocol, dag.functions,
            {fn: dag.upstreams(fn) for fn in dag.functions}, references_by_function(call),
            caches, self._address, now, timeout, max_retries=self._max_retries, name=dag.name,
            session=call.session if call.HasField("session") else None,
            hb_eager=self._hb_eager(dag.name))
        rec = InFlight(call, dag, versions, dict(placement), coordinator)
        self.records[call.request_id] = rec
        self._table.start_call(CallRecord(call.request_id, dag.name, dict(placement),
                                          call.response_address, now + timeout + 5))
        self._apply(rec, coordinator.start(now), now)

    def done(self, call_id: str, now: float) -> bool:
        """Feed a `done` of `call_id` to its call; False if no causal call owns the id."""
        rec = self.owner(call_id)
        if rec is None:
            return False
        self._apply(rec, rec.coordinator.on_done(call_id, now), now)
        return True

    def abort(self, abort: pb.CausalAbort, now: float) -> None:
        rec = self.owner(abort.attempt_id) or self.records.get(abort.call_id)
        if rec is None:
            log.info("ignored causal_abort of %s (call no longer in flight)", abort.attempt_id)
            return
        self._apply(rec, rec.coordinator.on_abort(abort, now), now)

    def cache_reply(self, resp: pb.CacheResponse, now: float) -> None:
        rec = self.records.get(caller_of(resp.request_id))
        if rec is None:
            return   # a call that finished or failed
        self._apply(rec, rec.coordinator.on_cache_reply(resp, now), now)

    def grant(self, req: pb.CacheRequest, now: float) -> None:
        rec = self.owner(req.attempt_id)
        if rec is None:
            granted, reason, actions = False, (
                f"no causal call in flight owns attempt {req.attempt_id} (it finished, "
                f"failed or was forgotten)"), []
        else:
            granted, reason, actions = rec.coordinator.grant(req.attempt_id, now)
        if not granted:
            log.info("refused the commit of attempt %s: %s", req.attempt_id, reason)
        if rec is not None and actions:
            self._apply(rec, actions, now)
        response = pb.CacheResponse(request_id=req.request_id, responder=self._address,
                                    status=pb.OK if granted else pb.ABORTED,
                                    fenced=not granted,
                                    message=f"scheduler {self._address}: {reason}" if reason
                                    else "")
        if req.response_address:
            if req.requester:   # the releases held for that cache ride on its grant
                held, left = self.releases.take(req.requester, now)
                response.release.extend(held)
                response.release_timeout = left
            self._push.send(req.response_address, "cache_reply", response)

    def worker_died(self, rec: InFlight, message: str, now: float,
                    status: int = pb.EXECUTION_ERROR) -> None:
        self._apply(rec, rec.coordinator.fail(status, message), now)

    def stop(self, rec: InFlight, now: float) -> None:
        """End the call here without answering its caller (it runs again under another id):
        every attempt is stopped and released, which fences it at the caches."""
        self._apply(rec, rec.coordinator.stop(), now)

    def tick(self, now: float) -> None:
        for rec in list(self.records.values()):
            actions = rec.coordinator.tick(now)
            if actions:
                self._apply(rec, actions, now)
        for cache, request in self.releases.due(now):
            self._push.send(cache, "cache", request)

    def holding(self) -> bool:
        """Releases are held (`tick` sends them once due, calls in flight or not)."""
        return self.releases.held() > 0

    # ---- actions ----
    def _apply(self, rec: InFlight, actions: Iterable[Action], now: float) -> None:
        coordinator = rec.coordinator
        for action in actions:
            if isinstance(action, CacheSend):
                self._push.send(action.address, "cache", action.request)
            elif isinstance(action, HeldRelease):
                full = self.releases.add(action.address, action.attempt_ids, action.timeout,
                                         now)
                if full is not None:
                    self._push.send(full[0], "cache", full[1])
            elif isinstance(action, StartAttempt):
                self._start_attempt(rec, action, now)
            elif isinstance(action, AbortAttempt):
                record = self._table.finish_call(action.attempt_id)
                placement = record.placement if record is not None else rec.placement
                for wid in sorted(set(placement.values())):
                    address = self._table.address(wid)
                    if address is not None:
                        self._push.send(address, "abort", pb.CallDone(call_id=action.attempt_id))
            elif isinstance(action, Fail):
                result = pb.CallResult(request_id=rec.call.request_id, status=action.status,
                                       message=action.message, stage=action.stage)
                result.causal.protocol = coordinator.requested
                result.causal.requested = coordinator.requested
                result.causal.aborts = coordinator.aborts
                self._push.send(rec.call.response_address, "result", result)
            elif isinstance(action, Finished):
                self._forget(rec)

    def _start_attempt(self, rec: InFlight, action: StartAttempt, now: float) -> None:
        self._table.finish_call(rec.call.request_id)   # the reservation: the attempt carries it
        addresses = {wid: self._table.address(wid) for wid in set(rec.placement.values())}
        missing = sorted(w for w, a in addresses.items() if a is None)
        if missing:
            self._apply(rec, rec.coordinator.fail(pb.EXECUTION_ERROR, (
                f"{rec.coordinator.name}: executor worker(s) {missing} placed for the call "
                "are no longer live")), now)
            return
        # the attempt's schedules name the attempt (no copy of the call: its session may be
        # a thousand floors)
        for address, schedule in build_schedules(rec.call, rec.dag, rec.placement, addresses,
                                                 rec.versions, self._address, action.timeout,
                                                 call_id=action.attempt_id):
            schedule.causal.CopyFrom(action.plan)
            for s in schedule.forward:
                s.causal.CopyFrom(action.plan)
            self._push.send(address, "schedule", schedule)
        self._table.start_call(CallRecord(action.attempt_id, rec.coordinator.name,
                                          dict(rec.placement), rec.call.response_address,
                                          now + action.timeout + 5), new_call=False)

    def _hb_eager(self, dag: str) -> bool:
        if self._hb_snapshot == "adaptive":
            return self.hb_policy.eager(dag)
        return self._hb_snapshot == "always"

    def _forget(self, rec: InFlight) -> None:
        flow = rec.coordinator.flow
        if isinstance(flow, HbFlow) and flow.opt:       # what HB's policy learns: did OPT abort?
            name = rec.dag.name
            was = self.hb_policy.eager(name)
            if flow.opt_aborted:
                self.hb_policy.record(name, True)
            elif rec.coordinator.granted == flow.opt or rec.coordinator.attempts[
                    flow.opt].state is AttemptState.DONE:
                self.hb_policy.record(name, False)
            if self.hb_policy.eager(name) != was:
                log.info("HB calls of DAG %s now take their snapshot round %s (OPT aborted "
                         "in %.0f%% of its recent calls)", name,
                         "at the start" if not was else "only after an OPT abort",
                         100 * self.hb_policy.rate(name))
        cid = rec.call.request_id
        self.records.pop(cid, None)
        self._table.finish_call(cid)
        for aid in rec.coordinator.attempts:
            self._table.finish_call(aid)
