"""The one way to build a Kubernetes API client, and the command-line options of a process
that talks to the API.

Contract:
- `connect(kubeconfig=None, context=None)` -> a `kubernetes.client.ApiClient`:
  - from the file `kubeconfig` when given;
  - else from `$KUBECONFIG` (its first file) or `~/.kube/config` when that file exists;
  - else, in a pod (`KUBERNETES_SERVICE_HOST` set), from its ServiceAccount (in-cluster);
  - else `KubernetesConfigError`, naming the file it looked for and that there is no
    in-cluster configuration. A missing or malformed file, or an unknown context, raises
    `KubernetesConfigError` naming the file and the context.
  The client makes one retry on an unreachable server: the caller's deadline decides.
- `add_api_arguments(parser, pods=..., leave_default=...)`: --kubeconfig,
  --pod-startup-timeout, --pod-leave-timeout and --request-timeout, for the processes that
  scale workloads (the Anna monitor, the executor autoscaler).
"""
from __future__ import annotations

import os
from typing import Any, Optional

from runtime.cli import positive_float

from .errors import KubernetesConfigError

__all__ = ["connect", "add_api_arguments"]


def connect(kubeconfig: Optional[str] = None, context: Optional[str] = None) -> Any:
    """A `kubernetes.client.ApiClient`; see the module contract."""
    from kubernetes import client, config
    import yaml
    from kubernetes.config.config_exception import ConfigException
    cfg = client.Configuration()
    default = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(":")[0])
    path = kubeconfig or default
    try:
        if kubeconfig is None and not os.path.exists(default):
            if not os.environ.get("KUBERNETES_SERVICE_HOST"):
                raise KubernetesConfigError(
                    f"kubeconfig {default}: no such file, and no in-cluster configuration "
                    f"(not running in a pod): pass --kubeconfig or set KUBECONFIG", None, context)
            path = "the in-cluster configuration"
            config.load_incluster_config(client_configuration=cfg)
        else:
            if not os.path.exists(path):
                raise KubernetesConfigError(f"kubeconfig {path}: no such file (pass --kubeconfig "
                                            f"or set KUBECONFIG)", path, context)
            config.load_kube_config(config_file=path, context=context,
                                    client_configuration=cfg, persist_config=False)
    except KubernetesConfigError:
        raise
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError,
            AttributeError) as e:
        where = path if path.startswith("the ") else f"kubeconfig {path}"
        raise KubernetesConfigError(f"{where}"
                                    + (f" (context {context!r})" if context else "")
                                    + f": cannot be used: {' '.join(str(e).split())}",
                                    None if path.startswith("the ") else path,
                                    context) from None
    cfg.retries = 1     # fail fast on an unreachable server; the caller's deadline decides
    return client.ApiClient(cfg)


def add_api_arguments(parser: Any, *, pods: str, leave_default: float) -> None:
    """The command-line options of a process that scales workloads through the API:
    --kubeconfig, --pod-startup-timeout, --pod-leave-timeout (default `leave_default`, above
    the grace period of the `pods` it removes) and --request-timeout."""
    parser.add_argument("--kubeconfig", metavar="PATH", default=None,
                        help="a kubeconfig file, to run outside the cluster; default: "
                             "$KUBECONFIG or ~/.kube/config if present, else the pod's "
                             "ServiceAccount (in-cluster configuration)")
    parser.add_argument("--pod-startup-timeout", type=positive_float, default=120.0,
                        metavar="S", help=f"seconds from a scale-up to a Ready {pods} pod "
                                          f"before the start fails and is withdrawn")
    parser.add_argument("--pod-leave-timeout", type=positive_float, default=leave_default,
                        metavar="S", help=f"seconds from a removal until the pod must be gone "
                                          f"(above the {pods} pods' "
                                          f"terminationGracePeriodSeconds)")
    parser.add_argument("--request-timeout", type=positive_float, default=10.0, metavar="S",
                        help="seconds for every Kubernetes API request")
