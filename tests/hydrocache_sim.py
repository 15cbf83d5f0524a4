"""A socket-free network of HydroCache cores for tests (not a test module).

``Net`` holds several ``hydrocache.node_cache.NodeCache`` cores, a simulated Anna (per key, the
lattice merge of every version written) and the I/O the cores asked for, which the test
carries out when it chooses: ``complete(i)`` performs the i-th pending I/O (an Anna read
answered from Anna's state *now*, a subscription, a write, a request to another cache, that
cache's answer travelling back), ``push(address, key)`` is Anna pushing a key's current
version, ``tick(dt)`` moves the clock and ticks every core. With ``auto=True`` every I/O is
carried out as soon as it is asked for (in order). Answers to the test's own requests land in
``answers`` by request id. ``post(address, req, reply_to)`` queues a request as I/O instead of
handing it over at once (a stopped node's queue: it is delivered when the test completes it).
A scheduler can join: requests a core sends to ``SCHEDULER`` (CAUSAL_GRANT) are answered by
``scheduler(req) -> CacheResponse`` and the answer travels back as I/O; answers cores send to
``SCHEDULER`` land in ``to_scheduler``.

``Call`` is one simulated causal DAG call of two functions (f1 -> f2, f2 the sink), driven the
way workers and the scheduler drive the caches: OPT (CAUSAL_BIND with the upstream context),
CT (both functions on one cache, CAUSAL_READ with explore), CON (CAUSAL_SNAPSHOT on both
caches, the sink's for every key, Algorithm 10's union, CAUSAL_FETCH, CAUSAL_READ); the sink
binds the keys it writes that it has not read (their versions' dependencies carry forward),
commits through its ``ExecutorWriter`` (CAUSAL_COMMIT) and releases the attempt. A call
records what it observed as a ``checker.Transaction``.

``run_interleaving(choose, ...)`` builds a world and lets ``choose(n) -> int in [0, n)`` pick,
step after step, among the enabled events (start a call, advance a call whose answer is in,
complete an I/O, a push, a tick, a sweep, a dependency-GC round), then drains everything; it returns the ``Net`` and
the history of finished calls.
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from hydrocache import versionset as vs
from hydrocache.actions import AskCache, FetchKey, PutVersions, Step, Subscribe
from hydrocache.checker import Observed, Transaction
from hydrocache.gc import frontier_from_reports
from hydrocache.node_cache import NodeCache
from hydrocache.protocols import Piece, distributed_snapshot
from hydrocache.version import Version, merge_versions
from hydrocache.writer import ExecutorWriter

CLIENT = "client"
SCHEDULER = "scheduler"


class Net:
    def __init__(self, caches: int = 2, capacity_bytes: int = 2 << 30, auto: bool = False
                 ) -> None:
        self.cores: Dict[str, NodeCache] = {
            f"cache{i}": NodeCache(f"n{i}", f"cache{i}", capacity_bytes) for i in range(caches)}
        self.anna: Dict[str, Version] = {}
        self.now = 0.0
        self.auto = auto
        self.io: List[Tuple[str, Any]] = []            # (address of the core, action)
        self.answers: Dict[str, Tuple[pb.CacheResponse, List[bytes]]] = {}
        self.subscribed: Dict[str, set] = {a: set() for a in self.cores}
        self.fail_fetch: Dict[str, Exception] = {}      # key -> error Anna reads raise
        self.fail_put: Optional[Exception] = None
        self.on_write: Optional[Callable[[Version], None]] = None
        self.scheduler: Optional[Callable[[pb.CacheRequest], pb.CacheResponse]] = None
        self.to_scheduler: List[pb.CacheResponse] = []
        self.steps = 0

    # ---- Anna ----
    def write(self, v: Version) -> Version:
        prev = self.anna.get(v.key)
        self.anna[v.key] = v if prev is None else merge_versions(prev, v)
        if self.on_write is not None:
            self.on_write(v)
        return v

    def put(self, key: str, vc: Dict[str, int], deps=None, value: bytes = b"v") -> Version:
        return self.write(Version.new(key, vc, deps or {}, [value]))

    # ---- requests from the test ----
    def send(self, address: str, req: pb.CacheRequest, timeout: float = 5.0) -> str:
        req.request_id = req.request_id or uuid.uuid4().hex[:12]
        req.response_address = CLIENT
        if not req.timeout:
            req.timeout = timeout
        self.carry(address, self.cores[address].handle(req, self.now))
        return req.request_id

    def post(self, address: str, req: pb.CacheRequest, reply_to: str = CLIENT,
             timeout: float = 5.0) -> str:
        """Queue `req` for the core at `address` (delivered when that I/O is completed)."""
        req.request_id = req.request_id or uuid.uuid4().hex[:12]
        req.response_address = reply_to
        if not req.timeout:
            req.timeout = timeout
        self.io.append((address, ("request", req)))
        return req.request_id

    def ask(self, address: str, req: pb.CacheRequest, timeout: float = 5.0
            ) -> Optional[Tuple[pb.CacheResponse, List[bytes]]]:
        """Send and return the answer if it came (with `auto`, after all I/O ran)."""
        rid = self.send(address, req, timeout)
        return self.answers.get(rid)

    # ---- carrying out steps ----
    def carry(self, address: str, step: Step) -> None:
        self.steps += 1
        for r in step.replies:
            if r.address == CLIENT:
                self.answers[r.response.request_id] = (r.response, list(r.frames))
            elif r.address == SCHEDULER:
                self.to_scheduler.append(r.response)
            else:                                      # "peer:<address>": another cache
                self.io.append((r.address[len("peer:"):], ("reply", r.response)))
        for action in step.io:
            self.io.append((address, action))
        if self.auto:
            self.drain_io()

    def drain_io(self) -> None:
        auto, self.auto = self.auto, False
        try:
            while self.io:
                self.complete(0)
        finally:
            self.auto = auto

    def complete(self, i: int) -> None:
        address, action = self.io.pop(i)
        core = self.cores[address]
        if isinstance(action, FetchKey):
            error = self.fail_fetch.get(action.key)
            v = self.anna.get(action.key)
            step = core.on_fetched(action.key, None if (error or v is None) else v.lattice,
                                   self.now, error)
        elif isinstance(action, Subscribe):
            self.subscribed[address].add(action.key)
            return
        elif isinstance(action, PutVersions):
            if self.fail_put is None:
                for v in action.versions:
                    self.write(v)
            step = core.on_put(action.token, self.now, self.fail_put)
        elif isinstance(action, AskCache) and action.address == SCHEDULER:
            if self.scheduler is None:                  # no scheduler: it never answers
                return
            response = self.scheduler(action.request)
            self.io.append((address, ("reply", response)))
            return
        elif isinstance(action, AskCache):
            req = pb.CacheRequest()
            req.CopyFrom(action.request)
            req.response_address = f"peer:{address}"
            if action.address not in self.cores:        # nobody there: it never answers
                return
            step = self.cores[action.address].handle(req, self.now)
            address = action.address
        elif action[0] == "request":                     # a posted request arrives
            step = core.handle(action[1], self.now)
        else:                                            # ("reply", response) from a peer
            step = core.on_cache_reply(action[1], self.now)
        self.carry(address, step)

    def push(self, address: str, key: str) -> None:
        self.carry(address, self.cores[address].on_pushed(key, self.anna[key].lattice, self.now))

    def tick(self, dt: float) -> None:
        self.now += dt
        for address, core in self.cores.items():
            self.carry(address, core.tick(self.now))

    def sweep(self) -> None:
        for core in self.cores.values():
            core.sweep(self.now)

    def gc(self) -> Dict[str, Dict[str, int]]:
        """One dependency-GC round (scheduler/gc.py's): every core reports, the frontier is
        the meet of Anna's clock and every held clock, every core applies it."""
        reports = []
        for address, core in self.cores.items():
            step = core.handle(pb.CacheRequest(op=pb.CAUSAL_GC_REPORT, request_id="gc",
                                               response_address=CLIENT), self.now)
            (reply,) = step.replies
            reports.append(([(h.key, dict(h.vc)) for h in reply.response.held],
                            list(reply.response.dep_keys)))
        frontier = frontier_from_reports(reports, {k: [dict(v.vc)] for k, v in self.anna.items()})
        for address, core in self.cores.items():
            self.carry(address, core.handle(pb.CacheRequest(
                op=pb.CAUSAL_GC_APPLY, versions=vs.to_proto(
                    {k: vs.Entry(vc) for k, vc in frontier.items()})), self.now))
        return frontier


def read_entries(response: pb.CacheResponse, frames: List[bytes]
                 ) -> Dict[str, Tuple[Observed, List[bytes]]]:
    """The found entries of an answer: key -> (what was read, its values)."""
    out, i = {}, 0
    for e in response.entries:
        if e.found:
            values = list(frames[i:i + e.value_count])
            i += e.value_count
            out[e.key] = (Observed(e.key, dict(e.version.vc),
                                   {d.key: dict(d.vc) for d in e.deps}), values)
    return out


class Call:
    """One simulated DAG call; see the module docstring."""

    def __init__(self, net: Net, cid: str, protocol: str, caches: Tuple[str, str],
                 keys1: List[str], keys2: List[str], writes: List[str],
                 writer: ExecutorWriter) -> None:
        self.net = net
        self.cid = cid
        self.protocol = protocol
        self.x, self.y = (caches[0], caches[0]) if protocol == "ct" else caches
        self.keys1, self.keys2 = sorted(set(keys1)), sorted(set(keys2))
        self.dag = sorted(set(keys1) | set(keys2))
        self.writes = sorted(set(writes))
        self.writer = writer
        self.attempt = f"{cid}#0"
        self.reads: Dict[str, Observed] = {}       # the first read of each key
        self.observed: List[Observed] = []
        self.read_set: vs.VersionSet = {}
        self.committed: List[Version] = []
        self.outcome = ""               # "done", "aborted: ...", "failed: ..."
        self.finished = False           # the flow ran to its end (releases included)
        self.waiting: Optional[str] = None
        self._gen = self._flow()
        self._answer: Any = None

    # ---- driving ----
    def ready(self) -> bool:
        return not self.finished and (self.waiting is None or self.waiting in self.net.answers)

    def advance(self) -> None:
        answer = self.net.answers.pop(self.waiting) if self.waiting is not None else None
        try:
            address, req = self._gen.send(answer)
        except StopIteration:
            self.waiting = None
            self.finished = True
            if not self.outcome:
                self.outcome = "done"
            return
        req.request_id = f"{self.cid}-{uuid.uuid4().hex[:8]}"
        self.waiting = req.request_id
        self.net.send(address, req)

    def transaction(self) -> Transaction:
        return Transaction(self.cid, list(self.observed),
                           [Observed(v.key, dict(v.vc), {d: dict(c) for d, c in v.deps.items()})
                            for v in self.committed])

    # ---- the protocol, as workers and the scheduler run it ----
    def _flow(self) -> Generator:
        ok = yield from (self._opt() if self.protocol == "opt" else self._snapshot_read())
        if ok:
            yield from self._commit()
        for c in sorted({self.x, self.y}):
            yield c, pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=self.attempt)

    def _took(self, answer, what: str) -> Optional[Dict[str, Tuple[Observed, List[bytes]]]]:
        response, frames = answer
        if response.status != pb.OK:
            self.outcome = f"failed: {what}: {response.message} {response.stage}"
            return None
        if response.abort:
            self.outcome = f"aborted: {what}: {response.abort_reason}"
            return None
        got = read_entries(response, frames)
        for k, (o, _) in got.items():
            self.reads.setdefault(k, o)
            self.observed.append(o)             # every read: the checker compares them
            self.read_set = vs.union(self.read_set, {k: vs.Entry(dict(o.vc))})
        return got

    def _bind(self, address: str, keys: List[str], contexts) -> Generator:
        req = pb.CacheRequest(op=pb.CAUSAL_BIND, attempt_id=self.attempt, keys=keys,
                              dag_keys=self.dag,
                              dag_keys_known=all(k in self.dag for k in keys))
        req.upstreams.extend(contexts)
        answer = yield address, req
        if self._took(answer, f"bind of {keys}") is None:
            return None
        return answer[0].context

    def _opt(self) -> Generator:
        c1 = yield from self._bind(self.x, self.keys1, [])
        if c1 is None:
            return False
        c2 = yield from self._bind(self.y, self.keys2, [c1])
        if c2 is None:
            return False
        self.context = c2
        self.read_set = vs.from_proto(c2.read_set)
        return True

    def _snapshot_read(self) -> Generator:
        if self.protocol == "con":
            pieces = {}
            for fn, cache, keys in (("f1", self.x, self.keys1), ("f2", self.y, self.dag)):
                response, _ = yield cache, pb.CacheRequest(
                    op=pb.CAUSAL_SNAPSHOT, attempt_id=self.attempt, keys=keys,
                    dag_keys=self.dag, dag_keys_known=True)
                if response.status != pb.OK:
                    self.outcome = f"failed: snapshot: {response.message}"
                    return False
                pieces[fn] = {p.local.key: Piece(vs.from_proto([p.local])[p.local.key],
                                                 vs.from_proto(p.cut)) for p in response.pieces}
            _, fetches = distributed_snapshot(pieces)
            for fn, cache in (("f1", self.x), ("f2", self.y)):
                if fetches.get(fn):
                    response, _ = yield cache, pb.CacheRequest(
                        op=pb.CAUSAL_FETCH, attempt_id=self.attempt,
                        versions=vs.to_proto(fetches[fn]))
                    if response.status != pb.OK:
                        self.outcome = f"failed: fetch: {response.message}"
                        return False
        for cache, keys in ((self.x, self.keys1), (self.y, self.keys2)):
            if not keys:
                continue
            answer = yield cache, pb.CacheRequest(
                op=pb.CAUSAL_READ, attempt_id=self.attempt, keys=keys, dag_keys=self.dag,
                dag_keys_known=True, explore=self.protocol == "ct")
            if self._took(answer, f"read of {keys}") is None:
                return False
        return True

    def _commit(self) -> Generator:
        if not self.writes:
            return
        # the sink binds the keys it writes that the call read elsewhere, to learn their deps
        unbound = [k for k in self.writes if k in self.read_set and k not in self.reads]
        if unbound:
            if self.protocol == "opt":
                own = pb.CausalContext()
                own.CopyFrom(self.context)
                context = yield from self._bind(self.y, unbound, [own])
                if context is None:
                    return
                self.read_set = vs.from_proto(context.read_set)
            else:
                answer = yield self.y, pb.CacheRequest(
                    op=pb.CAUSAL_READ, attempt_id=self.attempt, keys=unbound,
                    dag_keys=self.dag, dag_keys_known=True, explore=self.protocol == "ct")
                if self._took(answer, f"read of {unbound}") is None:
                    return
        payload = {k: f"{self.cid}:{k}".encode() for k in self.writes}
        read_deps = {k: self.reads[k].deps for k in self.writes if k in self.reads}
        versions = self.writer.commit(payload, self.read_set, read_deps)
        req = pb.CacheRequest(op=pb.CAUSAL_COMMIT, attempt_id=self.attempt,
                              keys=[v.key for v in versions])
        for v in versions:
            req.writes.append(anna_pb2.KeyTuple(key=v.key, lattice_type=anna_pb2.MULTI_CAUSAL,
                                                payload=v.serialize()).SerializeToString())
        response, _ = yield self.y, req
        if response.status != pb.OK:
            self.outcome = f"failed: commit: {response.message} {response.stage}"
            return
        self.committed = versions


