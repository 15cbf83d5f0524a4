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
from anna_core.membership import (REPLICATION_INDEX_KEY, REPLICATION_PREFIX, ClusterMembership,
                                  Effects, Outgoing, Persist, PersistIndex, loaded_overrides,
                                  metadata_put, replication_metadata_key)
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
    """A routing that has heard no node for its startup grace knows the cluster is empty."""
    core = ClusterMembership(heartbeat_timeout=3.0, started_at=0.0)
    response = answer(core.address(anna_pb2.KeyAddressRequest(
        keys=["k"], response_address=CLIENT, request_id="q"), now=3.0),
        anna_pb2.KeyAddressResponse)
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
                out = worker.handle("request", request.SerializeToString())
                # Only the answer to the client counts (an owner may also fetch the key from
                # previous owners during a hand-off window, and answer once that is done).
                answers = [p for a, kind, p in out if a == CLIENT and kind == ""]
                owns = address in expected.responsible(key, tier)
                if not owns:
                    (payload,) = answers
                    assert anna_pb2.KeyResponse.FromString(payload).tuples[0].error == \
                        anna_pb2.WRONG_OWNER
                for payload in answers:
                    error = anna_pb2.KeyResponse.FromString(payload).tuples[0].error
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
    index = PersistIndex(REPLICATION_INDEX_KEY, ("hot",),
                         tuple(core.cluster_map.addresses(REPLICATION_INDEX_KEY, True)))
    assert effects.persist == [Persist(meta, Replication(0, 1, 1, 1).to_proto(),
                                       tuple(core.cluster_map.addresses(meta, True))), index]
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


# ---------------------------------------------------------------- leave, heartbeats, failures

def heartbeat_message(node_id: str, addresses: List[str], version: int = 0, tier: int = 0,
                      control: str = CONTROL, pending: int = 0):
    hb = anna_pb2.NodeHeartbeat(control_address=control, membership_version=version,
                                handoff_pending=pending)
    hb.node.node_id = node_id
    hb.node.tier = tier
    hb.node.worker_addresses.extend(addresses)
    return hb


def memberships(effects: Effects) -> Dict[str, anna_pb2.Membership]:
    """Worker address -> Membership sent to it (kind "membership")."""
    return {o.address: o.message for o in effects.send if o.kind == "membership"}


def test_a_leave_reaches_the_leaving_workers_and_acks_without_the_node():
    core = ClusterMembership()
    a, b = workers_of("a", 2), workers_of("b", 1)
    core.join(join_message("a", 0, a), now=0.0)
    core.join(join_message("b", 0, b), now=0.0)
    effects = core.leave(anna_pb2.NodeLeave(node_id="a", control_address="tcp://a-ctl:1"), now=1.0)
    assert core.version == 3 and core.node_ids() == ["b"]
    sent = memberships(effects)
    assert set(sent) == set(a + b) and {m.version for m in sent.values()} == {3}
    assert [n.node_id for n in sent[a[0]].nodes] == ["b"]
    (ack,) = [o for o in effects.send if o.kind is None]
    assert ack.address == "tcp://a-ctl:1" and ack.message == sent[b[0]]
    assert effects.forget == []  # the leaving workers still get the broadcast
    # Heartbeats the node sent before it stopped do not bring it back ...
    assert core.heartbeat(heartbeat_message("a", a, 2), now=1.1).send == []
    assert core.node_ids() == ["b"]
    # ... but a join does (a restarted node), and then its heartbeats count again.
    core.join(join_message("a", 0, a), now=2.0)
    assert core.node_ids() == ["a", "b"]


def test_leaving_an_unknown_node_is_logged_and_acked():
    core = ClusterMembership()
    core.join(join_message("b", 0, ["tcp://b:0"]))
    effects = core.leave(anna_pb2.NodeLeave(node_id="ghost", control_address="tcp://g:1"))
    assert core.version == 1 and memberships(effects) == {}
    assert [(o.address, o.message.version) for o in effects.send] == [("tcp://g:1", 1)]
    assert effects.log and "ghost" in effects.log[0][1]
    assert core.leave(anna_pb2.NodeLeave()).log[0][0] == logging.WARNING


