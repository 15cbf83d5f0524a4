"""Routing's membership core (`anna_core.membership`) tested directly: no sockets, no processes.

Placement answers are checked against an independent `_core.ClusterMap` and against the
kernel's own worker (`_core.WorkerCore`) fed the Membership the core broadcasts, so routing
and workers are shown to agree on who owns a key.
"""
import logging
from typing import Dict, List, Tuple

import pytest
from hypothesis import given, settings, strategies as st

from anna_core import _core
from anna_core.config import Replication
from anna_core.membership import (REPLICATION_PREFIX, ClusterMembership, Effects, Outgoing,
                                  Persist, metadata_put, replication_metadata_key)
from hydro_proto import anna_pb2

CONTROL = "tcp://node-control:1"
CLIENT = "tcp://client:1"


def join_message(node_id: str, tier: int, addresses: List[str], control: str = CONTROL):
    join = anna_pb2.NodeJoin(control_address=control)
    join.node.node_id = node_id
    join.node.tier = tier
    join.node.worker_addresses.extend(addresses)
    return join


def workers_of(node_id: str, threads: int) -> List[str]:
    return [f"tcp://{node_id}:{t}" for t in range(threads)]


def replicate_message(overrides: Dict[str, Tuple[int, int, int, int]], rid: str = "r1"):
    request = anna_pb2.SetReplication(response_address=CLIENT, request_id=rid)
    for key, r in overrides.items():
        request.replications.add(key=key, replication=Replication(*r).to_proto())
    return request


def sends(effects: Effects) -> List[Tuple[str, str]]:
    return [(o.address, o.kind) for o in effects.send]


def answer(effects: Effects, message_type):
    (out,) = [o for o in effects.send if o.address == CLIENT]
    assert out.kind is None and isinstance(out.message, message_type)
    return out.message


# ---------------------------------------------------------------- joins

def test_a_join_broadcasts_the_membership_and_acks_it():
    core = ClusterMembership(Replication(1, 1, 1, 1), vnodes=32)
    m0 = workers_of("memory-0", 2)
    effects = core.join(join_message("memory-0", anna_pb2.MEMORY, m0))
    assert core.version == 1
    assert sends(effects) == [(m0[0], "membership"), (m0[1], "membership"), (CONTROL, None)]
    ack = effects.send[-1].message
    assert all(o.message == ack for o in effects.send)
    assert ack.version == 1 and ack.vnodes == 32
    assert [(n.node_id, n.tier, list(n.worker_addresses)) for n in ack.nodes] == \
        [("memory-0", anna_pb2.MEMORY, m0)]
    assert ack.default_replication == Replication(1, 1, 1, 1).to_proto()
    assert effects.forget == [] and effects.persist == []
    assert [level for level, _ in effects.log] == [logging.INFO]

    d0 = workers_of("disk-0", 1)
    effects = core.join(join_message("disk-0", anna_pb2.DISK, d0, control=""))
    assert core.version == 2
    # Every worker of every node (the map lists nodes by id) learns it; no ack without address.
    assert sends(effects) == [(d0[0], "membership"), (m0[0], "membership"), (m0[1], "membership")]
    assert [n.node_id for n in effects.send[0].message.nodes] == ["disk-0", "memory-0"]
    assert core.membership() == effects.send[0].message


def test_a_rejoin_replaces_the_node_and_forgets_its_old_addresses():
    core = ClusterMembership()
    core.join(join_message("memory-1", 0, workers_of("memory-1", 1)))
    core.join(join_message("memory-0", 0, ["tcp://old:0", "tcp://kept:0"]))
    effects = core.join(join_message("memory-0", 0, ["tcp://kept:0", "tcp://new:0"]))
    assert core.version == 3
    assert effects.forget == ["tcp://old:0"]
    assert core.cluster_map.nodes() == [("memory-0", 0, ["tcp://kept:0", "tcp://new:0"]),
                                        ("memory-1", 0, workers_of("memory-1", 1))]
    assert sends(effects) == [("tcp://kept:0", "membership"), ("tcp://new:0", "membership"),
                              ("tcp://memory-1:0", "membership"), (CONTROL, None)]
    response = core.address_response([f"k{i}" for i in range(50)])
    assert "tcp://old:0" not in {a for ka in response.addresses for a in ka.addresses}


@pytest.mark.parametrize("join", [
    join_message("", 0, ["tcp://a:0"]),
    join_message("a", 0, []),
    join_message("a", 7, ["tcp://a:0"]),
])
def test_an_incomplete_join_changes_nothing(join):
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:1"]))
    effects = core.join(join)
    assert effects.send == [] and effects.forget == []
    assert [level for level, _ in effects.log] == [logging.WARNING]
    assert core.version == 1 and core.cluster_map.nodes() == [("a", 0, ["tcp://a:1"])]


