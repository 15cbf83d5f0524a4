"""A leased DAG's direct call run as its lease's plan says (`executor/chain_plan.py`): every
function on this worker, one after another, with what a call needs done once done once per
call rather than once per function.

Contract (`ChainRuns`, mixed into `executor.worker.Worker`; `executor/direct_calls.py` calls
`_run_chain(call, plan)` for an admitted call whose lease has a plan):
- The functions run in the plan's order, each with the call's arguments for it and its
  upstreams' results (serialized, as a trigger carries them, in its schedule's upstream
  order), each exactly as any function runs: under its own time limit (`Worker._time_limit`:
  its limit, or what is left of the call's deadline; `FunctionGuard.run` stops it there),
  its output captured as its own section (a downstream function's logs start with its
  upstreams'), its session made from the caller's floors and its upstreams' reports, the
  node told it runs and until when (`executor/liveness.py`, `executor/run_slot.py`: a
  function deaf to the guard's signal fails its call at its own limit). A function that
  fails ends the call, reported as any plain function's failure is (`RunEnds._ended`:
  typed errors naming the function, the traceback, retry by the call's rule); the
  functions after it do not run. One whose turn comes after the call's deadline fails with
  TIMEOUT naming it. No schedule is copied and nothing is kept pending: the plan's schedules
  are filled in place (the session only for a failure's report, which reads it; the
  arguments not at all: they are read from the call).
- Once per call rather than per function: the busy clock (one start, one stop), the actor
  binding (handles a function was given call their actors through this worker, via the
  lease's scheduler; a call's wait ends at the call's deadline, and each function is still
  stopped at its own limit), the node's record of the run ending (told once, after the
  last function; between functions the next one's start replaces it), and the call id's use
  (`PendingCalls.ran`: ids are used once).
- The sink's result is answered (`RunEnds._succeeded`) with the busy clock stopped and
  before the run's end is recorded and the actor binding is left.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .call_session import CallSession
from .chain_plan import ChainPlan, Step
from .dagstate import Ready
from .failures import named
from .run_ends import RUN_FAILURES, serialized

__all__ = ["ChainRuns", "fill", "fill_args", "fill_session"]


class ChainRuns:
    """A plan's run of a direct call; mixed into the worker (module contract)."""

    def _run_chain(self, call: pb.Call, plan: ChainPlan) -> None:
        # (the call's fields read once, not per function: a field read costs a call)
        call_id, args, timeout = call.request_id, call.args, call.timeout
        has_session = call.HasField("session")
        start = time.monotonic()
        deadline = start + max(0.0, timeout)
        self.pending.ran(call_id, plan.functions, deadline)     # ids are used once
        results: Dict[str, bytes] = {}
        self.busy.start(start)
        self._chain_until = deadline   # when the last function told the node is up
        try:
            # (left after the sink's answer: when this block ends)
            with self.actor_caller.during(plan.scheduler, deadline):
                for step in plan.steps:
                    s = step.schedule
                    fill(s, call)
                    now = time.monotonic()
                    function, upstreams = step.function, step.upstreams
                    s.timeout = max(0.0, deadline - now) if upstreams else timeout
                    # its own arguments are read from the call, not copied into `s`
                    if function in args:
                        own = args[function]
                        values, kwargs = list(own.args), own.kwargs
                    else:
                        values, kwargs = [], {}
                    if upstreams:
                        values += [results[u] for u in upstreams]
                    ready = Ready(call_id, function, s, values, deadline, kwargs=kwargs)
                    if now > deadline:         # `_execute` words the late step's TIMEOUT
                        self.busy.stop(now)
                        fill_session(s, call)
                        ready.late = ["(the schedule)", *step.upstreams]
                        self._execute(ready, step.what)
                        return
                    ran = self._chain_step(step, ready, call, has_session)
                    if ran is None:            # it failed, and its caller was told
                        return
                    value, fields, report = ran
                    if step.sink:
                        self.busy.stop(time.monotonic())
                        self._succeeded(s, ready, value, fields, "", report)
                        continue
                    results[step.function] = value
                    logs = self._call_logs(s, self._printed)
                    for target in step.targets:   # what `_arrived` keeps of a trigger's
                        if logs:
                            self._upstream_logs.add(call_id, target, logs)
                        if report is not None:
                            self._sessions.add(call_id, target, report)
        finally:
            self.busy.stop(time.monotonic())       # (nothing if it was stopped)
            self.cache.session = None
            end = self.run_reports.end(call_id, self._chain_until, time.monotonic(), False)
            if end is not None:
                self._tell_node(end)

    def _chain_step(self, step: Step, ready: Ready, call: pb.Call, has_session: bool
                    ) -> Optional[Tuple[bytes, Dict[str, Any], Optional[pb.Session]]]:
        """Run one function of the plan: its serialized result, CallResult fields and session
        report; None when it failed (reported, as `_execute` reports a failure). When its
        time is up (the node is told) goes to `_chain_until`, for the run's end.
        `has_session`: whether `call` carries the caller's session."""
        s, what = ready.schedule, step.what
        self._printed = ""
        session = self.cache.session = CallSession(
            call.session, self._sessions.take(ready.call_id, step.function)) \
            if has_session else None
        try:
            try:
                fn = self._function(step.function, s.version, ready.deadline)
                args, kwargs = self._arguments(ready, what)
                fn.check(args, kwargs)
                now = time.monotonic()
                seconds, reason = self._time_limit(s, ready.deadline, now)
                until = self._chain_until = now + seconds
                result = self._guarded(s, fn, args, kwargs, seconds, reason, until)
            except Exception as e:
                raise named(e, what, self.worker_id) from None
            value = serialized(result, what)
            return value, self._result_fields(s, value, what), \
                None if session is None else session.report()
        except RUN_FAILURES as e:
            self.busy.stop(time.monotonic())
            fill_session(s, call)          # (what the failure's report reads)
            self._ended(s, what, e)
            return None


def fill(one: pb.Schedule, call: pb.Call) -> None:
    """A schedule's own fields from the call, but for its arguments (a plan's schedule: the
    previous call's replaced; a plan's schedules carry no arguments)."""
    one.call_id = call.request_id
    one.response_address = call.response_address
    one.time_limit = call.time_limit


def fill_args(one: pb.Schedule, args: Any) -> None:
    """The call's arguments (`Call.args`) for the function of `one`, into it."""
    if one.function in args:
        one.args.CopyFrom(args[one.function])
    elif one.HasField("args"):
        one.ClearField("args")


def fill_session(one: pb.Schedule, call: pb.Call) -> None:
    """The caller's session, if any, into the schedule (replacing the previous call's)."""
    if call.HasField("session"):
        one.session.CopyFrom(call.session)
    elif one.HasField("session"):
        one.ClearField("session")
