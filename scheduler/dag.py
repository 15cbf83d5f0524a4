"""DAGs of functions: the pure definition and its validation.

Contract:
- `Dag(name, functions, connections)`: `functions` is an ordered tuple of function names,
  `connections` an ordered tuple of `(src, dst)` pairs. The order of `connections` is the
  registration order, and it is what orders a fan-in function's upstream results.
- `validate(dag, known)` raises `runtime.errors.InvalidDag` whose message names the
  reason (empty DAG, duplicate function, function not registered, connection to a function
  not in the DAG, duplicate connection, cycle (with the cycle), no sink or more than one
  sink) and returns the DAG otherwise. `known` is the set of registered function names.
- `upstreams(f)` lists `f`'s upstreams in connection order; `downstreams(f)` likewise;
  `sources()` are the functions with no upstream (in `functions` order); `sink()` the one
  function with no downstream.
No I/O, no clocks: tested directly and by properties.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Tuple

from runtime.errors import InvalidDag

__all__ = ["Dag", "validate", "find_cycle"]


@dataclass(frozen=True)
class Dag:
    """A named composition of registered functions; see the module contract."""

    name: str
    functions: Tuple[str, ...]
    connections: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def create(cls, name: str, functions: Iterable[str],
               connections: Iterable[Sequence[str]] = ()) -> "Dag":
        """Build a Dag from any iterables (connections as 2-sequences)."""
        conns = []
        for c in connections:
            if len(c) != 2:
                raise InvalidDag(f"DAG {name!r}: connection {tuple(c)!r} is not a (src, dst) pair")
            conns.append((str(c[0]), str(c[1])))
        return cls(str(name), tuple(str(f) for f in functions), tuple(conns))

    def upstreams(self, fn: str) -> List[str]:
        """Functions with a connection into `fn`, in connection (registration) order."""
        return [s for s, d in self.connections if d == fn]

    def downstreams(self, fn: str) -> List[str]:
        """Functions `fn` connects to, in connection order."""
        return [d for s, d in self.connections if s == fn]

    def sources(self) -> List[str]:
        """Functions with no upstream, in `functions` order."""
        targets = {d for _, d in self.connections}
        return [f for f in self.functions if f not in targets]

    def sinks(self) -> List[str]:
        """Functions with no downstream, in `functions` order (a valid DAG has exactly one)."""
        origins = {s for s, _ in self.connections}
        return [f for f in self.functions if f not in origins]

    def sink(self) -> str:
        """The single sink of a valid DAG."""
        sinks = self.sinks()
        if len(sinks) != 1:
            raise InvalidDag(f"DAG {self.name!r} has {len(sinks)} sinks {sinks}; it needs exactly one")
        return sinks[0]


def find_cycle(functions: Sequence[str], connections: Sequence[Tuple[str, str]]) -> Optional[List[str]]:
    """A cycle as a list of functions [f0, f1, ..., f0], or None if the graph is acyclic."""
    adjacency: Dict[str, List[str]] = {f: [] for f in functions}
    for s, d in connections:
        adjacency.setdefault(s, []).append(d)
        adjacency.setdefault(d, [])
    WHITE, GREY, BLACK = 0, 1, 2
    color = {f: WHITE for f in adjacency}
    for root in adjacency:
        if color[root] != WHITE:
            continue
        # iterative DFS keeping the current path
        path: List[str] = [root]
        iters = [iter(adjacency[root])]
        color[root] = GREY
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                color[path.pop()] = BLACK
                iters.pop()
                continue
            if color[nxt] == GREY:
                return path[path.index(nxt):] + [nxt]
            if color[nxt] == WHITE:
                color[nxt] = GREY
                path.append(nxt)
                iters.append(iter(adjacency[nxt]))
    return None


def validate(dag: Dag, known: Collection[str]) -> Dag:
    """Check `dag` against the registered function names `known`; raise InvalidDag or return it."""
    where = f"DAG {dag.name!r}"
    if not dag.name:
        raise InvalidDag("a DAG needs a non-empty name")
    if not dag.functions:
        raise InvalidDag(f"{where} has no functions")
    seen = set()
    for f in dag.functions:
        if f in seen:
            raise InvalidDag(f"{where} lists function {f!r} more than once")
        seen.add(f)
    unknown = [f for f in dag.functions if f not in known]
    if unknown:
        raise InvalidDag(f"{where} uses function(s) that are not registered: {unknown}")
    edges = set()
    for s, d in dag.connections:
        for end in (s, d):
            if end not in seen:
                raise InvalidDag(f"{where}: connection ({s!r}, {d!r}) names {end!r}, "
                                 f"which is not among the DAG's functions {list(dag.functions)}")
        if (s, d) in edges:
            raise InvalidDag(f"{where}: connection ({s!r}, {d!r}) is listed more than once")
        edges.add((s, d))
    cycle = find_cycle(dag.functions, dag.connections)
    if cycle is not None:
        raise InvalidDag(f"{where} has a cycle: {' -> '.join(cycle)}")
    sinks = dag.sinks()
    if len(sinks) != 1:
        raise InvalidDag(f"{where} has {len(sinks)} sinks {sinks}; a DAG needs exactly one "
                         "function with no downstream")
    return dag
