"""What a worker sends when a function's run ends: its result passed on, or its failure.

Contract: `RunEnds` is mixed into `executor.worker.Worker`; the worker's `_run` (and a causal
invocation's, `executor/causal_run.py`) ends in exactly one of these:
- `_succeeded`: a plain call's function returned. Its result goes as a `trigger` to each
  downstream function's worker (`_send_downstream`: to this worker without a socket hop,
  with that function's schedule from `Schedule.forward`, the call's session report and the
  logs so far; by KVS key to another worker when it is large); a sink keeps the outcome for
  `Future` arguments, answers the caller (`CallResult` with `_result_fields`: the value, or
  its KVS key above 1 MiB) and tells the scheduler `done`.
- `_fail(s, status, message)`: the caller gets a `CallResult` of that status with the logs
  so far; a plain call's outcome is kept for `Future` arguments; the call's functions on
  other workers get `abort` (`_abort_others`; here: dropped from `pending`); the scheduler
  gets `done` (not ok).
- `_ended(s, what, e)`: a plain call's run raised one of `RUN_FAILURES` (a function's error,
  as `executor/failures.py` `named` it, retried by the scheduler when the call's retry rule
  takes its type; a call failure; a stop): reported as the three below say.
- `_stopped`: a function stopped by the guard: TIMEOUT naming its limit and who waited for
  it, or CANCELLED; `_on_stalled`: an invocation still missing upstream results at its
  deadline: TIMEOUT naming the function, the worker and the missing upstreams.
Uses the worker's `cache`, `_push`, `_local`, `address`, `pending`, `worker_id`, `_printed`,
and its `_call_logs`, `_keep_outcome`, `_answer`, `_reply` and `_call_done`.
"""
from __future__ import annotations

import logging
import time
import traceback
from typing import Any, Dict, Optional, Tuple

from anna_core.config import DEFAULT_MAX_VALUE_BYTES
from faas.errors import ValueTooLarge
from hydro_proto import cloudburst_pb2 as pb

from faas.values import dumps

from .big_results import result_fields
from .dagstate import Ready
from .failures import ACTOR_FAILURES, CALL_FAILURES, failure
from .guard import Interrupted
from .held import Outcome
from .references import FunctionError
from .retrying import may_retry, retry_request

__all__ = ["RunEnds", "RUN_FAILURES", "serialized"]

# how a plain call's run may end other than with a result (`RunEnds._ended` reports each)
RUN_FAILURES = (FunctionError, Interrupted) + CALL_FAILURES + ACTOR_FAILURES


def serialized(result: Any, what: str) -> bytes:
    """A function's result as it travels; `FunctionError` when it cannot be serialized."""
    try:
        return dumps(result)
    except Exception as e:
        raise FunctionError(f"the result of {what} could not be serialized: {e}",
                            traceback.format_exc()) from None

log = logging.getLogger("cloudburst.worker")


