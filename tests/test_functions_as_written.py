"""Functions as users of other platforms write them, on a real LocalCluster: without `lib`
(and `cloudburst.lib()` inside them), keyword arguments, a `Future` as an argument (resolved
on the executor), `async def`, and what is refused at `register`.

Every wait has a deadline; nothing sleeps in place of synchronisation.
"""
import time
import uuid

import pytest

import cloudburst
from cloudburst import DependencyFailed, InvalidArguments, InvalidFunction, Reference
from waiting import poll_until


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=1) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    return cluster.client(timeout=20)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_function_without_lib_gets_only_its_arguments(client):
    def add(x, y):
        return x + y

    name = unique("add")
    client.register(add, name)
    assert client.call(name, 2, 3).get(timeout=10) == 5
    triple = client.function(lambda x: 3 * x, name=unique("triple"))
    assert triple(7).get(timeout=10) == 21


def test_cloudburst_lib_inside_a_function_without_lib(client):
    key = unique("k")
    client.put(key, 41)

    def read_and_write(key):
        lib = cloudburst.lib()
        lib.put(key + "-out", lib.get(key) + 1)
        return lib.getid()

    name = unique("rw")
    client.register(read_and_write, name)
    worker = client.call(name, key).get(timeout=10)
    assert worker in client.executors()
    assert client.get(key + "-out") == 42
    with pytest.raises(cloudburst.NoLibrary, match=r"cloudburst.lib\(\)"):
        cloudburst.lib()


def test_a_function_taking_lib_still_gets_it(client):
    key = unique("k")
    client.put(key, "v")
    name = unique("withlib")
    client.register(lambda lib, k, suffix="": lib.get(k) + suffix, name)
    assert client.call(name, key).get(timeout=10) == "v"
    assert client.call(name, key, suffix="!").get(timeout=10) == "v!"

    class Counter:
        def __init__(self):
            self.n = 0

        def run(self, lib, step):
            self.n += step
            return lib.getid(), self.n

    class Doubler:            # no `run`: called through __call__, without lib
        def __call__(self, x):
            return 2 * x

    counter = unique("counter")
    client.register(Counter, counter)
    worker, n = client.call(counter, 5).get(timeout=10)
    assert worker in client.executors() and n >= 5
    doubler = unique("doubler")
    client.register(Doubler, doubler)
    assert client.call(doubler, 21).get(timeout=10) == 42


def test_keyword_arguments(client):
    def scale(x, factor=1, *, offset=0, timeout=None):
        return x * factor + offset, timeout

    name = unique("scale")
    f = client.function(scale, name=name)
    assert tuple(f(2, factor=10, offset=1).get(timeout=10)) == (21, None)
    # a keyword named like a call option goes through `kwargs=` or `.options()`
    assert tuple(client.call(name, 2, kwargs={"timeout": 5}, timeout=10).get(timeout=10)) == \
        (2, 5)
    assert tuple(f.options(timeout=10)(3, offset=1, timeout=7).get(timeout=10)) == (4, 7)
    # a Reference given by keyword is resolved too
    key = unique("k")
    client.put(key, 100)
    assert tuple(f(1, offset=Reference(key)).get(timeout=10)) == (101, None)


def test_wrong_arguments_are_a_typed_error_naming_the_function(client):
    name = unique("two")
    client.register(lambda x, y: x + y, name)
    with pytest.raises(InvalidArguments, match=rf"function '{name}'.*missing"):
        client.call(name, 1).get(timeout=10)
    with pytest.raises(InvalidArguments, match=rf"function '{name}'.*unexpected keyword"):
        client.call(name, 1, 2, z=3).get(timeout=10)
    with pytest.raises(TypeError):       # InvalidArguments is also a TypeError
        client.call(name, 1, 2, 3).get(timeout=10)
    assert client.call(name, 1, 2).get(timeout=10) == 3      # the worker still serves


