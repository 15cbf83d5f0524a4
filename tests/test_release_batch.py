"""The scheduler's held releases (`scheduler.release_batch.ReleaseBatch`), pure: every
attempt held leaves exactly once (with a grant, once due, or when a cache's batch is full),
never later than its delay allows, and fenced at least as long as its own call needs."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from scheduler.release_batch import ReleaseBatch


def names(request: pb.CacheRequest):
    return [request.attempt_id, *request.also_release]


def test_held_until_a_grant_takes_them_or_their_delay_passes():
    b = ReleaseBatch(max_delay=0.05, max_attempts=10)
    assert b.add("c1", ["x#0"], 5.0, 0.0) is None and b.add("c1", ["y#0", "y#s"], 2.0, 0.01) is None
    assert b.add("c2", ["x#0"], 5.0, 0.0) is None
    assert b.held() == 4 and b.next_due() == pytest.approx(0.05)
    attempts, fence = b.take("c1", 0.02)
    assert attempts == ["x#0", "y#0", "y#s"] and fence == pytest.approx(4.98)   # the latest
    assert b.take("c1", 0.02) == ([], 0.0)
    assert b.due(0.049) == []
    (cache, request), = b.due(0.05)
    assert cache == "c2" and request.op == pb.CAUSAL_RELEASE and names(request) == ["x#0"]
    assert request.timeout == pytest.approx(4.95)
    assert b.held() == 0 and b.next_due() is None and b.add("c1", [], 1.0, 1.0) is None


def test_a_full_batch_goes_at_once():
    b = ReleaseBatch(max_delay=10.0, max_attempts=3)
    assert b.add("c", ["a", "b"], 1.0, 0.0) is None
    cache, request = b.add("c", ["c"], 1.0, 0.0)
    assert cache == "c" and names(request) == ["a", "b", "c"] and b.held() == 0
    with pytest.raises(ValueError):
        ReleaseBatch(max_attempts=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "take", "due"]), st.sampled_from(["c1", "c2"]),
                          st.floats(0.0, 0.03), st.floats(0.01, 5.0)), max_size=60))
def test_every_attempt_leaves_once_in_time_and_fenced_long_enough(ops):
    b = ReleaseBatch(max_delay=0.05, max_attempts=4)
    now, n = 0.0, 0
    added = {}                       # attempt -> (cache, when, fence until)
    left = {}                        # attempt -> (cache, when, fence until)

    def out(cache, attempts, fence):
        for a in attempts:
            assert a not in left
            left[a] = (cache, now, now + fence)

    for op, cache, dt, timeout in ops:
        now += dt
        if op == "add":
            ids = [f"a{n}", f"a{n}s"]
            n += 1
            for a in ids:
                added[a] = (cache, now, now + timeout)
            full = b.add(cache, ids, timeout, now)
            if full is not None:
                out(full[0], names(full[1]), full[1].timeout)
        elif op == "take":
            out(cache, *b.take(cache, now))
        for c, request in b.due(now):
            out(c, names(request), request.timeout)
        assert all(len(h.attempts) < 4 for h in b._held.values())
    now += 0.06
    for c, request in b.due(now):
        out(c, names(request), request.timeout)
    assert sorted(left) == sorted(added) and b.held() == 0
    for a, (cache, when, until) in added.items():
        c, gone, fenced = left[a]
        assert c == cache                                  # to its own cache
        # at the first check past its delay (the ops check every step, then once at the end)
        assert gone - when <= 0.05 + 0.03 + 1e-9 or gone == now
        assert fenced >= until - 1e-9                      # at least as long as it needed
