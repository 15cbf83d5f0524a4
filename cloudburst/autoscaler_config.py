"""The configuration of the executor autoscaler process (the "executor autoscaler" role).

Contract: `ExecutorAutoscalerConfig` is read by `python -m cloudburst.autoscaler --config
PATH|JSON`, every field also a flag that overrides it (`runtime.config`). It names the
schedulers to sample, the executor Deployment whose pods are the executor nodes
(`kubernetes_namespace`, `executor_deployment`, the API client's `kubeconfig` and
timeouts), and `policy_config`, ExecutorPolicyConfig knobs; `policy()` is the
ExecutorPolicyConfig they make (scale-to-zero refused: `min_nodes` >= 1). A bad field raises
ValueError naming it (a `runtime.config.ConfigError` through the loader).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional

from k8s.api import ApiSettings
from k8s.names import EXECUTOR
from runtime.cli import knobs_from_json
from runtime.config import knob, positive

from .executor_policy import ExecutorPolicyConfig

__all__ = ["ExecutorAutoscalerConfig", "executor_policy_of"]


def executor_policy_of(knobs: Any, where: str = "policy_config") -> ExecutorPolicyConfig:
    """ExecutorPolicyConfig from its knobs (a mapping, or a JSON object as text; empty: the
    defaults); ValueError naming a bad one."""
    # one check of the knobs' names, whichever form they come in
    knobs = knobs_from_json(knobs if isinstance(knobs, str) else json.dumps(dict(knobs)),
                            ExecutorPolicyConfig, where)
    config = ExecutorPolicyConfig(**knobs)   # type: ignore[arg-type]
    if config.min_nodes < 1:
        # the manager never removes the last node (LastNode), and a call needs a node
        raise ValueError(f"{where}: min_nodes must be at least 1 (a call needs an executor "
                         f"node to run on; scale-to-zero is not supported)")
    return config


@dataclass
class ExecutorAutoscalerConfig(ApiSettings):
    """One executor autoscaler process on Kubernetes."""

    ROLE: ClassVar[str] = "executor autoscaler"

    kubernetes_namespace: str = knob("", help="the executor Deployment's namespace "
                                              "(required)")
    schedulers: List[str] = knob(factory=list, help="the schedulers' addresses (with key_dir, "
                                                    "each carries #k=KEY)")
    executor_deployment: str = knob(EXECUTOR, help="the executor nodes' Deployment")
    ip: str = knob("127.0.0.1", help="the address this process' answer sockets bind; the "
                                     "schedulers must reach it (a pod's own address)")
    key_dir: Optional[str] = knob(None, help="the cluster's key directory: the autoscaler "
                                             "speaks to the schedulers as the cluster")
    policy_config: Dict[str, Any] = knob(factory=dict, help="ExecutorPolicyConfig knobs as a "
                                                            "JSON object, e.g. {\"min_nodes\": "
                                                            "1, \"max_nodes\": 4}")
    # (kubeconfig, pod_startup_timeout, pod_leave_timeout, request_timeout: ApiSettings)
    status_timeout: float = knob(2.0, help="seconds to wait for a scheduler's status answer")
    log_level: str = knob("info", help="debug, info, warning or error")

    def __post_init__(self) -> None:
        if not self.schedulers:
            raise ValueError("ExecutorAutoscalerConfig.schedulers: give at least one "
                             "scheduler address")
        if not self.kubernetes_namespace:
            raise ValueError("ExecutorAutoscalerConfig.kubernetes_namespace must name the "
                             "executor Deployment's namespace")
        positive("ExecutorAutoscalerConfig", self, ("status_timeout",))
        self.check_api_settings()
        self.policy()          # a bad knob is refused now, naming it

    def policy(self) -> ExecutorPolicyConfig:
        """The ExecutorPolicyConfig of `policy_config` (ValueError naming a bad knob)."""
        return executor_policy_of(self.policy_config, "ExecutorAutoscalerConfig.policy_config")
