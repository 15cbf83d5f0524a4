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
        for i in range(300):
            shape = (f"fn{(i + t) % 7}", bool(i % 2), pb.LWW, pb.HB, 0.0)
            assert templates.new(*shape) == by_fields(*shape)

    run_in_threads(caller, 4, 30.0, "a caller preparing calls")
    assert len(templates) <= 4
