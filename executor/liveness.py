"""How an executor worker shows it is alive: its heartbeat thread, and dying with its node.

Contract:
- `heartbeat_loop(beat)` runs on the worker's heartbeat thread until `beat.stopping` is set:
  every `heartbeat_period` it sends a `WorkerStatus` (id, node, address, utilization over
  the last period, queue length, whether a function runs now, node cache and control
  addresses, restarts) to every
  scheduler and to its own node cache (the node kills a worker that stays silent for its
  `unresponsive_timeout`), and it reads the control socket (cancels) in between.
  A function that has run `LONG_RUN` seconds is told at once, once, by a status whose
  utilization is that since the function began (1.0): every scheduler then backs off from
  this worker (`scheduler/policy.py`) within tens of milliseconds, not a period later. Each
  scheduler counts only the calls it placed, so without this a scheduler would place a
  short call behind another scheduler's long one (or a client's long direct call) until
  the next period's status. If that function ends before the period's status, and none
  runs, a status says so (utilization 0, that since it ended), so the worker does not look
  busy for the rest of the period. `next_beat(now, last, period, since, told, told_busy)`
  (pure) decides which status goes when, how long to wait before looking again, and
  whether to wait with the `Doorbell` armed: a worker idle since its last status waits the
  period unless a function's start rings it (at most once per `LOOK_EVERY`); a function's
  end is not signalled, so while a told one runs the thread looks every `LOOK_EVERY`. Its pushes
  use the worker's credentials (CURVE clients when the cluster authenticates). While the
  main thread holds the interpreter in one long C call this thread cannot run; the worker's
  node vouches for its process meanwhile (`executor/node.py`, `scheduler/membership.py`).
  `beat` is a `Heartbeat`: all this thread may touch of its worker, given by the worker
  (identity and addresses, the ZeroMQ context and credentials, its `BusyClock`, its
  `RunReports`, how many calls wait, the control socket and what reads it, the stop event,
  the totals of direct calls finished and their run time, sent as the differences since
  the last heartbeat),
  so the thread reads no member of `Worker`.
- `RunningCalls` is the node's pure record of what its workers run (no clocks: `now` is
  passed in): `started(worker, call_id, deadline, run)` and `ended(worker, call_id, run)`
  from the worker's own messages at a function's start and end (`run`: the worker's count
  of functions started; a function whose limit is far away has its end reported instead
  by the heartbeat thread's next status, `WorkerStatus.ended_run`, which ends that run
  only, never a later function of the same call), `heard(worker, now)` for every
  message of the worker. `overran(now, slack)` returns, once each, the (worker, call id) of
  every function still running `slack` seconds past its deadline whose worker has not been
  heard from since the deadline: it holds the interpreter in C code, where its time-limit
  signal cannot stop it (a worker that is heard from runs Python, so the signal works).
- `RunReports` is the worker's pure side of that record: `start(call_id, deadline)` returns
  the `WorkerStatus` to tell the node a function starts, or None when the node already
  holds this call's record with the same deadline (within `SAME_DEADLINE`: a chain's next
  function on this worker, whose deadline is the call's); `end(call_id, deadline, now,
  follows)` returns the end to tell at once when the deadline is within
  `END_REPORT_MARGIN`, else None: the record stays while a function of the call that runs
  here next `follows`, and otherwise the end goes with the heartbeat thread's next status
  (`ended_run`). So a warm chain on one worker costs its node one message, not two per
  function; the node may learn an end up to a heartbeat period late, which only matters for
  a deadline that is near, and those are told at once.
- `die_with_parent(parent_pid)` asks Linux to SIGKILL this process when the process that
  started it (its executor node) dies, and exits now if that already happened: the workers
  of a node that died cannot reach their node cache, and its replacement starts new ones.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.process import process_start
from runtime.sockets import PushCache

from .busy import BusyClock

__all__ = ["Heartbeat", "heartbeat_loop", "die_with_parent", "RunningCalls", "RunReports",
           "continues", "next_beat", "Doorbell", "LONG_RUN", "LOOK_EVERY"]

log = logging.getLogger("cloudburst.worker")
_PR_SET_PDEATHSIG = 1
LONG_RUN = 0.02      # seconds a function runs before every scheduler is told its worker is busy
LOOK_EVERY = 0.02    # seconds between the heartbeat thread's looks for such a function


def next_beat(now: float, last: float, period: float, since: Optional[float],
              told: Optional[float], told_busy: bool,
              rang: float) -> Tuple[Optional[str], float, bool]:
    """(which status to send now, or None; seconds until the next look; whether to wait with
    the doorbell armed). `last`: when the last status was sent; `since`: when the function
    running now began (None: none); `told`: the `since` of the last function told early;
    `told_busy`: the last status said that function runs; `rang`: when the doorbell last
    woke this thread (module contract). A status is "period" (the regular one), "long" (a
    function has run `LONG_RUN`: busy since it began) or "idle" (that function ended and
    none runs: idle since)."""
    if now - last >= period:
        return "period", period, False
    wait = period - (now - last)
    if since is None:
        if told_busy:
            return "idle", wait, False
        if now - rang >= LOOK_EVERY:             # idle: a function's start rings
            return None, wait, True
        return None, min(wait, rang + LOOK_EVERY - now), False   # at most so often
    if since == told:                            # told: look again for its end
        return None, min(wait, LOOK_EVERY), False
    if now - since >= LONG_RUN:
        return "long", wait, False
    return None, max(0.0, min(wait, since + LONG_RUN - now)), False


class Doorbell:
    """How a worker's main thread wakes its heartbeat thread when a function starts: only
    when the thread armed it (it waits idle), so a run of short calls rings at most once
    per `LOOK_EVERY` and an idle worker's thread sleeps the whole period. An eventfd."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.armed = False

    def fileno(self) -> int:
        return self._fd

    def ring(self) -> None:
        if self.armed:
            self.armed = False
            try:
                os.eventfd_write(self._fd, 1)
            except OSError:
                pass

    def clear(self) -> None:
        try:
            os.eventfd_read(self._fd)
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        os.close(self._fd)


