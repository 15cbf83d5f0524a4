"""Values are data, not code: a value read from the KVS (or a call's result) is unpickled as
plain data unless the reader asked for Python objects (`objects=True`).

A crafted pickle, whose unpickling would create a marker file, is stored under a key through
the KVS; `Client.get`, a function's `lib.get`, a call taking `Reference(key)` (plain and
causal) and a call's result each refuse it with `UnsafeValue` naming the global, nothing runs
(the marker never appears), and the cluster keeps serving. Plain data round-trips by
default; `objects=True` returns instances of classes. Real processes (`LocalCluster`).
"""
import datetime
import decimal
import fractions
import os
import pickle
import sys
import uuid

import pytest
from hypothesis import given, strategies as st

import anna_core
import cloudburst
from cloudburst import Reference, UnsafeValue
from cloudburst.errors import ExecutionError
from faas.values import PLAIN_GLOBALS, dumps, loads

SYSTEM = f"{os.system.__module__}.system"      # how pickle names os.system ("posix.system")


class Crafted:
    """Unpickling this runs `touch <marker>`: what a hostile writer would store."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


PLAIN = [None, True, 0, -7, 2 ** 100, 1.5, float("inf"), 3 - 4j, "text", b"\x00bytes",
         bytearray(b"ba"), [1, [2, [3]]], (1, "a", (None,)), {"k": {1: [b"v"]}, 2: ()},
         {1, 2}, frozenset({"a"}), datetime.datetime(2024, 5, 1, 12, 30, 1, 5),
         datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
         datetime.date(2024, 5, 1), datetime.time(23, 59), datetime.timedelta(days=1, seconds=3),
         decimal.Decimal("10.25"), Reference("some-key", concurrent=True)]


# ---- the unpickler alone ----
@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_data_round_trips_without_opting_in(value):
    got = loads(dumps(value))
    assert got == value and type(got) is type(value)


_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                   st.text(max_size=20), st.binary(max_size=20))


@given(st.one_of(_SCALAR, st.lists(_SCALAR, max_size=10).map(tuple)))
def test_plain_scalars_serialize_as_cloudpickle_does(value):
    """`dumps` takes the standard pickler for scalars and small tuples of them (faster): the
    bytes are the same as cloudpickle's, so nothing reading them can tell."""
    import cloudpickle
    assert dumps(value) == cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    assert loads(dumps(value)) == value


# a plain read skips making the restricted unpickler when the bytes hold no opcode that can
# name a global, call, load a persistent id or a buffer (faas.values._REACHING)
def test_the_opcodes_a_plain_read_must_look_at_are_every_one_that_reaches_beyond_data():
    import pickletools
    from faas.values import _REACHING
    looked_at = {op.name for op in pickletools.opcodes
                 if _REACHING.search(op.code.encode("latin-1"))}
    assert looked_at == {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "EXT1", "EXT2", "EXT4",
                         "REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "PERSID", "BINPERSID",
                         "NEXT_BUFFER", "READONLY_BUFFER"}


def _restricted(data):
    """The plain reader without its shortcut: the restricted unpickler, always."""
    import io
    from faas.values import _PlainDataUnpickler
    return _PlainDataUnpickler(io.BytesIO(data)).load()


_NESTED = st.recursive(_SCALAR | st.complex_numbers(allow_nan=False),
                       lambda inner: st.lists(inner, max_size=4)
                       | st.lists(inner, max_size=4).map(tuple)
                       | st.dictionaries(st.text(max_size=5), inner, max_size=4)
                       | st.frozensets(st.integers(), max_size=4), max_leaves=12)


