"""`python -m executor --config PATH|JSON [--FIELD VALUE ...]`: run one executor node (node
cache + workers) until SIGTERM.

The configuration is a `NodeConfig` (executor/config.py), read from a JSON file or inline
JSON; every field is also a flag (`--node-id`, `--workers`, ...) that overrides it
(`runtime.config`). A bad field ends with a one-line error naming it (status 2).

Prints one `READY {"node_id", "cache_address", "workers": [...]}` line once every
worker is ready (and, with `--ready-file`, writes it to that file).

With `--standby --workers N` (and no other configuration) it is a spare node started ahead: it
imports its code and forks N workers (executor/prefork.py), then waits for its NodeConfig
as one JSON line on stdin, holding no key and no socket until then; it exits quietly if
stdin closes first (`cloudburst/standby.py`).
"""
from __future__ import annotations

import os
import signal
import sys

from runtime.auth import KeyFileError
from runtime.config import ConfigError, config_from_args, role_parser
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready

from .config import NodeConfig
from .node import ExecutorNode
from .prefork import Preforked


def main() -> None:
    parser = role_parser(NodeConfig, "python -m executor", __doc__)
    parser.add_argument("--ready-file", help="also write the readiness JSON here (a probe "
                        "for Kubernetes: written once every worker is ready)")
    parser.add_argument("--standby", action="store_true", help="start ahead: fork --workers "
                        "workers, then wait for the NodeConfig as one JSON line on stdin")
    args = parser.parse_args()
    given = set(vars(args)) - {"ready_file", "standby", "workers", "config"}
    if args.standby and (args.config or given):
        parser.error("--standby takes only --workers (the configuration comes on stdin)")
    raise_descriptor_limit()
    if args.standby:
        # workers forked now, before any key is read, socket opened or thread started,
        # need no interpreter start or imports of their own (executor/prefork.py)
        preforked = Preforked.fork(getattr(args, "workers", 0))
        line = sys.stdin.readline()
        if not line.strip():           # the launcher is gone, or never needed this node
            preforked.close()
            return
        config = NodeConfig.from_json(line)
        if config.worker_host or config.workers < len(preforked):
            preforked.close()          # (a worker host runs the workers; or fewer wanted)
    else:
        try:
            config = config_from_args(NodeConfig, args)
        except ConfigError as e:
            parser.error(str(e))
        preforked = Preforked.fork(0 if config.worker_host else config.workers)
    log = configure_logging(config.log_level, f"node {config.node_id}")
    try:
        node = ExecutorNode(config, preforked)
    except KeyFileError as e:          # a missing or malformed key file, named
        log.error("cannot start: %s", e)
        preforked.close()
        sys.exit(2)
    signal.signal(signal.SIGTERM, lambda *_: node.stop())
    signal.signal(signal.SIGINT, lambda *_: node.stop())
    try:
        workers = node.start_workers()
    except BaseException:
        node.close()
        raise
    announce_ready({"node_id": config.node_id, "cache_address": node.cache_address,
                    "pid": os.getpid(), "workers": workers}, args.ready_file)
    log.info("node %s ready with %d workers", config.node_id, len(workers))
    node.serve()
    log.info("node %s stopped", config.node_id)


if __name__ == "__main__":
    main()

