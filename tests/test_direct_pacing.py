"""A burst of direct calls keeps its leased worker busy (`cloudburst/pacing.py`, used by
`cloudburst/direct.py`): one direct_batch never takes all of a lease's slots (the client
sends the next batch while the worker runs the other), and a client whose calls wait for a
free slot reads the answers sooner than one with slots free (the answers free the slots).
Bounds kept: never more calls out than the lease's slots, in the order sent.

Unit tests: the policy directly (hypothesis), and the direct path with a fake owner and a
plain ZeroMQ socket as the worker (`tests/test_direct_burst.py`'s harness); the clock is
shifted rather than waited for."""
from typing import List

from hypothesis import given, strategies as st

from cloudburst import direct, pacing
from hydro_proto import cloudburst_pb2 as pb

from test_direct_burst import _call, leased_path

import zmq
from runtime.framing import parse


@given(st.integers(min_value=1, max_value=10_000))
def test_a_batch_is_bounded_and_never_takes_every_slot_of_a_lease_with_two(slots):
    cap = pacing.batch_cap(slots)
    assert 1 <= cap <= min(slots, pacing.MAX_BATCH)
    if slots >= 2:
        assert cap < slots                    # another batch can be out meanwhile
    if slots <= 2 * pacing.MAX_BATCH:
        assert 2 * cap >= slots               # two batches fill the lease's slots


def test_a_starved_sender_reads_sooner_but_one_with_free_slots_does_not():
    assert 0 < pacing.read_every(True) < pacing.read_every(False) == pacing.READ_EVERY


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=10_000))
def test_a_starved_sender_reads_no_later_than_a_full_lease_half_of_no_ops_takes(a, b):
    """Bounded, growing with the full lease's slots, never past half its calls' run at the
    shortest call (~25 us), and always sooner than a sender with free slots."""
    lo, hi = sorted((a, b))
    assert pacing.STARVED_READ_EVERY <= pacing.read_every(True, lo) <= \
        pacing.read_every(True, hi) <= pacing.STARVED_READ_MOST < pacing.READ_EVERY
    if lo >= 24:                              # above the floor: within half its no-ops' run
        assert pacing.read_every(True, lo) <= lo / 2 * 0.000025
    assert pacing.read_every(True, 2) == pacing.STARVED_READ_EVERY     # a fresh lease's
    assert pacing.read_every(True, 64) == pacing.STARVED_READ_MOST


def _freeze(monkeypatch, shift: List[float]) -> None:
    """The direct path's clock stands still but for `shift` (the test's own waits for the
    worker's messages must not count as time between reads)."""
    base = direct.time.monotonic()
    monkeypatch.setattr(direct.time, "monotonic", lambda: base + shift[0])


def _messages(worker: zmq.Socket) -> List[List[str]]:
    """Each message the worker has received (within 2 s of the first): its request ids."""
    out = []
    while worker.poll(2000 if not out else 200):
        kind, payload = parse(worker.recv())
        assert kind in ("direct", "direct_batch")
        calls = [pb.Call.FromString(payload)] if kind == "direct" else \
            list(pb.DirectBatch.FromString(payload).calls)
        out.append([c.request_id for c in calls])
    return out


def test_a_burst_goes_to_its_lease_in_batches_of_at_most_half_its_slots(monkeypatch):
    with leased_path(monkeypatch, slots=8) as (path, owner, worker, shift):
        for i in range(20):
            assert path.send(_call(f"c{i}")) == "sched"
        path.flush(force=True)                # its caller is about to wait
        sent = _messages(worker)
        assert [rid for m in sent for rid in m] == [f"c{i}" for i in range(8)]  # in order
        assert max(len(m) for m in sent) <= 4, sent
        assert len(path.held()) == 1 and path.held()[0]["in_flight"] == 8   # bounded
        assert owner.resent == []


