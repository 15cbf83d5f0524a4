"""Safe placement changes in the kernel's sans-I/O worker (`_core.WorkerCore`): acknowledged
hand-off, the fetch window, timestamped tombstones.

No sockets, threads or clocks: the workers' clocks are set explicitly (`set_now`), and every
message a worker returns is routed by the test to the worker it is addressed to (or withheld,
to play a lost message or a dead worker). Expected placements come from an independent
`_core.ClusterMap`.
"""
from typing import Dict, List

import pytest

from anna_core import _core
from hydro_proto import anna_pb2
from test_anna_worker_core import (CLIENT, SUBSCRIBER, Nodes, addr, cluster_map, decoded, deliver,
                                   fill, get, holders, membership, put, put_tuple, replication,
                                   request, sent_keys, subscribe, updates_of)

MS = 10**6
PAIR: Nodes = {"a": (0, 1), "b": (0, 1)}
TRIO: Nodes = dict(PAIR, c=(0, 1))


def core(node: str, nodes: Nodes, version: int = 1, rep=(1, 1, 0, 1), **kw) -> "_core.WorkerCore":
    return _core.WorkerCore(node, nodes[node][0], 0, addr(node),
                            membership=membership(version, nodes, rep), **kw)


def moved_keys(before: Nodes, after: Nodes, frm: str, to: str, n: int = 200, rep=(1, 1, 0, 1)):
    old, new = cluster_map(before, rep), cluster_map(after, rep)
    return [k for k in (f"k{i}" for i in range(n))
            if holders(old, k) == [addr(frm)] and holders(new, k) == [addr(to)]]


def kinds(out) -> List[str]:
    return [k for _, k, _ in out]


# ---------------------------------------------------------------- acknowledged hand-off

def test_a_handoff_is_kept_until_acked_then_dropped_and_resent_after_the_retry_period():
    keys = moved_keys(PAIR, TRIO, "a", "c")
    assert len(keys) >= 2
    a = core("a", PAIR, handoff_retry_ms=500, now_ns=1000 * MS)
    values = fill(a, keys)
    out = a.handle("membership", membership(2, TRIO))
    assert sent_keys(out) == {addr("c"): values}
    assert a.stats()["handoff_pending"] == len(keys)
    # The hand-off is lost: nothing is dropped, and nothing is resent before the retry period.
    a.set_now(1499 * MS)
    assert a.end_epoch() == []
    assert a.keys() == sorted(keys) and get(a, keys[0]).error == anna_pb2.WRONG_OWNER
    a.set_now(1500 * MS)
    again = a.end_epoch()
    assert sent_keys(again) == {addr("c"): values}
    assert a.stats()["handoff_resent"] == 1
    # The resend is acked: every key is dropped and nothing is pending or resent any more.
    c = core("c", TRIO, version=2)
    assert deliver({addr("a"): a, addr("c"): c}, again) == []
    assert {k: c.value(k) for k in c.keys()} == values
    assert a.keys() == [] and a.stats()["handoff_pending"] == 0
    a.set_now(5000 * MS)
    assert a.end_epoch() == []
    # A late ack of the first (lost) send changes nothing.
    late = c.handle("handoff", out[0][2])
    assert kinds(late) == ["handoff_ack"] and a.handle("handoff_ack", late[0][2]) == []
    assert a.keys() == []


