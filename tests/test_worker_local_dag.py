"""A DAG's downstream function on the same worker gets its upstream result without a message,
within the direct call's run of calls. One in-process worker (plain sockets, no node): a
client thread sends direct calls on its lease, the test's main thread runs the worker's loop
(its guard's signals come here), as `benchmarks/worker_loop_cpu.py` does."""
import signal
import sys
import time
import uuid

import pytest
import zmq

from executor.calling import Entry
from executor.config import WorkerConfig
from executor.dagstate import Ready
from executor.output import CallOutput
from executor.run_ends import _forwarded
from executor.worker import Worker
from faas.values import dumps, loads
from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import encode, parse
from runtime.sockets import bind_pull


@pytest.fixture
def worker():
    saved = {s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGUSR1, signal.SIGPROF)}
    w = Worker(WorkerConfig(worker_id="w0", node_id="n0", kvs_address="tcp://127.0.0.1:1",
                            cache_address="tcp://127.0.0.1:1"))
    w.guard.install()
    w._tell_node = lambda status: None          # no node to tell of runs
    w._pull.setsockopt(zmq.RCVTIMEO, 100)      # as `serve` sets it: the loop below ends
    try:
        yield w
    finally:
        w.guard.close_run()     # as `serve` ends: a kill timer left armed never outlives it
        w.close()
        for s, handler in saved.items():
            signal.signal(s, handler)


def _lease(worker, chain):
    """A lease on the DAG `chain[0] -> chain[1] -> ...`, every function on this worker."""
    schedules = []
    for i, fn in enumerate(chain):
        s = pb.Schedule(function=fn, version="v1", dag="d", sink=(i == len(chain) - 1),
                        upstreams=chain[i - 1:i], targets=chain[i + 1:i + 2],
                        scheduler_address="tcp://127.0.0.1:1")
        for other in chain:
            s.locations[other] = worker.address
        schedules.append(s)
    schedules[0].forward.extend(schedules[1:])
    worker._on_worker_lease(pb.WorkerLease(lease_id="L", client="", slots=4, ttl=60,
                                           templates=schedules[:1]))


