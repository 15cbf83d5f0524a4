"""Direct calls over call links on real processes: a client sends its leased calls over a
TCP link to the worker and reads their results from it; the worker admits link frames
exactly as frames of its direct socket (keys, roles, leases), closes a link that breaks the
rules and keeps serving, and a client whose link fails uses ZeroMQ."""
import signal
import socket
import struct
import time

import pytest
import zmq.utils.z85 as z85

from cloudburst import LocalCluster
from cloudburst.errors import CallLinkBroken, ObjectNotFound, WorkerDied
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import CLUSTER, AuthConfig, parse_address
from runtime.framing import encode, parse
from sealed_link import LinkPeer, keypair
from runtime.auth import Security, credentials_of
from runtime.sockets import PushCache
from test_direct_calls import RawClient, slow
from waiting import poll_until


def inc(lib, x):
    return x + 1


def square(lib, x):
    return x * x


def hold(lib, key):
    """Returns at once for no key; else runs until the KVS key `key` is written (at most
    60 s), having written `key`-started."""
    import time
    if not key:
        return 0
    lib.put(key + "-started", 1)
    deadline = time.monotonic() + 60
    while lib.get(key, default=None) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return 1


def mark(lib, x):
    lib.put(f"link-mark-{x}", x)
    return x


def _setup(c):
    cb = c.client()
    cb.register(inc, "inc")
    cb.register(square, "square")
    cb.register(mark, "mark")
    cb.register(slow, "slow")
    cb.register_dag("inc_square", ["inc", "square"], [("inc", "square")])


@pytest.fixture(scope="module", params=[True, False], ids=["auth", "plain"])
def cluster(request):
    with LocalCluster(executor_nodes=1, executors_per_node=2, auth=request.param) as c:
        _setup(c)
        yield c


@pytest.fixture(scope="module")
def secured():
    with LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        _setup(c)
        yield c


def _leased(cb, target, call):
    """Call until the client holds a lease on `target` (it asks for one on its first call)."""
    def held():
        call()
        return [h for h in cb.worker_leases if h["target"] == target]
    return poll_until(held, 15.0, f"a worker lease on {target!r}", interval=0.2)[0]


def _linked(cb, target, call):
    """`_leased`, then call until a call goes on the worker's link (it opens in the
    background after the first call there, which goes over ZeroMQ)."""
    lease = _leased(cb, target, call)

    def on_link():
        sent = _link_stats(cb)["sent"]
        call()
        return _link_stats(cb)["sent"] > sent
    poll_until(on_link, 15.0, f"a call to {target!r} on a link", interval=0.05)
    return lease


def _link_stats(cb):
    return cb._direct.links.stats()


def test_calls_and_a_dag_go_over_the_link_and_their_results_come_back_on_it(cluster):
    cb = cluster.client(direct=True)
    _linked(cb, "inc", lambda: cb.call("inc", 0).get(10))
    _linked(cb, "inc_square", lambda: cb.call_dag("inc_square", {"inc": [0]}).get(10))
    before = _link_stats(cb)
    assert [cb.call("inc", i).get(10) for i in range(20)] == [i + 1 for i in range(20)]
    assert [cb.call_dag("inc_square", {"inc": [i]}).get(10) for i in range(20)] == \
        [(i + 1) ** 2 for i in range(20)]
    after = _link_stats(cb)
    # every call was written on a link, and every result came back on one: the worker
    # answers on a link only the calls that arrived on it
    assert after["opened"] >= 1 and after["open"] >= 1
    assert after["sent"] - before["sent"] == 40, (before, after)
    assert after["results"] - before["results"] == 40, (before, after)
    assert after["failures"] == before["failures"]
    cb.close()


def test_a_burst_over_the_link_comes_back_on_it(cluster):
    cb = cluster.client(direct=True)
    _linked(cb, "inc", lambda: cb.call("inc", 0).get(10))
    before = _link_stats(cb)
    futures = [cb.call("inc", i) for i in range(300)]
    assert [f.get(20) for f in futures] == [i + 1 for i in range(300)]
    after = _link_stats(cb)
    on_links = after["calls"] - before["calls"]
    # Most of the burst goes on links (the linked worker's lease takes at least its window;
    # a lease spread to the other worker uses ZeroMQ until that worker's link has opened,
    # and a few calls may queue via the scheduler) ...
    assert on_links >= 100, (before, after)
    # ... and every call written on a link is answered on it
    assert after["results"] - before["results"] == on_links, (before, after)
    cb.close()


