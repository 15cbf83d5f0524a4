"""The worker's routes of call results to the call links their calls came on
(executor/call_links.py), on their own: no sockets, `now` given."""
from types import SimpleNamespace

from hypothesis import given, strategies as st

from executor import call_links
from executor.call_links import WorkerCallLinks


def _routes():
    return WorkerCallLinks(SimpleNamespace(address="tcp://127.0.0.1:1"))


def test_a_route_is_the_first_links_and_only_that_link_finishes_it():
    r = _routes()
    r.arrived("c", 1, expires=100.0, now=0.0)
    r.arrived("c", 2, expires=100.0, now=0.0)       # a duplicate from another link
    assert r.route("c") == 1
    r.finished("c", 2)                              # its refusal went on link 2
    assert r.route("c") == 1                        # the first call's result still goes on 1
    r.finished("c", 0)                              # (nor does an answer over ZeroMQ)
    assert r.route("c") == 1
    r.finished("c", 1)
    assert r.route("c") == 0


def test_routes_of_calls_that_never_answer_expire_as_calls_arrive():
    r = _routes()
    r.arrived("lost", 1, expires=10.0, now=0.0)
    r.arrived("kept", 1, expires=50.0, now=1.0)
    assert r.route("lost") == 1
    r.arrived("later", 2, expires=60.0, now=11.0)   # past the first one's expiry
    assert (r.route("lost"), r.route("kept"), r.route("later")) == (0, 1, 2)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 3), st.integers(0, 20)),
                max_size=200))
def test_routes_stay_bounded_and_a_route_is_kept_until_it_expires_or_is_evicted(ops):
    bound = 8
    old, call_links.MAX_ROUTES = call_links.MAX_ROUTES, bound
    try:
        r = _routes()
        for now, (call, link, life) in enumerate(ops):
            rid = f"c{call}"
            before = r._routes.get(rid)
            r.arrived(rid, link, expires=now + life, now=float(now))
            assert len(r._routes) <= bound
            got = r.route(rid)
            if before is None or before[0] == link:
                assert got == link
            elif got != before[0]:        # another link's call took it: only once it lapsed
                assert got == link and before[1] <= now or len(ops) > bound
    finally:
        call_links.MAX_ROUTES = old
