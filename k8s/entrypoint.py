"""`python -m k8s.entrypoint ROLE [ARGS...]`: start one of the platform's processes in a pod.

The image runs every role; this turns the pod's environment (the ConfigMap's settings and
the pod's own name and address from the downward API) into the process' command line and
then *execs* it, so the process itself is PID 1 and receives the kubelet's SIGTERM directly
(every process handles SIGTERM: Anna nodes leave the ring gracefully, schedulers and
executor nodes stop). Extra ARGS are appended to the process' command line.

Roles and what they read from the environment (k8s/base/configmap.yaml sets most of it):

| role        | process                | environment |
|-------------|------------------------|-------------|
| `routing`   | `anna_core.routing`    | POD_IP, ROUTING_PORT |
| `node`      | `anna_core.node`       | POD_NAME, POD_IP, ANNA_ROUTING, ANNA_TIER, NODE_CONFIG, LEAVE_TIMEOUT, REPORT_PERIOD |
| `monitor`   | `anna_core.monitor`    | POD_IP, ANNA_ROUTING, REPORT_PERIOD, POLICY_CONFIG; with AUTOSCALE=true also POD_NAMESPACE, MEMORY_DEPLOYMENT, DISK_DEPLOYMENT, POD_STARTUP_TIMEOUT, POD_LEAVE_TIMEOUT; with BACKUP_TO (an s3:// prefix) scheduled backups every BACKUP_EVERY seconds |
| `scheduler` | `scheduler`            | POD_IP, ANNA_ROUTING, SCHEDULER_PORT, METRICS_PORT, SCHEDULER_CONFIG |
| `executor`  | `executor`             | POD_NAME, POD_IP, ANNA_ROUTING, SCHEDULERS, EXECUTOR_CONFIG; with WORKER_HOST_PORT the workers run in the pod's `workers` container |
| `workers`   | `executor.workerhost`  | WORKER_HOST_PORT, FUNCTION_KEY_DIR (the function role's keys, never the cluster secret), LOG_DIR (default /tmp) |
| `executor-autoscaler` | `cloudburst.autoscaler` | POD_IP, SCHEDULERS, POD_NAMESPACE, EXECUTOR_DEPLOYMENT, EXECUTOR_POLICY_CONFIG, EXECUTOR_CONFIG, POD_STARTUP_TIMEOUT, POD_LEAVE_TIMEOUT |

Autoscaling: with AUTOSCALE=true the monitor acts on its policy's decisions: it adds and
removes Anna nodes as pods of MEMORY_DEPLOYMENT and DISK_DEPLOYMENT (default `anna-memory`,
`statefulset/anna-disk`, the disk StatefulSet; DISK_DEPLOYMENT="" leaves the disk tier alone) in POD_NAMESPACE, through the
Kubernetes API as the pod's ServiceAccount, with POLICY_CONFIG's PolicyConfig knobs (its
monitoring period is REPORT_PERIOD). Otherwise (unset, "false") it only observes. Anna nodes
are named after their pods (node_id = POD_NAME), so the node ids the monitor decides on are
the pod names it removes. The `executor-autoscaler` role always acts: it scales
EXECUTOR_DEPLOYMENT (default `cloudburst-executor`) with EXECUTOR_POLICY_CONFIG's
ExecutorPolicyConfig knobs; `workers_per_node` defaults to EXECUTOR_CONFIG's `workers` (the
executor's node id is POD_NAME as well). Its Deployment's replica count (0 or 1) turns it
off or on.

Every role takes KEY_DIR (the cluster's key directory, mounted from a Secret; unset or empty:
no authentication) and LOG_LEVEL; with KEY_DIR, the cluster's public key is appended to
the ANNA_ROUTING and SCHEDULERS addresses. `*_CONFIG` variables hold JSON objects merged into the
process' configuration (the dataclasses in anna_core/config.py, scheduler/config.py and
executor/config.py; unknown keys are refused there). The processes that can write a
readiness file write it to READY_FILE (default /tmp/ready.json), which the pods' readiness
probes test.

`--dry-run` prints the command instead of running it.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Mapping

from k8s.names import DISK_SCALED, EXECUTOR, MEMORY

ROLES = ("routing", "node", "monitor", "scheduler", "executor", "workers",
         "executor-autoscaler")
TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")
DEFAULT_READY_FILE = "/tmp/ready.json"


class EntrypointError(Exception):
    """A setting is missing or malformed; the message names it."""


def _need(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise EntrypointError(f"environment variable {name} is not set")
    return value


def _json_object(env: Mapping[str, str], name: str) -> Dict:
    text = env.get(name, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise EntrypointError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise EntrypointError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    """A boolean setting: true/1/yes/on or false/0/no/off (unset: false)."""
    value = env.get(name, "").strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise EntrypointError(f"{name} must be true or false, got {env[name]!r}")


def _seconds(env: Mapping[str, str], name: str, flag: str) -> List[str]:
    """`[flag, value]` for a positive number of seconds in `name`, [] when unset."""
    value = env.get(name, "").strip()
    if not value:
        return []
    try:
        ok = float(value) > 0
    except ValueError:
        ok = False
    if not ok:
        raise EntrypointError(f"{name} must be a positive number of seconds, got {value!r}")
    return [flag, value]


def _port(env: Mapping[str, str], name: str) -> int:
    value = _need(env, name)
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise EntrypointError(f"{name} must be a port number, got {value!r}")
    return int(value)


def _schedulers(env: Mapping[str, str]) -> List[str]:
    return [_keyed(s.strip(), env) for s in _need(env, "SCHEDULERS").split(",") if s.strip()]


def _keyed(address: str, env: Mapping[str, str]) -> str:
    """`address` (or each of several, comma-separated) with the cluster's public key
    appended when authentication is on (every
    cluster server binds with the cluster's key pair, and a peer connects to a CURVE server
    with an address that names its key: runtime/auth.py)."""
    key_dir = env.get("KEY_DIR", "")
    if "," in address:          # several (the routings' or the schedulers' stable names)
        return ",".join(_keyed(a.strip(), env) for a in address.split(",") if a.strip())
    if not key_dir or "#" in address:
        return address
    from runtime.auth import CLUSTER, KeyPair, format_address
    try:
        public = KeyPair.load(os.path.join(key_dir, CLUSTER + ".key")).public
    except Exception as e:  # noqa: BLE001 - named in the message
        raise EntrypointError(f"cannot read the cluster key in KEY_DIR={key_dir}: {e}") from None
    return format_address(address, public)


def _key_dir(env: Mapping[str, str]) -> Dict:
    key_dir = env.get("KEY_DIR", "")
    return {"key_dir": key_dir} if key_dir else {}


def command(role: str, env: Mapping[str, str], extra: List[str]) -> List[str]:
    """The argv that runs `role` in a pod with environment `env`."""
    py = [sys.executable, "-m"]
    ready = env.get("READY_FILE") or DEFAULT_READY_FILE
    log_level = env.get("LOG_LEVEL") or "warning"
    key_dir = env.get("KEY_DIR", "")
    if role == "routing":
        argv = py + ["anna_core.routing", "--ip", _need(env, "POD_IP"),
                     "--port", _need(env, "ROUTING_PORT"), "--log-level", log_level,
                     "--ready-file", ready]
        if key_dir:
            argv += ["--key-dir", key_dir]
    elif role == "node":
        tier = _need(env, "ANNA_TIER")
        config = {"node_id": _need(env, "POD_NAME"), "tier": tier, "ip": _need(env, "POD_IP"),
                  "log_level": log_level}
        if tier == "disk":
            config["data_dir"] = env.get("DATA_DIR") or "/data"
        config.update(_json_object(env, "NODE_CONFIG"))
        config.update(_key_dir(env))
        argv = py + ["anna_core.node", "--config", json.dumps(config),
                     "--routing", _keyed(_need(env, "ANNA_ROUTING"), env), "--ready-file", ready]
        if env.get("LEAVE_TIMEOUT"):
            argv += ["--leave-timeout", env["LEAVE_TIMEOUT"]]
        if env.get("REPORT_PERIOD"):
            argv += ["--report-period", env["REPORT_PERIOD"]]
    elif role == "monitor":
        argv = py + ["anna_core.monitor", "--routing", _keyed(_need(env, "ANNA_ROUTING"), env),
                     "--ip", _need(env, "POD_IP"), "--log-level", log_level]
        if env.get("REPORT_PERIOD"):
            argv += ["--period", env["REPORT_PERIOD"]]
        if key_dir:
            argv += ["--key-dir", key_dir]
        policy = _json_object(env, "POLICY_CONFIG")
        if policy:
            argv += ["--policy-config", json.dumps(policy)]
        if _flag(env, "AUTOSCALE"):
            argv += ["--autoscale", "--kubernetes-namespace", _need(env, "POD_NAMESPACE"),
                     "--memory-deployment", env.get("MEMORY_DEPLOYMENT") or MEMORY,
                     "--disk-deployment", env.get("DISK_DEPLOYMENT", DISK_SCALED)]
            argv += _seconds(env, "POD_STARTUP_TIMEOUT", "--pod-startup-timeout")
            argv += _seconds(env, "POD_LEAVE_TIMEOUT", "--pod-leave-timeout")
        backup_to = env.get("BACKUP_TO", "").strip()
        if backup_to:
            # scheduled backups to S3; credentials and endpoint come from the standard AWS
            # variables (the optional Secret cloudburst-aws in monitor.yaml)
            every = _seconds(env, "BACKUP_EVERY", "--backup-every")
            if not every:
                raise EntrypointError("BACKUP_TO is set but BACKUP_EVERY (seconds between "
                                      "backups) is not")
            argv += ["--backup-to", backup_to] + every
    elif role == "scheduler":
        config = {"kvs_address": _keyed(_need(env, "ANNA_ROUTING"), env), "ip": _need(env, "POD_IP"),
                  "port": int(_need(env, "SCHEDULER_PORT")), "log_level": log_level}
        if env.get("METRICS_PORT"):
            config["metrics_port"] = int(env["METRICS_PORT"])
        config.update(_json_object(env, "SCHEDULER_CONFIG"))
        config.update(_key_dir(env))
        argv = py + ["scheduler", "--config", json.dumps(config), "--ready-file", ready]
    elif role == "executor":
        schedulers = _schedulers(env)
        config = {"node_id": _need(env, "POD_NAME"), "kvs_address": _keyed(_need(env, "ANNA_ROUTING"), env),
                  "scheduler_addresses": schedulers, "ip": _need(env, "POD_IP"),
                  "log_level": log_level}
        config.update(_json_object(env, "EXECUTOR_CONFIG"))
        config.update(_key_dir(env))
        if env.get("WORKER_HOST_PORT"):   # the pod's `workers` container, over loopback
            config["worker_host"] = f"tcp://127.0.0.1:{_port(env, 'WORKER_HOST_PORT')}"
        argv = py + ["executor", "--config", json.dumps(config), "--ready-file", ready]
    elif role == "workers":
        config = {"ip": "127.0.0.1", "port": _port(env, "WORKER_HOST_PORT"),
                  "log_level": log_level, "log_dir": env.get("LOG_DIR") or "/tmp"}
        if key_dir:           # authentication on: the function role's keys only
            config["key_dir"] = _need(env, "FUNCTION_KEY_DIR")
        argv = py + ["executor.workerhost", "--config", json.dumps(config), "--ready-file",
                     ready]
    elif role == "executor-autoscaler":
        policy = _json_object(env, "EXECUTOR_POLICY_CONFIG")
        workers = _json_object(env, "EXECUTOR_CONFIG").get("workers")
        if "workers_per_node" not in policy and isinstance(workers, int) and workers > 0:
            policy["workers_per_node"] = workers     # sizing from zero nodes needs it
        argv = py + ["cloudburst.autoscaler", "--kubernetes-namespace",
                     _need(env, "POD_NAMESPACE"), "--executor-deployment",
                     env.get("EXECUTOR_DEPLOYMENT") or EXECUTOR,
                     "--ip", _need(env, "POD_IP"), "--log-level", log_level]
        for address in _schedulers(env):
            argv += ["--scheduler", address]
        if policy:
            argv += ["--policy-config", json.dumps(policy)]
        if key_dir:
            argv += ["--key-dir", key_dir]
        argv += _seconds(env, "POD_STARTUP_TIMEOUT", "--pod-startup-timeout")
        argv += _seconds(env, "POD_LEAVE_TIMEOUT", "--pod-leave-timeout")
    else:
        raise EntrypointError(f"unknown role {role!r}; one of: {', '.join(ROLES)}")
    return argv + list(extra)


def main(argv: List[str]) -> None:
    dry_run = "--dry-run" in argv
    argv = [a for a in argv if a != "--dry-run"]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    try:
        cmd = command(argv[0], os.environ, argv[1:])
    except (EntrypointError, ValueError) as e:
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
