"""A worker's part in passing one call's result to another (a `Future` given as an argument),
and how a call's arguments become the values a function receives.

Contract:
- A `CallRef` argument (positional or keyword) is another call's result. It is an *input*
  of the invocation (`executor.dagstate.PendingCalls`), named `input_name(position)`: when
  the schedule arrives, the worker sends a `fetch` (`ResultRequest`) to the ref's `holder`
  (the worker that ran that call's sink; set by the scheduler) and the function runs once
  every input and upstream result is there. A ref without a holder fails at once.
- The holder (`ResultSharing`, mixed into `executor.worker.Worker`) keeps the outcome of
  every call it ran the sink of, and the failure of every call it was told to abort, in a
  bounded `executor.held.HeldResults`. It answers a fetch with a `trigger` (the value, or
  `status` and `message`) at once when it holds the outcome, else when it is produced, or
  DEPENDENCY_FAILED when it has been dropped or does not come before the request's
  deadline. It answers only an address that carries the function key (another worker).
  It reads fetches between functions: a holder busy with a long function answers after it.
- Outcomes are held under the caller's id (an attempt `<caller>#r<n>` holds its result
  for `<caller>`, which is what a `Future` names), so a retried producer's result is found
  at its new holder. An `abort` keeps an outcome only when it carries a verdict (a status,
  and not `retried`): a call that runs again elsewhere leaves nothing that would answer
  a fetch before its retry does. A `moved` (`CallRef`: the scheduler placed the producer
  again) sends the fetches still waiting for that call's result to its new holder.
- `prepare(ready, what)` turns a ready invocation's arguments into `(args, kwargs)`: values
  unpickled fully (the caller's own arguments and upstream results), `CallRef`s replaced by
  the fetched values, `Reference`s left for the worker to resolve. An input without a value
  raises `DependencyError` naming the argument, the call it came from and its error.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Tuple

from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import parse_address
from faas.errors import error_from_status
from faas.values import decode_arg, loads

from .held import HeldResults, Outcome

__all__ = ["ResultSharing", "DependencyError", "Unavailable", "input_name", "call_inputs",
           "prepare"]

log = logging.getLogger("cloudburst.worker")


class DependencyError(Exception):
    """Internal: an argument's producing call has no result; the call fails with
    DEPENDENCY_FAILED before its function runs."""


class Unavailable:
    """A fetched input without a value: the producing call's status and why."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


def input_name(position: Any, ref: pb.CallRef) -> str:
    """The name of a `CallRef` input: its position (int) or keyword (str), and its call."""
    where = f"argument {position}" if isinstance(position, int) else f"keyword argument {position!r}"
    return f"{where} (the result of {ref.what or 'call ' + ref.call_id})"


def call_inputs(arglist: pb.ArgumentList) -> Dict[str, pb.CallRef]:
    """Input name -> `CallRef`, for every argument of `arglist` that is another call's result."""
    out: Dict[str, pb.CallRef] = {}
    for i, a in enumerate(arglist.args):
        if a.WhichOneof("kind") == "call":
            out[input_name(i, a.call)] = a.call
    for k in sorted(arglist.kwargs) if arglist.kwargs else ():
        a = arglist.kwargs[k]
        if a.WhichOneof("kind") == "call":
            out[input_name(k, a.call)] = a.call
    return out


def _value(position: Any, arg: Any, inputs: Dict[str, Any], what: str) -> Any:
    if isinstance(arg, bytes):               # an upstream function's result
        return loads(arg, objects=True)
    if arg.WhichOneof("kind") != "call":
        return decode_arg(arg)
    name = input_name(position, arg.call)
    got = inputs.get(name)
    if isinstance(got, Unavailable) or got is None:
        status, message = (got.status, got.message) if got is not None else \
            (pb.DEPENDENCY_FAILED, "it never arrived")
        why = message if status == pb.DEPENDENCY_FAILED else \
            f"that call failed with {type(error_from_status(status, message)).__name__}: {message}"
        raise DependencyError(f"{what}: its {name} has no value (call {arg.call.call_id}): {why}")
    return loads(got, objects=True)