def test_an_ack_only_covers_the_keys_and_the_worker_it_names():
    nodes4: Nodes = dict(TRIO, d=(0, 1))
    rep = (2, 1, 0, 1)
    old, new = cluster_map(PAIR, rep), cluster_map(nodes4, rep)
    keys = [k for k in (f"k{i}" for i in range(200)) if addr("a") not in holders(new, k)
            and len(set(holders(new, k)) - set(holders(old, k))) == 2]
    assert keys, "no key moves from a to two new replicas"
    key = keys[0]
    a = core("a", PAIR, rep=rep)
    fill(a, [key])
    out = a.handle("membership", membership(2, nodes4, rep))
    targets = sorted(set(holders(new, key)) - set(holders(old, key)))
    assert sorted(sent_keys(out)) == targets
    receivers = {t: _core.WorkerCore(t[6], 0, 0, t, membership=membership(2, nodes4, rep))
                 for t in targets}
    first = next(m for m in out if m[0] == targets[0])
    ack = receivers[targets[0]].handle("handoff", first[2])
    assert a.handle("handoff_ack", ack[0][2]) == []
    assert a.keys() == [key] and a.stats()["handoff_pending"] == 1   # the other has not acked
    forged = anna_pb2.KeyResponse.FromString(ack[0][2])
    forged.responder = "tcp://stranger:0"
    a.handle("handoff_ack", forged.SerializeToString())
    assert a.keys() == [key]
    second = next(m for m in out if m[0] == targets[1])
    a.handle("handoff_ack", receivers[targets[1]].handle("handoff", second[2])[0][2])
    assert a.keys() == [] and a.stats()["handoff_pending"] == 0


def test_a_leaving_worker_hands_every_key_and_subscription_to_the_new_owners():
    a = core("a", TRIO)
    mine = [k for k in (f"k{i}" for i in range(60)) if holders(cluster_map(TRIO), k) == [addr("a")]]
    values = fill(a, mine[:3])
    subscribe(a, mine[0])                           # a key with a value
    subscribe(a, mine[5], who="tcp://watcher:1")    # a key with no value yet
    left: Nodes = {"b": (0, 1), "c": (0, 1)}
    out = a.handle("membership", membership(2, left))
    new = cluster_map(left)
    expected: Dict[str, Dict[str, object]] = {}
    for k in mine[:3]:
        expected.setdefault(holders(new, k)[0], {})[k] = values[k]
    assert {d: v for d, v in sent_keys(out).items() if v} == expected
    subs = {(dest, t.key, t.subscriber_address) for dest, kind, p in out
            for t in anna_pb2.KeyRequest.FromString(p).tuples if t.subscriber_address}
    assert subs == {(holders(new, mine[0])[0], mine[0], SUBSCRIBER),
                    (holders(new, mine[5])[0], mine[5], "tcp://watcher:1")}
    assert a.stats()["handoff_pending"] == 3 + 2
    others = {addr(n): core(n, left, version=2) for n in left}
    assert deliver(dict(others, **{addr("a"): a}), out) == []
    assert a.keys() == [] and a.stats()["handoff_pending"] == 0
    # The subscriptions now live at the new owners: a write there pushes to the subscribers.
    for key, who in ((mine[0], SUBSCRIBER), (mine[5], "tcp://watcher:1")):
        owner = others[holders(new, key)[0]]
        put(owner, key, _core.SetLattice([b"later"]))
        pushes = updates_of([m for m in owner.end_epoch() if m[1] == ""])
        assert [(d, u.tuples[0].key) for d, u in pushes] == [(who, key)]


def test_a_key_with_no_replica_under_the_new_map_is_kept_until_a_map_names_one():
    # A memory-only key on the tier's only node. A routing that does not know the tier's new
    # node removes the leaver: the map has no memory node, so the key has no replica at all.
    nodes: Nodes = {"a": (0, 1), "d": (1, 1)}
    a = core("a", nodes)
    values = fill(a, ["reg-1", "reg-2"])
    subscribe(a, "reg-1")
    assert a.handle("membership", membership(2, {"d": (1, 1)})) == []
    # Kept, not dropped; while a's node is out of the map they are pending hand-off, so a
    # leave waits for them instead of finishing without them.
    assert a.keys() == ["reg-1", "reg-2"]
    stats = a.stats()
    assert stats["orphaned"] == 2 and stats["handoff_pending"] == 2 and not stats["member"]
    # The map that names the new memory node arrives: everything goes to it and is dropped.
    later: Nodes = {"b": (0, 1), "d": (1, 1)}
    out = a.handle("membership", membership(3, later))
    assert sent_keys(out) == {addr("b"): values}
    b = core("b", later, version=3)
    assert deliver({addr("a"): a, addr("b"): b}, out) == []
    assert {k: b.value(k) for k in b.keys()} == values
    assert a.keys() == [] and a.stats()["orphaned"] == 0 and a.stats()["handoff_pending"] == 0
    put(b, "reg-1", _core.SetLattice([b"later"]))         # its subscription moved with it
    assert [u.tuples[0].key for _, u in updates_of([m for m in b.end_epoch() if m[1] == ""])] \
        == ["reg-1"]


