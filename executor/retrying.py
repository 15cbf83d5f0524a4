"""A function that raised: may its call run again? The worker's side of retries. Pure.

Contract: the scheduler writes into each schedule which exceptions its call retries
(`Schedule.retry_all_exceptions`, `retry_exception_types`, from the call's and its
functions' `retry_exceptions`).
`exception_names(cls)` names an exception class and its bases as `"module.QualName"` (the
form the client sends); `may_retry(schedule, names)` says whether the call's policy names
it (the scheduler, which counts the attempts, decides whether it runs again); `retry_request(...)` is the `done` a worker then sends its scheduler instead of
failing the call at its caller: the scheduler runs the call again (the whole DAG attempt,
under a new attempt id) or, its budget spent, sends the caller the error with how many
attempts ran (scheduler/lifecycle.py).
"""
from __future__ import annotations

from typing import List, Sequence

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["exception_names", "may_retry", "retry_request"]


def exception_names(cls: type) -> List[str]:
    """`cls` and its bases, most derived first, as `"module.QualName"` (object left out)."""
    return [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__ if c is not object]


def may_retry(schedule: pb.Schedule, names: Sequence[str]) -> bool:
    if not names:
        return False
    return schedule.retry_all_exceptions or \
        bool(set(names) & set(schedule.retry_exception_types))


def retry_request(schedule: pb.Schedule, message: str, tb: str, logs: str,
                  names: Sequence[str]) -> pb.CallDone:
    return pb.CallDone(call_id=schedule.call_id, response_address=schedule.response_address,
                       exception_types=list(names), retry=pb.CallResult(
                           request_id=schedule.call_id, status=pb.EXECUTION_ERROR,
                           message=message, traceback=tb, logs=logs))
