"""Large call arguments and results, moved through the KVS by reference for a client.

Contract:
- `Courier(store, limit)` works for one `Client` (`store()` is its current `ObjectStore`;
  `limit` the KVS's maximum value size, 64 MiB by default).
- `externalize(function, arglist, by_reference)` takes the `ArgumentList` of a call of
  `function` (`cloudburst.arguments.encode`, values already serialized): an argument
  (positional or keyword) above `limit` raises `ValueTooLarge` naming the function, the
  argument and the limit before anything is sent or stored. With `by_reference` (plain
  calls), one above `faas.values.BY_REFERENCE_BYTES` is stored under a fresh
  `faas.keys.value_key` (every replica acknowledges it) and replaced by a reference the
  worker resolves as the caller's own value (objects allowed, as inline arguments are).
  Causal calls keep arguments inline (a reference would join their read set), up to the same
  limit. Returns the keys it stored; the client names them in `Call.value_keys`, so the
  call's scheduler deletes them when the call ends even if this client is gone
  (scheduler/values.py). Actor method calls are sized the same way.
- `store()` returns None once the client is closed: nothing is read or deleted any more.
- `take(key, what)` reads a result stored by reference and deletes it; a missing key is
  `ObjectNotFound` naming the result. `release(keys)` deletes argument keys once their call
  is over (failures are logged, never raised: the call's outcome is what the caller sees).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, List, Optional

from hydro_proto import cloudburst_pb2 as pb
from faas.errors import CloudburstError, ObjectNotFound
from faas.keys import value_key
from faas.values import BY_REFERENCE_BYTES, too_large, transport

__all__ = ["Courier"]

log = logging.getLogger("cloudburst.client")


class Courier:
    """A client's large values through the KVS (module contract)."""

    def __init__(self, store: Callable[[], Any], limit: int, owner: str) -> None:
        self._store = store
        self.limit = int(limit)
        self._owner = owner

    def externalize(self, function: str, arglist: "pb.ArgumentList",
                    by_reference: bool = True, largest: Optional[int] = None) -> List[str]:
        """Check every serialized argument of `arglist` (positional and keyword) against the
        limit, then, with `by_reference`, store those above the threshold and put references
        in their place (in `arglist`); returns the keys stored (see the module contract).
        `largest`: the largest serialized argument's size, when the caller knows it."""
        # the common case, every value small, without naming each argument
        small = min(BY_REFERENCE_BYTES, self.limit) if by_reference else self.limit
        if largest is not None and largest <= small:
            return []
        if not arglist.args and not arglist.kwargs:
            return []
        if all(len(a.value) <= small for a in arglist.args) and \
                (not arglist.kwargs or all(len(a.value) <= small
                                           for a in arglist.kwargs.values())):
            return []
        slots = [(f"argument {i}", a) for i, a in enumerate(arglist.args)]
        slots += [(f"keyword argument {k!r}", arglist.kwargs[k]) for k in sorted(arglist.kwargs)]
        values = [(what, a) for what, a in slots if a.WhichOneof("kind") == "value"]
        for what, a in values:
            if transport(len(a.value), self.limit) == "too_large":
                raise too_large(f"{what} of function {function!r}", len(a.value), self.limit)
        stored: List[str] = []
        if not by_reference:
            return stored
        try:
            for what, a in values:
                if transport(len(a.value), self.limit) != "reference":
                    continue
                store = self._store()
                if store is None:
                    raise CloudburstError("this Client is closed")
                key = value_key(self._owner)
                store.put_bytes(key, a.value)
                stored.append(key)
                a.Clear()
                a.reference, a.objects = key, True
        except BaseException:
            self.release(stored)
            raise
        return stored

    def take(self, key: str, what: str) -> bytes:
        store = self._store()
        if store is None:
            raise CloudburstError(f"{what} is in the KVS under {key!r}, and this Client is "
                                  f"closed")
        data = store.get_bytes(key)
        if data is None:
            raise ObjectNotFound(f"{what} was stored by reference under {key!r}, which holds "
                                 f"nothing now (read once already, or deleted)")
        self.release([key])
        return data

    def release(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                store = self._store()
                if store is None:         # a closed client: the keys stay (see the README)
                    return
                store.delete_bytes(key)
            except Exception as e:      # the call is over either way; the key is only garbage
                log.warning("could not delete %r, a large value of a finished call: %s", key, e)
