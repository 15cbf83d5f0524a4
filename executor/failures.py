"""How a worker names a call that failed before or around its function: one table from the
exceptions its call paths raise (a refused argument, a corrupt registry record, arguments that
do not fit, a `Future` argument without a value, an actor that is not here, a value over the
limit) to the call's status and message. The plain path (`executor/worker.py`) and the causal
path (`executor/causal_run.py`) both fail a call through it, so a cause reads the same in both.
"""
from __future__ import annotations

import traceback
from typing import Tuple

from hydro_proto import cloudburst_pb2 as pb
from faas.errors import CorruptRecord, InvalidArguments, ValueTooLarge

from .actors import ActorGone, ActorTableFull, describe
from .references import ArgumentRefused, FunctionError
from .retrying import exception_names
from .sharing import DependencyError

# What the causal path can meet (actor calls are never causal); the plain path adds actors'.
CALL_FAILURES = (ArgumentRefused, CorruptRecord, InvalidArguments, DependencyError,
                 ValueTooLarge)
ACTOR_FAILURES = (ActorGone, ActorTableFull)


def failure(e: BaseException, what: str, worker_id: str) -> Tuple[int, str]:
    """The status and message of a call that failed with `e` (one of `CALL_FAILURES` or
    `ACTOR_FAILURES`) while `what` ran on worker `worker_id`."""
    if isinstance(e, ArgumentRefused):
        return pb.UNSAFE_VALUE, f"{what} on worker {worker_id}: {e}"
    if isinstance(e, CorruptRecord):
        return pb.CORRUPT_RECORD, f"{what} on worker {worker_id}: {e}"
    if isinstance(e, InvalidArguments):
        return pb.INVALID_ARGUMENTS, f"{what}: {e}"
    if isinstance(e, DependencyError):
        return pb.DEPENDENCY_FAILED, str(e)
    if isinstance(e, ActorGone):          # executor/actors.py: the instance is not here
        return pb.ACTOR_DIED, f"{what} on worker {worker_id}: {e}"
    if isinstance(e, ActorTableFull):
        return pb.NO_RESOURCES, f"{what}: {e}"
    if isinstance(e, ValueTooLarge):
        return pb.VALUE_TOO_LARGE, f"{e} (worker {worker_id})"
    raise TypeError(f"failure: {type(e).__name__} is not a call failure") from e


# what a function's run may raise that is reported as it is (the rest is the function's error)
PASSED_ON = (ArgumentRefused, CorruptRecord, ActorGone, ActorTableFull, InvalidArguments,
             DependencyError)


def named(e: Exception, what: str, worker_id: str) -> Exception:
    """What a plain call reports for `e`, raised while `what` was got ready or ran on worker
    `worker_id` (call it in the `except` block: an error of the function's own carries the
    traceback being handled): one of `PASSED_ON` as it is, else a `FunctionError` naming
    `what` (with the exception's type names, for the call's retry rule)."""
    if isinstance(e, FunctionError):
        return FunctionError(f"{what} on worker {worker_id}: {e}")
    if isinstance(e, PASSED_ON):
        return e
    return FunctionError(f"{what} raised {type(e).__name__}: {e}", traceback.format_exc(),
                         exception_names(type(e)))


def what_runs(s: pb.Schedule) -> str:
    """How failures name what a schedule runs (the `what` above)."""
    if s.HasField("actor"):
        return f"{s.actor.method!r} of {describe(s.actor)}"
    return f"function {s.function!r}" + (f" of DAG {s.dag!r}" if s.dag and s.dag != s.function
                                         else "")
