"""The plain (LWW) node cache's pure core (`executor/cache.py`): the lattice merge, the
subscriptions it asks for, and its bounds. Run directly and with hypothesis; the service
around it is exercised by tests/test_executor_node.py and the integration tests."""
from hypothesis import given, settings, strategies as st

import anna_core
from executor.cache import ENTRY_OVERHEAD, LwwCache


def lww(ts, value):
    return anna_core.LWWLattice(ts, value)


def cost(key, value):
    return len(key) + 2 * len(value) + ENTRY_OVERHEAD


def test_the_higher_timestamp_wins_and_a_new_key_is_subscribed_once():
    c = LwwCache()
    first = c.admit("k", lww(5, b"new"))
    assert (first.value, first.timestamp, first.subscribe, first.evicted) == (b"new", 5, True, ())
    older = c.admit("k", lww(3, b"old"))
    assert (older.value, older.timestamp, older.subscribe) == (b"new", 5, False)
    assert c.pushed("k", lww(2, b"older")) == ((), False)
    assert c.get("k") == b"new" and c.timestamp("k") == 5
    c.pushed("k", lww(9, b"newest"))
    assert c.get("k") == b"newest"
    assert c.keys() == {"k"}


def test_a_delete_drops_the_copy_and_keeps_the_subscription():
    c = LwwCache()
    c.admit("k", lww(1, b"v"))
    version = c.keyset_version
    assert c.deleted("k") and c.get("k") is None and c.keyset_version > version
    assert c.pushed("k", lww(2, b"w")) == ((), False)    # still subscribed: cached again
    assert c.get("k") == b"w"


def test_the_least_recently_used_key_goes_first_and_is_unsubscribed():
    value = b"x" * 100
    c = LwwCache(max_bytes=3 * cost("a", value))
    for key in "abc":
        c.admit(key, lww(1, value))
    c.lookup(["a"])                                     # a is used: b is now the oldest
    added = c.admit("d", lww(1, value))
    assert added.evicted == ("b",) and c.keys() == {"a", "c", "d"}
    assert not c.subscribed("b")
    assert c.pushed("b", lww(2, value)) == ((), False)  # a late push: not cached; the
    assert "b" not in c                                 # unsubscribe in flight is enough
    assert c.admit("b", lww(3, value)).subscribe        # read again: cached and subscribed
    # b's unsubscribe, acknowledged now, may have reached Anna after that subscription
    assert c.unsubscribed("b")                          # so: subscribe it once more
    evicted = c.admit("e", lww(1, value)).evicted
    assert evicted and not c.unsubscribed(evicted[0])   # not cached again: nothing to do
    assert c.pushed(evicted[0], lww(5, value)) == ((), True)   # still pushed: unsubscribe
    assert evicted[0] not in c


def test_a_failed_subscription_drops_the_copy_so_the_next_read_subscribes_again():
    c = LwwCache()
    assert c.admit("k", lww(1, b"v")).subscribe
    c.subscribe_failed("k")
    assert "k" not in c and c.lookup(["k"])[0] == [None]
    assert c.admit("k", lww(1, b"v")).subscribe


def test_a_value_larger_than_the_bound_is_answered_but_not_kept():
    c = LwwCache(max_bytes=1000)
    c.admit("small", lww(1, b"s"))
    big = c.admit("big", lww(1, b"x" * 600))        # twice 600 bytes: over the bound
    assert big.value == b"x" * 600 and not big.subscribe
    assert "big" not in c and "small" in c and c.bytes <= 1000


def test_a_stale_copy_is_a_miss_for_a_session_that_saw_newer():
    class Floor:
        def fresh(self, key, stamp):
            return stamp is not None and stamp >= 7

    c = LwwCache()
    c.admit("k", lww(5, b"v"))
    values, stamps = c.lookup(["k", "other"], Floor())
    assert values == [None, None] and stamps == {"k": 5, "other": None}
    assert c.lookup(["k"])[0] == [b"v"]


operations = st.lists(st.tuples(st.sampled_from(["admit", "push", "delete", "read"]),
                                st.sampled_from("abcdefgh"), st.integers(1, 50),
                                st.integers(0, 400)), max_size=80)


@settings(max_examples=80, deadline=None)
@given(operations, st.integers(200, 1500), st.integers(1, 6))
def test_the_bounds_hold_after_every_change_and_evicted_keys_are_unsubscribed(ops, max_bytes,
                                                                               max_entries):
    c = LwwCache(max_bytes=max_bytes, max_entries=max_entries)
    subscribed = set()            # what the service would hold at Anna
    for op, key, ts, size in ops:
        value = bytes([ts]) * size
        if op == "admit":
            out = c.admit(key, lww(ts, value))
            if out.subscribe:
                subscribed.add(key)
            subscribed -= set(out.evicted)
            assert out.value is not None
        elif op == "push":
            out = c.pushed(key, lww(ts, value))
            subscribed -= set(out.evicted)
            if out.unsubscribe:
                subscribed.discard(key)
        elif op == "delete":
            c.deleted(key)
        else:
            c.lookup([key])
        assert len(c) <= max_entries
        assert c.bytes <= max_bytes
        assert c.bytes == sum(cost(k, c.get(k)) for k in c.keys())
        assert set(c.keys()) <= subscribed        # every cached key is kept fresh by Anna
        assert all(c.subscribed(k) for k in subscribed)


