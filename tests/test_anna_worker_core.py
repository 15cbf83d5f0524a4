"""The kernel's sans-I/O worker (`_core.WorkerCore`) driven as a pure state machine.

No sockets, threads or clocks: each test builds workers with an identity and a Membership,
feeds them serialized `anna_pb2` messages, calls `end_epoch()` where a node's timer would, and
checks every message the workers would send. Placement expectations come from an independent
`_core.ClusterMap` built from the same nodes.
"""
from functools import reduce
from typing import Dict, List, Sequence, Tuple

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from anna_core import _core
from hydro_proto import anna_pb2

CLIENT = "tcp://client:1"
SUBSCRIBER = "tcp://subscriber:1"
Nodes = Dict[str, Tuple[int, int]]  # node id -> (tier, threads)


def addr(node: str, thread: int = 0) -> str:
    return f"tcp://{node}:{thread}"


def replication(r: Sequence[int]) -> anna_pb2.Replication:
    return anna_pb2.Replication(memory_global=r[0], memory_local=r[1], disk_global=r[2],
                                disk_local=r[3])


def membership(version: int, nodes: Nodes, rep=(1, 1, 0, 1), overrides=None) -> bytes:
    m = anna_pb2.Membership(version=version, vnodes=64, default_replication=replication(rep))
    for node, (tier, threads) in nodes.items():
        m.nodes.add(node_id=node, tier=tier, worker_addresses=[addr(node, t) for t in range(threads)])
    for key, r in (overrides or {}).items():
        m.overrides.add(key=key, replication=replication(r))
    return m.SerializeToString()


def cluster_map(nodes: Nodes, rep=(1, 1, 0, 1), overrides=None) -> "_core.ClusterMap":
    cm = _core.ClusterMap(default_replication=rep, vnodes=64)
    for node, (tier, threads) in nodes.items():
        cm.add_node(node, tier, [addr(node, t) for t in range(threads)])
    for key, r in (overrides or {}).items():
        cm.set_replication(key, r)
    return cm


def holders(cm, key: str) -> List[str]:
    return list(cm.responsible(key, 0)) + list(cm.responsible(key, 1))


def workers(nodes: Nodes, rep=(1, 1, 0, 1), version: int = 1, **kw) -> Dict[str, "_core.WorkerCore"]:
    m = membership(version, nodes, rep)
    return {addr(n, t): _core.WorkerCore(n, tier, t, addr(n, t), membership=m, **kw)
            for n, (tier, threads) in nodes.items() for t in range(threads)}


def put_tuple(key: str, lattice) -> anna_pb2.KeyTuple:
    return anna_pb2.KeyTuple(key=key, lattice_type=lattice.lattice_type, payload=lattice.serialize())


def request(core, req_type: int, *tuples: anna_pb2.KeyTuple, rid: str = "r") -> anna_pb2.KeyResponse:
    """Send one KeyRequest; the worker's only output must be its answer to CLIENT."""
    req = anna_pb2.KeyRequest(type=req_type, response_address=CLIENT, request_id=rid)
    req.tuples.extend(tuples)
    out = core.handle("request", req.SerializeToString())
    assert [(a, k) for a, k, _ in out] == [(CLIENT, "")]
    response = anna_pb2.KeyResponse.FromString(out[0][2])
    assert (response.type, response.request_id, response.responder) == (req_type, rid, core.address)
    assert [t.key for t in response.tuples] == [t.key for t in tuples]
    return response


def put(core, key: str, lattice) -> anna_pb2.KeyTuple:
    return request(core, anna_pb2.PUT, put_tuple(key, lattice)).tuples[0]


def get(core, key: str) -> anna_pb2.KeyTuple:
    return request(core, anna_pb2.GET, anna_pb2.KeyTuple(key=key)).tuples[0]


def subscribe(core, key: str, req_type=anna_pb2.SUBSCRIBE, who: str = SUBSCRIBER) -> anna_pb2.KeyTuple:
    return request(core, req_type, anna_pb2.KeyTuple(key=key, subscriber_address=who)).tuples[0]


