"""When a worker sends its `done` reports (executor.done_reports), directly and with hypothesis."""
from hypothesis import given, strategies as st

from executor.done_reports import DoneReports


def test_one_call_is_held_briefly_when_idle_and_dropped_once_the_scheduler_knows():
    d = DoneReports(hold=0.005, batch=4)
    assert not d and not d.due(0.0, idle=True)
    d.add("s", "c1", True, 0.0001, 10.0, hold=True)
    assert not d.due(10.001, idle=True)          # held for the caller's own report
    d.acknowledged(["c1"])                        # the next schedule says the scheduler knows
    assert not d and d.take() == []


def test_a_held_done_goes_after_the_hold_and_failures_go_at_once():
    d = DoneReports(hold=0.005, batch=4)
    d.add("s", "c1", True, 0.5, 10.0, hold=True)
    assert d.due(10.0051, idle=True)
    assert d.take() == [("s", ["c1"], [], 0.5)]
    d.add("s", "c2", False, 0.1, 11.0, hold=True)  # a failure is not held
    assert d.due(11.0, idle=True)
    d.take()
    d.add("s", "c3", True, 0.1, 12.0)             # its call ran elsewhere too: not held
    assert d.due(12.0, idle=True)


def test_dones_wait_while_messages_wait_but_never_more_than_the_batch():
    d = DoneReports(hold=0.005, batch=3)
    d.add("s", "c1", True, 0.0, 0.0)
    d.add("s", "c2", True, 0.0, 0.0)
    assert not d.due(5.0, idle=False)             # more messages to handle first
    assert d.due(0.0, idle=True)                  # two owed: no holding
    d.add("t", "c3", True, 0.0, 0.0)
    assert d.due(0.0, idle=False)                 # the batch is full
    assert sorted(d.take()) == [("s", ["c1", "c2"], [], 0.0), ("t", ["c3"], [], 0.0)]


@given(st.lists(st.tuples(st.sampled_from(["add", "ack", "take"]), st.integers(0, 6),
                          st.booleans(), st.floats(0, 0.01))))
def test_every_call_is_reported_once_or_acknowledged(ops):
    d = DoneReports(hold=0.005, batch=4)
    owed, sent, acked, now, n = set(), [], set(), 0.0, 0
    for op, k, ok, dt in ops:
        now += dt
        if op == "add":
            n += 1
            cid = f"c{n}"
            d.add("s", cid, ok, 0.0, now, hold=k % 2 == 0)
            owed.add((cid, ok))
        elif op == "ack":
            ids = {c for c, ok_ in owed if ok_ and int(c[1:]) % (k + 1) == 0}
            d.acknowledged(ids)
            acked |= ids
            owed = {(c, o) for c, o in owed if c not in ids}
        else:
            for _, done, failed, _ in d.take():
                sent += done + failed
            owed = set()
        assert bool(d) == bool(owed)
        if len(owed) >= 4:
            assert d.due(now, idle=False)
    for _, done, failed, _ in d.take():
        sent += done + failed
    assert len(sent) == len(set(sent)) and not (set(sent) & acked)
    assert len(sent) + len(acked) == n
