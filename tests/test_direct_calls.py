"""The direct leased call path on real processes: a client holding a worker lease sends its
calls straight to the worker; the worker admits only calls within a lease the scheduler
granted; a lease follows worker deaths and gives way to calls waiting for capacity."""
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest
import zmq

from cloudburst import LocalCluster
from cloudburst.errors import LeaseRefused, ObjectNotFound, WorkerDied, error_from_status
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import FUNCTION, Security, credentials_of
from runtime.framing import parse, recv_frame
from runtime.sockets import PushCache, bind_pull
from scheduler.config import SchedulerConfig
from waiting import poll_until, run_in_threads


def where(lib, x):
    return (x, lib.getid())


def mark(lib, x):
    lib.put(f"direct-mark-{x}", x)
    return x


def slow(lib, seconds):
    import time
    time.sleep(seconds)
    return lib.getid()


def ticker(lib, key, n):
    import time
    for i in range(n):
        lib.put(key, i)
        time.sleep(0.1)
    return n


def slow_mark(lib, x, seconds):
    import time
    time.sleep(seconds)
    lib.put(f"direct-slow-mark-{x}", x)
    return x


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        cb = c.client()
        cb.register(where, "where")
        cb.register(mark, "mark")
        cb.register(slow, "slow")
        cb.register(slow_mark, "slow_mark")
        cb.register(ticker, "ticker")
        yield c


def _leased(cb, target, *args):
    """The client's lease on `target`; with `args`, calls it until it holds one (a client
    asks for a lease when it calls, and not again for a second after a refusal)."""
    def held():
        if args:
            cb.call(target, *args).get(30)
        return [h for h in cb.worker_leases if h["target"] == target]
    return poll_until(held, 15.0, f"a worker lease on {target!r}", interval=0.2)[0]


def test_calls_go_straight_to_the_leased_worker_and_are_reported_afterwards(cluster):
    cb = cluster.client(direct=True)
    assert cb.call("where", 0).get(10)[0] == 0          # the scheduler's path; asks a lease
    lease = _leased(cb, "where")
    # with the scheduler stopped, only calls that do not pass through it can finish
    cluster.signal_scheduler(0, signal.SIGSTOP)
    try:
        got = [cb.call("where", i).get(5) for i in range(1, 21)]
    finally:
        cluster.signal_scheduler(0, signal.SIGCONT)
    assert [x for x, _ in got] == list(range(1, 21))
    assert {w for _, w in got} == {lease["worker_id"]}
    cb.close()                       # gives the lease back with the calls it made under it
    observer = cluster.client()
    poll_until(lambda: any(s.name == "where" and s.calls >= 21
                           for s in observer.status().functions), 10.0,
               "the scheduler counting the direct calls its client reported")


def test_several_threads_sharing_a_direct_client_each_get_their_own_answers(cluster):
    """One thread reads the answers while the others wait for it: each waiting caller is
    woken for its answer (not only at its own read's timeout) and gets its own value."""
    cb = cluster.client(direct=True)
    _leased(cb, "where", 0)
    got = {}

    def caller(t):
        got[t] = [cb.call("where", t * 1000 + i).get(10)[0] for i in range(40)]

    run_in_threads(caller, 4, 60.0, "a caller waiting for its answers")
    assert got == {t: [t * 1000 + i for i in range(40)] for t in range(4)}
    cb.close()


