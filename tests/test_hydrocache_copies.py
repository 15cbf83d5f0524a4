"""Large values cross from the node cache to a worker once: tags and worker copies (pure)."""
from __future__ import annotations

from hydrocache.copies import LocalCopies, ValueTags


def test_tags_name_objects_not_contents_and_skip_small_values():
    tags = ValueTags(min_bytes=10, capacity=2)
    a, b = b"x" * 20, bytes(bytearray(b"x" * 20))     # equal contents, different objects
    assert tags.tag(b"small", 5) == ""
    ta = tags.tag(a, len(a))
    assert ta and tags.tag(a, len(a)) == ta and tags.tag(b, len(b)) != ta
    c = b"y" * 20
    tags.tag(c, len(c))                                # capacity 2: a is forgotten...
    assert tags.tag(a, len(a)) not in ("", ta)          # ...and gets a new tag, never an old one


def test_worker_copies_are_used_when_unchanged_and_bounded():
    copies = LocalCopies(max_bytes=25)
    assert copies.use("k", "t1", False, [b"v" * 20]) == [b"v" * 20]
    assert copies.have(["k", "other"]) == {"k": "t1"}
    assert copies.use("k", "t1", True, []) == [b"v" * 20] and copies.hits == 1
    assert copies.use("k", "t2", True, []) is None            # a different version
    copies.use("j", "t3", False, [b"w" * 20])                 # over 25 bytes: k is dropped
    assert copies.have(["k", "j"]) == {"j": "t3"}
    assert copies.use("small", "", False, [b"s"]) == [b"s"] and "small" not in copies.have(["small"])


def test_tags_remember_a_bounded_number_of_bytes():
    tags = ValueTags(min_bytes=1, capacity=100, max_bytes=50)
    a, b, c = b"a" * 30, b"b" * 30, b"c" * 30
    ta = tags.tag(a, 30)
    tags.tag(b, 30)                       # 60 bytes > 50: a is forgotten (no longer kept alive)
    assert tags._bytes == 30 and tags.tag(a, 30) != ta
    assert tags.tag(c, 30) and tags._bytes <= 50


def test_an_identity_names_equal_values_held_in_different_objects():
    tags = ValueTags(min_bytes=1)
    first = tags.tag([b"abc"], 3, identity=("k", (("w", 1),)))
    assert tags.tag([b"abc"], 3, identity=("k", (("w", 1),))) == first   # another object
    assert tags.tag([b"abd"], 3, identity=("k", (("w", 2),))) != first   # another version
    assert tags.tag([b"abc"], 3) != first                                  # no identity: by object