def gossip_of(out) -> Dict[str, List[anna_pb2.KeyRequest]]:
    """Gossip messages by destination; asserts every output is gossip."""
    by_dest: Dict[str, List[anna_pb2.KeyRequest]] = {}
    for address, kind, payload in out:
        assert kind == "gossip"
        g = anna_pb2.KeyRequest.FromString(payload)
        assert g.response_address == "" and g.request_id == ""
        by_dest.setdefault(address, []).append(g)
    return by_dest


def updates_of(out) -> List[Tuple[str, anna_pb2.KeyResponse]]:
    result = []
    for address, kind, payload in out:
        assert kind == ""
        u = anna_pb2.KeyResponse.FromString(payload)
        assert u.type == anna_pb2.UPDATE and len(u.tuples) == 1
        result.append((address, u))
    return result


def decoded(t: anna_pb2.KeyTuple):
    assert t.error == anna_pb2.NO_ERROR
    return _core.deserialize(t.lattice_type, t.payload)


SOLO: Nodes = {"a": (0, 1)}
PAIRS = {
    "lww": (_core.LWWLattice(1, b"old"), _core.LWWLattice(2, b"new")),
    "set": (_core.SetLattice([b"x"]), _core.SetLattice([b"y"])),
    "ordered_set": (_core.OrderedSetLattice([b"b"]), _core.OrderedSetLattice([b"a"])),
    "max": (_core.MaxLattice(3), _core.MaxLattice(-7)),
    "map": (_core.MapLattice({b"k": 1, b"j": 5}), _core.MapLattice({b"k": 4})),
    "priority": (_core.PriorityLattice(2.0, b"slow"), _core.PriorityLattice(0.5, b"fast")),
    "single_causal": (_core.SingleKeyCausalLattice({"a": 1}, [b"x"]),
                      _core.SingleKeyCausalLattice({"b": 1}, [b"y"])),
    "multi_causal": (_core.MultiKeyCausalLattice({"a": 1}, {"d": {"a": 1}}, [b"x"]),
                     _core.MultiKeyCausalLattice({"a": 2}, {}, [b"z"])),
}


# ---------------------------------------------------------------- requests

