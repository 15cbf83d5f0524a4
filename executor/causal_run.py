"""How a worker runs one invocation of a causal call (HydroCache; hydrocache/DESIGN.md).

Contract: `CausalRunning` is mixed into `executor.worker.Worker` and runs a ready invocation
whose schedule has `consistency == CAUSAL` (`_run_causal`):
- its reads go through an `executor.causal.CausalInvocation` bound to the `Reference`s among
  its arguments and the upstream results' causal contexts; under HB with OPT, an attempt
  whose read versions and inputs match an earlier attempt's reuses that attempt's result
  (kept until 30 s after its deadline, bounded in count and bytes: `executor/reuse.py`);
- a sink commits through the node cache once the scheduler grants the call's one commit,
  writing `output_key` too when asked, and sends the caller its result with the call's
  `CausalStats`; the result goes downstream with the invocation's causal context;
- an abort of the protocol, or a commit or read refused because the attempt is fenced,
  is reported to the scheduler as a `causal_abort` (and the attempt's other workers get
  `abort`); the caller hears nothing from here: the scheduler owns that call's outcome.
  Every other failure reaches the caller as the worker's plain calls' do.
Uses the worker's `cache`, `_push`, `address`, `pending`, `worker_id`, `_writer`, `_reuse`,
`invocation`, and its `_function`, `_call_function`, `_result_fields`, `_send_downstream`,
`_call_logs`, `_call_done`, `_fail` and `_stopped`.
"""
from __future__ import annotations

import logging
import time
import traceback

from hydro_proto import cloudburst_pb2 as pb
from hydrocache import versionset as vs
from faas.errors import (CorruptRecord, InvalidArguments, ObjectNotFound, Timeout,
                            ValueTooLarge)
from faas.values import Reference, dumps

from .cache_client import Fenced
from .causal import CausalAbortError, CausalInvocation
from .reuse import Reusable, inputs_digest
from .dagstate import Ready
from .guard import Interrupted
from .failures import CALL_FAILURES, failure
from .references import ArgumentRefused, FunctionError, resolve
from .sharing import DependencyError, prepare

__all__ = ["CausalRunning"]

log = logging.getLogger("cloudburst.worker")


class CausalRunning:
    """A causal invocation's run; mixed into the worker (module contract)."""

    def _run_causal(self, ready: Ready, what: str, start: float) -> None:
        s: pb.Schedule = ready.schedule
        plan = s.causal
        n_up = len(s.upstreams)
        raw_args = list(ready.args[:len(ready.args) - n_up])
        upstream = list(ready.args[len(ready.args) - n_up:])
        contexts = [u[1] if isinstance(u, tuple) else pb.CausalContext() for u in upstream]
        results = [u[0] if isinstance(u, tuple) else u for u in upstream]
        inv = CausalInvocation(self.cache, s, contexts, ready.deadline - time.monotonic())
        self.busy.start(start)
        try:
            try:
                fn = self._function(s.function, s.version, start + s.timeout)
                values, kwvalues = prepare(Ready(ready.call_id, ready.function, s,
                                                 raw_args + results, inputs=ready.inputs), what)
                refs = [v.key for v in values + list(kwvalues.values())
                        if isinstance(v, Reference)]
                reuse_key = (plan.call_id, s.function)
                reuse = self._reuse.get(reuse_key) if plan.reuse_attempt else None
                inv.bind(refs + (sorted(reuse.read_clocks) if reuse else []))
                digest = inputs_digest(raw_args, results)
                if reuse is not None and reuse.read_clocks == inv.read_clocks() \
                        and reuse.inputs_digest == digest:
                    value = reuse.value         # HB: same read versions, same inputs (4.3.5)
                else:
                    args = [resolve(inv, v) if isinstance(v, Reference) else v for v in values]
                    kwargs = {k: resolve(inv, v) if isinstance(v, Reference) else v
                              for k, v in kwvalues.items()}
                    self.invocation = inv
                    try:
                        result = self._call_function(s, fn, args, kwargs, ready.deadline)
                    finally:
                        self.invocation = None
                    value = dumps(result)
                    if plan.requested == pb.HB and plan.protocol == pb.OPT:
                        self._reuse.put(reuse_key, Reusable(ready.deadline + 30.0,
                                                            inv.read_clocks(), digest, value))
                fields = self._result_fields(s, value, what)
                versions = []
                if s.sink:
                    extra = {s.output_key: value} if s.output_key else None
                    versions = inv.commit(self._writer, extra)
            except (CausalAbortError, Timeout, ArgumentRefused, Fenced, CorruptRecord,
                    InvalidArguments, DependencyError, ValueTooLarge):
                raise
            except FunctionError as e:
                raise FunctionError(f"{what} on worker {self.worker_id}: {e}") from None
            except ObjectNotFound as e:
                raise FunctionError(f"{what} on worker {self.worker_id}: {e}") from None
            except Exception as e:
                raise FunctionError(f"{what} raised {type(e).__name__}: {e}",
                                     traceback.format_exc()) from None
        except CausalAbortError as e:
            self._causal_abort(s, e)
            return
        except Fenced as e:
            # the scheduler released or failed this attempt, or granted the call's commit to
            # another: it owns the call's outcome, so the caller hears nothing from here
            log.info("%s: attempt %s fenced: %s", what, s.call_id, e)
            self._causal_abort(s, CausalAbortError(f"fenced: {e}"))
            return
        except CALL_FAILURES as e:                        # executor/failures.py names them
            self._fail(s, *failure(e, what, self.worker_id))
            return
        except Timeout as e:     # a protocol stage (or the function's own wait) ran out of time
            stage = f"{e.stage} ({what}, worker {self.worker_id}, {pb.Protocol.Name(plan.protocol)})"
            self._fail(s, pb.TIMEOUT, f"timed out waiting for {stage}", stage=stage)
            return
        except FunctionError as e:
            self._fail(s, pb.EXECUTION_ERROR, str(e), e.tb)
            return
        except Interrupted as e:
            self._stopped(s, what, e)
            return
        finally:
            self.busy.stop(time.monotonic())
        logs = self._call_logs(s, self._printed)
        self._send_downstream(s, ready, value, inv.context(), logs)
        if s.sink:
            stats = pb.CausalStats(protocol=plan.protocol, aborts=plan.attempt,
                                   remote_fetches=inv.remote_fetches, requested=plan.requested)
            stats.read_set.extend(vs.to_proto(inv.read_set))
            stats.writes.extend(vs.to_proto(vs.of_versions(versions)))
            self._push.send(s.response_address, "result", pb.CallResult(
                request_id=plan.call_id, status=pb.OK, causal=stats, logs=logs, **fields))
            self._call_done(s.scheduler_address, s.call_id)

    def _causal_abort(self, s: pb.Schedule, e: CausalAbortError) -> None:
        """Tell the scheduler (it retries or fails the call) and the attempt's other workers."""
        self._push.send(s.scheduler_address, "causal_abort", pb.CausalAbort(
            attempt_id=s.call_id, call_id=s.causal.call_id, reason=e.reason,
            function=s.function, new_keys=e.new_keys, stale_keys=e.stale_keys))
        for fn, address in s.locations.items():
            if fn != s.function:
                if address == self.address:
                    self.pending.abort(s.call_id)
                else:
                    self._push.send(address, "abort", pb.CallDone(call_id=s.call_id))

    def _expire_reuse(self, now: float) -> None:
        self._reuse.expire(now)
