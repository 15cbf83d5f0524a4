"""DAG validation (scheduler.dag): every rejection names its reason; properties on random graphs."""
import pytest
from hypothesis import given, settings, strategies as st

from cloudburst.errors import InvalidDag
from scheduler.dag import Dag, find_cycle, validate

KNOWN = {"a", "b", "c", "d", "e"}


def test_chain_is_valid_and_reports_its_shape():
    dag = validate(Dag.create("chain", ["a", "b", "c"], [("a", "b"), ("b", "c")]), KNOWN)
    assert dag.sources() == ["a"]
    assert dag.sink() == "c"
    assert dag.upstreams("c") == ["b"] and dag.downstreams("a") == ["b"]


def test_fan_in_upstreams_follow_connection_order():
    dag = Dag.create("fan", ["a", "b", "c", "d"], [("a", "c"), ("a", "b"), ("c", "d"), ("b", "d")])
    validate(dag, KNOWN)
    assert dag.upstreams("d") == ["c", "b"]
    assert dag.downstreams("a") == ["c", "b"]


def test_single_function_dag_is_valid():
    assert validate(Dag.create("one", ["a"]), KNOWN).sink() == "a"


@pytest.mark.parametrize("functions,connections,reason", [
    ([], [], "no functions"),
    (["a", "zzz"], [("a", "zzz")], "not registered"),
    (["a", "a"], [], "more than once"),
    (["a", "b"], [("a", "c")], "not among"),
    (["a", "b"], [("a", "b"), ("a", "b")], "listed more than once"),
    (["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a")], "cycle"),
    (["a"], [("a", "a")], "cycle"),
    (["a", "b", "c"], [("a", "b"), ("a", "c")], "2 sinks"),
    (["a", "b"], [], "2 sinks"),
])
def test_invalid_dags_name_the_reason(functions, connections, reason):
    with pytest.raises(InvalidDag, match=reason):
        validate(Dag.create("bad", functions, connections), KNOWN)


def test_connection_must_be_a_pair():
    with pytest.raises(InvalidDag, match="pair"):
        Dag.create("bad", ["a"], [("a", "b", "c")])


names = st.sampled_from(sorted(KNOWN))
graphs = st.tuples(st.lists(names, min_size=1, max_size=5, unique=True),
                   st.lists(st.tuples(names, names), max_size=8, unique=True))


def _reaches(connections, start):
    seen, todo = set(), [start]
    while todo:
        n = todo.pop()
        for s, d in connections:
            if s == n and d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


@settings(max_examples=300, deadline=None)
@given(graphs)
def test_find_cycle_agrees_with_reachability(graph):
    functions, connections = graph
    connections = [(s, d) for s, d in connections if s in functions and d in functions]
    cyclic = any(f in _reaches(connections, f) for f in functions)
    cycle = find_cycle(functions, connections)
    assert (cycle is not None) == cyclic
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        assert all((cycle[i], cycle[i + 1]) in connections for i in range(len(cycle) - 1))


@settings(max_examples=300, deadline=None)
@given(graphs)
def test_accepted_dags_are_acyclic_with_one_sink_reached_by_all(graph):
    functions, connections = graph
    dag = Dag.create("g", functions, connections)
    try:
        validate(dag, KNOWN)
    except InvalidDag:
        return
    sink = dag.sink()
    assert find_cycle(dag.functions, dag.connections) is None
    for f in dag.functions:
        assert f == sink or sink in _reaches(dag.connections, f)
