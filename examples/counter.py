"""Counting from many concurrent calls: a plain value loses updates, a lattice does not.

A plain value is last-writer-wins: two calls that read 5 both write 6. A lattice put with
`lib.put(key, lattice)` is merged in the KVS instead, so every increment counts. Here each
increment adds its own entry to a `MapLattice` (a grow-only counter); the count is the sum.

    python examples/counter.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
import threading
import uuid

from _common import connect  # first: it puts the repository on the path

import anna_core  # noqa: E402


def increment_plain(lib, key):
    lib.put(key, lib.get(key, default=0) + 1)        # read-modify-write: races lose updates


def increment_lattice(lib, key):
    lib.put(key, anna_core.MapLattice({uuid.uuid4().bytes: 1}))   # merged, never overwritten


THREADS, EACH = 8, 25

with connect(__doc__, executors_per_node=4) as client:
    client.register(increment_plain, "increment_plain")
    client.register(increment_lattice, "increment_lattice")
    run = uuid.uuid4().hex[:8]
    plain, counter = f"plain/{run}", f"counter/{run}"

    def caller():
        for _ in range(EACH):
            client.call("increment_plain", plain).get(timeout=30)
            client.call("increment_lattice", counter).get(timeout=30)

    threads = [threading.Thread(target=caller) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)

    client.register(lambda lib, key: sum(lib.get(key).reveal().values()), "read_counter")
    total = client.call("read_counter", counter).get(timeout=30)
    print(f"{THREADS} threads x {EACH} increments = {THREADS * EACH}")
    print(f"plain value (last writer wins): {client.get(plain)}")
    print(f"lattice counter (merged):       {total}")
    assert total == THREADS * EACH, total
