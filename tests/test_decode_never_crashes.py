"""Decoding never crashes: no stored bytes can crash the process that reads them.

A lattice is rebuilt only through the kernel's lattice codec (`anna_core._core.deserialize`,
which lattices pickle through as `anna_core.wire.lattice_from_payload`),
never by NEWOBJ/REDUCE of its class; an instance made without its state (`cls.__new__(cls)`,
what a pickle's NEWOBJ does) holds the bottom lattice instead of unconstructed memory; bytes
that do not decode raise `MalformedValue` (an `UnsafeValue`) naming the key.

- In a subprocess (so a crash cannot take the test runner down): the hostile 33-byte pickle
  `NEWOBJ anna_core._core.<Lattice>` with no state, for every lattice class, through every
  way of reading it (plain `loads`, `pickle.loads`, `copyreg.__newobj__`, `__new__` + every
  method, old pickles' `__setstate__` with junk). Before this change the first `repr` died
  with SIGSEGV (or std::bad_alloc).
- Hypothesis over random bytes and mutated valid encodings, on every decode path: the
  plain-data reader (`faas.values.loads`, which `cloudburst.Client.get`, `lib.get` and
  call results use), the kernel's codec as `anna_core.Client` uses it
  (`anna_core.wire.tuple_to_lattice`), the causal node cache's pure core (commits and cache
  replies carrying junk), and end to end on a real cluster: `cloudburst.Client.get`,
  `anna_core.Client.get`, `lib.get` in a function (LWW, and causal through the node cache).
"""
import pickle
import subprocess
import sys
import textwrap
import uuid

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import anna_core
import cloudburst
from anna_core import _core
from anna_core.wire import lattice_to_tuple, tuple_to_lattice
from cloudburst.errors import ExecutionError
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from faas.errors import MalformedValue, UnsafeValue
from faas.values import dumps, loads

LATTICE_CLASSES = ["LWWLattice", "SetLattice", "OrderedSetLattice", "MaxLattice", "MapLattice",
                   "PriorityLattice", "SingleKeyCausalLattice", "MultiKeyCausalLattice"]


def hostile(name):
    """The stateless pickle of the report: NEWOBJ of a lattice class and no BUILD (33 bytes)."""
    return b"\x80\x04canna_core._core\n" + name.encode() + b"\n)\x81."


def samples():
    """One valid lattice of every class, with content."""
    return [
        _core.LWWLattice(5, b"v"), _core.SetLattice([b"a", b"b"]),
        _core.OrderedSetLattice([b"x"]), _core.MaxLattice(7), _core.MapLattice({b"k": 3}),
        _core.PriorityLattice(1.5, b"p"), _core.SingleKeyCausalLattice({"n": 2}, [b"s"]),
        _core.MultiKeyCausalLattice({"n": 1}, {"d": {"m": 4}}, [b"m"]),
    ]


def exercise(value):
    """Everything a reader may do with a decoded value; it must not crash."""
    repr(value)
    if _core.__name__ == type(value).__module__:
        value.reveal()
        value.serialize()
        assert value.merge(value) == value
        assert _core.deserialize(value.lattice_type, value.serialize()) == value
        pickle.loads(pickle.dumps(value))


# ---- in a subprocess: the crash itself ----
PROBE = textwrap.dedent("""
    import copyreg, pickle, sys
    from anna_core import _core
    from faas.errors import UnsafeValue
    from faas.values import loads
    name = sys.argv[1]
    cls = getattr(_core, name)
    bad = b"\\x80\\x04canna_core._core\\n" + name.encode() + b"\\n)\\x81."
    try:
        got = loads(bad)                      # the plain-data reader (Client.get, lib.get)
        print("plain read gave", repr(got), flush=True)
    except UnsafeValue as e:
        print("plain read refused:", type(e).__name__, flush=True)
    for make in (lambda: pickle.loads(bad), lambda: cls.__new__(cls),
                 lambda: copyreg.__newobj__(cls)):
        x = make()                            # objects=True, and user code
        print(repr(x), x.reveal(), x.serialize(), x.lattice_type, x == x, flush=True)
        x.merge(x); pickle.loads(pickle.dumps(x)); x.__reduce__()
    x = cls.__new__(cls)
    for state in [(), (b"\\xff" * 9,), ("str",), (None,), (b"", b""), 5]:
        try:
            x.__setstate__(state)
        except (TypeError, ValueError) as e:
            pass
        repr(x)
    print("ok", flush=True)
""")


