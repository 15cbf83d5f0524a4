"""A DAG function's large result on its way to the call's downstream functions: by reference.

Contract:
- `by_reference(schedule, size, here)`: whether a result of `size` serialized bytes goes to
  the downstream functions of `schedule` through the KVS: a plain (LWW) call, `size` above
  `faas.values.BY_REFERENCE_BYTES`, and at least one target on another worker than
  `here` (a target on the same worker gets the bytes without any message). Causal calls
  keep intermediate values inline, as they keep arguments (a reference would join their
  read set), up to the KVS's maximum value size like every result.
- `store(cache, push, schedule, value, what)`: names the key (`faas.keys.intermediate_key`
  of the attempt and the function), tells the call's scheduler first (a `values` report: it
  deletes the key when the call is over, whatever way it ends; scheduler/values.py), then
  writes the value through the node cache (every replica acknowledges it before the
  triggers go), outside the caller's session (the key is the platform's, not the user's).
  Returns the key, which the triggers to other workers carry (`Trigger.value_key`) instead
  of the value. A write that fails raises `FunctionError` naming `what` (the call fails).
- `ByReference(key, source)` stands for such a value in a pending invocation's arguments
  until it runs; `resolve(cache, args, what)` reads every one of them (one batched read,
  outside the caller's session: the key is the platform's, not the user's) and returns
  the arguments with the bytes in place; `FunctionError` names the upstream and the key
  when it holds nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

from hydro_proto import cloudburst_pb2 as pb
from faas.keys import intermediate_key
from faas.values import BY_REFERENCE_BYTES

from .references import FunctionError

__all__ = ["ByReference", "by_reference", "store", "resolve"]


@dataclass(frozen=True)
class ByReference:
    key: str
    source: str


def by_reference(schedule: "pb.Schedule", size: int, here: str) -> bool:
    if size <= BY_REFERENCE_BYTES or schedule.consistency == pb.CAUSAL:
        return False
    return any(schedule.locations[t] != here for t in schedule.targets)


def store(cache: Any, push: Any, schedule: "pb.Schedule", value: bytes, what: str) -> str:
    key = intermediate_key(schedule.call_id, schedule.function)
    push.send(schedule.scheduler_address, "values",
              pb.ValueKeys(call_id=schedule.call_id, keys=[key]))
    session, cache.session = cache.session, None
    try:
        cache.put(key, value)
    except Exception as e:
        raise FunctionError(f"storing the result of {what} ({len(value)} bytes) in the KVS "
                            f"for its downstream functions failed: {e}") from None
    finally:
        cache.session = session
    return key


def resolve(cache: Any, args: List[Any], what: str) -> List[Any]:
    refs = [a for a in args if isinstance(a, ByReference)]
    if not refs:
        return args
    session, cache.session = cache.session, None
    try:
        found = cache.get(sorted({r.key for r in refs}))
    finally:
        cache.session = session
    for r in refs:
        if found.get(r.key) is None:
            raise FunctionError(f"the result of {r.source!r}, an upstream of {what}, was "
                                f"passed by reference under {r.key!r}, which holds nothing "
                                f"(its call ended, or the KVS lost it)")
    return [bytes(found[a.key]) if isinstance(a, ByReference) else a for a in args]