def test_an_unknown_node_heartbeating_is_admitted_like_a_join():
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]), now=0.0)
    effects = core.heartbeat(heartbeat_message("b", ["tcp://b:0"], version=1), now=0.5)
    assert core.node_ids() == ["a", "b"] and core.version == 2
    assert set(memberships(effects)) == {"tcp://a:0", "tcp://b:0"}
    assert [o.address for o in effects.send if o.kind is None] == [CONTROL]
    # A known node heartbeating with the current version changes nothing.
    assert core.heartbeat(heartbeat_message("b", ["tcp://b:0"], version=2), now=0.6).send == []


def test_a_silent_node_is_removed_after_the_timeout_and_the_warning_names_it():
    core = ClusterMembership(heartbeat_period=1.0, heartbeat_timeout=3.0)
    core.join(join_message("a", 0, ["tcp://a:0"]), now=0.0)
    core.join(join_message("b", 0, ["tcp://b:0"]), now=0.0)
    core.heartbeat(heartbeat_message("a", ["tcp://a:0"], 2), now=2.5)
    assert core.tick(3.0).send == [] and core.node_ids() == ["a", "b"]  # exactly the timeout
    effects = core.tick(3.25)
    assert core.node_ids() == ["a"] and core.version == 3
    assert set(memberships(effects)) == {"tcp://a:0"} and effects.forget == ["tcp://b:0"]
    (warning,) = [text for level, text in effects.log if level == logging.WARNING]
    assert "node b silent for 3.25 s" in warning
    effects = core.tick(6.0)   # a heard at 2.5: silent 3.5 s
    assert core.node_ids() == [] and effects.forget == ["tcp://a:0"]


def test_a_node_behind_gets_the_membership_again_at_most_once_per_period():
    core = ClusterMembership(heartbeat_period=1.0)
    core.join(join_message("a", 0, ["tcp://a:0"]), now=0.0)
    core.join(join_message("b", 0, ["tcp://b:0"]), now=0.0)
    effects = core.heartbeat(heartbeat_message("a", ["tcp://a:0"], version=1), now=0.5)
    assert [(o.address, o.kind, o.message.version) for o in effects.send] == \
        [("tcp://a:0", "membership", 2)]
    assert core.version == 2
    assert core.heartbeat(heartbeat_message("a", ["tcp://a:0"], version=1), now=1.0).send == []
    assert len(core.heartbeat(heartbeat_message("a", ["tcp://a:0"], 1), now=1.6).send) == 1


def test_a_rival_routings_higher_version_is_overtaken_once():
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]), now=0.0)          # version 1
    effects = core.heartbeat(heartbeat_message("a", ["tcp://a:0"], version=5), now=0.5)
    assert {m.version for m in memberships(effects).values()} == {6} and core.version == 6
    # Once is enough: another rival version is adopted as a floor only.
    assert core.heartbeat(heartbeat_message("a", ["tcp://a:0"], version=9), now=0.6).send == []
    effects = core.join(join_message("b", 0, ["tcp://b:0"]), now=0.7)
    assert core.version == 10


