"""A lease's plan for running a whole DAG on its worker (executor/chain_plan.py), built from
the scheduler's own schedules."""
from hypothesis import given, settings, strategies as st

from executor.chain_plan import ChainPlan
from executor.failures import what_runs
from hydro_proto import cloudburst_pb2 as pb
from scheduler.dag import Dag
from scheduler.schedule import build_schedules

HERE = "tcp://127.0.0.1:5000"


def _templates(dag, where=None):
    """The schedules a grant carries for `dag`, each function at `where[f]` (default HERE)."""
    placement = {f: f"w-{f}" if where and f in where else "w" for f in dag.functions}
    addresses = {"w": HERE, **{f"w-{f}": a for f, a in (where or {}).items()}}
    return [s for _, s in build_schedules(pb.Call(), dag, placement, addresses,
                                          {f: "v1" for f in dag.functions},
                                          "tcp://127.0.0.1:1", 0.0)]


def test_a_chain_runs_in_order_with_its_own_schedules():
    dag = Dag.create("d", ["a", "b", "c"], [("a", "b"), ("b", "c")])
    templates = _templates(dag)
    plan = ChainPlan.of(templates, HERE, what_runs)
    assert [s.function for s in plan.steps] == ["a", "b", "c"]
    assert plan.functions == {"a", "b", "c"} and plan.sources == ("a",)
    assert plan.scheduler == "tcp://127.0.0.1:1"      # for the call's actor binding
    assert [s.upstreams for s in plan.steps] == [(), ("a",), ("b",)]
    assert [s.sink for s in plan.steps] == [False, False, True]
    assert plan.steps[1].what == "function 'b' of DAG 'd'"
    for step in plan.steps:              # copies without forwarded schedules
        assert len(step.schedule.forward) == 0 and step.schedule is not templates[0]
    assert len(templates[0].forward) == 2          # the grant's own are untouched


def test_a_diamond_runs_each_function_after_its_upstreams():
    dag = Dag.create("d", ["a", "b", "c", "s"],
                     [("a", "c"), ("b", "c"), ("a", "s"), ("c", "s")])
    plan = ChainPlan.of(_templates(dag), HERE, what_runs)
    order = [s.function for s in plan.steps]
    assert order.index("c") > max(order.index("a"), order.index("b"))
    assert order[-1] == "s" and set(plan.sources) == {"a", "b"}
    assert plan.steps[-1].upstreams == ("a", "c")      # the DAG's connection order


def test_what_must_run_the_general_way_has_no_plan():
    dag = Dag.create("d", ["a", "b"], [("a", "b")])
    assert ChainPlan.of(_templates(dag, {"b": "tcp://127.0.0.9:1"}), HERE, what_runs) is None
    assert ChainPlan.of(_templates(dag), "tcp://elsewhere:1", what_runs) is None
    causal = _templates(dag)
    causal[0].forward[0].consistency = pb.CAUSAL
    assert ChainPlan.of(causal, HERE, what_runs) is None
    missing = _templates(dag)
    missing[0].ClearField("forward")            # b's schedule is not carried
    assert ChainPlan.of(missing, HERE, what_runs) is None
    stored = _templates(dag)
    stored[0].forward[0].output_key = "k"
    assert ChainPlan.of(stored, HERE, what_runs) is None
    assert ChainPlan.of([], HERE, what_runs) is None
    elsewhere = _templates(dag)
    elsewhere[0].forward[0].scheduler_address = "tcp://127.0.0.2:1"   # one binding per call
    assert ChainPlan.of(elsewhere, HERE, what_runs) is None
    carried = _templates(dag)
    carried[0].args.args.add(value=b"x")      # a call's arguments are read from the call
    assert all(not s.schedule.HasField("args") for s in ChainPlan.of(carried, HERE,
                                                                       what_runs).steps)


def test_a_cycle_or_disagreeing_connections_have_no_plan():
    a = pb.Schedule(function="a", upstreams=["b"], targets=["b"])
    b = pb.Schedule(function="b", upstreams=["a"], targets=["a"], sink=True)
    a.forward.append(b)
    assert ChainPlan.of([a], "", what_runs) is None
    x = pb.Schedule(function="x", targets=["y"])
    x.forward.add(function="y", sink=True)       # y does not name x as its upstream
    assert ChainPlan.of([x], "", what_runs) is None


@st.composite
def dags(draw):
    n = draw(st.integers(1, 7))
    names = [f"f{i}" for i in range(n)]
    edges = [(names[i], names[j]) for j in range(1, n) for i in range(j)
             if draw(st.booleans())]
    # one sink (as a DAG has): every function without a target feeds the last one
    sinks = [f for f in names[:-1] if not any(s == f for s, _ in edges)]
    edges += [(f, names[-1]) for f in sinks if (f, names[-1]) not in edges]
    order = draw(st.permutations(names))       # registration order need not be topological
    return Dag.create("d", order, edges)


@settings(max_examples=200, deadline=None)
@given(dags())
def test_every_function_runs_once_after_all_its_upstreams(dag):
    plan = ChainPlan.of(_templates(dag), HERE, what_runs)
    order = [s.function for s in plan.steps]
    assert sorted(order) == sorted(dag.functions) and plan.functions == set(dag.functions)
    for i, step in enumerate(plan.steps):
        assert set(step.upstreams) <= set(order[:i])
        assert step.upstreams == tuple(dag.upstreams(step.function))
    assert [s.function for s in plan.steps if s.sink] == [dag.sink()]
