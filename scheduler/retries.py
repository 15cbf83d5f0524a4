"""Retries of calls, at least once: whether a failed attempt of a call runs again. Pure.

Contract:
- `RetryPolicy(max_retries, exceptions)`: how many more times a call may run after its first
  attempt, and which application exceptions count (`False`: none, `True`: any, or a
  frozenset of qualified class names, `"module.QualName"`, matched against the raised
  exception's class and its bases). System failures (the worker or its node died while
  the attempt was in flight) are always retried while the budget lasts, like Ray's
  `max_retries`; both kinds of failure draw on the same budget.
- `resolve(call, functions, default)` merges the levels, each a `pb.RetryPolicy` whose unset
  fields fall through: the call's own, then the functions' (for a DAG, the smallest
  `max_retries` of its functions, so a function that says 0 is never run twice; the
  exception classes of every function that names some), then the cluster's default.
- `RetryTable` keeps one `Tracked` entry per call that may be retried, under the caller's
  request id (which holds no "#"; a call whose id does is not tracked); its attempts are
  `f"{caller}#r{n}"` for n >= 1 (the first attempt keeps the caller's id). Every method takes `now`; nothing reads a clock.
  - `begin(caller, policy, payload, deadline)`: track a call (`payload` is opaque: what
    the service needs to place the call again).
  - `current(call_or_attempt_id)`: the attempt in flight for a caller's id, or None.
  - `on_failure(attempt_id, failure)` -> `Retry(attempt_id, attempt)` or
    `GiveUp(status, message, attempts)`, or None when the attempt is not the call's
    current one (a late report of an attempt already replaced: ignore it). A `Retry`
    makes its attempt the current one; a `GiveUp` forgets the call.
  - `finish(call_or_attempt_id)`: the call ended (result, cancel); forgets it.
  - `expire(now)`: forgets calls past their deadline (their callers gave up); bounded.
- A causal call that was granted its commit (hydrocache/DESIGN.md, "Fencing") is never
  retried: its writes may have been applied. One that was not granted was fenced
  everywhere, so running it again cannot write twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Sequence, Union

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["RetryPolicy", "Failure", "Retry", "GiveUp", "Tracked", "RetryTable", "resolve",
           "attempt_id", "caller_of_attempt", "DEFAULT_MAX_RETRIES"]

DEFAULT_MAX_RETRIES = 3          # Ray's default for tasks: system failures only

Exceptions = Union[bool, FrozenSet[str]]


@dataclass(frozen=True)
class RetryPolicy:
    """See the module contract."""

    max_retries: int = DEFAULT_MAX_RETRIES
    exceptions: Exceptions = False

    def retries_exception(self, type_names: Iterable[str]) -> bool:
        """True if an exception whose class and bases are `type_names` may be retried."""
        if self.exceptions is True:
            return True
        if not self.exceptions:
            return False
        return any(n in self.exceptions for n in type_names)

    def exception_types(self) -> List[str]:
        return [] if isinstance(self.exceptions, bool) else sorted(self.exceptions)


def _exceptions_of(p: "pb.RetryPolicy") -> Exceptions:
    return True if p.all_exceptions else (frozenset(p.exception_types) or False)


def resolve(call: Optional["pb.RetryPolicy"], functions: Sequence[Optional["pb.RetryPolicy"]],
            default: RetryPolicy) -> RetryPolicy:
    """The policy a call runs under (module contract)."""
    fns = [f for f in functions if f is not None]
    if call is not None and call.has_max_retries:
        max_retries = call.max_retries
    else:
        set_ = [f.max_retries for f in fns if f.has_max_retries]
        max_retries = min(set_) if set_ else default.max_retries
    if call is not None and call.has_exceptions:
        exceptions = _exceptions_of(call)
    else:
        chosen = [_exceptions_of(f) for f in fns if f.has_exceptions]
        if not chosen:
            exceptions = default.exceptions
        elif any(c is True for c in chosen):
            exceptions = True
        else:
            exceptions = frozenset().union(*[c for c in chosen if c]) or False
    return RetryPolicy(max(0, int(max_retries)), exceptions)


def attempt_id(caller: str, attempt: int) -> str:
    """The id of attempt `attempt` (1 = the first run) of the call `caller`."""
    return caller if attempt <= 1 else f"{caller}#r{attempt - 1}"


def caller_of_attempt(call_id: str) -> str:
    """The caller's request id of an attempt id (of a causal attempt's too: `"<caller>#r1#0"`).
    A caller's id holds no "#" (`RetryTable.begin` tracks no other)."""
    return call_id.split("#", 1)[0]


