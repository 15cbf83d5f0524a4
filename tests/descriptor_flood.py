"""A flood of distinct response addresses against a real cluster, run as its own process.

`python -m descriptor_flood` (from tests/, with the checkout on PYTHONPATH) starts a small
`cloudburst.LocalCluster` (Anna routing, one KVS node, a scheduler, one executor node) and
floods routing, the KVS worker and the scheduler, each with `FLOOD` requests that all name a
different response address. The addresses lead to TCP listeners that never accept and never
speak (the kernel completes the connection into the listen backlog), so each socket a service
opens for an answer keeps its descriptor for as long as the service keeps the socket.
While each flood is served, a new peer (a new client, on a new connection) asks the service
something every `PROBE_PERIOD` seconds and must be answered within `PROBE_DEADLINE`.

It prints one JSON line: per service, the most descriptors seen open, its descriptor limits,
the new peers' answer times and failures, and the "Too many open files" lines in the logs.
The test runs it with the HARD descriptor limit lowered (`preexec_fn`), so the services it
starts inherit that limit and cannot raise their soft limit past it.
"""
import json
import os
import resource
import socket
import sys
import threading
import time
import uuid

import anna_core
import cloudburst
from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import KeyPair, format_address
from runtime.framing import encode
from peers import Peer

FLOOD = int(os.environ.get("FLOOD", "3000"))
LISTENERS = 8
PROBE_PERIOD = 0.2
PROBE_DEADLINE = 5.0
SETTLE = 1.0          # probing continues this long after the last flood message is sent
MIN_PROBES = 3        # ... and until this many probes were made (the sender can finish
                      # queueing its flood before a slow first probe returns)
LONGEST = 60.0        # the bound on one flood's probing, whatever happens


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return [soft, hard]
    return None


class Silent:
    """TCP listeners that never accept: connections complete into the backlog and then
    nothing is ever said on them."""

    def __init__(self, n):
        self.sockets = []
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(4096)
            self.sockets.append(s)
        self.ports = [s.getsockname()[1] for s in self.sockets]

    def addresses(self, count):
        # each address distinct: the endpoint, and a server key of its own
        return [format_address(f"tcp://127.0.0.1:{self.ports[i % len(self.ports)]}",
                               KeyPair.generate().public) for i in range(count)]

    def close(self):
        for s in self.sockets:
            s.close()


class Sampler(threading.Thread):
    """The most descriptors `pid` had open, sampled every few milliseconds."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, 0, threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, open_fds(self.pid))
            self.done.wait(0.005)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def flood(name, pid, send_all, probe):
    """Send the flood while new peers probe the service; what was seen."""
    sampler = Sampler(pid)
    sampler.start()
    times, failures = [], []
    sender = threading.Thread(target=send_all, daemon=True)
    start = time.monotonic()
    sender.start()
    end = None

    def probing() -> bool:
        now = time.monotonic()
        if now - start > LONGEST:
            return False
        return end is None or now < end or len(times) + len(failures) < MIN_PROBES

    while probing():
        t = time.monotonic()
        try:
            probe()
            times.append(round(time.monotonic() - t, 3))
        except Exception as e:   # noqa: BLE001 - every failure is reported
            failures.append(f"{type(e).__name__}: {e}"[:200])
        time.sleep(max(0.0, PROBE_PERIOD - (time.monotonic() - t)))
        if end is None and not sender.is_alive():
            end = time.monotonic() + SETTLE
    return {"service": name, "peak_fds": sampler.stop(), "limits": nofile(pid),
            "probe_seconds": times, "probe_failures": failures,
            "seconds": round(time.monotonic() - start, 2)}


def too_many_files(log_dir):
    hits = []
    for root, _, files in os.walk(log_dir):
        for f in files:
            if f.endswith(".log"):
                with open(os.path.join(root, f), errors="replace") as fh:
                    hits += [f"{f}: {line.strip()[:200]}" for line in fh
                             if "Too many open files" in line or "EMFILE" in line]
    return hits


def main():
    out = {"driver_limits": list(resource.getrlimit(resource.RLIMIT_NOFILE)), "floods": []}
    silent = Silent(LISTENERS)
    try:
        with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as cluster:
            kvs = cluster.kvs
            routing = kvs.routing_address
            node = kvs.node_ids[0]
            worker = kvs.worker_addresses(node)[0]
            scheduler = cluster.scheduler_addresses[0]
            pids = {"routing": kvs._routers[0].pid, "kvs": kvs._node(node).pid,
                    "scheduler": cluster._schedulers[0].pid}
            with Peer(cluster.client_auth) as peer:
                def sender(address, make):
                    s = peer.dial(address, linger_ms=5000)

                    def send_all():
                        for i, response in enumerate(silent.addresses(FLOOD)):
                            s.send_multipart(make(i, response))
                    return send_all

                def address_request(i, response):
                    r = anna_pb2.KeyAddressRequest(keys=[f"k{i}"], response_address=response,
                                                   request_id=f"a{i}")
                    return [b"address", r.SerializeToString()]

                def get_request(i, response):
                    r = anna_pb2.KeyRequest(type=anna_pb2.GET, response_address=response,
                                            request_id=f"g{i}")
                    r.tuples.add(key="probe")
                    return [b"request", r.SerializeToString()]

                def list_request(i, response):
                    return [encode("list", pb.NameRequest(request_id=f"l{i}",
                                                          response_address=response))]

                def anna_probe():
                    key = uuid.uuid4().hex
                    with anna_core.Client(routing, timeout=PROBE_DEADLINE, retries=0,
                                          auth=cluster.client_auth) as c:
                        c.put(key, b"v")
                        assert c.get(key) == b"v"

                def scheduler_probe():
                    c = cloudburst.Client(scheduler, timeout=PROBE_DEADLINE,
                                          auth=cluster.client_auth)
                    try:
                        c.list()
                    finally:
                        c.close()

                out["floods"].append(flood("routing", pids["routing"],
                                           sender(routing, address_request), anna_probe))
                out["floods"].append(flood("kvs", pids["kvs"],
                                           sender(worker, get_request), anna_probe))
                out["floods"].append(flood("scheduler", pids["scheduler"],
                                           sender(scheduler, list_request), scheduler_probe))
            alive = {name: os.path.exists(f"/proc/{pid}") for name, pid in pids.items()}
            out["alive"] = alive
            out["emfile_lines"] = too_many_files(cluster.log_dir)
    finally:
        silent.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
