"""The caller's session in a call's schedules (scheduler/schedule.py, pure): it travels once
per message, so only the sources' schedules carry it when the downstream schedules are
forwarded with the data, and every schedule carries it when each is sent on its own; a causal
attempt's schedules are named by the attempt without copying the call."""
from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import Session
from scheduler.dag import Dag
from scheduler.schedule import FORWARD_MAX_FUNCTIONS, all_schedules, build_schedules


def _call(n_floors: int = 50) -> pb.Call:
    s = Session()
    for i in range(n_floors):
        s.note_causal(f"k{i}", {"w": i + 1})
    call = pb.Call(request_id="c1", response_address="tcp://127.0.0.1:1")
    call.session.CopyFrom(s.to_proto())
    return call


def _chain(n: int) -> Dag:
    fns = [f"f{i}" for i in range(n)]
    return Dag.create("chain", fns, [(fns[i], fns[i + 1]) for i in range(n - 1)])


def _build(call: pb.Call, dag: Dag, **kw):
    return build_schedules(call, dag, {f: "w" for f in dag.functions},
                           {"w": "tcp://127.0.0.1:2"}, {f: "v" for f in dag.functions},
                           "tcp://127.0.0.1:3", 10, **kw)


def test_only_the_sources_schedule_carries_the_session_when_downstream_is_forwarded():
    call = _call()
    dag = Dag.create("v", ["a", "b", "c"], [("a", "c"), ("b", "c")])
    out = _build(call, dag)
    assert sorted(s.function for _, s in out) == ["a", "b"]
    for _, s in out:
        assert s.session == call.session                 # each source: the whole session
        assert [f.function for f in s.forward] == ["c"]
        assert not any(f.HasField("session") for f in s.forward)
        assert s.call_id == "c1"


def test_every_schedule_carries_the_session_when_each_is_sent_on_its_own():
    call = _call(5)
    dag = _chain(FORWARD_MAX_FUNCTIONS + 1)
    out = _build(call, dag)
    assert len(out) == len(dag.functions)
    assert all(s.session == call.session and not s.forward for _, s in out)
    every = all_schedules(call, _chain(3), {f"f{i}": "w" for i in range(3)},
                          {"w": "tcp://127.0.0.1:2"}, {f"f{i}": "v" for i in range(3)},
                          "tcp://127.0.0.1:3", 10)
    assert all(s.session == call.session for _, s in every)


def test_an_attempts_schedules_name_the_attempt_and_leave_the_call_as_it_was():
    call = _call()
    before = call.SerializeToString()
    out = _build(call, _chain(3), call_id="c1#2")
    (_, source), = out
    assert source.call_id == "c1#2"
    assert [f.call_id for f in source.forward] == ["c1#2", "c1#2"]
    assert source.session == call.session
    assert call.SerializeToString() == before