def test_a_client_whose_calls_wait_for_a_slot_reads_the_answers_sooner(monkeypatch):
    with leased_path(monkeypatch, slots=2) as (path, owner, worker, shift):
        _freeze(monkeypatch, shift)
        for i in range(6):                    # 2 out, 4 wait for a slot
            assert path.send(_call(f"c{i}")) == "sched"
        path.flush(force=True)
        assert [rid for m in _messages(worker) for rid in m] == ["c0", "c1"]
        owner.arrived += [pb.CallResult(request_id=r, status=pb.OK) for r in ("c0", "c1")]
        # well within READ_EVERY of the last read, past the starved interval
        shift[0] = pacing.STARVED_READ_EVERY + 0.0001
        assert shift[0] < pacing.READ_EVERY
        assert path.send(_call("c6")) == "sched"
        assert owner.arrived == []            # read: the answers freed both slots
        path.flush(force=True)
        assert [rid for m in _messages(worker) for rid in m] == ["c2", "c3"]
        assert [r.request_id for r in owner.delivered] == ["c0", "c1"]


def test_a_client_with_free_slots_does_not_read_before_read_every(monkeypatch):
    with leased_path(monkeypatch, slots=8) as (path, owner, worker, shift):
        _freeze(monkeypatch, shift)
        assert path.send(_call("c0")) == "sched"
        assert [rid for m in _messages(worker) for rid in m] == ["c0"]
        owner.arrived.append(pb.CallResult(request_id="c0", status=pb.OK))
        shift[0] = pacing.STARVED_READ_EVERY + 0.0001
        path.send(_call("c1"))                # slots free: no read yet (a read costs)
        assert len(owner.arrived) == 1


@given(st.floats(min_value=0.0, max_value=10.0), st.lists(st.booleans(), max_size=40))
def test_early_renewals_back_off_while_they_do_not_grow_the_lease(wait, answers):
    """Between GROW_EVERY and GROW_MOST always; back to GROW_EVERY when a renewal grew the
    lease; doubling (to GROW_MOST) while none did, which it reaches within a few answers."""
    for grew in answers:
        before, wait = wait, pacing.next_grow_wait(wait, grew)
        assert pacing.GROW_EVERY <= wait <= pacing.GROW_MOST
        assert wait == pacing.GROW_EVERY if grew else wait >= min(before, pacing.GROW_MOST)
    for _ in range(8):
        wait = pacing.next_grow_wait(wait, False)
    assert wait == pacing.GROW_MOST


def test_a_full_lease_that_renewals_do_not_grow_is_renewed_less_and_less_often(monkeypatch):
    """A lease kept full (by long calls, say) whose renewals come back with no more slots is
    renewed early at growing intervals, not every GROW_EVERY: it costs its scheduler about a
    renewal a second at most."""
    with leased_path(monkeypatch, slots=1) as (path, owner, worker, shift):
        _freeze(monkeypatch, shift)

        def renewals() -> int:
            return len([r for r in owner.asked if list(r.renew) == ["L1"]])

        def full_again(rid: str) -> None:     # a call waits for the lease's one slot
            path.send(_call(rid))
            path.flush()

        def answered(slots: int = 1) -> None:
            path.on_lease(pb.WorkerLease(target="f", lease_id="L1", worker_id="w1",
                                         slots=slots, ttl=60, status=pb.OK))

        # the target's calls take 2 s (so a call out for the test's few seconds does not
        # hold the lease up, `cloudburst/stalls.py`); c1 then holds the lease's one slot
        assert path.send(_call("c0")) == "sched"
        shift[0] += 2.0
        owner.arrived.append(pb.CallResult(request_id="c0", status=pb.OK))
        assert path.send(_call("c1")) == "sched"
        assert [rid for m in _messages(worker) for rid in m] == ["c0", "c1"]
        asked, waits = 0, []
        for i in range(5):
            full_again(f"q{i}")
            assert renewals() == asked + 1, f"renewal {i + 1} not asked"
            asked += 1
            answered()                                       # no more slots
            wait = min(pacing.GROW_MOST, 2 * waits[-1]) if waits else pacing.GROW_EVERY
            waits.append(wait)
            shift[0] += wait * 0.9                           # not yet due
            full_again(f"r{i}")
            assert renewals() == asked, f"renewed {wait * 0.9:.3f} s after the last, " \
                f"within its back-off of {wait:.3f} s"
            shift[0] += wait * 0.2
        assert waits[-1] > 4 * pacing.GROW_EVERY             # backed off
        answered(slots=4)                                    # a wider window: at once again
        assert path.held()[0]["slots"] == 4
