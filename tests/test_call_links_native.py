"""The kernel's call links (anna_core/csrc/call_links.hpp) on their own: a worker's
CallLinkServer behind one pollable descriptor and a client's CallLinkClient, plain and
secured, in one process (the server served by a thread, as a worker's loop would)."""
import select
import socket
import struct
import threading

import pytest

from anna_core import _core
from runtime.auth import KeyPair
from sealed_link import connect
from waiting import poll_until


class Served:
    """A CallLinkServer whose frames a thread answers with b"echo:" + payload."""

    def __init__(self, keys=None, admitted=None, max_frame=1 << 16, max_links=4):
        if keys is None:
            self.server = _core.CallLinkServer("127.0.0.1", max_frame, max_links, "test: ")
        else:
            self.server = _core.CallLinkServer("127.0.0.1", max_frame, max_links, "test: ",
                                               keys.public, keys.secret, admitted)
        self.frames = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        poll = select.poll()
        poll.register(self.server.fileno(), select.POLLIN)   # the one descriptor
        while not self.stop.is_set():
            if poll.poll(20):
                for link, payload, role in self.server.service():
                    self.frames.append((link, payload, role))
                    self.server.send(link, b"echo:" + payload)

    def close(self):
        self.stop.set()
        self.thread.join(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def plain_links(self, n):
        """A plain client and n links it opened to this server."""
        client = _core.CallLinkClient()
        links = [_open(client, self.server.address, "") for _ in range(n)]
        assert all(link for link, _ in links), links
        return (client, *[link for link, _ in links])


def _read(client):
    """What a client's links have now, without waiting: (frames, broken, opened)."""
    _, frames, broken, opened = client.wait(0)
    return frames, broken, opened


def _open(client, address, server_key, timeout=2.0):
    """Open a link as a client does (`begin`, then `wait` advances it): (link, why)."""
    link, why = client.begin(address, server_key, timeout)
    if not link:
        return link, why

    def done():
        _, broken, opened = _read(client)
        if link in opened:
            return (link, "")
        return next(((0, w) for l, w, _ in broken if l == link), None)
    return poll_until(done, timeout + 5.0, "the link opened or refused", interval=0.002)


def _answer(client, timeout=5.0):
    """The next (frames, broken) a client's read returns with anything in it."""
    def one():
        frames, broken, _ = _read(client)
        return (frames, broken) if frames or broken else None
    return poll_until(one, timeout, "an answer on the link", interval=0.005)


@pytest.fixture
def keys():
    return KeyPair.generate(), KeyPair.generate()      # the worker's, the client's


def test_plain_links_echo_whole_frames_and_the_probe_stays_inside(keys):
    with Served() as served:
        client, link = served.plain_links(1)
        for i in range(50):
            assert client.send(link, b"m%d" % i, 1.0)
            assert _answer(client) == ([(link, b"echo:m%d" % i)], [])
        assert [p for _, p, _ in served.frames] == [b"m%d" % i for i in range(50)]
        assert {r for _, _, r in served.frames} == {""}       # plain: no role


def test_secured_links_carry_the_admitted_keys_role_and_refuse_others(keys):
    worker, client_keys = keys
    with Served(worker, {client_keys.public: "client:alice"}) as served:
        client = _core.CallLinkClient(client_keys.public, client_keys.secret)
        link, why = _open(client, served.server.address, worker.public.decode())
        assert link, why
        assert client.send(link, b"call", 1.0)
        assert _answer(client) == ([(link, b"echo:call")], [])
        assert served.frames[-1][2] == "client:alice"
        stranger = KeyPair.generate()
        other = _core.CallLinkClient(stranger.public, stranger.secret)
        assert _open(other, served.server.address, worker.public.decode()) == \
            (0, "handshake: the worker refused the link: unknown public key")
        impostor = KeyPair.generate()        # a server key the worker cannot prove
        assert _open(client, served.server.address, impostor.public.decode())[0] == 0
        assert served.server.stats()["auth_refused"] == 2
        assert client.send(link, b"again", 1.0)            # the good link goes on
        assert _answer(client) == ([(link, b"echo:again")], [])


def test_a_frame_above_the_limit_closes_that_link_only(keys):
    with Served(max_frame=1024) as served:
        client, good, bad = served.plain_links(2)
        assert client.send(bad, b"x" * 2048, 1.0)
        # the worker says how many of the link's frames it served (none) before closing it
        assert _answer(client) == ([], [(bad, "closed by the worker: a frame of 2048 bytes, "
                                              "above the limit of 1024", 0)])
        assert client.send(good, b"small", 1.0)
        assert _answer(client) == ([(good, b"echo:small")], [])


def test_a_half_closed_link_is_still_read_until_the_worker_closes_it(keys):
    with Served() as served:
        client, link = served.plain_links(1)
        assert client.send(link, b"before", 1.0)
        client.finish(link)                                 # no more frames from here
        assert not client.send(link, b"after", 1.0)
        frames, broken = [], []
        poll_until(lambda: (lambda f, b, _: frames.extend(f) or broken.extend(b) or broken)(
            *_read(client)), 5.0, "the worker closing the link", interval=0.005)
        assert frames == [(link, b"echo:before")] and \
            broken == [(link, "closed by the worker", -1)]    # its own close: no farewell


def test_links_beyond_the_limit_are_refused_and_a_freed_place_serves_a_new_link(keys):
    with Served(max_links=2) as served:
        client, a, b = served.plain_links(2)
        link, why = _open(client, served.server.address, "", 1.0)   # the worker closes it
        assert link == 0 and why, why
        # close one and open another (which may get the closed one's descriptor number)
        client.close(b)
        poll_until(lambda: served.server.stats()["open"] == 1, 5.0, "the closed link gone")
        c, why = _open(client, served.server.address, "")
        assert c, why
        assert client.send(c, b"new", 1.0)
        assert _answer(client) == ([(c, b"echo:new")], [])


def test_a_plain_peer_that_sends_half_a_frame_and_leaves_is_dropped(keys):
    with Served() as served:
        with connect(served.server.address) as s:
            s.sendall(struct.pack("<I", 100) + b"half")
        poll_until(lambda: served.server.stats()["accepted"] >= 1 and
                   served.server.stats()["open"] == 0, 5.0, "the half frame's link closed")
        assert served.frames == []                          # never served


def test_opening_a_link_never_blocks_and_one_not_open_by_its_deadline_is_given_up(keys):
    worker, client_keys = keys
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)                        # the connect completes; no handshake answers
    address = "tcp://127.0.0.1:%d" % silent.getsockname()[1]
    try:
        for client, key in ((_core.CallLinkClient(), ""),
                            (_core.CallLinkClient(client_keys.public, client_keys.secret),
                             worker.public.decode())):
            link, why = client.begin(address, key, 0.3)
            assert link, why
            assert not client.ready(link) and not client.send(link, b"call", 1.0)
            frames, broken = [], []
            poll_until(lambda: (lambda f, b, o: frames.extend(f) or broken.extend(b) or
                                broken or o)(*_read(client)), 10.0, "the deadline")
            assert frames == [] and broken and broken[0][0] == link, broken
            assert "not open within its deadline" in broken[0][1]
            assert client.open_links == 0
    finally:
        silent.close()


