"""What a client keeps per call, cheaply: a `Future` settles what it owes its client when it
is collected (`cloudburst/futures.py`: a call still out is abandoned, its large values are
deleted), and the scans a call's arguments go through (`cloudburst/arguments.py`,
`cloudburst/big_values.py`) give what their contracts say for any arguments.

Unit tests: the client behind a Future is a fake `CallOwner` that records what it is told."""
import gc
from typing import List, Optional, Tuple

import pytest
from hypothesis import given, settings, strategies as st

from cloudburst import Reference
from cloudburst.arguments import encode, futures_in, referenced_keys, references_in
from cloudburst.big_values import Courier
from cloudburst.futures import Future
from faas.errors import ValueTooLarge
from hydro_proto import cloudburst_pb2 as pb


class _Owner:
    """A client as a Future sees it; answers come from `answers`."""

    failover_timeout = 1.0

    def __init__(self) -> None:
        self.answers = {}
        self.abandoned: List[Tuple[str, bool]] = []
        self.released: List[List[str]] = []
        self.collected_ids: List[str] = []
        self.taken: List[str] = []
        self.asked_arrived: List[List[str]] = []

    def current_scheduler(self) -> str:
        return "sched"

    def peek(self, rid: str) -> Optional[pb.CallResult]:
        return self.answers.get(rid)

    def wait_taken(self, rid: str, timeout: float):
        answer = self.answers.get(rid)
        return None if answer is None else (answer, self.collected(rid, answer))

    def sent_to(self, rid: str):
        return None

    def collected(self, rid: str, result) -> Optional[str]:
        self.collected_ids.append(rid)
        return self.moved

    moved: Optional[str] = None          # where a stopping scheduler's refusal sent the call

    def collect_arrived(self, rids):
        self.asked_arrived.append(list(rids))
        return {rid: (self.answers[rid], self.collected(rid, self.answers[rid]))
                for rid in rids if rid in self.answers}

    def abandon(self, rid: str, fire_and_forget: bool) -> None:
        self.abandoned.append((rid, fire_and_forget))

    def release_values(self, keys: List[str]) -> None:
        self.released.append(list(keys))

    def take_value(self, key: str, what: str) -> bytes:
        self.taken.append(key)
        return b"\x80\x04K\x07."         # pickled 7

    def forget(self, rid: str) -> None:
        pass

    def cancel(self, rid: str, scheduler: str) -> None:
        pass


def _drop(futures: List[Future]) -> None:
    """Drop the only reference to the Future(s) in `futures`, and collect."""
    futures.clear()
    gc.collect()


def test_a_future_dropped_unawaited_abandons_its_call_once_and_releases_its_values():
    owner = _Owner()
    held = [Future(owner, "c1", "call of f", 30.0, stored=["arg-key"])]
    _drop(held)
    assert owner.abandoned == [("c1", False)]
    assert owner.released == [["arg-key"]]


def test_a_fire_and_forget_future_dropped_says_so():
    owner = _Owner()
    _drop([Future(owner, "c1", "call of f", 30.0, fire_and_forget=True)])
    assert owner.abandoned == [("c1", True)]
    assert owner.released == []                      # nothing was stored


def test_a_future_whose_result_was_taken_owes_nothing_when_dropped():
    owner = _Owner()
    held = [Future(owner, "c1", "call of f", 30.0, stored=["arg-key"])]
    owner.answers["c1"] = pb.CallResult(request_id="c1", status=pb.OK, value=b"\x80\x04N.")
    assert held[0].get() is None
    assert owner.collected_ids == ["c1"] and owner.released == [["arg-key"]]
    _drop(held)
    assert owner.abandoned == []                     # its end was seen
    assert owner.released == [["arg-key"]]           # released once, not again


def test_a_large_result_left_unread_is_released_when_its_future_is_dropped():
    owner = _Owner()
    held = [Future(owner, "c1", "call of f", 30.0)]
    owner.answers["c1"] = pb.CallResult(request_id="c1", status=pb.OK, value_key="big")
    assert held[0].done()                                  # arrived, never read with get()
    assert owner.released == []
    _drop(held)
    assert owner.abandoned == [] and owner.released == [["big"]]