def test_an_orphan_deleted_meanwhile_is_no_longer_pending():
    nodes: Nodes = {"a": (0, 1), "d": (1, 1)}
    a = core("a", nodes, now_ns=1000 * MS)
    fill(a, ["reg-1", "reg-2"])
    a.handle("membership", membership(2, {"d": (1, 1)}))
    assert a.stats()["handoff_pending"] == 2
    gossip = anna_pb2.KeyRequest(type=anna_pb2.DELETE)
    gossip.tuples.add(key="reg-1", timestamp=2000 * MS)
    a.handle("gossip", gossip.SerializeToString())
    assert a.keys() == ["reg-2"]
    assert a.stats()["orphaned"] == 1 and a.stats()["handoff_pending"] == 1


def test_a_member_keeps_a_key_whose_tier_has_no_node_without_counting_it_pending():
    # A memory node holds a key placed in the disk tier only, and no disk node exists.
    a = core("a", {"a": (0, 1)}, rep=(1, 1, 0, 1))
    fill(a, ["cold"])
    assert a.handle("membership", membership(2, {"a": (0, 1)}, overrides={"cold": (0, 1, 1, 1)})) == []
    stats = a.stats()
    assert a.keys() == ["cold"] and stats["orphaned"] == 1 and stats["handoff_pending"] == 0
    assert stats["member"]


def test_subscriptions_move_with_their_key_on_a_join_and_on_a_replication_change():
    key = moved_keys(PAIR, TRIO, "a", "c")[0]
    a = core("a", PAIR)
    fill(a, [key])
    subscribe(a, key)
    out = a.handle("membership", membership(2, TRIO))
    c = core("c", TRIO, version=2)
    assert deliver({addr("a"): a, addr("c"): c}, out) == []
    put(c, key, _core.SetLattice([b"new"]))
    assert [d for d, _ in updates_of(c.end_epoch())] == [SUBSCRIBER]
    assert a.keys() == [] and a.stats()["handoff_pending"] == 0 and a.end_epoch() == []

    # Replication change: a key held by a alone gains b as a replica; b gets the subscription.
    a2, b2 = core("a", PAIR), core("b", PAIR)
    hot = next(k for k in (f"h{i}" for i in range(50)) if holders(cluster_map(PAIR), k) == [addr("a")])
    subscribe(a2, hot)                                   # no value yet
    update = anna_pb2.ReplicationUpdate()
    update.overrides.add(key=hot, replication=replication((2, 1, 0, 1)))
    b2.handle("replication", update.SerializeToString())
    out = a2.handle("replication", update.SerializeToString())
    assert [(d, k) for d, k, _ in out] == [(addr("b"), "handoff")]
    assert deliver({addr("a"): a2, addr("b"): b2}, out) == []
    assert a2.stats()["handoff_pending"] == 0
    put(b2, hot, _core.MaxLattice(3))
    pushes = [m for m in b2.end_epoch() if m[1] == ""]
    assert [d for d, _ in updates_of(pushes)] == [SUBSCRIBER]


