"""How Python values cross the wire: stored objects, call arguments, and `Reference`.

Contract:
- Values are data, not code. `loads(data)` unpickles plain data only: None, bool, int,
  float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset, the `datetime`
  types, `decimal.Decimal`, `Reference` and the KVS's own lattices (`anna_core`), nested in
  any way. A pickle naming any other Python global (a class, a function, `os.system`, ...)
  is refused before that global is even imported: `UnsafeValue` names the value (its key
  when known), the global, and how to opt in. A lattice is rebuilt only by the kernel's
  lattice codec (lattices pickle as `anna_core.wire.lattice_from_payload(lattice_type,
  payload)`, which this reader runs as `anna_core._core.deserialize`), never by its class,
  so no pickle can make a lattice object without a valid value. A `Reference` pickled by an
  earlier version of the platform (when it lived in `runtime.values`) still reads.
  Bytes that do not decode (truncated, corrupt, a payload the codec rejects) raise
  `MalformedValue` (an `UnsafeValue`) naming the value; no other exception escapes a plain
  read. `loads(data, objects=True)` is the full
  unpickler, for a caller who asked for Python objects and trusts whoever wrote them
  (unpickling runs whatever code the writer chose). docs/SECURITY.md is the trust model.
- `dumps` serializes any Python value (cloudpickle, protocol 5). (A registration, a function
  or class pickled with the user's own modules by value, is the SDK's:
  `cloudburst/pickling.py`. Registrations are code by design; only executors unpickle them.)
- `encode_args`/`decode_arg` move call arguments in and out of `cloudburst.Argument`: a
  top-level `Reference` travels as a key (so schedulers see it) with its `concurrent` and
  `objects` flags, anything else as bytes, which the executor unpickles fully: they are the
  caller's own arguments, and a caller may run code on executors anyway (it may register
  functions). `references_of` lists the keys an argument list references.
- `Reference(key, concurrent=False, objects=False)` is an argument the executor replaces with
  the object stored under `key`. Given as a top-level argument of a call (or returned by an
  upstream function and so passed to a downstream one), it is resolved on the executor through its
  node cache before the function runs. The scheduler sees the referenced keys of a call and
  uses them for data locality (and, for causal calls, as the DAG's read set). A key holding
  no object makes the call fail with `ExecutionError`; a key holding more than plain data
  makes it fail with `UnsafeValue` unless `objects=True`. With `concurrent=True` (causal
  calls) the function receives the list of every concurrent value of the key (sorted by
  their serialized bytes) instead of the first one.
- Size: `transport(size, limit)` is how a serialized argument or result of `size` bytes
  travels: "inline" (in the message) up to `BY_REFERENCE_BYTES`, "reference" (through the
  KVS under a `faas.keys.value_key`, the message carrying the key) up to `limit` (the KVS's
  maximum value size), else "too_large" (`too_large(what, size, limit)` is the
  `ValueTooLarge` to raise, naming what and the limit).
"""
from __future__ import annotations

import importlib
import io
import pickle
import re
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional

import cloudpickle

from anna_core._core import deserialize as _lattice_codec
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb

from .errors import MalformedValue, UnsafeValue, ValueTooLarge

__all__ = ["Reference", "is_lattice", "CAUSAL_LATTICES", "PLAIN_GLOBALS", "dumps", "fill_argument",
           "loads", "encode_args", "decode_arg", "references_of", "BY_REFERENCE_BYTES",
           "transport", "too_large"]

# Serialized arguments and results above this travel through the KVS, not in messages: a
# scheduler relays a call's arguments, and a message is held whole by every hop.
BY_REFERENCE_BYTES = 1 << 20


