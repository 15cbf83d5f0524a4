"""A client's prepared Calls (`cloudburst/call_templates.py`): a call built from a template
is the call built field by field, owned by its caller, and the cache stays bounded."""
import pytest
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb

from cloudburst.call_templates import CallTemplates
from waiting import run_in_threads

names = st.text(min_size=1, max_size=12)
shapes = st.tuples(names, st.booleans(), st.sampled_from([pb.LWW, pb.CAUSAL]),
                   st.sampled_from([pb.HB, pb.CT, pb.OPT, pb.CON]),
                   st.sampled_from([0.0, 0.5, 30.0]))


def by_fields(name, dag, consistency, protocol, time_limit):
    kind = {"dag": name} if dag else {"function": name}
    return pb.Call(consistency=consistency, protocol=protocol, time_limit=time_limit, **kind)


@settings(max_examples=200, deadline=None)
@given(st.lists(shapes, min_size=1, max_size=30), st.integers(1, 8))
def test_a_call_from_a_template_is_the_call_built_field_by_field(sequence, limit):
    templates = CallTemplates(limit)
    for shape in sequence:
        call = templates.new(*shape)
        assert call == by_fields(*shape)
        assert call.SerializeToString(deterministic=True) == \
            by_fields(*shape).SerializeToString(deterministic=True)
        assert len(templates) <= limit


def test_a_callers_changes_reach_no_other_call():
    templates = CallTemplates()
    first = templates.new("f", False, pb.LWW, pb.HB, 0.0)
    first.request_id = "r1"
    first.args["f"].args.add(value=b"x")
    first.output_key = "k"
    second = templates.new("f", False, pb.LWW, pb.HB, 0.0)
    assert second == by_fields("f", False, pb.LWW, pb.HB, 0.0)
    assert not second.args and not second.request_id and not second.output_key


def test_the_oldest_template_goes_first_when_full():
    templates = CallTemplates(2)
    templates.new("a", True, pb.LWW, pb.HB, 0.0)
    templates.new("b", True, pb.LWW, pb.HB, 0.0)
    templates.new("c", True, pb.LWW, pb.HB, 0.0)
    assert len(templates) == 2
    assert ("a", True, pb.LWW, pb.HB, 0.0) not in templates._templates
    assert ("c", True, pb.LWW, pb.HB, 0.0) in templates._templates
    with pytest.raises(ValueError):
        CallTemplates(0)


def test_several_threads_preparing_at_once_get_correct_calls():
    templates = CallTemplates(4)

    def caller(t):
        mine = []
        for i in range(300):
            shape = (f"fn{(i + t) % 7}", bool(i % 2), pb.LWW, pb.HB, 0.0)
            call = templates.new(*shape)
            assert call == by_fields(*shape)
            call.request_id = f"{t}-{i}"       # a call handed to two callers would show it
            mine.append(call)
            if i % 3:
                templates.restock()
        assert [c.request_id for c in mine] == [f"{t}-{i}" for i in range(300)]

    run_in_threads(caller, 4, 30.0, "a caller preparing calls")
    assert len(templates) <= 4


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(shapes, st.booleans()), min_size=1, max_size=30), st.integers(1, 4))
def test_a_restocked_call_is_a_fresh_call_of_its_shape_handed_out_once(sequence, limit):
    """`restock` after a call (as a client does once its call is out): the next call of the
    shape is made ahead, equal to one built field by field, never handed to two callers,
    and no more are kept than templates."""
    templates = CallTemplates(limit)
    handed = []                              # (kept alive: no object is made anew)
    for shape, restock in sequence:
        call = templates.new(*shape)
        assert call == by_fields(*shape) and not any(c is call for c in handed)
        handed.append(call)
        call.request_id = "used"            # the caller's changes stay its own
        call.args["f"].args.add(value=b"x")
        if restock:
            templates.restock()
        assert len(templates._ready) <= len(templates) <= limit
        assert set(templates._ready) <= set(templates._templates)
    for shape, _ in sequence[:3]:
        templates.restock()
        call = templates.new(*shape)
        assert call == by_fields(*shape) and not any(c is call for c in handed)
        handed.append(call)


def test_a_restocked_call_goes_with_its_template_when_the_cache_is_full():
    templates = CallTemplates(1)
    templates.new("a", True, pb.LWW, pb.HB, 0.0)
    templates.restock()
    assert ("a", True, pb.LWW, pb.HB, 0.0) in templates._ready
    templates.new("b", True, pb.LWW, pb.HB, 0.0)     # "a" is dropped, its ready call too
    assert list(templates._ready) == [] and len(templates) == 1