@pytest.mark.parametrize("name", sorted(PAIRS))
def test_put_get_delete_each_lattice(name):
    a, b = PAIRS[name]
    core = workers(SOLO)[addr("a")]
    assert get(core, "k").error == anna_pb2.KEY_DNE
    first = put(core, "k", a)
    assert (first.error, first.lattice_type) == (anna_pb2.NO_ERROR, a.lattice_type)
    assert decoded(get(core, "k")) == a
    assert put(core, "k", b).error == anna_pb2.NO_ERROR
    merged = decoded(get(core, "k"))
    assert merged == a.merge(b) and type(merged) is type(a)
    assert core.value("k") == a.merge(b) and core.keys() == ["k"]
    assert request(core, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k")).tuples[0].error == anna_pb2.NO_ERROR
    assert get(core, "k").error == anna_pb2.KEY_DNE and core.value("k") is None
    assert request(core, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k")).tuples[0].error == anna_pb2.KEY_DNE


def test_tuple_errors_and_multi_tuple_requests():
    core = workers(SOLO, max_value_bytes=16)[addr("a")]
    assert put(core, "s", _core.SetLattice([b"x"])).error == anna_pb2.NO_ERROR
    response = request(
        core, anna_pb2.PUT,
        put_tuple("s", _core.MaxLattice(1)),                                  # stored as a set
        anna_pb2.KeyTuple(key="u", lattice_type=99, payload=b""),
        anna_pb2.KeyTuple(key="m", lattice_type=anna_pb2.SET, payload=b"\xff\xff"),
        put_tuple("big", _core.LWWLattice(1, b"v" * 64)),
        put_tuple("ok", _core.MaxLattice(5)))
    assert [t.error for t in response.tuples] == [
        anna_pb2.LATTICE_MISMATCH, anna_pb2.UNKNOWN_LATTICE, anna_pb2.MALFORMED,
        anna_pb2.VALUE_TOO_LARGE, anna_pb2.NO_ERROR]
    assert core.value("s") == _core.SetLattice([b"x"]) and core.keys() == ["ok", "s"]
    many = request(core, anna_pb2.GET, *[anna_pb2.KeyTuple(key=k) for k in ("ok", "nope", "s")])
    assert [t.error for t in many.tuples] == [anna_pb2.NO_ERROR, anna_pb2.KEY_DNE, anna_pb2.NO_ERROR]
    assert decoded(many.tuples[0]) == _core.MaxLattice(5)
    # Without a response address the request is applied and nothing is sent.
    silent = anna_pb2.KeyRequest(type=anna_pb2.PUT, tuples=[put_tuple("quiet", _core.MaxLattice(2))])
    assert core.handle("request", silent.SerializeToString()) == []
    assert core.value("quiet") == _core.MaxLattice(2)
    assert core.stats()["requests"] == 4 and core.stats()["tuples"] == 10


# ---------------------------------------------------------------- ownership

def test_before_any_membership_every_key_is_wrong_owner_without_addresses():
    core = _core.WorkerCore("a", 0, 0, addr("a"))
    assert not core.has_membership
    t = put(core, "k", _core.MaxLattice(1))
    assert t.error == anna_pb2.WRONG_OWNER and list(t.addresses) == []
    assert core.keys() == [] and core.end_epoch() == []


NODES3: Nodes = {"a": (0, 2), "b": (0, 1), "d": (1, 1)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(max_size=12), rep=st.sampled_from([(1, 1, 0, 1), (1, 1, 1, 1), (2, 2, 1, 1),
                                                        (0, 1, 1, 1)]))
def test_only_the_responsible_workers_serve_a_key(key, rep):
    cm = cluster_map(NODES3, rep)
    owners = holders(cm, key)
    for address, core in workers(NODES3, rep).items():
        t = put(core, key, _core.MaxLattice(1))
        if address in owners:
            assert t.error == anna_pb2.NO_ERROR and core.keys() == [key]
        else:
            assert t.error == anna_pb2.WRONG_OWNER
            assert list(t.addresses) == list(cm.addresses(key, False))
            assert core.keys() == []
            for req_type in (anna_pb2.GET, anna_pb2.DELETE, anna_pb2.SUBSCRIBE):
                answer = request(core, req_type, anna_pb2.KeyTuple(key=key, subscriber_address="x"))
                assert answer.tuples[0].error == anna_pb2.WRONG_OWNER
                assert list(answer.tuples[0].addresses) == list(cm.addresses(key, False))
    assert owners and len(owners) == len(set(owners))


def test_a_disk_worker_points_to_the_memory_replicas():
    nodes: Nodes = {"m": (0, 1), "d": (1, 1)}
    cores = workers(nodes, (1, 1, 0, 1))
    t = put(cores[addr("d")], "k", _core.MaxLattice(1))
    assert t.error == anna_pb2.WRONG_OWNER and list(t.addresses) == [addr("m")]
    cores = workers(nodes, (0, 1, 1, 1))
    t = put(cores[addr("m")], "k", _core.MaxLattice(1))
    assert t.error == anna_pb2.WRONG_OWNER and list(t.addresses) == [addr("d")]


# ---------------------------------------------------------------- gossip

PAIR: Nodes = {"a": (0, 1), "b": (0, 1)}
FULL = (2, 1, 0, 1)


def test_puts_of_an_epoch_gossip_once_merged_at_the_sender():
    cores = workers(PAIR, FULL)
    a, b = cores[addr("a")], cores[addr("b")]
    put(a, "k", _core.SetLattice([b"x"]))
    put(a, "k", _core.SetLattice([b"y"]))
    put(a, "j", _core.MaxLattice(4))
    assert a.changeset_size == 2
    out = a.end_epoch()
    by_dest = gossip_of(out)
    assert list(by_dest) == [addr("b")] and len(by_dest[addr("b")]) == 1
    g = by_dest[addr("b")][0]
    assert g.type == anna_pb2.PUT
    sent = {t.key: decoded(t) for t in g.tuples}
    assert sent == {"k": _core.SetLattice([b"x", b"y"]), "j": _core.MaxLattice(4)}
    assert a.end_epoch() == [] and a.changeset_size == 0
    assert b.handle(out[0][1], out[0][2]) == []
    assert b.value("k") == _core.SetLattice([b"x", b"y"]) and b.value("j") == _core.MaxLattice(4)
    assert b.end_epoch() == []  # received gossip is never re-gossiped
    assert a.stats()["gossip_out"] == 1 and b.stats()["gossip_in"] == 1


def test_gossip_is_merged_and_deletes_are_forwarded_before_puts():
    cores = workers(PAIR, FULL)
    a, b = cores[addr("a")], cores[addr("b")]
    put(b, "k", _core.SetLattice([b"b"]))
    put(b, "gone", _core.MaxLattice(1))
    b.end_epoch()
    put(a, "k", _core.SetLattice([b"a"]))
    for address, kind, payload in a.end_epoch():
        b.handle(kind, payload)
    assert b.value("k") == _core.SetLattice([b"a", b"b"])
    missing = request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="gone"))  # not on a: still sent
    assert missing.tuples[0].error == anna_pb2.KEY_DNE
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k"))
    put(a, "k", _core.SetLattice([b"again"]))
    out = a.end_epoch()
    kinds = [anna_pb2.KeyRequest.FromString(p).type for _, _, p in out]
    assert kinds == [anna_pb2.DELETE, anna_pb2.PUT]
    assert sorted(t.key for t in anna_pb2.KeyRequest.FromString(out[0][2]).tuples) == ["gone", "k"]
    for address, kind, payload in out:
        b.handle(kind, payload)
    assert b.keys() == ["k"] and b.value("k") == _core.SetLattice([b"again"])


