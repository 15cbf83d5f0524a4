"""HydroCache's capacity: LRU eviction keeps the cut a cut (the pure core, no sockets)."""
from __future__ import annotations

from hydrocache.node_cache import NodeCache
from hydrocache.version import Version


class Core:
    """The pure core, reached the way these tests reached the old service's internals."""

    def __init__(self, capacity: int) -> None:
        self.core = NodeCache("n", "inproc://cache", capacity_bytes=capacity)
        self.cut = self.core.cut

    def _offer(self, version: Version) -> None:     # a version fetched from Anna
        self.core.keeper.offer(version)

    @property
    def _bytes(self) -> int:
        return self.core.lru.bytes

    def _touch(self, keys) -> None:
        self.core.lru.touch(keys)

    def sweep(self, now: float):
        return self.core.sweep(now)

    def on_update(self, key: str, lattice) -> None:
        self.core.on_pushed(key, lattice, 0.0)


def service(capacity: int) -> Core:
    return Core(capacity)


def test_eviction_takes_dependents_along_and_respects_recency():
    s = service(capacity=25)
    s._offer(Version.new("a", {"w": 1}, {}, [b"x" * 10]))
    s._offer(Version.new("b", {"w": 2}, {"a": {"w": 1}}, [b"y" * 10]))
    s._offer(Version.new("c", {"w": 3}, {}, [b"z" * 10]))
    assert set(s.cut.keys()) == {"a", "b", "c"} and s._bytes == 30
    s._touch(["a"])                 # b is now the least recently used... but a is needed
    evicted = s.sweep(0.0)
    assert evicted == ["b"] and s._bytes == 20
    s._offer(Version.new("d", {"w": 4}, {}, [b"q" * 10]))
    evicted = set(s.sweep(0.0))
    # c is the oldest now; nothing depends on it
    assert evicted == {"c"} and set(s.cut.keys()) == {"a", "d"}
    s._touch(["d"])
    s._offer(Version.new("e", {"w": 5}, {"a": {"w": 1}}, [b"r" * 10]))
    evicted = set(s.sweep(0.0))
    # a is the least recent: evicting it takes e (which depends on it) along
    assert evicted == {"a", "e"} and set(s.cut.keys()) == {"d"}
    for k in s.cut.keys():
        for dep in s.cut.get(k).deps:
            assert dep in s.cut


def test_pushed_versions_of_evicted_keys_are_ignored_unless_needed():
    s = service(capacity=5)
    s._offer(Version.new("a", {"w": 1}, {}, [b"x" * 10]))
    assert s.sweep(0.0) == ["a"]
    s.on_update("a", Version.new("a", {"w": 2}, {}, [b"x"]).lattice)
    assert "a" not in s.cut
    s._offer(Version.new("b", {"w": 1}, {"a": {"w": 2}}, [b"y"]))
    assert "b" not in s.cut                       # waits for a
    s.on_update("a", Version.new("a", {"w": 2}, {}, [b"x"]).lattice)
    assert {"a", "b"} <= set(s.cut.keys())
