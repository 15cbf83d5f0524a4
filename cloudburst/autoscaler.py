"""Executor autoscaling as a service: sample the schedulers, decide, carry the actions out.

Contract:
- `ExecutorAutoscalerService(policy, manager, link)` runs `step()` every `policy.config.tick`
  seconds on its own thread (`start()` / `stop()`), or when a caller calls `step()`.
  `manager` is a `pools.PoolManager` with the pool "executor" (`pools.EXECUTORS`): local
  processes (`cloudburst.executor_spawner.local_pool`) or pods (`k8s.pool.KubernetesPool`).
  One step: `manager.poll()` (nodes that came up, were removed or failed: logged), then
  `link.statuses()` (every scheduler's `status`), `build_sample` of them, `policy.decide`
  (`cloudburst/executor_policy.py`, pure), and each action carried out in order: `AddNodes`
  -> `manager.add_nodes`, `Drain` / `Undrain` -> `link.drain` (a `drain` message to every
  scheduler), `Remove` -> `manager.remove_node`, `Note` -> nothing. Every action is logged at INFO with its reason
  (a failed one at WARNING with why; a `Note` the same as the one before, numbers aside, at
  DEBUG) and kept in `history` (bounded) as an `Applied`.
- `build_sample(statuses)` (pure): one `ExecutorNodeStats` per executor node any scheduler
  lists. Workers and busy fraction: the largest any scheduler reports. `in_flight`: the
  functions the node says run now; `queued`: the rest of what is placed there, the larger of
  what the node reports queued and the calls the schedulers placed there and have not seen
  finish, less those running. `draining` only when **every** scheduler answered and every one
  says it places nothing new on the node; `backlog`: calls the schedulers hold for want of
  any worker.
- No call is lost by scale-in. A scheduler counts a call placed on a node as outstanding from
  the moment it sends the schedule until a worker reports it done (after its result went to
  the caller), and from the moment it has a node as draining it places nothing new there
  (only `Undrain`, which the policy never sends for a node it removes, undoes that). Each
  scheduler's `status` answer is one snapshot of both. So a sample in which every scheduler
  says "draining, 0 outstanding" proves that nothing was placed on the node that has not
  finished and that nothing will be: a call on the wire when the drain was sent still counts
  as outstanding at the scheduler that placed it. The policy removes a node only on such a
  sample; a scheduler that does not answer blocks every removal for that sample. The node
  itself runs every call that reaches it, draining or not. What is left: a scheduler that
  crashes loses its counts (its callers get `SchedulerUnavailable` anyway), and a node that
  is killed rather than removed fails its calls through the schedulers' failover
  (EXECUTION_ERROR naming the worker), as before.
- `SchedulerLink(addresses, auth)` holds one `Client` per scheduler (with the cluster's
  identity: `drain` is refused from client keys) and a push socket for `drain`. A drain's
  epoch is the wall clock in nanoseconds, so a newer request wins at every scheduler and
  node, across restarts of this process.
"""
from __future__ import annotations

import collections
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable, Deque, Dict, List, Optional, Sequence

import zmq

from hydro_proto import cloudburst_pb2 as pb
from runtime.auth import AuthConfig, Security, credentials_of
from faas.errors import CloudburstError
from k8s.errors import KubernetesError
from pools.errors import PoolError
from pools.manager import EXECUTORS, FAILED, PoolManager
from runtime.sockets import PushCache

from .autoscaler_config import ExecutorAutoscalerConfig, executor_policy_of
from .client import Client
from .executor_policy import (Action, AddNodes, Drain, ExecutorAutoscaler, ExecutorNodeStats,
                              ExecutorSample, Note, Remove, Undrain)
from .status import ClusterStatus

__all__ = ["ExecutorAutoscalerService", "SchedulerLink", "Applied", "build_sample", "main",
           "parse_args", "executor_policy_of"]

log = logging.getLogger("cloudburst.autoscale")


