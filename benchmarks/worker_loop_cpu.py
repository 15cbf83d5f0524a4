"""CPU of one executor worker's main thread per direct call, in this process, without a cluster.

    python benchmarks/worker_loop_cpu.py [--calls 8000] [--window 32] [--batch 16] [--root CHECKOUT]

Builds one `executor.worker.Worker` of the checkout at `--root` (default: this one; plain
sockets), gives it a registered no-op and a worker lease on it (as a scheduler's grant
would), and runs its own receive path (`_next_frame`, `_dispatch`) on this process's main
thread, where its guard's signals go. A client thread keeps `--window` direct calls in
flight on the worker's direct socket, sent as `direct_batch`es of at most `--batch`, and
reads the results. Prints the worker main thread's CPU microseconds per call (its own
thread's clock, so the client thread does not count) and the wall time. What it leaves out:
the node cache (the function is put in the worker's table directly), CURVE, the heartbeat
thread, and the other processes of a cluster (`benchmarks/hotpath_cpu.py` has those).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--window", type=int, default=32, help="calls in flight")
    parser.add_argument("--batch", type=int, default=16, help="calls per direct_batch at most")
    parser.add_argument("--root", default=os.getcwd(), help="the checkout to measure")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.root))
    import zmq
    from executor.calling import Entry
    from executor.config import WorkerConfig
    from executor.worker import Worker
    from hydro_proto import cloudburst_pb2 as pb
    from runtime.framing import encode, parse
    from runtime.sockets import bind_pull

    config = WorkerConfig(worker_id="w0", node_id="n0", kvs_address="tcp://127.0.0.1:1",
                          cache_address="tcp://127.0.0.1:1")
    worker = Worker(config)
    worker.guard.install()
    worker._functions["noop"] = ("v1", Entry(lambda: None, "noop"))
    worker._tell_node = lambda status: None          # no node to tell of runs
    template = pb.Schedule(function="noop", version="v1", sink=True, dag="noop",
                           scheduler_address="tcp://127.0.0.1:1")
    template.locations["noop"] = worker.address
    worker._on_worker_lease(pb.WorkerLease(lease_id="L", client="", slots=args.window,
                                           ttl=3600, templates=[template]))
    worker._pull.setsockopt(zmq.RCVTIMEO, 100)
    context = zmq.Context()
    answered = [0]

    def client() -> None:
        results, address = bind_pull(context, "127.0.0.1")
        push = context.socket(zmq.PUSH)
        push.connect(worker.direct_address)
        sent = 0
        while answered[0] < args.calls:
            while sent < args.calls and sent - answered[0] < args.window:
                batch = pb.DirectBatch()
                for _ in range(min(args.batch, args.window - (sent - answered[0]),
                                   args.calls - sent)):
                    batch.calls.add(request_id=uuid.uuid4().hex, lease_id="L",
                                    response_address=address, timeout=60.0)
                push.send(encode("direct_batch", batch))
                sent += len(batch.calls)
            if results.poll(1000):
                kind, payload = parse(results.recv())
                answered[0] += 1 if kind == "result" else \
                    len(pb.DirectResults.FromString(payload).results)

    threading.Thread(target=client, daemon=True).start()
    cpu, start = time.thread_time(), time.monotonic()
    deadline = start + 120
    while answered[0] < args.calls and time.monotonic() < deadline:
        raw = worker._next_frame()
        if raw is not None:
            worker._dispatch(worker._admitted(raw))
    cpu, wall = time.thread_time() - cpu, time.monotonic() - start
    ran = worker.direct_work[0]
    if ran != args.calls:
        sys.exit(f"the worker ran {ran} of {args.calls} calls in {wall:.1f} s")
    print(json.dumps({"root": args.root, "calls": ran, "window": args.window,
                      "batch": args.batch, "worker_main_cpu_us_per_call":
                      round(1e6 * cpu / ran, 1), "wall_s": round(wall, 3),
                      "load": round(os.getloadavg()[0], 2)}))
    os._exit(0)        # the worker's sockets and the client thread end with the process


if __name__ == "__main__":
    main()