def _call(worker, first, arg, call=None):
    """Send one direct call (`call`, else one with `arg` for `first`) and run the worker's
    loop until its result comes back."""
    context = zmq.Context()
    results, address = bind_pull(context, "127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.connect(worker.direct_address)
    if call is None:
        call = pb.Call(request_id=uuid.uuid4().hex)
        call.args[first].args.add(value=dumps(arg))
    call.lease_id, call.response_address, call.timeout = "L", address, 30.0
    push.send(encode("direct", call))
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            worker._run_local()              # as `serve` does
            raw = worker._next_frame()
            if raw is not None:
                worker._dispatch(worker._admitted(raw))
            if results.poll(0):
                kind, payload = parse(results.recv())
                assert kind == "result"
                return pb.CallResult.FromString(payload)
        raise AssertionError("no result within 20 s")
    finally:
        push.close(0)
        results.close(0)
        context.term()


def test_a_two_function_dag_runs_in_one_run_of_calls(worker):
    worker._functions["inc"] = ("v1", Entry(lambda x: x + 1, "inc"))
    worker._functions["sq"] = ("v1", Entry(lambda x: x * x, "sq"))
    _lease(worker, ["inc", "sq"])
    armed = []
    arm = worker.guard._kill_timer.arm
    worker.guard._kill_timer.arm = lambda seconds: (armed.append(seconds), arm(seconds))
    result = _call(worker, "inc", 3)
    assert (result.status, loads(result.value)) == (pb.OK, 16)
    assert worker._next_frame() is None       # nothing more comes: the run of calls ends
    # armed for the run of calls (again if the downstream function's time left is shorter)
    # and cleared once, at its end; before, the downstream function ran after the run had
    # ended, and armed and cleared it again
    assert armed[0] > 0 and armed[-1] == 0 and armed.count(0) == 1, armed
    assert not worker._local and worker.leased.calls_of("L") == []


def _arms(worker):
    """The kill timer's armings and clearings (0), as they happen."""
    armed = []
    arm = worker.guard._kill_timer.arm
    worker.guard._kill_timer.arm = lambda seconds: (armed.append(seconds), arm(seconds))
    return armed


def _serial(worker, first, args):
    """Each call sent alone once the last one's result is back, the worker woken once per
    call (its receive timeout made long, so that no wait of its own finds nothing)."""
    context = zmq.Context()
    results, address = bind_pull(context, "127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.connect(worker.direct_address)
    worker._pull.setsockopt(zmq.RCVTIMEO, 20000)
    out = []
    try:
        for arg in args:
            call = pb.Call(request_id=uuid.uuid4().hex, lease_id="L",
                           response_address=address, timeout=30.0)
            call.args[first].args.add(value=dumps(arg))
            push.send(encode("direct", call))
            assert worker._next_frame() is None           # it ran the call
            assert results.poll(20000), "no result within 20 s"
            out.append(pb.CallResult.FromString(parse(results.recv())[1]))
    finally:
        worker._pull.setsockopt(zmq.RCVTIMEO, 100)
        push.close(0)
        results.close(0)
        context.term()
    return out


def test_serial_calls_share_one_arming_until_the_worker_finds_nothing_to_do(worker):
    worker._functions["inc"] = ("v1", Entry(lambda x: x + 1, "inc"))
    worker._functions["sq"] = ("v1", Entry(lambda x: x * x, "sq"))
    _lease(worker, ["inc", "sq"])
    armed = _arms(worker)
    for i, result in enumerate(_serial(worker, "inc", range(5))):
        assert (result.status, loads(result.value)) == (pb.OK, (i + 1) ** 2)
    # the run of calls stayed open from one wake-up to the next: armed once, not cleared
    assert len(armed) == 1 and armed[0] > 0 and worker.guard.in_run, armed
    # a wait that finds nothing ends it: the timer is cleared (the worker may idle long)
    assert worker._next_frame() is None
    assert armed[-1] == 0 and not worker.guard.in_run, armed
    assert worker.guard._plan.armed_until is None and worker.guard._alarm.armed_until is None


def test_a_scheduler_message_ends_a_run_of_direct_calls(worker):
    worker._functions["inc"] = ("v1", Entry(lambda x: x + 1, "inc"))
    worker._functions["sq"] = ("v1", Entry(lambda x: x * x, "sq"))
    _lease(worker, ["inc", "sq"])
    armed = _arms(worker)
    assert _serial(worker, "inc", [1])[0].status == pb.OK and worker.guard.in_run
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.connect(worker.address)
    try:     # a lease renewal from its scheduler: the scheduler's calls run alone, as always
        push.send(encode("worker_lease", pb.WorkerLease(lease_id="L", client="", slots=4,
                                                        ttl=60)))
        deadline = time.monotonic() + 20
        raw = None
        while raw is None and time.monotonic() < deadline:
            raw = worker._next_frame()
        assert raw is not None and not worker.guard.in_run and armed[-1] == 0, armed
    finally:
        push.close(0)
        context.term()


def test_a_call_within_a_run_kept_open_is_still_stopped_at_its_time_limit(worker):
    worker._functions["inc"] = ("v1", Entry(lambda x: x + 1, "inc"))
    worker._functions["nap"] = ("v1", Entry(lambda x: time.sleep(30) if x > 5 else x, "nap"))
    _lease(worker, ["inc", "nap"])
    assert _serial(worker, "inc", [1])[0].status == pb.OK   # leaves the run open, armed
    assert worker.guard.in_run and worker.guard._plan.armed_until is not None
    context = zmq.Context()
    results, address = bind_pull(context, "127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.connect(worker.direct_address)
    call = pb.Call(request_id=uuid.uuid4().hex, lease_id="L", response_address=address,
                   timeout=30.0, time_limit=0.3)
    call.args["inc"].args.add(value=dumps(10))
    push.send(encode("direct", call))
    started = time.monotonic()
    try:
        while time.monotonic() < started + 20 and not results.poll(0):
            worker._run_local()
            raw = worker._next_frame()
            if raw is not None:
                worker._dispatch(worker._admitted(raw))
        assert results.poll(0), "no result within 20 s"
        result = pb.CallResult.FromString(parse(results.recv())[1])
        assert result.status == pb.TIMEOUT and "'nap'" in result.message, result
        assert "time limit of 0.3 s" in result.message, result
        assert time.monotonic() - started < 10
    finally:
        push.close(0)
        results.close(0)
        context.term()


def test_a_three_function_chain_passes_each_result_on_and_keeps_upstream_output(worker):
    def noisy(x):
        print("first saw", x)
        return x + 1
    worker._functions["a"] = ("v1", Entry(noisy, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: x * 10, "b"))
    worker._functions["c"] = ("v1", Entry(lambda x: x - 1, "c"))
    _lease(worker, ["a", "b", "c"])
    result = _call(worker, "a", 4)
    assert (result.status, loads(result.value)) == (pb.OK, 49)
    assert worker.leased.calls_of("L") == []


def test_a_chain_call_leaves_nothing_of_its_own_to_the_next(worker):
    """The lease's plan fills its schedules in place per call: the next call gets no
    argument or session of the previous one."""
    seen = []
    worker._functions["a"] = ("v1", Entry(lambda x: x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(
        lambda *xs: seen.append(worker.cache.session is not None) or sum(xs), "b"))
    _lease(worker, ["a", "b"])
    first = pb.Call(request_id=uuid.uuid4().hex)
    first.args["a"].args.add(value=dumps(1))
    first.args["b"].args.add(value=dumps(100))     # b's own argument, then a's result
    first.session.plain_keys.append("k")
    first.session.plain_timestamps.append(7)
    assert loads(_call(worker, "a", None, first).value) == 102
    second = pb.Call(request_id=uuid.uuid4().hex)
    second.args["a"].args.add(value=dumps(1))
    assert loads(_call(worker, "a", None, second).value) == 2
    assert seen == [True, False]


def test_a_chain_stops_at_a_failing_function_and_its_call_id_stays_used(worker):
    ran = []
    worker._functions["a"] = ("v1", Entry(lambda x: 1 // x, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: ran.append(x) or x, "b"))
    _lease(worker, ["a", "b"])
    call = pb.Call(request_id=uuid.uuid4().hex)
    call.args["a"].args.add(value=dumps(0))
    result = _call(worker, "a", None, call)
    assert result.status == pb.EXECUTION_ERROR and "ZeroDivisionError" in result.message
    assert "function 'a' of DAG 'd'" in result.message
    assert ran == [] and worker.leased.calls_of("L") == []
    again = pb.Call(request_id=call.request_id)
    again.args["a"].args.add(value=dumps(1))
    refused = _call(worker, "a", None, again)
    assert refused.status == pb.INVALID_ARGUMENTS and "already ran here" in refused.message
    assert ran == []


def _forwarding(session: bool) -> pb.Schedule:
    s = pb.Schedule(call_id="c1", function="a", targets=["b"])
    s.forward.add(function="b", upstreams=["a"], targets=["c"])
    s.forward.add(function="c", upstreams=["b"], sink=True)
    if session:
        s.session.plain_keys.append("k")
        s.session.plain_timestamps.append(7)
    return s


@pytest.mark.parametrize("session", [False, True])
def test_a_target_with_targets_gets_the_forwarded_schedules_and_a_sink_none(session):
    s = _forwarding(session)
    ready = Ready(s.call_id, "a", s, [], time.monotonic() + 10.0)
    middle = _forwarded(s, "b", ready, pb.Schedule())
    assert middle.function == "b" and [f.function for f in middle.forward] == ["b", "c"]
    assert 0 < middle.timeout <= 10.0 and middle.HasField("session") == session
    sink = _forwarded(middle, "c", ready, pb.Schedule())
    assert sink.function == "c" and sink.sink and len(sink.forward) == 0
    assert sink.HasField("session") == session
    assert _forwarded(s, "elsewhere", ready, pb.Schedule()) is None


class _Runs:
    """What the node is told of runs (`executor/liveness.py` RunReports' interface)."""

    def __init__(self):
        self.told = []
        self.ended_run = 0

    def start(self, call_id, deadline):
        self.told.append(("start", call_id, deadline))

    def end(self, call_id, deadline, now, follows):
        self.told.append(("end", call_id, deadline))


def test_a_chain_tells_the_node_each_functions_start_with_its_limit_and_the_end_once(worker):
    worker._functions["a"] = ("v1", Entry(lambda x: x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: x * 2, "b"))
    worker._time_limits.update({"a": 5.0, "b": 7.0})
    worker.run_reports = runs = _Runs()
    _lease(worker, ["a", "b"])
    before = time.monotonic()
    result = _call(worker, "a", 1)
    after = time.monotonic()
    assert (result.status, loads(result.value)) == (pb.OK, 4)
    assert [kind for kind, *_ in runs.told] == ["start", "start", "end"], runs.told
    assert {call_id for _, call_id, _ in runs.told} == {result.request_id}
    (_, _, a_until), (_, _, b_until), (_, _, end_until) = runs.told
    # each function's own limit (the call's deadline is 30 s: `_call`)
    assert before + 5.0 <= a_until <= after + 5.0 and before + 7.0 <= b_until <= after + 7.0
    assert end_until == b_until


def _captured(worker, monkeypatch):
    """What functions print goes to the worker's capture, as `executor.worker.main` sets."""
    monkeypatch.setattr(sys, "stdout", CallOutput(sys.__stdout__, worker.output))


def test_a_chain_keeps_each_functions_output_as_its_own_section(worker, monkeypatch):
    _captured(worker, monkeypatch)
    worker._functions["a"] = ("v1", Entry(lambda x: print("a saw", x) or x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: print("b saw", x) or x * 2, "b"))
    _lease(worker, ["a", "b"])
    result = _call(worker, "a", 1)
    assert (result.status, loads(result.value)) == (pb.OK, 4)
    assert result.logs == "[a]\na saw 1\n[b]\nb saw 2\n", result.logs


def test_a_chain_function_that_fails_is_named_with_the_output_so_far(worker, monkeypatch):
    _captured(worker, monkeypatch)
    worker._functions["a"] = ("v1", Entry(lambda x: print("a saw", x) or x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: print("b got", x) or {}[x], "b"))
    _lease(worker, ["a", "b"])
    result = _call(worker, "a", 1)
    assert result.status == pb.EXECUTION_ERROR, result
    assert "function 'b' of DAG 'd' raised KeyError" in result.message, result.message
    assert "Traceback" in result.traceback
    assert result.logs == "[a]\na saw 1\n[b]\nb got 2\n", result.logs
    assert worker.leased.calls_of("L") == []


def test_a_chain_function_gets_its_keyword_arguments_from_its_own_call(worker):
    worker._functions["a"] = ("v1", Entry(lambda x: x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x, scale=1: x * scale, "b"))
    _lease(worker, ["a", "b"])
    first = pb.Call(request_id=uuid.uuid4().hex)
    first.args["a"].args.add(value=dumps(1))
    first.args["b"].kwargs["scale"].value = dumps(10)
    assert loads(_call(worker, "a", None, first).value) == 20
    assert loads(_call(worker, "a", 1).value) == 2          # none of the first call's


def test_a_chain_that_fails_tells_the_node_the_end_of_the_function_that_failed(worker):
    worker._functions["a"] = ("v1", Entry(lambda x: x + 1, "a"))
    worker._functions["b"] = ("v1", Entry(lambda x: 1 // 0, "b"))
    worker._time_limits.update({"a": 5.0, "b": 7.0})
    worker.run_reports = runs = _Runs()
    _lease(worker, ["a", "b"])
    assert _call(worker, "a", 1).status == pb.EXECUTION_ERROR
    assert [kind for kind, *_ in runs.told] == ["start", "start", "end"], runs.told
    assert runs.told[2][2] == runs.told[1][2]         # b's time, not a's