class RawClient:
    """A client speaking the wire protocol itself, with the cluster's client key: it can
    send whatever it likes, as an abusive client would."""

    def __init__(self, cluster):
        self.context = zmq.Context()
        self.security = Security.start(self.context, cluster.client_auth)
        creds = credentials_of(self.security)
        self.pull, self.address = bind_pull(self.context, "127.0.0.1", auth=creds,
                                            audience=FUNCTION)
        self.push = PushCache(self.context, auth=creds, linger_ms=0)
        self.scheduler = cluster.address
        self.n = 0
        # call ids unique across clients, as a real client's are (a worker keeps the
        # outcomes of the calls it ran under their ids)
        self.prefix = __import__("uuid").uuid4().hex[:8]
        self.received = {}           # (kind, request id) -> answers read while waiting for another
        self.direct_results = 0      # direct_results messages read

    def recv(self, kind, request_id, timeout=10.0):
        def one():
            if (kind, request_id) in self.received:
                return self.received.pop((kind, request_id))
            if not self.pull.poll(100):
                return None
            k, payload = parse(recv_frame(self.pull))
            if k == "direct_results":      # several results of a direct_batch in one message
                self.direct_results += 1
                for r in pb.DirectResults.FromString(payload).results:
                    self.received[("result", r.request_id)] = r
                return None
            m = {"worker_lease": pb.WorkerLease, "result": pb.CallResult}[k].FromString(payload)
            if (k, m.request_id) != (kind, request_id):
                self.received[(k, m.request_id)] = m
                return None
            return m
        return poll_until(one, timeout, f"a {kind} answering {request_id}", interval=0)

    def lease(self, target):
        """A lease on `target`, asked for again while no worker has a slot to lease (the
        leases and calls of the tests before may hold them for a while)."""
        def ask():
            self.n += 1
            rid = f"lease-{self.n}"
            assert self.push.send(self.scheduler, "lease_worker", pb.LeaseRequest(
                request_id=rid, response_address=self.address, target=target))
            m = self.recv("worker_lease", rid)
            if m.status == pb.NO_RESOURCES and "free slot" in m.reason:
                return None
            assert m.status == pb.OK and m.lease_id and m.worker_address, m
            return m
        return poll_until(ask, 15.0, f"a worker lease on {target!r}", interval=0.1)

    def release(self, lease):
        assert self.push.send(self.scheduler, "lease_worker", pb.LeaseRequest(
            response_address=self.address, release=[lease.lease_id]))

    def _call(self, lease, x, lease_id=None, request_id=None, function="mark"):
        self.n += 1
        call = pb.Call(request_id=request_id or f"raw-{self.prefix}-{self.n}", function=function, timeout=10.0,
                       response_address=self.address,
                       lease_id=lease.lease_id if lease_id is None else lease_id)
        call.args[function].args.add(value=__import__("cloudpickle").dumps(x))
        return call

    def direct(self, lease, x, lease_id=None, request_id=None):
        call = self._call(lease, x, lease_id, request_id)
        assert self.push.send(lease.worker_address, "direct", call)
        return self.recv("result", call.request_id)

    def batch(self, lease, xs_and_lease_ids, function="mark"):
        """One direct_batch to the lease's worker; the results, in the calls' order."""
        calls = [self._call(lease, x, lid, function=function) for x, lid in xs_and_lease_ids]
        assert self.push.send(lease.worker_address, "direct_batch", pb.DirectBatch(calls=calls))
        return [self.recv("result", c.request_id) for c in calls]

    def close(self):
        self.push.close()
        self.pull.close(0)
        self.security.stop()
        self.context.term()


def _refused(result, why):
    assert result.status == pb.LEASE_REFUSED, result
    error = error_from_status(result.status, result.message)
    assert isinstance(error, LeaseRefused) and why in str(error), str(error)
    return True


def _first_refusal(raw, lease, xs, interval):
    """Send direct calls (marking x) until one is refused; (x, its result)."""
    xs = iter(xs)

    def one():
        x = next(xs)
        r = raw.direct(lease, x)
        return (x, r) if r.status != pb.OK else None
    return poll_until(one, 10.0, "a direct call refused", interval=interval)


def test_a_forged_a_revoked_and_an_expired_lease_are_refused_typed_and_nothing_runs(cluster):
    cb = cluster.client()
    raw = RawClient(cluster)
    try:
        lease = raw.lease("mark")
        admitted = lambda lease, x: raw.direct(lease, x).status == pb.OK   # noqa: E731
        # a granted lease admits (once the worker has the grant, which goes to it first but
        # over another connection than the client's)
        poll_until(lambda: admitted(lease, 1), 5.0, "a direct call admitted")
        assert cb.get("direct-mark-1") == 1
        _refused(raw.direct(lease, 2, lease_id="f" * 32), "no lease of that id was granted")
        raw.release(lease)                                 # the scheduler revokes it
        revoked_x, revoked = _first_refusal(raw, lease, range(100, 200), 0.02)
        _refused(revoked, "revoked")
        second = raw.lease("mark")                         # never renewed: expires (2 s)
        poll_until(lambda: admitted(second, 3), 5.0, "a direct call admitted")
        expired_x, expired = _first_refusal(raw, second, range(200, 300), 0.2)
        _refused(expired, "expired")
        for x in (2, revoked_x, expired_x):                # refused calls never ran
            with pytest.raises(ObjectNotFound):
                cb.get(f"direct-mark-{x}")
    finally:
        raw.close()