@dataclass(frozen=True)
class Failure:
    """Why an attempt failed. `system`: its worker or node died (`message` says which);
    otherwise the function raised (`type_names`: the exception's class and bases).
    `committed`: a causal attempt held its call's commit grant."""

    message: str
    system: bool = True
    type_names: FrozenSet[str] = frozenset()
    committed: bool = False
    status: int = pb.EXECUTION_ERROR


@dataclass(frozen=True)
class Retry:
    attempt_id: str
    attempt: int                     # 2 for the first retry


@dataclass(frozen=True)
class GiveUp:
    status: int
    message: str
    attempts: int


@dataclass
class Tracked:
    caller: str
    policy: RetryPolicy
    payload: Any
    deadline: float
    attempt: int = 1
    history: List[str] = field(default_factory=list)   # why each failed attempt failed

    @property
    def current(self) -> str:
        return attempt_id(self.caller, self.attempt)


class RetryTable:
    """The calls that may still be retried; see the module contract."""

    def __init__(self) -> None:
        self._calls: Dict[str, Tracked] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def begin(self, caller: str, policy: RetryPolicy, payload: Any, deadline: float) -> bool:
        """Track `caller`'s call; False (not tracked, never retried) for an id holding "#"."""
        if "#" in caller:
            return False
        if caller not in self._calls:
            self._calls[caller] = Tracked(caller, policy, payload, deadline)
        return True

    def tracked(self, call_id: str) -> Optional[Tracked]:
        return self._calls.get(caller_of_attempt(call_id))

    def current(self, call_id: str) -> Optional[str]:
        t = self.tracked(call_id)
        return t.current if t is not None else None

    def on_failure(self, call_id: str, failure: Failure) -> Union[Retry, GiveUp, None]:
        t = self.tracked(call_id)
        if t is None:
            return None
        if call_id != t.current:
            return None                      # an attempt already replaced by a retry
        t.history.append(failure.message)
        budget = t.policy.max_retries
        runs = f"{t.attempt} attempt{'s' if t.attempt > 1 else ''}"
        if failure.committed:
            del self._calls[t.caller]
            return GiveUp(pb.WORKER_DIED if failure.system else failure.status, (
                f"{failure.message}; not retried: the attempt was granted its causal commit, "
                f"so its writes may have been applied ({runs} ran)"), t.attempt)
        if not failure.system and not t.policy.retries_exception(failure.type_names):
            del self._calls[t.caller]
            return GiveUp(failure.status, _ran(failure.message, t), t.attempt)
        if t.attempt > budget:
            del self._calls[t.caller]
            status = pb.WORKER_DIED if failure.system else failure.status
            return GiveUp(status, (
                f"{_ran(failure.message, t)}; its retry budget (max_retries={budget}) is "
                f"spent"), t.attempt)
        t.attempt += 1
        return Retry(t.current, t.attempt)

    def finish(self, call_id: str) -> Optional[Tracked]:
        t = self.tracked(call_id)
        if t is not None:
            del self._calls[t.caller]
        return t

    def expire(self, now: float) -> List[Tracked]:
        gone = [t for t in self._calls.values() if now > t.deadline]
        for t in gone:
            del self._calls[t.caller]
        return gone


def _ran(message: str, t: Tracked) -> str:
    if t.attempt <= 1:
        return message
    earlier = "; ".join(f"attempt {i + 1}: {why}" for i, why in enumerate(t.history[:-1]))
    return f"{message} (attempt {t.attempt} of the call; earlier: {earlier})"