# ---------------------------------------------------------------- address lookups

def test_no_nodes_is_an_error_answer():
    core = ClusterMembership()
    response = answer(core.address(anna_pb2.KeyAddressRequest(
        keys=["k"], response_address=CLIENT, request_id="q")), anna_pb2.KeyAddressResponse)
    assert (response.error, response.request_id, response.membership_version) == \
        (anna_pb2.NO_NODES, "q", 0)
    assert [(a.key, list(a.addresses)) for a in response.addresses] == [("k", [])]


def test_all_tiers_adds_the_disk_replicas():
    core = ClusterMembership(Replication(1, 1, 1, 1))
    core.join(join_message("m", 0, ["tcp://m:0"]))
    core.join(join_message("d", 1, ["tcp://d:0"]))
    for all_tiers, expected in [(False, ["tcp://m:0"]), (True, ["tcp://m:0", "tcp://d:0"])]:
        response = answer(core.address(anna_pb2.KeyAddressRequest(
            keys=["k"], all_tiers=all_tiers, response_address=CLIENT)), anna_pb2.KeyAddressResponse)
        assert list(response.addresses[0].addresses) == expected


def test_a_request_without_response_address_gets_no_answer():
    core = ClusterMembership()
    effects = core.address(anna_pb2.KeyAddressRequest(keys=["k"]))
    assert effects.send == [] and [lvl for lvl, _ in effects.log] == [logging.WARNING]


node_specs = st.dictionaries(
    st.sampled_from(["m0", "m1", "m2", "d0", "d1"]), st.integers(1, 3), min_size=1)
replications = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2), st.integers(0, 2))


@settings(max_examples=60, deadline=None)
@given(nodes=node_specs, rep=replications, keys=st.lists(st.text(max_size=10), min_size=1,
                                                        max_size=20, unique=True),
       all_tiers=st.booleans(), order=st.randoms(use_true_random=False))
def test_lookups_match_the_kernels_placement_and_its_workers(nodes, rep, keys, all_tiers, order):
    core = ClusterMembership(Replication(*rep), vnodes=16)
    expected = _core.ClusterMap(default_replication=rep, vnodes=16)
    names = sorted(nodes)
    order.shuffle(names)
    for name in names:
        tier = 0 if name.startswith("m") else 1
        core.join(join_message(name, tier, workers_of(name, nodes[name])))
        expected.add_node(name, tier, workers_of(name, nodes[name]))
    assert core.version == len(nodes)
    response = answer(core.address(anna_pb2.KeyAddressRequest(
        keys=keys, all_tiers=all_tiers, response_address=CLIENT, request_id="q")),
        anna_pb2.KeyAddressResponse)
    got = {a.key: list(a.addresses) for a in response.addresses}
    assert got == {k: list(expected.addresses(k, all_tiers)) for k in keys}
    assert (response.error == anna_pb2.NO_NODES) == any(not v for v in got.values())
    assert response.membership_version == len(nodes)
    # Workers given the broadcast membership own exactly the keys routing sends to them.
    membership = core.membership().SerializeToString()
    for name in names:
        tier = 0 if name.startswith("m") else 1
        for thread, address in enumerate(workers_of(name, nodes[name])):
            worker = _core.WorkerCore(name, tier, thread, address, membership=membership)
            for key in keys:
                request = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=CLIENT)
                request.tuples.add(key=key)
                (_, _, payload), = worker.handle("request", request.SerializeToString())
                error = anna_pb2.KeyResponse.FromString(payload).tuples[0].error
                owns = address in expected.responsible(key, tier)
                assert error == (anna_pb2.KEY_DNE if owns else anna_pb2.WRONG_OWNER)


# ---------------------------------------------------------------- replication overrides

def test_replicate_updates_broadcasts_persists_and_answers():
    core = ClusterMembership(Replication(1, 1, 1, 1))
    m, d = workers_of("memory-0", 1), workers_of("disk-0", 1)
    core.join(join_message("memory-0", 0, m))
    core.join(join_message("disk-0", 1, d))
    effects = core.replicate(replicate_message({"hot": (0, 1, 1, 1)}))
    assert core.overrides == {"hot": Replication(0, 1, 1, 1)}
    assert core.cluster_map.replication("hot") == (0, 1, 1, 1)
    assert sends(effects) == [(d[0], "replication"), (m[0], "replication"), (CLIENT, None)]
    update = effects.send[0].message
    assert isinstance(update, anna_pb2.ReplicationUpdate)
    assert [(o.key, o.replication.disk_global, o.replication.memory_global)
            for o in update.overrides] == [("hot", 1, 0)]
    meta = replication_metadata_key("hot")
    assert meta == REPLICATION_PREFIX + "hot"
    assert effects.persist == [Persist(meta, Replication(0, 1, 1, 1).to_proto(),
                                       tuple(core.cluster_map.addresses(meta, True)))]
    assert set(effects.persist[0].addresses) == {m[0], d[0]}
    response = answer(effects, anna_pb2.KeyAddressResponse)
    assert response.request_id == "r1" and response.error == anna_pb2.NO_ERROR
    assert [(a.key, list(a.addresses)) for a in response.addresses] == [("hot", d)]
    # Nodes joining later learn the override; a second override of the key replaces it.
    ack = core.join(join_message("memory-1", 0, workers_of("memory-1", 1))).send[-1].message
    assert [(o.key, o.replication.memory_global) for o in ack.overrides] == [("hot", 0)]
    core.replicate(replicate_message({"hot": (2, 1, 0, 1)}))
    assert core.membership().overrides[0].replication == Replication(2, 1, 0, 1).to_proto()
    assert len(core.cluster_map.addresses("hot", False)) == 2