def test_gossip_reaches_every_tier_and_bad_tuples_are_skipped():
    nodes: Nodes = {"m": (0, 1), "d": (1, 1)}
    cores = workers(nodes, (1, 1, 1, 1))
    m, d = cores[addr("m")], cores[addr("d")]
    put(m, "k", _core.MaxLattice(9))
    assert list(gossip_of(m.end_epoch())) == [addr("d")]
    bad = anna_pb2.KeyRequest(type=anna_pb2.PUT, tuples=[
        put_tuple("x", _core.MaxLattice(1)),
        anna_pb2.KeyTuple(key="y", lattice_type=anna_pb2.MAX, payload=b"\xff"),
        anna_pb2.KeyTuple(key="z", lattice_type=42)])
    put(d, "x", _core.SetLattice([b"s"]))
    assert d.handle("gossip", bad.SerializeToString()) == []
    assert d.keys() == ["x"] and d.value("x") == _core.SetLattice([b"s"])  # mismatch kept out
    dropped = d.stats()["dropped"]
    assert d.handle("gossip", anna_pb2.KeyRequest(type=anna_pb2.GET).SerializeToString()) == []
    assert d.stats()["dropped"] == dropped + 1


LATTICE_OF_KEY = {
    "set": st.builds(_core.SetLattice, st.lists(st.binary(max_size=2), max_size=3)),
    "max": st.builds(_core.MaxLattice, st.integers(-5, 5)),
    "lww": st.builds(_core.LWWLattice, st.integers(0, 3), st.binary(max_size=2)),
    "map": st.builds(_core.MapLattice, st.dictionaries(st.sampled_from([b"p", b"q"]), st.integers(0, 3))),
    "causal": st.builds(_core.SingleKeyCausalLattice,
                        st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2)),
                        st.lists(st.binary(max_size=1), max_size=2)),
}
op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 1), st.sampled_from(sorted(LATTICE_OF_KEY)).flatmap(
        lambda k: st.tuples(st.just(k), LATTICE_OF_KEY[k]))),
    st.tuples(st.just("epoch"), st.integers(0, 1), st.none()),
    st.tuples(st.just("deliver"), st.integers(0, 1000), st.none()))


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(op, max_size=40))
def test_random_interleavings_converge_to_the_merge_of_all_puts(ops):
    cores = list(workers(PAIR, FULL).values())
    in_flight: List[Tuple[str, str, bytes]] = []
    puts: Dict[str, list] = {}

    def deliver(message):
        address, kind, payload = message
        target = next(c for c in cores if c.address == address)
        assert target.handle(kind, payload) == []

    for name, i, arg in ops:
        if name == "put":
            key, value = arg
            assert put(cores[i], key, value).error == anna_pb2.NO_ERROR
            puts.setdefault(key, []).append(value)
        elif name == "epoch":
            in_flight.extend(cores[i].end_epoch())
        elif in_flight:
            deliver(in_flight.pop(i % len(in_flight)))
    for core in cores:
        in_flight.extend(core.end_epoch())
    for message in in_flight:
        deliver(message)
    for key, values in puts.items():
        expected = reduce(lambda x, y: x.merge(y), values)
        assert [c.value(key) for c in cores] == [expected, expected]
    assert all(c.end_epoch() == [] for c in cores)