def test_a_worker_dying_under_a_lease_retries_the_call_or_fails_it_typed(cluster):
    cb = cluster.client(direct=True)
    cb.call("slow", 0.0).get(10)
    lease = _leased(cb, "slow")
    retried = cb.call("slow", 2.0, timeout=30)
    assert _leased(cb, "slow")["in_flight"] == 1           # it went direct
    poll_until(lambda: any(w["worker_id"] == lease["worker_id"] for w in cluster.workers),
               5.0, "the leased worker listed")
    cluster.kill_worker(lease["worker_id"])
    assert retried.get(30)                                 # ran again through the scheduler
    lease = _leased(cb, "slow", 0.0)
    lost = cb.call("slow", 2.0, timeout=30, max_retries=0)
    assert _leased(cb, "slow")["in_flight"] == 1
    cluster.kill_worker(lease["worker_id"])
    with pytest.raises(WorkerDied) as e:
        lost.get(30)
    assert "direct call under a worker lease" in str(e.value)
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)


def test_a_lease_gives_its_worker_back_to_calls_that_wait(cluster):
    """Calls follow capacity: a lease in use holds its worker only until calls wait for one."""
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    raw = RawClient(cluster)
    stop = threading.Event()
    renewer = None
    try:
        lease = raw.lease("where")     # every free slot of an idle worker (its window)
        assert 1 <= lease.slots <= SchedulerConfig.max_worker_slots, lease    # the window
        revoked = []

        def keep_renewing():                       # a client using its lease all along
            while not stop.wait(0.2):
                raw.push.send(raw.scheduler, "lease_worker", pb.LeaseRequest(
                    response_address=raw.address, renew=[lease.lease_id]))
                while raw.pull.poll(0):            # this thread alone reads it meanwhile
                    kind, payload = parse(recv_frame(raw.pull))
                    m = pb.WorkerLease.FromString(payload) if kind == "worker_lease" else None
                    if m is not None and m.revoked and m.lease_id == lease.lease_id:
                        revoked.append(m.reason)

        renewer = threading.Thread(target=keep_renewing, daemon=True)
        renewer.start()
        cb = cluster.client(direct=False)
        calls = []

        def one_more():       # until they fill every free slot (the windows vary) and wait
            calls.append(cb.call("slow", 1.0, timeout=60))
            return revoked
        poll_until(one_more, 15.0, "the lease's revocation", interval=0.2)
        ran_on = [c.get(60) for c in calls]
    finally:
        stop.set()
        if renewer is not None:
            renewer.join(5)
        raw.close()
    # the first fill the free slots (the other worker's, and any of the leased worker's
    # that no lease takes); the next waits, the lease is revoked, and the leased worker
    # runs calls. (A call placed on a free slot of the leased worker revokes it at once:
    # another caller's call is there, which a direct call would wait behind.)
    assert "wait for a free worker" in revoked[0] or "another caller's call" in revoked[0], \
        revoked
    assert lease.worker_id in ran_on, (lease.worker_id, ran_on)


def test_a_direct_call_is_cancelled_and_stopped_at_its_time_limit(cluster):
    from cloudburst.errors import Cancelled, Timeout
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb = cluster.client(direct=True)
    lease = _leased(cb, "slow", 0.0)
    running = cb.call("slow", 30.0, timeout=60)
    assert _leased(cb, "slow")["in_flight"] == 1             # it went direct
    assert running.cancel()
    with pytest.raises(Cancelled):
        running.get(5)
    # the function was stopped: its worker answered for it, and runs the next call at once
    poll_until(lambda: _leased(cb, "slow")["in_flight"] == 0, 10.0, "the cancelled call's end")
    # with the scheduler stopped, only a direct call can finish (a call this short may be
    # over before the client looks at its lease, so its count in flight proves nothing)
    cluster.signal_scheduler(0, signal.SIGSTOP)
    try:
        assert cb.call("slow", 0.0, timeout=10).get(10) == lease["worker_id"]
    finally:
        cluster.signal_scheduler(0, signal.SIGCONT)
    limited = cb.call("slow", 30.0, timeout=60, time_limit=0.5)
    assert _leased(cb, "slow")["in_flight"] == 1
    with pytest.raises(Timeout) as e:
        limited.get(20)
    assert "time limit" in str(e.value)


