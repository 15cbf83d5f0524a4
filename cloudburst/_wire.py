"""Wire plumbing shared by the SDK, schedulers and executors (proto/cloudburst.proto header).

Contract:
- Every message is one ZMQ frame: a kind code byte (`KIND_ORDER`) and the serialized
  protobuf (one frame = one send call: they are costly on small VMs). `send` writes one
  without blocking (a full peer drops it and `send` returns False); `parse` checks one and
  raises `FrameError`; `more(socket)` says whether another message is waiting.
- `PushCache` keeps one PUSH socket per destination; `bind_pull` binds `tcp://ip:*`, or a
  Unix socket (`ipc://`) in a given directory when every process is on one host.
- `dumps`/`loads` serialize Python values (cloudpickle out, pickle in).
- `encode_args`/`decode_arg` move call arguments in and out of `cloudburst.Argument`: a
  top-level `Reference` travels as a key (so schedulers see it) with its `concurrent` flag,
  anything else as bytes.
- `announce_ready(info)` prints one `CLOUDBURST_READY <json>` line on stdout; the launcher
  (`cloudburst._proc`) reads it.
"""
from __future__ import annotations

import json
import logging
import pickle
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import cloudpickle
import zmq

import anna_core.wire

from hydro_proto import cloudburst_pb2 as pb

from .reference import Reference

__all__ = ["KINDS", "KIND_ORDER", "FrameError", "encode", "send", "send_with_frames", "more", "parse", "PushCache", "bind_pull", "ipc_dir_of", "dumps", "dumps_function", "loads",
           "encode_args", "decode_arg", "references_of", "announce_ready", "READY_PREFIX",
           "configure_logging", "pb"]

# The message kinds, in code order: a message's code is its 1-based position here.
KIND_ORDER = (
    "register_fn", "register_dag", "delete_dag", "list", "info", "call", "where", "heartbeat",
    "keyset", "done", "schedule", "trigger", "abort", "msg", "cache_reply", "cache", "reply",
    "accepted", "result", "causal_abort",
)
KINDS = frozenset(KIND_ORDER)
_CODE = {k: bytes([i + 1]) for i, k in enumerate(KIND_ORDER)}
_KIND_OF = {i + 1: k for i, k in enumerate(KIND_ORDER)}
READY_PREFIX = "CLOUDBURST_READY "


class FrameError(ValueError):
    """A received message does not follow the framing (one frame: kind code + payload)."""


def encode(kind: str, message: Any) -> bytes:
    """One frame: the kind's code byte, then the serialized message."""
    return _CODE[kind] + message.SerializeToString()


def parse(frame: Any) -> Tuple[str, memoryview]:
    """Check a received frame and return (kind, payload) without copying the payload."""
    view = memoryview(frame)
    if len(view) == 0:
        raise FrameError("empty message")
    kind = _KIND_OF.get(view[0])
    if kind is None:
        raise FrameError(f"unknown message kind code {view[0]}")
    return kind, view[1:]


def send(socket: zmq.Socket, kind: str, message: Any) -> bool:
    """Send one message without blocking; False if it was dropped (peer full)."""
    try:
        socket.send(encode(kind, message), flags=zmq.NOBLOCK, copy=True)
        return True
    except zmq.Again:
        return False


ZERO_COPY_BYTES = 64 * 1024


def send_with_frames(push: "PushCache", address: str, kind: str, message: Any,
                     frames: Sequence[Any] = ()) -> bool:
    """One multi-frame message without blocking: the kind-coded message, then `frames` as
    they are (large ones handed to ZeroMQ without a copy, never copied into a protobuf).
    False (and a warning) if the peer is not accepting."""
    out = [encode(kind, message), *frames]
    zero_copy = any(len(f) >= ZERO_COPY_BYTES for f in frames)
    try:
        push.socket(address).send_multipart(out, flags=zmq.NOBLOCK, copy=not zero_copy)
        return True
    except zmq.Again:
        logging.getLogger("cloudburst.wire").warning(
            "dropped a %s message to %s (peer not accepting)", kind, address)
        return False


def more(socket: zmq.Socket) -> bool:
    """True if `socket` has a message ready (no exception, no waiting)."""
    return bool(socket.getsockopt(zmq.EVENTS) & zmq.POLLIN)