# ---------------------------------------------------------------- hand-off

def fill(core, keys) -> Dict[str, "_core.SetLattice"]:
    values = {k: _core.SetLattice([k.encode()]) for k in keys}
    for k, v in values.items():
        assert put(core, k, v).error == anna_pb2.NO_ERROR
    core.end_epoch()
    return values


def handoffs_of(out) -> Dict[str, List[anna_pb2.KeyRequest]]:
    """Hand-off messages by destination; asserts every output is a hand-off from its sender."""
    by_dest: Dict[str, List[anna_pb2.KeyRequest]] = {}
    for address, kind, payload in out:
        assert kind == "handoff"
        h = anna_pb2.KeyRequest.FromString(payload)
        assert h.response_address and h.request_id
        by_dest.setdefault(address, []).append(h)
    return by_dest


def sent_keys(out) -> Dict[str, Dict[str, object]]:
    """destination -> {key: lattice} of handed-off values."""
    return {dest: {t.key: decoded(t) for h in hs for t in h.tuples if not t.subscriber_address}
            for dest, hs in handoffs_of(out).items()}


def deliver(cores: Dict[str, "_core.WorkerCore"], out) -> list:
    """Hands each message to the core at its address, and what the receivers send in turn;
    returns the messages nobody received (answers to clients, messages to absent workers)."""
    undelivered, queue = [], list(out)
    while queue:
        address, kind, payload = queue.pop(0)
        if address in cores and kind:
            queue.extend(cores[address].handle(kind, payload))
        else:
            undelivered.append((address, kind, payload))
    return undelivered


@pytest.mark.parametrize("rep", [(1, 1, 0, 1), (2, 1, 0, 1)])
def test_a_join_hands_new_replicas_their_keys_and_drops_the_rest(rep):
    before: Nodes = {"a": (0, 1), "b": (0, 1)}
    after: Nodes = dict(before, c=(0, 1))
    old, new = cluster_map(before, rep), cluster_map(after, rep)
    keys = [f"key-{i}" for i in range(80)]
    a = workers(before, rep)[addr("a")]
    mine = [k for k in keys if addr("a") in holders(old, k)]
    values = fill(a, mine)
    out = a.handle("membership", membership(2, after, rep))
    expected: Dict[str, Dict[str, object]] = {}
    for k in mine:
        for dest in set(holders(new, k)) - set(holders(old, k)) - {addr("a")}:
            expected.setdefault(dest, {})[k] = values[k]
    assert expected, "the join moved no key; pick other keys"
    assert sent_keys(out) == expected
    assert a.stats()["handed_off"] == len({k for d in expected.values() for k in d})
    # Nothing is dropped before the new replicas acknowledge.
    assert a.keys() == sorted(mine)
    assert a.stats()["handoff_pending"] == len({k for d in expected.values() for k in d})
    c = _core.WorkerCore("c", 0, 0, addr("c"), membership=membership(2, after, rep))
    b = _core.WorkerCore("b", 0, 0, addr("b"), membership=membership(2, after, rep))
    assert deliver({addr("a"): a, addr("b"): b, addr("c"): c}, out) == []
    assert {k: c.value(k) for k in c.keys()} == expected.get(addr("c"), {})
    assert a.keys() == sorted(k for k in mine if addr("a") in holders(new, k))
    assert a.stats()["handoff_pending"] == 0
    moved = next(k for k in mine if addr("a") not in holders(new, k))
    t = get(a, moved)
    assert t.error == anna_pb2.WRONG_OWNER and list(t.addresses) == list(new.addresses(moved, False))