def test_a_restarted_routing_recovers_before_its_first_broadcast():
    core = ClusterMembership(heartbeat_period=1.0, heartbeat_timeout=3.0)
    a, b = workers_of("a", 2), workers_of("b", 1)
    effects = core.heartbeat(heartbeat_message("a", a, version=7), now=10.0)
    assert core.recovering and effects.load_overrides and effects.send == []
    assert core.heartbeat(heartbeat_message("b", b, version=6), now=10.3).send == []
    # Lookups meanwhile are told routing is not ready: its ring is partial.
    assert answer(core.address(anna_pb2.KeyAddressRequest(keys=["k"], response_address=CLIENT)),
                  anna_pb2.KeyAddressResponse).error == anna_pb2.ROUTING_NOT_READY
    # A leave during recovery is acked only with the recovery broadcast.
    core.join(join_message("c", 0, ["tcp://c:0"], control="tcp://c-ctl:1"), now=10.4)
    leave = core.leave(anna_pb2.NodeLeave(node_id="c", control_address="tcp://c-ctl:1"), now=10.5)
    assert leave.send == []
    assert core.tick(11.2).send == [] and core.recovering   # 1.25 heartbeat periods
    effects = core.tick(11.25)
    assert not core.recovering and core.version == 8
    sent = memberships(effects)
    assert set(sent) == set(a + b + ["tcp://c:0"]) and {m.version for m in sent.values()} == {8}
    assert [n.node_id for n in sent[a[0]].nodes] == ["a", "b"]
    assert [(o.address, o.message.version) for o in effects.send if o.kind is None] == \
        [("tcp://c-ctl:1", 8)]
    assert [text for _, text in effects.log if "recovery over" in text]


def test_replication_overrides_are_indexed_and_reloaded_after_a_restart():
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]))
    effects = core.replicate(replicate_message({"x": (2, 1, 0, 1), "y": (1, 2, 0, 1)}))
    (index,) = [p for p in effects.persist if isinstance(p, PersistIndex)]
    assert index.key == REPLICATION_INDEX_KEY and index.members == ("x", "y")
    stored = {p.key: p.replication.SerializeToString() for p in effects.persist
              if isinstance(p, Persist)}
    put = metadata_put(index, 0, "r", "tcp://r:1").tuples[0]
    keys = sorted(k.decode() for k in _core.deserialize(put.lattice_type, put.payload).reveal())
    assert keys == ["x", "y"]
    # A new routing process reads them back; one set since it started wins.
    loaded, problems = loaded_overrides(keys + ["lost"], stored)
    assert problems == ["override of 'lost' listed in the index but not stored"]
    fresh_core = ClusterMembership()
    assert fresh_core.join(join_message("a", 0, ["tcp://a:0"])).load_overrides
    fresh_core.replicate(replicate_message({"y": (3, 1, 0, 1)}))
    effects = fresh_core.overrides_loaded(loaded)
    assert fresh_core.overrides == {"x": Replication(2, 1, 0, 1), "y": Replication(3, 1, 0, 1)}
    (update,) = [o.message for o in effects.send if o.kind == "replication"]
    assert [o.key for o in update.overrides] == ["x"]
    assert fresh_core.cluster_map.replication("x") == (2, 1, 0, 1)
    # During recovery the loaded overrides ride on the recovery broadcast.
    rec = ClusterMembership()
    rec.heartbeat(heartbeat_message("a", ["tcp://a:0"], 4), now=0.0)
    assert rec.overrides_loaded(loaded).send == []
    (m,) = memberships(rec.tick(5.0)).values()
    assert {o.key for o in m.overrides} == {"x", "y"}


def test_bad_configuration_is_refused_but_bad_input_never_raises():
    for bad in (dict(vnodes=0), dict(vnodes=True), dict(heartbeat_timeout=0)):
        with pytest.raises(ValueError):
            ClusterMembership(**bad)
    core = ClusterMembership()
    for kind in ("heartbeat", "leave"):
        effects = core.handle(kind, b"\xff\xff")
        assert effects.send == [] and effects.log[0][0] == logging.WARNING
    assert core.heartbeat(heartbeat_message("", ["tcp://x:0"]), 0.0).log[0][0] == logging.WARNING
    assert core.heartbeat(heartbeat_message("x", ["tcp://x:0"], tier=5), 0.0).send == []


# ---------------------------------------------------------------- properties: random histories

NAMES = ["a", "b", "c", "d"]
TIER = {"a": 0, "b": 0, "c": 0, "d": 1}      # d is a disk node, the others memory nodes
TIMEOUT = 3.0
steps = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(NAMES), st.integers(0, 2)),
    st.tuples(st.just("leave"), st.sampled_from(NAMES)),
    st.tuples(st.just("heartbeat"), st.sampled_from(NAMES), st.sampled_from(
        ["current", "behind", "ahead", "zero"])),
    st.tuples(st.just("advance"), st.sampled_from([0.1, 0.5, 1.0, 2.9, 3.0, 3.1, 7.0])),
    st.tuples(st.just("tick"))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(history=steps)
