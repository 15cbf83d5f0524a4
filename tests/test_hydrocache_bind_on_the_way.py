"""A downstream function's first bind made by its node cache on the trigger's way (HB/OPT).

- the node cache's core answers a CAUSAL_BIND naming `deliver_to` with a `Reply` to that
  worker carrying the serialized trigger it came with, whatever the answer (OK, abort,
  fenced), and never as a `cache_reply` to `response_address`; other ops ignore the field;
- the service sends that reply as one "trigger" message: the trigger's bytes with the answer
  appended, which parse as the original trigger plus `bound` and `bound_values`;
- the upstream worker's request (`CausalInvocation.bind_request`) is the bind the target
  would have sent itself, and is refused (None) where that bind would not go to the cache;
- the target uses the answer for its first bind when it names the same keys (no request to
  its cache), raises the same typed errors as its own bind would, and binds as before when
  the keys differ (an HB reuse adds keys).
"""
from __future__ import annotations

from typing import List

import pytest

from hydro_proto import cloudburst_pb2 as pb
from hydrocache import service as service_mod
from hydrocache.actions import Reply, Step
from hydrocache.carried import references

from executor.cache_client import CacheClient, Fenced
from executor.causal import CausalAbortError, CausalInvocation

from hydrocache_sim import Net
from test_executor_causal_carry import ScriptedCache, schedule, upstream
from test_hydrocache_node_cache import C0, bind, got


def trigger_bytes() -> bytes:
    return pb.Trigger(call_id="c#0", source="f", target="g", value=b"result",
                      bound_keys=["a"]).SerializeToString()


# ---------------------------------------------------------------- the core
def test_a_bind_naming_deliver_to_is_answered_to_that_worker_with_its_trigger():
    net = Net(auto=True)
    net.put("a", {"w": 1}, value=b"a1")
    got(net.ask(C0, bind(["a"])))                  # in the cut: answered within handle
    core = net.cores[C0]
    req = bind(["a"], attempt="t#1", request_id="r", response_address="not-here",
               deliver_to="worker-g", deliver_trigger=trigger_bytes(), timeout=5)
    [reply] = core.handle(req, net.now).replies
    assert reply.address == "worker-g" and reply.trigger == trigger_bytes()
    assert reply.response.status == pb.OK and list(reply.frames) == [b"a1"]
    assert [e.key for e in reply.response.entries] == ["a"]


def test_a_refused_bind_on_the_way_still_goes_to_the_worker_with_its_trigger():
    net = Net(auto=True)
    net.put("a", {"w": 1}, value=b"a1")
    core = net.cores[C0]
    core.handle(pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id="t#1", timeout=5), net.now)
    req = bind(["a"], attempt="t#1", request_id="r", deliver_to="worker-g",
               deliver_trigger=trigger_bytes(), timeout=5)
    [reply] = core.handle(req, net.now).replies
    assert reply.address == "worker-g" and reply.trigger == trigger_bytes()
    assert reply.response.fenced and reply.response.status == pb.EXECUTION_ERROR


def test_other_ops_ignore_deliver_to():
    net = Net(auto=True)
    core = net.cores[C0]
    [reply] = core.handle(pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id="t#1",
                                          response_address="sched", deliver_to="worker-g",
                                          deliver_trigger=trigger_bytes()), net.now).replies
    assert reply.address == "sched" and reply.trigger == b""


# ---------------------------------------------------------------- the service
class FakePush:
    def __init__(self):
        self.sent: List[tuple] = []

    def send(self, address, kind, message):
        self.sent.append((address, kind, message.SerializeToString()))
        return True

    def send_with_frames(self, address, kind, message, frames=()):
        self.sent.append((address, kind, message.SerializeToString(), list(frames)))
        return True