def test_stale_or_same_placement_memberships_send_nothing():
    a = workers(PAIR)[addr("a")]
    old = cluster_map(PAIR)
    values = fill(a, [k for k in (f"k{i}" for i in range(30)) if addr("a") in holders(old, k)])
    assert a.handle("membership", membership(5, PAIR)) == []          # same placement
    assert a.handle("membership", membership(4, SOLO)) == []          # older: ignored
    assert a.keys() == sorted(values)
    t = put(a, next(k for k in (f"k{i}" for i in range(30)) if k not in values), _core.MaxLattice(1))
    assert t.error == anna_pb2.WRONG_OWNER                              # still two nodes
    assert a.handle("membership", membership(5, SOLO)) == []           # same version: applied
    a.set_now(a.now + 5 * 10**9)                                       # past the fetch window
    assert a.end_epoch() == []
    assert get(a, "anything").error == anna_pb2.KEY_DNE


def test_a_worker_left_out_of_the_membership_hands_off_and_drops_after_the_ack():
    a = workers(SOLO)[addr("a")]
    values = fill(a, ["x", "y", "z"])
    out = a.handle("membership", membership(2, {"b": (0, 1)}))
    assert sent_keys(out) == {addr("b"): values}
    assert a.keys() == ["x", "y", "z"] and a.stats()["handoff_pending"] == 3
    assert get(a, "x").error == anna_pb2.WRONG_OWNER
    b = _core.WorkerCore("b", 0, 0, addr("b"), membership=membership(2, {"b": (0, 1)}))
    assert deliver({addr("a"): a, addr("b"): b}, out) == []
    assert {k: b.value(k) for k in b.keys()} == values
    assert a.keys() == [] and a.stats()["handoff_pending"] == 0


def test_a_put_pending_gossip_reaches_every_replica_under_the_new_map():
    """A PUT still in the epoch's changeset when the placement changes reaches the replicas
    that held the key before (by gossip at the epoch's end) as well as the new ones (by
    hand-off), even though the writer itself no longer holds the key. (This pinned a bug: the
    old replica b never received the PUT.)"""
    before, after = PAIR, dict(PAIR, c=(0, 1))
    new = cluster_map(after, FULL)
    key = next(k for k in (f"k{i}" for i in range(100)) if addr("a") not in holders(new, k))
    cores = workers(before, FULL)
    a, b = cores[addr("a")], cores[addr("b")]
    put(a, key, _core.SetLattice([b"x"]))
    out = a.handle("membership", membership(2, after, FULL))
    assert sent_keys(out) == {addr("c"): {key: _core.SetLattice([b"x"])}}
    b.handle("membership", membership(2, after, FULL))
    c = _core.WorkerCore("c", 0, 0, addr("c"), membership=membership(2, after, FULL))
    everyone = {addr("a"): a, addr("b"): b, addr("c"): c}
    assert deliver(everyone, out) == []
    assert a.keys() == []                                    # acked by c: dropped
    gossip = a.end_epoch()
    assert sorted(gossip_of(gossip)) == sorted(set(holders(new, key)) - {addr("a")})
    assert deliver(everyone, gossip) == []
    assert b.value(key) == _core.SetLattice([b"x"]) and c.value(key) == _core.SetLattice([b"x"])


