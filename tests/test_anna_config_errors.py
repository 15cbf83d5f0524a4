"""Pure parts of the Python side: typed errors, configuration objects, framing helpers."""
import json

import pytest

import anna_core
from anna_core import errors
from anna_core.config import ClusterConfig, NodeConfig, Replication, RoutingConfig
from anna_core.wire import MonotoneClock
from runtime.framing import FrameError, split_frames
from hydro_proto import anna_pb2


def test_error_codes_map_to_typed_errors():
    cases = {anna_pb2.KEY_DNE: errors.KeyNotFound, anna_pb2.WRONG_OWNER: errors.WrongOwner,
             anna_pb2.LATTICE_MISMATCH: errors.LatticeTypeMismatch,
             anna_pb2.VALUE_TOO_LARGE: errors.ValueTooLarge,
             anna_pb2.UNKNOWN_LATTICE: errors.UnknownLatticeType,
             anna_pb2.MALFORMED: errors.MalformedRequest, anna_pb2.NO_NODES: errors.NoNodes,
             anna_pb2.TIMEOUT: errors.Timeout, anna_pb2.STORE_FAILED: errors.StoreFailed,
             anna_pb2.DISK_FULL: errors.DiskFull}
    for code, cls in cases.items():
        e = errors.error_from_code(code, key="k1", address="tcp://w:1", operation="PUT")
        assert type(e) is cls and isinstance(e, anna_core.AnnaError)
        assert e.key == "k1"
        assert "k1" in str(e) and ("tcp://w:1" in str(e)), str(e)
    assert isinstance(errors.error_from_code(anna_pb2.KEY_DNE), KeyError)
    assert str(errors.KeyNotFound("GET 'x': key not found", key="x")) == "GET 'x': key not found"
    assert "code 99" in str(errors.error_from_code(99))
    full = errors.error_from_code(anna_pb2.DISK_FULL, key="k", address="tcp://w:1",
                                  operation="PUT", detail="node disk-0 worker 0: disk full: ...")
    assert isinstance(full, errors.StoreFailed) and full.detail.startswith("node disk-0")
    assert "disk full" in str(full) and "node disk-0 worker 0" in str(full)


def test_timeout_names_its_stage():
    e = errors.Timeout("GET 'k' from tcp://127.0.0.1:1", key="k", seconds=1.5)
    assert e.stage == "GET 'k' from tcp://127.0.0.1:1"
    assert str(e) == "timed out waiting for GET 'k' from tcp://127.0.0.1:1 after 1.5 s"


def test_replication_coercion_and_proto_round_trip():
    r = Replication.coerce((2, 1, 1, 3))
    assert r.as_tuple() == (2, 1, 1, 3)
    assert Replication.coerce({"memory_global": 0, "disk_global": 1}).as_tuple() == (0, 1, 1, 1)
    assert Replication.from_proto(r.to_proto()) == r
    with pytest.raises(ValueError):
        Replication.coerce((1, 2, 3))
    with pytest.raises(ValueError):
        Replication(-1)


def test_node_config_json_has_the_kernel_keys():
    c = NodeConfig(node_id="disk-0", tier="disk", threads=2, data_dir="/tmp/x")
    d = json.loads(c.kernel_json())         # the process' own settings stay out of the kernel
    assert set(d) == {"node_id", "tier", "threads", "ip", "data_dir", "gossip_period_ms",
                      "max_value_bytes", "pin_threads", "log_level", "handoff_retry_ms",
                      "handoff_window_ms", "fetch_timeout_ms", "tombstone_ttl_ms",
                      "max_push_sockets", "push_handshake_ms", "stats_top_k", "service_rate",
                      "capacity_bytes",
                      "disk_sync", "disk_sync_interval_ms", "client_links", "unix_links"}
    assert d["tier"] == "disk" and d["max_value_bytes"] == 64 * 1024 * 1024
    assert NodeConfig.from_json(c.to_json()) == c
    assert NodeConfig(node_id="m", tier=0).tier == "memory"
    with pytest.raises(ValueError):
        NodeConfig(node_id="d", tier="disk")  # no data_dir
    with pytest.raises(ValueError):
        NodeConfig(node_id="m", tier="tape")


def test_placement_knobs_are_positive_and_the_kernel_reads_them():
    from anna_core import _core
    c = NodeConfig(node_id="m", handoff_retry_ms=7, handoff_window_ms=8, fetch_timeout_ms=9,
                   tombstone_ttl_ms=10, push_handshake_ms=11)
    kernel = _core.parse_node_config(c.kernel_json())
    assert [kernel[k] for k in ("handoff_retry_ms", "handoff_window_ms", "fetch_timeout_ms",
                                "tombstone_ttl_ms", "push_handshake_ms")] == [7, 8, 9, 10, 11]
    defaults = _core.parse_node_config(json.dumps({"node_id": "m", "handoff_retry_ms": None}))
    assert defaults["handoff_retry_ms"] == NodeConfig(node_id="m").handoff_retry_ms == 500
    for knob in ("handoff_retry_ms", "handoff_window_ms", "fetch_timeout_ms", "tombstone_ttl_ms",
                 "push_handshake_ms"):
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError):
                NodeConfig(node_id="m", **{knob: bad})
        with pytest.raises(ValueError):
            _core.parse_node_config(json.dumps({"node_id": "m", knob: 0}))


def test_cluster_default_replication():
    assert ClusterConfig().effective_replication().as_tuple() == (1, 1, 0, 1)
    assert ClusterConfig(memory_threads=0, disk_threads=2).effective_replication().as_tuple() == (0, 1, 1, 1)
    assert ClusterConfig(disk_threads=1).effective_replication().as_tuple() == (1, 1, 1, 1)
    assert ClusterConfig(replication=(3, 1, 0, 1)).effective_replication().as_tuple() == (3, 1, 0, 1)
    assert ClusterConfig(nodes=2).effective_pin_threads() is False
    assert ClusterConfig(nodes=1).effective_pin_threads() is True
    with pytest.raises(ValueError):
        ClusterConfig(memory_threads=0, disk_threads=0)
    assert RoutingConfig().bind_address == "tcp://127.0.0.1:*"


def test_frames_are_checked():
    assert split_frames([b"request", b"p"]) == ("request", b"p")
    # a payload larger than a frame comes in several: joined
    assert split_frames([b"request", b"p", b"x"]) == ("request", b"px")
    for bad in ([b"request"], [b"nope", b""], [b"nope", b"p", b"x"], []):
        with pytest.raises(FrameError):
            split_frames(bad)


def test_monotone_clock_strictly_increases():
    clock = MonotoneClock()
    stamps = [clock.next() for _ in range(10000)]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))


def test_public_exports():
    for name in ("Client", "LocalCluster", "LWWLattice", "SetLattice", "OrderedSetLattice",
                 "MaxLattice", "MapLattice", "PriorityLattice", "SingleKeyCausalLattice",
                 "MultiKeyCausalLattice", "AnnaError", "KeyNotFound", "Timeout"):
        assert hasattr(anna_core, name), name
