"""Typed errors of the Cloudburst FaaS layer, as the SDK raises them.

Contract: every failure that reaches a caller is a `CloudburstError` subclass whose message
names what failed (the function, the DAG, the worker, the stage). Errors that happen in a
remote process travel as a `cloudburst.CallResult` with a `Status` code and a message (and,
for `ExecutionError`, the remote traceback); `error_from_status` turns them back into the
classes below, one-to-one. Nothing here imports sockets or protobuf.

`Aborted` (status ABORTED) is raised for a causal call (HydroCache MTCC protocols) whose
attempts aborted more often than the scheduler's retry budget (`max_causal_retries`); its
message names the last abort's reason.
"""
from __future__ import annotations

from typing import Optional

__all__ = ["CloudburstError", "FunctionNotFound", "DagNotFound", "InvalidDag", "InvalidFunction",
           "InvalidArguments", "DependencyFailed", "NoLibrary", "NoResources",
           "ExecutionError", "Timeout", "ObjectNotFound", "Aborted", "Cancelled", "UnsafeValue",
           "MalformedValue", "NotPermitted", "CorruptRecord", "WorkerDied", "ActorDied", "ActorCallCycle", "LeaseRefused",
           "CallLinkBroken",
           "ValueTooLarge",
           "STATUS_OF",
           "error_from_status"]