def test_replicate_without_nodes_keeps_the_override_in_routing_only():
    core = ClusterMembership()
    effects = core.replicate(replicate_message({"k": (2, 1, 0, 1)}))
    assert effects.persist == [] and sends(effects) == [(CLIENT, None)]
    assert any(level == logging.WARNING for level, _ in effects.log)
    assert answer(effects, anna_pb2.KeyAddressResponse).error == anna_pb2.NO_NODES
    assert core.overrides == {"k": Replication(2, 1, 0, 1)}


def test_an_empty_replicate_only_answers():
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]))
    effects = core.replicate(replicate_message({}))
    assert sends(effects) == [(CLIENT, None)] and effects.persist == []
    assert core.overrides == {}


def test_metadata_put_is_an_lww_put_of_the_serialized_replication():
    replication = Replication(0, 1, 2, 1).to_proto()
    request = metadata_put(Persist("__anna__/replication/k", replication, ("tcp://a:0",)),
                           timestamp=42, request_id="routing-1", response_address="tcp://r:1")
    assert (request.type, request.request_id, request.response_address) == \
        (anna_pb2.PUT, "routing-1", "tcp://r:1")
    (t,) = request.tuples
    value = _core.deserialize(t.lattice_type, t.payload)
    assert t.key == "__anna__/replication/k" and value == _core.LWWLattice(42, replication.SerializeToString())


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(["a", "b", "c"]), st.integers(1, 2)),
    st.tuples(st.just("replicate"), st.sampled_from(["x", "y"]), replications)), max_size=12))
def test_the_membership_message_always_describes_the_state(steps):
    core = ClusterMembership(Replication(1, 1, 0, 1), vnodes=8)
    nodes: Dict[str, List[str]] = {}
    overrides: Dict[str, Tuple[int, ...]] = {}
    for step in steps:
        if step[0] == "join":
            _, name, threads = step
            nodes[name] = [f"tcp://{name}-{len(nodes)}:{t}" for t in range(threads)]
            core.join(join_message(name, 0, nodes[name]))
        else:
            _, key, rep = step
            overrides[key] = rep
            core.replicate(replicate_message({key: rep}))
    m = core.membership()
    assert m.version == sum(1 for s in steps if s[0] == "join") and m.vnodes == 8
    assert {n.node_id: list(n.worker_addresses) for n in m.nodes} == nodes
    assert {o.key: Replication.from_proto(o.replication).as_tuple() for o in m.overrides} == overrides
    assert core.worker_addresses() == [a for name in sorted(nodes) for a in nodes[name]]


# ---------------------------------------------------------------- raw messages

def test_handle_parses_and_dispatches():
    core = ClusterMembership()
    effects = core.handle("join", join_message("a", 0, ["tcp://a:0"]).SerializeToString())
    assert sends(effects) == [("tcp://a:0", "membership"), (CONTROL, None)]
    request = anna_pb2.KeyAddressRequest(keys=["k"], response_address=CLIENT, request_id="q")
    effects = core.handle("address", request.SerializeToString())
    assert list(answer(effects, anna_pb2.KeyAddressResponse).addresses[0].addresses) == ["tcp://a:0"]
    effects = core.handle("replicate", replicate_message({"k": (1, 1, 0, 1)}).SerializeToString())
    assert sends(effects) == [("tcp://a:0", "replication"), (CLIENT, None)]


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(["join", "address", "replicate", "membership", "nonsense"]),
       payload=st.binary(max_size=48))
def test_arbitrary_input_never_raises(kind, payload):
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]))
    effects = core.handle(kind, payload)
    assert isinstance(effects, Effects)
    assert all(isinstance(o, Outgoing) for o in effects.send)
    if kind in ("membership", "nonsense"):
        assert effects.send == [] and [lvl for lvl, _ in effects.log] == [logging.WARNING]
    assert core.version in (1, 2)
