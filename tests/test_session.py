"""Sessions (read-your-writes and monotonic reads) as pure code: the client's bounded session,
the node caches' decisions, a call's session on its worker, and the read from the KVS at
least as new as a floor (against a fake KVS client: a unit test)."""
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import anna_core
from hydro_proto import cloudburst_pb2 as pb
from cloudburst.sessions import WHOLE_UP_TO, ClientSession, named_keys
from hydrocache.session import (ABSENT, ACCEPT, MAX_SENT_KEYS, READ_ALL, STALE, Floor, Floors,
                                Session,
                                causal_stale, causal_unmet, index, plain_after_fetch,
                                merged_key, plain_floor, plain_fresh, refusal)
from hydrocache.vclock import supersedes
from executor.call_session import CallSession, UpstreamSessions
from executor.fresh_read import StaleRead, read_at_least

keys = st.sampled_from([f"k{i}" for i in range(12)])
plain_notes = st.tuples(st.just("plain"), keys, st.integers(1, 10**6))
causal_notes = st.tuples(st.just("causal"), keys,
                         st.dictionaries(st.sampled_from("abc"), st.integers(1, 9), min_size=1))
merged_notes = st.tuples(st.just("merged"), keys, st.none())
notes = st.lists(st.one_of(plain_notes, causal_notes, merged_notes), max_size=60)


def apply(session, ops):
    for kind, key, arg in ops:
        if kind == "plain":
            session.note_plain(key, arg)
        elif kind == "causal":
            session.note_causal(key, arg)
        else:
            session.note_merged(key)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(notes, st.integers(1, 8))
def test_the_guarantee_survives_the_bound(ops, bound):
    """Whatever was noted, the session as sent still demands it: each key's plain floor is at
    least every timestamp noted for it; a causal clock noted is superseded by the key's listed
    floor, or the overflow makes every unlisted causal read go to the KVS."""
    s = Session(bound)
    apply(s, ops)
    assert len(s) <= bound
    sent = s.to_proto()
    listed = index(sent)
    assert len(listed) <= bound
    for kind, key, arg in ops:
        if kind == "plain":
            assert plain_floor(sent, key)[0] >= arg
        elif kind == "causal":
            # listed with at least the clock, or every causal read goes to the KVS
            assert sent.overflow_causal or (key in listed and supersedes(dict(listed[key].vc),
                                                                          arg))
            held = {key: {}}
            assert key in causal_stale(sent, [key], held.get)      # {} is older than arg
        else:
            assert (key in listed and listed[key].merged) or sent.overflow_causal


@settings(max_examples=60)
@given(notes)
def test_floors_only_rise_and_round_trip(ops):
    s = Session(64)
    apply(s, ops)
    back = Session.from_proto(s.to_proto())
    assert back.to_proto() == s.to_proto()
    before = s.to_proto()
    s.absorb(pb.Session())                 # absorbing nothing lowers nothing
    assert s.to_proto() == before


def test_least_recently_noted_is_forgotten_first_and_summed_up():
    s = Session(2)
    s.note_plain("a", 10)
    s.note_plain("b", 20)
    s.note_plain("a", 5)                   # raises nothing, but a is now the most recent
    s.note_plain("c", 30)
    assert "b" not in s and "a" in s and "c" in s
    assert s.floor("a").timestamp == 10
    assert s.overflow_timestamp == 20 and not s.overflow_causal
    s.note_causal("d", {"x": 1})
    s.note_plain("e", 1)                   # forgets c (plain), then d would go next
    s.note_plain("f", 1)
    assert s.overflow_causal


def test_a_bad_bound_is_refused():
    with pytest.raises(ValueError, match="at least one key"):
        Session(0)
    with pytest.raises(ValueError, match="at most 65536"):
        ClientSession(MAX_SENT_KEYS + 1)


def test_a_session_received_is_checked():
    ok = Session()
    ok.note_plain("a", 1)
    assert refusal(ok.to_proto()) is None
    bad = ok.to_proto()
    bad.plain_timestamps.append(2)
    assert "1 plain keys but 2 timestamps" in refusal(bad)
    big = pb.Session(plain_keys=["k"] * (MAX_SENT_KEYS + 1),
                     plain_timestamps=[1] * (MAX_SENT_KEYS + 1))
    assert "at most 65536" in refusal(big)