def test_a_second_change_before_the_ack_replans_to_the_current_owners():
    key = moved_keys(PAIR, TRIO, "a", "c")[0]
    a = core("a", PAIR)
    values = fill(a, [key])
    lost = a.handle("membership", membership(2, TRIO))
    assert sent_keys(lost) == {addr("c"): values}        # never delivered: c fails
    without_c: Nodes = dict(PAIR, d=(0, 1))
    out = a.handle("membership", membership(3, without_c))
    owner = holders(cluster_map(without_c), key)
    if owner == [addr("a")]:
        assert out == [] and a.keys() == [key] and a.stats()["handoff_pending"] == 0
    else:
        assert sent_keys(out) == {owner[0]: values}
        receiver = core(owner[0][6], without_c, version=3)
        assert deliver({addr("a"): a, owner[0]: receiver}, out) == []
        assert receiver.value(key) == values[key] and a.keys() == []
    # The stale ack from c, were it to arrive now, would not count for anybody.
    kept, pending = a.keys(), a.stats()["handoff_pending"]
    c = core("c", TRIO, version=2)
    assert a.handle("handoff_ack", c.handle("handoff", lost[0][2])[0][2]) == []
    assert (a.keys(), a.stats()["handoff_pending"]) == (kept, pending)


def test_a_receiver_with_an_older_map_takes_the_handoff_and_forwards_it_later():
    stale: Nodes = {"c": (0, 1), "z": (0, 1)}     # c's map is some other, older placement
    key = next(k for k in moved_keys(PAIR, TRIO, "a", "c", n=400)
               if holders(cluster_map(stale), k) == [addr("z")])
    a = core("a", PAIR, handoff_retry_ms=100)
    values = fill(a, [key])
    out = a.handle("membership", membership(2, TRIO))

    def receiver():
        return _core.WorkerCore("c", 0, 0, addr("c"), membership=membership(1, stale),
                                handoff_retry_ms=100)

    c = receiver()
    assert deliver({addr("a"): a, addr("c"): c}, out) == []
    assert c.value(key) == values[key] and a.keys() == []
    assert c.stats()["handoff_pending"] == 1       # c must pass it on: it does not hold it
    assert c.end_epoch() == []                     # but waits a retry period for its map
    c.handle("membership", membership(2, TRIO))    # caught up: it holds the key, keeps it
    c.set_now(200 * MS)
    assert c.end_epoch() == [] and c.value(key) == values[key]
    assert c.stats()["handoff_pending"] == 0
    # Had its map not caught up, c would have handed the key to its owner under that map.
    c = receiver()
    c.handle("handoff", out[0][2])
    c.set_now(100 * MS)
    assert sent_keys(c.end_epoch()) == {addr("z"): values}


def test_a_first_membership_after_a_restart_hands_off_and_keeps_what_it_holds(tmp_path):
    nodes: Nodes = {"d": (1, 1), "e": (1, 1)}
    rep = (0, 1, 2, 1)
    d = _core.WorkerCore("d", 1, 0, addr("d"), store_path=str(tmp_path / "d"),
                         membership=membership(1, {"d": (1, 1)}, rep))
    values = fill(d, ["p", "q"])
    del d
    d = _core.WorkerCore("d", 1, 0, addr("d"), store_path=str(tmp_path / "d"))
    out = d.handle("membership", membership(1, nodes, rep))
    e = _core.WorkerCore("e", 1, 0, addr("e"), membership=membership(1, nodes, rep))
    assert deliver({addr("d"): d, addr("e"): e}, out) == []
    assert {k: e.value(k) for k in e.keys()} == values and d.keys() == ["p", "q"]


