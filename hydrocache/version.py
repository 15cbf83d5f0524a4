"""Key versions ``[key, VC, deps, payload]`` (dissertation 4.1.2, Definitions 1 and 4).

Contract: a ``Version`` is immutable and wraps an ``anna_core.MultiKeyCausalLattice`` (the
value Anna stores for a MULTI_CAUSAL key). ``vc``, ``deps`` and ``values`` are the lattice's
revealed clock, dependencies and sorted values, read once at construction.

- ``Version.new(key, vc, deps, values)`` builds a single-version lattice.
- ``Version.from_lattice(key, lattice)`` / ``Version.deserialize(key, payload)`` wrap a stored
  value; ``serialize()`` is the lattice's wire payload (``anna_pb2.MULTI_CAUSAL``), made
  once per Version and kept (a deserialized Version keeps the bytes it decoded from).
- ``first``: the value a function gets by default (the smallest; None without values).
- ``memo(name, make)``: ``make(version)``, made once per Version and kept under ``name``:
  what a cache derives from a version it answers with many times (e.g. the encoding of its
  clock and dependencies in every bind's answer). ``make`` must depend on the version only.
- ``merge_versions(a, b)``: Definition 1 through the lattice merge (same key, else
  ValueError); when that merge is one of the two (a single version after the other's whole
  clock), that Version itself.
- ``version_supersedes(new, old)``: Definition 4; ``old`` may be a Version or a clock.

Reading: Definition 1 on a lattice that keeps an antichain. Anna's causal lattice keeps
concurrent versions apart (that is what makes its merge associative) and drops a version
whose clock another strictly dominates ("a_j overwrites a_i"). The version HydroCache
reasons about is the revealed one: clock = entry-wise max, dependencies = key-wise max,
values = union, which is exactly Definition 1's merge of the surviving versions.

Reading: dependencies that carry nothing are not dependencies. An empty dependency clock (the
bottom version) and a dependency of a key on itself (same-key causality lives in the VC)
are left out of ``deps``; the lattice keeps whatever it was given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Union

import anna_core

from . import vclock

__all__ = ["Version", "merge_versions", "version_supersedes"]

VC = Mapping[str, int]


@dataclass(frozen=True)
class Version:
    key: str
    vc: Dict[str, int]
    deps: Dict[str, Dict[str, int]]
    values: Tuple[bytes, ...]
    lattice: Any = field(compare=False, repr=False)
    # the lattice's wire payload, made on the first `serialize()` (a Version is immutable,
    # and a cache serializes one version for many binds and holders)
    _wire: list = field(default_factory=list, compare=False, repr=False)
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def new(cls, key: str, vc: VC, deps: Mapping[str, VC] = None,
            values: Iterable[bytes] = ()) -> "Version":
        clean = {d: dict(c) for d, c in (deps or {}).items() if d != key and any(c.values())}
        lattice = anna_core.MultiKeyCausalLattice(dict(vc), clean, list(values))
        return cls.from_lattice(key, lattice)

    @classmethod
    def from_lattice(cls, key: str, lattice: Any) -> "Version":
        if not isinstance(lattice, anna_core.MultiKeyCausalLattice):
            raise TypeError(f"{key}: expected a MultiKeyCausalLattice, got "
                            f"{type(lattice).__name__}")
        deps = {d: c for d, c in lattice.dependencies.items() if c and d != key}
        return cls(key, lattice.vector_clock, deps, tuple(lattice.reveal()), lattice)

    @classmethod
    def deserialize(cls, key: str, payload: bytes) -> "Version":
        from hydro_proto import anna_pb2
        try:
            lattice = anna_core.deserialize(anna_pb2.MULTI_CAUSAL, payload)
        except ValueError as e:
            raise ValueError(f"{key}: the causal value does not decode ({e})") from None
        version = cls.from_lattice(key, lattice)
        if type(payload) is bytes:
            # what it decoded from is its wire payload: a committed version a cache exposes
            # is carried downstream by many binds, and is not encoded again for them
            version._wire.append(payload)
        return version

    def serialize(self) -> bytes:
        wire = self._wire
        if not wire:
            wire.append(self.lattice.serialize())
        return wire[0]

    def memo(self, name: str, make: Callable[["Version"], Any]) -> Any:
        memo = self._memo
        if name not in memo:
            memo[name] = make(self)
        return memo[name]

    @property
    def first(self) -> Optional[bytes]:
        return self.values[0] if self.values else None


def merge_versions(a: Version, b: Version) -> Version:
    """Definition 1: the merge of two versions of one key (the lattice merge)."""
    if a.key != b.key:
        raise ValueError(f"cannot merge versions of different keys {a.key!r} and {b.key!r}")
    # One side a single version whose clock is after the other side's whole clock: every
    # version of the other side is strictly dominated by it, so the lattice merge keeps it
    # alone and it is the merge, as it is (a cut offered a commit based on what it exposed
    # takes the commit itself, with its payload, instead of a rebuilt copy)
    if b.lattice.versions == 1 and vclock.happens_before(a.vc, b.vc):
        return b
    if a.lattice.versions == 1 and vclock.happens_before(b.vc, a.vc):
        return a
    return Version.from_lattice(a.key, a.lattice.merge(b.lattice))


def version_supersedes(new: Version, old: Union[Version, VC]) -> bool:
    """Definition 4: ``new == old`` or ``old → new`` (by their clocks)."""
    return vclock.supersedes(new.vc, old.vc if isinstance(old, Version) else old)
