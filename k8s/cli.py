"""`cloudburst k8s`: deploy, scale, inspect and remove the platform on a Kubernetes cluster.

    cloudburst k8s deploy [--kubeconfig F] [--context C] [--namespace NS] [--image IMAGE]
                          [--key-dir DIR] [--client NAME] [--executors N] [--memory-nodes N]
                          [--disk-nodes N] [--wait SECONDS]
    cloudburst k8s status [--json]
    cloudburst k8s scale ROLE N [--wait SECONDS]          ROLE: executor, memory, disk
    cloudburst k8s delete [--keep-namespace] [--wait SECONDS]

Every subcommand takes --kubeconfig, --context, --namespace, --request-timeout and
--log-level. A failure
prints one line naming the object and the reason (`cloudburst k8s deploy: apply deployments
cloudburst/anna-memory: forbidden (403): ...`) and exits 1; no traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from runtime.auth import KeyFileError
from runtime.cli import HELP_FORMAT, log_level, non_negative_float, non_negative_int, \
    positive_float
from runtime.logs import LEVELS, configure_logging

from .api import connect
from .errors import KubernetesError, RoleRefused, WaitTimeout
from .manifests import ManifestError
from .deploy import REFUSED, SCALABLE, Platform

__all__ = ["add_k8s_parser"]

class _Help(HELP_FORMAT):
    """HELP_FORMAT without `(default: None)`: those options say what happens without them."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None:
            return action.help or ""
        return super()._get_help_string(action)


ERRORS = (KubernetesError, WaitTimeout, RoleRefused, ManifestError,
          KeyFileError, FileExistsError, ValueError, OSError)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=None, metavar="FILE",
                   help="the kubeconfig to use (default: $KUBECONFIG, else ~/.kube/config; in "
                        "a pod without either, its ServiceAccount)")
    p.add_argument("--context", default=None,
                   help="the kubeconfig context to use (default: its current-context)")
    p.add_argument("--namespace", default="cloudburst",
                   help="the namespace the platform lives in")
    p.add_argument("--request-timeout", type=positive_float, default=10.0, metavar="SECONDS",
                   help="seconds to wait for each answer of the API server")
    p.add_argument("--log-level", type=log_level, default="warning",
                   help=f"log level on stderr ({', '.join(LEVELS)}; debug shows every API "
                        f"request)")


def _platform(args: argparse.Namespace) -> Platform:
    configure_logging(args.log_level, "k8s")
    say = (lambda line: None) if getattr(args, "json", False) else \
        (lambda line: print(line, flush=True))
    return Platform(connect(args.kubeconfig, args.context), args.namespace,
                    request_timeout=args.request_timeout, say=say)


def _deploy(args: argparse.Namespace) -> int:
    replicas = {role: n for role, n in (("executor", args.executors),
                                        ("memory", args.memory_nodes),
                                        ("disk", args.disk_nodes)) if n is not None}
    info = _platform(args).deploy(args.key_dir, image=args.image, replicas=replicas,
                                  client_name=args.client, wait=args.wait)
    print(info.text())
    return 0


def _status(args: argparse.Namespace) -> int:
    from .status import format_status
    status = _platform(args).status()
    if args.json:
        print(json.dumps(status.to_json(), indent=1))
    else:
        print(format_status(status))
    return 0 if status.ready else 3


def _scale(args: argparse.Namespace) -> int:
    status = _platform(args).scale(args.role, args.replicas, wait=args.wait)
    for d in status.deployments:
        if d.name == SCALABLE[args.role]:
            print(d.line())
    return 0


def _delete(args: argparse.Namespace) -> int:
    _platform(args).delete(keep_namespace=args.keep_namespace, wait=args.wait)
    return 0


