"""The node cache's answers as they arrive: decoding a `cache_reply`.

Contract: `cache_reply(frames)` takes the frames of one `cache_reply` message, as received
from a reply socket (a value larger than a frame came in parts, `runtime.framing`), and
returns (request id, (`CacheResponse`, its value frames as memoryviews, uncopied)). It raises
for frames that are not a node cache's answer; `runtime.rpc.collect_replies` drops those.
Every requester of a node cache decodes with it: workers (`executor/cache_client.py`),
other node caches (`hydrocache/service.py`) and the scheduler's GC round.
"""
from __future__ import annotations

from typing import Any, List, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import parse, unsplit

__all__ = ["cache_reply", "CacheReply"]

CacheReply = Tuple["pb.CacheResponse", List[memoryview]]


def cache_reply(frames: List[Any]) -> Tuple[str, CacheReply]:
    """A node cache's answer: (request id, (CacheResponse, its value frames))."""
    frames = unsplit(frames)
    _, payload = parse(_view(frames[0]))
    response = pb.CacheResponse.FromString(payload)
    return response.request_id, (response, [_view(f) for f in frames[1:]])


def _view(frame: Any) -> memoryview:
    return frame.buffer if isinstance(frame, zmq.Frame) else memoryview(frame)