def test_a_link_that_cannot_connect_is_reported_broken(keys):
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    address = "tcp://127.0.0.1:%d" % spare.getsockname()[1]
    spare.close()                           # nothing listens there now
    client = _core.CallLinkClient()
    link, why = client.begin(address, "", 5.0)
    if link:                                 # (a refused connect may be known at once)
        broken = poll_until(lambda: _read(client)[1], 5.0, "the refused connect")
        assert broken[0][0] == link and "connect" in broken[0][1], broken
    else:
        assert "connect" in why


def test_the_client_hands_back_the_calls_a_worker_closed_its_link_without_serving():
    """A worker closes a link on a frame above its limit, having served the call before it;
    the client learns from its farewell that the later calls were never read, and hands
    them back (the direct path sends them through the scheduler) instead of waiting."""
    import zmq
    from cloudburst.call_link import ClientCallLinks
    from hydro_proto import cloudburst_pb2 as pb
    server = _core.CallLinkServer("127.0.0.1", 4096, 4, "test: ")
    handed = []
    links = ClientCallLinks(None, lambda calls, why, lost: handed.append((calls, why, lost)))
    context = zmq.Context()
    answers = context.socket(zmq.PULL)
    try:
        def calls(*names):
            return [pb.Call(request_id=n, function="f", timeout=5.0) for n in names]

        def write(call):
            return links.send("tcp://worker:1", server.address, "direct", call)
        first, big, later = calls("first", "big", "later")
        big.args["f"].args.add(value=b"x" * 8192)          # above the worker's limit
        assert not write(first)                          # the link is only opening: ZeroMQ
        poll_until(lambda: server.service() or links.wait(answers, 0) and False or
                   links.stats()["opened"], 5.0, "the link open", interval=0.005)
        assert write(first)
        assert poll_until(lambda: server.service(), 5.0, "the first call read")[0][1][1:] == \
            first.SerializeToString()
        assert write(big) and write(later)               # written whole, not yet read
        poll_until(lambda: server.service() or links.wait(answers, 0) and False or handed,
                   5.0, "the farewell read")
        [(unserved, why, lost)] = handed
        assert unserved == ["big", "later"] and not lost
        assert "closed call link" in why and "above the limit" in why, why
        assert links.stats()["open"] == 0
    finally:
        links.close()
        answers.close(0)
        context.term()


