"""Retries, at least once: a call whose worker dies runs again on another worker, an
exception the call names is retried, a spent budget is a typed error naming the attempts, a
causal call runs again only when it did not commit. Real processes (two workers), except the
last test, which drives the scheduler's causal side with a fake socket."""
import uuid

import pytest

import cloudburst
from waiting import poll_until

def die_once(lib, marker):
    import os
    import signal
    if lib.get(marker, default=None) is None:
        lib.put(marker, 1)
        os.kill(os.getpid(), signal.SIGKILL)      # the worker dies mid-call, once
    return "survived"


def always_die(lib):
    import os
    import signal
    os.kill(os.getpid(), signal.SIGKILL)


class Flaky(Exception):
    pass


def raise_once(lib, marker):
    if lib.get(marker, default=None) is None:
        lib.put(marker, 1)
        raise Flaky("first time")
    return "second time lucky"


def always_raise(lib):
    raise Flaky("never works")


@pytest.fixture(scope="module")
def client():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as cluster:
        c = cluster.client(timeout=30)
        c.register(die_once, "die-once")
        c.register(always_die, "always-die")
        c.register(raise_once, "raise-once")
        c.register(always_raise, "always-raise")
        c.register(lambda lib, x: f"got {x}", "tail")
        c.register_dag("die-then-tail", ["die-once", "tail"], [("die-once", "tail")])
        c.register(die_once, "die-once-no-retry", max_retries=0)
        yield c


@pytest.fixture(autouse=True)
def both_workers_live(client):
    """Tests here kill workers; their node restarts them. Each test starts with both live."""
    poll_until(lambda: len(client.executors()) == 2, 30, "both workers being live")


def marker():
    return f"marker-{uuid.uuid4().hex[:8]}"


def test_a_call_whose_worker_dies_runs_again_and_returns(client):
    assert client.call("die-once", marker()).get(timeout=30) == "survived"


def test_a_dag_whose_worker_dies_runs_again_as_a_whole(client):
    got = client.call_dag("die-then-tail", {"die-once": [marker()]}).get(timeout=30)
    assert got == "got survived"


def test_a_spent_budget_is_a_typed_error_naming_every_attempt(client):
    with pytest.raises(cloudburst.WorkerDied) as info:
        client.call("always-die", max_retries=1).get(timeout=30)
    e = info.value
    assert e.attempts == 2 and isinstance(e, cloudburst.ExecutionError)
    assert "killed by signal 9" in str(e) and "max_retries=1" in str(e)
    assert "attempt 2 of the call; earlier: attempt 1:" in str(e)


def test_a_function_registered_without_retries_fails_at_once(client):
    with pytest.raises(cloudburst.WorkerDied, match=r"max_retries=0") as info:
        client.call("die-once-no-retry", marker()).get(timeout=30)
    assert info.value.attempts == 1


def test_retry_exceptions_retries_only_the_exceptions_named(client):
    with pytest.raises(cloudburst.ExecutionError, match="Flaky: first time") as info:
        client.call("raise-once", marker()).get(timeout=30)      # not asked for: no retry
    assert info.value.attempts == 1
    assert client.call("raise-once", marker(), retry_exceptions=True).get(timeout=30) == \
        "second time lucky"
    assert client.call("raise-once", marker(), retry_exceptions=[Flaky]).get(timeout=30) == \
        "second time lucky"
    with pytest.raises(cloudburst.ExecutionError, match="Flaky") as info:
        client.call("raise-once", marker(), retry_exceptions=[KeyError]).get(timeout=30)
    assert info.value.attempts == 1


def test_exception_retries_spend_the_same_budget(client):
    with pytest.raises(cloudburst.ExecutionError, match="never works") as info:
        client.call("always-raise", max_retries=2, retry_exceptions=True).get(timeout=30)
    assert info.value.attempts == 3 and "max_retries=2" in str(info.value)
    assert "Remote traceback" in str(info.value)


def test_an_attempt_that_raised_frees_its_worker_at_once(client):
    # each attempt ended by an exception the call retries is over: its worker is free for
    # the next call at once, not counted busy until the attempt's deadline (30 s here)
    with pytest.raises(cloudburst.ExecutionError, match="never works"):
        client.call("always-raise", max_retries=2, retry_exceptions=True).get(timeout=30)
    poll_until(lambda: sum(w.outstanding for w in client.status().workers) == 0, 5,
               "every worker's count of unfinished calls going back to 0")


def test_bad_retry_options_are_refused_before_anything_is_sent(client):
    with pytest.raises(ValueError, match="max_retries"):
        client.call("tail", 1, max_retries=-1)
    with pytest.raises(TypeError, match="retry_exceptions"):
        client.call("tail", 1, retry_exceptions=["KeyError"])


