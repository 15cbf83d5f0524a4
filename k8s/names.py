"""The platform's workload names on Kubernetes: one definition, read by the entrypoint, the
CLI, the monitor's and the autoscaler's defaults. They match the objects in `k8s/base/`
(tests/test_k8s_manifests.py checks that each names an object of the manifests)."""
from __future__ import annotations

__all__ = ["ROUTING", "MEMORY", "DISK", "DISK_SCALED", "MONITOR", "SCHEDULER", "EXECUTOR", "AUTOSCALER",
           "SCHEDULER_SERVICE", "TIER_WORKLOADS", "NAMESPACE"]

NAMESPACE = "cloudburst"             # the namespace `k8s/kustomization.yaml` deploys into
ROUTING = "anna-routing"
MEMORY = "anna-memory"               # the memory tier's nodes
DISK = "anna-disk"                   # the disk tier's nodes (a StatefulSet)
DISK_SCALED = "statefulset/" + DISK  # the disk tier as the node pools scale it (k8s/pods.py)
MONITOR = "anna-monitor"
SCHEDULER = "cloudburst-scheduler"
EXECUTOR = "cloudburst-executor"     # the executor nodes
AUTOSCALER = "cloudburst-autoscaler"
SCHEDULER_SERVICE = "cloudburst-scheduler"
# Anna's tiers -> their workloads.
TIER_WORKLOADS = {"memory": MEMORY, "disk": DISK}