def test_plain_decisions():
    assert plain_fresh(5, 5) and not plain_fresh(4, 5) and not plain_fresh(None, 0)
    # (ts read, floor, own floor, every replica read, own floor is a delete)
    assert plain_after_fetch(None, 0, 0, False) == ACCEPT
    assert plain_after_fetch(7, 5, 5, False) == ACCEPT
    assert plain_after_fetch(4, 5, 5, False) == READ_ALL
    assert plain_after_fetch(None, 5, 5, False) == READ_ALL
    assert plain_after_fetch(4, 5, 5, True) == STALE         # the write is gone
    assert plain_after_fetch(None, 5, 5, True) == ACCEPT      # deleted since
    assert plain_after_fetch(4, 5, 0, True) == ACCEPT        # the overflow's floor
    assert plain_after_fetch(4, 9, 3, True) == ACCEPT        # own floor met, not the overflow's
    assert plain_after_fetch(4, 5, 5, False, True) == ABSENT  # older than the session's delete
    assert plain_after_fetch(None, 5, 5, False, True) == ABSENT
    assert plain_after_fetch(6, 9, 5, False, True) == READ_ALL   # written after the delete
    assert plain_after_fetch(6, 9, 5, True, True) == ACCEPT


def test_plain_floor_of_a_listed_key_and_of_the_overflow():
    s = Session(1)
    s.note_plain("a", 10)
    s.note_plain("b", 3)
    sent = s.to_proto()
    assert plain_floor(sent, "b") == (10, 3)      # listed, raised to the overflow
    assert plain_floor(sent, "zzz") == (10, 0)
    assert plain_floor(None, "b") == (0, 0)
    f = Floors(sent)
    assert f.fresh("b", 10) and not f.fresh("b", 9) and f.fresh("zzz", 10)
    assert list(f.restrict(["b", "zzz"]).plain_keys) == ["b"]


def test_a_delete_goes_with_the_newest_timestamp():
    s = Session()
    s.note_plain("k", 5)
    s.note_deleted("k", 8)
    assert s.floor("k") == (8, {}, False, True)
    s.note_plain("k", 7)                  # an older read does not undo the delete
    assert s.floor("k").deleted
    s.note_plain("k", 9)                  # a later write does
    assert s.floor("k") == (9, {}, False, False)
    s.note_deleted("j", 4)
    back = index(s.to_proto())
    assert back["j"].deleted and back["j"].timestamp == 4 and not back["k"].deleted
    assert Floors(s.to_proto()).deleted("j") and not Floors(s.to_proto()).deleted("k")


# a session as received may list a key more than once (in both lists, or twice in one)
listed_plain = st.lists(st.tuples(keys, st.integers(0, 50)), max_size=12)
listed_entries = st.lists(st.tuples(keys, st.integers(0, 50),
                                    st.dictionaries(st.sampled_from("abc"), st.integers(1, 9)),
                                    st.booleans(), st.booleans()), max_size=12)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(listed_plain, listed_entries, st.integers(0, 60), st.booleans(),
       st.lists(keys, max_size=8))
def test_floors_looks_up_what_the_whole_index_holds(plain, entries, overflow_ts,
                                                    overflow_causal, asked):
    """`Floors` indexes a session lazily, key by key; every answer is the one the index of
    the whole session gives, duplicates and overflow included."""
    sent = pb.Session(overflow_timestamp=overflow_ts, overflow_causal=overflow_causal)
    for k, ts in plain:
        sent.plain_keys.append(k)
        sent.plain_timestamps.append(ts)
    for k, ts, vc, merged, deleted in entries:
        e = sent.keys.add(key=k, timestamp=ts, merged=merged, deleted=deleted)
        e.vc.update(vc)
    whole = index(sent)
    f = Floors(sent)
    for k in asked + [f"k{i}" for i in range(12)]:
        assert f.get(k) == whole.get(k)
        assert (k in f) == (k in whole)
        assert f.floor(k) == plain_floor(sent, k, whole)
        assert f.merged(k) == ((k in whole and whole[k].merged) or overflow_causal)
        assert f.deleted(k) == (k in whole and whole[k].deleted)
    got = index(f.restrict(asked))
    assert got == {k: whole[k] for k in asked if k in whole}
    r = f.restrict(asked)
    assert (r.overflow_timestamp, r.overflow_causal) == (overflow_ts, overflow_causal)
    none = Floors(None)
    assert none.get("k1") is None and none.floor("k1") == (0, 0) and not none.merged("k1")
    assert none.restrict(["k1"]) == pb.Session()


deletes = st.tuples(st.just("deleted"), keys, st.integers(1, 10**6))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.one_of(plain_notes, causal_notes, merged_notes, deletes),
                         max_size=10), max_size=8), st.integers(1, 8))
