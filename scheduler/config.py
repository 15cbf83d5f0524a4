"""Configuration of one scheduler process (passed in; no globals, no fixed ports)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Optional

from runtime.sockets import DEFAULT_MAX_FRAME_BYTES

from .dag import DEFAULT_MAX_DAG_FUNCTIONS

__all__ = ["SchedulerConfig"]


@dataclass
class SchedulerConfig:
    """kvs_address: Anna routing address. ip: where to bind (free ports).

    heartbeat_timeout: seconds without a worker's own heartbeat (when no node vouches for
        it), or without its node's vouching, before the worker is dropped.
    unresponsive_timeout: seconds without a worker's own heartbeat before it is dropped even
        though its node vouches for its process (a worker holding the interpreter in a long
        C call is alive; one silent this long is not). Its node kills such a worker earlier.
    call_timeout: default deadline (s) of a call whose caller gave none.
    busy_outstanding / busy_utilization: the policy's back-off thresholds.
    worker_slots: how many unfinished calls of this scheduler one worker may hold: the one it
        runs and the ones waiting behind it there. A worker with fewer is *free* and takes
        the next waiting call. 2 (default) keeps the next call at the worker, so a worker
        that finishes a call starts the next at once instead of after a `done` round trip
        (benchmarks/README.md measures very short calls); 1 leaves
        every waiting call at the scheduler, where any worker can take it. A worker whose
        calls are so short that this many would leave it idle for a `done` round trip may
        hold more, up to `max_worker_slots`, as many as run in `queued_work` seconds
        (`scheduler/window.py`).
    queue_calls: a call that finds no free worker waits in this scheduler's queue and is
        placed when a worker is free, on any node, a node added meanwhile too
        (`scheduler/dispatch.py`). False: the previous behaviour, kept for comparisons: every
        call is placed at once, on the least loaded worker, and waits in that worker's queue.
    max_queued_calls: the most calls that wait in the queue; one more is refused with
        NO_RESOURCES naming this limit.
    seed: seed of the tie-break rng (None: random).
    colocate_chains: let functions of a call that never run at the same time (a chain) share
        a worker, preferring the worker of a direct neighbour (saves a hop); False spreads
        every function of a call over different workers when it can.
    ipc_dir: when set, the request socket is a Unix socket in this directory (single host).
    max_causal_retries: aborted attempts of a causal call (OPT, HB, unknown read sets) that are
        retried before the call fails with ABORTED.
    max_retries: how many more times a call runs after its worker or node died, when neither
        the call nor its functions say (`scheduler/retries.py`; Ray's default for tasks).
    gc_period: seconds between dependency-metadata GC rounds over every live node cache
        (`scheduler/gc.py`, dissertation 4.2.3); 0 turns them off.
    port: the TCP port clients connect to (0: a free port, reported when ready).
    max_dag_functions: the most functions a DAG may have; a larger one is refused at
        registration with INVALID_DAG naming the limit (`scheduler/dag.py`).
    max_frame_bytes: the largest frame the scheduler's sockets accept, from the handshake on;
        ZeroMQ disconnects a peer that sends a larger one (`runtime.sockets.bind_pull`). At
        most (and by default) 16 MiB, `runtime.framing.MAX_FRAME_BYTES`: larger messages
        travel as several frames. A larger setting raises ValueError.
    bind_address: when set, the request socket binds exactly this address (`tcp://ip:port`
        or `ipc:///path`) instead of `port`/`ipc_dir`: a supervisor restarting a scheduler
        passes the address it had, so clients and nodes reach it again without being told.
    metrics_port: when set, `GET /metrics` on this port (0: a free one) gives the scheduler's
        calls, errors, latency histograms and workers in the Prometheus text format.
    stop_grace: on SIGTERM, seconds to keep serving the calls already accepted while every
        new call is refused with SCHEDULER_STOPPING, which makes its client send it to
        another scheduler (scheduler/stopping.py); 0 (default) stops at once. Rolling
        upgrades with several schedulers set it below the pod's grace period.
    key_dir: the cluster's key directory (`cloudburst keys`): the scheduler authenticates
        every socket with the cluster's key pair (identity "cluster"), admits the clients
        whose public keys are in `key_dir/authorized/` on its request socket only, and takes
        from them only the kinds clients send (`scheduler.admission.CLIENT_KINDS`). None: plain
        sockets, anyone who can reach them is trusted. The process reads the keys itself: no
        key is ever on a command line.
    """

    kvs_address: str
    ip: str = "127.0.0.1"
    heartbeat_timeout: float = 1.5
    unresponsive_timeout: float = 960.0
    call_timeout: float = 60.0
    busy_outstanding: int = 1
    busy_utilization: float = 0.9
    worker_slots: int = 2
    max_worker_slots: int = 16
    queued_work: float = 0.005
    queue_calls: bool = True
    max_queued_calls: int = 10000
    seed: Optional[int] = None
    colocate_chains: bool = True
    log_level: str = "warning"
    parent_pid: Optional[int] = None
    ipc_dir: Optional[str] = None       # bind the request socket as a Unix socket here (one host)
    max_causal_retries: int = 10
    max_retries: int = 3                # runs again after a worker or node died (at least once)
    gc_period: float = 5.0
    port: int = 0                       # the request socket's TCP port; 0 picks a free one
    metrics_port: Optional[int] = None  # serve Prometheus metrics over HTTP here (None: off)
    bind_address: Optional[str] = None  # bind the request socket exactly here (restarts)
    max_dag_functions: int = DEFAULT_MAX_DAG_FUNCTIONS
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    key_dir: Optional[str] = None       # authenticate with the cluster's keys here (None: plain)
    # SIGTERM: refuse new calls (their clients send them to another scheduler) and exit once
    # the calls accepted here are over, at most this many seconds later (0: stop at once)
    stop_grace: float = 0.0

    def __post_init__(self) -> None:
        if self.max_worker_slots < self.worker_slots or self.queued_work < 0:
            raise ValueError(f"SchedulerConfig: max_worker_slots must be >= worker_slots and "
                             f"queued_work >= 0, not {self.max_worker_slots!r} and "
                             f"{self.queued_work!r}")
        if self.stop_grace < 0:
            raise ValueError(f"SchedulerConfig.stop_grace must be >= 0, not {self.stop_grace!r}")
        if self.worker_slots < 1 or self.max_queued_calls < 0:
            raise ValueError(f"SchedulerConfig: worker_slots must be >= 1 and "
                             f"max_queued_calls >= 0, not {self.worker_slots!r} and "
                             f"{self.max_queued_calls!r}")
        if not 1 <= self.max_frame_bytes <= DEFAULT_MAX_FRAME_BYTES:
            raise ValueError(f"SchedulerConfig.max_frame_bytes must be in [1, "
                             f"{DEFAULT_MAX_FRAME_BYTES}] (messages larger than a frame travel "
                             f"as several frames), not {self.max_frame_bytes!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "SchedulerConfig":
        return cls(**json.loads(text))