def test_the_service_sends_the_trigger_with_the_answer_appended_unparsed():
    svc = service_mod.HydroCacheService.__new__(service_mod.HydroCacheService)
    svc._push = FakePush()
    answer = pb.CacheResponse(request_id="r", responder=C0)
    answer.entries.add(key="a", found=True, value_count=1)
    svc._carry(Step([Reply("worker-g", answer, [b"a1"], trigger_bytes()),
                     Reply("client", pb.CacheResponse(request_id="q"), [b"x"])], []))
    (address, kind, payload), plain = svc._push.sent
    assert (address, kind) == ("worker-g", "trigger")
    t = pb.Trigger.FromString(payload)
    assert (t.call_id, t.target, t.value, list(t.bound_keys)) == ("c#0", "g", b"result", ["a"])
    assert t.bound == answer and list(t.bound_values) == [b"a1"]
    assert plain[:2] == ("client", "cache_reply") and plain[3] == [b"x"]


# ---------------------------------------------------------------- the workers
def target_schedule(protocol=pb.OPT, reads="kj", upstreams=("f",)) -> pb.Schedule:
    s = schedule(sink=True)
    s.function = "g"
    s.consistency = pb.CAUSAL
    s.causal.caches["g"] = "tcp://c2"
    s.causal.protocol = protocol
    s.upstreams.extend(upstreams)
    for k in reads:
        s.args.args.add(reference=k)
    return s


def test_the_request_made_on_the_way_is_the_bind_the_target_would_send():
    s = target_schedule()
    keys = sorted(references(s.args))
    on_the_way = CausalInvocation(None, s, [upstream(True)], 5.0).bind_request(keys)
    cache = ScriptedCache({"k": ({"w": 1}, {}, b"k1"), "j": ({"w": 2}, {}, b"j1")})
    CausalInvocation(cache, s, [upstream(True)], 5.0).bind(keys)
    [own] = cache.requests
    assert on_the_way == own


@pytest.mark.parametrize("why", ["ct", "two upstreams", "unknown key", "no keys"])
def test_no_request_on_the_way_where_the_target_would_not_bind_at_its_cache(why):
    s = target_schedule(protocol=pb.CT if why == "ct" else pb.OPT,
                        upstreams=("f", "h") if why == "two upstreams" else ("f",))
    contexts = [upstream(True)] * len(s.upstreams)
    keys = {"unknown key": ["k", "zz"], "no keys": []}.get(why, ["k", "j"])
    assert CausalInvocation(None, s, contexts, 5.0).bind_request(keys) is None


class AnsweringClient(CacheClient):
    """The worker's cache client with no socket: `causal` is scripted, `bound` is real."""

    def __init__(self, scripted: ScriptedCache):
        from hydrocache.copies import LocalCopies
        self.cache_address = "tcp://c2"
        self.copies = LocalCopies(1 << 20)
        self.scripted = scripted

    def causal(self, req, timeout=None):
        return self.scripted.causal(req, timeout)


def delivered(response: pb.CacheResponse, values=(), keys=("j", "k")) -> pb.Trigger:
    return pb.Trigger(call_id="c#0", source="f", target="g", bound=response,
                      bound_values=list(values), bound_keys=list(keys))


def ok_answer() -> pb.CacheResponse:
    r = pb.CacheResponse()
    for k, clock in (("j", {"w": 2}), ("k", {"w": 1})):
        e = r.entries.add(key=k, found=True, value_count=1)
        e.version.vc.update(clock)
        r.context.read_set.add(key=k).vc.update(clock)
        r.context.snapshot.add(key=k).vc.update(clock)
    return r


def test_the_target_uses_the_answer_made_on_the_way_and_asks_its_cache_nothing():
    cache = AnsweringClient(ScriptedCache())
    inv = CausalInvocation(cache, target_schedule(), [upstream(True)], 5.0,
                           delivered(ok_answer(), [b"j1", b"k1"]))
    inv.bind(["k", "j"])
    assert cache.scripted.requests == []
    assert inv.value("k") == b"k1" and inv.value("j") == b"j1"
    assert inv.read_clocks() == {"j": {"w": 2}, "k": {"w": 1}}
    assert sorted(e.key for e in inv.context().read_set) == ["j", "k"]


