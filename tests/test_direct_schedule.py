"""A direct call's schedule at the worker (`executor/direct_calls.py`, `_schedule_of`): the
lease's schedule of the source, as the scheduler built it, filled with the call's own id,
answer address, time limit, deadline, session and each function's arguments, in the source
and in every downstream schedule it forwards; the lease's schedule itself is left as granted."""
from hydro_proto import cloudburst_pb2 as pb

from cloudburst.arguments import encode
from executor.direct_calls import _not_direct, _schedule_of


def _template() -> pb.Schedule:
    t = pb.Schedule(function="f", version="v1", dag="d", sink=False, targets=["g"],
                    scheduler_address="sched")
    t.locations["f"] = "w1"
    t.locations["g"] = "w1"
    t.forward.add(function="g", version="v2", dag="d", sink=True, upstreams=["f"])
    return t


def _call(**fields) -> pb.Call:
    call = pb.Call(request_id="r1", lease_id="L", response_address="client", time_limit=2.5,
                   timeout=9.0, **fields)
    call.args["f"].CopyFrom(encode([1], {"k": "v"}))
    call.args["g"].CopyFrom(encode(["x"], {}))
    return call


def test_every_schedule_of_a_direct_call_carries_the_calls_own_fields():
    template = _template()
    granted = template.SerializeToString()
    call = _call()
    call.session.overflow_timestamp = 7
    s = _schedule_of(call, template)
    assert template.SerializeToString() == granted          # the lease's own is untouched
    for one in [s, s.forward[0]]:
        assert (one.call_id, one.response_address, one.time_limit) == ("r1", "client", 2.5)
        assert one.args == call.args[one.function]
    assert (s.function, s.version, list(s.targets), dict(s.locations)) == \
        ("f", "v1", ["g"], {"f": "w1", "g": "w1"})
    assert (s.forward[0].function, s.forward[0].version, list(s.forward[0].upstreams)) == \
        ("g", "v2", ["f"])
    assert s.timeout == 9.0 and s.session.overflow_timestamp == 7


def test_a_one_function_schedule_without_arguments_or_session():
    template = pb.Schedule(function="noop", version="v1", sink=True, dag="noop")
    call = pb.Call(request_id="r2", response_address="client", timeout=3.0)
    s = _schedule_of(call, template)
    assert (s.call_id, s.response_address, s.timeout, len(s.forward)) == ("r2", "client", 3.0, 0)
    assert not s.HasField("session") and not s.HasField("args")


def test_what_a_lease_may_not_run_is_named():
    functions = frozenset({"f", "g"})
    assert _not_direct(_call(), functions) == ""
    assert "deadline" in _not_direct(pb.Call(request_id="r"), functions)
    foreign = _call()
    foreign.args["h"].CopyFrom(encode([1], {}))
    assert "['h']" in _not_direct(foreign, functions)
    future = _call()
    future.args["f"].args.add().call.call_id = "other"
    assert "Future" in _not_direct(future, functions)
    keyword_future = _call()
    keyword_future.args["g"].kwargs["k"].call.call_id = "other"
    assert "Future" in _not_direct(keyword_future, functions)
    assert "causal" in _not_direct(_call(consistency=pb.CAUSAL), functions)
