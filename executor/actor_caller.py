"""Actor method calls made from inside a function, on an executor worker.

Contract:
- `ActorCaller(worker_id, context, push, ip, ipc_dir, credentials)` is the worker's caller for
  actor handles (`runtime.actors`): the worker binds it (`during(scheduler, deadline)`)
  around every function it runs, so a handle passed to a function calls through it.
- `call_actor` sends the method call as a `call` to the scheduler that placed the running
  function (a worker's function key may send a scheduler a `call` only when it is an actor
  method call: `scheduler/admission.py`), marked with this worker's id so the scheduler
  refuses a call to an actor on this same worker (it would wait for itself: the worker runs
  one function at a time). It returns an `ActorFuture` at once.
- `ActorFuture.get(timeout)` waits for the result on a socket of the caller's own (bound
  on first use; it admits the cluster's key and the function key, and takes only `result`
  messages), at most `timeout` seconds and never past the running function's deadline;
  then `Timeout` naming the actor and method. The value is unpickled fully (it comes from
  a function that ran on the cluster); a failed call raises its typed error (`ActorDied`,
  `ExecutionError`, ...). Results nobody waits for are dropped; at most
  `MAX_WAITING` futures are open at once.
- `kill_actor` sends the kill and waits for it the same way.
- Used from the worker's main thread only (functions run there).
"""
from __future__ import annotations

import itertools
import logging
import time
import uuid
from typing import Any, Dict, Mapping, Optional, Sequence

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.actors import ActorHandle, bind, unbind
from runtime.auth import FUNCTION, Credentials
from faas.errors import CloudburstError, SchedulerUnavailable, Timeout, error_from_status
from runtime.framing import parse, recv_frame
from runtime.sockets import PushCache, bind_pull
from faas.values import dumps, encode_args, loads

__all__ = ["ActorCaller", "ActorFuture", "MAX_WAITING"]

log = logging.getLogger("cloudburst.worker.actors")
MAX_WAITING = 10000          # open futures of one worker; more is a ValueError at the call
DEFAULT_TIMEOUT = 30.0       # seconds, when the running function has no deadline


class ActorFuture:
    """The result of one actor method call made inside a function."""

    def __init__(self, caller: "ActorCaller", request_id: str, what: str,
                 timeout: float) -> None:
        self._caller = caller
        self.request_id = request_id
        self.what = what
        self._deadline = time.monotonic() + timeout
        self._answer: Optional[pb.CallResult] = None

    def done(self) -> bool:
        if self._answer is None:
            self._answer = self._caller._take(self.request_id, 0.0)
        return self._answer is not None

    def get(self, timeout: Optional[float] = None) -> Any:
        """The method's return value, or its typed error; `Timeout` past `timeout`."""
        if self._answer is None:
            left = self._deadline - time.monotonic()
            wait = left if timeout is None else min(float(timeout), left)
            self._answer = self._caller._take(self.request_id, max(0.0, wait))
            if self._answer is None:
                raise Timeout(f"the result of {self.what}", wait)
        a = self._answer
        if a.status != pb.OK:
            raise error_from_status(a.status, a.message, a.traceback, a.stage)
        return loads(a.value, objects=True)

    result = get

    def __repr__(self) -> str:
        return f"<ActorFuture {self.what}>"