@pytest.fixture
def leased(secured):
    """A raw client holding a lease on "mark", the lease, and its worker's server key."""
    raw = RawClient(secured)
    try:
        lease = raw.lease("mark")
        assert lease.link_address, lease
        yield raw, lease, z85.decode(parse_address(lease.worker_address)[1])
    finally:
        raw.close()


def _call(raw, lease, x, function="mark"):
    raw.n += 1
    call = pb.Call(request_id=f"link-{raw.prefix}-{raw.n}", function=function, timeout=10.0,
                   response_address=raw.address, lease_id=lease.lease_id)
    call.args[function].args.add(value=__import__("cloudpickle").dumps(x))
    return call


def _peer(lease, server_key, pair):
    """A link to the lease's worker with a Z85 key pair; its handshake is the test's."""
    return LinkPeer(lease.link_address, server_key, z85.decode(pair.public),
                    z85.decode(pair.secret))


def _result(peer):
    data = peer.recv()
    assert data is not None, "the worker closed the link"
    kind, payload = parse(data)
    assert kind == "result", kind
    return pb.CallResult.FromString(payload)


def _admitted_call(raw, lease, peer, x):
    """Send direct calls on `peer` until one is admitted (the grant reaches the worker over
    another connection than the lease reaches the client)."""
    def one():
        r = _result_of(peer, _call(raw, lease, x))
        return r if r.status == pb.OK else None
    return poll_until(one, 5.0, "a direct call admitted on a link", interval=0.05)


def _result_of(peer, call):
    peer.send(encode("direct", call))
    return _result(peer)


def test_a_key_the_cluster_does_not_admit_is_refused_at_the_link_handshake(leased):
    raw, lease, server_key = leased
    stranger = LinkPeer(lease.link_address, server_key, *keypair())
    try:
        assert stranger.handshake() == "unknown public key"
        assert stranger.closed_by_worker()
    finally:
        stranger.close()
    assert raw.direct(lease, 1).status == pb.OK          # the worker goes on serving


def test_a_link_frame_from_a_key_not_the_leases_client_is_refused_as_on_zeromq(secured, leased):
    raw, lease, server_key = leased
    cb = secured.client()
    peer = _peer(lease, server_key, secured.client_auth.load().keypair)
    assert peer.handshake() is None
    assert _admitted_call(raw, lease, peer, 10).value      # the lease's client: runs
    peer.close()
    for pair in (AuthConfig(secured.key_dir, CLUSTER).load().keypair,
                 AuthConfig(secured.key_dir, CLUSTER).function_keypair()):
        other = _peer(lease, server_key, pair)
        try:
            assert other.handshake() is None    # admitted keys (as on the direct socket)
            for x in (11, 12):
                on_link = _result_of(other, _call(raw, lease, x))
                assert on_link.status == pb.LEASE_REFUSED, on_link
                assert "another client" in on_link.message, on_link.message
        finally:
            other.close()
    # over ZeroMQ the cluster key's call is refused the same way
    context = __import__("zmq").Context()
    security = Security.start(context, secured.cluster_auth)
    push = PushCache(context, auth=credentials_of(security), linger_ms=0)
    try:
        call = _call(raw, lease, 14)
        assert push.send(lease.worker_address, "direct", call)
        over_zeromq = raw.recv("result", call.request_id)
    finally:
        push.close()
        security.stop()
        context.term()
    assert over_zeromq.status == pb.LEASE_REFUSED
    assert over_zeromq.message.split(": ", 1)[1] == on_link.message.split(": ", 1)[1]
    assert raw.direct(lease, 13).status == pb.OK       # the lease's own client still runs
    for x in (11, 12, 14):                             # refused calls never ran
        with pytest.raises(ObjectNotFound):
            cb.get(f"link-mark-{x}")


