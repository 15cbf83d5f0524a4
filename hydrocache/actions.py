"""What the HydroCache core asks its service to do, and the errors it reports (pure data).

Contract: every entry point of `hydrocache.node_cache.NodeCache` returns a `Step(replies, io)`.
The service carries out both lists, in order, and feeds every I/O result back into the core
(the entry point named with each action below), always on the core's one thread:
- `Reply(address, response, frames)`: send `response` as a `cache_reply` to `address`
  followed by `frames` (raw value frames); an empty address means nobody asked for an answer.
- `FetchKey(key)`: read `key` from Anna (one `get`); feed `on_fetched(key, lattice, now)` with
  the lattice, or None when Anna has no such key, or `on_fetched(key, None, now, error)` when
  the read failed.
- `Subscribe(key)`: subscribe the node's update address to `key`; on failure feed
  `on_subscribe_failed(key, now)` (the core will subscribe again on its next fetch).
- `PutVersions(token, versions)`: write each version's lattice to Anna, in order, each
  acknowledged by the node's write quorum (every replica by default); feed
  `on_put(token, now)` when all are written or `on_put(token, now, error)` at the first failure.
- `AskCache(address, request)`: send `request` (a CAUSAL_TEMP_GET carrying its `request_id`) to
  the node cache at `address`, with `response_address` set to where the service receives
  cache replies; feed each answer to `on_cache_reply(response, now)`. If it cannot be sent,
  feed an answer with a non-OK status and a message saying so.

Errors: `StageTimeout(stage)` (a wait passed its deadline; the stage says what was awaited),
`NotCausal` (a key read causally holds another lattice type), `RemoteUnavailable` (versions
an attempt needs could not be fetched from the caches holding them), `Fenced` (the attempt was
released or failed, its snapshot is gone, or its commit was not granted: nothing it reads or
writes is accepted any more).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, NamedTuple, Sequence

__all__ = ["Step", "Reply", "FetchKey", "Subscribe", "PutVersions", "AskCache", "StageTimeout",
           "NotCausal", "RemoteUnavailable", "Fenced", "DEFAULT_TIMEOUT", "TEMP_SLACK"]

DEFAULT_TIMEOUT = 10.0     # seconds a request may take when it names no timeout
TEMP_SLACK = 30.0          # seconds temporary versions outlive their requester's deadline


class Step(NamedTuple):
    """What one entry point of the core asks for: answers to send, then I/O to start."""

    replies: List["Reply"]
    io: List[Any]


@dataclass
class Reply:
    address: str
    response: Any                       # cloudburst_pb2.CacheResponse
    frames: Sequence[Any] = field(default_factory=list)


@dataclass(frozen=True)
class FetchKey:
    key: str


@dataclass(frozen=True)
class Subscribe:
    key: str


@dataclass
class PutVersions:
    token: int
    versions: List[Any]                 # hydrocache.version.Version


@dataclass
class AskCache:
    address: str
    request: Any                        # cloudburst_pb2.CacheRequest (CAUSAL_TEMP_GET)


class StageTimeout(Exception):
    """A protocol stage did not finish before the request's deadline."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"timed out in {stage}")
        self.stage = stage


class NotCausal(Exception):
    """A key read causally holds another lattice type (e.g. an LWW value)."""


class RemoteUnavailable(RuntimeError):
    """Versions named in an upstream snapshot could not be fetched from their holders."""


class Fenced(Exception):
    """Attempt `attempt` may no longer read or write at node cache `cache`: the scheduler
    released or failed it, its snapshot is gone, or the scheduler did not grant its commit
    (`why` says which)."""

    def __init__(self, attempt: str, cache: str, why: str) -> None:
        where = f" at node cache {cache}" if cache else ""
        super().__init__(f"attempt {attempt} is fenced{where}: {why}")
        self.attempt = attempt
        self.cache = cache
        self.why = why
