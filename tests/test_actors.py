"""Actors on a real LocalCluster (two schedulers, three workers): one instance on one worker,
reached by every handle (copies, other clients through the other scheduler, functions),
calls one at a time in order, errors per call, kill, and the worker's death as `ActorDied`.
The pure parts are tests/test_actor_units.py."""
import pickle
import time

import pytest

import cloudburst
from cloudburst import ActorDied, ExecutionError, InvalidFunction, ObjectNotFound
from cloudburst.status import format_status
from waiting import poll_until


class Counter:
    def __init__(self, start, step=1):
        self.n = start
        self.step = step

    def incr(self, by):
        self.n += by
        return self.n

    def value(self):
        return self.n

    def where(self, lib):
        return lib.getid()

    def divide(self, by):
        self.n = self.n / by        # ZeroDivisionError leaves n as it was
        return self.n


class Recorder:
    """Records the order calls ran in, and whether two ever overlapped."""

    def __init__(self):
        self.seen, self.active, self.overlapped = [], 0, False

    def step(self, caller, i):
        import time as t
        self.active += 1
        self.overlapped |= self.active > 1
        t.sleep(0.005)              # work during which a second call could overlap
        self.seen.append((caller, i))
        self.active -= 1

    def report(self):
        return self.seen, self.overlapped


class Blocker:
    def hold(self, lib, key):
        import time as t
        lib.put(key, lib.getid())
        t.sleep(60)

    def ping(self):
        return "pong"


def bump(lib, handle, by):
    """A function that calls an actor through a handle it was given."""
    return handle.incr(by).get(timeout=10), lib.getid()


def call_itself(lib, handle):
    return handle.incr(1).get(timeout=10)


class Nested:
    def poke(self, me):
        return me.ping().get(timeout=10)     # its own handle: would wait for itself

    def ping(self):
        return "pong"


class PingPong:
    """Two of these on two workers: `ask` calls the other's `answer`, which calls back."""

    def ask(self, other, me):
        return other.answer(me).get(timeout=30)

    def answer(self, back):
        return back.ping().get(timeout=30)

    def ping(self):
        return "pong"


class Phoenix:
    """A counter that says where it runs, and can hold its worker."""

    def __init__(self, start):
        self.n = start

    def incr(self, by):
        self.n += by
        return self.n

    def where(self, lib):
        return lib.getid()

    def hold(self, lib, key):
        import time as t
        lib.put(key, lib.getid())
        t.sleep(60)


def forge_actor_calls(lib):
    """What a function may not send a scheduler: an actor's creation, or a plain call."""
    from hydro_proto import cloudburst_pb2 as pb_
    worker = lib._worker
    create = pb_.Call(request_id="forged-create", response_address=worker.address,
                      function="Evil.__init__")
    create.actor.CopyFrom(pb_.ActorCall(actor_id="actor-forged", op=pb_.ACTOR_CREATE,
                                        class_name="Evil"))
    plain = pb_.Call(request_id="forged-plain", response_address=worker.address,
                     function="echo")
    for address in worker.config.scheduler_addresses:
        worker._push.send(address, "call", create)
        worker._push.send(address, "call", plain)
    return True


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=3, schedulers=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(timeout=20)
    c.register(bump, "bump")
    c.register(lambda lib, x: x, "echo")
    c.register(forge_actor_calls, "forge_actor_calls")
    return c


def test_an_actor_counter_gives_11_then_16(client):
    counter = client.actor(Counter, 10)
    first = counter.incr(1)
    assert isinstance(first, cloudburst.Future)
    assert first.get(timeout=10) == 11
    assert counter.incr(5).get(timeout=10) == 16
    assert counter.value().get(timeout=10) == 16
    counter.kill()        # leaves the workers free for the placement the next tests expect


def test_handle_copies_other_clients_and_functions_reach_the_same_instance(cluster, client):
    counter = client.actor(Counter, 0)
    home = counter.where().get(timeout=10)
    # a copy of the handle (as if sent elsewhere), used by a client of the other scheduler
    other = cluster.client(scheduler=1, timeout=20)
    copy = pickle.loads(pickle.dumps(counter)).bind(other)
    assert copy.incr(2).get(timeout=10) == 2
    # a function given the handle calls the same instance, from another worker
    value, ran_on = client.call("bump", counter, 3).get(timeout=15)
    assert value == 5 and ran_on != home
    # and through the other scheduler (which reads the actor's record from the KVS)
    value, _ = other.call("bump", counter, 4).get(timeout=15)
    assert value == 9
    assert counter.incr(1).get(timeout=10) == 10
    assert copy.where().get(timeout=10) == home
    # a handle is plain data: a function may return it, and the client reads it back
    assert client.call("echo", counter).get(timeout=10) == counter
    counter.kill()


