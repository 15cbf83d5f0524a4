"""An independent judge of transactional causal consistency over a recorded history.

Contract: ``check(history) -> list[Violation]`` (empty when the history is TCC). A history is
a sequence of ``Transaction(txid, reads, writes)``; every read and write is an
``Observed(key, vc, deps)``: the version's clock and its dependencies (key -> clock). Kinds:

- ``not_a_snapshot`` (Definition 2): a transaction read ``a_i`` and ``b_j`` (different keys)
  and some version ``a_k`` in the causal past of ``b_j`` has ``a_i → a_k`` strictly.
- ``atomic_visibility`` (4.1.2): a transaction T wrote ``a_w`` and ``b_w``; another
  transaction read ``a_x`` with ``supersedes(a_x, a_w)`` and ``b_y`` with
  ``not supersedes(b_y, b_w)``.
- ``non_repeatable_read``: one transaction read two different clocks of one key.

The causal past of a read ``b_j`` is the transitive closure of ``(b, VC_bj)`` and its
dependencies, where the closure of a pair ``(d, vc)`` includes the dependencies of every
recorded write of ``d`` whose clock is ``<= vc`` (the versions that ``d``'s version includes,
as Definition 1 merges and overwrites them). Closures are memoised per version read and
per ``(key, clock)`` lookup, and the past is summarised per key as the set of its maximal
clocks (``a_i → a_k`` for some clock iff for a maximal one), made only for the keys a
transaction asks about (the maxima are quadratic in a key's clocks, and a read's past spans
every key of a small keyspace).

Reading: Definition 2 is checked literally (concurrency with ``a_k`` is allowed), which is
weaker than the strict snapshot HydroCache provides; ``check(history, strict=True)`` also
reports ``not_a_snapshot`` when ``a_i`` does not supersede ``a_k`` (4.2.1's "snapshot").

This module deliberately uses nothing of the cut or the protocols: only the vector-clock
order (the C++ kernel's) and the recorded history.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Mapping, Set, Tuple

from . import vclock

__all__ = ["Observed", "Transaction", "Violation", "check"]

FVC = FrozenSet[Tuple[str, int]]


@dataclass(frozen=True)
class Observed:
    key: str
    vc: Mapping[str, int]
    deps: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass
class Transaction:
    txid: str
    reads: List[Observed] = field(default_factory=list)
    writes: List[Observed] = field(default_factory=list)


@dataclass(frozen=True)
class Violation:
    kind: str
    txid: str
    detail: str


def _fz(vc: Mapping[str, int]) -> FVC:
    return frozenset((n, c) for n, c in vc.items() if c)


def _fdeps(deps: Mapping[str, Mapping[str, int]]) -> FrozenSet[Tuple[str, FVC]]:
    return frozenset((d, _fz(c)) for d, c in deps.items() if d and any(c.values()))


class _History:
    def __init__(self, txs: List[Transaction]) -> None:
        # key -> clock -> dependencies of the write(s) with that clock (merged)
        self.writes: Dict[str, Dict[FVC, Set[Tuple[str, FVC]]]] = {}
        for t in txs:
            for w in t.writes:
                self.writes.setdefault(w.key, {}).setdefault(_fz(w.vc), set()).update(
                    _fdeps(w.deps))
        self._below: Dict[Tuple[str, FVC], List[FVC]] = {}
        self._past: Dict[Tuple[str, FVC, FrozenSet], "_Past"] = {}

    def below(self, key: str, vc: FVC) -> List[FVC]:
        """Recorded write clocks of ``key`` that ``vc`` supersedes (memoised)."""
        memo = self._below.get((key, vc))
        if memo is None:
            need = dict(vc)
            memo = [w for w in self.writes.get(key, {}) if vclock.supersedes(need, dict(w))]
            self._below[(key, vc)] = memo
        return memo

    def past(self, o: Observed) -> "_Past":
        """The causal past of a read (`_Past`: per key its clocks, and the maximal ones)."""
        sig = (o.key, _fz(o.vc), _fdeps(o.deps))
        memo = self._past.get(sig)
        if memo is not None:
            return memo
        seen: Set[Tuple[str, FVC]] = set()      # (key, clock) pairs expanded
        done: Set[Tuple[str, FVC]] = set()      # recorded writes whose deps were added
        stack: List[Tuple[str, FVC]] = [(o.key, sig[1]), *sig[2]]
        per_key: Dict[str, Set[FVC]] = {}
        while stack:
            item = stack.pop()
            if item in seen:
                continue
            seen.add(item)
            d, vc = item
            per_key.setdefault(d, set()).add(vc)
            for w in self.below(d, vc):
                if (d, w) not in done:
                    done.add((d, w))
                    stack.extend(self.writes[d][w])
        memo = _Past(per_key)
        self._past[sig] = memo
        return memo


class _Past:
    """A read's causal past: per key its clocks, and its maximal clocks made on first ask (a
    transaction asks about the few keys it read, not every key of the past)."""

    __slots__ = ("clocks", "_maximal")

    def __init__(self, clocks: Dict[str, Set[FVC]]) -> None:
        self.clocks = clocks
        self._maximal: Dict[str, List[FVC]] = {}

    def maximal(self, key: str) -> List[FVC]:
        found = self._maximal.get(key)
        if found is None:
            found = self._maximal[key] = _maxima(self.clocks[key])
        return found


def _maxima(clocks: Set[FVC]) -> List[FVC]:
    cs = [dict(c) for c in clocks]
    return [c for c, d in zip(clocks, cs)
            if not any(vclock.happens_before(d, e) for e in cs)]


def check(history: Iterable[Transaction], strict: bool = False) -> List[Violation]:
    txs = list(history)
    h = _History(txs)
    out: List[Violation] = []
    # writers of several keys, for atomic visibility: key -> [(txid, clock, {key: clock})]
    multi: Dict[str, List[Tuple[str, Dict[str, int], Dict[str, Dict[str, int]]]]] = {}
    for t in txs:
        if len({w.key for w in t.writes}) > 1:
            group = {w.key: dict(w.vc) for w in t.writes}
            for k, c in group.items():
                multi.setdefault(k, []).append((t.txid, c, group))
    for t in txs:
        read: Dict[str, Dict[str, int]] = {}
        for r in t.reads:
            prev = read.get(r.key)
            if prev is None:
                read[r.key] = dict(r.vc)
            elif _fz(prev) != _fz(r.vc):
                out.append(Violation("non_repeatable_read", t.txid,
                                     f"read {r.key!r} at {prev} and at {dict(r.vc)}"))
        # Definition 2
        for b in t.reads:
            past = h.past(b)
            for a_key, a_vc in read.items():
                if a_key == b.key or a_key not in past.clocks:
                    continue
                for c in past.maximal(a_key):
                    cd = dict(c)
                    if vclock.happens_before(a_vc, cd) or (
                            strict and not vclock.supersedes(a_vc, cd)):
                        out.append(Violation(
                            "not_a_snapshot", t.txid,
                            f"read {a_key!r} at {a_vc} but {b.key!r} at {dict(b.vc)} depends "
                            f"on {a_key!r} at {cd}"))
                        break
        # atomic visibility
        reported: Set[Tuple[str, str, str]] = set()
        for a_key, a_vc in read.items():
            for txid, a_w, group in multi.get(a_key, ()):
                if txid == t.txid or not vclock.supersedes(a_vc, a_w):
                    continue
                for b_key, b_w in group.items():
                    if b_key == a_key or b_key not in read or (txid, a_key, b_key) in reported:
                        continue
                    if not vclock.supersedes(read[b_key], b_w):
                        reported.add((txid, a_key, b_key))
                        out.append(Violation(
                            "atomic_visibility", t.txid,
                            f"saw {txid}'s write of {a_key!r} ({a_w}) but read {b_key!r} at "
                            f"{read[b_key]}, older than its write {b_w}"))
    return out