def test_a_tampered_or_replayed_frame_closes_the_link_and_the_worker_keeps_serving(secured, leased):
    raw, lease, server_key = leased
    cb = secured.client()
    client = secured.client_auth.load().keypair
    tampered = _peer(lease, server_key, client)
    assert tampered.handshake() is None
    _admitted_call(raw, lease, tampered, 20)
    frame = bytearray(tampered.frame_for(encode("direct", _call(raw, lease, 21))))
    frame[-1] ^= 1
    tampered.sock.sendall(bytes(frame))
    assert tampered.closed_by_worker()
    tampered.close()
    replayed = _peer(lease, server_key, client)
    assert replayed.handshake() is None
    _admitted_call(raw, lease, replayed, 22)
    again = replayed.frame_for(encode("direct", _call(raw, lease, 23)))
    replayed.sock.sendall(again)
    assert _result(replayed).status == pb.OK
    replayed.sock.sendall(again)
    assert replayed.closed_by_worker()
    replayed.close()
    with pytest.raises(ObjectNotFound):
        cb.get("link-mark-21")
    fresh = _peer(lease, server_key, client)        # the worker still serves
    try:
        assert fresh.handshake() is None
        assert _result_of(fresh, _call(raw, lease, 24)).status == pb.OK
    finally:
        fresh.close()
    assert raw.direct(lease, 25).status == pb.OK


def test_a_link_that_cannot_be_opened_falls_back_to_zeromq(cluster, monkeypatch):
    from cloudburst import direct
    taken = direct.DirectPath.on_lease

    def nowhere(self, m):
        if m.link_address:
            m.link_address = "tcp://127.0.0.1:1"        # nothing listens there
        return taken(self, m)
    monkeypatch.setattr(direct.DirectPath, "on_lease", nowhere)
    cb = cluster.client(direct=True)
    _leased(cb, "inc", lambda: cb.call("inc", 0).get(10))
    # with the scheduler stopped, only calls sent straight to the worker can finish
    cluster.signal_scheduler(0, signal.SIGSTOP)
    try:
        got = [cb.call("inc", i).get(5) for i in range(10)]
    finally:
        cluster.signal_scheduler(0, signal.SIGCONT)
    assert got == [i + 1 for i in range(10)]
    stats = _link_stats(cb)
    assert stats["failures"] >= 1 and stats["opened"] == 0 and stats["results"] == 0, stats
    cb.close()


def test_a_call_never_waits_for_a_link_to_open(cluster, monkeypatch):
    """A worker that cannot answer the handshake (here a listener nobody serves, as a
    worker busy in a long call is) costs a call nothing: call() returns at once and the
    call goes over ZeroMQ while the link opens in the background, until its deadline."""
    from cloudburst import call_link, direct
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)                          # connects complete; nothing ever answers
    taken = direct.DirectPath.on_lease

    def unanswered(self, m):
        if m.link_address:
            m.link_address = "tcp://127.0.0.1:%d" % silent.getsockname()[1]
        return taken(self, m)
    monkeypatch.setattr(direct.DirectPath, "on_lease", unanswered)
    monkeypatch.setattr(call_link, "OPEN_TIMEOUT", 20.0)   # a handshake that long
    cb = cluster.client(direct=True)
    slowest = [0.0]

    def call(*args, **kwargs):
        start = time.monotonic()
        future = cb.call(*args, **kwargs)
        slowest[0] = max(slowest[0], time.monotonic() - start)
        return future
    try:
        _leased(cb, "inc", lambda: call("inc", 0).get(10))
        cluster.signal_scheduler(0, signal.SIGSTOP)   # only direct calls can finish
        try:
            got = [call("inc", i).get(5) for i in range(10)]
        finally:
            cluster.signal_scheduler(0, signal.SIGCONT)
        assert got == [i + 1 for i in range(10)]
        stats = _link_stats(cb)
        assert stats["opening"] == 1 and stats["opened"] == 0 and stats["sent"] == 0, stats
        # generous: a call that waited for the handshake would have taken its 20 s
        assert slowest[0] < 5.0, slowest
    finally:
        cb.close()
        silent.close()


