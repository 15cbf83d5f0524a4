"""Causal calls driven by the scheduler's real coordinator over simulated caches (not a test
module): the world in which fencing is proved.

``FencingWorld(choose)`` joins ``tests.hydrocache_sim.Net`` (node cache cores, Anna) with one
``scheduler.causal.CausalCall`` per call (the scheduler's pure coordinator, its flows and its
commit grants) and the workers' part of each attempt. Every message travels as a queued I/O
that the test delivers when it chooses: a request to a cache may wait in the queue as long as
a stopped node's would, a release may arrive before or after a late commit, an answer may be
late. The scheduler can fail a call at any moment (a heartbeat timeout: a stalled node).

A call is a DAG ``rd -> wr`` of one key, both functions on one cache: ``rd`` reads the key,
``wr`` (the sink) re-binds it (as a worker's sink does for keys read upstream), appends the
call's id to the ids it read and commits through its worker's ``ExecutorWriter`` with the
scheduler as grant authority. A worker runs one function at a time, so the sink holds its
worker (its writer) from its re-bind to its commit's answer. CT runs one attempt (snapshot at the first read); HB runs OPT
(CAUSAL_BIND) and, when the coordinator's simulation (chosen by the test) or OPT itself
aborts, CON on the "#s" snapshot (CAUSAL_READ); both attempts of a call run on one worker.

The caller keeps the first result it gets (the sink's after an accepted commit, or the
scheduler's failure): a call is *acknowledged* when the sink's result came first.
``check()`` returns what breaks the promises: an acknowledged call whose id is missing from the
key's final values in Anna (a lost write), or a call with more than one accepted commit.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache import versionset as vs
from hydrocache.writer import ExecutorWriter
from scheduler.causal import CausalCall, caller_of
from scheduler.causal_records import (AbortAttempt, CacheSend, Fail, Finished, HeldRelease,
                                      SimResult, StartAttempt)
from scheduler.release_batch import ReleaseBatch

from hydrocache_sim import CLIENT, SCHEDULER, Net, read_entries

KEYS = ["k0", "k1"]


def ids_of(values) -> set:
    out = set()
    for v in values:
        out.update(x for x in bytes(v).decode().split(",") if x)
    return out


class ScriptedEngine:
    """HB's simulation says what the test chose (`abort`); every function runs on one cache,
    so Algorithm 10 has nothing to fetch."""

    def __init__(self, abort: bool) -> None:
        self.abort = abort

    def distributed(self, pieces) -> dict:
        return {}

    def simulate(self, order, upstreams, pieces) -> SimResult:
        return SimResult(self.abort, "scripted: OPT would abort" if self.abort else "")


class Attempt:
    """The workers' side of one attempt (rd, then the sink wr)."""

    def __init__(self, world: "FencingWorld", call: "SimCall", aid: str, plan: pb.CausalPlan
                 ) -> None:
        self.world, self.call, self.aid, self.plan = world, call, aid, plan
        self.waiting: Optional[str] = None
        self.finished = False
        self.wants_worker = False       # the sink is ready to start once its worker is free
        self._gen = self._run()

    def ready(self) -> bool:
        if self.wants_worker:
            return self.world.busy.get(self.call.writer.executor_id) is None
        return not self.finished and (self.waiting is None
                                      or self.waiting in self.world.net.answers)

    def advance(self) -> None:
        net = self.world.net
        answer = net.answers.pop(self.waiting) if self.waiting is not None else None
        if self.wants_worker:
            self.wants_worker = False
            self.world.busy[self.call.writer.executor_id] = self.aid
        try:
            req = self._gen.send(answer)
        except StopIteration:
            self.finished, self.waiting = True, None
            if self.world.busy.get(self.call.writer.executor_id) == self.aid:
                del self.world.busy[self.call.writer.executor_id]
            return
        if req is None:                 # the sink starts when its worker is free
            self.waiting, self.wants_worker = None, True
            return
        self.waiting = net.post(self.call.cache, req)

    def _read(self, sink: bool, context: Optional[pb.CausalContext]) -> pb.CacheRequest:
        k = self.call.key
        if self.plan.protocol == pb.OPT:
            req = pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=self.aid, keys=[k],
                                  dag_keys=[k], dag_keys_known=True,
                                  prefetch_attempt=self.plan.snapshot_attempt)
            if context is not None:
                req.upstreams.append(context)
            return req
        return pb.CacheRequest(op=pb.CAUSAL_READ, keys=[k], dag_keys=[k], dag_keys_known=True,
                               attempt_id=self.plan.snapshot_attempt or self.aid,
                               explore=self.plan.protocol == pb.CT, snapshot_required=sink)

    def _run(self) -> Generator:
        world, k = self.world, self.call.key
        response, frames = yield self._read(False, None)          # rd
        if response.status != pb.OK or response.abort:
            return self._failed(response)
        got = read_entries(response, frames)
        seen = ids_of(got[k][1]) if k in got else set()
        read_set = {k: vs.Entry(dict(got[k][0].vc))} if k in got else {}
        own = pb.CausalContext()
        own.CopyFrom(response.context)
        yield None                                                # wr waits for its worker
        response, frames = yield self._read(True, own)            # wr re-binds its key
        if response.status != pb.OK or response.abort:
            return self._failed(response)
        got = read_entries(response, frames)
        if self.plan.protocol == pb.OPT:
            read_set = vs.from_proto(response.context.read_set)
        elif k in got:                  # as the worker does: the re-bound version joins R
            read_set = vs.union(read_set, {k: vs.Entry(dict(got[k][0].vc))})
        deps = {k: got[k][0].deps} if k in got else None
        payload = ",".join(sorted(seen | {self.call.cid})).encode()
        writer = self.call.writer
        versions = writer.commit({k: payload}, read_set, deps, record=False)
        req = pb.CacheRequest(op=pb.CAUSAL_COMMIT, attempt_id=self.aid, keys=[k],
                              grant_address=SCHEDULER)
        for v in versions:
            req.writes.append(anna_pb2.KeyTuple(key=v.key, lattice_type=anna_pb2.MULTI_CAUSAL,
                                                payload=v.serialize()).SerializeToString())
        response, _ = yield req
        if response.fenced:
            return self._failed(response)
        writer.record(versions)
        if response.status != pb.OK:
            world.result(self.call, False, "commit failed")
            return None
        self.call.commits.append(self.aid)
        world.result(self.call, True, self.aid)
        world.apply(self.call, self.call.coordinator.on_done(self.aid, world.net.now))
        return None

    def _failed(self, response: pb.CacheResponse) -> None:
        """An abort or a fenced request goes to the scheduler (it decides); an error fails the
        call at its caller, as a worker does."""
        if response.abort or response.fenced:
            abort = pb.CausalAbort(attempt_id=self.aid, call_id=self.call.cid,
                                   reason=response.abort_reason or response.message,
                                   function="rd", stale_keys=response.stale_keys,
                                   new_keys=response.new_keys)
            self.world.apply(self.call, self.call.coordinator.on_abort(abort, self.world.net.now))
        else:
            self.world.result(self.call, False, response.message)