def test_calls_run_one_at_a_time_in_the_order_each_caller_made_them(cluster, client):
    recorder = client.actor(Recorder)
    other = cluster.client(timeout=20)
    copy = pickle.loads(pickle.dumps(recorder)).bind(other)
    futures = []
    for i in range(15):                      # two callers, interleaved, nothing awaited
        futures.append(recorder.step("a", i))
        futures.append(copy.step("b", i))
    cloudburst.gather(futures, timeout=30)
    seen, overlapped = recorder.report().get(timeout=10)
    assert not overlapped
    assert len(seen) == 30
    for caller in "ab":
        assert [i for c, i in seen if c == caller] == list(range(15))
    recorder.kill()


def test_a_method_that_raises_fails_only_that_call(client):
    counter = client.actor(Counter, 8)
    with pytest.raises(ExecutionError, match="ZeroDivisionError"):
        counter.divide(0).get(timeout=10)
    with pytest.raises(ExecutionError, match="AttributeError"):
        client.call_actor(counter, "no_such_method", (), {}, {}).get(timeout=10)
    assert counter.divide(2).get(timeout=10) == 4
    assert counter.incr(1).get(timeout=10) == 5
    counter.kill()


def test_bad_constructor_arguments_are_refused_before_anything_is_sent(client):
    with pytest.raises(InvalidFunction, match="Counter"):
        client.actor(Counter)
    counter = client.actor(Counter, 1)
    with pytest.raises(AttributeError, match="incr"):
        counter.decr
    counter.kill()


def test_a_call_that_would_wait_for_itself_fails_at_once(client):
    nested = client.actor(Nested)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="wait for itself"):
        nested.poke(nested).get(timeout=15)
    assert time.monotonic() - start < 8
    assert nested.ping().get(timeout=10) == "pong"      # the actor lives on
    nested.kill()


def test_a_function_may_not_create_an_actor_or_make_a_plain_call(client):
    assert client.call("forge_actor_calls").get(timeout=10)

    def dropped():
        return sum(d.count for d in client.status().dropped
                   if d.role == "function" and d.kind == "call") >= 2
    poll_until(dropped, 10, "the scheduler dropping the forged calls")
    forged = cloudburst.ActorHandle("actor-forged", "Evil", ("x",)).bind(client)
    with pytest.raises(ActorDied, match="unknown"):
        forged.x().get(timeout=10)


def test_killing_an_actor(cluster, client):
    counter = client.actor(Counter, 10)
    before = counter.incr(1)                 # sent before the kill: it still runs
    counter.kill()
    assert before.get(timeout=10) == 11
    with pytest.raises(ActorDied, match=f"{counter.actor_id}.*killed"):
        counter.incr(1).get(timeout=10)
    # through the other scheduler, from its record
    other = cluster.client(scheduler=1, timeout=20)
    with pytest.raises(ActorDied, match=counter.actor_id):
        counter.bind(other).incr(1).get(timeout=10)
    client.kill(counter)                     # killing a dead actor succeeds


def _started(client, key):
    def started():
        try:
            return client.get(key)
        except ObjectNotFound:
            return None
    return poll_until(started, 15, f"the blocking call writing {key!r}")


def _actor_state(client, actor_id):
    return next((a for a in client.status().actors if a.actor_id == actor_id), None)


def test_status_lists_actors_with_their_worker_and_calls_queued(cluster, client):
    phoenix = client.actor(Phoenix, 0)
    home = phoenix.where().get(timeout=10)
    phoenix.hold("actor-status-started")
    queued = [phoenix.incr(1) for _ in range(3)]
    _started(client, "actor-status-started")
    # the held call and the 3 queued (the finished `where` may be counted until its worker
    # reports it done: workers batch those reports)
    state = poll_until(lambda: (lambda a: a if a and a.calls >= 4 else None)(
        _actor_state(client, phoenix.actor_id)), 10, "status showing the actor's 4 calls")
    assert (state.class_name, state.worker_id, state.dead) == ("Phoenix", home, "")
    assert state.node_id and home.startswith(state.node_id)
    text = format_status(client.status())
    assert "live actor(s)" in text and phoenix.actor_id in text and "Phoenix" in text
    cluster.kill_worker(home)         # ends the held call; the queued ones fail with it
    for f in queued:
        with pytest.raises(ActorDied):
            f.get(timeout=10)
    dead = poll_until(lambda: (lambda a: a if a and a.dead else None)(
        _actor_state(client, phoenix.actor_id)), 10, "status showing the actor ended")
    assert home in dead.dead and dead.node_id == ""
    cluster.wait_for_workers([home], timeout=15)


