"""How Python values cross the wire: stored objects, call arguments, and `Reference`.

Contract:
- `dumps`/`loads` serialize Python values (cloudpickle out, pickle in). `dumps_function`
  serializes a function or `(class, init_args)` for registration, pickling the user's own
  modules (and any named in `modules`) by value so executors need nothing but the
  registration.
- `encode_args`/`decode_arg` move call arguments in and out of `cloudburst.Argument`: a
  top-level `Reference` travels as a key (so schedulers see it) with its `concurrent` flag,
  anything else as bytes. `references_of` lists the keys an argument list references.
- `Reference(key, concurrent=False)` is an argument the executor replaces with the object
  stored under `key`. Given as a top-level argument of a call (or returned by an upstream
  function and so passed to a downstream one), it is resolved on the executor through its
  node cache before the function runs. The scheduler sees the referenced keys of a call and
  uses them for data locality (and, for causal calls, as the DAG's read set). A key holding
  no object makes the call fail with `ExecutionError`. With `concurrent=True` (causal calls)
  the function receives the list of every concurrent value of the key (sorted by their
  serialized bytes) instead of the first one.
"""
from __future__ import annotations

import os
import pickle
import sys
import sysconfig
from dataclasses import dataclass
from typing import Any, Iterable, List

import cloudpickle

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb

__all__ = ["Reference", "is_lattice", "CAUSAL_LATTICES", "dumps", "dumps_function", "loads", "encode_args", "decode_arg",
           "references_of"]


@dataclass(frozen=True)
class Reference:
    """A pointer to the object stored under `key` in the KVS."""

    key: str
    concurrent: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise TypeError(f"Reference key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.concurrent, bool):
            raise TypeError(f"Reference concurrent must be a bool, got {self.concurrent!r}")


# The platform's own packages: executors import them, so they are pickled by reference.
_PLATFORM_PACKAGES = ("cloudburst", "scheduler", "executor", "anna_core", "hydrocache", "runtime",
                      "hydro_proto")


# anna.LatticeType numbers of the causal lattices (proto/anna.proto)
CAUSAL_LATTICES = frozenset({anna_pb2.SINGLE_CAUSAL, anna_pb2.MULTI_CAUSAL})


def is_lattice(value: Any) -> bool:
    """True for an `anna_core` lattice, which the KVS merges instead of overwriting."""
    return type(value).__module__ == "anna_core._core" and hasattr(value, "lattice_type")


def dumps(value: Any) -> bytes:
    """Serialize a Python value (functions, classes and lambdas included)."""
    return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _user_module(obj: Any) -> Any:
    """The module defining `obj` if it is the user's own code (not stdlib, not installed)."""
    name = getattr(obj, "__module__", None)
    module = sys.modules.get(name) if name else None
    path = getattr(module, "__file__", None)
    if module is None or name == "__main__" or not path:
        return None
    if name.split(".")[0] in _PLATFORM_PACKAGES:
        return None
    path = os.path.realpath(path)
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        root = sysconfig.get_paths().get(key)
        if root and path.startswith(os.path.realpath(root) + os.sep):
            return None
    return module


def dumps_function(obj: Any, modules: Iterable[Any] = ()) -> bytes:
    """Serialize a function or `(class, init_args)` for registration. Functions and classes
    defined in the user's own modules (e.g. a test file or script that executors cannot
    import) are pickled by value, and so is every module in `modules` (what the function
    uses from them travels with it), so executors need nothing but the registration."""
    target = obj[0] if isinstance(obj, tuple) else obj
    by_value = [m for m in [_user_module(target), *modules] if m is not None]
    registered = []
    try:
        for module in by_value:
            if module.__name__ not in cloudpickle.list_registry_pickle_by_value():
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
        return dumps(obj)
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def loads(data: bytes) -> Any:
    """Inverse of `dumps`."""
    return pickle.loads(data)


def encode_args(args: Iterable[Any]) -> "pb.ArgumentList":
    """Call arguments as an `ArgumentList`: references by key, other values serialized."""
    out = pb.ArgumentList()
    for a in args:
        if isinstance(a, Reference):
            out.args.add(reference=a.key, concurrent=a.concurrent)
        else:
            out.args.add(value=dumps(a))
    return out


def decode_arg(arg: "pb.Argument") -> Any:
    """An `Argument` back as a value, or as a `Reference` (resolved later by the executor)."""
    if arg.WhichOneof("kind") == "reference":
        return Reference(arg.reference, concurrent=arg.concurrent)
    return loads(arg.value)


def references_of(arglist: "pb.ArgumentList") -> List[str]:
    """The keys referenced by an `ArgumentList`."""
    return [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]