def run_interleaving(choose: Callable[[int], int], steps: int = 150, caches: int = 3,
                     keys: int = 5, max_calls: int = 4, capacity_bytes: int = 2 << 30,
                     protocols: Tuple[str, ...] = ("opt", "ct", "con"), gc: bool = True
                     ) -> Tuple[Net, List[Call]]:
    net = Net(caches, capacity_bytes)
    names = [f"k{i}" for i in range(keys)]
    for k in names:
        net.put(k, {f"init/{k}": 1}, value=b"init")
    writers = [ExecutorWriter(f"e{i}") for i in range(3)]
    addresses = sorted(net.cores)
    calls: List[Call] = []

    def pick(seq):
        return seq[choose(len(seq))]

    def subset(lo: int, hi: int) -> List[str]:
        n = lo + choose(hi - lo + 1)
        return [pick(names) for _ in range(n)]

    def start() -> None:
        x = pick(addresses)
        y = pick([a for a in addresses if a != x])
        k1, k2 = subset(0, 2), subset(1, 2)
        w = [k for k in subset(0, 2) if k in k1 or k in k2] or ([] if choose(2) else [pick(names)])
        calls.append(Call(net, f"t{len(calls)}", pick(list(protocols)), (x, y), k1, k2, w,
                          pick(writers)))

    for _ in range(steps):
        active = [c for c in calls if c.ready()]
        events: List[Callable[[], None]] = []
        if sum(1 for c in calls if not c.finished) < max_calls:
            events.append(start)
        events += [c.advance for c in active]
        events += [lambda i=i: net.complete(i) for i in range(len(net.io))]
        pushable = [(a, k) for a in addresses for k in sorted(net.subscribed[a])]
        if pushable:
            events.append(lambda: net.push(*pick(pushable)))
        events.append(lambda: net.tick(0.001 * (1 + choose(20))))
        events.append(net.sweep)
        if gc:
            events.append(net.gc)
        pick(events)()
    # let everything finish: every I/O completes, every call runs to its end
    for _ in range(10_000):
        if all(c.finished for c in calls):
            break
        if net.io:
            net.complete(0)
        elif any(c.ready() for c in calls):
            next(c for c in calls if c.ready()).advance()
        else:
            net.tick(0.05)
    unfinished = [(c.cid, c.protocol, c.waiting) for c in calls if not c.finished]
    assert not unfinished, f"calls never finished: {unfinished}"
    return net, calls
