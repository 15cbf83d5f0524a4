"""A small in-memory world for HydroCache's property tests (not a test module).

``World`` models Anna (per key, the lattice merge of every write), a few executors with their
``ExecutorWriter`` and a few caches, each a ``StrictCausalCut`` that learns versions only
when told to. Transactions read from one cache's cut and commit through one executor; every
write is recorded for the checker. Everything is driven by a ``random.Random`` so a failing
hypothesis example is a seed.
"""
from __future__ import annotations

import random
from typing import Dict, Iterable, List, Optional

from hydrocache.checker import Observed, Transaction
from hydrocache.cut import StrictCausalCut
from hydrocache.version import Version, merge_versions
from hydrocache.versionset import Entry
from hydrocache.writer import ExecutorWriter

KEYS = ["a", "b", "c", "d", "e", "f"]


def observed(v: Version) -> Observed:
    return Observed(v.key, dict(v.vc), {d: dict(c) for d, c in v.deps.items()})


class World:
    def __init__(self, rng: random.Random, executors: int = 3, caches: int = 3,
                 keys: Iterable[str] = KEYS, carry_deps: bool = True) -> None:
        self.rng = rng
        self.carry_deps = carry_deps    # pass the read versions' deps to the writer
        self.keys = list(keys)
        self.anna: Dict[str, Version] = {}
        self.writers = [ExecutorWriter(f"e{i}") for i in range(executors)]
        self.caches = [StrictCausalCut() for _ in range(caches)]
        self.history: List[Transaction] = []
        self.written: List[Version] = []     # every committed version, in commit order

    # -------------------------------------------------------------- Anna + cache updates
    def store(self, v: Version) -> None:
        prev = self.anna.get(v.key)
        self.anna[v.key] = v if prev is None else merge_versions(prev, v)

    def bring(self, cut: StrictCausalCut, keys: Iterable[str]) -> None:
        """The service's cache update: fetch keys from Anna, then missing deps until none."""
        for k in keys:
            if k in self.anna:
                cut.offer(self.anna[k])
        for _ in range(100):
            missing = cut.missing()
            if not missing:
                return
            for d in missing:
                cut.offer(self.anna[d])
        raise AssertionError("cache update did not converge")

    def refresh(self, cut: StrictCausalCut) -> None:
        """Anna pushes the current version of a random cached key (resolving its deps)."""
        if self.anna:
            self.bring(cut, [self.rng.choice(sorted(self.anna))])

    # -------------------------------------------------------------- transactions
    def transaction(self, cache: int, executor: int, reads: List[str],
                    writes: List[str]) -> List[Version]:
        cut = self.caches[cache]
        self.bring(cut, [k for k in reads if k not in cut])
        got = {k: cut.get(k) for k in reads if cut.get(k) is not None}
        read_set = {k: Entry(dict(v.vc)) for k, v in got.items()}
        payload = {k: f"{k}{len(self.written)}".encode() for k in writes}
        read_deps = {k: got[k].deps for k in writes if k in got} if self.carry_deps else None
        out = self.writers[executor].commit(payload, read_set, read_deps)
        for v in out:
            self.store(v)
            self.written.append(v)
        self.history.append(Transaction(f"t{len(self.history)}",
                                        [observed(v) for v in got.values()],
                                        [observed(v) for v in out]))
        return out

    def random_steps(self, n: int) -> None:
        rng = self.rng
        for _ in range(n):
            if rng.random() < 0.2:
                self.refresh(rng.choice(self.caches))
                continue
            reads = rng.sample(self.keys, rng.randint(0, 3))
            writes = rng.sample(self.keys, rng.randint(1, 3))
            self.transaction(rng.randrange(len(self.caches)),
                             rng.randrange(len(self.writers)), reads, writes)


def is_cut(cut: StrictCausalCut) -> Optional[str]:
    """None when the exposed versions form a cut (Definition 3), else why not."""
    from hydrocache import vclock
    for k in cut.keys():
        v = cut.get(k)
        for d, need in v.deps.items():
            have = cut.get(d)
            if have is None:
                return f"{k} depends on {d}, absent"
            if not vclock.supersedes(have.vc, need):
                return f"{k} depends on {d}@{need}, cut has {have.vc}"
    return None
