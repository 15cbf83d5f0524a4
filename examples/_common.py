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
    parser.add_argument("--key-dir", help="with --address: the key directory `cloudburst "
                        "local` prints (the cluster's public key and your client key pair)")
    parser.add_argument("--client", default="local", metavar="NAME",
                        help="with --key-dir: the client key pair to use (default: local)")
    args = parser.parse_args()
    if args.address:
        auth = cloudburst.AuthConfig(args.key_dir, f"client:{args.client}") \
            if args.key_dir else None
        with cloudburst.Client(args.address, auth=auth) as client:
            yield client
    else:
        with cloudburst.LocalCluster(executor_nodes=executor_nodes,
                                     executors_per_node=executors_per_node,
                                     **cluster_options) as cluster:
            yield cluster.client()