class RunningCalls:
    """See the module contract."""

    def __init__(self) -> None:
        self._running: Dict[str, Tuple[str, float, int]] = {}  # worker -> (call, deadline, run)
        self._heard: Dict[str, float] = {}
        self._reported: Dict[str, str] = {}                 # worker -> call id reported

    def started(self, worker: str, call_id: str, deadline: float, run: int = 0) -> None:
        self._running[worker] = (call_id, deadline, run)

    def ended(self, worker: str, call_id: str, run: int = 0) -> None:
        """The function of `call_id` (and of `run`, when given) ended on `worker`."""
        current = self._running.get(worker)
        if current is not None and current[0] == call_id and (not run or current[2] == run):
            del self._running[worker]

    def ended_run(self, worker: str, run: int) -> None:
        """Run number `run` ended on `worker` (its heartbeat said so); a later run stays."""
        current = self._running.get(worker)
        if current is not None and current[2] == run:
            del self._running[worker]

    def heard(self, worker: str, now: float) -> None:
        self._heard[worker] = now

    def forget(self, worker: str) -> None:
        """The worker's process is gone (it restarts with nothing running)."""
        self._running.pop(worker, None)
        self._heard.pop(worker, None)
        self._reported.pop(worker, None)

    def overran(self, now: float, slack: float) -> List[Tuple[str, str]]:
        out = []
        for worker, (call_id, deadline, _) in self._running.items():
            if now < deadline + slack or self._heard.get(worker, 0.0) >= deadline:
                continue
            if self._reported.get(worker) != call_id:
                self._reported[worker] = call_id
                out.append((worker, call_id))
        return out


# A function's end reaches the node with the worker's next heartbeat (no message of its own)
# when its deadline is further away than this; nearer, at once, so that a worker that then
# holds the interpreter in C code (unpickling a large argument) is not taken for one past its
# limit.
END_REPORT_MARGIN = 10.0
# a function of the same call whose deadline is this much later than the one the node holds
# reuses that record (the node may act up to this much early, within its slack of 2 periods)
SAME_DEADLINE = 0.05


def continues(told: Optional[Tuple[str, float, int]], call_id: str, deadline: float) -> bool:
    """Whether a function of `call_id` starting with `deadline` continues the run the node
    holds (`told`: its call, deadline and run; None: none), so nothing need be told: a
    chain's next function on this worker, whose deadline is the call's (`SAME_DEADLINE`)."""
    return told is not None and told[0] == call_id and 0.0 <= deadline - told[1] <= SAME_DEADLINE


class RunReports:
    """See the module contract (the worker's side; the heartbeat thread reads `ended_run`)."""

    def __init__(self) -> None:
        self.runs = 0                 # starts told to the node
        self.ended_run = 0            # the last run whose end the heartbeat thread tells
        self._told: Optional[Tuple[str, float, int]] = None   # the node's record: call, deadline, run

    def start(self, call_id: str, deadline: float) -> Optional[pb.WorkerStatus]:
        if continues(self._told, call_id, deadline):
            return None
        self.runs += 1
        self._told = (call_id, deadline, self.runs)
        return pb.WorkerStatus(running=1, call_id=call_id, deadline=deadline, run=self.runs)

    def end(self, call_id: str, deadline: float, now: float,
            follows: bool) -> Optional[pb.WorkerStatus]:
        told = self._told
        if told is None or told[0] != call_id:
            return None
        if deadline - now <= END_REPORT_MARGIN:
            self._told = None
            return pb.WorkerStatus(running=0, call_id=call_id, run=told[2])
        if not follows:
            self._told = None
            self.ended_run = told[2]
        return None


