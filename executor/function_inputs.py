"""What one invocation runs with: the registered function's callable and its arguments.

Contract: `FunctionInputs` is mixed into `executor.worker.Worker`.
- `_function(name, version, deadline)` is the callable for `name` as an `executor.calling.Entry`:
  fetched from the registry through the node cache (which never caches registry keys) once
  per version, deserialized once and cached; a newer registration than the schedule's wins.
  A stateful class is instantiated once per worker and its entry method used. A record that
  does not parse raises `CorruptRecord` naming the key; a missing or deleted function, or
  one needing a module this executor cannot import, raises `FunctionError`. The function's
  registered time limit is kept in the worker's `_time_limits`.
- `_arguments(ready, what)` is the invocation's `(args, kwargs)` (`executor.sharing.prepare`),
  upstream results passed by reference read first (`executor.big_intermediates.resolve`),
  with top-level `Reference`s resolved through the node cache (`executor.references`):
  `FunctionError` when a referenced key holds no object.
Uses the worker's `cache`, `_functions` and `_time_limits`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from google.protobuf.message import DecodeError

from hydro_proto import cloudburst_pb2 as pb
from faas.errors import CorruptRecord
from faas.keys import function_key
from faas.values import Reference, loads

from .big_intermediates import resolve
from .calling import Entry, entry_of
from .dagstate import Ready
from .references import FunctionError, load_reference
from .sharing import prepare

__all__ = ["FunctionInputs"]


class FunctionInputs:
    """A worker's functions and arguments; mixed into the worker (module contract)."""

    def _function(self, name: str, version: str, deadline: float) -> Entry:
        """The callable for `name`: cached per version; a different version is fetched from the
        registry (a newer registration than the schedule's wins: the scheduler learns of it
        within a gossip epoch)."""
        cached = self._functions.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        key = function_key(name)
        data = self.cache.get([key]).get(key)
        try:
            record = None if data is None else pb.FunctionRecord.FromString(bytes(data))
        except (DecodeError, TypeError) as e:
            raise CorruptRecord(f"the registry record {key!r} of function {name!r} does not "
                                f"parse ({type(e).__name__})", key) from None
        if record is None or record.deleted:
            raise FunctionError(f"function {name!r} is not in the registry")
        if cached is not None and cached[0] == record.version:
            return cached[1]
        try:
            obj = loads(record.body, objects=True)     # a registration is code by design
        except ModuleNotFoundError as e:
            raise FunctionError(
                f"function {name!r} needs module {e.name!r}, which this executor cannot "
                f"import: install it on the executors, or register the function with "
                f"modules=[{e.name}] to ship the module with it") from None
        if record.stateful:
            cls, init_args = obj
            instance = cls(*init_args)
            method = entry_of(cls)
            fn = instance if method == "__call__" else getattr(instance, method or "run")
        else:
            fn = obj
        fn = Entry(fn, name)
        self._functions[name] = (record.version, fn)
        self._time_limits[name] = record.time_limit
        return fn

    def _arguments(self, ready: Ready, what: str) -> Tuple[List[Any], Dict[str, Any]]:
        """The call's arguments (pb.Argument), other calls' results and upstream results
        (bytes) as `(args, kwargs)`, with top-level `Reference`s resolved (module contract)."""
        ready.args = resolve(self.cache, ready.args, what)
        values, kwvalues = prepare(ready, what)
        refs = [v for v in values if isinstance(v, Reference)]
        if kwvalues:
            refs += [v for v in kwvalues.values() if isinstance(v, Reference)]
        if not refs:
            return values, kwvalues
        keys = sorted({r.key for r in refs})
        found = self.cache.get(keys)
        missing = [k for k in keys if found.get(k) is None]
        if missing:
            raise FunctionError(f"referenced key(s) {missing} hold no object")
        resolved = {r: load_reference(r, found[r.key]) for r in refs}
        return ([resolved[v] if isinstance(v, Reference) else v for v in values],
                {k: resolved[v] if isinstance(v, Reference) else v for k, v in kwvalues.items()})
