"""DAGs of functions: the pure definition and its validation.

Contract:
- `Dag(name, functions, connections)`: `functions` is an ordered tuple of function names,
  `connections` an ordered tuple of `(src, dst)` pairs. The order of `connections` is the
  registration order, and it is what orders a fan-in function's upstream results.
- `validate(dag, known, max_functions=DEFAULT_MAX_DAG_FUNCTIONS)` raises
  `faas.errors.InvalidDag` whose message names the reason (empty DAG, more functions than
  `max_functions` (naming the limit), duplicate function, function not registered, connection
  to a function not in the DAG, duplicate connection, cycle (with the cycle), no sink or more
  than one sink) and returns the DAG otherwise. `known` is the set of registered function
  names. The size check comes first, so an oversized DAG costs nothing more.
- `upstreams(f)` lists `f`'s upstreams in connection order; `downstreams(f)` likewise (both
  from adjacency lists built once); `sources()` are the functions with no upstream (in
  `functions` order); `sink()` the one function with no downstream.
- `foreign_arguments(dag, names)` is None when every name of a call's arguments is a
  function of `dag`, else the message of the call's `INVALID_ARGUMENTS` error naming the
  others and the DAG's functions.
- Every algorithm here (and in `policy.dag_relations`) is iterative: a long chain cannot
  exhaust Python's recursion limit.
No I/O, no clocks: tested directly and by properties.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, Iterable, List, Optional, Sequence, Tuple

from faas.errors import InvalidDag

__all__ = ["Dag", "validate", "check_size", "find_cycle", "foreign_arguments",
           "DEFAULT_MAX_DAG_FUNCTIONS"]

# Functions one DAG may have (SchedulerConfig.max_dag_functions). A call's schedules carry
# every function's worker address, so the work per call grows with the square of the size.
DEFAULT_MAX_DAG_FUNCTIONS = 256


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

    def _adjacency(self) -> Tuple[Dict[str, List[str]], Dict[str, List[str]]]:
        """(upstreams, downstreams) of every function, in connection order; built once."""
        cached = self.__dict__.get("_adj")
        if cached is None:
            ups: Dict[str, List[str]] = {}
            downs: Dict[str, List[str]] = {}
            for s, d in self.connections:
                downs.setdefault(s, []).append(d)
                ups.setdefault(d, []).append(s)
            cached = (ups, downs)
            object.__setattr__(self, "_adj", cached)   # a cache on a frozen dataclass
        return cached

    def upstreams(self, fn: str) -> List[str]:
        """Functions with a connection into `fn`, in connection (registration) order."""
        return list(self._adjacency()[0].get(fn, ()))

    def downstreams(self, fn: str) -> List[str]:
        """Functions `fn` connects to, in connection order."""
        return list(self._adjacency()[1].get(fn, ()))

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


def foreign_arguments(dag: Dag, names: Iterable[str]) -> Optional[str]:
    """None, or what is wrong with a call giving arguments to `names` (module contract)."""
    members = set(dag.functions)
    others = sorted(n for n in names if n not in members)
    if not others:
        return None
    shown = ", ".join(repr(n[:200]) for n in others[:10]) + (", ..." if len(others) > 10 else "")
    listed = ", ".join(repr(f) for f in dag.functions[:20]) + \
        (", ..." if len(dag.functions) > 20 else "")
    return (f"call of DAG {dag.name[:200]!r}: arguments given for {shown}, which "
            f"{'is not a function' if len(others) == 1 else 'are not functions'} of it "
            f"(its functions: {listed})")


def check_size(dag: Dag, max_functions: int = DEFAULT_MAX_DAG_FUNCTIONS) -> None:
    """InvalidDag naming the limit when `dag` has more than `max_functions` functions."""
    if len(dag.functions) > max_functions:
        raise InvalidDag(f"DAG {dag.name[:200]!r} has {len(dag.functions)} functions; a DAG may "
                         f"have at most {max_functions} (the scheduler's max_dag_functions)")


def validate(dag: Dag, known: Collection[str],
             max_functions: int = DEFAULT_MAX_DAG_FUNCTIONS) -> Dag:
    """Check `dag` against the registered function names `known` and the size limit; raise
    InvalidDag or return it."""
    where = f"DAG {dag.name[:200]!r}"
    if not dag.name:
        raise InvalidDag("a DAG needs a non-empty name")
    if not dag.functions:
        raise InvalidDag(f"{where} has no functions")
    check_size(dag, max_functions)
    n = len(dag.functions)
    if len(dag.connections) > n * n:     # more than distinct pairs: refused before any work
        raise InvalidDag(f"{where} has {len(dag.connections)} connections; {n} functions "
                         f"without duplicate connections or cycles have at most {n * (n - 1) // 2}")
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
