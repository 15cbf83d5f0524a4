"""`hydrocache.lru.ByteLru`: bytes counted per key, least recently used first."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hydrocache.lru import ByteLru


def test_put_touch_and_pop_follow_recency_and_count_bytes():
    lru = ByteLru(capacity=25)
    lru.put("a", 10)
    lru.put("b", 10)
    lru.put("c", 10)
    assert lru.bytes == 30 and lru.over() and lru.order() == ["a", "b", "c"]
    lru.touch(["a", "nope"])                 # a touch never adds a key
    assert lru.order() == ["b", "c", "a"] and "nope" not in lru
    assert lru.pop_oldest() == "b" and lru.bytes == 20 and not lru.over()
    lru.put("c", 3)                          # a new size, and most recent
    assert lru.bytes == 13 and lru.order() == ["a", "c"] and lru.size("c") == 3
    lru.discard("a")
    lru.discard("a")
    assert lru.bytes == 3 and len(lru) == 1
    assert lru.pop_oldest() == "c" and lru.pop_oldest() is None and lru.bytes == 0


def test_at_capacity_is_not_over_and_bad_sizes_are_refused():
    lru = ByteLru(capacity=4)
    lru.put("a", 4)
    assert not lru.over()
    with pytest.raises(ValueError, match="size"):
        lru.put("b", -1)
    with pytest.raises(ValueError, match="capacity"):
        ByteLru(-1)


ops = st.lists(st.tuples(st.sampled_from(["put", "touch", "pop", "discard"]),
                         st.sampled_from("abcde"), st.integers(0, 50)), max_size=60)


@given(ops)
def test_behaves_like_a_list_in_recency_order(steps):
    lru, model = ByteLru(capacity=60), []            # model: [(key, size)], oldest first
    for op, key, size in steps:
        if op == "put":
            model = [(k, s) for k, s in model if k != key] + [(key, size)]
            lru.put(key, size)
        elif op == "touch":
            model = [(k, s) for k, s in model if k != key] + [(k, s) for k, s in model if k == key]
            lru.touch([key])
        elif op == "pop":
            assert lru.pop_oldest() == (model.pop(0)[0] if model else None)
        else:
            model = [(k, s) for k, s in model if k != key]
            lru.discard(key)
        assert lru.order() == [k for k, _ in model]
        assert lru.bytes == sum(s for _, s in model)
        assert lru.over() == (lru.bytes > 60)