def test_the_service_unsubscribes_what_the_bound_evicts_and_answers_every_get():
    """The service carries out the core's decisions: a miss is read from Anna, cached and
    subscribed; an eviction unsubscribes; a later read of an evicted key reads Anna again.
    (A stand-in for Anna, as a unit test; the real one is in tests/test_executor_node.py.)"""
    import zmq

    from executor.lww_service import LwwCacheService
    from hydro_proto import cloudburst_pb2 as pb
    from hydrocache.replies import cache_reply
    from runtime.sockets import PushCache, bind_pull

    class Anna:
        def __init__(self):
            self.data, self.calls = {}, []

        def get_lattice(self, key):
            self.calls.append(("get", key))
            if key not in self.data:
                raise anna_core.KeyNotFound(f"no {key}")
            return self.data[key]

        def put(self, key, lattice, quorum=None):
            self.data[key] = lattice

        def subscribe(self, key, address):
            self.calls.append(("subscribe", key))

        def unsubscribe(self, key, address):
            self.calls.append(("unsubscribe", key))

        def close(self):
            pass

    anna = Anna()
    for key in "abc":
        anna.data[key] = lww(1, key.encode() * 100)
    context = zmq.Context()
    replies, reply_address = bind_pull(context, "127.0.0.1")
    push = PushCache(context)
    service = LwwCacheService("n1", "tcp://unused:1", context=context, credentials=None,
                              auth=None, update_address="tcp://me:1", ip="127.0.0.1",
                              submit=lambda owner, fn, *args: fn(*args), fetch_threads=1,
                              write_quorum="all", push=push, uncached_prefix="__cloudburst/",
                              max_bytes=2 * cost("a", b"a" * 100), max_entries=10,
                              make_client=lambda: anna)
    try:
        def get(key):
            service.handle(pb.CacheRequest(op=pb.CACHE_GET, keys=[key], request_id=key,
                                           response_address=reply_address))
            assert replies.poll(5000)
            response, frames = cache_reply(replies.recv_multipart(copy=False))[1]
            assert response.status == pb.OK and response.entries[0].found
            return bytes(frames[0])

        for key in "abc":
            assert get(key) == key.encode() * 100
        assert ("unsubscribe", "a") in anna.calls and service.keys() == ["b", "c"]
        anna.calls.clear()
        assert get("c") == b"c" * 100 and anna.calls == []       # a hit: Anna not asked
        assert get("a") == b"a" * 100 and ("get", "a") in anna.calls
        assert ("unsubscribe", "b") in anna.calls
    finally:
        service.close()
        push.close()
        replies.close(0)
        context.term()


def test_with_real_anna_an_evicted_key_stops_being_pushed_and_a_cached_one_stays_fresh():
    """The service against a real KVS: with room for two keys, reading a, b, c evicts a and
    unsubscribes it; a later write of c is pushed and cached, one of a is not pushed."""
    import uuid

    import zmq

    from anna_core.wire import tuple_to_lattice
    from executor.lww_service import LwwCacheService
    from hydro_proto import anna_pb2
    from hydro_proto import cloudburst_pb2 as pb
    from hydrocache.replies import cache_reply
    from runtime.auth import AuthConfig, Security, credentials_of
    from runtime.fairpool import FairPool
    from runtime.framing import join
    from runtime.sockets import PushCache, bind_pull
    from waiting import poll_until

    a, b, c = (f"plain-{name}-{uuid.uuid4().hex[:6]}" for name in "abc")
    with anna_core.LocalCluster(gossip_period_ms=50) as anna:
        auth = AuthConfig(anna.key_dir)
        context = zmq.Context()
        security = Security.start(context, auth)
        creds = credentials_of(security)
        updates, update_address = bind_pull(context, "127.0.0.1", auth=creds)
        replies, reply_address = bind_pull(context, "127.0.0.1", auth=creds)
        push, pool = PushCache(context, auth=creds), FairPool(2, "test-fetch")
        service = LwwCacheService("n1", anna.routing_address, context=context,
                                  credentials=creds, auth=auth, update_address=update_address,
                                  ip="127.0.0.1", submit=pool.submit, fetch_threads=2,
                                  write_quorum="all", push=push,
                                  uncached_prefix="__cloudburst/", max_bytes=1 << 20,
                                  max_entries=2)
        writer = anna.client()
        pushed_keys = []

        def pump():
            while updates.poll(0):
                message = anna_pb2.KeyResponse.FromString(join(updates.recv_multipart()))
                for t in message.tuples:
                    if t.error == anna_pb2.NO_ERROR and t.payload:
                        pushed_keys.append(t.key)
                        service.on_update(t.key, tuple_to_lattice(t))
            return service.cache.get(c) == b"c2"

        try:
            for key in (a, b, c):
                writer.put(key, anna_core.LWWLattice(1, b"v1"))
            for key in (a, b, c):
                service.handle(pb.CacheRequest(op=pb.CACHE_GET, keys=[key], request_id=key,
                                               response_address=reply_address))
                assert replies.poll(10000), f"no answer for {key}"
                response = cache_reply(replies.recv_multipart(copy=False))[1][0]
                assert response.status == pb.OK and response.entries[0].found
            assert service.keys() == sorted([b, c]) and len(service.cache) <= 2
            del pushed_keys[:]
            writer.put(a, anna_core.LWWLattice(2, b"a2"))
            writer.put(c, anna_core.LWWLattice(2, b"c2"))
            poll_until(pump, what="the pushed update of the cached key")
            pump()
            assert a not in pushed_keys and a not in service.cache
        finally:
            pool.shutdown(wait=True)
            service.close()
            writer.close()
            push.close()
            updates.close(0)
            replies.close(0)
            security.stop()
            context.term()