class SimCall:
    def __init__(self, cid: str, protocol: int, key: str, cache: str, writer: ExecutorWriter,
                 coordinator: CausalCall) -> None:
        self.cid, self.protocol, self.key, self.cache = cid, protocol, key, cache
        self.writer = writer
        self.coordinator = coordinator
        self.result: Optional[Tuple[bool, str]] = None   # what the caller kept (the first)
        self.commits: List[str] = []                     # attempts whose commit was accepted


class FencingWorld:
    def __init__(self, choose: Callable[[int], int], caches: int = 2, writers: int = 2) -> None:
        self.choose = choose
        self.net = Net(caches)
        self.net.scheduler = self.grant
        for k in KEYS:
            self.net.put(k, {f"init/{k}": 1}, value=b"init")
        self.writers = [ExecutorWriter(f"e{i}") for i in range(writers)]
        self.calls: Dict[str, SimCall] = {}
        self.releases = ReleaseBatch()      # the scheduler's held releases (CausalCalls)
        self.attempts: List[Attempt] = []
        self.busy: Dict[str, str] = {}          # executor id -> the attempt whose sink runs

    def pick(self, seq):
        return seq[self.choose(len(seq))]

    # ---- the scheduler ----
    def start(self, protocol: Optional[int] = None, abort_sim: Optional[bool] = None,
              key: Optional[str] = None, cache: Optional[str] = None,
              writer: Optional[int] = None) -> SimCall:
        cid = f"c{len(self.calls)}"
        protocol = protocol if protocol is not None else self.pick([pb.CT, pb.HB])
        abort_sim = abort_sim if abort_sim is not None else bool(self.choose(2))
        key = key or self.pick(KEYS)
        cache = cache or self.pick(sorted(self.net.cores))
        coordinator = CausalCall(cid, protocol, ["rd", "wr"], {"wr": ["rd"]},
                                 {"rd": [key], "wr": [key]}, {"rd": cache, "wr": cache},
                                 SCHEDULER, self.net.now, 10.0, max_retries=3,
                                 engine=ScriptedEngine(abort_sim))
        call = SimCall(cid, protocol, key, cache, self.writers[writer] if writer is not None
                       else self.pick(self.writers), coordinator)
        self.calls[cid] = call
        self.apply(call, coordinator.start(self.net.now))
        return call

    def grant(self, req: pb.CacheRequest) -> pb.CacheResponse:
        call = self.calls.get(caller_of(req.attempt_id))
        granted, reason = False, "no such call"
        if call is not None:
            granted, reason, actions = call.coordinator.grant(req.attempt_id, self.net.now)
            self.apply(call, actions)
        response = pb.CacheResponse(request_id=req.request_id, status=pb.OK if granted
                                    else pb.ABORTED, fenced=not granted, message=reason)
        if req.requester:       # the releases held for that cache ride on its grant
            held, left = self.releases.take(req.requester, self.net.now)
            response.release.extend(held)
            response.release_timeout = left
        return response

    def fail(self, call: SimCall) -> None:
        """The scheduler fails the call (its node missed the heartbeat timeout)."""
        self.apply(call, call.coordinator.fail(pb.EXECUTION_ERROR, "worker missed heartbeats"))

    def deliver_to_scheduler(self, i: int) -> None:
        resp = self.net.to_scheduler.pop(i)
        call = self.calls[caller_of(resp.request_id)]
        self.apply(call, call.coordinator.on_cache_reply(resp, self.net.now))

    def apply(self, call: SimCall, actions: List[Any]) -> None:
        for a in actions:
            if isinstance(a, StartAttempt):
                self.attempts.append(Attempt(self, call, a.attempt_id, a.plan))
            elif isinstance(a, CacheSend):
                req = pb.CacheRequest()
                req.CopyFrom(a.request)
                if req.response_address:
                    self.net.post(a.address, req, reply_to=SCHEDULER)
                else:                       # nobody waits for it (release, prefetch)
                    self.net.post(a.address, req, reply_to="")
            elif isinstance(a, HeldRelease):     # as the scheduler's CausalCalls does
                full = self.releases.add(a.address, a.attempt_ids, a.timeout, self.net.now)
                if full is not None:
                    self.net.post(full[0], full[1], reply_to="")
            elif isinstance(a, Fail):
                self.result(call, False, a.message)
            elif isinstance(a, (AbortAttempt, Finished)):
                pass        # workers finish what runs; fencing must hold regardless

    def result(self, call: SimCall, ok: bool, what: str) -> None:
        if call.result is None:
            call.result = (ok, what)

    # ---- driving ----
    def events(self, max_calls: int = 4, fail_odds: int = 12) -> List[Callable[[], None]]:
        net = self.net
        out: List[Callable[[], None]] = []
        if len(self.calls) < max_calls:
            out.append(lambda: self.start())
        out += [a.advance for a in self.attempts if a.ready()]
        out += [lambda i=i: net.complete(i) for i in range(len(net.io))]
        out += [lambda i=i: self.deliver_to_scheduler(i) for i in range(len(net.to_scheduler))]
        live = [c for c in self.calls.values() if not c.coordinator.finished]
        if live and self.choose(fail_odds) == 0:    # failures rarer than deliveries
            out.append(lambda: self.fail(self.pick(live)))
        out.append(lambda: self.tick(0.001 * (1 + self.choose(10))))
        return out

    def tick(self, dt: float) -> None:
        self.net.tick(dt)
        for call in self.calls.values():
            self.apply(call, call.coordinator.tick(self.net.now))
        for cache, request in self.releases.due(self.net.now):
            self.net.post(cache, request, reply_to="")

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.pick(self.events())()
        self.drain()

    def drain(self) -> None:
        """Deliver everything, run every attempt to its end."""
        for _ in range(20_000):
            ready = [a for a in self.attempts if a.ready()]
            if self.net.io:
                self.net.complete(0)
            elif self.net.to_scheduler:
                self.deliver_to_scheduler(0)
            elif ready:
                ready[0].advance()
            elif all(a.finished for a in self.attempts):
                return
            else:
                self.tick(0.5)
        raise AssertionError("the world did not settle")

    def check(self) -> List[str]:
        problems = []
        final = {k: ids_of(self.net.anna[k].values) for k in KEYS}
        for call in self.calls.values():
            if len(call.commits) > 1:
                problems.append(f"{call.cid}: {len(call.commits)} commits accepted "
                                f"({call.commits})")
            if call.result and call.result[0] and call.cid not in final[call.key]:
                problems.append(f"{call.cid}: acknowledged write to {call.key} lost "
                                f"(final ids {sorted(final[call.key])})")
        return problems
