"""What the platform's Deployments and pods say, as plain data: the pure core of
`cloudburst k8s status` and of every wait (deploy, scale).

Contract: `summarize(deployments, pods)` takes `V1Deployment`, `V1StatefulSet` and `V1Pod`
objects (as the kubernetes client returns them, or built by hand in tests) and returns a
`PlatformStatus`; it calls nothing (a StatefulSet counts as a Deployment below). A Deployment
is *done* when the controller has seen its latest spec (observedGeneration), every desired
replica is updated, ready and available, no old replica is left, and (with replicas) its
Available condition is True; a StatefulSet, which has no such condition, when its current
revision is its update revision instead. `why` says what is not done: the
failing conditions and the reasons of its pods that are not Ready (from
`k8s.pods.pod_view`, the node managers' reading of a pod).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from .pods import pod_view

__all__ = ["DeploymentState", "PodState", "PlatformStatus", "summarize", "deployment_state",
           "pod_state", "format_status"]


@dataclass(frozen=True)
class PodState:
    """One pod: `ready` is its Ready condition; `restarts` sums its containers' restarts;
    `reason` is why it is not Ready (empty when it is)."""
    name: str
    deployment: Optional[str]
    phase: str
    ready: bool
    restarts: int
    node: Optional[str]
    terminating: bool = False
    reason: str = ""


@dataclass(frozen=True)
class DeploymentState:
    """One Deployment's counts and whether it is done (see the module contract)."""
    name: str
    desired: int
    ready: int
    available: int
    updated: int
    done: bool
    why: List[str] = field(default_factory=list)

    def line(self) -> str:
        """`name ready/desired (available N)` and, if not done, why."""
        text = (f"{self.name}: {self.ready}/{self.desired} ready, {self.available} available, "
                f"{self.updated} updated")
        return text + ("" if self.done else f" -- not ready: {'; '.join(self.why) or 'pending'}")


@dataclass(frozen=True)
class PlatformStatus:
    """Every Deployment and pod of a namespace; `ready` when every Deployment is done."""
    namespace: str
    deployments: List[DeploymentState]
    pods: List[PodState]

    @property
    def ready(self) -> bool:
        return bool(self.deployments) and all(d.done for d in self.deployments)

    def not_ready(self) -> List[DeploymentState]:
        return [d for d in self.deployments if not d.done]

    def to_json(self) -> Dict[str, Any]:
        return {"namespace": self.namespace, "ready": self.ready,
                "deployments": [asdict(d) for d in self.deployments],
                "pods": [asdict(p) for p in self.pods]}


def _selects(selector: Optional[Dict[str, str]], labels: Optional[Dict[str, str]]) -> bool:
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


def pod_state(pod: Any, deployment: Optional[str]) -> PodState:
    """A `V1Pod` as a PodState (the reason comes from the cluster manager's `pod_view`)."""
    view = pod_view(pod)
    statuses = (pod.status.container_statuses if pod.status is not None else None) or []
    return PodState(name=pod.metadata.name, deployment=deployment, phase=view.phase,
                    ready=view.ready, restarts=sum(s.restart_count or 0 for s in statuses),
                    node=pod.spec.node_name if pod.spec is not None else None,
                    terminating=view.terminating,
                    reason="" if view.ready else (view.reason or _pod_condition(pod)))


def _pod_condition(pod: Any) -> str:
    """The first condition of a pod that is not True, as `Type=Status (reason)`."""
    for c in ((pod.status.conditions if pod.status is not None else None) or []):
        if c.status != "True":
            return f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "")
    return "" if pod.spec is None or pod.spec.node_name else "not scheduled yet"


