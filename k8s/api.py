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
- `ApiSettings`: the configuration fields (`runtime.config`) of the processes that scale
  workloads (the Anna monitor, the executor autoscaler): kubeconfig, pod_startup_timeout,
  pod_leave_timeout and request_timeout; their configuration classes derive from it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from runtime.config import knob, positive

from .errors import KubernetesConfigError

__all__ = ["connect", "ApiSettings"]


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


@dataclass
class ApiSettings:
    """The settings of a process that scales workloads through the API (the Anna monitor,
    the executor autoscaler): the fields their configuration objects share
    (`runtime.config`). A role redeclares `pod_leave_timeout` with a default above the grace
    period of the pods it removes."""

    kubeconfig: Optional[str] = knob(None, help="a kubeconfig file, to run outside the "
                                                "cluster (default: $KUBECONFIG or "
                                                "~/.kube/config if present, else the pod's "
                                                "ServiceAccount)")
    pod_startup_timeout: float = knob(120.0, help="seconds from a scale-up to a Ready pod "
                                                  "before the start fails and is withdrawn")
    pod_leave_timeout: float = knob(60.0, help="seconds from a removal until the pod must be "
                                               "gone (above its terminationGracePeriodSeconds)")
    request_timeout: float = knob(10.0, help="seconds for every Kubernetes API request")

    def check_api_settings(self) -> None:
        """Raise ValueError naming the first timeout that is not a number > 0."""
        positive(type(self).__name__, self, ("pod_startup_timeout", "pod_leave_timeout",
                                             "request_timeout"))
