"""The `cloudburst` command.

    cloudburst local [--executor-nodes N] [--executors-per-node M] [--schedulers S]
        Run a local cluster (Anna, schedulers, executor nodes) in the foreground; print the
        address and keys for `cloudburst.Client(address, auth=...)`; stop cleanly on Ctrl-C
        or SIGTERM. Authenticated by default, with fresh keys in a temporary directory.
    cloudburst local --key-dir DIR ...
        The same with the keys in DIR (`cloudburst keys DIR --client NAME`).
    cloudburst local --no-auth ...
        The same without authentication (warns once: anyone who can reach the ports
        controls it).
    cloudburst local --log-dir DIR ...
        The same, keeping every process' log in DIR after it stops.
    cloudburst local --data-dir DIR ...
        The same, keeping functions, DAGs, keys and objects in DIR across restarts (without
        it they are gone when the cluster stops). --disk-sync interval|always|none says when
        the KVS fsyncs its write-ahead log (default interval, every --disk-sync-interval
        1000 ms).
    cloudburst local --autoscale [--min-executors N] [--max-executors N]
                     [--provisioning-delay S] ...
        The same, with executor nodes added under load and drained and removed when idle
        (every decision logged with its reason; `--executor-nodes` is the starting size).
    cloudburst status ADDRESS [--key-dir DIR --client NAME]
        A scheduler's view: live workers (busy, calls placed, unfinished, restarts), live
        actors (class, worker, node, calls unfinished, restarts) and, per function, calls
        placed, errors, p50/p99 latency and running; what its authentication refused.
    cloudburst logs [FUNCTION] --log-dir DIR [--lines N]
        What functions printed, as the workers logged it (each line tagged with its call),
        most recent last; only FUNCTION's output if given.
    cloudburst demo
        Start a local cluster, run the increment -> square example on it, stop.
    cloudburst keys DIR [--client NAME ...] [--force]
        Generate the cluster's CURVE key pair and client key pairs in DIR (secret files 0600;
        existing secret keys are kept unless --force).
    cloudburst k8s deploy|status|scale|delete ...
        Deploy the platform on a Kubernetes cluster from a kubeconfig, show its Deployments
        and pods, scale executor nodes and Anna tiers, remove it (`cloudburst k8s --help`).

Errors are one line naming the command's options (`--key-dir`), not Python's; a reader that
goes away (`cloudburst status ... | head`) ends the command quietly with status 141.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import List, Optional

from runtime.auth import CLIENT_PREFIX, AuthConfig, KeyFileError, for_command_line
from runtime.keys import KEYS_DESCRIPTION, KEYS_HELP, add_keys_arguments, keys_command
from runtime.cli import (HELP_FORMAT, add_common, exit_quietly_on_broken_pipe,
                         non_negative_float, non_negative_int, package_version, positive_float,
                         positive_int)

from .executor_policy import ExecutorPolicyConfig

from .errors import CloudburstError, StartupError
from .data_dir import DataDirInUse
from .local import LocalCluster


def add_client_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """`--key-dir` and `--client` for a command that connects to a cluster as a client."""
    parser.add_argument("--key-dir", default=None,
                        help="a key directory with the cluster's public key (cluster.key) and "
                             "this client's pair (clients/NAME.key_secret), for a cluster that "
                             "authenticates (`cloudburst local` prints it)")
    parser.add_argument("--client", default="local", metavar="NAME",
                        help="the client key pair to use from --key-dir")


def _local(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.no_auth and args.key_dir:
        print("cloudburst local: --key-dir and --no-auth exclude each other", file=sys.stderr)
        return 2
    if args.data_dir and args.key_dir:
        print("cloudburst local: --data-dir keeps its own keys (DIR/keys); give --data-dir or "
              "--key-dir, not both", file=sys.stderr)
        return 2
    if not args.data_dir and (args.disk_sync or args.disk_sync_interval is not None):
        print("cloudburst local: --disk-sync and --disk-sync-interval need --data-dir (without "
              "it nothing is written to disk)", file=sys.stderr)
        return 2
    autoscale = None
    if args.autoscale:
        try:
            autoscale = ExecutorPolicyConfig(min_nodes=args.min_executors,
                                             max_nodes=args.max_executors)
        except ValueError as e:
            print(f"cloudburst local: {e}", file=sys.stderr)
            return 2
        if not args.min_executors <= args.executor_nodes <= (args.max_executors or
                                                             args.executor_nodes):
            print("cloudburst local: --executor-nodes must be within --min-executors and "
                  "--max-executors", file=sys.stderr)
            return 2
        logging.getLogger("cloudburst.autoscale").setLevel(logging.INFO)
        if not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s %(message)s")
    elif args.min_executors != 1 or args.max_executors is not None \
            or args.provisioning_delay != 0:
        print("cloudburst local: --min-executors, --max-executors and --provisioning-delay "
              "need --autoscale", file=sys.stderr)
        return 2
    if not logging.getLogger().handlers:
        # warnings (the cluster's one AUTH_OFF_WARNING with --no-auth) say that they are
        logging.basicConfig(format="%(levelname)s: %(message)s")
    with LocalCluster(executor_nodes=args.executor_nodes,
                      executors_per_node=args.executors_per_node,
                      schedulers=args.schedulers, log_level=args.log_level,
                      log_dir=args.log_dir, port=args.port,
                      metrics_port=args.metrics_port, auth=not args.no_auth,
                      key_dir=args.key_dir, autoscale=autoscale,
                      provisioning_delay=args.provisioning_delay,
                      data_dir=args.data_dir, disk_sync=args.disk_sync,
                      disk_sync_interval_ms=args.disk_sync_interval) as cluster:
        print(f"cloudburst local cluster ready: {args.executor_nodes} executor node(s) x "
              f"{args.executors_per_node} worker(s), {args.schedulers} scheduler(s)")
        for i, address in enumerate(cluster.scheduler_addresses):
            print(f"scheduler {i}: {address}")
        print(f"KVS (Anna routing): {cluster.kvs.routing_address}")
        print(f"logs: {cluster.log_dir}")
        print(f"data: {cluster.data_dir.path} (functions, DAGs, keys and objects are kept "
              f"across restarts; disk sync: {cluster.disk_sync})"
              if cluster.data_dir is not None else
              "data: in memory only, gone when the cluster stops (--data-dir DIR keeps it)")
        if autoscale is not None:
            print(f"executor autoscaling on: {args.min_executors}.."
                  f"{args.max_executors or 'unbounded'} node(s), provisioning delay "
                  f"{args.provisioning_delay:g} s (decisions are logged here)")
        if args.metrics_port is not None:
            print(f"metrics: {cluster.client().status().metrics_address}/metrics")
        print(connect_hint(cluster) + "   (Ctrl-C stops)", flush=True)
        while not stop.wait(0.5):
            pass
    print("stopped")
    return 0


def connect_hint(cluster: LocalCluster) -> str:
    """How a client connects to `cluster`: its key directory and identity, and the call."""
    if not cluster.auth:         # the cluster warned about it when it started
        return f"connect with: cloudburst.Client({cluster.address!r})"
    if cluster.client_auth is None:
        return (f"keys: {cluster.key_dir} (no client key pair in it: add one with `cloudburst "
                f"keys {cluster.key_dir} --add-client --client NAME` and restart)\n"
                f"connect with: cloudburst.Client({cluster.address!r}, "
                f"auth=cloudburst.AuthConfig({cluster.key_dir!r}, 'client:NAME'))")
    identity = cluster.client_auth.identity
    return (f"keys: {cluster.key_dir} (a client needs cluster.key, function.key and "
            f"clients/{identity.split(':', 1)[1]}.key_secret from it; identity {identity!r})\n"
            f"connect with: cloudburst.Client({cluster.address!r}, "
            f"auth=cloudburst.AuthConfig({cluster.key_dir!r}, {identity!r}))\n"
            f"status with:  cloudburst status {cluster.address!r} --key-dir {cluster.key_dir} "
            f"--client {identity.split(':', 1)[1]}")


def client_auth(args: argparse.Namespace) -> Optional[AuthConfig]:
    """The AuthConfig of `--key-dir` / `--client` (None without --key-dir)."""
    if not args.key_dir:
        return None
    return AuthConfig(args.key_dir, CLIENT_PREFIX + args.client)


def function_output(log_dir: str, function: Optional[str] = None,
                    lines: int = 50) -> List[str]:
    """The last `lines` lines functions printed, from the worker logs in `log_dir` (each
    tagged `call <id> <function>: `), only `function`'s if given; per worker, in order."""
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"no log directory {log_dir!r}")
    out: List[str] = []
    for name in sorted(os.listdir(log_dir)):
        if not (name.startswith("worker-") and name.endswith(".log")):
            continue
        with open(os.path.join(log_dir, name), errors="replace") as f:
            for line in f:
                parts = line.split(" ", 3)
                if len(parts) == 4 and parts[0] == "call" and parts[2].endswith(":") \
                        and (function is None or parts[2][:-1] == function):
                    out.append(f"{name[len('worker-'):-len('.log')]} {line.rstrip()}")
    return out[-lines:]


