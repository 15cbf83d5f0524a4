"""`python -m executor --config JSON`: run one executor node (node cache + workers) until SIGTERM.

Prints one `READY {"node_id", "cache_address", "workers": [...]}` line once every
worker is ready (and, with `--ready-file`, writes it to that file).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from runtime.auth import KeyFileError
from runtime.limits import raise_descriptor_limit
from runtime.logs import configure_logging
from runtime.process import announce_ready

from .config import NodeConfig
from .node import ExecutorNode


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m executor", description=__doc__)
    parser.add_argument("--config", required=True, help="NodeConfig as JSON")
    parser.add_argument("--ready-file", help="also write the readiness JSON here (a probe "
                        "for Kubernetes: written once every worker is ready)")
    args = parser.parse_args()
    config = NodeConfig.from_json(args.config)
    log = configure_logging(config.log_level, f"node {config.node_id}")
    raise_descriptor_limit()
    try:
        node = ExecutorNode(config)
    except KeyFileError as e:          # a missing or malformed key file, named
        log.error("cannot start: %s", e)
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

