"""A burst's direct_batch encoded from its calls' own serializations
(`cloudburst/worker_routes.py`): the bytes are exactly the `DirectBatch` protobuf writes, so
the worker reads the same calls."""
from hypothesis import given, settings, strategies as st

from cloudburst.worker_routes import EncodedBatch, encode_batch
from hydro_proto import cloudburst_pb2 as pb
from runtime.framing import encode

_call = st.builds(
    lambda name, rid, timeout, value, lease: _make(name, rid, timeout, value, lease),
    st.text(min_size=1, max_size=200), st.text(max_size=40),
    st.floats(0, 1e6, allow_nan=False), st.binary(max_size=5000), st.text(max_size=40))


def _make(name: str, rid: str, timeout: float, value: bytes, lease: str) -> pb.Call:
    call = pb.Call(function=name, request_id=rid, timeout=timeout, lease_id=lease)
    call.args[name].args.add().value = value
    return call


@settings(max_examples=200, deadline=None)
@given(st.lists(_call, max_size=40))
def test_a_batch_encodes_byte_for_byte_as_protobuf_and_reads_back_as_its_calls(calls):
    data = encode_batch(calls)
    assert data == pb.DirectBatch(calls=calls).SerializeToString()
    assert list(pb.DirectBatch.FromString(data).calls) == calls


def test_an_encoded_batch_frames_as_a_direct_batch_and_names_its_calls():
    calls = [_make("f", f"r{i}", 1.0, b"x" * i, "L") for i in range(3)]
    batch = EncodedBatch(calls)
    assert encode("direct_batch", batch) == encode("direct_batch", pb.DirectBatch(calls=calls))
    assert [c.request_id for c in batch.calls] == ["r0", "r1", "r2"]