def test_max_restarts_recreates_the_actor_after_its_worker_dies(cluster, client):
    """Ray's max_restarts: the instance is built again (new state) on another worker, the
    calls in flight on the dead one fail with ActorDied, later calls reach the new instance,
    and once the restarts are spent the next death is final."""
    phoenix = client.create_actor(Phoenix, (10,), max_restarts=1)
    assert phoenix.incr(1).get(timeout=10) == 11
    first = phoenix.where().get(timeout=10)
    running = phoenix.hold("actor-phoenix-started")
    queued = phoenix.incr(100)
    _started(client, "actor-phoenix-started")
    cluster.kill_worker(first)
    with pytest.raises(ActorDied, match="re-created") as died:
        running.get(timeout=10)
    assert first in str(died.value)
    with pytest.raises(ActorDied):
        queued.get(timeout=10)                       # not run again: methods have effects
    state = poll_until(lambda: (lambda a: a if a and a.restarts == 1 and not a.dead else None)(
        _actor_state(client, phoenix.actor_id)), 10, "the actor re-created (status)")
    assert state.max_restarts == 1 and state.worker_id != first
    assert phoenix.incr(5).get(timeout=10) == 15     # the constructor ran again: 10 + 5
    second = phoenix.where().get(timeout=10)
    assert second == state.worker_id != first
    # the other scheduler saw the death too, and follows the new incarnation's record
    other = cluster.client(scheduler=1, timeout=20)
    assert phoenix.bind(other).incr(1).get(timeout=10) == 16
    cluster.wait_for_workers([first], timeout=15)
    cluster.kill_worker(second)                      # the one restart is spent
    poll_until(lambda: (lambda a: a and a.dead)(_actor_state(client, phoenix.actor_id)), 10,
               "the actor's final death (status)")
    with pytest.raises(ActorDied, match=phoenix.actor_id):
        phoenix.incr(1).get(timeout=10)
    cluster.wait_for_workers([second], timeout=15)


def test_a_cross_worker_actor_call_cycle_fails_at_once_with_a_typed_error(client):
    """A's method calls B (another worker), whose method calls A back: A's worker is busy
    waiting for B, so the call to A would wait until every deadline. It is refused at
    once, with ActorCallCycle naming the chain."""
    a, b = client.actor(PingPong), client.actor(PingPong)
    start = time.monotonic()
    with pytest.raises(ExecutionError, match="ActorCallCycle") as failed:
        a.ask(b, a).get(timeout=25)
    assert time.monotonic() - start < 8
    assert "wait for each other" in str(failed.value)
    assert a.ping().get(timeout=10) == b.ping().get(timeout=10) == "pong"   # both live on
    assert b.answer(a).get(timeout=10) == "pong"     # no cycle: B calling A is fine
    a.kill()
    b.kill()


def test_when_the_actor_worker_dies_its_calls_fail_with_actor_died(cluster, client):
    blocker = client.actor(Blocker)
    running = blocker.hold("actor-blocker-started")
    queued = blocker.ping()

    def started():
        try:
            return client.get("actor-blocker-started")
        except ObjectNotFound:
            return None
    worker = poll_until(started, 15, "the actor's blocking call starting")
    cluster.kill_worker(worker)
    start = time.monotonic()
    with pytest.raises(ActorDied, match=blocker.actor_id) as died:
        running.get(timeout=10)
    assert worker in str(died.value)
    assert time.monotonic() - start < 5
    with pytest.raises(ActorDied, match=blocker.actor_id):
        queued.get(timeout=10)
    # later calls, also once the worker is back under the same id: the instance is gone
    cluster.wait_for_workers([worker], timeout=15)
    with pytest.raises(ActorDied, match=blocker.actor_id):
        blocker.ping().get(timeout=10)


def test_when_the_actor_node_dies_the_actor_is_dead(cluster, client):
    """The whole node (its cache and its workers) killed: no exit report comes, the schedulers
    notice the workers' silence, and the actor's calls fail with ActorDied."""
    counter = client.actor(Counter, 1)
    assert counter.incr(1).get(timeout=10) == 2
    cluster.kill_node(0)
    start = time.monotonic()
    with pytest.raises(ActorDied, match=counter.actor_id):
        counter.incr(1).get(timeout=15)
    assert time.monotonic() - start < 10