class CloudburstError(Exception):
    """Base class of every Cloudburst error. `message` is the human-readable reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class FunctionNotFound(CloudburstError):
    """A call named a function that is not registered."""


class DagNotFound(CloudburstError):
    """A call or delete named a DAG that is not registered."""


class InvalidDag(CloudburstError):
    """A DAG was rejected: unknown function, cycle, not exactly one sink, bad connection."""


class InvalidFunction(CloudburstError, TypeError):
    """`register` was given something that cannot run as a function: not callable, a
    generator or async generator function, a class with neither `run` nor `__call__`, or a
    parameter named `lib` that is not the first positional one. Also a `TypeError`."""


class InvalidArguments(CloudburstError, TypeError):
    """A call's arguments do not fit its function's signature (a missing or unexpected
    argument); the message names the function and what Python said. Nothing ran. Also a
    `TypeError`."""


class DependencyFailed(CloudburstError):
    """A `Future` given as an argument has no value to give: its call failed (the message
    names it and its error) or its result is no longer held. The function did not run."""


class NoLibrary(CloudburstError, RuntimeError):
    """`cloudburst.lib()` was called outside a function running on an executor."""


class NoResources(CloudburstError):
    """The scheduler knows no live executor worker to run the call on."""


class ExecutionError(CloudburstError):
    """A function raised (or its worker died). `remote_traceback` holds the remote traceback;
    `attempts` how many times the call ran (more than 1 when it was retried)."""

    attempts = 1

    def __init__(self, message: str, remote_traceback: str = "") -> None:
        full = message if not remote_traceback else f"{message}\n\nRemote traceback:\n{remote_traceback}"
        super().__init__(full)
        self.remote_traceback = remote_traceback


class WorkerDied(ExecutionError):
    """Every attempt of the call lost its executor worker (or node) while in flight, and its
    retry budget (`max_retries`) is spent; the message names the workers and `attempts` says
    how many attempts ran. Also an `ExecutionError`."""


class Timeout(CloudburstError):
    """A wait ran past its deadline. `stage` names what was being waited for."""

    def __init__(self, stage: str, seconds: Optional[float] = None) -> None:
        detail = f" after {seconds:.3g} s" if seconds is not None else ""
        super().__init__(f"timed out{detail} waiting for {stage}")
        self.stage = stage
        self.seconds = seconds


class ObjectNotFound(CloudburstError, KeyError):
    """`get` of a key that holds no object (also a `KeyError`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no object stored under key {key!r}")
        self.key = key

    def __str__(self) -> str:
        return self.message


class UnsafeValue(CloudburstError):
    """A value read as plain data (the default) names a Python global outside the plain-data
    allowlist (`faas.values`), so it was not unpickled: unpickling it could run code.
    The message names the value (its key, when it has one), the refused global, and how to
    opt in (`objects=True`) for a writer you trust. `key` and `global_name` are set when
    raised in this process (None when the error came from a remote process)."""

    def __init__(self, message: str, key: Optional[str] = None,
                 global_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key
        self.global_name = global_name


class MalformedValue(UnsafeValue, ValueError):
    """A stored value's bytes do not decode: a truncated or corrupt pickle, or a lattice whose
    payload the KVS's lattice codec rejects. The message names the value (its key, when it has
    one) and what is wrong; nothing in it was run. Also an `UnsafeValue` (it travels between
    processes with that status) and a `ValueError`."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message, key=key)


class NotPermitted(CloudburstError, PermissionError):
    """The sender's role may not do what it asked: a function (or a client) writing a key
    under `__anna__/` (the KVS's metadata) or `__cloudburst/` (the registry and the worker
    directory), which belong to the cluster. The message names the key; `key` is set when
    it is known here."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class CorruptRecord(CloudburstError):
    """A registry record (a function, a DAG or an index under `__cloudburst/`) does not
    parse: it was written by something other than a scheduler (or damaged). The message
    names the key; the record stays as it is until it is registered (or deleted) again."""

    def __init__(self, message: str, key: Optional[str] = None) -> None:
        super().__init__(message)
        self.key = key


class Aborted(CloudburstError):
    """A causal call aborted more often than its retry budget allows (the message names the
    protocol's last abort reason). Retrying the call later may succeed."""


class Cancelled(CloudburstError):
    """The call was cancelled (`Future.cancel()`, or its caller stopped waiting)."""


class ActorDied(CloudburstError):
    """An actor's method was called (or sent) after the actor ended: its worker died (the
    instance and its state died with it), it was killed, or its constructor failed. The
    message names the actor (its id and class) and why; `actor_id` is set when it is known
    here. A call already running or queued when the worker died fails with it too."""

    def __init__(self, message: str, actor_id: Optional[str] = None) -> None:
        super().__init__(message)
        self.actor_id = actor_id


class ActorCallCycle(CloudburstError):
    """An actor method call made inside a function was refused before it ran: the actor's
    worker waits, through actor calls in flight, on the caller's own worker (actor A's method
    calls B, whose method calls A back, on other workers), and a worker runs one function at
    a time, so the calls would wait for each other until their deadlines. The message names
    the chain of workers. Seen when the calls of the cycle go through one scheduler."""


class SchedulerUnavailable(CloudburstError):
    """No scheduler took a request, or the scheduler of a call in flight stopped or stopped
    answering (the message names it). A call that fails so may or may not have run: calls
    are never re-sent, because functions may have side effects."""


class ValueTooLarge(CloudburstError, ValueError):
    """An argument, a result or an object is larger than the KVS's maximum value size (64 MiB
    by default), the most any value may be. The message names the function (or key), the
    size and the limit. An argument is refused before anything is sent; a result at the
    worker that made it."""


class LeaseRefused(CloudburstError):
    """A worker refused a direct call: no live worker lease of this client allows it there
    (the lease is unknown to the worker, expired, revoked, or all its slots are in use). The
    message names the worker and why. The call did not run; `Client` sends it through its
    scheduler instead, so a caller meets this only when sending direct calls by hand."""


class CallLinkBroken(CloudburstError):
    """The call link a direct call was sent on broke at the client before the call's result
    came (a frame from the worker did not open, so what followed it on the link cannot be
    read): the result may be lost, and the call may or may not have run. The message names
    the worker, the link and why. Not retried: a retry could run the call twice."""


# cloudburst.Status numbers (proto/cloudburst.proto); kept here so this module has no dependencies.
STATUS_OF = {
    FunctionNotFound: 1, DagNotFound: 2, InvalidDag: 3, NoResources: 4, ExecutionError: 5,
    Timeout: 6, ObjectNotFound: 7, Aborted: 10, Cancelled: 11, UnsafeValue: 12,
    NotPermitted: 13, CorruptRecord: 14, InvalidArguments: 20, DependencyFailed: 21,
    WorkerDied: 22, ActorDied: 24, ValueTooLarge: 26, ActorCallCycle: 230,
    LeaseRefused: 300, CallLinkBroken: 760,
}


_ERROR_OF = {status: cls for cls, status in STATUS_OF.items()}


def error_from_status(status: int, message: str, remote_traceback: str = "",
                      stage: str = "") -> CloudburstError:
    """The typed error for a non-OK status received from a remote process."""
    cls = _ERROR_OF.get(status)
    if cls is ExecutionError:
        return ExecutionError(message, remote_traceback)
    if cls is Timeout:
        return Timeout(stage or message)
    if cls is not None:
        return cls(message)
    return CloudburstError(f"remote error (status {status}): {message}")
