"""Client-side pieces of causal calls: argument encoding, protocol validation, errors."""
import pytest

from cloudburst import Reference
from faas.values import decode_arg, encode_args
from cloudburst.client import _consistency_and_protocol
from cloudburst.futures import CausalStats
from cloudburst.errors import Aborted, STATUS_OF, error_from_status
from hydro_proto import cloudburst_pb2 as pb


def test_reference_concurrent_round_trips():
    args = encode_args([Reference("a"), Reference("b", concurrent=True), 3])
    assert [a.concurrent for a in args.args] == [False, True, False]
    assert decode_arg(args.args[0]) == Reference("a")
    assert decode_arg(args.args[1]) == Reference("b", concurrent=True)
    assert decode_arg(args.args[2]) == 3
    with pytest.raises(TypeError):
        Reference("k", concurrent="yes")


def test_protocol_validation():
    assert _consistency_and_protocol("lww", None) == (pb.LWW, pb.HB)
    assert _consistency_and_protocol("causal", None) == (pb.CAUSAL, pb.HB)
    for name, value in (("ct", pb.CT), ("opt", pb.OPT), ("con", pb.CON), ("hb", pb.HB)):
        assert _consistency_and_protocol("causal", name) == (pb.CAUSAL, value)
    with pytest.raises(ValueError, match="protocol"):
        _consistency_and_protocol("lww", "ct")
    with pytest.raises(ValueError, match="MTCC"):
        _consistency_and_protocol("causal", "paxos")
    with pytest.raises(ValueError, match="consistency"):
        _consistency_and_protocol("strong", None)


def test_aborted_status_maps_to_aborted():
    assert STATUS_OF[Aborted] == pb.ABORTED
    e = error_from_status(pb.ABORTED, "gave up after 10 aborts: stale read of k")
    assert isinstance(e, Aborted) and "stale read" in str(e)


def test_causal_stats_from_proto():
    m = pb.CausalStats(protocol=pb.CON, aborts=2, remote_fetches=1, requested=pb.CON)
    m.read_set.add(key="a", vc={"x": 1})
    m.writes.add(key="b", vc={"w": 3, "x": 1})
    s = CausalStats.from_proto(m)
    assert s == CausalStats("con", 2, 1, {"a": {"x": 1}}, {"b": {"w": 3, "x": 1}}, "con",
                            "con, as asked, after 2 aborted attempt(s)")
