"""How a worker turns `Reference` arguments into values, and its internal call errors.

Contract:
- `load_reference(ref, data)` is the value (or, for a concurrent causal reference, the list of
  values) `ref` points at, from the bytes read for it: a lattice as stored; otherwise plain
  data (`faas.values.loads`) unless `ref.objects` asks for Python objects. A value that is
  more than plain data raises `ArgumentRefused`: the call fails with UNSAFE_VALUE before its
  function runs. `resolve(invocation, ref)` does the same from a causal invocation's snapshot
  (`FunctionError` when the key holds nothing).
- `FunctionError`: a function could not be prepared or run; it carries the traceback.
"""
from __future__ import annotations

from typing import Any, Sequence

from faas.errors import UnsafeValue
from faas.values import Reference, is_lattice, loads

from .causal import CausalInvocation

__all__ = ["FunctionError", "ArgumentRefused", "resolve", "load_reference"]


class FunctionError(Exception):
    """Internal: a function could not be prepared or run; carries status and traceback."""

    def __init__(self, message: str, tb: str = "", types: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tb = tb
        self.types = list(types)     # a user exception's class and bases (executor/retrying.py)


class ArgumentRefused(Exception):
    """Internal: a `Reference` argument holds more than plain data and did not ask for
    objects; the call fails with UNSAFE_VALUE before its function runs."""


def resolve(inv: CausalInvocation, ref: Reference) -> Any:
    data = inv.value(ref.key, getattr(ref, "concurrent", False))
    if data is None:
        raise FunctionError(f"referenced key {ref.key!r} holds no object")
    return load_reference(ref, data)


def load_reference(ref: Reference, data: Any) -> Any:
    """The value(s) `ref` points at, from the bytes (or list of bytes) read for it: plain data
    unless `ref.objects` (a pickled `Reference` from before that field reads as False)."""
    if is_lattice(data):
        return data                     # a key merged by `put(key, lattice)`, as lib.get gives
    objects = getattr(ref, "objects", False)
    opt_in = f"Reference({ref.key!r}, objects=True)"
    try:
        if isinstance(data, list):
            return [loads(d, objects, key=ref.key, opt_in=opt_in) for d in data]
        return loads(data, objects, key=ref.key, opt_in=opt_in)
    except UnsafeValue as e:
        raise ArgumentRefused(str(e)) from None