def test_replication_updates_hand_off_and_drop_only_the_named_keys():
    a = workers(PAIR)[addr("a")]
    old = cluster_map(PAIR)
    mine = [k for k in (f"k{i}" for i in range(40)) if addr("a") in holders(old, k)]
    values = fill(a, mine)
    hot, cold = mine[0], mine[1]
    update = anna_pb2.ReplicationUpdate()
    update.overrides.add(key=hot, replication=replication((2, 1, 0, 1)))
    update.overrides.add(key="absent", replication=replication((2, 1, 0, 1)))
    out = a.handle("replication", update.SerializeToString())
    assert sent_keys(out) == {addr("b"): {hot: values[hot]}}
    assert a.keys() == sorted(mine) and a.stats()["handoff_pending"] == 1
    b = workers(PAIR)[addr("b")]
    b.handle("replication", update.SerializeToString())
    assert deliver({addr("a"): a, addr("b"): b}, out) == []
    assert b.value(hot) == values[hot] and a.stats()["handoff_pending"] == 0
    assert a.keys() == sorted(mine)                                   # a still holds hot
    away = anna_pb2.ReplicationUpdate()
    away.overrides.add(key=cold, replication=replication((0, 1, 1, 1)))  # disk only: no disk node
    assert a.handle("replication", away.SerializeToString()) == []
    # No replica anywhere: dropping it would lose it, so a keeps it (an orphan) until a map
    # names a disk node (tests/test_anna_handoff.py).
    assert a.keys() == sorted(mine) and a.stats()["orphaned"] == 1


def test_replication_update_before_membership_is_replaced_by_the_membership():
    a = _core.WorkerCore("a", 0, 0, addr("a"))
    update = anna_pb2.ReplicationUpdate()
    update.overrides.add(key="k", replication=replication((0, 1, 1, 1)))
    assert a.handle("replication", update.SerializeToString()) == []
    a.handle("membership", membership(1, SOLO))
    assert put(a, "k", _core.MaxLattice(1)).error == anna_pb2.NO_ERROR


def test_a_restarted_disk_worker_sends_its_keys_on_its_first_membership(tmp_path):
    nodes: Nodes = {"d": (1, 1), "e": (1, 1)}
    rep = (0, 1, 2, 1)
    d = _core.WorkerCore("d", 1, 0, addr("d"), store_path=str(tmp_path / "d"),
                         membership=membership(1, {"d": (1, 1)}, rep))
    values = fill(d, ["p", "q"])
    del d  # closes RocksDB
    d = _core.WorkerCore("d", 1, 0, addr("d"), store_path=str(tmp_path / "d"))
    assert d.keys() == ["p", "q"] and d.value("p") == values["p"]
    out = d.handle("membership", membership(1, nodes, rep))
    assert sent_keys(out) == {addr("e"): values}
    assert d.keys() == ["p", "q"]


# ---------------------------------------------------------------- subscriptions

def test_subscribers_get_one_update_per_key_per_epoch_until_they_unsubscribe():
    cores = workers(PAIR, FULL)
    a, b = cores[addr("a")], cores[addr("b")]
    assert subscribe(a, "k").error == anna_pb2.NO_ERROR
    assert subscribe(a, "k").error == anna_pb2.NO_ERROR          # same address twice: one entry
    assert subscribe(a, "k", who="tcp://other:1").error == anna_pb2.NO_ERROR
    assert a.end_epoch() == []                                   # nothing changed yet
    put(a, "k", _core.SetLattice([b"1"]))
    put(a, "k", _core.SetLattice([b"2"]))
    put(a, "unwatched", _core.MaxLattice(1))
    out = a.end_epoch()
    pushes = updates_of([m for m in out if m[1] == ""])
    assert sorted(dest for dest, _ in pushes) == sorted([SUBSCRIBER, "tcp://other:1"])
    for _, u in pushes:
        assert u.responder == addr("a") and u.tuples[0].key == "k"
        assert decoded(u.tuples[0]) == _core.SetLattice([b"1", b"2"])
    assert a.end_epoch() == []
    # A change arriving by gossip also pushes, once.
    put(b, "k", _core.SetLattice([b"3"]))
    for dest, kind, payload in b.end_epoch():
        a.handle(kind, payload)
    pushes = updates_of(a.end_epoch())
    assert len(pushes) == 2 and decoded(pushes[0][1].tuples[0]) == _core.SetLattice([b"1", b"2", b"3"])
    assert a.stats()["updates_out"] == 4
    # A delete pushes KEY_DNE; unsubscribing stops the pushes.
    assert subscribe(a, "k", anna_pb2.UNSUBSCRIBE, who="tcp://other:1").error == anna_pb2.NO_ERROR
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k"))
    pushes = updates_of([m for m in a.end_epoch() if m[1] == ""])
    assert [(d, u.tuples[0].error) for d, u in pushes] == [(SUBSCRIBER, anna_pb2.KEY_DNE)]
    assert subscribe(a, "k", anna_pb2.UNSUBSCRIBE).error == anna_pb2.NO_ERROR
    assert subscribe(a, "k", anna_pb2.UNSUBSCRIBE).error == anna_pb2.KEY_DNE
    put(a, "k", _core.SetLattice([b"4"]))
    assert [m[1] for m in a.end_epoch()] == ["gossip"]