@pytest.fixture
def slow_and_add(client):
    """Two functions under fresh names: `slow(x, seconds)` returns x after `seconds` of
    work, `add(a, b=0)` returns a + b."""
    slow, add = unique("slow"), unique("add")

    def slow_value(x, seconds):
        time.sleep(seconds)        # the function's own work, not synchronisation
        return x

    client.register(slow_value, slow)
    client.register(lambda a, b=0: a + b, add)
    return slow, add


def test_a_dropped_future_passed_as_an_argument_still_gives_its_value(client, slow_and_add):
    """A Future the caller dropped right after passing it (a temporary) is kept by the call
    that takes it: dropping a Future cancels its call, which must not starve the consumer."""
    slow, add = slow_and_add
    total = client.call(add, client.call(slow, 40, 1.0), b=client.call(slow, 2, 1.0))
    assert total.get(timeout=15) == 42
    dag = unique("dag")
    client.register_dag(dag, [add], [])
    got = client.call_dag(dag, {add: [client.call(slow, 1, 1.0)]}, kwargs={add: {"b": 1}})
    assert got.get(timeout=15) == 2


def test_a_future_as_an_argument_is_resolved_on_the_executor(client, slow_and_add):
    slow, add = slow_and_add
    first = client.call(slow, 20, 0.5)
    second = client.call(add, first, client.call(slow, 22, 0.1))
    assert not first.done()            # passed on while still running
    assert second.get(timeout=15) == 42
    assert client.call(add, a=first, b=second).get(timeout=10) == 62     # by keyword
    assert first.get(timeout=5) == 20  # the producing call's own result still arrives
    # a Future already done, passed later, and to a DAG
    third = client.call(add, first, b=1)
    assert third.get(timeout=10) == 21
    ident, dag = unique("ident"), unique("dag")
    client.register(lambda tag, v: (tag, v), ident)
    client.register_dag(dag, [add, ident], [(add, ident)])
    # add(first, b=second) -> ident(own argument, its upstream's result)
    got = client.call_dag(dag, {add: [first], ident: [second]}, kwargs={add: {"b": second}})
    assert tuple(got.get(timeout=10)) == (42, 62)


def test_a_failed_future_as_an_argument_is_a_typed_error(client):
    boom, add = unique("boom"), unique("add")

    def explode(x):
        raise ValueError(f"no {x}")

    client.register(explode, boom)
    client.register(lambda a: a + 1, add)
    failed = client.call(boom, 1)
    downstream = client.call(add, failed)
    with pytest.raises(DependencyFailed, match=rf"argument 0.*function '{boom}'.*ExecutionError"):
        downstream.get(timeout=10)
    with pytest.raises(cloudburst.ExecutionError, match="no 1"):
        failed.get(timeout=5)
    # a Future of an unknown call (another cluster's, say) fails at the scheduler
    forged = client.call(add, 1)
    forged.get(timeout=10)
    forged.request_id = "nonexistent-1"
    with pytest.raises(DependencyFailed, match="no record"):
        client.call(add, forged).get(timeout=10)
    # a Future inside another value cannot be sent
    with pytest.raises(TypeError, match="top-level argument"):
        client.call(add, [client.call(add, 1)])


def test_a_future_as_an_argument_of_a_causal_call(client):
    key, rd, add = unique("ck"), unique("rd"), unique("add")
    client.put(key, 5, consistency="causal")
    client.register(lambda lib, k, extra: lib.get(k) + extra, rd)
    client.register(lambda a, b=0: a + b, add)
    first = client.call(add, 1, b=2)
    assert client.call(rd, key, first, consistency="causal").get(timeout=10) == 8
    causal = client.call(rd, key, 1, consistency="causal")
    with pytest.raises(ValueError, match="causal call"):     # nothing is sent
        client.call(add, causal)
    assert causal.get(timeout=10) == 6


