"""Read-your-writes and monotonic reads on a real LocalCluster (two executor nodes, so a call
may land on a node whose cache still holds an older copy until the KVS pushes the new one).

Each test counts reads older than what the client wrote or saw before; every count must be 0.
"""
import threading
import uuid

import pytest

import cloudburst
from cloudburst.sessions import WHOLE_UP_TO
from waiting import poll_until


@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=2, executors_per_node=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(timeout=20)
    c.register(lambda lib, key: lib.get(key), "read")
    c.register(lambda lib, key, value: lib.put(key, value), "write")
    c.register(lambda lib, key: lib.get(key), "read_causal")
    yield c
    c.close()


def fresh_key(client, prefix, value=0, consistency="lww", reader="read"):
    """A new key, cached on every node (so a stale copy is there to be read)."""
    key = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client.put(key, value, consistency=consistency)
    futures = [client.call(reader, key, consistency=consistency, session=False)
               for _ in range(8)]
    assert [f.get(timeout=20) for f in futures] == [value] * 8
    return key


def test_calls_right_after_a_put_read_it(client):
    key = fresh_key(client, "cfg")
    stale = 0
    for i in range(1, 26):
        client.put(key, i)
        futures = [client.call("read", key) for _ in range(4)]
        stale += sum(f.get(timeout=20) < i for f in futures)
    assert stale == 0, f"{stale} of 100 calls read a value older than the client's put"


def stale_causal_reads(client, key, reader, puts):
    """Put 1..`puts` under `key` causally; after each, one call of `reader` per protocol
    reads it. How many of those calls read a version older than the put before them."""
    stale = 0
    for i in range(1, puts + 1):
        client.put(key, i, consistency="causal")
        futures = [client.call(reader, key, consistency="causal", protocol=protocol)
                   for protocol in ("hb", "ct", "opt", "con")]
        stale += sum(f.get(timeout=20) < i for f in futures)
    return stale


def test_causal_calls_right_after_a_causal_put_read_it(client):
    key = fresh_key(client, "ccfg", consistency="causal", reader="read_causal")
    stale = stale_causal_reads(client, key, "read_causal", 25)
    assert stale == 0, f"{stale} of 100 causal calls read a version older than the client's put"


def test_calls_right_after_a_delete_do_not_read_the_deleted_value(client):
    client.register(lambda lib, key: lib.get(key, default=None), "read_or_none")
    stale = older = 0
    for i in range(10):
        key = fresh_key(client, "del", value=i)
        client.delete(key)
        futures = [client.call("read_or_none", key) for _ in range(3)]
        stale += sum(f.get(timeout=20) is not None for f in futures)
        client.put(key, 100 + i)                   # a write after the delete reads again
        older += client.call("read_or_none", key).get(timeout=20) != 100 + i
    assert (stale, older) == (0, 0), (f"{stale} of 30 calls read a value the client had "
                                      f"deleted; {older} of 10 missed the put after it")


def test_every_function_of_a_dag_reads_it(client):
    """The session reaches a downstream function too (its schedule travels with the data)."""
    client.register(lambda lib, key: key, "pass_key")
    dag = f"pass-read-{uuid.uuid4().hex[:6]}"
    client.register_dag(dag, ["pass_key", "read"], [("pass_key", "read")])
    key = fresh_key(client, "dagcfg")
    stale = 0
    for i in range(1, 21):
        client.put(key, i)
        futures = [client.call_dag(dag, {"pass_key": [key]}) for _ in range(2)]
        stale += sum(f.get(timeout=20) < i for f in futures)
    assert stale == 0, f"{stale} of 40 DAG calls read a value older than the client's put"


class Reader:
    def read(self, lib, key):
        return lib.get(key)


def test_an_actor_method_reads_it(client):
    key = fresh_key(client, "actorcfg")
    handle = client.actor(Reader)
    try:
        stale = 0
        for i in range(1, 21):
            client.put(key, i)
            stale += handle.read(key).get(timeout=20) < i
        assert stale == 0, f"{stale} of 20 actor calls read a value older than the put"
    finally:
        handle.kill()


def test_a_call_reads_what_an_earlier_call_wrote(client):
    key = fresh_key(client, "w")
    stale = 0
    for i in range(1, 21):
        client.call("write", key, i).get(timeout=20)
        futures = [client.call("read", key) for _ in range(3)]
        stale += sum(f.get(timeout=20) < i for f in futures)
    assert stale == 0, f"{stale} of 60 calls read a value older than an earlier call wrote"


def test_reads_never_go_back(cluster, client):
    """Another client keeps writing; this one reads by `get` and by calls, in turn: no read
    returns an older value than one it read before."""
    key = fresh_key(client, "mono")
    writer = cluster.client(timeout=20, session=False)
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            i += 1
            writer.put(key, i)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        poll_until(lambda: client.get(key) > 0, timeout=10, what="the writer's first put")
        backwards, last = 0, 0
        for n in range(60):
            got = client.get(key) if n % 3 == 0 else client.call("read", key).get(timeout=20)
            backwards += got < last
            last = max(last, got)
        assert backwards == 0, f"{backwards} of 60 reads went back to an older value"
    finally:
        stop.set()
        thread.join(10)
        writer.close()


def test_the_session_is_bounded_and_still_guarantees(cluster):
    client = cluster.client(timeout=20, session_keys=4)
    try:
        client.register(lambda lib, keys: [lib.get(k) for k in keys], "read_all")
        keys = [f"bound-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
        for k in keys:
            client.put(k, 0)
        futures = [client.call("read_all", keys, session=False) for _ in range(6)]
        assert all(f.get(timeout=20) == [0] * 10 for f in futures)    # cached everywhere
        stale = 0
        for i in range(1, 6):
            for k in keys:
                client.put(k, i)
            assert len(client.session) == 4      # six of the ten summed up by the overflow
            futures = [client.call("read_all", keys) for _ in range(4)]
            stale += sum(v < i for f in futures for v in f.get(timeout=20))
        assert stale == 0, f"{stale} of 200 reads were older than the client's puts"
    finally:
        client.close()


def test_a_causal_call_with_a_large_session_reads_a_key_it_does_not_name(cluster):
    """A causal call whose client holds more floors than it sends whole carries only the
    floors of the keys it names (`Reference`s) and a bound for the rest: a key it reads
    without naming it (here passed as a plain string) must still meet the client's write."""
    client = cluster.client(timeout=20)
    try:
        client.register(lambda lib, key: lib.get(key), "read_unnamed")
        for i in range(WHOLE_UP_TO + 6):          # floors enough to leave most out
            client.put(f"filler-{i}-{uuid.uuid4().hex[:6]}", i, consistency="causal")
        key = fresh_key(client, "unnamed", consistency="causal", reader="read_unnamed")
        assert len(client.session) > WHOLE_UP_TO
        stale = stale_causal_reads(client, key, "read_unnamed", 15)
        assert stale == 0, f"{stale} of 60 causal calls read a version older than the put"
    finally:
        client.close()