def test_subscribe_without_an_address_is_malformed():
    a = workers(SOLO)[addr("a")]
    assert subscribe(a, "k", who="").error == anna_pb2.MALFORMED
    put(a, "k", _core.MaxLattice(1))
    assert a.end_epoch() == []


# ---------------------------------------------------------------- malformed input

def test_unparsable_messages_raise_and_leave_the_worker_unchanged():
    a = workers(SOLO)[addr("a")]
    put(a, "k", _core.MaxLattice(1))
    for kind, payload in [("request", b"\xff\xff"), ("gossip", b"\x0a\xff"),
                          ("membership", b"\x12"), ("replication", b"\x0a\x05"),
                          ("nonsense", b"")]:
        with pytest.raises(ValueError, match="dropped"):
            a.handle(kind, payload)
    assert a.stats()["dropped"] == 5
    assert a.keys() == ["k"] and decoded(get(a, "k")) == _core.MaxLattice(1)


@pytest.mark.parametrize("req_type", [anna_pb2.NO_REQUEST, anna_pb2.UPDATE, 77])
def test_an_unknown_request_type_answers_malformed(req_type):
    a = workers(SOLO)[addr("a")]
    req = anna_pb2.KeyRequest(type=req_type, response_address=CLIENT, request_id="x",
                              tuples=[put_tuple("k", _core.MaxLattice(1))])
    (dest, kind, payload), = a.handle("request", req.SerializeToString())
    response = anna_pb2.KeyResponse.FromString(payload)
    assert (dest, response.error, len(response.tuples)) == (CLIENT, anna_pb2.MALFORMED, 0)
    assert a.keys() == []


tuples = st.builds(anna_pb2.KeyTuple, key=st.sampled_from(["k", "j", ""]),
                   lattice_type=st.integers(0, 10), payload=st.binary(max_size=20),
                   subscriber_address=st.sampled_from(["", SUBSCRIBER]))


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(["request", "gossip"]), raw=st.binary(max_size=64),
       req_type=st.integers(-1, 8), ts=st.lists(tuples, max_size=4), structured=st.booleans())
def test_arbitrary_requests_and_gossip_never_crash_the_worker(kind, raw, req_type, ts, structured):
    a = workers(SOLO)[addr("a")]
    if structured:
        raw = anna_pb2.KeyRequest(type=req_type, tuples=ts, response_address=CLIENT,
                                  request_id="f").SerializeToString()
    try:
        out = a.handle(kind, raw)
    except ValueError:
        assert a.stats()["dropped"] == 1
        return
    for dest, out_kind, payload in out:
        response = anna_pb2.KeyResponse.FromString(payload)
        assert out_kind == "" and response.responder == addr("a")
        assert response.error == anna_pb2.MALFORMED or len(response.tuples) == len(
            anna_pb2.KeyRequest.FromString(raw).tuples)
    a.end_epoch()
    assert get(a, "k").error in (anna_pb2.NO_ERROR, anna_pb2.KEY_DNE)
