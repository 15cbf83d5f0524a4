"""Descriptors taken by something else after a socket cache was sized, run as its own process.

`python -m descriptor_hog` (from tests/, the checkout on PYTHONPATH, started with a low HARD
descriptor limit) sizes a `runtime.sockets.PushCache` by sending to a few addresses, then
opens `HOG` descriptors that the cache's budget does not count (pipes: what ZeroMQ's threads
hold for sockets closed but not yet released, on a loaded machine), and sends to `SENDS`
distinct addresses of TCP listeners (`PORTS`) that never accept. It prints one JSON line: the most descriptors seen open
after any send, the limit, how many sends were refused, and the EMFILE errors seen.
"""
import json
import os
import resource

import zmq

from runtime.auth import KeyPair, format_address
from runtime.limits import raise_descriptor_limit
from runtime.sockets import PushCache

HOG = int(os.environ.get("HOG", "120"))
SENDS = int(os.environ.get("SENDS", "400"))


def open_now():
    """Descriptors open (a `stat`: listing /proc/self/fd needs a descriptor of its own)."""
    return os.stat("/proc/self/fd").st_size


PORTS = [int(p) for p in os.environ["PORTS"].split(",")]   # listeners that never accept


def silent(i):
    """A distinct address (its own server key) leading to a listener that never speaks: the
    connection completes into its backlog and holds a descriptor here."""
    return format_address(f"tcp://127.0.0.1:{PORTS[i % len(PORTS)]}", KeyPair.generate().public)


def main():
    raise_descriptor_limit()
    context = zmq.Context()
    cache = PushCache(context, linger_ms=0)
    refused, peak, hog = 0, 0, []
    try:
        for i in range(SENDS):
            if i == 8:
                hog = [fd for _ in range(HOG // 2) for fd in os.pipe()]
            refused += not cache.send_frame(silent(i), b"x")
            peak = max(peak, open_now())
    finally:
        cache.close()
        for fd in hog:
            os.close(fd)
        context.term()
    print(json.dumps({"peak": peak, "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                      "refused": refused, "hog": len(hog)}), flush=True)


if __name__ == "__main__":
    main()
