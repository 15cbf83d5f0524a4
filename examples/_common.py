"""Shared by the examples: connect to `--address` or start a LocalCluster for the run."""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cloudburst  # noqa: E402


@contextlib.contextmanager
def connect(description: str, executors_per_node: int = 3, executor_nodes: int = 1,
            **cluster_options):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", help="a running cluster's scheduler address "
                        "(e.g. from `cloudburst local`); default: start a LocalCluster")
    args = parser.parse_args()
    if args.address:
        with cloudburst.Client(args.address) as client:
            yield client
    else:
        with cloudburst.LocalCluster(executor_nodes=executor_nodes,
                                     executors_per_node=executors_per_node,
                                     **cluster_options) as cluster:
            yield cluster.client()
