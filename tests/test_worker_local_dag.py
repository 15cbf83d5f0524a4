"""A DAG's downstream function on the same worker gets its upstream result without a message,
within the direct call's run of calls. One in-process worker (plain sockets, no node): a
client thread sends direct calls on its lease, the test's main thread runs the worker's loop
(its guard's signals come here), as `benchmarks/worker_loop_cpu.py` does."""
import signal
import time
import uuid

import pytest
import zmq

from executor.calling import Entry
from executor.config import WorkerConfig
from executor.dagstate import Ready
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


def _call(worker, first, arg):
    """Send one direct call and run the worker's loop until its result comes back."""
    context = zmq.Context()
    results, address = bind_pull(context, "127.0.0.1")
    push = context.socket(zmq.PUSH)
    push.connect(worker.direct_address)
    call = pb.Call(request_id=uuid.uuid4().hex, lease_id="L", response_address=address,
                   timeout=30.0)
    call.args[first].args.add(value=dumps(arg))
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
    # armed for the run of calls (again if the downstream function's time left is shorter)
    # and cleared once, at its end; before, the downstream function ran after the run had
    # ended, and armed and cleared it again
    assert armed[0] > 0 and armed[-1] == 0 and armed.count(0) == 1, armed
    assert not worker._local and worker.leased.calls_of("L") == []


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
