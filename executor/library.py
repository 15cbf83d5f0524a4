"""The user library: the `lib` a function receives as its first parameter when it names it
`lib`, and that `cloudburst.lib()` returns inside any function (`executor/calling.py`).

Contract:
- `lib.get(key, default=...)` returns the object stored under `key` (read through the node
  cache); a list of keys returns `{key: object}`. A missing key raises
  `faas.errors.ObjectNotFound` unless `default` is given. Values are read as plain data
  (`faas/values.py`): one that is more raises `faas.errors.UnsafeValue` naming the key
  and the global it refers to, and runs nothing; `objects=True` unpickles fully, running
  whatever code the value's writer chose (docs/SECURITY.md).
- `lib.put(key, value)` stores `value` (through the node cache, written through to Anna):
  last writer wins. `lib.put(key, lattice)` with an `anna_core` lattice merges it with what
  the key holds, in Anna, so concurrent writers all count; `lib.get` then returns the merged
  lattice (read from Anna, not cached).
- Inside a causal call (`consistency="causal"`): `lib.get` reads from the call's snapshot
  (repeatable: a key read twice, by one function or by two, is the same version; a key the
  call already wrote reads that write); a key with concurrent values gives the first (values
  sorted, so every reader picks the same one) unless `concurrent=True`, which returns the
  list of all of them; `lib.put` is buffered and committed atomically with the call's other
  writes at the sink (`executor/causal.py`).
- `lib.getid()` is this executor worker's unique id.
- `lib.send(dest, data)` sends bytes to the worker whose id is `dest` (ids come from
  `getid()`); `lib.recv(timeout=5.0)` returns every message received so far as a list of
  `(sender_id, bytes)`, waiting up to `timeout` seconds for the first one (`timeout=0`: do
  not wait, possibly return []); with `timeout > 0` and nothing received it raises
  `faas.errors.Timeout`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

from faas.keys import check_user_key
from faas.values import dumps, is_lattice, loads
from faas.errors import ObjectNotFound

__all__ = ["UserLibrary"]

_MISSING = object()


class UserLibrary:
    """What a function can do besides computing; see the module contract."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker

    def getid(self) -> str:
        """This executor worker's unique id."""
        return self._worker.worker_id

    def get(self, key: Union[str, Sequence[str]], default: Any = _MISSING,
            concurrent: bool = False, objects: bool = False) -> Any:
        """The object under `key`, or `{key: object}` for a list of keys. With
        `concurrent=True` (causal calls) each key gives the list of its concurrent values.
        Plain data only unless `objects=True` (`UnsafeValue` otherwise; module contract)."""
        single = isinstance(key, str)
        keys = [key] if single else list(key)
        for k in keys:
            check_user_key(k)
        invocation = self._worker.invocation
        if invocation is not None:
            invocation.bind(keys)
            raw = {k: invocation.value(k, concurrent) for k in keys}
        else:
            raw = self._worker.cache.get(keys)
            if concurrent:
                raw = {k: None if v is None else [v] for k, v in raw.items()}
        out: Dict[str, Any] = {}
        for k in keys:
            data = raw.get(k)
            if data is None:
                if default is _MISSING:
                    raise ObjectNotFound(k)
                out[k] = default
            elif is_lattice(data):
                out[k] = data                    # a key merged by `put(key, lattice)`
            else:
                opt_in = f"lib.get({k!r}, objects=True)"
                out[k] = [loads(d, objects, key=k, opt_in=opt_in) for d in data] \
                    if isinstance(data, list) else loads(data, objects, key=k, opt_in=opt_in)
        return out[key] if single else out

    def put(self, key: str, value: Any) -> None:
        """Store `value` under `key` (inside a causal call: at the sink, atomically)."""
        invocation = self._worker.invocation
        if is_lattice(value):
            if invocation is not None:
                raise TypeError("a causal call writes plain values (merged as causal versions); "
                                "put lattices outside causal calls")
            self._worker.cache.put(check_user_key(key), value.serialize(), value.lattice_type)
            return
        if invocation is not None:
            invocation.put(check_user_key(key), dumps(value))
            return
        self._worker.cache.put(check_user_key(key), dumps(value))

    def send(self, dest: str, data: bytes) -> None:
        """Send `data` (bytes) to the worker with id `dest`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"lib.send sends bytes, got {type(data).__name__}")
        self._worker.send_user_message(dest, bytes(data))

    def recv(self, timeout: float = 5.0) -> List[Tuple[str, bytes]]:
        """Messages received so far as (sender id, bytes); see the module contract."""
        return self._worker.receive_user_messages(timeout)