def test_malformed_handoff_and_fetch_messages_are_dropped_with_a_reason():
    a = core("a", PAIR)
    no_reply = anna_pb2.KeyRequest(type=anna_pb2.PUT, tuples=[put_tuple("k", _core.MaxLattice(1))])
    for kind, payload, reason in [
            ("handoff", b"\xff\xff", "unparsable handoff"),
            ("handoff", no_reply.SerializeToString(), "handoff without a response_address"),
            ("fetch", no_reply.SerializeToString(), "fetch without a response_address"),
            ("handoff_ack", b"\x12\xff", "unparsable handoff_ack"),
            ("fetched", b"\x0a", "unparsable fetched")]:
        with pytest.raises(ValueError, match=reason):
            a.handle(kind, payload)
    assert a.stats()["dropped"] == 5 and a.keys() == []
    # A hand-off tuple that does not decode is acknowledged (resending cannot fix it) but not stored.
    bad = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=addr("b"), request_id="h1",
                              tuples=[anna_pb2.KeyTuple(key="k", lattice_type=anna_pb2.MAX,
                                                        payload=b"\xff")])
    (dest, kind, payload), = a.handle("handoff", bad.SerializeToString())
    assert (dest, kind) == (addr("b"), "handoff_ack")
    assert [t.key for t in anna_pb2.KeyResponse.FromString(payload).tuples] == ["k"]
    assert a.keys() == []


@pytest.mark.parametrize("vnodes, accepted", [(0, True), (4096, True), (4097, False),
                                              (2**31, False)])
def test_membership_vnodes_is_bounded(vnodes, accepted):
    a = _core.WorkerCore("a", 0, 0, addr("a"))
    m = anna_pb2.Membership.FromString(membership(1, PAIR))
    m.vnodes = vnodes
    if accepted:
        a.handle("membership", m.SerializeToString())
        assert a.has_membership and a.membership_version == 1
    else:
        with pytest.raises(ValueError, match="vnodes"):
            a.handle("membership", m.SerializeToString())
        assert not a.has_membership and a.stats()["dropped"] == 1


# ---------------------------------------------------------------- fetch window

def fetch_setup(**kw):
    """a held `key` under PAIR; c joined and owns it now; the hand-off has not arrived."""
    key = moved_keys(PAIR, TRIO, "a", "c")[0]
    a = core("a", PAIR, now_ns=1000 * MS, **kw)
    values = fill(a, [key])
    handoff = a.handle("membership", membership(2, TRIO))
    c = core("c", TRIO, version=2, now_ns=1000 * MS, **kw)   # joined: its first map has it
    return key, values[key], a, c, handoff


def get_out(c, key):
    req = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=CLIENT, request_id="g",
                              tuples=[anna_pb2.KeyTuple(key=key), anna_pb2.KeyTuple(key="other")])
    return c.handle("request", req.SerializeToString())


def answer(out) -> anna_pb2.KeyResponse:
    (dest, kind, payload), = out
    assert (dest, kind) == (CLIENT, "")
    response = anna_pb2.KeyResponse.FromString(payload)
    assert response.request_id == "g" and response.responder == addr("c")
    return response


def test_a_get_missing_during_the_window_is_answered_from_the_previous_owner():
    key, value, a, c, _ = fetch_setup()
    out = get_out(c, key)
    assert [(d, k) for d, k, _ in out] == [(addr("a"), "fetch")]
    assert c.stats()["deferred"] == 1 and c.stats()["fetches_out"] == 1
    response = answer(deliver({addr("a"): a, addr("c"): c}, out))
    assert decoded(response.tuples[0]) == value and c.value(key) == value
    assert response.tuples[1].key == "other"
    assert response.tuples[1].error in (anna_pb2.KEY_DNE, anna_pb2.WRONG_OWNER)
    assert c.stats()["deferred"] == 0
    assert get(c, key).error == anna_pb2.NO_ERROR    # now served locally, without a fetch


def test_a_dead_previous_owner_times_out_into_key_dne():
    key, _, a, c, _ = fetch_setup(fetch_timeout_ms=1000)
    out = get_out(c, key)
    assert [(d, k) for d, k, _ in out] == [(addr("a"), "fetch")]  # a is dead: never delivered
    c.set_now(1999 * MS)
    assert c.end_epoch() == []
    c.set_now(2000 * MS)
    response = answer(c.end_epoch())
    assert response.tuples[0].key == key and response.tuples[0].error == anna_pb2.KEY_DNE
    assert c.stats()["deferred"] == 0
    # The late answer is ignored.
    late = a.handle("fetch", out[0][2])
    assert kinds(late) == ["fetched"] and c.handle("fetched", late[0][2]) == []


