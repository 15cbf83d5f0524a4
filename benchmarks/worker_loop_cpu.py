"""CPU of one executor worker's main thread per direct call, in this process, without a cluster.

    python benchmarks/worker_loop_cpu.py [--calls 8000] [--window 32] [--batch 16] [--root CHECKOUT]
    python benchmarks/worker_loop_cpu.py --dag [--calls 8000] [--profile OUT] [--root CHECKOUT]

Builds one `executor.worker.Worker` of the checkout at `--root` (default: this one; plain
sockets), gives it a registered no-op and a worker lease on it (as a scheduler's grant
would), and runs its own receive path (`_next_frame`, `_dispatch`) on this process's main
thread, where its guard's signals go. A client thread keeps `--window` direct calls in
flight on the worker's direct socket, sent as `direct_batch`es of at most `--batch`, and
reads the results. Prints the worker main thread's CPU microseconds per call (its own
thread's clock, so the client thread does not count) and the wall time. What it leaves out:
the node cache (the function is put in the worker's table directly), CURVE, the heartbeat
thread, and the other processes of a cluster (`benchmarks/hotpath_cpu.py` has those).

With `--dag`, P1's shape instead: the `increment -> square` DAG leased whole on the worker
(its schedules built by the scheduler's own `build_schedules`, as a grant carries them), and
a client thread sending one call at a time over a call link and waiting for its result
before the next. `--profile OUT` writes a cProfile of the worker's loop (pstats format).
`--dag --inline`: the same calls' frames handed to the worker's frame handler on this
thread, with no socket and no client (the answer is taken where it would be sent, and
checked): the worker's own Python per DAG call, the least of 6 batches of `--calls / 6`.
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
    parser.add_argument("--dag", action="store_true", help="serial DAG calls over a call link")
    parser.add_argument("--profile", help="write a cProfile of the worker's loop here")
    parser.add_argument("--inline", action="store_true",
                        help="with --dag: no sockets, the worker's Python per call")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.root))
    if args.dag:
        return dag_calls(args)
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


def dag_calls(args: argparse.Namespace) -> None:
    """Serial warm calls of a 2-function DAG over a call link (module docstring)."""
    import cProfile
    import pickle
    import zmq
    from anna_core import _core
    from executor.calling import Entry
    from executor.config import WorkerConfig
    from executor.worker import Worker
    from hydro_proto import cloudburst_pb2 as pb
    from runtime.framing import encode, parse
    from scheduler.dag import Dag
    from scheduler.schedule import build_schedules

    config = WorkerConfig(worker_id="w0", node_id="n0", kvs_address="tcp://127.0.0.1:1",
                          cache_address="tcp://127.0.0.1:1")
    worker = Worker(config)
    worker.guard.install()
    for name, fn in (("increment", lambda lib, x: x + 1), ("square", lambda lib, x: x * x)):
        worker._functions[name] = ("v1", Entry(fn, name))
    worker._tell_node = lambda status: None          # no node to tell of runs
    dag = Dag.create("composition", ["increment", "square"], [("increment", "square")])
    templates = [s for _, s in build_schedules(
        pb.Call(), dag, {f: "w0" for f in dag.functions}, {"w0": worker.address},
        {f: "v1" for f in dag.functions}, "tcp://127.0.0.1:1", 0.0)]
    worker._on_worker_lease(pb.WorkerLease(lease_id="L", client="", slots=1, ttl=3600,
                                           templates=templates))
    worker._pull.setsockopt(zmq.RCVTIMEO, 100)
    if args.inline:
        return inline_calls(args, worker, pb, encode)
    done = threading.Event()
    failed: list = []

    def client() -> None:
        links = _core.CallLinkClient()
        link, why = links.begin(worker.call_link_address, "", 2.0)
        opened = False
        deadline = time.monotonic() + 10
        while not opened and time.monotonic() < deadline:
            _, _, broken, up = links.wait(0.01)
            opened = link in up
            if broken:
                failed.append(f"the link broke: {broken}")
                return done.set()
        for i in range(args.calls):
            call = pb.Call(request_id=uuid.uuid4().hex, lease_id="L", dag="composition",
                           response_address="tcp://127.0.0.1:1", timeout=60.0)
            call.args["increment"].args.add(value=pickle.dumps(i))
            call.session.SetInParent()     # as `Client` sends it: its session, empty here
            links.send(link, encode("direct", call), 1.0)
            frames: list = []
            while not frames:
                _, frames, broken, _ = links.wait(1.0)
                if broken:
                    failed.append(f"the link broke: {broken}")
                    return done.set()
            kind, payload = parse(frames[0][1])
            result = pb.CallResult.FromString(payload)
            if kind != "result" or result.status != pb.OK or \
                    pickle.loads(result.value) != (i + 1) ** 2:
                failed.append(f"call {i}: {kind} {result}")
                return done.set()
        done.set()

    def loop() -> None:
        while not done.is_set():
            while worker._local or worker._backlog:
                worker._run_local() if worker._local else \
                    worker._dispatch(worker._backlog.popleft())
            raw = worker._next_frame()
            if raw is not None:
                worker._dispatch(worker._admitted(raw))

    threading.Thread(target=client, daemon=True).start()
    cpu, start = time.thread_time(), time.monotonic()
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(loop)
        profile.dump_stats(args.profile)
    else:
        loop()
    cpu, wall = time.thread_time() - cpu, time.monotonic() - start
    if failed:
        sys.exit(failed[0])
    print(json.dumps({"root": args.root, "dag_calls": args.calls,
                      "worker_main_cpu_us_per_call": round(1e6 * cpu / args.calls, 1),
                      "us_per_call": round(1e6 * wall / args.calls, 1),
                      "load": round(os.getloadavg()[0], 2)}))
    os._exit(0)


def inline_calls(args: argparse.Namespace, worker, pb, encode) -> None:
    """The DAG's calls handed to the worker's frame handler, no sockets (module docstring)."""
    import pickle
    answered: list = []
    # the answer as it would go back on the link it came on
    worker._reply = lambda address, kind, message, link=None, ids=None: \
        answered.append((kind, message))
    batch = max(1, args.calls // 6)
    frames = []
    for i in range(batch * 6):
        call = pb.Call(request_id=uuid.uuid4().hex, lease_id="L", dag="composition",
                       response_address="tcp://127.0.0.1:1", timeout=60.0)
        call.args["increment"].args.add(value=pickle.dumps(i))
        call.session.SetInParent()     # as `Client` sends it: its session, empty here
        frames.append(encode("direct", call))
    worker.guard.open_run()            # one run of calls, as serial calls keep it open
    best = float("inf")
    for b in range(6):
        cpu = time.thread_time()
        for data in frames[b * batch:(b + 1) * batch]:
            worker._answers.open()
            worker._from_client(data, "", 0, True)
            worker._answers.close()
        best = min(best, (time.thread_time() - cpu) / batch)
        if len(answered) != batch:
            sys.exit(f"{len(answered)} of {batch} calls were answered")
        for i, (kind, result) in enumerate(answered, start=b * batch):
            if kind != "result" or result.status != pb.OK or \
                    pickle.loads(result.value) != (i + 1) ** 2:
                sys.exit(f"call {i}: {kind} {result}")
        answered.clear()
    worker.guard.close_run()
    print(json.dumps({"root": args.root, "dag_calls_inline": batch * 6,
                      "worker_python_us_per_call": round(1e6 * best, 1),
                      "load": round(os.getloadavg()[0], 2)}))
    os._exit(0)


if __name__ == "__main__":
    main()