def probe(name):
    return subprocess.run([sys.executable, "-c", PROBE, name], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("name", LATTICE_CLASSES)
def test_a_stateless_lattice_pickle_does_not_crash_its_reader(name):
    out = probe(name)
    assert out.returncode == 0, f"reader died ({out.returncode}): {out.stdout}{out.stderr}"
    assert "plain read refused: UnsafeValue" in out.stdout and out.stdout.endswith("ok\n")


def test_the_hostile_pickle_is_refused_naming_the_key_and_the_class():
    with pytest.raises(UnsafeValue) as e:
        loads(hostile("MapLattice"), key="k1")
    assert e.value.key == "k1" and e.value.global_name == "anna_core._core.MapLattice"


def test_lattices_pickle_through_the_codec_not_their_class():
    for lattice in samples():
        data = pickle.dumps(lattice, protocol=5)
        assert type(lattice).__name__.encode() not in data and b"lattice_from_payload" in data
        assert loads(dumps({"v": [lattice]}))["v"][0] == lattice


def test_a_lattice_the_codec_rejects_is_malformed_naming_the_key():
    data = pickle.dumps(_core.MapLattice({b"k": 3}))
    payload = _core.MapLattice({b"k": 3}).serialize()
    junk = data.replace(payload, b"\xff" * len(payload))
    with pytest.raises(MalformedValue, match="'k2'.*does not decode") as e:
        loads(junk, key="k2")
    assert e.value.key == "k2" and isinstance(e.value, ValueError)
    with pytest.raises(MalformedValue, match="lattice_from_payload\\(int, int\\)"):
        loads(b"canna_core.wire\nlattice_from_payload\n(I1\nI2\ntR.", key="k3")
    with pytest.raises(MalformedValue, match="unknown lattice type"):
        loads(data.replace(b"K\x05", b"K\x2a"))


# ---- hypothesis over bytes and mutated valid encodings ----
PLAIN_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.binary(max_size=8) | st.sampled_from(samples()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4) | st.tuples(inner),
    max_leaves=10)