def prepare(ready: Any, what: str) -> Tuple[List[Any], Dict[str, Any]]:
    """The invocation's `(args, kwargs)`; see the module contract."""
    args = [_value(i, a, ready.inputs, what) for i, a in enumerate(ready.args)]
    given = ready.schedule.args.kwargs if ready.kwargs is None else ready.kwargs
    kwargs = {k: _value(k, a, ready.inputs, what) for k, a in given.items()} if given else {}
    return args, kwargs


class ResultSharing:
    """The holder's and the fetcher's side; mixed into the worker (module contract). Uses the
    worker's `address`, `credentials`, `_push`, `_local`, `pending` and `held`."""

    held: HeldResults
    _waiting_on: Dict[str, List[pb.Schedule]]   # producer call -> schedules fetching it

    def _request_inputs(self, s: pb.Schedule, only: str = "", holder: str = "") -> None:
        """Ask the holders for the inputs the invocation of `s` still misses (`only`: those
        from that call, at `holder`, its new holder)."""
        refs = call_inputs(s.args)
        if not refs:
            return
        missing = set(self.pending.missing(s.call_id, s.function))
        for name, ref in refs.items():
            if name not in missing or (only and ref.call_id != only):
                continue
            if holder:
                ref = pb.CallRef(call_id=ref.call_id, what=ref.what, holder=holder)
            if ref.holder:                     # a later `moved` redirects it
                self._waiting_on.setdefault(ref.call_id, []).append(s)
            request = pb.ResultRequest(call_id=ref.call_id, reply_address=self.address,
                                       for_call=s.call_id, function=s.function, source=name,
                                       timeout=s.timeout)
            if not ref.holder:
                self._answer_fetch(request, Outcome(pb.DEPENDENCY_FAILED, message=(
                    "no worker is known to hold it (the scheduler did not name one)")))
            elif ref.holder == self.address:
                self._on_fetch(request)
            else:
                self._push.send(ref.holder, "fetch", request)

    def _on_fetch(self, request: pb.ResultRequest) -> None:
        now = time.monotonic()
        outcome = self.held.ask(request.call_id, request, now + max(0.0, request.timeout), now)
        if outcome is not None:
            self._answer_fetch(request, outcome)

    def _keep_outcome(self, call_id: str, outcome: Outcome) -> None:
        # under the caller's id (scheduler/retries.py names attempts `<caller>#r<n>`)
        call_id = call_id.split("#", 1)[0]
        for request in self.held.keep(call_id, outcome, time.monotonic()):
            self._answer_fetch(request, outcome)

    def _on_moved(self, ref: pb.CallRef) -> None:
        """The producer `ref.call_id` ran again: fetch its result from `ref.holder`."""
        for s in self._waiting_on.pop(ref.call_id, []):
            self._request_inputs(s, only=ref.call_id, holder=ref.holder)

    def _expire_held(self, now: float) -> None:
        for request, outcome in self.held.expire(now):
            self._answer_fetch(request, outcome)
        for call_id, schedules in list(self._waiting_on.items()):   # the fetches that ended
            schedules[:] = [s for s in schedules if self.pending.missing(s.call_id, s.function)]
            if not schedules:
                del self._waiting_on[call_id]

    def _answer_fetch(self, request: pb.ResultRequest, outcome: Outcome) -> None:
        trigger = pb.Trigger(call_id=request.for_call, source=request.source,
                             target=request.function, value=outcome.value,
                             status=outcome.status, message=outcome.message)
        if request.reply_address == self.address:
            self._local.append((self._on_trigger, trigger))
            return
        if not self._is_worker_address(request.reply_address):
            log.warning("did not answer a fetch of call %s: its reply address %r does not carry "
                        "the function key (not a worker's)", request.call_id,
                        request.reply_address[:120])
            return
        self._push.send(request.reply_address, "trigger", trigger)

    def _is_worker_address(self, address: str) -> bool:
        """With authentication, only an address carrying the function key is a worker's (only
        a process holding the function secret completes a handshake with that key)."""
        if self.credentials is None:
            return True
        try:
            return parse_address(address)[1] == self.credentials.keypair.public
        except ValueError:
            return False