@given(_NESTED, st.integers(0, pickle.HIGHEST_PROTOCOL), st.integers(0, 64), st.integers(0, 255))
def test_a_plain_read_with_or_without_its_shortcut_is_the_same(value, protocol, at, byte):
    """Plain data of every protocol, whole, cut short or with one byte changed: `loads`
    returns what the restricted unpickler returns, or raises UnsafeValue where it fails."""
    data = pickle.dumps(value, protocol=protocol)
    for bad in (data, data[:at], data[:at] + bytes([byte]) + data[at + 1:]):
        try:
            expected = _restricted(bad)
        except Exception:
            with pytest.raises(UnsafeValue):
                loads(bad)
            continue
        assert pickle.dumps(loads(bad)) == pickle.dumps(expected)


def test_bytes_that_merely_hold_an_opcode_value_as_data_still_read():
    """'c', 'b', 'R'... inside a string are data, not opcodes: the full reader reads them."""
    value = {"circus": b"Rbo\x93", "list": ["object", "index"]}
    data = dumps(value)
    from faas.values import _REACHING
    assert _REACHING.search(data) is not None
    assert loads(data) == value


def test_lattices_are_plain_data():
    got = loads(dumps({"tags": anna_core.SetLattice([b"a", b"b"]), "n": anna_core.MaxLattice(3)}))
    assert got["tags"].reveal() == {b"a", b"b"} and got["n"].reveal() == 3


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    for data in (dumps(Crafted(marker)),                           # STACK_GLOBAL (protocol 5)
                 pickle.dumps(Crafted(marker), protocol=0),        # GLOBAL (protocol 0)
                 dumps([1, {"deep": (Crafted(marker),)}])):        # nested
        with pytest.raises(UnsafeValue) as e:
            loads(data, key="k")
        assert e.value.global_name == SYSTEM and e.value.key == "k"
        assert SYSTEM in str(e.value) and "'k'" in str(e.value) and "objects=True" in str(e.value)
    assert not marker.exists()


def test_the_crafted_pickle_is_a_real_probe(tmp_path):
    """The control: read as objects, the crafted pickle does run (so its absence means it
    did not)."""
    marker = tmp_path / "ran"
    assert loads(dumps(Crafted(marker)), objects=True) == 0 and marker.exists()


def test_a_refused_global_is_not_even_imported(tmp_path):
    """Importing a module runs its code: the refusal comes first."""
    marker = tmp_path / "imported"
    (tmp_path / "sideeffect_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\nf = len\n")
    module = b"sideeffect_mod"        # STACK_GLOBAL sideeffect_mod.f, written by hand
    data = b"\x80\x04\x8c" + bytes([len(module)]) + module + b"\x94\x8c\x01f\x94\x93\x94."
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(UnsafeValue, match="sideeffect_mod.f"):
            loads(data)
        assert "sideeffect_mod" not in sys.modules and not marker.exists()
    finally:
        sys.path.remove(str(tmp_path))


def test_objects_true_is_the_full_unpickler():
    value = fractions.Fraction(1, 3)
    with pytest.raises(UnsafeValue, match="fractions.Fraction"):
        loads(dumps(value))
    assert loads(dumps(value), objects=True) == value


def test_the_allowlist_is_small_and_names_no_callable_that_reaches_code():
    modules = {m for m, _ in PLAIN_GLOBALS}
    assert modules == {"builtins", "datetime", "decimal", "faas.values", "anna_core.wire",
                       "runtime.actors"}
    assert {n for m, n in PLAIN_GLOBALS if m == "builtins"} == {"complex"}


def test_unsafe_value_has_its_own_status():
    from cloudburst.errors import STATUS_OF, error_from_status
    from hydro_proto import cloudburst_pb2 as pb
    assert STATUS_OF[UnsafeValue] == pb.UNSAFE_VALUE
    assert isinstance(error_from_status(pb.UNSAFE_VALUE, "m"), UnsafeValue)
    assert issubclass(UnsafeValue, cloudburst.CloudburstError)


def test_a_reference_pickled_before_the_objects_field_reads_plain():
    old = Reference("k")
    object.__delattr__(old, "objects")      # as pickled before `objects` existed
    got = loads(dumps(old))
    assert got.key == "k" and got.objects is False


