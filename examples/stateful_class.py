"""A stateful class: one instance per executor worker lives across calls; `run` is the entry.
(For one instance that every caller reaches, see actor_counter.py.)

    python examples/stateful_class.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
from _common import connect


class RunningMean:
    def __init__(self, name):
        self.name, self.total, self.count = name, 0.0, 0

    def run(self, lib, value):
        self.total += value
        self.count += 1
        # state shared across workers goes through the KVS
        lib.put(f"{self.name}/last", value)
        return lib.getid(), self.total / self.count


with connect(__doc__, executors_per_node=1) as client:
    client.register((RunningMean, ("temperature",)), "mean")
    for v in (20, 22, 27):
        worker, mean = client.call("mean", v).get(timeout=10)
        print(f"worker {worker}: running mean {mean:.2f}")
    print("last value in the KVS:", client.get("temperature/last"))