def test_a_batch_of_direct_calls_admits_each_call_only_within_its_lease(cluster):
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb = cluster.client()
    raw = RawClient(cluster)
    try:
        lease = raw.lease("mark")
        poll_until(lambda: raw.direct(lease, 400).status == pb.OK, 5.0,
                   "a direct call admitted")
        ok, forged = raw.batch(lease, [(401, None), (402, "f" * 32)])
        assert ok.status == pb.OK and cb.get("direct-mark-401") == 401
        _refused(forged, "no lease of that id was granted")
        with pytest.raises(ObjectNotFound):                # the forged one never ran
            cb.get("direct-mark-402")
    finally:
        raw.close()


def test_the_results_of_a_batch_of_direct_calls_come_back_together(cluster):
    """A worker running a direct_batch answers its calls in one direct_results message
    (executor/result_batch.py), and every call is answered once."""
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    raw = RawClient(cluster)
    try:
        lease = raw.lease("where")         # a short call: results are held across short ones
        poll_until(lambda: raw.batch(lease, [(0, None)], "where")[0].status == pb.OK, 5.0,
                   "a direct call admitted")
        xs = itertools.count(3001, 2)

        def together():      # a result is held at most briefly: a slow turn sends it alone
            x = next(xs)
            raw.push.send(raw.scheduler, "lease_worker", pb.LeaseRequest(   # kept live
                response_address=raw.address, renew=[lease.lease_id]))
            results = raw.batch(lease, [(x, None), (x + 1, None)], "where")
            assert [r.status for r in results] == [pb.OK, pb.OK], results
            return raw.direct_results > 0
        poll_until(together, 10.0, "two direct calls answered in one message", interval=0)
        # nothing answered twice, or unasked
        assert not [m for (kind, _), m in raw.received.items() if kind == "result"]
    finally:
        raw.close()


def test_another_clients_registration_reaches_a_leased_clients_next_call(cluster):
    """A registration revokes the leases that run the name at once: the leased client's
    next calls run what was registered, not the version its lease was granted for (a call
    that reaches the worker before the revocation, over another connection, may still run
    the old one: one is allowed; before, a renewal caught it, up to about a second later)."""
    cb = cluster.client(direct=True)
    other = cluster.client()
    other.register(lambda x: ("v1", x), "versioned")
    _leased(cb, "versioned", 0)                  # calls it until the client holds a lease
    assert cb.call("versioned", 1).get(10) == ("v1", 1)
    assert _leased(cb, "versioned")              # still held: the next call would go direct
    other.register(lambda x: ("v2", x), "versioned")
    got = [cb.call("versioned", x).get(10) for x in (2, 3)]
    assert got[1] == ("v2", 3) and got[0] in (("v1", 2), ("v2", 2)), got
    cb.close()
    other.close()


def test_a_burst_queues_at_the_client_against_leases_on_both_workers(cluster):
    """Calls beyond its leases' slots wait in the client's own queue (not the scheduler's),
    and the client holds a lease on each worker: with the scheduler stopped, a burst of
    calls in flight still completes, on both workers."""
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb = cluster.client(direct=True)
    cb.call("where", 0).get(10)

    def spread():          # calls queued at the client make it ask for a second lease
        burst = SchedulerConfig.max_worker_slots + 20     # more than one lease holds
        [f.get(30) for f in [cb.call("where", i) for i in range(burst)]]
        return len({h["worker_id"] for h in cb.worker_leases if h["target"] == "where"}) == 2
    poll_until(spread, 15.0, "leases on both workers", interval=0.1)
    cluster.signal_scheduler(0, signal.SIGSTOP)
    try:
        # more than one lease's slots (at most max_worker_slots): both workers run some
        calls = SchedulerConfig.max_worker_slots * 2 + 32
        futures = [cb.call("where", i) for i in range(calls)]
        got = [f.get(5) for f in futures]
    finally:
        cluster.signal_scheduler(0, signal.SIGCONT)
    assert [x for x, _ in got] == list(range(calls))
    assert len({w for _, w in got}) == 2, got
    cb.close()


