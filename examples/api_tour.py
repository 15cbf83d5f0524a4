"""The everyday API: a decorator, map, asyncio, output, time limits, cancelling, status.

    python examples/api_tour.py [--address ADDRESS [--key-dir DIR] [--client NAME]]
"""
import asyncio
import time

from _common import connect  # first: it puts the repository on the path

import cloudburst  # noqa: E402

with connect(__doc__, executors_per_node=2) as client:
    @client.function
    def square(lib, x):
        print(f"squaring {x}")                   # goes to the worker's log and to the caller
        return x * x

    future = square(7)                          # a call returns a Future
    print("square(7) =", future.get(timeout=10), "| it printed:", future.logs().split("\n")[1])
    print("map:", square.map(range(6)))         # calls fan out, results come back in order
    print("gather:", cloudburst.gather([square(2), square(3)]))

    async def both():
        return await asyncio.gather(square(4), square(5))
    print("asyncio:", asyncio.run(both()))

    @client.function(time_limit=0.5)            # this function may run half a second
    def slow(lib, seconds):
        time.sleep(seconds)
        return "done"

    try:
        slow(5).get(timeout=10)
    except cloudburst.Timeout as e:
        print("time limit:", str(e).split(" on worker")[0])

    running = slow(0.4, time_limit=30)          # a call may set its own limit, and be cancelled
    running.cancel()
    try:
        running.get(timeout=5)
    except cloudburst.Cancelled:
        print("cancelled: get() raised Cancelled")

    stats = {f.name: f for f in client.status().functions}
    print(f"status: {len(client.status().workers)} workers; square ran "
          f"{stats['square'].calls} times, p50 {stats['square'].p50 * 1000:.1f} ms")
    client.delete_function("slow")
    print("functions now:", client.list().functions)