def build_sample(statuses: Sequence[Optional[ClusterStatus]]) -> ExecutorSample:
    """Every scheduler's view merged into one sample; None stands for a scheduler that did
    not answer (see the module contract)."""
    answered = [s for s in statuses if s is not None]
    complete = len(answered) == len(statuses) and bool(answered)
    views: Dict[str, list] = {}
    for status in answered:
        for n in status.nodes:
            views.setdefault(n.node_id, []).append(n)
    nodes = []
    for node_id in sorted(views):
        vs = views[node_id]
        running = max(v.running for v in vs)
        placed = sum(v.outstanding for v in vs)
        queued = max(max(v.queued for v in vs), placed - running, 0)
        draining = complete and len(vs) == len(answered) and all(v.draining for v in vs)
        nodes.append(ExecutorNodeStats(node_id, max(v.workers for v in vs),
                                       max(v.utilization for v in vs), running, queued,
                                       draining))
    return ExecutorSample(tuple(nodes), sum(s.backlog for s in answered))


class SchedulerLink:
    """Every scheduler's status, and drains sent to every scheduler (see the module contract).

    Args:
        addresses: every scheduler's address.
        auth: the cluster's identity (`LocalCluster.cluster_auth`); None for a plain cluster.
        timeout: seconds to wait for a scheduler's `status` answer.
        ip: the address the answer sockets bind; the schedulers must reach it (a pod's own
            address in Kubernetes).
    """

    def __init__(self, addresses: Sequence[str], auth: Optional[AuthConfig],
                 timeout: float = 2.0, ip: str = "127.0.0.1") -> None:
        self.addresses = list(addresses)
        self.ip = ip
        self.auth = auth
        self.timeout = timeout
        self._clients: Dict[str, Client] = {}
        self._context = zmq.Context()
        self._security = Security.start(self._context, auth)
        self._push = PushCache(self._context, auth=credentials_of(self._security))

    def statuses(self) -> List[Optional[ClusterStatus]]:
        """Each scheduler's status, None (logged) for one that did not answer in time."""
        out: List[Optional[ClusterStatus]] = []
        for address in self.addresses:
            try:
                client = self._clients.get(address)
                if client is None:
                    client = self._clients[address] = Client(
                        address, timeout=self.timeout, failover_timeout=self.timeout,
                        auth=self.auth, ip=self.ip)
                out.append(client.status())
            except CloudburstError as e:
                log.warning("scheduler %s did not answer status (%s); no node is removed "
                            "on this sample", address, e)
                stale = self._clients.pop(address, None)
                if stale is not None:
                    stale.close()
                out.append(None)
        return out

    def drain(self, node_id: str, draining: bool) -> int:
        """Tell every scheduler to stop (or resume) placing calls on `node_id`; its epoch."""
        epoch = time.time_ns()
        request = pb.DrainRequest(node_id=node_id, draining=draining, epoch=epoch)
        for address in self.addresses:
            self._push.send(address, "drain", request)
        return epoch

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        self._push.close()
        if self._security is not None:
            self._security.stop()
        self._context.term()


@dataclass(frozen=True)
class Applied:
    """One action the service carried out (or tried to): when, what, and how it went."""

    at: float                  # the service clock (monotonic seconds)
    action: Action
    ok: bool = True
    error: str = ""


