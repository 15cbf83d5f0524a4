"""Worker leases' rules, tested directly: the scheduler's `LeaseBook` (grant, renew, revoke,
reclaim) and the worker's `LeaseAdmission` (admit, slots, expiry, revocation)."""
import pytest
from hypothesis import example, given, settings, strategies as st

from executor.leased import CANCELLED, LATE_GRACE, LeaseAdmission
from scheduler.worker_leases import (SCHEDULER_SLOTS, Lease, LeaseBook, Revoked, leasable,
                                     shared_workers, worker_ttl)

T = ["t0"]          # the worker's sources' schedules (opaque to the core)


def _grant(book, lid="L1", client="client:a", answer="A", target="f", worker="w1", slots=2,
           now=0.0, waiting=0):
    return book.grant(lid, client, answer, target, False, worker, slots, now, waiting)


# ---- the scheduler's book ----
def test_a_grant_is_bounded_in_time_and_renewed_only_by_its_client():
    book = LeaseBook(ttl=2.0)
    lease = _grant(book)
    assert isinstance(lease, Lease) and lease.expires == 2.0 and book.reserved() == {"w1": 2}
    assert book.renew("L1", "client:other", 1.0) is None        # not its lease
    assert book.renew("L1", "client:a", 1.0).expires == 3.0
    assert book.renew("L1", "client:a", 5.0) is None            # a ttl past its end: none
    revoked = book.expire(3.0)
    assert [r.lease.lease_id for r in revoked] == ["L1"] and not book.reserved()


def test_no_grant_while_calls_wait_and_a_renewal_then_gives_the_slots_back():
    book = LeaseBook(ttl=2.0)
    assert "wait in the scheduler's queue" in _grant(book, waiting=3)
    _grant(book)
    r = book.renew("L1", "client:a", 0.5, waiting=1)
    assert isinstance(r, Revoked) and not r.worker_died and book.lease("L1") is None


def test_one_lease_per_client_and_target_and_bounds():
    book = LeaseBook(ttl=2.0, max_leases=3, max_per_client=2)
    first = _grant(book, "L1")
    again = _grant(book, "L2", now=1.0)
    assert again is first and first.expires == 3.0 and len(book) == 1
    _grant(book, "L3", target="g")
    assert "this client holds its most leases" in _grant(book, "L4", target="h")
    _grant(book, "L5", client="client:b", answer="B", target="h")
    assert "the scheduler holds its most leases" in _grant(book, "L6", client="client:c",
                                                           answer="C")


def test_a_dead_worker_revokes_its_leases_as_lost():
    book = LeaseBook()
    _grant(book, "L1", worker="w1")
    _grant(book, "L2", target="g", worker="w2")
    revoked = book.worker_lost("w1", "died")
    assert [(r.lease.lease_id, r.worker_died) for r in revoked] == [("L1", True)]
    assert "w1 died" in revoked[0].reason and book.reserved() == {"w2": 2}


def test_reclaim_revokes_the_oldest_leases_until_the_waiting_calls_are_covered():
    book = LeaseBook()
    _grant(book, "L1", worker="w1", slots=2, now=0.0)
    _grant(book, "L2", target="g", worker="w2", slots=2, now=1.0)
    _grant(book, "L3", target="h", worker="w3", slots=2, now=2.0)
    assert book.reclaim(0) == []
    assert [r.lease.lease_id for r in book.reclaim(3)] == ["L1", "L2"]
    assert book.reserved() == {"w3": 2}


def test_release_is_the_clients_own():
    book = LeaseBook()
    _grant(book)
    assert book.release("L1", "client:b") is None
    assert book.release("L1", "client:a").lease_id == "L1" and len(book) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["grant", "renew", "release", "expire", "lost",
                                           "reclaim"]),
                          st.integers(0, 5), st.integers(0, 2), st.integers(0, 3),
                          st.integers(0, 10)), max_size=40))