def deployment_state(d: Any, pods: Iterable[PodState] = ()) -> DeploymentState:
    """A `V1Deployment` as a DeploymentState; `pods` are its pods (for `why`)."""
    spec_replicas = d.spec.replicas if d.spec is not None and d.spec.replicas is not None else 1
    status = d.status
    get = (lambda name: (getattr(status, name, None) or 0)) if status is not None else \
        (lambda name: 0)
    ready, available, updated, total = (get("ready_replicas"), get("available_replicas"),
                                        get("updated_replicas"), get("replicas"))
    observed = (status.observed_generation if status is not None else None) or 0
    conditions = {c.type: c for c in ((status.conditions if status is not None else None) or [])}
    why: List[str] = []
    if observed < (d.metadata.generation or 0):
        why.append("the controller has not seen the latest spec yet")
    for kind in ("ReplicaFailure", "Progressing", "Available"):
        c = conditions.get(kind)
        bad = c is not None and ((kind == "ReplicaFailure" and c.status == "True") or
                                 (kind != "ReplicaFailure" and c.status != "True"))
        if bad:
            why.append(f"{kind}={c.status}: {c.reason or ''}"
                       + (f": {c.message}" if c.message else ""))
    stateful = _is_statefulset(d)
    if stateful and status is not None and status.update_revision and \
            status.current_revision != status.update_revision and spec_replicas:
        why.append(f"rolling update: {updated} of {spec_replicas} pod(s) at the new revision")
    if spec_replicas and "Available" not in conditions and not why and not stateful:
        why.append("no Available condition yet")
    # pods that wait for the same reason are named together, so that a hundred executor
    # pods failing to pull one image make one line, not a hundred
    by_reason: Dict[str, List[str]] = {}
    for p in pods:
        if not p.ready and not p.terminating:
            by_reason.setdefault(p.reason or p.phase, []).append(p.name)
    for reason, names in by_reason.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        why.append(f"{'pod' if len(names) == 1 else 'pods'} {shown}: {reason}")
    done = (observed >= (d.metadata.generation or 0) and updated == spec_replicas
            and ready == spec_replicas and available == spec_replicas and total == spec_replicas
            and (spec_replicas == 0 or (conditions.get("Available") is not None
                                        and conditions["Available"].status == "True")
                 or (stateful and status is not None
                     and status.current_revision == status.update_revision)))
    if not done and not why:
        why.append(f"{total} replica(s) exist, {updated} updated, {available} available of "
                   f"{spec_replicas}")
    return DeploymentState(name=d.metadata.name, desired=spec_replicas, ready=ready,
                           available=available, updated=updated, done=done,
                           why=[] if done else why)


def _is_statefulset(d: Any) -> bool:
    """A V1StatefulSet (no Available condition: done when every replica is Ready at the
    update revision)."""
    return getattr(d.spec, "service_name", None) is not None or \
        getattr(d, "kind", None) == "StatefulSet"


def summarize(namespace: str, deployments: Iterable[Any], pods: Iterable[Any]) -> PlatformStatus:
    """The PlatformStatus of `deployments` and `pods` (V1 objects) of `namespace`; a pod
    belongs to the Deployment whose selector matches its labels."""
    deployments = sorted(deployments, key=lambda d: d.metadata.name)
    selectors = {d.metadata.name: (d.spec.selector.match_labels if d.spec is not None and
                                   d.spec.selector is not None else None) for d in deployments}
    states: List[PodState] = []
    for p in sorted(pods, key=lambda p: p.metadata.name):
        owner = next((n for n, s in selectors.items() if _selects(s, p.metadata.labels)), None)
        states.append(pod_state(p, owner))
    return PlatformStatus(namespace, [deployment_state(d, [p for p in states
                                                           if p.deployment == d.metadata.name])
                                      for d in deployments], states)


def format_status(status: PlatformStatus) -> str:
    """The text `cloudburst k8s status` prints."""
    lines = [f"namespace {status.namespace}: "
             + ("ready" if status.ready else
                "no Deployments" if not status.deployments else
                f"{len(status.not_ready())} of {len(status.deployments)} Deployment(s) not ready")]
    if status.deployments:
        lines.append(f"{'DEPLOYMENT':<24}{'DESIRED':>8}{'READY':>7}{'AVAILABLE':>10}{'UPDATED':>9}")
        for d in status.deployments:
            lines.append(f"{d.name:<24}{d.desired:>8}{d.ready:>7}{d.available:>10}{d.updated:>9}")
    if status.pods:
        lines.append(f"{'POD':<48}{'PHASE':<11}{'READY':<7}{'RESTARTS':>8}  NODE")
        for p in status.pods:
            phase = "Terminating" if p.terminating else p.phase
            lines.append(f"{p.name:<48}{phase:<11}{'yes' if p.ready else 'no':<7}"
                         f"{p.restarts:>8}  {p.node or '-'}")
    problems = [d for d in status.deployments if not d.done]
    if problems:
        lines.append("not ready:")
        for d in problems:
            lines.append(f"  {d.name}: " + "; ".join(d.why or ["pending"]))
    return "\n".join(lines)
