"""The client's answer reader (`cloudburst/channel.py`, `_drain`) and the call links' wait:
the reader tells the wait that the answer socket's last look found nothing (so the wait
skips its own look, two system calls) only when its own last look did, and after anything
else (a message read and not followed by a look that found nothing, an error) the wait
looks first: a message already seen by a look does not signal the socket's ZMQ_FD again,
and a wait that skipped the look would not see it (a hang until the reader's next round).

Unit tests: the reader is the channel's `_drain` on a real ZeroMQ socket, with a recording
stand-in for the call links' wait (which looks as `ClientCallLinks.wait` does)."""
import errno
import select
import types

import pytest
import zmq

from cloudburst.channel import SchedulerChannel
from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import encode, more
from waiting import poll_until


class Links:
    """Records the `quiet` each wait was given, and waits (without waiting) as the call
    links do: looks at the socket's events unless quiet, and again when its ZMQ_FD
    signals."""

    def __init__(self):
        self.quiet = []
        self.fail = False

    def active(self):
        return True

    def wait(self, socket, timeout, quiet=False):
        self.quiet.append(quiet)
        if self.fail:
            raise RuntimeError("the wait failed")
        on_socket = False if quiet else more(socket)
        if not on_socket and select.select([socket.getsockopt(zmq.FD)], [], [], 0)[0]:
            on_socket = more(socket)
        return on_socket, []


class Reader(SchedulerChannel):
    def __init__(self, pull, links):
        self.closed = False
        self._pull = pull
        self._quiet = False
        self._direct = types.SimpleNamespace(links=links)


@pytest.fixture
def sockets():
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    try:
        yield pull, push
    finally:
        push.close(0)
        pull.close(0)
        context.term()


def _result(rid):
    return encode("result", pb.CallResult(request_id=rid, status=pb.OK))


def test_the_wait_skips_its_look_only_after_a_look_that_found_nothing(sockets):
    pull, push = sockets
    links = Links()
    reader = Reader(pull, links)
    assert reader._drain(0) == []
    assert reader._drain(0) == []
    assert links.quiet == [False, True]        # the first looked; it found nothing
    push.send(_result("r1"))
    push.send(_result("r2"))
    got = poll_until(lambda: reader._drain(0), 10.0, "the results read")
    assert [m.request_id for _, m in got] == ["r1", "r2"]   # read until a look found none
    reader._drain(0)
    assert links.quiet[-1] is True


def test_after_a_failed_wait_the_next_one_looks_first(sockets):
    pull, push = sockets
    links = Links()
    reader = Reader(pull, links)
    reader._drain(0)
    links.fail = True
    with pytest.raises(RuntimeError):
        reader._drain(0)
    links.fail = False
    push.send(_result("r1"))
    got = poll_until(lambda: reader._drain(0), 10.0, "the result read")
    assert [m.request_id for _, m in got] == ["r1"]
    assert links.quiet[:3] == [False, True, False]


def test_a_message_seen_but_not_read_is_looked_for_again(sockets, monkeypatch):
    """A read that stops with a message left (here: receiving fails after the wait's look
    saw it) must not leave the reader quiet: the next wait looks and finds the message
    (its ZMQ_FD will not signal it again)."""
    import cloudburst.channel as channel
    pull, push = sockets
    links = Links()
    reader = Reader(pull, links)
    real = channel.recv_frame

    def fails(*args, **kwargs):
        raise zmq.ZMQError(errno.EINTR)
    assert reader._drain(0) == []             # looked: nothing (quiet from now)
    monkeypatch.setattr(channel, "recv_frame", fails)
    push.send(_result("r1"))

    def seen():
        try:
            reader._drain(0)
        except zmq.ZMQError:
            return True
        return False
    poll_until(seen, 10.0, "the result seen")
    monkeypatch.setattr(channel, "recv_frame", real)
    links.quiet.clear()
    assert not select.select([pull.getsockopt(zmq.FD)], [], [], 0)[0]  # no signal left
    got = reader._drain(0)
    assert links.quiet == [False] and [m.request_id for _, m in got] == ["r1"]
