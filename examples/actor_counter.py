"""An actor: one instance of a class on one worker, whose methods every caller reaches.

    python examples/actor_counter.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
from _common import connect

import cloudburst


class Counter:
    def __init__(self, start):
        self.n = start

    def incr(self, by):
        self.n += by
        return self.n

    def where(self, lib):           # a method naming `lib` first gets the user library
        return lib.getid()


def add_from_a_function(lib, counter, by):
    """A function given the handle calls the same instance."""
    return counter.incr(by).get(timeout=10)


with connect(__doc__, executors_per_node=2) as client:
    counter = client.actor(Counter, 10)
    print("actor", counter.actor_id, "lives on", counter.where().get(timeout=10))
    assert counter.incr(1).get(timeout=10) == 11
    assert counter.incr(5).get(timeout=10) == 16
    # calls sent without waiting run one at a time, in order
    values = cloudburst.gather([counter.incr(1) for _ in range(5)], timeout=20)
    assert values == [17, 18, 19, 20, 21], values
    client.register(add_from_a_function, "add_from_a_function")
    assert client.call("add_from_a_function", counter, 100).get(timeout=10) == 121
    print("count:", counter.incr(0).get(timeout=10))
    counter.kill()
    try:
        counter.incr(1).get(timeout=10)
    except cloudburst.ActorDied as e:
        print("after kill:", e)
    else:
        raise AssertionError("a killed actor answered")