def test_the_book_never_exceeds_its_bounds_nor_reserves_for_dead_or_expired_leases(ops):
    book = LeaseBook(ttl=1.0, max_leases=4, max_per_client=2)
    now, n = 0.0, 0
    for op, lease, client, worker, dt in ops:
        now += dt / 10
        c = f"client:{client}"
        if op == "grant":
            n += 1
            _grant(book, f"L{n}", c, c, f"t{lease}", f"w{worker}", 1 + worker, now)
        elif op == "renew":
            book.renew(f"L{lease}", c, now, waiting=worker % 2)
        elif op == "release":
            book.release(f"L{lease}", c)
        elif op == "expire":
            book.expire(now)
        elif op == "lost":
            book.worker_lost(f"w{worker}")
            assert f"w{worker}" not in book.reserved()
        else:
            book.reclaim(worker)
        assert len(book) <= 4
        per_client = {}
        for lid in [f"L{i}" for i in range(n + 1)]:
            held = book.lease(lid)
            if held is not None:
                per_client[held.client] = per_client.get(held.client, 0) + 1
        assert all(v <= 2 for v in per_client.values())
    book.expire(now + 1.0)
    assert book.reserved() == {} and len(book) == 0


# ---- the worker's admission ----
def test_a_call_is_admitted_only_within_a_lease_the_scheduler_told_of():
    a = LeaseAdmission()
    why, _ = a.admit("forged", "client:a", "c1", 10.0, 0.0)
    assert "no lease of that id" in why
    a.told("L1", "client:a", 2, 2.0, 0.0, T)
    assert a.admit("L1", "client:b", "c1", 10.0, 0.5)[0] == "the lease belongs to another client"
    assert a.admit("L1", "client:a", "c1", 10.0, 0.5) == (None, T)
    assert "already admitted" in a.admit("L1", "client:a", "c1", 10.0, 0.5)[0]
    assert a.admit("L1", "client:a", "c2", 10.0, 0.5)[0] is None
    assert "every slot" in a.admit("L1", "client:a", "c3", 10.0, 0.5)[0]
    assert a.finished("c1") and not a.finished("c1")          # once, and a slot is free
    assert a.admit("L1", "client:a", "c3", 10.0, 0.5)[0] is None


def test_expired_and_revoked_leases_admit_nothing_but_admitted_calls_run_on():
    a = LeaseAdmission()
    a.told("L1", "client:a", 1, 2.0, 0.0, T)
    assert a.admit("L1", "client:a", "c1", 10.0, 0.0)[0] is None
    assert a.admit("L1", "client:a", "c2", 10.0, 2.0)[0] == "its lease expired"
    a.told("L1", "client:a", 1, 2.0, 1.0)                     # renewed before the end
    assert a.admit("L1", "client:a", "c2", 10.0, 2.5)[0] is not None   # one slot, in use
    a.told("L1", "", 0, 0.0, 2.6, revoked=True, reason="its client gave it back")
    assert "revoked (its client gave it back)" in a.admit("L1", "client:a", "c3", 10.0, 2.6)[0]
    assert a.finished("c1")                                   # the admitted call ended
    a.told("L1", "client:a", 1, 2.0, 2.7)                     # a late renewal: stays revoked
    assert a.admit("L1", "client:a", "c4", 10.0, 2.8)[0] is not None
    a.told("L2", "client:a", 1, 1.0, 3.0, T)
    a.expire(4.0)
    assert "revoked (it expired)" in a.admit("L2", "client:a", "c5", 10.0, 4.0)[0]


def test_a_renewal_of_an_unknown_lease_grants_nothing_and_slots_are_freed_past_deadlines():
    a = LeaseAdmission()
    a.told("L1", "client:a", 1, 5.0, 0.0)                     # no schedules: not a grant
    assert "no lease of that id" in a.admit("L1", "client:a", "c1", 1.0, 0.0)[0]
    a.told("L1", "client:a", 1, 50.0, 0.0, T)
    assert a.admit("L1", "client:a", "c1", 1.0, 0.0)[0] is None
    a.expire(1.0 + LATE_GRACE + 0.1)                          # its end never came
    assert a.in_flight("L1") == 0 and a.admit("L1", "client:a", "c2", 99.0, 7.0)[0] is None


def test_the_worker_keeps_a_bounded_number_of_leases():
    a = LeaseAdmission(max_leases=2)
    for i in range(3):
        a.told(f"L{i}", "c", 1, 1.0 + i, 0.0, T)
    assert len(a) == 2 and "revoked" in a.admit("L0", "c", "x", 9.0, 0.0)[0]
    with pytest.raises(ValueError):
        LeaseAdmission(0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["told", "revoke", "admit", "finish", "expire"]),
                          st.integers(0, 3), st.integers(0, 1), st.integers(0, 8),
                          st.integers(0, 7)), max_size=40))
