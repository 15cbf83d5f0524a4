"""Request/reply over PUSH/PULL with a deadline: waiting for the answers that carry given ids.

Contract: a requester sends requests (each with a unique `request_id` and its own reply
address) and calls `collect_replies(socket, ids, deadline, decode)`. It receives from its
reply socket until an answer for every id has arrived or `deadline` (a `time.monotonic()`
value) has passed, and returns the answers that arrived, by id: the caller decides what a
missing answer means and names it in its error. Frames that do not decode, and answers to
other ids (late answers to requests given up on), are dropped. `await_reply` is the one-id
case and returns None on timeout. `cache_reply` decodes the node cache's answers.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Collection, Dict, List, Optional, Tuple, TypeVar

import zmq

from hydro_proto import cloudburst_pb2 as pb

from .framing import parse, unsplit

__all__ = ["collect_replies", "await_reply", "cache_reply", "CacheReply"]

T = TypeVar("T")
CacheReply = Tuple["pb.CacheResponse", List[memoryview]]


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


def cache_reply(frames: List[Any]) -> Tuple[str, CacheReply]:
    """A node cache's answer, as received (a value larger than a frame came in parts):
    (request id, (CacheResponse, its value frames))."""
    frames = unsplit(frames)
    _, payload = parse(_view(frames[0]))
    response = pb.CacheResponse.FromString(payload)
    return response.request_id, (response, [_view(f) for f in frames[1:]])


def _view(frame: Any) -> memoryview:
    return frame.buffer if isinstance(frame, zmq.Frame) else memoryview(frame)
