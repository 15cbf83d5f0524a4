"""How a worker sends a function's serialized result: by size.

Contract:
- `result_fields(cache, schedule, value, what, limit)` is called once a function's result is
  serialized, before anything is sent. A result above `limit` (the KVS's maximum value size)
  raises `ValueTooLarge` naming the function (`what`), the size and the limit: the call fails
  with VALUE_TOO_LARGE at once, instead of a message nobody can carry. Otherwise it returns
  the `CallResult` fields that carry the result to the caller: `{"value": value}`, or, for a
  sink's result above `faas.values.BY_REFERENCE_BYTES`, `{"value_key": key}` after
  writing the value under a fresh `faas.keys.value_key(call id)` through the node cache
  (a key a function may write; the caller reads it and deletes it). A result that goes only
  downstream (no sink) returns `{}`: it goes to the downstream functions as
  `executor/big_intermediates.py` says, up to the same limit.
"""
from __future__ import annotations

from typing import Any, Dict

from hydro_proto import cloudburst_pb2 as pb
from faas.keys import value_key
from faas.values import too_large, transport

__all__ = ["result_fields"]


def result_fields(cache: Any, schedule: "pb.Schedule", value: bytes, what: str,
                  limit: int) -> Dict[str, Any]:
    """See the module contract."""
    how = transport(len(value), limit)
    if how == "too_large":
        raise too_large(f"the result of {what}", len(value), limit)
    if not schedule.sink:
        return {}
    if how == "inline":
        return {"value": value}
    key = value_key(schedule.causal.call_id or schedule.call_id)
    cache.put(key, value)
    return {"value_key": key}