def test_a_causal_call_that_did_not_commit_runs_again_and_writes_once(client, tmp_path):
    def append_then_die_once(lib, key, marker):
        import os
        import signal
        lib.put(key, lib.get(key) + ["x"])         # buffered: committed after the function
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)   # dies before the commit
        return "committed"

    client.register(append_then_die_once, "append-then-die-once")
    key = f"causal-{uuid.uuid4().hex[:8]}"
    client.put(key, [], consistency="causal")
    future = client.call("append-then-die-once", key, str(tmp_path / "died"),
                         consistency="causal", protocol="ct")
    assert future.get(timeout=30) == "committed"
    assert (tmp_path / "died").exists()            # the first attempt did die
    # the lost attempt never committed: one append, not two
    assert client.get(key, consistency="causal", concurrent=True) == [["x"]]


def test_a_causal_call_granted_its_commit_is_not_run_again():
    """The sink's cache was granted the commit, then the worker died: the call fails,
    saying the commit may have been applied, and no new attempt starts."""
    from hydro_proto import cloudburst_pb2 as pb
    from scheduler.causal_calls import CausalCalls
    from scheduler.dag import Dag
    from scheduler.lifecycle import CallLifecycle
    from scheduler.membership import ExecutorTable
    from scheduler.stats import CallStats

    class Push:
        def __init__(self):
            self.sent = []

        def send(self, address, kind, message):
            self.sent.append((address, kind, message))

    push, table, started = Push(), ExecutorTable(5.0), []
    table.heartbeat("w1", "n1", "tcp://w1", 0.0, 0.0, "tcp://cache1", "tcp://ctl1", 0)
    calls = CausalCalls(push, table, "tcp://sched", 3)
    life = CallLifecycle(push.send, lambda *a: started.append(a), lambda c: None,
                         lambda: True, CallStats(), calls, max_retries=3)
    call = pb.Call(request_id="c1", function="f", consistency=pb.CAUSAL, protocol=pb.CT,
                   response_address="tcp://client", timeout=10)
    life.begin(call, [pb.FunctionRecord(name="f")], ("payload",), 0.0, 10.0)
    dag = Dag.create("f", ["f"])
    calls.begin(call, dag, {"f": "v"}, {"f": "w1"}, {"f": "tcp://cache1"}, 10.0, 0.0)
    rec = calls.records["c1"]
    attempt = rec.coordinator.current()
    calls.grant(pb.CacheRequest(op=pb.CAUSAL_GRANT, attempt_id=attempt,
                                response_address="tcp://cache1"), 0.1)
    assert rec.coordinator.granted == attempt
    assert life.causal_died(rec, "f: executor worker w1 was killed by signal 9", 0.2)
    assert started == []                       # nothing runs again
    (result,) = [m for a, k, m in push.sent if k == "result"]
    assert result.request_id == "c1" and result.status == pb.WORKER_DIED
    assert "may have been applied" in result.message
    # without the grant, the same death runs the call again, its attempts released (fenced)
    push.sent.clear()
    call2 = pb.Call(request_id="c2", function="f", consistency=pb.CAUSAL, protocol=pb.CT,
                    response_address="tcp://client", timeout=10)
    life.begin(call2, [pb.FunctionRecord(name="f")], ("payload",), 0.0, 10.0)
    calls.begin(call2, dag, {"f": "v"}, {"f": "w1"}, {"f": "tcp://cache1"}, 10.0, 0.0)
    rec2 = calls.records["c2"]
    first = rec2.coordinator.current()
    assert life.causal_died(rec2, "f: executor worker w1 was killed by signal 9", 0.2)
    (again,) = started
    assert again[0].request_id == "c2#r1" and "c2" not in calls.records
    released = [m.attempt_id for a, k, m in push.sent
                if k == "cache" and m.op == pb.CAUSAL_RELEASE]
    assert first in released
    assert not [m for a, k, m in push.sent if k == "result"]


@pytest.mark.slow     # a second cluster and a heartbeat timeout: ~15 s
def test_a_call_whose_node_dies_runs_again_on_another_node():
    """The whole node killed (no exit report: the schedulers notice the silence): the call
    runs again on the other node and returns."""
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=1) as cluster:
        c = cluster.client(timeout=30)

        def hang_once(lib, marker):
            if lib.get(marker, default=None) is None:
                lib.put(marker, lib.getid())          # where the first attempt runs
                import time
                time.sleep(60)
            return "ran again"

        c.register(hang_once, "hang-once")
        key = marker()
        future = c.call("hang-once", key)

        def first_worker():
            try:
                return c.get(key)
            except cloudburst.ObjectNotFound:
                return None
        worker = poll_until(first_worker, 15, "the first attempt starting")
        node = next(w["node_id"] for w in cluster.workers if w["worker_id"] == worker)
        cluster.kill_node(int(node.removeprefix("node")))
        assert future.get(timeout=30) == "ran again"
