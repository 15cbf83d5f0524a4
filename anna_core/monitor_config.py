"""The configuration of the Anna monitor process (the "anna monitor" role).

Contract: `MonitorConfig` is read by `python -m anna_core.monitor --config PATH|JSON`, every
field also a flag that overrides it (`runtime.config`). It names the routings to read the
reports through, the monitoring period (which must equal the nodes' `report_period`),
optional scheduled backups, and, with `autoscale`, the Kubernetes Deployments whose pods
are the nodes (`kubernetes_namespace`, `memory_deployment`, `disk_deployment`, the API
client's `kubeconfig` and timeouts; an observing monitor has a namespace too, a pod's own,
and never calls the API). `policy_config` holds PolicyConfig knobs
(anna_core/autoscale/policy_config.py) other than the monitoring period; `policy()` is the
PolicyConfig they make. A bad or inconsistent field raises ValueError naming it (a
`runtime.config.ConfigError` through the loader).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional

from k8s.api import ApiSettings
from k8s.names import DISK_SCALED as DISK_WORKLOAD, MEMORY as MEMORY_WORKLOAD
from runtime.config import knob, positive

from .autoscale.policy_config import PolicyConfig

__all__ = ["MonitorConfig"]

_TUPLE_KNOBS = ("memory_storage_bounds", "disk_storage_bounds", "latency_bounds",
                "compute_bounds")


@dataclass
class MonitorConfig(ApiSettings):
    """One monitor process: observes a cluster's reports; with `autoscale`, acts on them."""

    ROLE: ClassVar[str] = "anna monitor"

    routing: List[str] = knob(factory=list, help="routing address(es) (with key_dir, each "
                                                 "carries #k=KEY)")
    key_dir: Optional[str] = knob(None, help="the cluster's key directory (the monitor uses "
                                             "the cluster key)")
    period: float = knob(PolicyConfig().monitoring_period,
                         help="monitoring period T in seconds (the nodes' report_period)")
    ip: str = knob("127.0.0.1", help="the address this process' reply sockets bind and give "
                                     "to routing and the nodes (a pod's own address)")
    log_level: str = knob("info", help="debug, info, warning or error")
    backup_to: Optional[str] = knob(None, help="back the cluster up under this s3://BUCKET/"
                                               "PREFIX (AWS settings from the standard AWS "
                                               "configuration)")
    backup_every: float = knob(24 * 3600.0, help="seconds between scheduled backups")
    policy_config: Dict[str, Any] = knob(factory=dict,
                                         help="PolicyConfig knobs as a JSON object, e.g. "
                                              "{\"grace_period\": 60, \"max_nodes\": 6}; the "
                                              "monitoring period is `period`")
    autoscale: bool = knob(False, help="carry the policy's decisions out (replication through "
                                       "routing, nodes through Kubernetes); needs "
                                       "kubernetes_namespace")
    kubernetes_namespace: Optional[str] = knob(None, help="the namespace of the Anna "
                                                          "workloads (used with autoscale; "
                                                          "a pod gives its own)")
    memory_deployment: str = knob(MEMORY_WORKLOAD, help="the memory tier's workload")
    disk_deployment: str = knob(DISK_WORKLOAD, help="the disk tier's workload: a Deployment or statefulset/NAME (\"\": no disk "
                                                    "tier is managed)")
    # (kubeconfig, pod_startup_timeout, request_timeout: k8s.api.ApiSettings)
    pod_leave_timeout: float = knob(150.0, help="seconds from a removal until the pod must be "
                                                "gone (above the Anna pods' grace period)")

    def __post_init__(self) -> None:
        if not self.routing:
            raise ValueError("MonitorConfig.routing: give at least one routing address")
        positive("MonitorConfig", self, ("period", "backup_every"))
        self.check_api_settings()
        if self.autoscale and not self.kubernetes_namespace:
            raise ValueError("MonitorConfig.kubernetes_namespace is needed with autoscale: the "
                             "monitor process manages Kubernetes Deployments (`anna local "
                             "--autoscale` runs a local cluster's monitor)")
        if self.kubeconfig and not self.autoscale:
            raise ValueError("MonitorConfig.kubeconfig needs autoscale")
        if self.autoscale and not self.memory_deployment:
            raise ValueError("MonitorConfig.memory_deployment must name the memory tier's "
                             "Deployment")
        self.policy()          # a bad knob is refused now, naming it

    def policy(self) -> PolicyConfig:
        """The PolicyConfig of `policy_config` and `period` (ValueError naming a bad knob)."""
        knobs = dict(self.policy_config)
        known = {f.name for f in dataclasses.fields(PolicyConfig)}
        unknown = sorted(set(knobs) - known)
        if unknown:
            raise ValueError(f"MonitorConfig.policy_config: unknown PolicyConfig knob(s) "
                             f"{unknown}; known: {sorted(known)}")
        if "monitoring_period" in knobs and knobs["monitoring_period"] != self.period:
            raise ValueError("MonitorConfig.policy_config may not set monitoring_period: it is "
                             "`period`, which must equal the nodes' report_period")
        for name in _TUPLE_KNOBS:
            if isinstance(knobs.get(name), list):
                knobs[name] = tuple(knobs[name])
        try:
            return PolicyConfig(**{**knobs, "monitoring_period": self.period})
        except (TypeError, ValueError) as e:
            raise ValueError(f"MonitorConfig.policy_config: {e}") from None