# ---- on a cluster ----
@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    c = cluster.client(timeout=20)
    c.register(lambda lib, x: x, "ident")
    c.register(lambda lib, key: lib.get(key), "read")
    c.register(lambda lib, key: lib.get(key, objects=True), "read-objects")
    c.register(lambda lib, key, value: lib.put(key, value), "write")
    return c


@pytest.fixture()
def crafted(client, tmp_path):
    """A key holding a crafted pickle, and the marker file its unpickling would create."""
    marker = tmp_path / "ran"
    key = unique("crafted")
    client.put(key, Crafted(marker))
    yield key, marker
    assert not marker.exists(), "the crafted pickle ran somewhere"


def still_serving(client):
    assert client.call("ident", 41).get(timeout=10) == 41


def test_client_get_refuses_a_crafted_value(client, crafted):
    key, marker = crafted
    with pytest.raises(UnsafeValue) as e:
        client.get(key)
    assert e.value.key == key and e.value.global_name == SYSTEM
    assert f"Client.get({key!r}, objects=True)" in str(e.value)
    still_serving(client)


def test_a_value_written_straight_to_the_kvs_is_refused_too(cluster, client, tmp_path):
    """Bypassing the SDK: raw protocol-0 pickle bytes put with an (authorized) Anna client."""
    marker, key = tmp_path / "ran", unique("raw")
    kvs = anna_core.Client(client.kvs_address, timeout=5.0, auth=cluster.client_auth)
    try:
        kvs.put_all(key, f"cos\nsystem\n(S'touch {marker}'\ntR.".encode())
    finally:
        kvs.close()
    with pytest.raises(UnsafeValue, match="'os.system'"):
        client.get(key)
    with pytest.raises(ExecutionError, match="UnsafeValue.*'os.system'"):
        client.call("read", key).get(timeout=10)
    with pytest.raises(UnsafeValue, match="'os.system'"):
        client.call("ident", Reference(key)).get(timeout=10)
    assert not marker.exists()
    still_serving(client)


def test_lib_get_refuses_a_crafted_value(client, crafted):
    key, marker = crafted
    with pytest.raises(ExecutionError) as e:
        client.call("read", key).get(timeout=10)
    assert "UnsafeValue" in str(e.value) and SYSTEM in str(e.value)
    assert f"lib.get({key!r}, objects=True)" in str(e.value)

    def probe(lib, key):         # the error is typed inside the function too
        from faas.errors import UnsafeValue
        try:
            lib.get(key)
        except UnsafeValue as refused:
            return refused.key, refused.global_name
    client.register(probe, "probe")
    assert client.call("probe", key).get(timeout=10) == (key, SYSTEM)
    still_serving(client)


def test_a_reference_to_a_crafted_value_fails_the_call_before_it_runs(client, crafted):
    key, marker = crafted
    with pytest.raises(UnsafeValue) as e:
        client.call("ident", Reference(key)).get(timeout=10)
    assert SYSTEM in str(e.value) and f"Reference({key!r}, objects=True)" in str(e.value)
    still_serving(client)


def test_causal_reads_refuse_a_crafted_value(client, tmp_path):
    marker, key = tmp_path / "ran", unique("causal")
    client.put(key, Crafted(marker), consistency="causal")
    with pytest.raises(UnsafeValue, match=SYSTEM):
        client.get(key, consistency="causal")
    with pytest.raises(UnsafeValue, match=SYSTEM):
        client.get(key, consistency="causal", concurrent=True)
    with pytest.raises(UnsafeValue, match=SYSTEM):
        client.call("ident", Reference(key), consistency="causal").get(timeout=20)
    with pytest.raises(ExecutionError, match=f"UnsafeValue.*{SYSTEM}"):
        client.call("read", key, consistency="causal").get(timeout=20)
    assert not marker.exists()
    still_serving(client)