def test_an_abort_or_a_fence_made_on_the_way_raises_as_the_targets_own_bind_would():
    abort = pb.CacheResponse(abort=True, abort_reason="stale", stale_keys=["k"])
    inv = CausalInvocation(AnsweringClient(ScriptedCache()), target_schedule(),
                           [upstream(True)], 5.0, delivered(abort))
    with pytest.raises(CausalAbortError) as e:
        inv.bind(["k", "j"])
    assert e.value.stale_keys == ["k"]
    fenced = pb.CacheResponse(status=pb.EXECUTION_ERROR, fenced=True, message="released")
    inv = CausalInvocation(AnsweringClient(ScriptedCache()), target_schedule(),
                           [upstream(True)], 5.0, delivered(fenced))
    with pytest.raises(Fenced):
        inv.bind(["k", "j"])


def test_a_first_bind_of_other_keys_goes_to_the_cache_as_before():
    scripted = ScriptedCache({"k": ({"w": 1}, {}, b"k1"), "j": ({"w": 2}, {}, b"j1"),
                              "m": ({"w": 3}, {}, b"m1")})
    inv = CausalInvocation(AnsweringClient(scripted), target_schedule(), [upstream(True)], 5.0,
                           delivered(ok_answer(), [b"j1", b"k1"]))
    inv.bind(["k", "j", "m"])       # an HB reuse's keys too: the answer does not cover them
    assert [list(r.keys) for r in scripted.requests] == [["k", "j", "m"]]
    assert inv.value("m") == b"m1"


def test_values_held_as_buffers_are_relayed_as_bytes():
    svc = service_mod.HydroCacheService.__new__(service_mod.HydroCacheService)
    svc._push = FakePush()
    answer = pb.CacheResponse(request_id="r")
    answer.entries.add(key="a", found=True, value_count=1)
    svc._carry(Step([Reply("worker-g", answer, [memoryview(b"a1")], trigger_bytes())], []))
    [(_, kind, payload)] = svc._push.sent
    assert kind == "trigger" and list(pb.Trigger.FromString(payload).bound_values) == [b"a1"]


# ---------------------------------------------------------------- the upstream worker's send
class Sender:
    """What `CausalRunning._bind_on_the_way` uses of the worker: its push."""

    def __init__(self):
        self._push = FakePush()


def outgoing(value: bytes = b"result", protocol=pb.OPT) -> pb.Trigger:
    t = pb.Trigger(call_id="c#0", source="f", target="g", value=value)
    t.schedule.CopyFrom(target_schedule(protocol=protocol))
    t.causal.CopyFrom(upstream(True))
    return t


def test_a_result_goes_through_the_targets_cache_with_the_targets_bind():
    from executor.causal_run import CausalRunning
    sender, t = Sender(), outgoing()
    assert CausalRunning._bind_on_the_way(sender, "worker-g", t)
    [(address, kind, payload)] = sender._push.sent
    req = pb.CacheRequest.FromString(payload)
    assert (address, kind) == (t.schedule.causal.caches["g"], "cache")
    assert req.op == pb.CAUSAL_BIND and sorted(req.keys) == ["j", "k"]
    assert req.deliver_to == "worker-g"
    relayed = pb.Trigger.FromString(req.deliver_trigger)
    assert relayed.value == b"result" and sorted(relayed.bound_keys) == ["j", "k"]


@pytest.mark.parametrize("why", ["large", "ct", "value by key", "no schedule"])
def test_a_result_goes_straight_to_its_worker_where_no_bind_can_be_made_on_the_way(why):
    from executor.causal_run import CausalRunning, ON_THE_WAY_BYTES
    t = outgoing(value=b"x" * (ON_THE_WAY_BYTES + 1) if why == "large" else b"result",
                 protocol=pb.CT if why == "ct" else pb.OPT)
    if why == "value by key":
        t.value_key = "__values/c#0/f"
    if why == "no schedule":
        t.ClearField("schedule")
    sender = Sender()
    assert not CausalRunning._bind_on_the_way(sender, "worker-g", t)
    assert sender._push.sent == [] and not t.bound_keys