def test_no_fetch_after_the_window_or_after_a_delete_or_past_the_bound():
    key, _, a, c, _ = fetch_setup(handoff_window_ms=3000)
    request(c, anna_pb2.DELETE, anna_pb2.KeyTuple(key=key, timestamp=1))
    assert answer(get_out(c, key)).tuples[0].error == anna_pb2.KEY_DNE   # the delete is the truth
    key, _, a, c, _ = fetch_setup(handoff_window_ms=3000)
    c.set_now(4000 * MS)
    assert c.end_epoch() == []
    assert answer(get_out(c, key)).tuples[0].error == anna_pb2.KEY_DNE
    assert c.stats()["fetches_out"] == 0


def test_a_fetch_is_answered_from_the_store_whether_or_not_the_worker_owns_the_key():
    key, value, a, c, handoff = fetch_setup()
    fetch = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=addr("c"), request_id="f9",
                                tuples=[anna_pb2.KeyTuple(key=key), anna_pb2.KeyTuple(key="nope")])
    (dest, kind, payload), = a.handle("fetch", fetch.SerializeToString())
    fetched = anna_pb2.KeyResponse.FromString(payload)
    assert (dest, kind, fetched.request_id) == (addr("c"), "fetched", "f9")
    assert decoded(fetched.tuples[0]) == value and fetched.tuples[1].error == anna_pb2.KEY_DNE


# ---------------------------------------------------------------- tombstones

FULL = (2, 1, 0, 1)


def test_an_older_concurrent_put_does_not_resurrect_a_delete():
    a, b = core("a", PAIR, rep=FULL), core("b", PAIR, rep=FULL)
    both = {addr("a"): a, addr("b"): b}
    put(a, "k", _core.SetLattice([b"old"]))
    deliver(both, a.end_epoch())
    # b accepts a concurrent PUT at t=5; a accepts a DELETE at t=10 before b's gossip arrives.
    b.set_now(5)
    put(b, "k", _core.SetLattice([b"concurrent"]))
    a.set_now(10)
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k"))
    b_gossip, a_gossip = b.end_epoch(), a.end_epoch()
    assert [t.timestamp for _, _, p in b_gossip for t in anna_pb2.KeyRequest.FromString(p).tuples] == [5]
    assert [t.timestamp for _, _, p in a_gossip for t in anna_pb2.KeyRequest.FromString(p).tuples] == [10]
    deliver(both, b_gossip)
    assert a.value("k") is None and get(a, "k").error == anna_pb2.KEY_DNE
    deliver(both, a_gossip)
    assert b.value("k") is None
    assert a.stats()["tombstones"] == 1 and b.stats()["tombstones"] == 1


def test_a_put_after_the_delete_survives_it_everywhere():
    a, b = core("a", PAIR, rep=FULL), core("b", PAIR, rep=FULL)
    both = {addr("a"): a, addr("b"): b}
    a.set_now(10)
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k"))
    deliver(both, a.end_epoch())
    # b's clock is behind the tombstone: the PUT is still stamped after it.
    b.set_now(7)
    put(b, "k", _core.SetLattice([b"after"]))
    gossip = b.end_epoch()
    assert [t.timestamp for _, _, p in gossip for t in anna_pb2.KeyRequest.FromString(p).tuples] == [11]
    deliver(both, gossip)
    assert a.value("k") == b.value("k") == _core.SetLattice([b"after"])
    # A client DELETE stamped by the client before a write accepted here in the same epoch
    # removes the older data but not that write.
    a.set_now(100)
    put(a, "k", _core.SetLattice([b"newest"]))
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k", timestamp=50))
    assert a.value("k") == _core.SetLattice([b"newest"])
    deliver(both, a.end_epoch())
    assert b.value("k") == _core.SetLattice([b"newest"])


