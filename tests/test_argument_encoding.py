"""Encoding a call's arguments into its own message (`cloudburst/arguments.py`,
`encode_into`): the same `ArgumentList` as `encode`, and what it reports about it (the keys
its References name, its largest value) is what reading the message back would find."""
from hypothesis import given, settings, strategies as st

from hydro_proto import cloudburst_pb2 as pb

from cloudburst.arguments import encode, encode_into, references_in
from cloudburst.big_values import Courier
from faas.values import BY_REFERENCE_BYTES, Reference

references = st.builds(Reference, st.text(min_size=1, max_size=8), st.booleans(),
                       objects=st.booleans())
plain = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
                  st.binary(max_size=64), st.tuples(st.integers(), st.text(max_size=4)),
                  st.lists(st.integers(), max_size=5))
values = st.one_of(references, plain)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(values, max_size=6), st.dictionaries(names, values, max_size=5))
def test_encoding_into_a_message_is_encoding_and_reports_what_it_holds(args, kwargs):
    out = pb.ArgumentList()
    found = encode_into(out, args, kwargs)
    assert out == encode(args, kwargs)
    assert found.references == references_in(out)
    sizes = [len(a.value) for a in list(out.args) + list(out.kwargs.values())
             if a.WhichOneof("kind") == "value"]
    assert found.largest == max(sizes, default=0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=3 * BY_REFERENCE_BYTES // 2), max_size=3),
       st.booleans())
def test_a_known_largest_value_decides_as_reading_every_value_would(blobs, by_reference):
    """`externalize` told the largest size skips reading the values only when reading
    them would store or refuse none (no store: any value it would store raises here)."""
    def no_store():
        raise AssertionError("a value was stored")
    courier = Courier(no_store, 10 * BY_REFERENCE_BYTES, "owner")
    out = pb.ArgumentList()
    found = encode_into(out, blobs, {})
    try:
        read = courier.externalize("f", pb.ArgumentList.FromString(out.SerializeToString()),
                                   by_reference)
    except AssertionError:
        read = None
    try:
        told = courier.externalize("f", out, by_reference, found.largest)
    except AssertionError:
        told = None
    assert read == told
