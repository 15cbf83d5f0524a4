"""The `anna` command (console entry point `anna=anna_core.cli:main`).

Contract:
- `anna local [--memory-threads N] [--disk-threads N] [--nodes N] [--data-dir D] ...` runs a
  `LocalCluster` in the foreground, prints the routing address (`routing: tcp://...`) and
  stops every process cleanly on Ctrl-C / SIGTERM. Exit status 0 after a clean stop, 1 if
  the cluster failed to start (the typed error is printed).
- `anna demo` starts a small LocalCluster, shows puts/gets of several lattice types, a set
  merge and a causal merge, printing each step, stops the cluster and exits 0 (1 on error).
- `anna keys DIR [--client NAME ...] [--force]` generates CURVE keys (`runtime.auth`); the
  same command as `cloudburst keys`. Exit 1 when it would overwrite a secret key.
- `anna local --autoscale [--slo MS --max-nodes N --provisioning-delay S ...]` adds the
  monitor and the policy engine (`anna_core.monitor`); `--monitor` only observes. Each
  decision is logged with its reason.
- `anna status ADDR [--key-dir D] [--watch S] [--json]` (or `--routing ADDR`, as the other
  commands take it) prints the monitor's latest status (`autoscale/status.py`); exit 1 when
  no monitor has published one.
- Errors are one line naming the command's options (`--key-dir`), not Python's
  (`runtime.auth.for_command_line`); a closed standard output (`anna status | head`) ends
  the command quietly (`runtime.cli.exit_quietly_on_broken_pipe`).
- `anna backup s3://bucket/prefix --routing ADDR [--key-dir D]` and `anna restore ...` copy
  the cluster's keys to S3 and merge them back (`anna_core.backup`), printing progress;
  exit 0 when done, 1 with the typed error printed (a bad location, a missing bucket, a
  corrupted object, ...). AWS credentials and the endpoint come from the standard AWS
  configuration.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, Dict, Optional, Sequence

from runtime.logs import configure_logging
from runtime.auth import for_command_line
from runtime.keys import KEYS_DESCRIPTION, KEYS_HELP, add_keys_arguments, keys_command
from runtime.cli import (HELP_FORMAT, add_common, exit_quietly_on_broken_pipe, non_negative_int,
                         package_version, positive_float, positive_int)

from .autoscale.policy_config import PolicyConfig
from .config import (DEFAULT_DISK_SYNC, DEFAULT_DISK_SYNC_INTERVAL_MS, DEFAULT_MAX_VALUE_BYTES,
                     DISK_SYNC_MODES)
from .errors import AnnaError, StartupError

__all__ = ["main"]


def _cmd_local(args: argparse.Namespace) -> int:
    from .cluster import LocalCluster
    stopping = threading.Event()

    def on_signal(_signum, _frame):
        stopping.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.autoscale or args.monitor:
        # the monitor runs in this process: its decisions, with their reasons, go to stderr
        configure_logging("info", "anna local", family="anna")
    try:
        cluster = LocalCluster(memory_threads=args.memory_threads,
                               disk_threads=args.disk_threads, nodes=args.nodes,
                               data_dir=args.data_dir, gossip_period_ms=args.gossip_period_ms,
                               max_value_bytes=args.max_value_bytes, log_level=args.log_level,
                               startup_timeout=args.startup_timeout,
                               fault_tolerance=args.fault_tolerance,
                               heartbeat_period=args.heartbeat_period,
                               heartbeat_timeout=args.heartbeat_timeout,
                               auth=not args.no_auth, key_dir=args.key_dir,
                               autoscale=_policy(args) if args.autoscale else False,
                               monitor=args.monitor,
                               provisioning_delay=args.provisioning_delay,
                               disk_sync=args.disk_sync,
                               disk_sync_interval_ms=args.disk_sync_interval)
    except ValueError as e:
        print(f"anna local: error: {e}", file=sys.stderr)
        return 2
    try:
        cluster.start()
    except (AnnaError, StartupError) as e:
        print(f"anna local: cluster did not start: {e}", file=sys.stderr)
        return 1
    try:
        print(f"routing: {cluster.routing_address}", flush=True)
        print(f"replicas per key: {cluster.replication.memory_global or cluster.replication.disk_global}", flush=True)
        for node_id in cluster.node_ids:
            print(f"node {node_id}: {' '.join(cluster.worker_addresses(node_id))}", flush=True)
        if cluster.monitor is not None:
            auth = f" --key-dir {cluster.key_dir}" if cluster.key_dir else ""
            print(f"monitor: every {cluster.policy.monitoring_period:g} s, autoscaling "
                  f"{'on' if cluster.manager else 'off'}; watch it with: anna status --routing "
                  f"'{cluster.routing_address}'{auth} --watch 2", flush=True)
        if cluster.client_auth is not None:
            print(f"keys: {cluster.key_dir} (clients connect as "
                  f"{cluster.client_auth.identity!r})", flush=True)
            print(f"connect with anna_core.Client(routing address, auth=runtime.auth.AuthConfig("
                  f"{cluster.key_dir!r}, {cluster.client_auth.identity!r})); Ctrl-C stops",
                  flush=True)
        else:
            print("WARNING: authentication is off; anyone who can reach these ports can read, "
                  "write and delete every key", file=sys.stderr, flush=True)
            print("connect with anna_core.Client(routing address); Ctrl-C stops", flush=True)
        while not stopping.wait(0.5):
            dead = [n for n in cluster.node_ids if not cluster.is_running(n)
                    and (cluster.manager is None or not cluster.manager.owns(n))]
            if dead:
                print(f"anna local: node(s) {', '.join(dead)} exited; stopping",
                      file=sys.stderr, flush=True)
                for n in dead:
                    tail = cluster.log_tail(n)
                    if tail:
                        print(f"--- {n} stderr ---\n{tail}", file=sys.stderr, flush=True)
                return 1
    finally:
        print("stopping...", flush=True)
        cluster.stop()
        print("stopped", flush=True)
    return 0


def _policy(args: argparse.Namespace) -> Dict[str, Any]:
    """The knobs given on the command line; LocalCluster derives fault tolerance and the
    minimum node counts from the cluster itself."""
    return {"latency_slo": args.slo / 1000.0, "max_nodes": args.max_nodes,
            "monitoring_period": args.period, "grace_period": args.grace}


def _cmd_status(args: argparse.Namespace) -> int:
    import json
    import time
    from runtime.auth import AuthConfig
    from .autoscale.reports import STATUS_KEY
    from .autoscale.status import format_status
    from .client import Client
    from .errors import KeyNotFound
    auth = None
    if args.key_dir:
        auth = AuthConfig(args.key_dir, f"client:{args.client}" if args.client else "cluster")
    try:
        with Client(args.routing, auth=auth, timeout=args.timeout, retries=0) as kvs:
            while True:
                try:
                    status = json.loads(kvs.get(STATUS_KEY))
                except KeyNotFound:
                    print("anna status: no monitor has published a status (run the cluster "
                          "with --autoscale or --monitor)", file=sys.stderr)
                    return 1
                print(json.dumps(status, indent=1) if args.json else format_status(status),
                      flush=True)
                if not args.watch:
                    return 0
                print(flush=True)
                time.sleep(args.watch)   # the refresh interval of a live view
    except KeyboardInterrupt:
        return 0
    except (AnnaError, ValueError) as e:
        print(f"anna status: {for_command_line(str(e))}", file=sys.stderr)
        return 1


def _cmd_backup_or_restore(args: argparse.Namespace) -> int:
    from runtime.auth import AuthConfig
    from . import backup as backups
    configure_logging(args.log_level, f"anna {args.command}", family="anna")
    auth = AuthConfig(args.key_dir) if args.key_dir else None

    def say(text: str) -> None:
        print(text, flush=True)

    try:
        if args.command == "backup":
            backups.backup(args.routing, args.location, auth=auth,
                           part_bytes=int(args.part_mb * (1 << 20)), timeout=args.timeout,
                           profile=args.profile, endpoint_url=args.endpoint_url, progress=say,
                           ip=args.ip)
        else:
            backups.restore(args.routing, args.location, auth=auth, verify=args.verify,
                            timeout=args.timeout, profile=args.profile,
                            endpoint_url=args.endpoint_url, progress=say, ip=args.ip)
    except KeyboardInterrupt:
        print(f"anna {args.command}: interrupted", file=sys.stderr)
        return 1
    except (AnnaError, ValueError, OSError) as e:
        print(f"anna {args.command}: {type(e).__name__}: {for_command_line(str(e))}",
              file=sys.stderr)
        return 1
    return 0


def _add_backup_parser(sub: Any, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text + ". AWS credentials, "
                       "region and endpoint come from the standard AWS configuration "
                       "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3 or "
                       "AWS_ENDPOINT_URL, ~/.aws/config, AWS_PROFILE).",
                       formatter_class=HELP_FORMAT)
    p.add_argument("location", metavar="s3://BUCKET/PREFIX",
                   help="where the backup is (the bucket must exist)")
    p.add_argument("--routing", required=True, action="append",
                   help="routing address (as `anna local` prints it, with its #k= key); "
                        "repeat for several routings")
    p.add_argument("--key-dir", help="the cluster's key directory: backups use the cluster "
                                     "key (default: no authentication)")
    p.add_argument("--timeout", type=positive_float, default=5.0,
                   help="seconds to wait for one answer from a worker or routing")
    p.add_argument("--ip", default="127.0.0.1",
                   help="the address this command's reply sockets bind and give to the "
                        "cluster; its nodes must reach it (this machine's address on the "
                        "cluster's network, or a pod's address)")
    p.add_argument("--profile", default=None,
                   help="AWS profile to use (default: AWS_PROFILE or the default profile)")
    p.add_argument("--endpoint-url", default=None,
                   help="S3 endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or AWS)")
    if name == "backup":
        p.add_argument("--part-mb", type=positive_float, default=16.0,
                       help="size at which a worker's keys go on in a new object (MiB)")
    else:
        p.add_argument("--verify", choices=("first", "each"), default="first",
                       help="'first': check every object's checksum before writing any key; "
                            "'each': check each object just before writing its keys "
                            "(downloads once)")
    add_common(p)
    p.set_defaults(func=_cmd_backup_or_restore)


def _cmd_demo(args: argparse.Namespace) -> int:
    from . import (LocalCluster, MapLattice, MaxLattice, MultiKeyCausalLattice,
                   OrderedSetLattice, PriorityLattice, SetLattice, SingleKeyCausalLattice)

    def say(text: str) -> None:
        print(text, flush=True)

    say(f"starting a local Anna cluster: {args.nodes} memory node(s) x "
        f"{args.memory_threads} thread(s)")
    try:
        with LocalCluster(memory_threads=args.memory_threads, nodes=args.nodes,
                          startup_timeout=args.startup_timeout) as cluster:
            say(f"routing at {cluster.routing_address}")
            kvs = cluster.client()

            kvs.put("greeting", b"hello, anna")
            say("put greeting = b'hello, anna'   (bytes are last-writer-wins)")
            say(f"get greeting -> {kvs.get('greeting')!r}")
            kvs.put("greeting", b"hello again")
            say(f"put greeting = b'hello again'; get -> {kvs.get('greeting')!r}")

            kvs.put("tags", SetLattice([b"red", b"green"]))
            kvs.put("tags", SetLattice([b"blue"]))
            say("put tags = {red, green}, then put tags = {blue}   (a set merges by union)")
            say(f"get tags -> {sorted(kvs.get('tags').reveal())}")

            kvs.put("high-score", MaxLattice(40))
            kvs.put("high-score", MaxLattice(12))
            say(f"put high-score 40 then 12 (max lattice) -> {kvs.get('high-score').reveal()}")

            kvs.put("counts", MapLattice({b"a": 1, b"b": 5}))
            kvs.put("counts", MapLattice({b"a": 3}))
            say(f"map {{a:1, b:5}} merged with {{a:3}} -> "
                f"{dict(sorted(kvs.get('counts').reveal().items()))}")

            kvs.put("queue", OrderedSetLattice([b"c", b"a"]))
            kvs.put("queue", OrderedSetLattice([b"b"]))
            say(f"ordered set [c, a] + [b] -> {kvs.get('queue').reveal()}")

            kvs.put("best-route", PriorityLattice(7.5, b"via-x"))
            kvs.put("best-route", PriorityLattice(2.0, b"via-y"))
            say(f"priority 7.5/via-x vs 2.0/via-y (lowest wins) -> "
                f"{kvs.get('best-route').reveal()}")

            kvs.put("doc", SingleKeyCausalLattice({"alice": 1}, [b"draft by alice"]))
            kvs.put("doc", SingleKeyCausalLattice({"bob": 1}, [b"draft by bob"]))
            doc = kvs.get("doc")
            say("causal: alice writes with clock {alice:1}, bob concurrently with {bob:1}")
            say(f"  concurrent versions are both kept -> {doc.reveal()}, clock {doc.vector_clock}")
            kvs.put("doc", SingleKeyCausalLattice({"alice": 2, "bob": 1}, [b"merged by alice"]))
            doc = kvs.get("doc")
            say(f"  alice writes {{alice:2, bob:1}} (dominates both) -> {doc.reveal()}, "
                f"clock {doc.vector_clock}")

            kvs.put("post", MultiKeyCausalLattice({"alice": 1}, {"doc": {"alice": 2, "bob": 1}},
                                                  [b"see the merged doc"]))
            post = kvs.get("post")
            say(f"multi-key causal post with dependencies {post.dependencies} -> {post.reveal()}")

            kvs.delete("greeting")
            try:
                kvs.get("greeting")
                say("delete greeting: still there?!")
                return 1
            except KeyError:
                say("delete greeting; get greeting -> KeyNotFound")
            say("stopping the cluster")
    except (AnnaError, StartupError) as e:
        print(f"anna demo failed: {e}", file=sys.stderr)
        return 1
    say("demo done")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the `anna` command."""
    p = argparse.ArgumentParser(prog="anna", description="The Anna lattice key-value store",
                                formatter_class=HELP_FORMAT)
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    local = sub.add_parser("local", help="run a local cluster in the foreground",
                           formatter_class=HELP_FORMAT)
    local.add_argument("--memory-threads", type=non_negative_int, default=1,
                       help="worker threads per memory-tier node (0: no memory tier)")
    local.add_argument("--disk-threads", type=non_negative_int, default=0,
                       help="worker threads per disk-tier node (0: no disk tier)")
    local.add_argument("--nodes", type=positive_int, default=1, help="nodes per tier")
    local.add_argument("--fault-tolerance", type=non_negative_int, default=None, metavar="K",
                       help="node crashes every key survives (K+1 replicas); default 1 with "
                            "two or more nodes per tier, else 0")
    local.add_argument("--heartbeat-period", type=positive_float, default=1.0,
                       help="seconds between a node's heartbeats to routing")
    local.add_argument("--heartbeat-timeout", type=positive_float, default=3.0,
                       help="seconds of silence after which a node is declared failed")
    local.add_argument("--data-dir", help="where disk nodes keep their data (default: temporary)")
    local.add_argument("--disk-sync", choices=DISK_SYNC_MODES, default=DEFAULT_DISK_SYNC,
                       help="when disk nodes fsync their write-ahead log: 'interval' (every "
                            "--disk-sync-interval ms: an OS crash loses at most that last "
                            "interval of acknowledged writes), 'always' (before each write is "
                            "acknowledged) or 'none' (left to the OS); every mode survives a "
                            "process crash")
    local.add_argument("--disk-sync-interval", type=positive_int,
                       default=DEFAULT_DISK_SYNC_INTERVAL_MS, metavar="MS",
                       help="the group-commit period of --disk-sync interval, in ms")
    local.add_argument("--gossip-period-ms", type=positive_int, default=100,
                       help="the workers' epoch: how often replicas exchange merged updates")
    local.add_argument("--max-value-bytes", type=positive_int, default=DEFAULT_MAX_VALUE_BYTES,
                       help="largest value a worker accepts")
    local.add_argument("--startup-timeout", type=positive_float, default=30.0,
                       help="seconds every process has to report ready")
    local.add_argument("--key-dir", help="the cluster's CURVE keys (`anna keys DIR --client "
                                         "NAME`); default: fresh keys in a temporary directory")
    local.add_argument("--no-auth", action="store_true",
                       help="run every socket unauthenticated and unencrypted (benchmarks "
                            "only: anyone who can reach the ports controls the cluster)")
    scaling = local.add_argument_group("monitoring and autoscaling")
    scaling.add_argument("--autoscale", action="store_true",
                         help="run the monitor and the policy engine: nodes are added and "
                              "removed, keys replicated and moved between tiers by themselves")
    scaling.add_argument("--monitor", action="store_true",
                         help="report and summarise statistics (for `anna status`) without "
                              "acting on them")
    defaults = PolicyConfig()
    scaling.add_argument("--slo", type=positive_float, default=defaults.latency_slo * 1000,
                         metavar="MS",
                         help="latency objective in milliseconds (the clients' mean latency)")
    scaling.add_argument("--max-nodes", type=positive_int, default=None,
                         help="never run more nodes than this (default: no bound)")
    scaling.add_argument("--period", type=positive_float, default=defaults.monitoring_period,
                         help="monitoring period T in seconds (the paper: 15)")
    scaling.add_argument("--grace", type=positive_float, default=defaults.grace_period,
                         help="seconds after a node change before the next (the original "
                              "monitor: 120)")
    scaling.add_argument("--provisioning-delay", type=float, default=0.0, metavar="S",
                         help="start an added node this many seconds late (stands in for a VM "
                              "or pod boot)")
    add_common(local)
    local.set_defaults(func=_cmd_local)

    status = sub.add_parser("status", help="show the monitor's view of a cluster: tiers, "
                                           "occupancy, latency, hot keys, decisions",
                            formatter_class=HELP_FORMAT)
    status.add_argument("address", nargs="*", metavar="ADDRESS",
                        help="routing address (as `anna local` prints it, with its #k= key); "
                             "several for several routings")
    status.add_argument("--routing", action="append", default=None,
                        help="the same as ADDRESS (may be repeated)")
    status.add_argument("--key-dir", help="the cluster's key directory")
    status.add_argument("--client", default="local", metavar="NAME",
                        help="the client key pair to use from --key-dir (empty: the cluster "
                             "key)")
    status.add_argument("--watch", type=positive_float, default=None, metavar="S",
                        help="print the status again every S seconds until Ctrl-C")
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    status.add_argument("--timeout", type=positive_float, default=5.0,
                        help="seconds to wait for the KVS")
    status.set_defaults(func=_cmd_status)

    _add_backup_parser(sub, "backup", "copy every key of a running cluster to S3")
    _add_backup_parser(sub, "restore", "merge a backup from S3 into a running cluster")

    demo = sub.add_parser("demo", help="start a local cluster and show a few operations",
                          formatter_class=HELP_FORMAT)
    demo.add_argument("--memory-threads", type=positive_int, default=1,
                      help="worker threads of the memory-tier node")
    demo.add_argument("--nodes", type=positive_int, default=1, help="memory-tier nodes")
    demo.add_argument("--startup-timeout", type=positive_float, default=30.0,
                      help="seconds every process has to report ready")
    demo.set_defaults(func=_cmd_demo)

    keys = sub.add_parser("keys", help=KEYS_HELP, description=KEYS_DESCRIPTION,
                          formatter_class=HELP_FORMAT)
    add_keys_arguments(keys)
    keys.set_defaults(func=lambda a: keys_command(a, "anna keys"))

    args = p.parse_args(argv)
    if args.command == "status":
        args.routing = (args.routing or []) + args.address     # the flag and the positional form
        if not args.routing:
            status.error("give the routing address: anna status ADDRESS (or --routing ADDRESS)")
    return exit_quietly_on_broken_pipe(lambda: args.func(args))


if __name__ == "__main__":
    sys.exit(main())
