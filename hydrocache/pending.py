"""Pending operations of the HydroCache core: operations that wait for I/O (pure, no clocks).

Contract: an operation is a generator. It runs until it needs something that is not there
yet, then yields a *wait*: an object with `deadline` (on the caller's clock), `soft` (at the
deadline the operation goes on instead of failing), `poll_at` (None, or when `poll(now)`
should be called: re-reads at intervals), `ready()`, `stage()` (what is awaited, for the
timeout message), `error` (raised into the operation once ready) and `close()` (forget the
wait). It ends by returning its answer `(response, frames)`, or by raising.

`Operations(answer, fail)` drives them, on one thread, with `now` given by the caller:
- `start(request, generator, now)` runs the operation at once; one that yields nothing is
  answered within this call (`answer(request, response, frames)`), one that raises is
  answered with `fail(request, error)`; otherwise it is kept, pending.
- `resume_ready()` resumes every pending operation whose wait is ready (call it after any
  input that may have made one ready); `tick(now)` also fails each operation whose wait is
  past its deadline by throwing `StageTimeout(wait.stage())` into it (a soft wait resumes
  instead) and polls the waits that are due. `next_wakeup()` is the earliest deadline or poll
  time (None when nothing is pending); `len()` the number pending.
- `wait(w)`: `yield from ops.wait(w)` inside an operation suspends it until `w` is ready
  (or, soft, past its deadline), always closes `w`, then raises `w.error` if set.
`RepliesWait` (answers to requests sent to other caches, by request id) and `PutWait` (one
write to Anna) are the waits the core uses besides `hydrocache.keeper.KeysWait`.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .actions import StageTimeout

__all__ = ["Operations", "RepliesWait", "PutWait"]


class RepliesWait:
    """Answers to CAUSAL_TEMP_GET requests sent to other caches; ready when all arrived or
    one failed. `registry` maps request ids to their wait (entries removed on close)."""

    soft = False
    poll_at = None
    error = None

    def __init__(self, registry: Dict[str, "RepliesWait"], deadline: float) -> None:
        self.registry = registry
        self.deadline = deadline
        self.asked: Dict[str, Tuple[str, List[str]]] = {}     # request id -> holder, keys
        self.answers: Dict[str, pb.CacheResponse] = {}
        self._stages: Dict[str, str] = {}                     # request id -> its own stage

    def expect(self, rid: str, holder: str, keys: List[str], stage: str = "") -> None:
        self.asked[rid] = (holder, keys)
        self.registry[rid] = self
        if stage:
            self._stages[rid] = stage

    def answer(self, response: pb.CacheResponse) -> None:
        self.registry.pop(response.request_id, None)
        if response.request_id in self.asked:
            self.answers[response.request_id] = response

    def ready(self) -> bool:
        return len(self.answers) == len(self.asked) or \
            any(r.status != pb.OK for r in self.answers.values())

    def stage(self) -> str:
        for rid, (holder, keys) in self.asked.items():
            if rid not in self.answers:
                return self._stages.get(rid) or f"fetching {keys[:5]} from the cache at {holder}"
        return "fetching versions from other caches"

    def close(self) -> None:
        for rid in self.asked:
            self.registry.pop(rid, None)


class Pause:
    """A soft wait that only passes time: it resumes its operation at `deadline` (e.g.
    between re-reads of a key whose replicas lag)."""

    soft = True
    poll_at = None
    error = None

    def __init__(self, deadline: float, what: str) -> None:
        self.deadline = deadline
        self.what = what

    def ready(self) -> bool:
        return False

    def stage(self) -> str:
        return self.what

    def close(self) -> None:
        pass


class PutWait:
    """One write of versions to Anna; `registry` maps tokens to their wait."""

    soft = False
    poll_at = None

    def __init__(self, registry: Dict[int, "PutWait"], token: int, keys: List[str],
                 deadline: float) -> None:
        self.registry = registry
        self.token = token
        self.keys = keys
        self.deadline = deadline
        self.done = False
        self.error: Optional[BaseException] = None
        registry[token] = self

    def finish(self, error: Optional[BaseException]) -> None:
        self.done, self.error = True, error

    def ready(self) -> bool:
        return self.done

    def stage(self) -> str:
        return f"writing the commit of {self.keys[:5]} to Anna"

    def close(self) -> None:
        self.registry.pop(self.token, None)


class _Op:
    __slots__ = ("id", "req", "gen", "wait")

    def __init__(self, op_id: int, req: Any, gen: Generator) -> None:
        self.id = op_id
        self.req = req
        self.gen = gen
        self.wait: Any = None


class Operations:
    """The pending operations of one core; see the module contract."""

    def __init__(self, answer: Callable[[Any, Any, List[Any]], None],
                 fail: Callable[[Any, BaseException], None]) -> None:
        self._answer = answer
        self._fail = fail
        self._ops: Dict[int, _Op] = {}
        self._ids = itertools.count(1)
        self.now = 0.0

    def __len__(self) -> int:
        return len(self._ops)

    def start(self, req: Any, gen: Generator, now: float) -> None:
        self.now = now
        self._run(_Op(next(self._ids), req, gen))

    def resume_ready(self) -> None:
        for _ in range(len(self._ops) + 1):
            ready = [op for op in self._ops.values() if op.wait.ready()]
            if not ready:
                return
            for op in ready:
                if self._ops.get(op.id) is op:
                    self._run(op)

    def tick(self, now: float) -> None:
        self.now = now
        for op in list(self._ops.values()):
            if self._ops.get(op.id) is not op:
                continue
            w = op.wait
            if w.ready():
                self._run(op)
            elif now > w.deadline:
                self._run(op, None if w.soft else StageTimeout(w.stage()))
            elif w.poll_at is not None and now >= w.poll_at:
                w.poll(now)
        self.resume_ready()

    def next_wakeup(self) -> Optional[float]:
        t: Optional[float] = None
        for op in self._ops.values():
            w = op.wait
            due = w.deadline if w.poll_at is None else min(w.deadline, w.poll_at)
            if t is None or due < t:
                t = due
        return t

    def wait(self, w: Any) -> Generator:
        try:
            while not w.ready():
                if w.soft and self.now > w.deadline:
                    break
                yield w
        finally:
            w.close()
        if w.error is not None:
            raise w.error

    def _run(self, op: _Op, error: Optional[BaseException] = None) -> None:
        """Resume `op` (throwing `error` into it) until it waits again or ends."""
        try:
            wait = op.gen.send(None) if error is None else op.gen.throw(error)
        except StopIteration as stop:
            self._ops.pop(op.id, None)
            response, frames = stop.value
            self._answer(op.req, response, frames)
            return
        except Exception as e:
            self._ops.pop(op.id, None)
            self._fail(op.req, e)
            return
        op.wait = wait
        self._ops[op.id] = op