def test_the_session_as_sent_is_encoded_from_the_floors_that_changed(batches, bound):
    """`encode` keeps each floor's encoding until it changes; after any notes, absorbs and
    evictions, what it sends parses to exactly `to_proto()`."""
    s = Session(bound)
    other = Session(bound)
    for ops in batches:
        for kind, key, arg in ops:
            if kind == "deleted":
                s.note_deleted(key, arg)
            else:
                apply(s, [(kind, key, arg)])
            apply(other, [(kind, key, arg)] if kind != "deleted" else [])
        s.absorb(other.to_proto([f"k{i}" for i in range(0, 12, 3)]))
        assert pb.Session.FromString(s.encode()) == s.to_proto()
    cs = ClientSession(bound)
    cs.session = s
    call = pb.Call()
    cs.attach(call)
    assert call.session == s.to_proto()


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 20)), min_size=1, max_size=20))
def test_deleted_follows_the_newest_timestamp(notes):
    s = Session()
    for deleted, ts in notes:
        (s.note_deleted if deleted else s.note_plain)("k", ts)
    newest = max(ts for _, ts in notes)
    assert s.floor("k").timestamp == newest
    assert s.floor("k").deleted == any(d for d, ts in notes if ts == newest)


def test_causal_stale_and_unmet():
    s = Session()
    s.note_causal("a", {"c": 2})
    s.note_causal("b", {"c": 1})
    sent = s.to_proto()
    held = {"a": {"c": 1}, "b": {"c": 1, "d": 4}, "x": {"e": 1}}
    assert causal_stale(sent, ["a", "b", "x", "missing"], held.get) == ["a"]
    assert causal_unmet(sent, ["a", "b"], held.get) == ["a"]
    held["a"] = {"c": 2, "z": 1}
    assert causal_unmet(sent, ["a", "b"], held.get) == []
    assert causal_stale(None, ["a"], held.get) == []
    over = pb.Session(overflow_causal=True)
    assert causal_stale(over, ["a", "missing"], held.get) == ["a"]   # every cached key
    s.note_causal("a", {"c": 1})
    sent = s.to_proto()
    sent.overflow_causal = True           # a's floor may have been forgotten, then relisted
    held["a"] = {"c": 2}
    assert causal_stale(sent, ["a", "b"], held.get) == ["a", "b"]


def test_a_call_session_raises_its_floors_and_reports_what_it_did():
    floors = Session()
    floors.note_plain("a", 10)
    inherited = Session()
    inherited.note_plain("up", 7)
    cs = CallSession(floors.to_proto(), inherited.to_proto())
    def plain(session):
        return {k: f.timestamp for k, f in index(session).items()}

    assert plain(cs.request(["a", "up", "b"])) == {"a": 10, "up": 7}
    cs.note("b", 12)
    cs.note("a", 11)
    assert plain(cs.request(["a", "b"])) == {"a": 11, "b": 12}
    assert plain(cs.report()) == {"up": 7, "b": 12, "a": 11}


def test_a_call_session_with_nothing_inherited_reports_only_what_it_did():
    floors = Session()
    floors.note_plain("a", 10)
    floors.overflow_timestamp = 3
    cs = CallSession(floors.to_proto())
    assert cs.report() is None                   # read and wrote nothing: no report
    asked = cs.request(["a", "b"])               # the caller's floors, and its overflow
    assert {k: f.timestamp for k, f in index(asked).items()} == {"a": 10}
    assert asked.overflow_timestamp == 3
    cs.note("b", 0)                              # (no timestamp: nothing to note)
    assert cs.report() is None
    cs.note_merged("m")
    cs.note("a", 11)
    assert {k: f.timestamp for k, f in index(cs.request(["a"])).items()} == {"a": 11}
    assert set(index(cs.report())) == {"a", "m"}


def test_upstream_sessions_are_bounded_and_dropped():
    u = UpstreamSessions(max_calls=2)
    r = Session()
    r.note_plain("k", 1)
    u.add("c1", "g", r.to_proto())
    u.add("c2", "g", r.to_proto())
    u.add("c3", "g", r.to_proto())             # c1 forgotten
    assert u.take("c1", "g") is None
    assert list(u.take("c2", "g").plain_timestamps) == [1]
    u.drop("c3")
    assert u.take("c3", "g") is None