def test_admitted_calls_never_exceed_a_leases_slots_nor_come_from_another_client(ops):
    a = LeaseAdmission(max_leases=3)
    now = 0.0
    owner, slots, live_until, revoked = {}, {}, {}, set()
    admitted = {}
    for op, lease, client, call, dt in ops:
        now += dt / 10
        lid, c, cid = f"L{lease}", f"client:{client}", f"c{call}"
        if op == "told":
            a.told(lid, c, 1 + client, 1.0, now, T)
            owner.setdefault(lid, c)
            slots.setdefault(lid, 1 + client)
        elif op == "revoke":
            a.told(lid, "", 0, 0, now, revoked=True)
            revoked.add(lid)
        elif op == "admit":
            why, schedules = a.admit(lid, c, cid, now + 5.0, now)
            if why is None:
                assert schedules == T and owner.get(lid) == c and lid not in revoked
                admitted[cid] = lid
                assert a.in_flight(lid) <= slots[lid]
        elif op == "finish":
            if a.finished(cid):
                admitted.pop(cid)
        else:
            a.expire(now)


def test_a_renewal_after_a_re_registration_revokes_the_lease():
    book = LeaseBook()
    book.grant("L1", "client:a", "A", "f", False, "w1", 2, 0.0, versions={"f": "v1"})
    assert isinstance(book.renew("L1", "client:a", 0.5, versions={"f": "v1"}), Lease)
    r = book.renew("L1", "client:a", 0.6, versions={"f": "v2"})
    assert isinstance(r, Revoked) and "registered again" in r.reason and len(book) == 0


def test_a_registration_revokes_at_once_the_leases_that_run_the_name_and_only_those():
    book = LeaseBook()
    book.grant("F", "client:a", "A", "f", False, "w1", 1, 0.0, versions={"f": "v1"})
    book.grant("G", "client:a", "A", "g", False, "w1", 1, 0.0, versions={"g": "v1"})
    book.grant("D", "client:a", "A", "d", True, "w2", 1, 0.0,
               versions={"f": "v1", "h": "v1", "\0dag": b"record"})
    book.grant("E", "client:b", "B", "e", True, "w2", 1, 0.0,
               versions={"h": "v1", "\0dag": b"record"})
    revoked = book.registered_again("f", dag=False)      # the function, and a DAG running it
    assert sorted(r.lease.lease_id for r in revoked) == ["D", "F"]
    assert all("registered again" in r.reason and not r.holder_gone for r in revoked)
    assert book.registered_again("f", dag=False) == []    # once
    assert [r.lease.lease_id for r in book.registered_again("e", dag=True)] == ["E"]
    assert book.registered_again("g", dag=True) == []      # a DAG named g: not function g
    assert book.lease("G") is not None and len(book) == 1


def test_a_cancel_that_overtakes_its_direct_call_keeps_it_from_running():
    a = LeaseAdmission()
    a.told("L1", "client:a", 1, 5.0, 0.0, T)
    assert not a.cancel("c1", 0.0)                           # not arrived yet: remembered
    assert a.admit("L1", "client:a", "c1", 10.0, 0.1) == (CANCELLED, None)
    assert a.admit("L1", "client:a", "c2", 10.0, 0.1)[0] is None
    assert a.cancel("c2", 0.2) and a.in_flight("L1") == 0    # admitted: its slot is free


def test_a_spreading_client_holds_one_lease_per_worker_within_its_bounds():
    book = LeaseBook(ttl=2.0, max_per_client=2)
    first = _grant(book, "L1", worker="w1")
    # without spread a second ask for the target gets the same lease back
    assert _grant(book, "L2", worker="w2").lease_id == "L1"
    second = book.grant("L2", "client:a", "A", "f", False, "w2", 3, 0.5, spread=True)
    assert isinstance(second, Lease) and second.lease_id == "L2"
    assert book.workers_of("client:a", "A", "f", False, 0.5) == ["w1", "w2"]
    assert book.workers_of("client:b", "A", "f", False, 0.5) == []
    # asking again on a worker it holds gives that lease back, renewed
    assert book.grant("L3", "client:a", "A", "f", False, "w2", 3, 1.0,
                      spread=True).lease_id == "L2"
    # the client's bound holds with spreading too
    assert "most leases" in book.grant("L4", "client:a", "A", "f", False, "w3", 3, 1.0,
                                       spread=True)
    assert book.reserved() == {"w1": 2, "w2": 3}
    # a renewal may grow a lease to its worker's window, never shrink it
    book.resize("L1", 9)
    book.resize("L1", 1)
    assert book.lease("L1").slots == 9 and first.slots == 9
    assert book.workers_of("client:a", "A", "f", False, 10.0) == []    # expired


