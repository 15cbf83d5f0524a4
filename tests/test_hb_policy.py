"""HB's snapshot-round policy (scheduler/hb_policy.py): eager for a new DAG, lazy once its OPT
attempts seldom abort, eager again when they abort often; bounded."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.hb_policy import SnapshotPolicy


def test_a_new_dag_is_eager_until_there_is_evidence():
    p = SnapshotPolicy(window=10, min_outcomes=5, lazy_below=0.1, eager_above=0.3)
    assert p.eager("d") and p.rate("d") == 1.0
    for n in range(4):
        p.record("d", False)
        assert p.eager("d"), f"lazy after {n + 1} outcomes, fewer than min_outcomes"
    p.record("d", False)
    assert not p.eager("d") and p.rate("d") == 0.0
    assert p.eager("other")                  # per DAG


def test_hysteresis_between_lazy_below_and_eager_above():
    p = SnapshotPolicy(window=10, min_outcomes=10, lazy_below=0.1, eager_above=0.3)
    for _ in range(10):
        p.record("d", False)
    assert not p.eager("d")
    p.record("d", True)
    p.record("d", True)                      # 2 of the last 10: between the thresholds
    assert not p.eager("d") and p.rate("d") == pytest.approx(0.2)
    p.record("d", True)                      # 3 of 10: eager again
    assert p.eager("d")
    for _ in range(9):                       # the window holds 1 abort of 10: not below 0.1
        p.record("d", False)
    assert p.rate("d") == pytest.approx(0.1) and p.eager("d")
    p.record("d", False)                     # 0 of 10: lazy
    assert not p.eager("d")


def test_bounded_in_dags_and_outcomes():
    p = SnapshotPolicy(window=4, min_outcomes=2, max_dags=3)
    for i in range(10):
        for _ in range(6):
            p.record(f"d{i}", False)
    assert len(p) == 3
    assert not p.eager("d9") and p.eager("d0")   # the oldest forgotten: eager again


@pytest.mark.parametrize("kwargs", [dict(lazy_below=0.5, eager_above=0.2),
                                    dict(window=0), dict(max_dags=0),
                                    dict(window=5, min_outcomes=6)])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        SnapshotPolicy(**kwargs)


@settings(max_examples=300, deadline=None)
@given(window=st.integers(1, 12), min_outcomes=st.integers(0, 12),
       thresholds=st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted),
       outcomes=st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=80))
def test_the_mode_follows_the_recent_abort_rate(window, min_outcomes, thresholds, outcomes):
    """Against a model: lazy only with enough outcomes and a rate below `eager_above` (below
    `lazy_below` to become lazy), the rate over the last `window` outcomes of that DAG."""
    min_outcomes = min(min_outcomes, window)
    lazy_below, eager_above = thresholds
    p = SnapshotPolicy(window=window, min_outcomes=min_outcomes, lazy_below=lazy_below,
                       eager_above=eager_above)
    seen = {}
    lazy = {}
    for dag, aborted in outcomes:
        seen.setdefault(dag, []).append(aborted)
        last = seen[dag][-window:]
        rate = sum(last) / len(last)
        if len(last) < min_outcomes:
            lazy[dag] = False
        else:
            lazy[dag] = rate < (eager_above if lazy.get(dag) else lazy_below)
        p.record(dag, aborted)
        assert p.rate(dag) == pytest.approx(rate)
        assert p.eager(dag) is not lazy[dag]
    # a DAG whose recent OPT attempts all aborted is always eager
    for dag, history in seen.items():
        if all(history[-window:]):
            assert p.eager(dag)
