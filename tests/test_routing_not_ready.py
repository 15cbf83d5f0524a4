"""A routing that has not learned the cluster's membership says so (ROUTING_NOT_READY), and an
Anna client treats that as "ask again or elsewhere" within its deadline, never as "no node".

The membership core (`anna_core.membership`) is driven directly with explicit `now`; the
client's lookup (`anna_core.key_routing.KeyRouting`) over a scripted transport whose
routings answer as a restarted routing, a routing that dropped a node, a silent one, or an
empty cluster's would.
"""
import time
from typing import Callable, Dict, List, Optional

import pytest
from hypothesis import given, settings, strategies as st

from anna_core.errors import NoNodes, Timeout
from anna_core.key_routing import KeyRouting
from anna_core.membership import ClusterMembership
from hydro_proto import anna_pb2

CLIENT = "tcp://client:1"


def lookup(core: ClusterMembership, now: float, key: str = "k") -> anna_pb2.KeyAddressResponse:
    effects = core.address(anna_pb2.KeyAddressRequest(keys=[key], response_address=CLIENT,
                                                      request_id="q"), now)
    (out,) = [o for o in effects.send if o.address == CLIENT]
    return out.message


def heartbeat(node_id: str, tier: int = anna_pb2.MEMORY, version: int = 5):
    hb = anna_pb2.NodeHeartbeat(control_address=f"tcp://{node_id}-ctl:1",
                                membership_version=version)
    hb.node.node_id = node_id
    hb.node.tier = tier
    hb.node.worker_addresses.append(f"tcp://{node_id}:0")
    return hb


def join(node_id: str, tier: int = anna_pb2.MEMORY):
    j = anna_pb2.NodeJoin(control_address=f"tcp://{node_id}-ctl:1")
    j.node.node_id = node_id
    j.node.tier = tier
    j.node.worker_addresses.append(f"tcp://{node_id}:0")
    return j


# ---------------------------------------------------------------- the membership core

def test_a_routing_made_again_is_not_ready_until_the_heartbeats_give_it_the_membership():
    core = ClusterMembership(heartbeat_period=1.0, heartbeat_timeout=3.0, started_at=100.0)
    # before any heartbeat: not "no node" (the cluster runs; its heartbeats are on the way)
    r = lookup(core, 100.5)
    assert r.error == anna_pb2.ROUTING_NOT_READY and list(r.addresses[0].addresses) == []
    # the first heartbeat starts recovery: its ring is partial, so still not ready
    core.heartbeat(heartbeat("m0"), 101.0)
    assert core.recovering and lookup(core, 101.1).error == anna_pb2.ROUTING_NOT_READY
    core.tick(102.3)                      # recovery over (1.25 heartbeat periods)
    r = lookup(core, 102.4)
    assert r.error == anna_pb2.NO_ERROR and list(r.addresses[0].addresses) == ["tcp://m0:0"]


def test_an_empty_cluster_is_no_nodes_once_the_startup_grace_has_passed():
    core = ClusterMembership(heartbeat_timeout=3.0, started_at=0.0)
    assert core.startup_grace == 3.0
    assert lookup(core, 2.9).error == anna_pb2.ROUTING_NOT_READY
    assert lookup(core, 3.0).error == anna_pb2.NO_NODES
    # the grace is a knob: 0 says NO_NODES from the start
    assert lookup(ClusterMembership(startup_grace=0, started_at=5.0), 5.0).error == \
        anna_pb2.NO_NODES


def test_a_routing_that_lost_every_node_says_no_nodes_at_once():
    core = ClusterMembership(heartbeat_timeout=3.0, startup_grace=100.0, started_at=0.0)
    core.join(join("m0"), 1.0)
    assert lookup(core, 1.1).error == anna_pb2.NO_ERROR
    core.tick(4.5)                        # silent past the timeout: removed
    assert core.node_ids() == []
    assert lookup(core, 4.6).error == anna_pb2.NO_NODES      # learned: they are gone


def test_the_start_is_the_first_event_when_not_given():
    core = ClusterMembership(heartbeat_timeout=3.0)
    core.tick(50.0)
    assert core.started_at == 50.0
    assert lookup(core, 52.0).error == anna_pb2.ROUTING_NOT_READY
    assert lookup(core, 53.0).error == anna_pb2.NO_NODES


def test_a_negative_startup_grace_is_refused():
    with pytest.raises(ValueError, match="startup_grace"):
        ClusterMembership(startup_grace=-1)


events = st.lists(st.tuples(st.sampled_from(["join", "heartbeat", "tick", "leave"]),
                            st.sampled_from(["m0", "m1", "d0"]),
                            st.floats(0.0, 2.0)), max_size=25)