def test_async_def_is_awaited_on_the_worker(client):
    import asyncio

    async def fetch(x):
        await asyncio.sleep(0.01)
        lib = cloudburst.lib()          # the library is there inside the coroutine too
        return x * 2, bool(lib.getid())

    name = unique("async")
    client.register(fetch, name)
    assert tuple(client.call(name, 21).get(timeout=10)) == (42, True)

    async def with_lib(lib, x):
        return lib.getid() is not None and x

    name2 = unique("async-lib")
    client.register(with_lib, name2)
    assert client.call(name2, 5).get(timeout=10) == 5


def test_what_cannot_work_is_refused_at_register(client):
    def numbers(n):
        yield from range(n)

    async def agen(n):
        yield n

    class NoEntry:
        pass

    with pytest.raises(InvalidFunction, match="generator function"):
        client.register(numbers, unique("gen"))
    with pytest.raises(InvalidFunction, match="async generator"):
        client.register(agen, unique("agen"))
    with pytest.raises(InvalidFunction, match=r"`run` method.*`__call__`"):
        client.register(NoEntry, unique("noentry"))
    with pytest.raises(InvalidFunction, match="not callable"):
        client.register(NoEntry(), unique("instance"))
    with pytest.raises(InvalidFunction, match="not its first"):
        client.register(lambda x, lib: x, unique("lib-second"))
    with pytest.raises(InvalidFunction, match="generator"):
        client.function(numbers)


def test_a_dag_mixing_functions_with_and_without_lib(client):
    key = unique("k")
    client.put(key, 5)
    src, mid, sink = unique("src"), unique("mid"), unique("sink")
    client.register(lambda lib, k: lib.get(k), src)                 # takes lib
    client.register(lambda x, plus=0: x + plus, mid)                # does not
    client.register(lambda tag, x: (tag, x * 2, cloudburst.lib().getid() != ""), sink)
    dag = unique("mixed")
    client.register_dag(dag, [src, mid, sink], [(src, mid), (mid, sink)])
    got = client.call_dag(dag, {src: [key], sink: ["t"]}, kwargs={mid: {"plus": 1}})
    assert tuple(got.get(timeout=10)) == ("t", 12, True)


def test_futures_between_actor_methods_and_functions(client):
    class Counter:
        def __init__(self, start):
            self.n = start

        def incr(self, by):
            self.n += by
            return self.n

    add = unique("add")
    client.register(lambda a, b: a + b, add)
    counter = client.actor(Counter, 10)
    first = counter.incr(1)                                   # 11
    assert client.call(add, first, 100).get(timeout=10) == 111
    assert counter.incr(client.call(add, 2, 3)).get(timeout=10) == 16
    counter.kill()


def test_a_future_whose_holder_dies_fails_its_consumer_typed_and_in_time(client, cluster):
    """The worker that runs the producing call is killed: the call taking its Future fails by
    its own deadline, naming the argument it waited for (nothing hangs). Last in this file:
    the killed worker is restarted by its node."""
    hang, ident, key = unique("hang"), unique("ident"), unique("hang-id")

    def hang_fn(key):
        lib = cloudburst.lib()
        lib.put(key, lib.getid())
        time.sleep(30)              # the function's own work: it is killed meanwhile

    client.register(hang_fn, hang)
    client.register(lambda a: a, ident)
    producer = client.call(hang, key, max_retries=0)    # not run again once its worker dies

    def started():
        try:
            return client.get(key)
        except cloudburst.ObjectNotFound:
            return None

    victim = poll_until(started, 10, "the producing call starting")
    consumer = client.call(ident, producer, timeout=3)
    cluster.kill_worker(victim)
    with pytest.raises(cloudburst.ExecutionError, match=victim):
        producer.get(timeout=10)
    start = time.monotonic()
    with pytest.raises((cloudburst.Timeout, DependencyFailed), match="argument 0"):
        consumer.get(timeout=10)
    assert time.monotonic() - start < 5
