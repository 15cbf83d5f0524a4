"""`python -m k8s.entrypoint ROLE [ARGS...]`: start one of the platform's processes in a pod.

The image runs every role. Each role's configuration is one JSON object in the ConfigMap
(k8s/base/configmap.yaml): the role's configuration object (runtime/config.py), which this
hands to the role's process as it is (`--config`), adding only `--ready-file`, and then
*execs* the process, so that it is PID 1 and receives the kubelet's SIGTERM directly (every
process handles SIGTERM: Anna nodes leave the ring gracefully, schedulers and executor nodes
stop). Extra ARGS are appended: flags override the configuration's fields.

| role                  | process               | configuration (environment variable) |
|-----------------------|-----------------------|--------------------------------------|
| `routing`             | `anna_core.routing`   | ROUTING_CONFIG (`RoutingConfig`) |
| `node`                | `anna_core.node`      | NODE_CONFIG (`anna_core.NodeConfig`; the memory and disk pods set it from MEMORY_NODE_CONFIG and DISK_NODE_CONFIG) |
| `monitor`             | `anna_core.monitor`   | MONITOR_CONFIG (`MonitorConfig`) |
| `scheduler`           | `scheduler`           | SCHEDULER_CONFIG (`SchedulerConfig`) |
| `executor`            | `executor`            | EXECUTOR_CONFIG (`executor.config.NodeConfig`) |
| `workers`             | `executor.workerhost` | WORKERS_CONFIG (`WorkerHostConfig`) |
| `executor-autoscaler` | `cloudburst.autoscaler` | EXECUTOR_AUTOSCALER_CONFIG (`ExecutorAutoscalerConfig`) |

What differs from pod to pod comes in through the configurations' `${NAME}` references,
which each process fills in from its environment: the pod's name, address and namespace
(POD_NAME, POD_IP, POD_NAMESPACE, from the downward API) and the ConfigMap's shared settings
(ANNA_ROUTING, SCHEDULERS, KEY_DIR, ...). An address marked `#k=cluster` is given the
cluster's public key, read from the configuration's key_dir (none: authentication off).
Anna nodes are named after their pods (node_id ${POD_NAME}), so the node ids the monitor
decides on are the pod names it removes. The processes that can write a readiness file
write it to READY_FILE (default /tmp/ready.json), which the pods' readiness probes test.

`--dry-run` prints the command instead of running it.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Mapping, NamedTuple

DEFAULT_READY_FILE = "/tmp/ready.json"


class Role(NamedTuple):
    """A process the image runs: its module, the environment variable holding its
    configuration, and whether it writes a readiness file."""
    module: str
    variable: str
    ready_file: bool


ROLES: Dict[str, Role] = {
    "routing": Role("anna_core.routing", "ROUTING_CONFIG", True),
    "node": Role("anna_core.node", "NODE_CONFIG", True),
    "monitor": Role("anna_core.monitor", "MONITOR_CONFIG", False),
    "scheduler": Role("scheduler", "SCHEDULER_CONFIG", True),
    "executor": Role("executor", "EXECUTOR_CONFIG", True),
    "workers": Role("executor.workerhost", "WORKERS_CONFIG", True),
    "executor-autoscaler": Role("cloudburst.autoscaler", "EXECUTOR_AUTOSCALER_CONFIG", False),
}


class EntrypointError(Exception):
    """A setting is missing or malformed; the message names it."""


def command(role: str, env: Mapping[str, str], extra: List[str]) -> List[str]:
    """The argv that runs `role` in a pod with environment `env`."""
    if role not in ROLES:
        raise EntrypointError(f"unknown role {role!r}; one of: {', '.join(ROLES)}")
    spec = ROLES[role]
    config = env.get(spec.variable, "").strip()
    if not config:
        raise EntrypointError(f"environment variable {spec.variable} (the {role} "
                              f"configuration) is not set")
    argv = [sys.executable, "-m", spec.module, "--config", config]
    if spec.ready_file:
        argv += ["--ready-file", env.get("READY_FILE") or DEFAULT_READY_FILE]
    return argv + list(extra)


def main(argv: List[str]) -> None:
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    try:
        cmd = command(argv[0], os.environ, argv[1:])
    except EntrypointError as e:
        print(f"k8s.entrypoint: {e}", file=sys.stderr)
        sys.exit(2)
    if dry_run:
        print(json.dumps(cmd))
        return
    ready = os.environ.get("READY_FILE") or DEFAULT_READY_FILE
    try:
        os.unlink(ready)    # a restarted container must not look ready before it is
    except FileNotFoundError:
        pass
    sys.stdout.flush()
    os.execv(cmd[0], cmd)   # the process becomes PID 1 and gets SIGTERM itself


if __name__ == "__main__":
    main(sys.argv[1:])