def test_a_large_result_read_is_not_released_again():
    owner = _Owner()
    held = [Future(owner, "c1", "call of f", 30.0)]
    owner.answers["c1"] = pb.CallResult(request_id="c1", status=pb.OK, value_key="big")
    assert held[0].get() == 7 and owner.taken == ["big"]   # take() deletes it
    _drop(held)
    assert owner.released == []


def test_a_future_names_the_scheduler_its_call_was_moved_to_once_collected():
    owner = _Owner()
    f = Future(owner, "c1", "call of f", 30.0, scheduler="first")
    owner.answers["c1"] = pb.CallResult(request_id="c1", status=pb.OK, value=b"\x80\x04N.")
    owner.moved = "second"
    assert f.get() is None and f.scheduler == "second"
    g = Future(owner, "c2", "call of g", 30.0, scheduler="first")
    owner.answers["c2"] = pb.CallResult(request_id="c2", status=pb.OK, value=b"\x80\x04N.")
    owner.moved = None                                # not kept: where it was sent stands
    assert g.get() is None and g.scheduler == "first"


def test_gather_takes_the_arrived_results_in_one_step_and_waits_for_the_rest():
    from cloudburst.futures import gather
    owner = _Owner()
    futures = [Future(owner, f"c{i}", f"call {i}", 30.0, scheduler="first",
                      stored=[f"arg-{i}"] if i == 1 else ()) for i in range(4)]
    for i in (0, 1, 3):
        owner.answers[f"c{i}"] = pb.CallResult(request_id=f"c{i}", status=pb.OK,
                                               value=b"\x80\x04K\x07.")    # pickled 7
    owner.moved = "second"
    arrived = futures[:2] + [futures[3], futures[0]]       # one of them twice
    assert gather(arrived) == [7, 7, 7, 7]
    assert owner.asked_arrived == [["c0", "c1", "c3"]]     # once, each call once
    assert sorted(owner.collected_ids) == ["c0", "c1", "c3"]
    assert owner.released == [["arg-1"]]                   # its arguments, once
    assert all(f.scheduler == "second" for f in arrived)
    owner.answers["c2"] = pb.CallResult(request_id="c2", status=pb.OK, value=b"\x80\x04N.")
    owner.moved = None
    assert gather(futures) == [7, 7, None, 7]              # c2 has arrived since
    assert owner.asked_arrived[-1] == ["c2"]               # only what was still out
    assert owner.collected_ids[-1] == "c2" and futures[2].scheduler == "first"
    _drop(futures)
    _drop(arrived)
    assert owner.abandoned == []                           # every end was seen


def test_gather_takes_what_arrived_while_it_waited_for_an_earlier_one_in_one_step():
    from cloudburst.futures import TAKE_AHEAD, gather
    owner = _Owner()
    n = TAKE_AHEAD + 8
    futures = [Future(owner, f"c{i}", f"call {i}", 30.0) for i in range(n)]
    done = pb.CallResult(status=pb.OK, value=b"\x80\x04N.")

    def arrives_while_c0_is_waited_for(rid, timeout):
        for i in range(n):             # every answer comes in with c0's
            owner.answers[f"c{i}"] = pb.CallResult(request_id=f"c{i}", status=pb.OK,
                                                   value=done.value)
        return owner.answers[rid], owner.collected(rid, owner.answers[rid])
    owner.wait_taken = arrives_while_c0_is_waited_for
    assert gather(futures) == [None] * n
    # one look at all before waiting (nothing yet), c0's own wait, then c1 on in one step
    # per TAKE_AHEAD: not one wait each
    assert owner.asked_arrived[0] == [f"c{i}" for i in range(n)]
    assert owner.asked_arrived[1] == [f"c{i}" for i in range(TAKE_AHEAD)]
    assert owner.asked_arrived[2] == [f"c{i}" for i in range(1, TAKE_AHEAD + 1)]
    assert owner.asked_arrived[3:] == [[f"c{i}" for i in range(TAKE_AHEAD + 1, n)]]
    assert sorted(owner.collected_ids) == sorted(f"c{i}" for i in range(n))


def test_a_cancelled_future_owes_no_abandon():
    owner = _Owner()
    held = [Future(owner, "c1", "call of f", 30.0)]
    assert held[0].cancel()
    _drop(held)
    assert owner.abandoned == []