def test_an_ended_lease_s_calls_are_cancelled_once_its_holder_is_gone_and_only_then():
    book = LeaseBook(ttl=2.0)
    _grant(book, "L1", answer="A")
    _grant(book, "L2", client="client:b", answer="B")
    book.heard("A", 1.0, 0.5)                   # A's lease on its calls: 1 s
    book.heard("B", 5.0, 0.5)
    book.heard("stranger", 5.0, 0.5)            # not a holder: not kept
    assert [r.lease.lease_id for r in book.expire(2.0)] == ["L1", "L2"]
    assert book.gone(1.4) == []                 # A heard 0.9 s ago: alive
    book.heard("A", None, 1.4)                  # a lease request: alive, its ttl kept
    assert book.gone(2.3) == []
    gone = book.gone(2.5)                       # A silent for more than its 1 s
    assert [(r.lease.lease_id, r.holder_gone) for r in gone] == [("L1", True)]
    assert book.gone(2.6) == []                 # once
    assert book.gone(5.4) == []                 # B heard at 0.5 with 5 s
    book.left("B")                              # B said it leaves: at once
    assert [r.lease.lease_id for r in book.gone(5.5)] == ["L2"]
    assert book.idle()
    # a living holder's ended lease is forgotten after ENDED_KEEP without a verdict
    from scheduler.worker_leases import ENDED_KEEP
    _grant(book, "L3", answer="C", now=10.0)
    book.release("L3", "client:a")
    for t in range(11, 20):
        book.heard("C", 5.0, float(t))
    assert book.gone(19.0) == [] and not book.idle()
    book.heard("C", 5.0, 12.0 + ENDED_KEEP)
    assert book.gone(13.0 + ENDED_KEEP) == [] and book.idle()


# ---- which leases go back first, and what a lease may take ----
def test_reclaim_takes_idle_workers_leases_first_then_the_oldest():
    book = LeaseBook()
    _grant(book, "L1", worker="w1", slots=2, now=0.0)          # oldest, on a busy worker
    _grant(book, "L2", target="g", worker="w2", slots=2, now=1.0)
    _grant(book, "L3", target="h", worker="w3", slots=2, now=2.0)
    got = book.reclaim(1, {"w1": 1, "w2": 0})                  # w3 missing: 0 calls
    assert [r.lease.lease_id for r in got] == ["L2"]
    assert book.reserved() == {"w1": 2, "w3": 2}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=8),
       st.dictionaries(st.sampled_from(["w0", "w1", "w2", "w3"]), st.integers(0, 3)),
       st.integers(0, 12))
def test_reclaim_covers_the_waiting_calls_from_the_least_loaded_workers(leases, loads, waiting):
    book = LeaseBook(max_per_client=16)
    for i, (worker, slots) in enumerate(leases):
        _grant(book, f"L{i}", target=f"t{i}", worker=f"w{worker}", slots=slots, now=float(i))
    before = {f"L{i}": (loads.get(f"w{w}", 0), i) for i, (w, _) in enumerate(leases)}
    got = [r.lease for r in book.reclaim(waiting, loads)]
    freed = sum(lease.slots for lease in got)
    total = sum(slots for _, slots in leases)
    # enough slots back for the waiting calls (all when fewer are leased), and no more
    # leases than that takes
    assert freed >= min(waiting, total)
    assert not got or freed - got[-1].slots < waiting
    # those taken back are the first in (calls placed on their worker, age) order
    order = sorted(before, key=before.get)
    assert [lease.lease_id for lease in got] == order[:len(got)]


@given(st.integers(1, 16), st.integers(0, 20))
def test_a_lease_never_takes_a_workers_last_free_slot(window, others):
    n = leasable(window, others)
    assert 0 <= n and (n == 0 or n + others + SCHEDULER_SLOTS <= window)
    assert n == max(0, window - others - SCHEDULER_SLOTS)


