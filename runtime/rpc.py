"""Request/reply over PUSH/PULL with a deadline: waiting for the answers that carry given ids.

Contract: a requester sends requests (each with a unique `request_id` and its own reply
address) and calls `collect_replies(socket, ids, deadline, decode)`. It receives from its
reply socket until an answer for every id has arrived or `deadline` (a `time.monotonic()`
value) has passed, and returns the answers that arrived, by id: the caller decides what a
missing answer means and names it in its error. Frames that do not decode, and answers to
other ids (late answers to requests given up on), are dropped. `await_reply` is the one-id
case and returns None on timeout.
"""
from __future__ import annotations

import time
from typing import Callable, Collection, Dict, List, Optional, Tuple, TypeVar

import zmq


__all__ = ["collect_replies", "await_reply"]

T = TypeVar("T")


def collect_replies(socket: zmq.Socket, ids: Collection[str], deadline: float,
                    decode: Callable[[List[zmq.Frame]], Tuple[str, T]]) -> Dict[str, T]:
    """The answers for `ids` that arrive before `deadline`; see the module contract."""
    wanted = set(ids)
    got: Dict[str, T] = {}
    while wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if not socket.poll(int(remaining * 1000) + 1):
            continue
        frames = socket.recv_multipart(copy=False)
        try:
            rid, answer = decode(frames)
        except Exception:  # not an answer we can read: a stray or malformed frame
            continue
        if rid in wanted:
            wanted.discard(rid)
            got[rid] = answer
    return got


def await_reply(socket: zmq.Socket, request_id: str, deadline: float,
                decode: Callable[[List[zmq.Frame]], Tuple[str, T]]) -> Optional[T]:
    """The answer for `request_id`, or None if none arrived before `deadline`."""
    return collect_replies(socket, (request_id,), deadline, decode).get(request_id)