def test_a_link_opens_while_its_client_neither_calls_nor_waits(cluster):
    """The first call to a leased worker starts opening its link and goes over ZeroMQ; the
    link then opens in the background (the lease thread reads), not only once its client
    next calls or waits."""
    cb = cluster.client(direct=True)
    try:
        _leased(cb, "inc", lambda: cb.call("inc", 0).get(10))
        cb._direct.links.close()                 # start again: no link, none opening
        future = cb.call("inc", 1)               # starts opening it; goes over ZeroMQ
        assert _link_stats(cb)["opening"] == 1, _link_stats(cb)
        # (looked at without reading answers: only the client's own threads read)
        poll_until(lambda: _link_stats(cb)["opened"] >= 1, 5.0,
                   "the link opening while its client neither calls nor waits",
                   interval=0.01)
        assert future.get(10) == 2
        _linked(cb, "inc", lambda: cb.call("inc", 2).get(10))     # and it carries calls
    finally:
        cb.close()


def test_a_link_the_client_leases_no_more_is_closed(cluster):
    cb = cluster.client(direct=True)
    _linked(cb, "inc", lambda: cb.call("inc", 0).get(10))
    assert cb.call("inc", 1).get(10) == 2 and _link_stats(cb)["open"] == 1
    cb._direct.release_all()
    cb._direct.flush()
    assert _link_stats(cb)["open"] == 0
    # half-closed: the worker closes its end, and the client forgets the link then
    poll_until(lambda: not cb._direct.links.active() or cb._read_arrived(), 5.0,
               "the worker closing the link")
    assert cb.call("inc", 2).get(10) == 3
    cb.close()


def test_the_result_of_a_call_whose_link_the_worker_closed_comes_over_zeromq(secured, leased):
    raw, lease, server_key = leased
    peer = _peer(lease, server_key, secured.client_auth.load().keypair)
    try:
        assert peer.handshake() is None
        _admitted_call(raw, lease, peer, 30)
        call = _call(raw, lease, 31)
        # a whole call, then a frame above the limit: the worker closes the link as it reads
        # them, and runs the call it read whole
        peer.sock.sendall(peer.frame_for(encode("direct", call)) + struct.pack("<I", 1 << 30))
        assert peer.closed_by_worker()
        result = raw.recv("result", call.request_id)
        assert result.status == pb.OK, result
    finally:
        peer.close()


def test_a_worker_closing_a_link_for_a_fault_says_how_many_frames_it_served(secured, leased):
    """The calls written after the fault never run; the worker's last frame tells the
    client how far it read, so the client knows which (and sends them elsewhere)."""
    raw, lease, server_key = leased
    cb = secured.client()
    peer = _peer(lease, server_key, secured.client_auth.load().keypair)
    try:
        assert peer.handshake() is None
        _admitted_call(raw, lease, peer, 40)
        ran, after = _call(raw, lease, 41), _call(raw, lease, 42)
        whole = peer.frame_for(encode("direct", ran))
        served = peer.sent                       # every frame so far, this one included
        tampered = bytearray(peer.frame_for(encode("direct", _call(raw, lease, 43))))
        tampered[-1] ^= 1
        peer.sock.sendall(whole + bytes(tampered) + peer.frame_for(encode("direct", after)))
        farewell = peer.recv()
        assert farewell is not None and farewell.startswith(b"CL1F%d " % served), farewell
        assert b"does not authenticate" in farewell
        assert peer.closed_by_worker()
        assert raw.recv("result", ran.request_id).status == pb.OK   # over ZeroMQ
        assert cb.get("link-mark-41") == 41
        with pytest.raises(ObjectNotFound):
            cb.get("link-mark-42")
    finally:
        peer.close()
        cb.close()


def _answers_on(peer, request_id, timeout=5.0):
    """The results a peer's link carries for `request_id` (alone or in a batch) until one
    came, or `timeout` passed (then none)."""
    import socket as sockets
    got = []
    try:
        while not got:
            data = peer.recv(timeout)
            if data is None:
                break
            kind, payload = parse(data)
            results = pb.DirectResults.FromString(payload).results if kind == "direct_results" \
                else [pb.CallResult.FromString(payload)]
            got += [r for r in results if r.request_id == request_id]
    except sockets.timeout:
        pass
    return got