def _logs(args: argparse.Namespace) -> int:
    try:
        found = function_output(args.log_dir, args.function, args.lines)
    except FileNotFoundError as e:
        print(f"cloudburst logs: {e}", file=sys.stderr)
        return 1
    for line in found:
        print(line)
    if not found:
        print(f"(no output{' from ' + args.function if args.function else ''} in {args.log_dir})")
    return 0


def _status(args: argparse.Namespace) -> int:
    from .client import Client
    from .status import format_status
    try:
        auth = client_auth(args)
    except ValueError as e:            # a malformed client name
        print(f"cloudburst status: {e}", file=sys.stderr)
        return 2
    with Client(args.address, timeout=args.timeout, auth=auth) as client:
        print(format_status(client.status()))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from faas.values import Reference
    with LocalCluster(executor_nodes=2, executors_per_node=1, colocate_chains=False,
                      log_level=args.log_level) as cluster:
        client = cluster.client()
        print(f"local cluster up (2 executor nodes); scheduler at {cluster.address}")
        client.register(lambda lib, x: x + 1, "increment")
        client.register(lambda lib, x: x * x, "square")
        client.register_dag("increment_square", ["increment", "square"], [("increment", "square")])
        value = client.call_dag("increment_square", {"increment": [3]}).get(timeout=10)
        print(f"call_dag('increment_square', {{'increment': [3]}}) -> {value}")
        assert value == 16, value
        # the same DAG under transactional causal consistency (HydroCache, protocol HB),
        # reading a causal key and writing the result atomically at the sink
        client.put("demo/x", 4, consistency="causal")

        def store(lib, x):
            lib.put("demo/result", x)
            return x

        client.register(store, "store")
        client.register_dag("increment_store", ["increment", "store"], [("increment", "store")])
        future = client.call_dag("increment_store", {"increment": [Reference("demo/x")]},
                                 consistency="causal")
        value = future.get(timeout=10)
        stored = client.get("demo/result", consistency="causal")
        print(f"causal call_dag('increment_store', x=4) -> {value}, stored {stored} "
              f"(protocol {future.causal.protocol}, read {sorted(future.causal.read_set)})")
        assert value == 5 and stored == 5, (value, stored)
    print("demo done; cluster stopped")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="cloudburst", description=__doc__,
                                     formatter_class=HELP_FORMAT)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="run a local cluster in the foreground",
                           formatter_class=HELP_FORMAT)
    local.add_argument("--executor-nodes", type=positive_int, default=1,
                       help="executor nodes (each runs a node cache and its workers)")
    local.add_argument("--executors-per-node", type=positive_int, default=3,
                       help="worker processes per executor node")
    local.add_argument("--schedulers", type=positive_int, default=1, help="schedulers")
    local.add_argument("--port", type=non_negative_int, default=0,
                       help="TCP port of the first scheduler, the one clients connect to "
                            "(0: a free port)")
    local.add_argument("--log-dir", default=None,
                       help="keep every process' log here after the cluster stops "
                            "(default: a temporary directory, removed)")
    local.add_argument("--key-dir", default=None,
                       help="the cluster's CURVE keys, made by `cloudburst keys DIR --client "
                            "NAME` (default: fresh keys in a temporary directory, with a "
                            "client named 'local')")
    local.add_argument("--data-dir", default=None, metavar="DIR",
                       help="keep functions, DAGs, keys and objects in DIR across restarts "
                            "(the KVS runs on disk there; default: in memory, gone on stop)")
    local.add_argument("--disk-sync", default=None, choices=("interval", "always", "none"),
                       help="with --data-dir: when the KVS fsyncs its write-ahead log. "
                            "'interval' (default): at most every --disk-sync-interval ms, so an "
                            "OS crash or power loss loses at most that last interval of "
                            "acknowledged writes; 'always': before every write is "
                            "acknowledged (nothing acknowledged is lost; one fsync per "
                            "write); 'none': left to the OS. Every mode survives a crash of "
                            "the cluster's processes")
    local.add_argument("--disk-sync-interval", type=int, default=None, metavar="MS",
                       help="with --disk-sync interval: the group-commit period in "
                            "milliseconds (default: 1000)")
    local.add_argument("--no-auth", action="store_true",
                       help="run every socket without authentication or encryption: anyone "
                            "who can reach the ports can run code on the cluster and read "
                            "and change its data (a trusted machine only)")
    add_common(local)
    local.set_defaults(run=_local)
    local.add_argument("--autoscale", action="store_true",
                       help="add executor nodes when they are busy, drain and remove idle "
                            "ones (--executor-nodes is the starting size); every decision is "
                            "logged with its reason")
    local.add_argument("--min-executors", type=positive_int, default=1, metavar="N",
                       help="with --autoscale: never fewer executor nodes than this")
    local.add_argument("--max-executors", type=positive_int, default=None, metavar="N",
                       help="with --autoscale: never more executor nodes than this "
                            "(default: no bound)")
    local.add_argument("--provisioning-delay", type=non_negative_float, default=0.0,
                       metavar="S",
                       help="with --autoscale: seconds between asking for a node and its "
                            "process starting (stands in for a VM or pod boot)")
    local.add_argument("--metrics-port", type=non_negative_int, default=None,
                       help="serve Prometheus metrics from the first scheduler on this HTTP "
                            "port (0: a free one; default: off)")
    status = sub.add_parser("status", help="show a scheduler's view: workers and calls",
                            formatter_class=HELP_FORMAT)
    status.add_argument("address", help="a scheduler's address (tcp://host:port)")
    status.add_argument("--timeout", type=positive_float, default=10.0,
                        help="seconds to wait for the scheduler")
    add_client_auth_arguments(status)
    status.set_defaults(run=_status)
    logs = sub.add_parser("logs", help="show what functions printed (from a --log-dir)",
                          formatter_class=HELP_FORMAT)
    logs.add_argument("function", nargs="?", default=None,
                      help="only this function's output (default: every function's)")
    logs.add_argument("--log-dir", required=True,
                      help="the log directory of a cluster (`cloudburst local --log-dir`)")
    logs.add_argument("--lines", type=positive_int, default=50, help="how many lines at most")
    logs.set_defaults(run=_logs)
    demo = sub.add_parser("demo", help="run increment -> square, then a causal DAG, on a fresh "
                                       "local cluster", formatter_class=HELP_FORMAT)
    add_common(demo)
    demo.set_defaults(run=_demo)
    keys = sub.add_parser("keys", help=KEYS_HELP, description=KEYS_DESCRIPTION,
                          formatter_class=HELP_FORMAT)
    add_keys_arguments(keys)
    keys.set_defaults(run=lambda a: keys_command(a, "cloudburst keys"))
    from k8s.cli import add_k8s_parser
    add_k8s_parser(sub)
    args = parser.parse_args(argv)
    return exit_quietly_on_broken_pipe(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    try:
        return args.run(args)
    except (CloudburstError, StartupError, KeyFileError, DataDirInUse, ValueError) as e:
        print(f"cloudburst {args.command}: {for_command_line(str(e))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