def test_random_histories_keep_liveness_versions_and_broadcasts_right(history):
    core = ClusterMembership(vnodes=8, heartbeat_period=1.0, heartbeat_timeout=TIMEOUT)
    now = 0.0
    members: Dict[str, float] = {}        # model: member -> last heard
    departed: Dict[str, float] = {}
    incarnation = {n: 0 for n in NAMES}
    recovering_until = None
    ever_had = False
    last_version = 0

    def addresses(n):
        return [f"tcp://{n}-{incarnation[n]}:{t}" for t in range(2)]

    for step in history:
        kind = step[0]
        if kind == "advance":
            now += step[1]
            continue
        if kind == "join":
            incarnation[step[1]] = step[2]
            ever_had = True
            effects = core.join(join_message(step[1], TIER[step[1]], addresses(step[1])), now)
            members[step[1]] = now
            departed.pop(step[1], None)
        elif kind == "leave":
            effects = core.leave(anna_pb2.NodeLeave(node_id=step[1], control_address=CONTROL), now)
            if [n for n in members if TIER[n] == TIER[step[1]]] != [step[1]]:
                # (the last node of its tier is refused)
                members.pop(step[1], None)
                departed[step[1]] = now
        elif kind == "heartbeat":
            reported = {"current": core.version, "behind": max(0, core.version - 1),
                        "ahead": core.version + 3, "zero": 0}[step[2]]
            if (step[1] not in members and recovering_until is None
                    and step[1] not in departed
                    and (reported > core.version or (not members and not ever_had))):
                recovering_until = now + 1.25
            effects = core.heartbeat(heartbeat_message(step[1], addresses(step[1]), reported,
                                                       TIER[step[1]]), now)
            if step[1] not in departed:
                members[step[1]] = now
                ever_had = True
        else:
            effects = core.tick(now)
            if recovering_until is not None:
                if now >= recovering_until:
                    recovering_until = None
            else:
                for n, heard in list(members.items()):
                    if now - heard > TIMEOUT:
                        del members[n]
                for n, when in list(departed.items()):
                    if now - when > 10 * TIMEOUT:
                        del departed[n]
        assert core.recovering == (recovering_until is not None)
        # Liveness: exactly the nodes heard from within the timeout (and not left) are members.
        assert core.node_ids() == sorted(members)
        # Versions strictly increase from broadcast to broadcast and never go back.
        sent = memberships(effects)
        versions = {m.version for m in sent.values()}
        assert len(versions) <= 1 and core.version >= last_version
        if not sent:
            continue
        (v,) = versions
        m = next(iter(sent.values()))
        assert v == core.version and [n.node_id for n in m.nodes] == core.node_ids()
        if v == last_version:
            # Not a new version: the current one sent again to a node reporting an older one.
            assert kind == "heartbeat" and set(sent) <= set(addresses(step[1]))
            continue
        assert v > last_version
        last_version = v
        # A new version reaches every worker of the new membership.
        everyone = {a for n in m.nodes for a in n.worker_addresses}
        assert everyone <= set(sent), (kind, everyone - set(sent))


def test_the_last_node_cannot_leave():
    core = ClusterMembership()
    core.join(join_message("a", 0, ["tcp://a:0"]))
    effects = core.leave(anna_pb2.NodeLeave(node_id="a", control_address="tcp://a-ctl:1"))
    assert core.node_ids() == ["a"] and core.version == 1 and memberships(effects) == {}
    (ack,) = effects.send
    assert ack.address == "tcp://a-ctl:1" and [n.node_id for n in ack.message.nodes] == ["a"]
    assert effects.log[0][0] == logging.WARNING and "last node" in effects.log[0][1]


