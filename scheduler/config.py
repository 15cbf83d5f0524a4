"""Configuration of one scheduler process (passed in; no globals, no fixed ports).

`SchedulerConfig` is the scheduler role's configuration object (`runtime.config`): `python -m
scheduler --config PATH|JSON` reads it, every field a flag that overrides it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, Optional

from runtime.config import from_dict, knob, to_dict
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
        (`scheduler/window.py`). 64 (default): with 16, a client's burst of no-op calls
        leased 16 slots and sent batches of at most 8, and both sides spent ~9 % more CPU
        per call on the messages (`benchmarks/hotpath_cpu.py --mode burst`); what waits at
        a worker is still bounded in time by `queued_work`.
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
    hb_snapshot: when an HB call takes its snapshot round: "adaptive" (default: per DAG, at
        the start while its OPT attempts aborted often lately, otherwise only after OPT
        aborts; `scheduler/hb_policy.py`), "always" (at the start, as the protocol is
        written) or "on_abort" (only after OPT aborted). Consistency is the same in all three.
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
    warmup: seconds a scheduler that has not heard any executor worker since it started holds
        the calls it gets (placing them once a worker is heard) before answering
        NO_RESOURCES: long enough for the executors to find it (a scheduler pod made again
        at a new address is found once its name resolves there, and each connection attempt
        to its old address is given up after a second). The warm-up ends when the first
        worker is heard or when it runs out; only then does `--ready-file` get written, so a
        Kubernetes rolling update does not count a scheduler ready before its executors
        found it.
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
    worker_leases / worker_lease_ttl: whether clients that ask get worker leases (the direct
        call path: `scheduler/worker_leases.py`), and how long one lasts unless renewed.
    """

    ROLE: ClassVar[str] = "scheduler"

    kvs_address: str = knob(help="the Anna routing address(es), comma-separated "
                                 "(tcp://host:port, with #k=KEY when authenticated)")
    ip: str = knob("127.0.0.1", help="the address the scheduler binds and gives to peers")
    heartbeat_timeout: float = knob(1.5, help="seconds without a heartbeat (the worker's, or "
                                              "its node's vouching) before a worker is dropped")
    unresponsive_timeout: float = knob(960.0, help="seconds without a worker's own heartbeat "
                                                   "before it is dropped though its node "
                                                   "vouches for it")
    call_timeout: float = knob(60.0, help="default deadline in seconds of a call whose caller "
                                          "gave none")
    busy_outstanding: int = knob(1, help="the policy's back-off threshold: outstanding calls")
    busy_utilization: float = knob(0.9, help="the policy's back-off threshold: utilisation")
    worker_slots: int = knob(2, help="unfinished calls of this scheduler one worker may hold")
    max_worker_slots: int = knob(64, help="the most a worker with very short calls may hold")
    queued_work: float = knob(0.005, help="seconds of queued work a worker may hold beyond "
                                          "worker_slots (scheduler/window.py)")
    queue_calls: bool = knob(True, help="queue a call that finds no free worker at the "
                                        "scheduler (off: place it on the least loaded worker)")
    max_queued_calls: int = knob(10000, help="the most calls waiting in the queue")
    seed: Optional[int] = knob(None, help="seed of the tie-break random generator (default: "
                                          "random)")
    colocate_chains: bool = knob(True, help="let functions of a chain share a worker")
    log_level: str = knob("warning", help="debug, info, warning or error")
    parent_pid: Optional[int] = knob(None, help="stop when this process is gone")
    ipc_dir: Optional[str] = knob(None, help="bind the request socket as a Unix socket in this "
                                             "directory (one host)")
    max_causal_retries: int = knob(10, help="aborted attempts of a causal call retried before "
                                            "it fails with ABORTED")
    hb_snapshot: str = knob("adaptive", help="when an HB call takes its snapshot round: "
                                             "adaptive (per DAG, while OPT aborts often), "
                                             "always, or on_abort")
    max_retries: int = knob(3, help="runs again after a worker or node died, when the call "
                                    "does not say")
    gc_period: float = knob(5.0, help="seconds between dependency-metadata GC rounds (0: off)")
    port: int = knob(0, help="the request socket's TCP port (0: a free one)")
    metrics_port: Optional[int] = knob(None, help="serve Prometheus metrics over HTTP on this "
                                                  "port (0: a free one; default: off)")
    bind_address: Optional[str] = knob(None, help="bind the request socket exactly here "
                                                  "(tcp://ip:port or ipc:///path; restarts)")
    max_dag_functions: int = knob(DEFAULT_MAX_DAG_FUNCTIONS,
                                  help="the most functions a registered DAG may have")
    max_frame_bytes: int = knob(DEFAULT_MAX_FRAME_BYTES, help="the largest frame the "
                                "scheduler's sockets accept")
    key_dir: Optional[str] = knob(None, help="the cluster's key directory (`cloudburst keys`); "
                                             "default: plain sockets")
    worker_leases: bool = knob(True, help="grant clients worker leases (the direct call path)")
    worker_lease_ttl: float = knob(2.0, help="seconds a worker lease lasts unless renewed")
    warmup: float = knob(5.0, help="seconds a scheduler that has heard no executor worker yet "
                                   "holds the calls it gets before NO_RESOURCES")
    stop_grace: float = knob(0.0, help="on SIGTERM, seconds to keep serving the calls already "
                                       "accepted while new calls are refused (their clients "
                                       "send them to another scheduler; scheduler/stopping.py)"
                                       "; 0: stop at once")

    def __post_init__(self) -> None:
        if self.worker_slots < 1:
            raise ValueError(f"SchedulerConfig.worker_slots must be >= 1, not "
                             f"{self.worker_slots!r}")
        if self.max_worker_slots < self.worker_slots:
            raise ValueError(f"SchedulerConfig.max_worker_slots must be >= worker_slots "
                             f"({self.worker_slots}), not {self.max_worker_slots!r}")
        if self.queued_work < 0:
            raise ValueError(f"SchedulerConfig.queued_work must be >= 0, not "
                             f"{self.queued_work!r}")
        if self.warmup < 0:
            raise ValueError(f"SchedulerConfig.warmup must be >= 0, not {self.warmup!r}")
        if self.stop_grace < 0:
            raise ValueError(f"SchedulerConfig.stop_grace must be >= 0, not {self.stop_grace!r}")
        if self.max_queued_calls < 0:
            raise ValueError(f"SchedulerConfig.max_queued_calls must be >= 0, not "
                             f"{self.max_queued_calls!r}")
        if not 1 <= self.max_frame_bytes <= DEFAULT_MAX_FRAME_BYTES:
            raise ValueError(f"SchedulerConfig.max_frame_bytes must be in [1, "
                             f"{DEFAULT_MAX_FRAME_BYTES}] (messages larger than a frame travel "
                             f"as several frames), not {self.max_frame_bytes!r}")

    def to_json(self) -> str:
        """This configuration as the JSON `python -m scheduler --config` reads."""
        return json.dumps(to_dict(self))

    @classmethod
    def from_json(cls, text: str) -> "SchedulerConfig":
        """Inverse of `to_json()`; a bad field raises `runtime.config.ConfigError`."""
        return from_dict(cls, json.loads(text))