def die_with_parent(parent_pid: Optional[int]) -> None:
    """See the module contract; a no-op without a parent pid or off Linux."""
    if not parent_pid:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError) as e:
        log.warning("cannot ask to die with the parent process: %s", e)
    if os.getppid() != parent_pid:      # it died before the request took effect
        log.warning("parent process %d is gone; exiting", parent_pid)
        os._exit(1)


@dataclass(frozen=True)
class Heartbeat:
    """What the heartbeat thread reads of its worker; see the module contract."""

    worker_id: str
    node_id: str
    address: str                        # the worker's own PULL socket
    control_address: str                # where cancels reach it
    cache_address: str                  # its node cache (which also hears the heartbeats)
    scheduler_addresses: Sequence[str]
    period: float                       # seconds between two heartbeats
    context: zmq.Context
    credentials: Any                    # the worker's (CURVE clients), or None
    busy: BusyClock
    run_reports: "RunReports"
    queued: Callable[[], int]           # calls waiting on the worker now
    control: zmq.Socket                 # polled between heartbeats
    on_control: Callable[[], None]      # reads what arrived on `control`
    stopping: threading.Event
    direct_address: str = ""            # where clients' direct calls go ("": none)
    # totals of direct calls finished and the seconds they ran (reported as differences)
    direct_work: Callable[[], Tuple[int, float]] = lambda: (0, 0.0)
    doorbell: Optional["Doorbell"] = None   # rung by `busy` when a function starts
    call_link_address: str = ""         # where clients open call links ("": none)


def heartbeat_loop(beat: Heartbeat) -> None:
    """See the module contract."""
    push = PushCache(beat.context, auth=beat.credentials)
    targets = list(beat.scheduler_addresses) + [beat.cache_address]
    last_total, last_time = 0.0, time.monotonic()
    last_direct = (0, 0.0)
    told: Optional[float] = None
    told_busy = False
    kind: Optional[str] = "period"
    rang = float("-inf")
    bell = beat.doorbell
    poller = zmq.Poller()          # one, not one per look (`Socket.poll` makes a new one)
    poller.register(beat.control, zmq.POLLIN)
    if bell is not None:
        poller.register(bell.fileno(), zmq.POLLIN)
    try:
        while not beat.stopping.is_set():
            now = time.monotonic()
            since = beat.busy.since
            if kind is None:                      # between statuses: a long function?
                kind, wait, arm = next_beat(now, last_time, beat.period, since, told,
                                            told_busy, rang)
                if kind is None:
                    if arm and bell is not None:
                        bell.armed = True
                        if beat.busy.since is not None:     # it started meanwhile
                            bell.armed = False
                            continue
                    elif bell is None:            # nothing rings: look every LOOK_EVERY
                        wait = min(wait, LOOK_EVERY)
                    ready = dict(poller.poll(max(1, int(wait * 1000))))
                    if bell is not None:
                        bell.armed = False
                        if bell.fileno() in ready:
                            bell.clear()
                            rang = time.monotonic()
                    if beat.control not in ready:
                        continue
                    beat.on_control()            # then a status, as it always followed
                    kind = "period"
            total = beat.busy.total(now)
            if kind == "long":                    # busy all along since it began
                told, utilization = since, 1.0
            elif kind == "idle":                  # and idle since it ended
                utilization = 0.0
            else:
                utilization = min(1.0, (total - last_total) / max(1e-6, now - last_time))
            # it said a told function runs: its end is told too, when it comes
            told_busy = since is not None and since == told
            last_total, last_time, kind = total, now, None
            status = pb.WorkerStatus(worker_id=beat.worker_id, node_id=beat.node_id,
                                     address=beat.address, utilization=utilization,
                                     queued=beat.queued(),
                                     running=1 if beat.busy.running else 0,
                                     cache_address=beat.cache_address,
                                     control_address=beat.control_address,
                                     direct_address=beat.direct_address,
                                     call_link_address=beat.call_link_address,
                                     restarts=process_start() - 1,
                                     ended_run=beat.run_reports.ended_run)
            direct = beat.direct_work()
            if direct[0] > last_direct[0]:
                status.direct_calls = direct[0] - last_direct[0]
                status.direct_busy_seconds = max(0.0, direct[1] - last_direct[1])
                last_direct = direct
            for address in targets:
                push.send(address, "heartbeat", status)
    finally:
        push.close()