class ExecutorAutoscalerService:
    """The autoscaler's loop; see the module contract.

    Args:
        policy: the pure decision core (`cloudburst.executor_policy.ExecutorAutoscaler`).
        manager: adds and removes executor nodes (a `PoolManager` with the pool "executor").
        link: the schedulers (`SchedulerLink`).
        clock: monotonic seconds (tests may pass another).
        max_history: how many `Applied` records are kept.
    """

    def __init__(self, policy: ExecutorAutoscaler, manager: PoolManager,
                 link: SchedulerLink, clock: Callable[[], float] = time.monotonic,
                 max_history: int = 10000) -> None:
        self.policy = policy
        self.manager = manager
        self.link = link
        self.clock = clock
        self.history: Deque[Applied] = collections.deque(maxlen=max_history)
        self.last_sample: Optional[ExecutorSample] = None
        self._last_note = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "ExecutorAutoscalerService":
        """Run `step()` every tick on a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="executor-autoscaler",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop (idempotent), and the manager's waiting."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        self.manager.close()
        self.link.close()

    def _run(self) -> None:
        tick = self.policy.config.tick
        while not self._stop.wait(tick):
            try:
                self.step()
            except Exception:
                log.exception("an executor autoscaling step failed; the next tick retries")

    def step(self, now: Optional[float] = None) -> List[Action]:
        """One sample, decision and its actions (see the module contract)."""
        with self._lock:
            now = self.clock() if now is None else now
            for event in self.manager.poll(now):
                (log.warning if event.kind == FAILED else log.info)("%s", event.detail)
            sample = build_sample(self.link.statuses())
            self.last_sample = sample
            actions = self.policy.decide(sample, now)
            for action in actions:
                self.history.append(self._apply(action, now))
            return actions

    def _apply(self, action: Action, now: float) -> Applied:
        try:
            if isinstance(action, AddNodes):
                ids = self.manager.add_nodes(action.pool, action.count)
                log.info("%s -> %s", action.reason, ", ".join(ids))
            elif isinstance(action, (Drain, Undrain)):
                epoch = self.link.drain(action.node_id, isinstance(action, Drain))
                log.info("%s (epoch %d)", action.reason, epoch)
            elif isinstance(action, Remove):
                self.manager.remove_node(EXECUTORS, action.node_id)
                log.info("%s", action.reason)
            elif isinstance(action, Note):
                # the same note every tick (e.g. scale-in held in panic) is logged once
                shape = re.sub(r"[0-9.]+", "#", action.reason)
                if shape != self._last_note:
                    log.info("held: %s", action.reason)
                else:
                    log.debug("held: %s", action.reason)
                self._last_note = shape
            return Applied(now, action)
        except (PoolError, KubernetesError, OSError, ValueError, RuntimeError) as e:
            log.warning("could not carry out %s: %s", action, e)
            return Applied(now, action, ok=False, error=f"{type(e).__name__}: {e}")

    def node_count(self) -> int:
        """Executor nodes up and not being removed, per the manager."""
        return len(self.manager.nodes(EXECUTORS))


# ---- the process: `python -m cloudburst.autoscaler` (executor autoscaling on Kubernetes) ------

def parse_args(argv: Optional[Sequence[str]] = None) -> ExecutorAutoscalerConfig:
    """The configuration of `python -m cloudburst.autoscaler` (`--config PATH|JSON`, every
    ExecutorAutoscalerConfig field a flag over it; see `--help`); a bad field exits 2."""
    from runtime.config import parse_config, role_parser
    p = role_parser(ExecutorAutoscalerConfig, "python -m cloudburst.autoscaler",
                    "Executor autoscaling on Kubernetes: samples every scheduler's status, "
                    "decides with the executor policy, drains executor nodes through the "
                    "schedulers and adds or removes them as pods of the executor Deployment "
                    "(KubernetesPool). Runs in the cloudburst-autoscaler pod, or "
                    "outside the cluster with --kubeconfig.")
    config, _ = parse_config(p, ExecutorAutoscalerConfig, argv)
    return config


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m cloudburst.autoscaler`: the executor autoscaler of a cluster on Kubernetes."""
    import signal
    import sys
    from k8s.api import connect
    from k8s.pool import KubernetesPool
    from runtime.limits import raise_descriptor_limit
    from runtime.logs import configure_logging
    config = parse_args(argv)
    configure_logging(config.log_level, "autoscaler", family="cloudburst")
    raise_descriptor_limit()
    policy = config.policy()            # checked with the configuration
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        manager = KubernetesPool(
            connect(config.kubeconfig), config.kubernetes_namespace,
            {EXECUTORS: config.executor_deployment}, startup_timeout=config.pod_startup_timeout,
            leave_timeout=config.pod_leave_timeout, request_timeout=config.request_timeout)
    except (KubernetesError, PoolError) as e:
        print(f"cloudburst.autoscaler: cannot manage the executor nodes: {e}", file=sys.stderr)
        return 1
    auth = AuthConfig(config.key_dir) if config.key_dir else None
    link = SchedulerLink(config.schedulers, auth, timeout=config.status_timeout, ip=config.ip)
    service = ExecutorAutoscalerService(ExecutorAutoscaler(policy), manager, link).start()
    log.info("executor autoscaling on: deployment %s/%s, %d..%s node(s), %d scheduler(s)",
             config.kubernetes_namespace, config.executor_deployment, policy.min_nodes,
             policy.max_nodes if policy.max_nodes is not None else "any",
             len(config.schedulers))
    try:
        while not stop.wait(1.0):
            pass
    finally:
        service.stop()        # closes the manager (its watch) and the link
    return 0


if __name__ == "__main__":
    import sys as _sys
    _sys.exit(main())