def test_a_call_cancelled_while_queued_at_the_client_never_runs(cluster):
    from cloudburst.errors import Cancelled
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb = cluster.client(direct=True)
    _leased(cb, "slow_mark", -1, 0.0)
    # more calls than two leases can hold: a lease holds at most max_worker_slots, and the
    # fast first call may have widened the worker's window that far
    n = 2 * SchedulerConfig.max_worker_slots + 8
    futures = [cb.call("slow_mark", 500 + i, 0.05, timeout=60) for i in range(n)]
    last = futures[-1]
    assert cb.worker_leases and sum(h["in_flight"] for h in cb.worker_leases
                                    if h["target"] == "slow_mark") < n   # some queued here
    assert last.cancel()
    with pytest.raises(Cancelled):
        last.get(5)
    assert [f.get(60) for f in futures[:-1]] == [500 + i for i in range(n - 1)]
    with pytest.raises(ObjectNotFound):
        cb.get(f"direct-slow-mark-{500 + n - 1}")
    cb.close()


HOLDER = textwrap.dedent("""
    import sys, time, cloudburst
    address, key_dir, name, key = sys.argv[1:5]
    c = cloudburst.Client(address, auth=cloudburst.AuthConfig(key_dir, name), lease_ttl=1.0,
                          direct=True)
    deadline = time.monotonic() + 20
    while not [h for h in c.worker_leases if h["target"] == "ticker"]:
        assert time.monotonic() < deadline, "no lease"
        c.call("ticker", key + "-warm", 1).get(30)
        time.sleep(0.1)
    future = c.call("ticker", key, 600, timeout=120)
    assert [h["in_flight"] for h in c.worker_leases if h["target"] == "ticker"] == [1]
    print("direct", flush=True)
    future.get(timeout=120)          # killed while waiting here
""")


def test_a_direct_call_of_a_client_killed_mid_lease_is_stopped(cluster):
    """The lease's holder is gone (killed with SIGKILL): its worker lease lapses, the
    scheduler hears no more of the client, and the worker stops the call it admitted."""
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb = cluster.client()
    key = f"ticks-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, cluster.address, cluster.key_dir,
                             cluster.client_auth.identity, key],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "direct", proc.stderr.read()

        def tick():
            try:
                return cb.get(key)
            except ObjectNotFound:
                return None
        poll_until(lambda: (tick() or 0) >= 2, 15, "the direct call ticking")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed = time.monotonic()

        def stopped():
            before = tick()
            time.sleep(0.5)
            return tick() == before
        # the lease lapses (2 s), the client's own lease on its calls (1 s) runs out: then
        # the worker is told, well before the call's 60 s of ticks would end
        poll_until(stopped, 12, "the killed client's direct call stopped", interval=0)
        assert time.monotonic() - killed < 12
        last = tick()
        time.sleep(1.5)                      # an observation window: it stays stopped
        assert tick() == last < 550
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_a_direct_call_id_used_twice_is_refused_typed_and_frees_its_slot(cluster):
    cb = cluster.client()
    raw = RawClient(cluster)
    try:
        lease = raw.lease("mark")
        rid = f"raw-{raw.prefix}-again"
        poll_until(lambda: raw.direct(lease, 500, request_id=rid).status == pb.OK, 5.0,
                   "a direct call admitted")
        assert cb.get("direct-mark-500") == 500
        again = raw.direct(lease, 501, request_id=rid)      # answered, not left waiting
        assert again.status == pb.INVALID_ARGUMENTS and "already ran" in again.message, again
        with pytest.raises(ObjectNotFound):                 # it did not run again
            cb.get("direct-mark-501")
        for x in range(502, 502 + lease.slots + 1):         # every slot is free again
            assert raw.direct(lease, x).status == pb.OK
    finally:
        raw.close()
