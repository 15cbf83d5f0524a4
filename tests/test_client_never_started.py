"""Which call answers a client may send to another scheduler under the same request id
(`cloudburst.channel.never_started`): only those saying the call never started where it
was sent. The sending itself is the stopping-scheduler path (tests/test_scheduler_stopping.py)."""
from hypothesis import given, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from cloudburst.channel import never_started


def test_a_stopping_schedulers_refusal_and_a_first_attempts_want_of_resources_go_elsewhere():
    assert never_started(pb.CallResult(request_id="c-1", status=pb.SCHEDULER_STOPPING))
    assert never_started(pb.CallResult(request_id="c-1", status=pb.NO_RESOURCES))


def test_a_retried_attempts_want_of_resources_stands():
    # an earlier attempt ran: sending the call elsewhere would run it once more
    assert not never_started(pb.CallResult(request_id="c-1#r2", status=pb.NO_RESOURCES))


@given(st.sampled_from([v.number for v in pb.CallResult.DESCRIPTOR.fields_by_name["status"]
                        .enum_type.values]), st.text(max_size=12))
def test_no_other_answer_is_sent_elsewhere(status, rid):
    answer = pb.CallResult(request_id=rid, status=status)
    expected = status == pb.SCHEDULER_STOPPING or (status == pb.NO_RESOURCES and "#" not in rid)
    assert never_started(answer) == expected
