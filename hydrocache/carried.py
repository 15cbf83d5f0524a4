"""Versions and dependencies an attempt carries downstream, so its caches ask each other less.

Contract (pure: no sockets, clocks or sleeps; `CausalContext` is `cloudburst_pb2`'s):
- Carried versions. An OPT attempt's downstream cache rebuilds each entry of the upstream
  snapshot S it must read from the holders' temporary versions (Algorithm 6's remote fetch,
  CAUSAL_TEMP_GET). Those temporary versions are exactly the versions of S_d each upstream
  cache bound (`NodeCache._bind_finish`), so the upstream cache can return them with its
  answer and the attempt can carry them down in `CausalContext.carried`.
  `Carried(limit)` accumulates them: `add(key, lattice_bytes)` (a version already carried is
  kept once; past `limit` bytes in all, `add` keeps nothing more and returns False),
  `extend(items)` with `CarriedVersion`s, `to_proto()`. `unpack(contexts, keys)` decodes the
  carried versions of `keys` only (key -> list of `Version`; an entry that does not decode is
  left out, so its key is asked from its holders as before).
  A carried version only stands in for what its holder would have answered: the downstream
  cache merges the carried (and its own temporary) versions that the entry's clock
  supersedes and uses them only when the merge equals the entry exactly; anything short of
  that is asked from the holders. So the bound versions are the same either way.
- Read dependencies. A sink's write of a key read upstream inherits the dependencies of the
  version read (`hydrocache.writer`). `ReadDeps` keeps, per key read in the attempt so far,
  those dependencies (merged entry-wise when two functions report the key; more
  dependencies only make the write wait for more): `note(key, deps)` with the bound
  entry's `KeyVersion`s, `extend(items)` with `ReadDeps` protos, `get(key)` (a dict),
  `to_proto()`. The sink then needs no second bind.
- What to carry. A carried version is used only by a downstream bind of its key on another
  cache (a cache holds its own versions of S_d). `carry_plan(schedule)` gives, from a
  function's schedule (its targets, `forward` and the plan's `caches`), `(ask, keep)`: `ask`
  the keys this function's cache should carry (read by a transitive downstream function on
  another cache), `keep` the keys whose received versions it passes on (read by any
  transitive downstream function: it cannot tell which cache a received version came from).
  Either is None, "every key", when the downstream reads are not all known: the read set is
  explored (`dag_keys_known` false: keys read at run time), or a downstream schedule is not
  in `forward` (a large DAG). A key read at run time and not carried is asked from its
  holders, as without carrying; so a smaller set never changes what is bound.
  `worth_sending(contexts, keys, own)`: of `keys` (a bind's), those whose carried versions a
  bind at cache `own` may use: every key but one whose every upstream snapshot entry is held
  by `own` alone (that cache rebuilds it from its own temporary versions).
Trust: both travel through the attempt's workers, as the snapshot, the read set and the
buffered writes (`CausalContext.writes`) already do; a worker can change nothing with them it
could not change before, and a carried version is only used when it matches the clock S names.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from hydro_proto import cloudburst_pb2 as pb

from . import vclock
from .version import Version

__all__ = ["CARRY_BYTES", "Carried", "unpack", "ReadDeps", "carry_plan",
           "worth_sending"]

CARRY_BYTES = 64 << 10     # carried versions per attempt context, in serialized bytes


class Carried:
    """The carried versions of one attempt context, bounded in bytes (module contract)."""

    __slots__ = ("limit", "_items", "_bytes", "full")

    def __init__(self, limit: int = CARRY_BYTES) -> None:
        self.limit = limit
        self._items: Dict[tuple, bytes] = {}
        self._bytes = 0
        self.full = False           # something was left out: downstream asks holders for it

    def __len__(self) -> int:
        return len(self._items)

    @property
    def bytes(self) -> int:
        return self._bytes

    def add(self, key: str, lattice: bytes) -> bool:
        ident = (key, lattice)
        if ident in self._items:
            return True
        size = len(key) + len(lattice)
        if self._bytes + size > self.limit:
            self.full = True
            return False
        self._items[ident] = lattice
        self._bytes += size
        return True

    def extend(self, items: Iterable[pb.CarriedVersion]) -> None:
        for cv in items:
            self.add(cv.key, cv.lattice)

    def to_proto(self, keys: Optional[Iterable[str]] = None) -> List[pb.CarriedVersion]:
        """The carried versions (of `keys` only, when given)."""
        wanted = None if keys is None else set(keys)
        return [pb.CarriedVersion(key=k, lattice=b) for (k, b) in self._items
                if wanted is None or k in wanted]


Keys = Optional[FrozenSet[str]]          # None: every key


def _references(args: pb.ArgumentList) -> Set[str]:
    out = {a.reference for a in args.args if a.WhichOneof("kind") == "reference"}
    out.update(a.reference for a in args.kwargs.values() if a.WhichOneof("kind") == "reference")
    return out


def carry_plan(schedule: pb.Schedule) -> Tuple[Keys, Keys]:
    """(ask, keep) for the function `schedule` runs (module contract, "What to carry")."""
    plan = schedule.causal
    if not plan.dag_keys_known:
        return None, None
    by_name = {f.function: f for f in schedule.forward}
    own = plan.caches.get(schedule.function)
    ask: Set[str] = set()
    keep: Set[str] = set()
    below = list(dict.fromkeys(schedule.targets))   # every transitive downstream, once
    for fn in below:
        down = by_name.get(fn)
        if down is None:           # its schedule travels apart (a large DAG): reads unknown
            return None, None
        reads = _references(down.args)
        keep |= reads
        if own is None or plan.caches.get(fn) != own:
            ask |= reads
        below.extend(t for t in down.targets if t not in below)
    return frozenset(ask), frozenset(keep)


def worth_sending(contexts: Sequence[pb.CausalContext], keys: Iterable[str], own: str
                  ) -> List[str]:
    """The keys of `keys` whose carried versions a bind at cache `own` may use (module
    contract, "What to carry")."""
    wanted = set(keys)
    mine: Set[str] = set()
    other: Set[str] = set()
    for c in contexts:
        for kv in c.snapshot:
            if kv.key in wanted:
                held_here = bool(own) and bool(kv.holders) and all(h == own for h in kv.holders)
                (mine if held_here else other).add(kv.key)
    return [k for k in keys if k not in mine or k in other]


def unpack(contexts: Sequence[pb.CausalContext], keys: Iterable[str]
           ) -> Dict[str, List[Version]]:
    """The carried versions of `keys` in `contexts` (each decoded once; undecodable ones
    are left out)."""
    wanted: Set[str] = set(keys)
    out: Dict[str, List[Version]] = {}
    seen: Set[tuple] = set()
    for c in contexts:
        for cv in c.carried:
            if cv.key not in wanted or (cv.key, cv.lattice) in seen:
                continue
            seen.add((cv.key, cv.lattice))
            try:
                v = Version.deserialize(cv.key, cv.lattice)
            except (ValueError, TypeError):
                continue
            out.setdefault(cv.key, []).append(v)
    return out


Deps = Dict[str, Dict[str, int]]


class ReadDeps:
    """Per key read so far, the dependencies of the version read (module contract). Kept as
    the `ReadDeps` protos they arrived in, so passing them on is a copy in protobuf's C code;
    only a key two functions report is merged (in Python), and `get` decodes one key."""

    __slots__ = ("_deps",)

    def __init__(self) -> None:
        self._deps: Dict[str, pb.ReadDeps] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._deps

    def note(self, key: str, deps: Iterable[pb.KeyVersion]) -> None:
        """The version read of `key` depends on `deps` (`CacheEntry.deps`)."""
        rd = pb.ReadDeps(key=key)
        rd.deps.extend(deps)
        self._add(rd)

    def extend(self, items: Iterable[pb.ReadDeps]) -> None:
        for rd in items:
            self._add(rd)

    def _add(self, rd: pb.ReadDeps) -> None:
        mine = self._deps.get(rd.key)
        if mine is None:
            self._deps[rd.key] = rd
            return
        if mine.SerializeToString(deterministic=True) == rd.SerializeToString(deterministic=True):
            return
        merged = _decode(mine)
        for d, vc in _decode(rd).items():
            merged[d] = vclock.merge(merged[d], vc) if d in merged else vc
        out = pb.ReadDeps(key=rd.key)
        for d in sorted(merged):
            out.deps.add(key=d).vc.update(merged[d])
        self._deps[rd.key] = out

    def get(self, key: str) -> Optional[Deps]:
        rd = self._deps.get(key)
        return None if rd is None else _decode(rd)

    def to_proto(self) -> List[pb.ReadDeps]:
        return [self._deps[k] for k in sorted(self._deps)]


def _decode(rd: pb.ReadDeps) -> Deps:
    out: Deps = {}
    for kv in rd.deps:
        vc = {n: int(c) for n, c in kv.vc.items() if c}
        out[kv.key] = vclock.merge(out[kv.key], vc) if kv.key in out else vc
    return out