def test_a_client_that_raises_while_a_future_is_collected_is_not_the_collectors_problem():
    owner = _Owner()

    def broken(rid: str, fire_and_forget: bool) -> None:
        raise RuntimeError("half torn down")
    owner.abandon = broken
    _drop([Future(owner, "c1", "call of f", 30.0)])    # nothing raised


# ---- argument scans ----
_plain = st.one_of(st.integers(), st.text(max_size=5), st.none())
_ref = st.builds(Reference, st.text("abc", min_size=1, max_size=3))
_value = st.one_of(_plain, _ref)


@settings(max_examples=60, deadline=None)
@given(st.lists(_value, max_size=5), st.dictionaries(st.sampled_from("xyzw"), _value, max_size=4))
def test_references_in_names_every_reference_positional_then_keyword_by_name(args, kwargs):
    arglist = encode(args, kwargs)
    want = [a.key for a in args if isinstance(a, Reference)] + \
        [kwargs[k].key for k in sorted(kwargs) if isinstance(kwargs[k], Reference)]
    assert references_in(arglist) == want
    call = pb.Call()
    call.args["g"].CopyFrom(encode([Reference("first")], {}))
    call.args["f"].CopyFrom(arglist)
    assert referenced_keys(call) == want + ["first"]       # functions in name order


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_plain, st.just("FUTURE")), max_size=5),
       st.dictionaries(st.sampled_from("xyz"), st.one_of(_plain, st.just("FUTURE")), max_size=3),
       st.sampled_from(["tuple", "list", "dict_values"]))
def test_futures_in_finds_every_future_in_any_group(args, kwargs, shape):
    owner = _Owner()
    made = []

    def swap(v):
        if v == "FUTURE":
            made.append(Future(owner, f"c{len(made)}", "call", 30.0))
            return made[-1]
        return v
    args = [swap(a) for a in args]
    kwargs = {k: swap(v) for k, v in kwargs.items()}
    group = tuple(args) if shape == "tuple" else list(args)
    got = futures_in(group, kwargs, {}) if shape != "dict_values" else \
        futures_in(dict(enumerate(args)), kwargs)
    assert [id(f) for f in got] == [id(f) for f in made]
    for f in made:
        f.cancel()


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=4), st.dictionaries(st.sampled_from("ab"),
                                                                  st.integers(0, 40), max_size=2),
       st.integers(1, 40), st.booleans())
def test_externalize_refuses_only_what_is_over_the_limit_and_stores_only_what_is_over_the_threshold(
        sizes, kwsizes, limit, by_reference):
    import cloudburst.big_values as bv
    stored_values = []

    class _Store:
        def put_bytes(self, key, value):
            stored_values.append(value)

        def delete(self, key):
            pass
    threshold = 20
    real = bv.BY_REFERENCE_BYTES, bv.transport
    bv.BY_REFERENCE_BYTES = threshold
    bv.transport = lambda size, lim: real[1](size, lim, threshold)
    try:
        courier = Courier(lambda: _Store(), limit, "client-x")
        arglist = pb.ArgumentList()
        for n in sizes:
            arglist.args.add(value=b"v" * n)
        for k, n in kwsizes.items():
            arglist.kwargs[k].value = b"v" * n
        everything = list(sizes) + list(kwsizes.values())
        if any(n > limit for n in everything):
            with pytest.raises(ValueTooLarge):
                courier.externalize("f", arglist, by_reference)
            return
        keys = courier.externalize("f", arglist, by_reference)
        over = [n for n in everything if n > threshold] if by_reference else []
        assert len(keys) == len(over) and sorted(map(len, stored_values)) == sorted(over)
    finally:
        bv.BY_REFERENCE_BYTES, bv.transport = real


def test_the_record_of_taken_results_keeps_the_newest_and_stays_bounded():
    """What `collected` notes for the next call through a scheduler: a caller of direct
    calls notes one per call and may report none for long; the newest MAX_FINISHED stay."""
    from cloudburst.channel import MAX_FINISHED, finished_notes
    notes = finished_notes()
    for i in range(MAX_FINISHED + 10):
        notes.extend((f"c{i}",))
    assert list(notes) == [f"c{i}" for i in range(10, MAX_FINISHED + 10)]
    notes.extend({"d1": 1, "d2": 2})             # (a step's taken answers, by request id)
    assert list(notes)[-2:] == ["d1", "d2"] and len(notes) == MAX_FINISHED
