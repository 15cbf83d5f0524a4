"""The worker host: runs an executor node's worker processes where the node's keys are not.

`python -m executor.workerhost --config PATH|JSON [--FIELD VALUE ...] [--ready-file PATH]`
(`WorkerHostConfig`; every field is also a flag that overrides it: `runtime.config`).

Contract:
- On Kubernetes the executor pod has two containers: the node (uid 10001, the cluster's key
  directory at /keys) and the worker host (another uid, only the function role's keys,
  `config.key_dir`). Function code runs in the host's container, so no file, mount, process
  or environment of the node is within its reach (docs/SECURITY.md, "Threat model").
- The host binds a ROUTER socket on `config.ip`:`config.port` (loopback by default; the
  pod's containers share it). With `config.key_dir` it is a CURVE server with the function
  key pair that admits only the cluster key (`runtime.auth`, audience "cluster"): a worker
  (function key) or anyone else is refused at the handshake, so only the node, which holds
  the cluster secret, can ask it for anything. `key_dir` must hold `function.key`,
  `function.key_secret` and `cluster.key`; the host refuses to start (KeyFileError) when it
  also finds `cluster.key_secret` there: it must never be given the cluster's secret.
- What it does is decided by `executor.workerhost_core.HostCore` (sessions, starts,
  signals, stops); this module is the I/O around it: it starts each worker
  (`python -m executor.worker`, as a `runtime.process.ManagedProcess` with its log in
  `config.log_dir`), hands it the function key pair on stdin, makes it die with the host
  (the worker's `parent_pid` is the host's pid), and reports its whole state to the node
  (`HostReport`) on every change and every `report_period`. A request that does not parse is
  logged and dropped; frames are bounded (`MAX_REQUEST`) before authentication.
- Prints `READY {"address", "pid"}` (and writes it to `--ready-file`) once bound. SIGTERM
  stops it: its workers get SIGTERM, SIGKILL after `stop_grace`.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
import uuid
from typing import Dict, List, Optional

import zmq

from hydro_proto import workerhost_pb2 as wh
from runtime.auth import (CLUSTER, FUNCTION, KeyFileError, KeyPair, Security, credentials_of,
                          encode_handoff, format_address, function_credentials, make_server)
from runtime.process import ManagedProcess, stop_all

from .backends import worker_argv
from .config import WorkerConfig, WorkerHostConfig
from .workerhost_core import Action, HostCore, Kill, Spawn

__all__ = ["WorkerHost", "MAX_REQUEST", "host_credentials"]

log = logging.getLogger("cloudburst.workerhost")

MAX_REQUEST = 256 << 10      # bytes of one request frame, before and after authentication


def host_credentials(key_dir: str):
    """The host's function credentials from `key_dir` (module contract); KeyFileError names
    what is missing, or the cluster secret that must not be there."""
    secret = os.path.join(key_dir, CLUSTER + ".key_secret")
    if os.path.exists(secret):
        raise KeyFileError(f"{secret} is in the worker host's key directory: the worker host "
                           f"runs user code and must hold only the function role's keys "
                           f"(function.key, function.key_secret, cluster.key)")
    pair = KeyPair.load(os.path.join(key_dir, FUNCTION + ".key_secret"))
    if pair.secret is None:
        raise KeyFileError(f"{key_dir}/{FUNCTION}.key_secret has no secret key")
    cluster = KeyPair.load(os.path.join(key_dir, CLUSTER + ".key")).public
    return function_credentials(cluster, pair)


class WorkerHost:
    """One worker host process; see the module contract."""

    def __init__(self, config: WorkerHostConfig) -> None:
        self.config = config
        self.host_id = uuid.uuid4().hex
        self.core = HostCore(config.max_workers)
        self._context = zmq.Context()
        creds = host_credentials(config.key_dir) if config.key_dir else None
        self._security = None if creds is None else Security.of_credentials(self._context, creds)
        self._handoff = None if creds is None else encode_handoff(credentials_of(self._security))
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST)
        if creds is not None:
            make_server(self._router, creds, audience=CLUSTER)
        endpoint = f"tcp://{config.ip}:{config.port}" if config.port else f"tcp://{config.ip}:*"
        if config.port:
            self._router.bind(endpoint)
        else:
            endpoint = f"tcp://{config.ip}:{self._router.bind_to_random_port(f'tcp://{config.ip}')}"
        self.address = endpoint if creds is None else format_address(endpoint,
                                                                      creds.keypair.public)
        self._children: Dict[int, ManagedProcess] = {}
        self._starting: Dict[int, ManagedProcess] = {}
        self._node: Optional[bytes] = None       # the ROUTER identity of the current session
        self._stopping = False
        self._log_dir = config.log_dir or os.getcwd()

    def stop(self) -> None:
        self._stopping = True

    def serve(self) -> None:
        period = self.config.report_period
        next_report = time.monotonic()
        while not self._stopping:
            changed = False
            wait = max(0.0, min(next_report - time.monotonic(), 0.1))
            if self._router.poll(int(wait * 1000) + 1, zmq.POLLIN):
                for _ in range(1000):
                    changed |= self._on_request()
                    if not self._router.poll(0, zmq.POLLIN):
                        break
            now = time.monotonic()
            changed |= self._watch_children()
            changed |= self._carry_out(self.core.tick(now))
            if changed or now >= next_report:
                next_report = now + period
                self._report()
        self.close()

    def _on_request(self) -> bool:
        try:
            identity, data = self._router.recv_multipart(zmq.NOBLOCK)
        except ValueError:
            log.warning("dropped a request that is not one frame")
            return False
        except zmq.Again:
            return False
        try:
            req = wh.HostRequest.FromString(data)
        except Exception as e:  # noqa: BLE001 - any parse failure: dropped, named
            log.warning("dropped a malformed request: %s", e)
            return False
        before = self.core.refused
        actions = self.core.request(req, time.monotonic())
        self._node = identity              # the node of the (possibly new) session
        if self.core.refused and self.core.refused != before:
            log.error("refused: %s", self.core.refused)
        self._carry_out(actions)
        return True

    def _carry_out(self, actions: List[Action]) -> bool:
        for action in actions:
            if isinstance(action, Spawn):
                self._spawn(action)
            elif isinstance(action, Kill):
                child = self._children.get(action.pid)
                if child is not None:         # only a process this host started
                    log.info("signal %d to %s (pid %d)", action.signum, child.name, action.pid)
                    child.signal(action.signum)
        return bool(actions)

    def _spawn(self, action: Spawn) -> None:
        try:
            config = WorkerConfig.from_json(action.config)
            if config.auth and self._handoff is None:
                raise ValueError("the node runs with authentication but this worker host "
                                 "has no function keys (--config key_dir)")
            config = dataclasses.replace(config, parent_pid=os.getpid(), ipc_dir=None,
                                         auth=self._handoff is not None)
            p = ManagedProcess(f"{action.name}.{action.generation}", worker_argv(config),
                               self._log_dir, stdin_data=self._handoff)
            p.spawn()
        except (ValueError, TypeError, OSError) as e:
            log.error("could not start %s (start %d): %s", action.name, action.generation, e)
            self.core.spawn_failed(action.name, action.generation,
                                   f"{type(e).__name__}: {e}")
            return
        log.info("started %s (start %d) as pid %d", action.name, action.generation, p.pid)
        self.core.spawned(action.name, action.generation, p.pid)
        self._children[p.pid] = p
        self._starting[p.pid] = p

    def _watch_children(self) -> bool:
        changed = False
        for pid, p in list(self._starting.items()):
            state = p.read_ready()
            if state is True:
                del self._starting[pid]
                self.core.ready(pid, json.dumps(p.info))
                changed = True
            elif state is False:
                del self._starting[pid]
        for pid, p in list(self._children.items()):
            if p.running():
                continue
            code = p.returncode
            log.warning("%s (pid %d) exited with code %s", p.name, pid, code)
            p.close_pipe()
            del self._children[pid]
            self._starting.pop(pid, None)
            self._carry_out(self.core.exited(pid, code))
            changed = True
        return changed

    def _report(self) -> None:
        if self._node is None:
            return
        try:
            self._router.send_multipart([self._node, self.core.report(self.host_id)
                                         .SerializeToString()], zmq.NOBLOCK)
        except zmq.ZMQError as e:             # the node is gone or not reading: next period
            log.debug("report not sent: %s", e)

    def close(self) -> None:
        children = list(self._children.values())
        stop_all(children, self.config.stop_grace)
        self._router.close(0)
        if self._security is not None:
            self._security.stop()
        self._context.term()


def main() -> None:
    import sys

    from runtime.config import parse_config, role_parser
    from runtime.limits import raise_descriptor_limit
    from runtime.logs import configure_logging
    from runtime.process import announce_ready

    parser = role_parser(WorkerHostConfig, "python -m executor.workerhost", __doc__)
    parser.add_argument("--ready-file", help="also write the readiness JSON here")
    config, args = parse_config(parser, WorkerHostConfig)
    log_ = configure_logging(config.log_level, "worker host")
    raise_descriptor_limit()
    try:
        host = WorkerHost(config)
    except (KeyFileError, zmq.ZMQError) as e:
        log_.error("cannot start: %s", e)
        sys.exit(2)
    signal.signal(signal.SIGTERM, lambda *_: host.stop())
    signal.signal(signal.SIGINT, lambda *_: host.stop())
    announce_ready({"address": host.address, "pid": os.getpid()}, args.ready_file)
    host.serve()


if __name__ == "__main__":
    main()