@dataclass(frozen=True)
class Reference:
    """A pointer to the object stored under `key` in the KVS. The executor reads it as plain
    data unless `objects=True` (see the module contract)."""

    key: str
    concurrent: bool = False
    objects: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise TypeError(f"Reference key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.concurrent, bool):
            raise TypeError(f"Reference concurrent must be a bool, got {self.concurrent!r}")
        if not isinstance(self.objects, bool):
            raise TypeError(f"Reference objects must be a bool, got {self.objects!r}")


# anna.LatticeType numbers of the causal lattices (proto/anna.proto)
CAUSAL_LATTICES = frozenset({anna_pb2.SINGLE_CAUSAL, anna_pb2.MULTI_CAUSAL})


def is_lattice(value: Any) -> bool:
    """True for an `anna_core` lattice, which the KVS merges instead of overwriting."""
    return type(value).__module__ == "anna_core._core" and hasattr(value, "lattice_type")


# Values that pickle the same with the standard pickler as with cloudpickle (no global, no
# function or class by value), which is several times faster for them.
_SCALARS = frozenset({type(None), bool, int, float, str, bytes})


def dumps(value: Any) -> bytes:
    """Serialize a Python value (functions, classes and lambdas included)."""
    kind = type(value)
    if kind in _SCALARS or (kind is tuple and len(value) <= 8
                            and all(type(v) in _SCALARS for v in value)):
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


# The only globals a plain-data pickle may name. Protocol 5 has opcodes of its own for None,
# bool, int, float, str, bytes, bytearray, list, tuple, dict, set and frozenset, so these
# are the plain values that need a global; each is a constructor of an inert value from
# numbers, strings or bytes, with no side effect and no way to reach other objects:
PLAIN_GLOBALS = frozenset({
    ("builtins", "complex"),        # complex numbers (no opcode of their own)
    ("datetime", "date"),           # timestamps: rebuilt from a validated bytes state
    ("datetime", "time"),
    ("datetime", "datetime"),
    ("datetime", "timedelta"),
    ("datetime", "timezone"),       # the tzinfo of an aware datetime (a fixed offset)
    ("decimal", "Decimal"),         # exact decimal numbers, rebuilt from a str
    ("faas.values", "Reference"),  # the platform's pointer to a key (a str and two bools)
    ("runtime.actors", "ActorHandle"),  # an actor's name (two strs and a tuple of strs),
                                        # checked by its constructor; it holds no connection
    # the KVS's own lattices, as they pickle: lattice_from_payload(lattice_type: int,
    # payload: bytes), read here as the kernel's lattice codec. Lattice classes are not
    # listed: a pickle may not build a lattice through its class (NEWOBJ, REDUCE).
    ("anna_core.wire", "lattice_from_payload"),
})


# Globals of PLAIN_GLOBALS that earlier versions pickled under another module name.
_MOVED = {("runtime.values", "Reference"): ("faas.values", "Reference")}


def _lattice_from_codec(lattice_type: Any, payload: Any) -> Any:
    """`anna_core.wire.lattice_from_payload` as a plain-data pickle calls it: an int type and a
    bytes payload, decoded by the kernel's codec; anything else is `_Malformed`."""
    if type(lattice_type) is not int or type(payload) is not bytes:
        raise _Malformed(f"a lattice must be pickled as lattice_from_payload(int, bytes), got "
                         f"lattice_from_payload({type(lattice_type).__name__}, "
                         f"{type(payload).__name__})")
    try:
        return _lattice_codec(lattice_type, payload)
    except ValueError as e:
        raise _Malformed(f"its lattice does not decode ({e})") from None


class _Malformed(Exception):
    """Raised inside the plain-data unpickler for a lattice record the codec rejects."""


class _Refused(Exception):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.global_name = f"{module}.{name}"


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only `PLAIN_GLOBALS`. Every other global is refused here,
    before its module is imported (importing a module runs its code), and every way a
    pickle can reach a callable (GLOBAL, STACK_GLOBAL, the copyreg extension registry)
    passes through `find_class`; persistent ids and out-of-band buffers are refused by
    the base class, as no handler is given."""

    def find_class(self, module: str, name: str) -> Any:
        module, name = _MOVED.get((module, name), (module, name))
        if (module, name) not in PLAIN_GLOBALS:
            raise _Refused(module, name)
        if (module, name) == ("anna_core.wire", "lattice_from_payload"):
            return _lattice_from_codec
        return getattr(importlib.import_module(module), name)


# The opcodes through which a pickle reaches more than plain data: naming a global (GLOBAL,
# STACK_GLOBAL, INST, OBJ, and the copyreg extensions EXT1/2/4), calling or setting the
# state of what is on the stack (REDUCE, BUILD, NEWOBJ, NEWOBJ_EX), persistent ids and
# out-of-band buffers. Bytes holding none of these byte values anywhere (as opcode or as
# data) cannot ask `find_class` for anything, so the stock unpickler reads them exactly as
# `_PlainDataUnpickler` would (its one difference is `find_class`), at a tenth of the cost
# of making one: a call's small result (an int, a short string) is read this way.
_REACHING = re.compile(b"[" + re.escape(b"".join((
    pickle.GLOBAL, pickle.STACK_GLOBAL, pickle.INST, pickle.OBJ, pickle.EXT1, pickle.EXT2,
    pickle.EXT4, pickle.REDUCE, pickle.BUILD, pickle.NEWOBJ, pickle.NEWOBJ_EX, pickle.PERSID,
    pickle.BINPERSID, pickle.NEXT_BUFFER, pickle.READONLY_BUFFER))) + b"]")


def _subject(what: Optional[str], key: Optional[str]) -> str:
    """What a failed read names: `what`, else the value under `key`, else "a value"."""
    return what or (f"the value under key {key!r}" if key is not None else "a value")


def loads(data: bytes, objects: bool = False, *, key: Optional[str] = None,
          what: Optional[str] = None, opt_in: str = "objects=True") -> Any:
    """Inverse of `dumps`. Plain data only unless `objects=True` (see the module contract).

    Raises `UnsafeValue` when the pickle names a global outside `PLAIN_GLOBALS`; its
    message names `what` (default: the value under `key`, when given) and `opt_in`, how the
    reader asks for Python objects where it read the value (e.g. `lib.get(key, objects=True)`).
    Raises `MalformedValue` (an `UnsafeValue`) when the bytes do not decode; with
    `objects=True` only for a pickle that does not parse (a trusted writer's classes may
    raise their own errors).
    """
    if objects:
        try:
            return pickle.loads(data)
        except (pickle.UnpicklingError, EOFError) as e:
            raise MalformedValue(f"{_subject(what, key)} does not decode: "
                                 f"{type(e).__name__}: {e}", key=key) from None
    try:
        if _REACHING.search(data) is None:      # plain data for certain (see _REACHING)
            return pickle.loads(data)
        return _PlainDataUnpickler(io.BytesIO(data)).load()
    except _Malformed as e:
        raise MalformedValue(f"{_subject(what, key)} does not decode: {e}", key=key) from None
    except _Refused as refused:
        by_value = " (which rebuilds a class or function pickled by value, e.g. one defined " \
                   "in a script)" if refused.global_name.startswith("cloudpickle.") else ""
        raise UnsafeValue(
            f"{_subject(what, key)} is not plain data: it names the Python global "
            f"{refused.global_name!r}{by_value}. Values are read as plain data unless you ask "
            f"for Python objects, since unpickling an object runs code its writer chose; if "
            f"you trust whoever wrote it, read it with {opt_in}.",
            key=key, global_name=refused.global_name) from None
    except RecursionError:
        raise MalformedValue(f"{_subject(what, key)} does not decode: it nests too deeply",
                             key=key) from None
    except Exception as e:        # any other way the bytes fail to parse as a plain pickle
        raise MalformedValue(f"{_subject(what, key)} does not decode: {type(e).__name__}: {e}",
                             key=key) from None


def fill_argument(arg: "pb.Argument", value: Any) -> int:
    """Set the empty `Argument` `arg` to `value`: a `Reference` by key, any other value
    serialized (filled in place: a call's arguments are built without a copy each).
    Returns the serialized value's size (0 for a `Reference`)."""
    if isinstance(value, Reference):
        arg.reference = value.key
        arg.concurrent = value.concurrent
        arg.objects = value.objects
        return 0
    data = dumps(value)
    arg.value = data
    return len(data)


def encode_args(args: Iterable[Any]) -> "pb.ArgumentList":
    """Call arguments as an `ArgumentList`: references by key, other values serialized."""
    out = pb.ArgumentList()
    for a in args:
        fill_argument(out.args.add(), a)
    return out


def decode_arg(arg: "pb.Argument") -> Any:
    """An `Argument` back as a value, or as a `Reference` (resolved later by the executor).
    A value is unpickled fully: it is the caller's own argument (see the module contract)."""
    if arg.WhichOneof("kind") == "reference":
        return Reference(arg.reference, concurrent=arg.concurrent, objects=arg.objects)
    return loads(arg.value, objects=True)


def references_of(arglist: "pb.ArgumentList") -> List[str]:
    """The keys referenced by an `ArgumentList`."""
    return [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]


def transport(size: int, limit: int, threshold: int = BY_REFERENCE_BYTES) -> str:
    """How a serialized value of `size` bytes travels (see the module contract)."""
    if size > limit:
        return "too_large"
    return "reference" if size > threshold else "inline"


def too_large(what: str, size: int, limit: int) -> ValueTooLarge:
    """The error for a value above the KVS's maximum value size."""
    return ValueTooLarge(f"{what} is {size / (1 << 20):,.1f} MiB serialized, above the "
                         f"limit of {limit / (1 << 20):g} MiB (the KVS's maximum value size): "
                         f"store big data in pieces, or raise the KVS's max_value_bytes")