def test_a_crafted_result_is_refused_by_the_caller(client, tmp_path):
    marker = tmp_path / "ran"
    client.register(lambda lib, path: Crafted(path), "hostile")
    future = client.call("hostile", str(marker))
    with pytest.raises(UnsafeValue) as e:
        future.get(timeout=10)
    assert SYSTEM in str(e.value) and "the result of call of function 'hostile'" in str(e.value)
    out = unique("out")
    dag = unique("hostile-dag")
    client.register_dag(dag, ["hostile"])
    with pytest.raises(UnsafeValue):
        client.call_dag(dag, {"hostile": [str(marker)]}, output_key=out).get(timeout=10)
    with pytest.raises(UnsafeValue, match=SYSTEM):
        client.get(out)
    assert not marker.exists()
    still_serving(client)


def test_plain_data_round_trips_through_the_cluster(client):
    for value in PLAIN[:-1]:                 # a Reference argument is resolved, not passed
        key = unique("plain")
        client.put(key, value)
        assert client.get(key) == value
        assert client.call("read", key).get(timeout=10) == value
        assert client.call("ident", Reference(key)).get(timeout=10) == value
        assert client.call("ident", value).get(timeout=10) == value
    causal = unique("plain-causal")
    client.put(causal, {"v": [1, 2]}, consistency="causal")
    assert client.get(causal, consistency="causal") == {"v": [1, 2]}
    assert client.call("ident", Reference(causal), consistency="causal").get(timeout=20) == \
        {"v": [1, 2]}


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def test_objects_true_returns_instances_of_classes(client):
    key = unique("objects")
    client.put(key, fractions.Fraction(1, 3))
    with pytest.raises(UnsafeValue, match="fractions.Fraction"):
        client.get(key)
    assert client.get(key, objects=True) == fractions.Fraction(1, 3)
    assert client.call("read-objects", key, objects=True).get(timeout=10) == \
        fractions.Fraction(1, 3)
    assert client.call("ident", Reference(key, objects=True), objects=True).get(timeout=10) == \
        fractions.Fraction(1, 3)
    future = client.call("ident", Reference(key, objects=True))
    with pytest.raises(UnsafeValue):         # the result is read as plain data ...
        future.get(timeout=10)
    assert future.get(objects=True) == fractions.Fraction(1, 3)   # ... unless asked
    assert client.map("read-objects", [key, key], objects=True) == [fractions.Fraction(1, 3)] * 2

    # a class of the caller's own: written by a function, read back on both sides
    def make_point(lib, key):
        lib.put(key, Point(3, 4))
        got = lib.get(key, objects=True)
        return got.x + got.y
    client.register(make_point, "make-point")
    key = unique("point")
    assert client.call("make-point", key).get(timeout=10) == 7
    with pytest.raises(UnsafeValue):
        client.get(key)
    point = client.get(key, objects=True)
    assert type(point).__name__ == "Point" and (point.x, point.y) == (3, 4)
    with pytest.raises(ExecutionError, match="UnsafeValue"):
        client.call("read", key).get(timeout=10)


def test_an_object_argument_of_the_callers_own_needs_no_opt_in(client):
    """The caller's own arguments are unpickled fully on the executor (its choice)."""
    client.register(lambda lib, f: int(f * 3), "triple")
    assert client.call("triple", fractions.Fraction(1, 3)).get(timeout=10) == 1


def test_a_reference_pickled_by_an_earlier_version_still_reads_as_plain_data():
    """`Reference` was `runtime.values.Reference` before it moved to `faas.values`: a value
    stored then (a Reference inside a list) still reads, as the same plain value."""
    import types

    ref = Reference("k", concurrent=True)
    earlier = types.ModuleType("runtime.values")
    earlier.Reference = Reference
    saved = Reference.__module__
    sys.modules["runtime.values"], Reference.__module__ = earlier, "runtime.values"
    try:
        stored = pickle.dumps([ref], protocol=5)
    finally:
        del sys.modules["runtime.values"]
        Reference.__module__ = saved
    assert b"runtime.values" in stored and b"faas" not in stored
    assert loads(stored) == [ref]