@settings(max_examples=150, deadline=None)
@given(events=events, grace=st.sampled_from([0.0, 1.0, 3.0, 10.0]), start=st.floats(0, 100))
def test_lookups_are_not_ready_exactly_while_routing_has_not_learned(events, grace, start):
    """Whatever happens, a lookup is ROUTING_NOT_READY exactly while recovery runs or, before
    routing's first member, within the grace after its start; otherwise it is the kernel's
    placement, NO_NODES when some key has none."""
    core = ClusterMembership(heartbeat_period=1.0, heartbeat_timeout=3.0,
                             startup_grace=grace, started_at=start)
    now, had_member = start, False
    for kind, node, dt in events:
        now += dt
        if kind == "join":
            core.join(join(node, anna_pb2.DISK if node.startswith("d") else anna_pb2.MEMORY), now)
        elif kind == "heartbeat":
            core.heartbeat(heartbeat(node, anna_pb2.DISK if node.startswith("d")
                                     else anna_pb2.MEMORY, version=7), now)
        elif kind == "leave":
            core.leave(anna_pb2.NodeLeave(node_id=node, control_address="tcp://c:1"), now)
        else:
            core.tick(now)
        had_member = had_member or bool(core.node_ids())
        expect_not_ready = core.recovering or (not had_member and now - start < grace)
        for key in ("k", "other"):
            r = lookup(core, now, key)
            if expect_not_ready:
                assert r.error == anna_pb2.ROUTING_NOT_READY
                assert list(r.addresses[0].addresses) == []
            else:
                placed = list(core.cluster_map.addresses(key, False))
                assert list(r.addresses[0].addresses) == placed
                assert r.error == (anna_pb2.NO_ERROR if placed else anna_pb2.NO_NODES)


# ---------------------------------------------------------------- the client's lookup

class Owner:
    """What KeyRouting reads of its client."""

    def __init__(self, routings: List[str], timeout: float = 1.0, retries: int = 2,
                 routing_timeout: float = 0.2) -> None:
        self.routing_addresses = routings
        self.response_address = CLIENT
        self.timeout, self.retries, self.routing_timeout = timeout, retries, routing_timeout


class ScriptedRoutings:
    """A transport whose routings answer by script: `answers[routing](seconds since start)`
    gives (error, addresses), or None for silence (the wait then runs to its deadline, as
    a real wait for a routing that does not answer does)."""

    def __init__(self, answers: Dict[str, Callable[[float], Optional[tuple]]]) -> None:
        self.answers = answers
        self.start = time.monotonic()
        self.sent: List[tuple] = []

    def send_kind(self, address, kind, request):
        self.sent.append((address, request.request_id, request.keys[0]))
        return True

    def collect(self, pending, deadline, message_type):
        (rid, address), = pending.items()
        key = [k for a, r, k in self.sent if r == rid][0]
        got = self.answers[address](time.monotonic() - self.start)
        if got is None:
            time.sleep(max(0.0, deadline - time.monotonic()))
            return {}
        error, addresses = got
        response = anna_pb2.KeyAddressResponse(request_id=rid, error=error)
        response.addresses.add(key=key, addresses=addresses)
        return {rid: response}


A, B = "tcp://routing-0:1", "tcp://routing-1:1"
NOT_READY = (anna_pb2.ROUTING_NOT_READY, [])
NO_NODES = (anna_pb2.NO_NODES, [])
PLACED = (anna_pb2.NO_ERROR, ["tcp://m0:0"])


def routing(answers, **owner) -> KeyRouting:
    ids = iter(range(1, 10_000))
    return KeyRouting(Owner([A, B], **owner), ScriptedRoutings(answers),
                      lambda: f"r{next(ids)}", salt=0)


def test_a_not_ready_routing_does_not_end_a_lookup_while_the_other_drops_a_node_for_a_while():
    """The rolling upgrade's NoNodes: routing-0 made again (not ready), routing-1 without
    the key's node for longer than the NO_NODES patience (0.6 s here), back at 1.0 s."""
    r = routing({A: lambda t: NOT_READY, B: lambda t: NO_NODES if t < 1.0 else PLACED})
    start = time.monotonic()
    assert r.lookup("ha/1", False) == ["tcp://m0:0"]
    assert time.monotonic() - start >= 0.9


def test_a_not_ready_routing_and_a_silent_one_go_on_until_one_answers():
    r = routing({A: lambda t: NOT_READY if t < 1.2 else PLACED, B: lambda t: None})
    assert r.lookup("ha/2", False) == ["tcp://m0:0"]


def test_routings_not_ready_until_the_deadline_is_a_timeout_naming_them():
    r = routing({A: lambda t: NOT_READY, B: lambda t: NOT_READY}, timeout=0.5, retries=1)
    start = time.monotonic()
    with pytest.raises(Timeout, match="not ready") as e:
        r.lookup("ha/3", False)
    assert A in str(e.value) and B in str(e.value)
    assert 0.9 <= time.monotonic() - start < 5.0


def test_an_empty_cluster_still_fails_with_no_nodes_after_the_patience():
    r = routing({A: lambda t: NO_NODES, B: lambda t: NO_NODES}, timeout=5.0)
    start = time.monotonic()
    with pytest.raises(NoNodes, match="no KVS node is up"):
        r.lookup("ha/4", False)
    assert time.monotonic() - start < 3.0      # the patience (0.6 s), not the deadline (15 s)


def test_a_routing_that_becomes_ready_and_says_no_nodes_counts_for_giving_up():
    r = routing({A: lambda t: NOT_READY if t < 0.3 else NO_NODES, B: lambda t: NO_NODES},
                timeout=5.0)
    start = time.monotonic()
    with pytest.raises(NoNodes):
        r.lookup("ha/5", False)
    assert time.monotonic() - start < 3.0