def _guarded(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except ERRORS as e:
            print(f"cloudburst k8s {args.k8s_command}: {e}".replace("\n", " "), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            # what was applied stays applied; re-running the command continues from there
            print(f"cloudburst k8s {args.k8s_command}: interrupted", file=sys.stderr)
            return 130
    return wrapped


def add_k8s_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `k8s` and its subcommands to the `cloudburst` command's subparsers."""
    k8s = sub.add_parser("k8s", help="deploy, scale, inspect and remove the platform on a "
                                     "Kubernetes cluster", description=__doc__,
                         formatter_class=_Help)
    ksub = k8s.add_subparsers(dest="k8s_command", required=True)

    deploy = ksub.add_parser(
        "deploy", formatter_class=_Help,
        help="create or update the platform and wait until it is Available",
        description="Create the namespace, the keys (if missing) and their Secrets, apply the "
                    "platform's manifests (server-side apply) and wait until every Deployment "
                    "is Available. Re-running it is safe: it updates what changed and keeps "
                    "the replica counts `scale` set unless given here.")
    _common(deploy)
    deploy.add_argument("--image", default=None,
                        help="the platform's image in your registry, e.g. "
                             "registry.example.com/cloudburst:1.0 (default: the manifests' "
                             "localhost/cloudburst:dev, which only a node that has it loaded "
                             "can run)")
    deploy.add_argument("--key-dir", default="cloudburst-keys", metavar="DIR",
                        help="the cluster's key directory (`cloudburst keys`); made with one "
                             "client key pair (--client) if it holds no cluster key pair")
    deploy.add_argument("--client", default="admin", metavar="NAME",
                        help="the client key pair to make when the key directory is new")
    deploy.add_argument("--executors", type=non_negative_int, default=None, metavar="N",
                        help="executor nodes (default: the current count, or the manifests' "
                             "for a new deployment)")
    deploy.add_argument("--memory-nodes", type=non_negative_int, default=None, metavar="N",
                        help="Anna memory-tier nodes (default: current, or the manifests')")
    deploy.add_argument("--disk-nodes", type=non_negative_int, default=None, metavar="N",
                        help="Anna disk-tier nodes (default: current, or the manifests')")
    deploy.add_argument("--wait", type=non_negative_float, default=300.0, metavar="SECONDS",
                        help="seconds to wait for every Deployment to be Available (0: do "
                             "not wait)")
    deploy.set_defaults(run=_guarded(_deploy))

    status = ksub.add_parser(
        "status", formatter_class=_Help,
        help="show Deployments, pods and what is not ready and why (exit status 3 when "
             "something is not ready)")
    _common(status)
    status.add_argument("--json", action="store_true",
                        help="print the status as JSON (deployments, pods, ready)")
    status.set_defaults(run=_guarded(_status))

    scale = ksub.add_parser(
        "scale", formatter_class=_Help,
        help="set the number of executor nodes or Anna memory/disk nodes",
        description="Set a role's replicas through its Deployment's scale subresource. An "
                    "Anna tier (memory, disk) shrinks one node per command and is never "
                    "emptied. Refused roles: "
                    + "; ".join(f"{r} ({why})" for r, why in REFUSED.items()))
    _common(scale)
    scale.add_argument("role", metavar="ROLE",
                       help=f"one of {', '.join(sorted(SCALABLE))}")
    scale.add_argument("replicas", type=non_negative_int, metavar="N",
                       help="the number of pods wanted")
    scale.add_argument("--wait", type=non_negative_float, default=120.0, metavar="SECONDS",
                       help="seconds to wait for the Deployment to be Available at its new "
                            "size (0: do not wait)")
    scale.set_defaults(run=_guarded(_scale))

    delete = ksub.add_parser(
        "delete", formatter_class=_Help,
        help="remove what deploy created",
        description="Delete the platform's objects and its two key Secrets, and the namespace "
                    "if deploy created it. A namespace that existed before deploy is kept. "
                    "The local key directory is kept.")
    _common(delete)
    delete.add_argument("--keep-namespace", action="store_true",
                        help="keep the namespace even if deploy created it")
    delete.add_argument("--wait", type=non_negative_float, default=120.0, metavar="SECONDS",
                        help="seconds to wait until everything is gone, pods included (0: do "
                             "not wait)")
    delete.set_defaults(run=_guarded(_delete))
    return k8s