@st.composite
def mutated(draw, base):
    """`base` (bytes) with a few random byte edits: flips, deletions, insertions, a cut."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[i] = draw(st.integers(0, 255))
        elif kind == "delete":
            del data[i]
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[i:]
    return bytes(data)


ENCODED = PLAIN_VALUES.map(dumps)
HOSTILE = st.sampled_from(LATTICE_CLASSES).map(hostile)
JUNK = st.binary(max_size=64) | mutated(ENCODED) | mutated(HOSTILE) | ENCODED | HOSTILE
PAYLOADS = st.tuples(st.integers(-2, 10),
                     st.binary(max_size=48) | mutated(st.sampled_from(
                         [l.serialize() for l in samples()])))


@settings(max_examples=100, deadline=None)
@given(JUNK)
def test_plain_reads_of_any_bytes_give_a_value_or_a_typed_error(data):
    try:
        value = loads(data, key="fuzz")
    except UnsafeValue as e:                 # MalformedValue is one
        assert e.key == "fuzz"
    else:
        exercise_nested(value)


@settings(max_examples=100, deadline=None)
@given(mutated(ENCODED) | mutated(HOSTILE))
# a causal lattice made by __new__ alone once held no version at all, unequal to its own
# round trip through the codec (one empty version)
@example(data=b"\x80\x00canna_core._core\nSingleKeyCausalLattice\n)\x81.")
@example(data=b"\x80\x00canna_core._core\nMultiKeyCausalLattice\n)\x81.")
def test_full_reads_of_mutated_lattice_pickles_do_not_crash(data):
    try:
        value = loads(data, objects=True)
    except Exception:                        # a trusted writer's classes raise what they raise
        return
    exercise_nested(value)


def exercise_nested(value):
    stack = [value]
    while stack:
        v = stack.pop()
        exercise(v)
        if isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())


@settings(max_examples=200, deadline=None)
@given(PAYLOADS)
def test_the_codec_as_anna_clients_use_it_gives_a_lattice_or_value_error(case):
    lattice_type, payload = case
    t = anna_pb2.KeyTuple(key="k", lattice_type=max(lattice_type, 0), payload=payload)
    for decode in (lambda: tuple_to_lattice(t), lambda: _core.deserialize(lattice_type, payload)):
        try:
            value = decode()
        except ValueError:
            continue
        exercise(value)
        assert tuple_to_lattice(lattice_to_tuple("k", value)) == value


# ---- the causal node cache's pure core ----
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PAYLOADS, min_size=1, max_size=3))
def test_the_causal_node_cache_answers_junk_commits_with_an_error(cases):
    from hydrocache.node_cache import NodeCache
    cache = NodeCache("n1", "tcp://127.0.0.1:1")
    req = pb.CacheRequest(request_id="r1", op=pb.CAUSAL_COMMIT, attempt_id="a1",
                          response_address="tcp://127.0.0.1:2")
    for lattice_type, payload in cases:
        req.writes.append(anna_pb2.KeyTuple(key=f"k{lattice_type}", lattice_type=max(
            lattice_type, 0), payload=payload).SerializeToString())
    req.writes.append(b"\xff\xff junk KeyTuple")
    step = cache.handle(req, now=1.0)
    replies = [r for r in step.replies if r.response.request_id == "r1"]
    assert replies and replies[0].response.status != pb.OK
    assert "n1" in replies[0].response.message or replies[0].response.message


# ---- end to end, on a real cluster ----
@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(timeout=20)
    c.register(lambda lib, x: x, "ident")
    c.register(lambda lib, key: repr(lib.get(key)), "read")
    return c


@pytest.fixture(scope="module")
def kvs(cluster, client):
    k = anna_core.Client(client.kvs_address, timeout=5.0, auth=cluster.client_auth)
    yield k
    k.close()


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read_back(client, kvs, key, data):
    """Reads `data` stored under `key` by every client-side path; each gives a value or a
    typed error naming the key."""
    try:
        value = client.get(key)
    except UnsafeValue as e:
        assert e.key == key
    else:
        exercise_nested(value)
    assert kvs.get(key) == data                       # anna_core.Client: the bytes, as stored


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(JUNK)
def test_cloudburst_and_anna_clients_read_any_stored_bytes(client, kvs, data):
    key = unique("fuzz")
    kvs.put_all(key, data)
    read_back(client, kvs, key, data)


def test_every_hostile_pickle_fails_lib_get_with_a_typed_error_and_the_worker_lives(client, kvs):
    for name in LATTICE_CLASSES:
        key = unique(name)
        kvs.put_all(key, hostile(name))
        with pytest.raises(UnsafeValue) as e:
            client.get(key)
        assert e.value.key == key
        with pytest.raises(ExecutionError, match=f"UnsafeValue.*{key}"):
            client.call("read", key).get(timeout=20)
    key = unique("bad-codec")
    payload = _core.MaxLattice(3).serialize()
    kvs.put_all(key, dumps(_core.MaxLattice(3)).replace(payload, b"\xff" * len(payload)))
    with pytest.raises(MalformedValue, match=key):
        client.get(key)
    with pytest.raises(ExecutionError, match=f"MalformedValue.*{key}"):
        client.call("read", key).get(timeout=20)
    assert client.call("ident", 41).get(timeout=20) == 41


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(JUNK)
def test_lib_get_reads_any_stored_bytes(client, kvs, data):
    key = unique("fuzz-lib")
    kvs.put_all(key, data)
    try:
        client.call("read", key).get(timeout=20)
    except ExecutionError as e:
        assert "UnsafeValue" in str(e) or "MalformedValue" in str(e), str(e)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(JUNK)
def test_causal_reads_through_the_node_cache_of_any_stored_bytes(client, kvs, data):
    key = unique("fuzz-causal")
    kvs.put_all(key, _core.MultiKeyCausalLattice({"fuzzer": 1}, {}, [data]))
    try:
        client.get(key, consistency="causal")
    except UnsafeValue as e:
        assert e.key == key
    try:
        client.call("read", key, consistency="causal").get(timeout=20)
    except ExecutionError as e:
        assert "UnsafeValue" in str(e) or "MalformedValue" in str(e), str(e)


def test_lattice_values_of_every_class_read_back_through_every_path(client, kvs):
    for lattice in samples():
        if lattice.lattice_type in (anna_pb2.LWW, anna_pb2.SINGLE_CAUSAL, anna_pb2.MULTI_CAUSAL):
            continue                    # LWW and causal keys hold pickled values: above
        key = unique("lat")
        kvs.put(key, lattice)
        assert kvs.get(key) == lattice and client.get(key) == lattice
        assert client.call("read", key).get(timeout=20) == repr(lattice)
    assert client.call("ident", 41).get(timeout=20) == 41
