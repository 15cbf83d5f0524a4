"""A host name that moves between loopback addresses, for tests of connections that must
follow a stable name (a Kubernetes StatefulSet pod's) to the address it has now.

- `MovingName(tmp_path, name)`: a hosts file naming `name` (plus localhost); `point(ip)`
  rewrites it in place (the same inode, so a bind mount of it sees the change at once).
- `in_namespace(hosts, argv)`: the command line that runs `argv` in a private mount namespace
  where /etc/hosts is that file (`unshare --mount` and a bind mount: needs root). Only that
  process sees the name; this machine's /etc/hosts is never touched. The network namespace
  is this machine's, so its sockets show in this process' /proc/net/tcp.
- `BlackHole(ip, port)`: a TCP listener whose accept queue is full, so that the kernel drops
  every SYN sent to it without an answer, as it is for an address whose pod vanished: a
  connection attempt to it waits until it is given up.
- `syn_sent_to(ip, port)`: whether some socket of this machine is trying to connect there.
- `sender(kind, address)` (run as `python tests/moving_name.py KIND ADDRESS`): sends a
  numbered message to `address` every 20 ms through one of the platform's connecting
  sockets, until killed or 60 s: `push_cache` (runtime.sockets.PushCache: Anna nodes'
  heartbeats to routing, executors' to schedulers), `scheduler` (the Cloudburst client's
  scheduler sockets, cloudburst.connections), `native` (the Anna client's native transport,
  _core.ClientTransport: every KVS client's requests to routing).
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import List, Sequence

__all__ = ["MovingName", "in_namespace", "can_move_names", "BlackHole", "syn_sent_to",
           "KINDS"]

KINDS = ("push_cache", "scheduler", "native")
_SYN_SENT = "02"


def can_move_names() -> str:
    """Why a moving name cannot be made here ('' when it can)."""
    if os.geteuid() != 0:
        return "a private /etc/hosts (unshare --mount, a bind mount) needs root"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return ""


class MovingName:
    """A hosts file for `name`; see the module contract."""

    def __init__(self, directory: Path, name: str) -> None:
        self.name = name
        self.path = Path(directory) / "hosts"
        self.path.write_text("127.0.0.1 localhost\n")

    def point(self, ip: str) -> None:
        """`name` resolves to `ip` from now on (rewritten in place: same inode)."""
        with open(self.path, "r+") as f:
            f.truncate(0)
            f.write(f"127.0.0.1 localhost\n{ip} {self.name}\n")


def in_namespace(hosts: Path, argv: Sequence[str]) -> List[str]:
    """`argv` run with `hosts` as its /etc/hosts (module contract)."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv]


class BlackHole:
    """A listener at (ip, port) that never accepts, its queue full: SYNs are dropped."""

    def __init__(self, ip: str, port: int) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((ip, port))
        self.listener.listen(0)
        # backlog 0 holds one connection, never accepted: the queue is full from then on
        self.filler = socket.create_connection((ip, port), timeout=5)
        self.own_port = self.filler.getsockname()[1]

    def close(self) -> None:
        self.filler.close()
        self.listener.close()


def _hex_endpoint(ip: str, port: int) -> str:
    """An IPv4 endpoint as /proc/net/tcp writes it (address little-endian on x86)."""
    return socket.inet_aton(ip)[::-1].hex().upper() + f":{port:04X}"


def syn_sent_to(ip: str, port: int) -> bool:
    """Whether a socket of this network namespace is in SYN-SENT towards (ip, port)."""
    target = _hex_endpoint(ip, port)
    with open("/proc/net/tcp") as f:
        next(f)
        return any(parts[2] == target and parts[3] == _SYN_SENT
                   for parts in (line.split() for line in f))



def sender(kind: str, address: str, period: float = 0.02, lifetime: float = 60.0) -> None:
    """Send numbered messages to `address` through `kind`'s socket (module contract)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import zmq
    context = zmq.Context()
    if kind == "push_cache":
        from runtime.sockets import PushCache
        cache = PushCache(context, linger_ms=0)
        send = lambda payload: cache.send_frame(address, payload)  # noqa: E731
    elif kind == "scheduler":
        from cloudburst.connections import SchedulerConnections
        push = SchedulerConnections(context, [address], None, None).socket(address)

        def send(payload: bytes) -> bool:
            if not push.poll(0, zmq.POLLOUT):
                return False        # not connected (IMMEDIATE): nothing is queued
            push.send(payload, zmq.NOBLOCK)
            return True
    elif kind == "native":
        from anna_core import _core
        transport = _core.ClientTransport("127.0.0.1")
        send = lambda payload: transport.send(address, "", payload)  # noqa: E731
    else:
        raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    print("SENDING", flush=True)
    end = time.monotonic() + lifetime
    n = 0
    while time.monotonic() < end:
        n += 1
        send(str(n).encode())
        time.sleep(period)


if __name__ == "__main__":
    sender(sys.argv[1], sys.argv[2])