def test_a_link_the_client_cannot_read_on_fails_its_calls_at_once():
    """A worker's frame that does not open (here one declaring 1 GiB) makes the client
    close the link: what followed it is lost, so the calls written on it are handed back
    as lost (the direct path fails those still unanswered with CALL_LINK_BROKEN)."""
    import zmq
    from cloudburst.call_link import ClientCallLinks
    from hydro_proto import cloudburst_pb2 as pb
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    handed = []
    links = ClientCallLinks(None, lambda calls, why, lost: handed.append((calls, why, lost)))
    context = zmq.Context()
    answers = context.socket(zmq.PULL)
    address = "tcp://127.0.0.1:%d" % listener.getsockname()[1]
    try:
        calls = [pb.Call(request_id=n, function="f", timeout=5.0) for n in ("one", "two")]
        assert not links.send("tcp://worker:1", address, "direct", calls[0])  # opening
        worker, _ = listener.accept()
        worker.settimeout(5.0)
        poll_until(lambda: links.wait(answers, 0) and False or
                   select.select([worker], [], [], 0)[0], 5.0, "the probe", interval=0.005)
        probe = worker.recv(8)
        assert probe == struct.pack("<I", 4) + b"CL1P"
        worker.sendall(probe)                          # a plain worker's answer
        poll_until(lambda: links.wait(answers, 0) and False or links.stats()["opened"],
                   5.0, "the link open", interval=0.005)
        assert all(links.send("tcp://worker:1", address, "direct", c) for c in calls)
        worker.sendall(struct.pack("<I", 1 << 30))     # not a frame the client can take
        poll_until(lambda: links.wait(answers, 0) and False or handed, 5.0, "the link closed")
        [(unanswered, why, lost)] = handed
        assert unanswered == ["one", "two"] and lost
        assert "above the limit" in why and "may or may not have run" in why, why
        worker.close()
    finally:
        links.close()
        listener.close()
        answers.close(0)
        context.term()


@pytest.mark.parametrize("keys", [None, (b"not a key", b"not a key either")])
def test_a_call_link_server_that_cannot_start_names_call_links(keys):
    """A worker whose call links cannot start says so in terms of call links (the executor
    logs it and serves direct calls over its socket alone), not the KVS's client links."""
    args = ("256.0.0.1", 4096, 4, "test: ") if keys is None else \
        ("127.0.0.1", 4096, 4, "test: ", keys[0], keys[1], {})
    with pytest.raises(RuntimeError) as info:
        _core.CallLinkServer(*args)
    assert str(info.value).startswith("call links: "), info.value
    assert "client link" not in str(info.value)