def test_in_the_window_a_read_through_can_show_a_later_write_before_the_gossip_of_an_earlier_one():
    """What tests/test_anna_tombstones.py waits on. Both workers have just joined (their
    first map names them), so their fetch windows are open. b accepts a write after a's
    delete, then a fresh marker: a GET of the marker at a misses and reads it through from
    b before b's gossip has carried the write, which a (tombstoned, so no fetch) does not
    have yet. A marker a already holds changes only when that gossip arrives."""
    a = core("a", PAIR, rep=FULL, now_ns=1000 * MS)
    b = core("b", PAIR, rep=FULL, now_ns=1000 * MS)
    both = {addr("a"): a, addr("b"): b}
    put(a, "k", _core.SetLattice([b"before"]))
    deliver(both, a.end_epoch())
    a.set_now(1010 * MS)
    request(a, anna_pb2.DELETE, anna_pb2.KeyTuple(key="k"))
    deliver(both, a.end_epoch())
    assert b.value("k") is None
    assert put(a, "old-marker", _core.MaxLattice(1)).error == anna_pb2.NO_ERROR  # held by a
    b.set_now(1020 * MS)
    put(b, "k", _core.SetLattice([b"after"]))
    put(b, "fresh-marker", _core.MaxLattice(1))
    put(b, "old-marker", _core.MaxLattice(2))
    gossip = b.end_epoch()                                   # not delivered yet
    assert {t.key: t.timestamp for _, _, p in gossip for t in anna_pb2.KeyRequest.FromString(p).tuples
            if t.key == "k"} == {"k": 1020 * MS}             # after a's tombstone (1010 ms)
    req = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=CLIENT, request_id="g",
                              tuples=[anna_pb2.KeyTuple(key="fresh-marker")])
    out = a.handle("request", req.SerializeToString())
    assert [(d, k) for d, k, _ in out] == [(addr("b"), "fetch")]
    (dest, kind, payload), = deliver(both, out)
    assert decoded(anna_pb2.KeyResponse.FromString(payload).tuples[0]) == _core.MaxLattice(1)
    assert get(a, "k").error == anna_pb2.KEY_DNE             # the write is not here yet
    assert decoded(get(a, "old-marker")) == _core.MaxLattice(1)   # no read-through: a has it
    deliver(both, gossip)
    assert decoded(get(a, "old-marker")) == _core.MaxLattice(2)
    assert a.value("k") == b.value("k") == _core.SetLattice([b"after"])


def test_a_handoff_older_than_a_tombstone_is_ignored_and_tombstones_expire():
    key = moved_keys(PAIR, TRIO, "a", "c")[0]
    a = core("a", PAIR, now_ns=100)
    values = fill(a, [key])                              # accepted at t=100
    c = core("c", TRIO, version=2, now_ns=200, tombstone_ttl_ms=1000)
    request(c, anna_pb2.DELETE, anna_pb2.KeyTuple(key=key))   # deleted at the new owner, t=200
    a.set_now(150)                                       # a's change happened before the delete
    out = a.handle("membership", membership(2, TRIO))
    assert [t.timestamp for _, _, p in out for t in anna_pb2.KeyRequest.FromString(p).tuples] == [150]
    assert deliver({addr("a"): a, addr("c"): c}, out) == []
    assert c.value(key) is None and a.keys() == []        # acked, ignored, dropped
    # After the tombstone's ttl an old write is accepted again (the documented limit).
    c.set_now(200 + 1000 * MS)
    c.end_epoch()
    assert c.stats()["tombstones"] == 0
    assert c.handle("handoff", out[0][2])[0][1] == "handoff_ack"
    assert c.value(key) == values[key]