class RunEnds:
    """A function run's end, reported; mixed into the worker (module contract)."""

    def _succeeded(self, s: pb.Schedule, ready: Ready, value: bytes, fields: Dict[str, Any],
                   downstream: str, report: Optional[pb.Session]) -> None:
        """A plain call's function returned `value` (serialized; `fields`: its CallResult
        fields, `downstream`: its KVS key for other workers, if any): pass it on."""
        logs = self._call_logs(s, self._printed)
        if s.targets:
            self._send_downstream(s, ready, value, logs=logs, session=report,
                                  value_key=downstream)
        if s.sink:
            if s.response_address:    # none: an actor's re-creation (scheduler/actor_calls.py)
                result = pb.CallResult(request_id=s.call_id, status=pb.OK, **fields)
                if logs:              # (set only when there is some: an empty field given
                    result.logs = logs        # to the constructor costs as much as a set one)
                if report is not None:
                    result.session.CopyFrom(report)
                self._answer(s.response_address, result)
            # for Future arguments (a fetch of it is handled after this, on this thread)
            self._keep_outcome(s.call_id, Outcome(pb.OK, value))
            # the whole call ran here: the caller's next call will come here (policy.py)
            self._call_done(s.scheduler_address, s.call_id, hold=s.locations)

    def _result_fields(self, s: pb.Schedule, value: bytes, what: str) -> Dict[str, Any]:
        """The result's CallResult fields; ValueTooLarge above the KVS's limit (big_results)."""
        try:
            return result_fields(self.cache, s, value, what, DEFAULT_MAX_VALUE_BYTES)
        except ValueTooLarge:
            raise
        except Exception as e:
            raise FunctionError(f"storing the large result of {what} in the KVS failed: "
                                f"{e}") from None

    def _send_downstream(self, s: pb.Schedule, ready: Ready, value: bytes,
                         causal: Optional[pb.CausalContext] = None, logs: str = "",
                         session: Optional[pb.Session] = None, value_key: str = "") -> None:
        for target in s.targets:
            address = s.locations[target]
            if address == self.address and causal is None:
                # to this worker: no Trigger message, the same fields straight to `_arrived`
                forward = _forwarded(s, target, ready, pb.Schedule())
                self._local.append((self._from_here, (forward, s.call_id, s.function, target,
                                                      value, logs, session)))
                continue
            trigger = pb.Trigger(call_id=s.call_id, source=s.function, target=target, logs=logs,
                                 session=session)
            if value_key and address != self.address:
                trigger.value_key = value_key      # the value is in the KVS under it
            else:
                trigger.value = value
            if causal is not None:
                trigger.causal.CopyFrom(causal)
            if _forwarded(s, target, ready, trigger.schedule) is None:
                trigger.ClearField("schedule")
            if address == self.address:
                self._local.append((self._on_trigger, trigger))
            else:
                self._push.send(address, "trigger", trigger)

    def _from_here(self, fields: Tuple[Any, ...]) -> None:
        self._arrived(*fields)

    def _fail(self, s: pb.Schedule, status: int, message: str, tb: str = "",
              stage: str = "") -> None:
        if s.response_address:        # none: an actor's re-creation (scheduler/actor_calls.py)
            self._reply(s.response_address, "result", pb.CallResult(
                request_id=s.causal.call_id or s.call_id, status=status, message=message,
                traceback=tb, stage=stage, logs=self._call_logs(s, self._printed)))
        else:
            log.warning("%s failed (no caller to tell): %s", s.function, message[:500])
        self._printed = ""
        if s.consistency != pb.CAUSAL:
            self._keep_outcome(s.call_id, Outcome(status, message=message))
        self._abort_others(s, status, message)
        self._call_done(s.scheduler_address, s.call_id, ok=False)

    def _ended(self, s: pb.Schedule, what: str, e: BaseException) -> None:
        """A plain call's run of `what` raised `e`, one of `RUN_FAILURES` (module contract)."""
        if isinstance(e, FunctionError):
            if may_retry(s, e.types):     # the scheduler runs the call again, or fails it
                self._push.send(s.scheduler_address, "done", retry_request(
                    s, str(e), e.tb, self._call_logs(s, self._printed), e.types))
                self._printed = ""
                self._abort_others(s)
            else:
                self._fail(s, pb.EXECUTION_ERROR, str(e), e.tb)
        elif isinstance(e, Interrupted):
            self._stopped(s, what, e)
        else:                             # executor/failures.py names them
            self._fail(s, *failure(e, what, self.worker_id))

    def _abort_others(self, s: pb.Schedule, status: int = 0, message: str = "") -> None:
        """The call's other functions (here or on other workers) drop it."""
        for fn, address in s.locations.items():
            if fn != s.function:
                if address == self.address:
                    self.pending.abort(s.call_id)
                else:
                    self._push.send(address, "abort", pb.CallDone(
                        call_id=s.call_id, status=status, message=message))

    def _stopped(self, s: pb.Schedule, what: str, e: Interrupted) -> None:
        """A function stopped by its time limit (TIMEOUT naming it) or by a cancel."""
        if e.status == pb.TIMEOUT:
            waiting = f"; {', '.join(repr(t) for t in s.targets)} waited for its result" \
                if s.targets else ""
            stage = (f"{what} to finish within {e.reason} on worker {self.worker_id} "
                     f"(it was stopped{waiting})")
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
        else:
            self._fail(s, pb.CANCELLED, f"{what} on worker {self.worker_id} was stopped: "
                                        f"{e.reason}")

    def _on_stalled(self, stalled: Any) -> None:
        s = stalled.schedule
        if s is None:
            log.warning("dropped result(s) for %s of call %s: its schedule never arrived",
                        stalled.function, stalled.call_id)
            return
        self._printed = ""
        stage = (f"upstream result(s) {stalled.missing} of function {s.function!r} "
                 f"(DAG {s.dag!r}) on worker {self.worker_id}")
        self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)


def _forwarded(s: pb.Schedule, target: str, ready: Ready,
               into: pb.Schedule) -> Optional[pb.Schedule]:
    """`target`'s schedule from `s.forward`, filled into `into` (None: `s` carries none,
    as for a DAG too large to forward; the scheduler sent it). Only a function with
    targets of its own gets the forwarded schedules (a sink sends nothing on)."""
    for f in s.forward:
        if f.function == target:
            into.CopyFrom(f)
            if f.targets:
                into.forward.extend(s.forward)
            if s.HasField("session"):
                into.session.CopyFrom(s.session)
            # the call's deadline, not a fresh one: what is left of this function's
            into.timeout = max(0.0, ready.deadline - time.monotonic())
            return into
    return None