# ---- one caller at a time on a leased worker ----
def test_a_call_placed_on_a_leased_worker_revokes_the_other_clients_leases_there_only():
    book = LeaseBook(ttl=2.0)
    _grant(book, "L1", answer="A", worker="w1")
    _grant(book, "L2", client="client:b", answer="B", worker="w1", target="g")
    _grant(book, "L3", client="client:b", answer="B", worker="w2")
    assert book.placed(["w1"], "A") != [] and book.lease("L1") is not None   # its own: kept
    assert book.lease("L2") is None and book.lease("L3") is not None
    got = book.placed(["w2", "w3"], "C")
    assert [(r.lease.lease_id, r.worker_died, r.holder_gone) for r in got] == \
        [("L3", False, False)] and "another caller's call" in got[0].reason
    assert book.placed(["w1"], "A") == [] and book.reserved() == {"w1": 2}
    # ended, not forgotten: the calls admitted under them are cancelled if B goes
    book.left("B")
    assert sorted(r.lease.lease_id for r in book.gone(3.0)) == ["L2", "L3"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ABC"), st.sampled_from(["w1", "w2", "w3"])),
                max_size=10),
       st.lists(st.sampled_from(["w1", "w2", "w3"]), max_size=3), st.sampled_from("ABC"))
def test_after_a_placement_no_other_client_holds_a_lease_on_its_workers(leases, workers, caller):
    book = LeaseBook(max_per_client=16)
    for i, (answer, worker) in enumerate(leases):
        _grant(book, f"L{i}", client=f"client:{answer}", answer=answer, target=f"t{i}",
               worker=worker, now=0.0)
    live = {f"L{i}": (answer, worker) for i, (answer, worker) in enumerate(leases)}
    got = {r.lease.lease_id for r in book.placed(workers, caller)}
    # exactly the other clients' leases on those workers end; every other lease stays
    assert got == {lid for lid, (a, w) in live.items() if w in workers and a != caller}
    assert all((book.lease(lid) is None) == (lid in got) for lid in live)
    assert all(lease.answer == caller for lid in live if (lease := book.lease(lid))
               and lease.worker_id in workers)


@given(st.lists(st.tuples(st.sampled_from("ABC"),
                          st.lists(st.sampled_from(["w1", "w2", "w3"]), max_size=3)),
                max_size=8), st.sampled_from("ABC"))
def test_a_lease_goes_only_where_no_other_callers_call_runs(calls, answer):
    shared = shared_workers(calls, answer)
    for caller, ws in calls:          # every worker running another caller's call is out
        assert caller == answer or set(ws) <= shared
    for w in shared:                  # and only those: its own calls never keep it out
        assert any(caller != answer and w in ws for caller, ws in calls)


# ---- a scheduler that is behind reads renewals late ----
def test_a_renewal_read_late_by_a_scheduler_that_is_behind_keeps_the_lease():
    book = LeaseBook(ttl=2.0)
    _grant(book)                                   # ends at 2.0
    # the client renewed at 1.0, but its renewal still waits in the scheduler's input when
    # the scheduler's tick comes at 2.05: it is behind, so the lease stays
    assert book.expire(2.05, behind=True) == [] and book.lease("L1") is not None
    renewed = book.renew("L1", "client:a", 2.3)    # read now
    assert isinstance(renewed, Lease) and renewed.expires == 4.3
    assert book.expire(4.0) == []
    # behind or not, a lease is revoked once its time and one more ttl ran out
    assert [r.lease.lease_id for r in book.expire(6.4, behind=True)] == ["L1"]
    assert book.renew("L1", "client:a", 6.5) is None
    # not behind: at its end, as before
    _grant(book, "L2", now=10.0)
    assert [r.lease.lease_id for r in book.expire(12.0)] == ["L2"]
    # the worker keeps a lease through the scheduler's wait: the scheduler ends it sooner
    assert worker_ttl(2.0) >= 2.0 + book.ttl


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["renew", "tick", "tick_behind"]),
                          st.floats(0.0, 1.5)), max_size=20))
@example(ops=[("renew", 0.025), ("tick", 1.0)])     # now == renewed_at + ttl, as a float sum
def test_no_lease_outlives_two_ttls_without_a_renewal_nor_ends_before_one(ops):
    book = LeaseBook(ttl=1.0)
    _grant(book, now=0.0)
    now, renewed_at = 0.0, 0.0
    for op, dt in ops:
        now += dt
        if book.lease("L1") is None:
            break
        if op == "renew":
            if isinstance(book.renew("L1", "client:a", now), Lease):
                renewed_at = now
            continue
        revoked = book.expire(now, behind=op == "tick_behind")
        if revoked:
            # never before its end (`renewed_at + ttl`: compared as a sum, as the book does,
            # since `now - renewed_at` may round below ttl when `now` equals that sum)
            assert now >= renewed_at + 1.0
        else:
            assert now - renewed_at < 2.0 + 1e-9 or book.lease("L1") is None