def bind_pull(context: zmq.Context, ip: str = "127.0.0.1",
              ipc_dir: Optional[str] = None) -> Tuple[zmq.Socket, str]:
    """A PULL socket bound on a free port of `ip` (or, with `ipc_dir`, on a fresh Unix socket
    in that directory: cheaper on one host), and its connectable address."""
    s = context.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 100000)
    if ipc_dir:
        import os
        import uuid
        s.bind(f"ipc://{os.path.join(ipc_dir, uuid.uuid4().hex[:16])}")
        return s, s.getsockopt_string(zmq.LAST_ENDPOINT)
    s.bind(f"tcp://{ip}:*")
    return s, s.getsockopt_string(zmq.LAST_ENDPOINT).replace("tcp://0.0.0.0:", "tcp://127.0.0.1:")


def ipc_dir_of(address: str) -> Optional[str]:
    """The directory of an `ipc://` address (None for other transports)."""
    import os
    return os.path.dirname(address[len("ipc://"):]) if address.startswith("ipc://") else None


class PushCache(anna_core.wire.PushCache):
    """anna_core's PUSH-socket cache with deeper queues, a short linger (so a result sent just
    before a process exits still leaves), and Cloudburst's framing. Not thread-safe."""

    def __init__(self, context: zmq.Context) -> None:
        super().__init__(context, sndhwm=100000, linger_ms=500)

    def send(self, address: str, kind: str, message: Any) -> bool:
        """Send [kind][message] to `address` without blocking; False if dropped."""
        return send(self.socket(address), kind, message)


def dumps(value: Any) -> bytes:
    """Serialize a Python value (functions, classes and lambdas included)."""
    return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _user_module(obj: Any) -> Any:
    """The module defining `obj` if it is the user's own code (not stdlib, not installed)."""
    import os
    import sysconfig
    name = getattr(obj, "__module__", None)
    module = sys.modules.get(name) if name else None
    path = getattr(module, "__file__", None)
    if module is None or name == "__main__" or not path:
        return None
    if name.split(".")[0] in ("cloudburst", "scheduler", "executor", "anna_core", "hydro_proto"):
        return None
    path = os.path.realpath(path)
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        root = sysconfig.get_paths().get(key)
        if root and path.startswith(os.path.realpath(root) + os.sep):
            return None
    return module


def dumps_function(obj: Any) -> bytes:
    """Serialize a function or `(class, init_args)` for registration. Functions and classes
    defined in the user's own modules (e.g. a test file or script that executors cannot
    import) are pickled by value, so executors need nothing but the registration."""
    target = obj[0] if isinstance(obj, tuple) else obj
    module = _user_module(target)
    if module is None:
        return dumps(obj)
    cloudpickle.register_pickle_by_value(module)
    try:
        return dumps(obj)
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def loads(data: bytes) -> Any:
    """Inverse of `dumps`."""
    return pickle.loads(data)


def encode_args(args: Iterable[Any]) -> "pb.ArgumentList":
    """Call arguments as an `ArgumentList`: references by key, other values serialized."""
    out = pb.ArgumentList()
    for a in args:
        if isinstance(a, Reference):
            out.args.add(reference=a.key, concurrent=a.concurrent)
        else:
            out.args.add(value=dumps(a))
    return out


def decode_arg(arg: "pb.Argument") -> Any:
    """An `Argument` back as a value, or as a `Reference` (resolved later by the executor)."""
    if arg.WhichOneof("kind") == "reference":
        return Reference(arg.reference, concurrent=arg.concurrent)
    return loads(arg.value)


def references_of(arglist: "pb.ArgumentList") -> List[str]:
    """The keys referenced by an `ArgumentList`."""
    return [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]


def announce_ready(info: Dict[str, Any]) -> None:
    """Tell the launcher this process is ready, with its addresses (one stdout line)."""
    sys.stdout.write(READY_PREFIX + json.dumps(info) + "\n")
    sys.stdout.flush()


def configure_logging(level: Optional[str], name: str) -> logging.Logger:
    """stderr logging for a service process; returns its logger."""
    numeric = getattr(logging, (level or "warning").upper(), logging.WARNING)
    logging.basicConfig(level=numeric, stream=sys.stderr,
                        format=f"%(asctime)s {name} %(levelname)s %(message)s")
    return logging.getLogger(f"cloudburst.{name}")