class ActorCaller:
    """Sends a running function's actor calls and collects their results."""

    def __init__(self, worker_id: str, context: zmq.Context, push: PushCache, ip: str,
                 ipc_dir: Optional[str], credentials: Optional[Credentials]) -> None:
        self.worker_id = worker_id
        self._context = context
        self._push = push
        self._ip = ip
        self._ipc_dir = ipc_dir
        self._credentials = credentials
        self._pull: Optional[zmq.Socket] = None
        self.address = ""
        self._ids = itertools.count(1)
        self._prefix = f"{worker_id}-{uuid.uuid4().hex[:8]}"
        self._open: Dict[str, Optional[pb.CallResult]] = {}   # request id -> result
        self._scheduler = ""
        self._deadline = float("inf")

    def during(self, scheduler: str, deadline: float) -> "_During":
        """Handles in the block call through this caller, via `scheduler`, and wait at most
        until `deadline` (the running function's). (A plain context manager: it is entered
        once per function run.)"""
        self._scheduler, self._deadline = scheduler, deadline
        return _During(self)

    def _leave(self) -> None:
        self._scheduler, self._deadline = "", float("inf")
        self._open.clear()    # what the function did not wait for, nobody waits for

    def close(self) -> None:
        if self._pull is not None:
            self._pull.close(0)
            self._pull = None

    # ---- the caller protocol of runtime.actors ----
    def call_actor(self, handle: ActorHandle, method: str, args: Sequence[Any],
                   kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> ActorFuture:
        actor = pb.ActorCall(actor_id=handle.actor_id, op=pb.ACTOR_METHOD, method=method,
                             class_name=handle.class_name, caller_worker=self.worker_id,
                             kwargs=dumps(dict(kwargs)) if kwargs else b"")
        return self._send(handle, actor, encode_args(args), options,
                          f"method {method!r} of actor {handle.actor_id} ({handle.class_name})")

    def kill_actor(self, handle: ActorHandle, timeout: Optional[float] = None) -> None:
        actor = pb.ActorCall(actor_id=handle.actor_id, op=pb.ACTOR_KILL, method="kill",
                             class_name=handle.class_name, caller_worker=self.worker_id)
        self._send(handle, actor, pb.ArgumentList(), {"timeout": timeout},
                   f"the kill of actor {handle.actor_id} ({handle.class_name})").get()

    # ---- plumbing ----
    def _send(self, handle: ActorHandle, actor: pb.ActorCall, args: pb.ArgumentList,
              options: Mapping[str, Any], what: str) -> ActorFuture:
        if not self._scheduler:
            raise CloudburstError(f"{what}: no scheduler is known here (actor calls from a "
                                  f"function are sent while the function runs)")
        if len(self._open) >= MAX_WAITING:
            raise ValueError(f"{what}: {MAX_WAITING} actor calls of this function are still "
                             f"open; get() some of their results first")
        if self._pull is None:
            self._pull, self.address = bind_pull(self._context, self._ip, ipc_dir=self._ipc_dir,
                                                 auth=self._credentials, audience=FUNCTION)
        left = self._deadline - time.monotonic()
        timeout = options.get("timeout")
        wait = min(DEFAULT_TIMEOUT if timeout is None else float(timeout), left)
        rid = f"{self._prefix}-{next(self._ids)}"
        call = pb.Call(request_id=rid, response_address=self.address, timeout=max(0.0, wait),
                       function=f"{handle.class_name}.{actor.method}")
        call.actor.CopyFrom(actor)
        call.args[actor.method].CopyFrom(args)
        if not self._push.send(self._scheduler, "call", call):
            raise SchedulerUnavailable(f"{what}: the scheduler at {self._scheduler} did not "
                                       f"accept the call")
        self._open[rid] = None
        return ActorFuture(self, rid, what, max(0.0, wait))

    def _take(self, rid: str, timeout: float) -> Optional[pb.CallResult]:
        """Request `rid`'s result, reading the socket for at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self._open.get(rid)
            if answer is not None:
                del self._open[rid]
                return answer
            left = deadline - time.monotonic()
            if self._pull is None or not self._pull.poll(max(0, int(left * 1000))):
                return None
            try:
                kind, payload = parse(recv_frame(self._pull))
                if kind != "result":
                    raise ValueError(f"kind {kind!r} is not a result")
                result = pb.CallResult.FromString(payload)
            except Exception as e:        # malformed, or not for us: dropped
                log.warning("dropped a message on the actor-result socket: %s", e)
                continue
            if result.request_id in self._open:
                self._open[result.request_id] = result


class _During:
    """`ActorCaller.during`'s block: the caller bound to this context, then left."""

    __slots__ = ("_caller", "_token")

    def __init__(self, caller: ActorCaller) -> None:
        self._caller = caller
        self._token: Any = None

    def __enter__(self) -> None:
        self._token = bind(self._caller)

    def __exit__(self, *exc: Any) -> None:
        try:
            unbind(self._token)
        finally:
            self._caller._leave()