def test_a_restarted_routing_reached_first_by_a_new_nodes_join_recovers_before_broadcasting():
    # A routing pod replaced during a rolling upgrade: the first message it gets is a new
    # memory node's join, then the running nodes' heartbeats (version 10). Admitting them one
    # heartbeat at a time would broadcast partial rings (no disk node) above the cluster's.
    core = ClusterMembership(heartbeat_period=1.0, recovery_period=1.25)
    core.join(join_message("memory-new", anna_pb2.MEMORY, ["tcp://n:0"]), now=0.0)
    effects = core.heartbeat(heartbeat_message("memory-old", ["tcp://m:0"], 10), now=0.1)
    assert core.recovering and memberships(effects) == {}
    effects = core.heartbeat(heartbeat_message("disk-0", ["tcp://d:0"], 10, anna_pb2.DISK),
                             now=0.2)
    assert memberships(effects) == {}
    assert memberships(core.tick(1.0)) == {}
    sent = memberships(core.tick(1.4))
    assert set(sent) == {"tcp://n:0", "tcp://m:0", "tcp://d:0"}
    assert {m.version for m in sent.values()} == {11}
    assert [n.node_id for n in sent["tcp://d:0"].nodes] == ["disk-0", "memory-new", "memory-old"]


def test_the_last_node_of_a_tier_cannot_leave_while_the_other_tier_has_nodes():
    # Memory-only keys would have no owner in a map without a memory node; a routing that
    # does not know the tier's new node yet (a rolling upgrade) must refuse, not empty it.
    core = ClusterMembership()
    core.join(join_message("memory-a", anna_pb2.MEMORY, ["tcp://a:0"]))
    core.join(join_message("disk-d", anna_pb2.DISK, ["tcp://d:0"]))
    effects = core.leave(anna_pb2.NodeLeave(node_id="memory-a", control_address="tcp://a-ctl:1"))
    assert core.node_ids() == ["disk-d", "memory-a"] and memberships(effects) == {}
    (ack,) = effects.send
    assert "memory-a" in [n.node_id for n in ack.message.nodes]
    assert effects.log[0][0] == logging.WARNING and "last node of tier" in effects.log[0][1]
    # Once the tier has another node, the same leave is accepted and broadcast.
    core.join(join_message("memory-b", anna_pb2.MEMORY, ["tcp://b:0"]))
    effects = core.leave(anna_pb2.NodeLeave(node_id="memory-a", control_address="tcp://a-ctl:1"))
    assert core.node_ids() == ["disk-d", "memory-b"]
    assert set(memberships(effects)) == {"tcp://a:0", "tcp://b:0", "tcp://d:0"}


def test_a_periodic_refresh_adopts_overrides_set_through_another_routing():
    core = ClusterMembership(override_refresh_period=5.0, heartbeat_timeout=100.0)
    core.join(join_message("a", 0, ["tcp://a:0"]), now=0.0)
    assert not core.tick(0.0).refresh_overrides               # the first period starts now
    assert not core.tick(4.9).refresh_overrides
    assert core.tick(5.0).refresh_overrides and not core.tick(5.1).refresh_overrides
    core.replicate(replicate_message({"mine": (2, 1, 0, 1)}), now=10.0)
    stored = {"mine": Replication(1, 1, 0, 1), "theirs": Replication(3, 1, 0, 1)}
    # within the grace period this routing's own write may not be in the KVS yet: kept
    effects = core.overrides_refreshed(stored, now=12.0)
    assert core.overrides == {"mine": Replication(2, 1, 0, 1), "theirs": Replication(3, 1, 0, 1)}
    (update,) = [o.message for o in effects.send if o.kind == "replication"]
    assert [o.key for o in update.overrides] == ["theirs"]
    assert core.cluster_map.replication("theirs") == (3, 1, 0, 1)
    # later the KVS's value (the last writer across routings) wins
    core.overrides_refreshed(stored, now=16.0)
    assert core.overrides["mine"] == Replication(1, 1, 0, 1)
    # nothing new: nothing sent
    assert core.overrides_refreshed(stored, now=30.0).send == []
