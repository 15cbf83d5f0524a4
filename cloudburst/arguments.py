"""How a call's arguments travel: values, `Reference`s, keyword arguments, and `Future`s.

Contract: `encode(args, kwargs)` is the `ArgumentList` of one function's arguments;
`encode_into(out, args, kwargs)` fills an empty one the same way and returns `Encoded`: the
keys its `Reference`s name (as `references_in` lists them) and its largest value's size.
- A top-level `Future` (positional or keyword) travels as a reference to its call
  (`CallRef`): the worker that runs the function fetches that call's result from the worker
  that ran it (`executor/sharing.py`), without a trip through this client, and the
  function runs once it is there. If that call failed, or its result is no longer held
  (results are held for a while, bounded), the call fails with `DependencyFailed` naming
  it; the function does not run. A `Future` of a causal call cannot be an argument
  (`ValueError`, nothing sent): pass its value.
- A top-level `Reference` travels as its key (resolved on the executor); anything else is
  pickled. A `Future` inside another value cannot be pickled: `TypeError` naming it.
- Keyword names must be identifiers (`TypeError` otherwise).
`referenced_keys(call)` lists the keys a `Call`'s `Reference`s name, every function's
positional then keyword arguments (`references_in(arglist)`: one function's), functions in
name order.
"""
from __future__ import annotations

from collections import abc
from typing import Any, List, Mapping, NamedTuple, Sequence

from hydro_proto import cloudburst_pb2 as pb

from faas.values import Reference, fill_argument

from .futures import Future

__all__ = ["Encoded", "encode", "encode_into", "futures_in", "merge_keywords", "referenced_keys", "references_in"]


def _fill(arg: pb.Argument, value: Any) -> int:
    """Set the empty `arg` to `value` (see the module contract); the serialized value's
    size (0: a `Reference` or a `Future`)."""
    if isinstance(value, Future):
        if value.consistency == "causal":
            raise ValueError(f"the Future of a causal call ({value.what}) cannot be an "
                             f"argument: pass its value, future.get()")
        arg.call.call_id = value.request_id
        arg.call.what = value.what
        return 0
    return fill_argument(arg, value)


class Encoded(NamedTuple):
    """What encoding one function's arguments found, so that the call is not read back
    (reading a message's repeated fields costs more than writing them)."""
    references: List[str]     # the keys its `Reference`s name, as `references_in` lists them
    largest: int              # the size of its largest serialized value (0: none)


def futures_in(*groups: Any) -> List[Future]:
    """The `Future`s among the values of `groups` (sequences and mappings of arguments).
    A call keeps the Futures it was given alive: a dropped Future cancels its call, and
    the consuming call still needs that result."""
    found: List[Future] = []
    for g in groups:
        if not g:
            continue
        # (a tuple or dict first: asking `abc.Mapping` costs more than a no-op call's send)
        values = g if isinstance(g, (tuple, list)) else \
            g.values() if isinstance(g, (dict, abc.Mapping)) else g
        found += [v for v in values if isinstance(v, Future)]
    return found


def encode(args: Sequence[Any], kwargs: Mapping[str, Any]) -> pb.ArgumentList:
    """The `ArgumentList` of `args` and `kwargs`; see the module contract."""
    out = pb.ArgumentList()
    encode_into(out, args, kwargs)
    return out


def encode_into(out: pb.ArgumentList, args: Sequence[Any],
                kwargs: Mapping[str, Any]) -> Encoded:
    """Fill the empty `out` (a call's own `ArgumentList`, so nothing is copied) as `encode`
    would make it; returns what it found."""
    references: List[str] = []
    largest = 0
    for a in args:
        size = _fill(out.args.add(), a)
        if size > largest:
            largest = size
        elif isinstance(a, Reference):
            references.append(a.key)
    named = []
    for k, v in kwargs.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise TypeError(f"keyword argument names must be identifiers, got {k!r}")
        size = _fill(out.kwargs[k], v)
        if size > largest:
            largest = size
        elif isinstance(v, Reference):
            named.append((k, v.key))
    if named:
        references += [key for _, key in sorted(named)]
    return Encoded(references, largest)


def merge_keywords(kwargs: Any, keywords: Mapping[str, Any]) -> dict:
    """`kwargs=` (a mapping or None) and the other keywords of a call, as one dict;
    `TypeError` when a name is given both ways."""
    if kwargs is None:
        return dict(keywords)
    if not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a mapping of keyword arguments, got "
                        f"{type(kwargs).__name__}")
    both = sorted(set(kwargs) & set(keywords))
    if both:
        raise TypeError(f"keyword argument(s) {both} given both in kwargs= and directly")
    return {**kwargs, **keywords}


def references_in(arglist: pb.ArgumentList) -> List[str]:
    """The KVS keys one function's arguments name by `Reference`: positional, then keyword
    in name order."""
    keys = [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]
    if arglist.kwargs:
        kw = arglist.kwargs
        keys += [kw[k].reference for k in sorted(kw) if kw[k].WhichOneof("kind") == "reference"]
    return keys


def referenced_keys(call: pb.Call) -> List[str]:
    """The KVS keys `call`'s arguments name by `Reference` (see the module contract)."""
    return [key for fn in sorted(call.args) for key in references_in(call.args[fn])]