def test_a_refusal_goes_back_on_the_link_its_call_came_on(secured):
    """Two links carry calls of one id while the first runs: the duplicate's refusal goes
    on the duplicate's link, never on the other's (which may be another client's)."""
    cb = secured.client()
    cb.register(hold, "hold")
    raw = RawClient(secured)
    a = b = None
    try:
        lease = raw.lease("hold")
        server_key = z85.decode(parse_address(lease.worker_address)[1])
        pair = secured.client_auth.load().keypair
        a, b = _peer(lease, server_key, pair), _peer(lease, server_key, pair)
        assert a.handshake() is None and b.handshake() is None
        free, held = "", f"held-{raw.prefix}"    # a call on `free` returns at once

        def block(key, request_id=None):
            call = _call(raw, lease, key, function="hold")
            if request_id:
                call.request_id = request_id
            return call

        def admitted():
            r = _result_of(a, block(free))
            return r if r.status == pb.OK else None
        poll_until(admitted, 5.0, "a direct call admitted on a link", interval=0.05)
        a.send(encode("direct", block(held)))    # the worker is busy in it ...
        def started():
            try:
                return cb.get(held + "-started")
            except ObjectNotFound:
                return None
        poll_until(started, 10.0, "the call started")
        twin = f"twin-{raw.prefix}"              # ... while both links get a call of one id
        a.send(encode("direct", block(free, twin)))
        b.send(encode("direct", block(free, twin)))
        cb.put(held, 1)                          # both are read together once it returns
        on_a, on_b = _answers_on(a, twin), _answers_on(b, twin)
        assert len(on_a) == 1 and len(on_b) == 1, (on_a, on_b)
        assert sorted(r.status == pb.OK for r in on_a + on_b) == [False, True], (on_a, on_b)
    finally:
        for peer in (a, b):
            if peer is not None:
                peer.close()
        raw.close()
        cb.close()


def test_a_call_whose_result_a_broken_link_may_have_lost_fails_at_once_typed(cluster):
    """What the client does when it must close a link it cannot read on (a frame from the
    worker that does not open: `test_call_links_native.py` makes one): the calls still
    unanswered on it fail at once with CallLinkBroken naming the worker and the link, not
    at their deadline, and are not retried (they may have run)."""
    cb = cluster.client(direct=True)
    _linked(cb, "slow", lambda: cb.call("slow", 0.0).get(10))
    pending = cb.call("slow", 3.0, timeout=60)
    rid = pending.request_id
    assert rid in cb._direct._calls
    cb._direct._unanswered([rid], "the call link 7 to executor worker W broke before the "
                                   "call's result came (a frame that does not "
                                   "authenticate); the call may or may not have run", True)
    start = time.monotonic()
    with pytest.raises(CallLinkBroken) as e:
        pending.get(30)
    assert time.monotonic() - start < 10.0             # generous: not its 60 s deadline
    assert "call link 7 to executor worker W" in str(e.value)
    cb.close()


def test_a_worker_killed_mid_call_on_a_link_retries_the_call_or_fails_it_typed(cluster):
    cb = cluster.client(direct=True)
    lease = _linked(cb, "slow", lambda: cb.call("slow", 0.0).get(10))
    sent = _link_stats(cb)["sent"]
    retried = cb.call("slow", 2.0, timeout=30)
    assert _link_stats(cb)["sent"] == sent + 1                  # it went on the link
    poll_until(lambda: any(w["worker_id"] == lease["worker_id"] for w in cluster.workers),
               5.0, "the leased worker listed")
    cluster.kill_worker(lease["worker_id"])
    assert retried.get(30)                                      # ran again via the scheduler
    lease = _linked(cb, "slow", lambda: cb.call("slow", 0.0).get(10))
    sent = _link_stats(cb)["sent"]
    lost = cb.call("slow", 2.0, timeout=30, max_retries=0)
    assert _link_stats(cb)["sent"] == sent + 1
    cluster.kill_worker(lease["worker_id"])
    with pytest.raises(WorkerDied) as e:
        lost.get(30)
    assert "direct call under a worker lease" in str(e.value)
    cluster.wait_for_workers([w["worker_id"] for w in cluster.workers], timeout=20)
    cb.close()
