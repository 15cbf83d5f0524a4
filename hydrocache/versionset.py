"""Versionsets: keys bound to versions, by clock only (Definitions 5 and 7).

Contract: a ``VersionSet`` is a plain ``dict`` key -> ``Entry(vc, holders)``. ``holders`` are
the caches holding temporary versions of that entry for the current attempt (empty when the
entry is not meant to be fetched). Functions never modify their inputs.

- ``union(a, b)``: Definition 7: clocks merged (``vclock.merge``), holders unioned.
- ``intersect(vs, keys)``: the entries whose key is in ``keys`` (``None``: no restriction).
- ``not_superseding(t, s)``: sorted keys in both where ``t[k]`` does not supersede ``s[k]``;
  ``set_supersedes(t, s)``: Definition 4 for sets (no such key).
- ``of_versions(versions, holder)``: the versionset of some ``Version`` objects (several
  versions of one key are merged).
- ``to_proto`` / ``from_proto``: ``cloudburst_pb2.KeyVersion`` lists (sorted by key);
  ``into(message, field, vs)`` appends ``vs`` to a message's repeated ``KeyVersion`` field.
  Both encode through the kernel's ``encode_versionset`` (the entries' wire bytes, merged
  into the message by protobuf's parser): a node cache encodes S and R for every bind, and
  building ``KeyVersion``s field by field cost ~2 us an entry.

Reading: Definition 7 merges the versions of a key present in both sets with Definition 1;
on clocks that is the entry-wise max, and a key's holders are the union because either
side's temporary version may be needed to assemble the merged one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterable, List, Optional

from anna_core import _core
from hydro_proto import cloudburst_pb2

from . import vclock
from .version import Version

__all__ = ["Entry", "VersionSet", "union", "intersect", "not_superseding", "set_supersedes",
           "of_versions", "to_proto", "into", "from_proto"]


@dataclass(frozen=True)
class Entry:
    vc: Dict[str, int]
    holders: FrozenSet[str] = frozenset()

    def __hash__(self) -> int:  # vc is a dict; hash by content
        return hash((tuple(sorted(self.vc.items())), self.holders))


VersionSet = Dict[str, Entry]


def union(a: VersionSet, b: VersionSet) -> VersionSet:
    """Definition 7 (a new versionset; inputs unchanged)."""
    out: VersionSet = dict(a)
    for k, e in b.items():
        mine = out.get(k)
        if mine is None:
            out[k] = e
        else:
            out[k] = Entry(vclock.merge(mine.vc, e.vc), mine.holders | e.holders)
    return out


def intersect(vs: VersionSet, keys: Optional[Iterable[str]]) -> VersionSet:
    """The entries of ``vs`` whose key is in ``keys`` (``None`` keeps everything)."""
    if keys is None:
        return dict(vs)
    keys = keys if isinstance(keys, (set, frozenset, dict)) else set(keys)
    return {k: e for k, e in vs.items() if k in keys}


def not_superseding(t: VersionSet, s: VersionSet) -> List[str]:
    """Sorted keys present in both where ``t[k]`` does not supersede ``s[k]``."""
    return sorted(k for k, e in t.items() if k in s and not vclock.supersedes(e.vc, s[k].vc))


def set_supersedes(t: VersionSet, s: VersionSet) -> bool:
    """Definition 4 for versionsets: t supersedes s on every key they share."""
    return all(vclock.supersedes(e.vc, s[k].vc) for k, e in t.items() if k in s)


def of_versions(versions: Iterable[Version], holder: Optional[str] = None) -> VersionSet:
    """The versionset of ``versions`` (holders = {holder} when given)."""
    holders = frozenset([holder]) if holder else frozenset()
    out: VersionSet = {}
    for v in versions:
        prev = out.get(v.key)
        out[v.key] = Entry(dict(v.vc) if prev is None else vclock.merge(prev.vc, v.vc),
                           holders)
    return out


def into(message: Any, field: str, vs: VersionSet) -> None:
    """Append ``vs``'s entries to ``message.<field>``, a repeated ``KeyVersion`` (sorted by key;
    a clock's zero entries left out, holders sorted)."""
    number = message.DESCRIPTOR.fields_by_name[field].number
    message.MergeFromString(_core.encode_versionset(vs, number))


def to_proto(vs: VersionSet) -> List[cloudburst_pb2.KeyVersion]:
    """``vs`` as ``KeyVersion`` messages (what ``into`` appends)."""
    holder = cloudburst_pb2.CausalContext()
    into(holder, "snapshot", vs)
    return list(holder.snapshot)


def from_proto(items: Iterable[cloudburst_pb2.KeyVersion]) -> VersionSet:
    out: VersionSet = {}
    for kv in items:
        e = Entry({n: int(c) for n, c in kv.vc.items() if c}, frozenset(kv.holders))
        prev = out.get(kv.key)
        out[kv.key] = e if prev is None else Entry(vclock.merge(prev.vc, e.vc),
                                                   prev.holders | e.holders)
    return out