def test_wait_wakes_for_a_frame_or_the_watched_descriptor_and_lets_others_send_meanwhile():
    """`wait(timeout)` waits for a link's frame or the watched descriptor (a client's answer
    socket's ZMQ_FD) in one go, never beyond its timeout, and holds no lock while it waits:
    another thread's send goes out at once, and its answer ends the wait."""
    import os
    import time
    with Served() as served:
        client, link = served.plain_links(1)
        signal_r, signal_w = os.pipe()
        try:
            client.watch(signal_r)
            start = time.monotonic()
            assert client.wait(0.05) == (False, [], [], [])        # nothing: the timeout
            assert time.monotonic() - start >= 0.04
            assert client.wait(0.0) == (False, [], [], [])         # 0: no wait at all
            os.write(signal_w, b"x")
            assert client.wait(5.0)[0] is True                     # the watched descriptor
            os.read(signal_r, 1)
            got, tid = [], []

            def wait():
                tid.append(threading.get_native_id())
                got.append(client.wait(30.0))
            waiter = threading.Thread(target=wait)
            waiter.start()

            def asleep():              # the waiter's thread is blocked (in its epoll wait)
                if not tid:
                    return False
                with open(f"/proc/self/task/{tid[0]}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] == "S"
            poll_until(asleep, 5.0, "the waiter blocking in its wait", interval=0.002)
            sent_at = time.monotonic()
            assert client.send(link, b"meanwhile", 1.0)
            assert time.monotonic() - sent_at < 5.0                # not behind the wait
            waiter.join(10)
            assert not waiter.is_alive()
            frames = got[0][1] or _answer(client)[0]
            assert frames == [(link, b"echo:meanwhile")]
        finally:
            os.close(signal_r)
            os.close(signal_w)


def test_the_answer_socket_is_looked_at_before_a_wait_unless_the_last_look_found_nothing(
        monkeypatch):
    """ZMQ_FD is edge-triggered: a message already queued when the socket's events were last
    looked at does not signal it again. So `ClientCallLinks.wait` looks at the events before
    waiting, unless its caller says the last look found nothing (`quiet`): then any message
    since has signalled the descriptor, the wait ends for it, and the look (two system
    calls) is saved; a wait that returns False for the socket leaves it so."""
    import time
    import zmq
    from cloudburst import call_link
    looks = []
    real_more = call_link.more
    monkeypatch.setattr(call_link, "more", lambda s: looks.append(1) or real_more(s))
    links = call_link.ClientCallLinks(None)
    context = zmq.Context()
    answers = context.socket(zmq.PULL)
    port = answers.bind_to_random_port("tcp://127.0.0.1")
    sender = context.socket(zmq.PUSH)
    sender.connect(f"tcp://127.0.0.1:{port}")

    def quiet_until_message(within):
        """Quiet waits, as the client's reader makes them, until one says the socket has
        a message (a signal may also be ZeroMQ's own: its look then finds nothing)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if links.wait(answers, deadline - time.monotonic(), quiet=True)[0]:
                return True
        return False
    try:
        assert links.wait(answers, 0) == (False, []) and len(looks) == 1   # looked: nothing
        assert links.wait(answers, 0, quiet=True) == (False, []) and len(looks) == 1
        sender.send(b"one")
        assert quiet_until_message(10.0)
        assert answers.recv(zmq.NOBLOCK) == b"one"
        assert links.wait(answers, 0) == (False, [])        # read, then looked: nothing
        for n in range(20):                                 # and again, each time quiet
            sender.send(b"%d" % n)
            assert quiet_until_message(10.0), n
            assert answers.recv(zmq.NOBLOCK) == b"%d" % n
            assert links.wait(answers, 0) == (False, [])
        sender.send(b"two")
        poll_until(lambda: links.wait(answers, 0)[0], 10.0, "the message seen")
        looked = len(looks)           # seen and not read: the next wait must look first
        assert links.wait(answers, 10.0) == (True, []) and len(looks) == looked + 1
    finally:
        links.close()
        sender.close(0)
        answers.close(0)
        context.term()