class FakeKvs:
    """A KVS client with one lagging replica (unit test double)."""

    def __init__(self, first, replicas):
        self.first, self.replicas, self.calls = first, replicas, []

    def get_lattice(self, key):
        self.calls.append("one")
        if self.first is None:
            raise anna_core.KeyNotFound(key)
        return self.first

    def get_replicas(self, key):
        self.calls.append("all")
        return [(f"r{i}", r) for i, r in enumerate(self.replicas)]


def lww(ts, value=b"v"):
    return anna_core.LWWLattice(ts, value)


def test_read_at_least_reads_every_replica_only_when_one_lags():
    kvs = FakeKvs(lww(10), [])
    assert read_at_least(kvs, "k", 10, 10).timestamp == 10 and kvs.calls == ["one"]
    kvs = FakeKvs(lww(5, b"old"), [lww(5, b"old"), lww(12, b"new")])
    got = read_at_least(kvs, "k", 10, 10)
    assert (got.timestamp, got.reveal()) == (12, b"new") and kvs.calls == ["one", "all"]
    kvs = FakeKvs(None, [lww(11)])
    assert read_at_least(kvs, "k", 10, 10).timestamp == 11


def test_read_at_least_after_the_sessions_delete():
    kvs = FakeKvs(lww(5), [lww(5)])             # a replica the delete has not reached yet
    assert read_at_least(kvs, "k", 8, 8, deleted=True) is None and kvs.calls == ["one"]
    kvs = FakeKvs(lww(5), [lww(5), lww(9, b"later")])
    assert read_at_least(kvs, "k", 8, 8, deleted=True) is None   # one replica: as absent
    kvs = FakeKvs(lww(9, b"later"), [])
    assert read_at_least(kvs, "k", 8, 8, deleted=True).reveal() == b"later"


def test_read_at_least_names_a_lost_write():
    kvs = FakeKvs(lww(5), [lww(5), lww(6)])
    with pytest.raises(StaleRead, match="'k'.*6 < 10"):
        read_at_least(kvs, "k", 10, 10)
    assert read_at_least(FakeKvs(lww(5), [lww(6)]), "k", 10, 0).timestamp == 6
    assert read_at_least(FakeKvs(None, []), "k", 10, 10) is None      # deleted since


# ---- a call's session restricted to the keys it names ----
def demands(session, key, cached_vc):
    """What a cache asked about `key` under `session` requires: the plain floor, whether it
    reads every replica, and whether a cached causal version with clock `cached_vc` must be
    re-read from the KVS first."""
    return (plain_floor(session, key)[0], merged_key(session, key),
            bool(causal_stale(session, [key], {key: cached_vc}.get)))


def at_least(a, b):
    return a[0] >= b[0] and (a[1] or not b[1]) and (a[2] or not b[2])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(plain_notes, causal_notes, merged_notes, deletes), max_size=40),
       st.integers(1, 12), st.lists(keys, max_size=6), st.lists(keys, max_size=6),
       st.dictionaries(st.sampled_from("abc"), st.integers(0, 9)))
@example([("causal", "k1", {"a": 1}), ("causal", "k0", {"a": 1})], 2, ["k0", "k1"], [], {})
@example([("plain", "k1", 1), ("plain", "k0", 1)], 2, ["k0", "k1"], [], {})
def test_a_session_restricted_to_the_named_keys_demands_at_least_the_whole(
        ops, bound, named, asked, cached_vc):
    """`Session.named(keys)` lists exactly the floors of the named keys, and whatever a call
    asks of it (the session itself, a request `Floors.restrict` makes from it, or a session
    that absorbed it) demands at least what the whole session demands, for every key: named
    or not. With nothing left out it is the whole session."""
    s = Session(bound)
    for kind, key, arg in ops:
        if kind == "deleted":
            s.note_deleted(key, arg)
        else:
            apply(s, [(kind, key, arg)])
    whole = s.to_proto()
    part = s.named(named)
    listed = index(whole)
    if set(listed) <= set(named):
        # nothing left out: the whole session (its floors in any order: they are a set)
        in_order = lambda m: sorted(x.SerializeToString(deterministic=True) for x in m.keys)
        assert in_order(part) == in_order(whole)
        plain = lambda m: sorted(zip(m.plain_keys, m.plain_timestamps))
        assert plain(part) == plain(whole)
        floors = ("keys", "plain_keys", "plain_timestamps")
        rest = [(f.name, v) for f, v in part.ListFields() if f.name not in floors]
        assert rest == [(f.name, v) for f, v in whole.ListFields() if f.name not in floors]
    else:                                    # every named key, held or not, and no other
        assert index(part) == {k: listed.get(k, Floor(0)) for k in named}
    absorbed = Session(64)
    absorbed.absorb(part)
    absorbed = absorbed.to_proto()
    whole_req = Floors(whole).restrict(asked)
    part_req = Floors(part).restrict(asked)
    assert not part_req.omitted_timestamp and not part_req.omitted_causal
    for key in [f"k{i}" for i in range(12)]:
        assert at_least(demands(part, key, cached_vc), demands(whole, key, cached_vc))
        assert at_least(demands(absorbed, key, cached_vc), demands(whole, key, cached_vc))
        if key in asked:
            assert at_least(demands(part_req, key, cached_vc),
                            demands(whole_req, key, cached_vc))
    if all(k in named for k in asked):       # every key asked is named: as the whole asks
        assert (part_req.overflow_timestamp, part_req.overflow_causal) == \
            (whole_req.overflow_timestamp, whole_req.overflow_causal)
        assert {k: f for k, f in index(part_req).items() if f != Floor(0)} == index(whole_req)


