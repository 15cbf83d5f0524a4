"""A leased worker's one wait (executor/hot_wait.py) over real ZeroMQ sockets and a
descriptor: no message is missed although a ZeroMQ descriptor signals only changes."""
import socket
import time

import pytest
import zmq

from executor.hot_wait import DIRECT, LINKS, PULL, Sources

LONG_MS = 4000          # a wait that must end early, on a message, not at its timeout


@pytest.fixture
def world():
    context = zmq.Context()
    pull, direct = context.socket(zmq.PULL), context.socket(zmq.PULL)
    pull_port = pull.bind_to_random_port("tcp://127.0.0.1")
    direct_port = direct.bind_to_random_port("tcp://127.0.0.1")
    to_pull, to_direct = context.socket(zmq.PUSH), context.socket(zmq.PUSH)
    to_pull.connect(f"tcp://127.0.0.1:{pull_port}")
    to_direct.connect(f"tcp://127.0.0.1:{direct_port}")
    link, peer = socket.socketpair()
    sources = Sources(pull, direct, link.fileno())
    yield sources, pull, direct, to_pull, to_direct, link, peer
    for s in (pull, direct, to_pull, to_direct):
        s.close(0)
    link.close()
    peer.close()
    context.term()


def _wait(sources, timeout_ms=LONG_MS):
    start = time.monotonic()
    ready = sources.wait(timeout_ms)
    return ready, time.monotonic() - start


def _receive_one_of_two_outside_the_wait(sources, pull, direct, to_pull):
    """Two frames on the schedule socket, the first received outside the wait (a look at
    the socket that consumes the descriptor's signal of the second)."""
    assert sources.wait(10) == 0
    for name in (b"a", b"b"):
        to_pull.send(name)
    deadline = time.monotonic() + 5
    while not pull.poll(0) and time.monotonic() < deadline:   # (bounded: both arrive)
        time.sleep(0.001)
    assert pull.recv() == b"a"
    assert pull.poll(5000)        # the second is here (and this look took its signal)


def test_each_source_wakes_the_wait(world):
    sources, pull, direct, to_pull, to_direct, link, peer = world
    assert sources.wait(50) == 0                       # nothing: the timeout
    to_pull.send(b"schedule")
    ready, took = _wait(sources)
    assert ready == PULL and took < LONG_MS / 2000
    assert pull.recv() == b"schedule"
    to_direct.send(b"call")
    ready, took = _wait(sources)
    assert ready == DIRECT and took < LONG_MS / 2000
    assert direct.recv() == b"call"
    peer.send(b"x")
    ready, took = _wait(sources)
    assert ready == LINKS and took < LONG_MS / 2000
    link.recv(1)
    assert sources.wait(50) == 0


def test_a_second_message_is_not_missed_after_one_receive(world):
    """Two frames arrive; the owner receives one. The descriptor will not signal the second
    again: the wait asks the socket first and reports it at once."""
    sources, pull, direct, to_pull, to_direct, link, peer = world
    to_pull.send(b"a")
    to_pull.send(b"b")
    assert _wait(sources)[0] == PULL
    assert pull.recv() == b"a"
    assert pull.poll(5000)        # the second is here (and this look took its signal)
    ready, took = _wait(sources)
    assert ready == PULL and took < LONG_MS / 2000
    assert pull.recv() == b"b"


def test_a_receive_outside_the_wait_told_by_stirred(world):
    sources, pull = world[0], world[1]
    _receive_one_of_two_outside_the_wait(*world[:4])      # as `lib.recv` does
    sources.stirred(PULL)
    ready, took = _wait(sources)
    assert ready == PULL and took < LONG_MS / 2000
    assert pull.recv() == b"b"


def test_a_receive_nobody_told_of_waits_at_most_one_timeout(world):
    """The net: a frame left behind a receive that `stirred` was not told of is reported
    when the wait runs to its timeout, not never."""
    sources, pull = world[0], world[1]
    _receive_one_of_two_outside_the_wait(*world[:4])
    assert sources.wait(100) == PULL
    assert pull.recv() == b"b"