def test_a_causal_call_names_its_references_and_carries_only_their_floors():
    cs = ClientSession(1024)
    for i in range(WHOLE_UP_TO + 10):
        cs.note("k%d" % i, type("V", (), {"timestamp": 0, "vc": {"a": i + 1},
                                          "merged": False})())
    call = pb.Call(consistency=pb.CAUSAL)
    call.args["f"].args.add(reference="k1")
    call.args["f"].args.add(value=b"x")
    call.args["g"].kwargs["y"].reference = "k2"
    assert named_keys(call) == ["k1", "k2"]
    cs.attach(call, named_keys(call))
    assert sorted(index(call.session)) == ["k1", "k2"]
    assert call.session.omitted_causal
    assert named_keys(pb.Call(consistency=pb.LWW)) is None
    plain = pb.Call()
    cs.attach(plain, None)                   # other calls carry the whole session
    assert len(index(plain.session)) == WHOLE_UP_TO + 10
    small = ClientSession(1024)
    small.note("k1", type("V", (), {"timestamp": 5, "vc": {}, "merged": False})())
    small.note("k9", type("V", (), {"timestamp": 7, "vc": {}, "merged": False})())
    c2 = pb.Call(consistency=pb.CAUSAL)
    small.attach(c2, ["k1"])                  # a small session goes whole
    assert sorted(index(c2.session)) == ["k1", "k9"] and not c2.session.omitted_timestamp


# ---- a node cache's causal floor checks, against their definition by `index` ----
def stale_by_index(session, keys, version_of):
    """`causal_stale` as the module contract defines it, over `index(session)`."""
    if session is None:
        return []
    entries = index(session)
    out = []
    for key in dict.fromkeys(keys):
        vc = version_of(key)
        if vc is None:
            continue
        e = entries.get(key)
        if session.overflow_causal or (e is None and session.omitted_causal) or \
                (e is not None and e.vc and not supersedes(vc, e.vc)):
            out.append(key)
    return out


def unmet_by_index(session, keys, version_of):
    entries = index(session)
    return [k for k in dict.fromkeys(keys)
            if entries.get(k) is not None and entries[k].vc and version_of(k) is not None
            and not supersedes(version_of(k), entries[k].vc)]


listings = st.lists(st.tuples(keys, st.integers(0, 50),
                              st.dictionaries(st.sampled_from("abc"), st.integers(0, 9))),
                    max_size=12)


@settings(max_examples=300, deadline=None)
@given(listings, st.lists(st.tuples(keys, st.integers(1, 50)), max_size=6),
       st.booleans(), st.booleans(),
       st.dictionaries(keys, st.dictionaries(st.sampled_from("abc"), st.integers(0, 9))),
       st.lists(keys, max_size=14))
def test_causal_floor_checks_agree_with_the_index(listed, plain, overflow, omitted, held, asked):
    """The node cache's checks read the session's clocks as received (one pass, no `Floor`
    per key), and decide as `index` does: keys listed twice (the last clock counts), listed
    only as plain, not listed under `omitted_causal`, every key after an overflow."""
    session = pb.Session(overflow_causal=overflow, omitted_causal=omitted)
    for key, ts, vc in listed:
        session.keys.add(key=key, timestamp=ts).vc.update(vc)
    for key, ts in plain:
        session.plain_keys.append(key)
        session.plain_timestamps.append(ts)
    assert causal_stale(session, asked, held.get) == stale_by_index(session, asked, held.get)
    assert causal_unmet(session, asked, held.get) == unmet_by_index(session, asked, held.get)
