"""The decisions of the Kubernetes node managers, without Kubernetes: one group's pods.

`TierPods` is pure: it is fed what the API said (`sync` with a full listing, `observe` with
one watch event, both as `PodView`s), what was requested (`request`, `leave`), and the time
(`tick`), and it answers with manager `Event`s and the `Withdraw`als the API layer must carry
out. It never calls anything, sleeps or reads a clock, so every rule below is tested directly
(tests/test_k8s_pod_state.py).

The rules:
- Node ids are pod names. `request(count)` returns placeholder ids (`<tier>+<n>`) because the
  ReplicaSet names the pods; the oldest unbound placeholder is bound to the next new pod of
  the tier, and from then on `pending()` lists the pod's name instead. `bound_to(placeholder)`
  says which pod a request became.
- A pending pod becomes a node, with a READY event, once it is Ready. A pending pod that
  fails (phase Failed, or deleted first) gives FAILED with a `StartupError`; so does a request
  without a pod, or a pod not Ready, `startup_timeout` seconds after the request. A requested
  start that timed out is withdrawn (`Withdraw`: the API layer scales the Deployment back
  down, choosing that pod when there is one).
- A pod that appears without a request (the ReplicaSet replaced a pod, or the manager started
  while it was starting) is pending as well, with its own deadline, and is not withdrawn.
- `leave(pod)` is allowed for a node (Ready, not terminating, not already leaving) that is not
  the tier's last, and only when the scale-down will pick it: the ReplicaSet deletes pods not
  Ready, pending or unscheduled before it looks at `pod-deletion-cost`, so while any pod of the
  tier is not Ready, or a request has no pod yet, `leave` raises `PoolBusy`.
- A leaving pod is REMOVED when it is gone from the API and its containers did not exit with
  a non-zero status (Anna's node exits 4 or 5 when its hand-off failed); otherwise FAILED with
  `LeaveFailed`. Still there `leave_timeout` seconds after `leave`: FAILED (`status` None).
- A node that disappears or starts terminating without being asked to leave is dropped from
  `nodes()` and logged at WARNING (a crash or someone else's delete), without an event.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from pools.errors import LastNode, LeaveFailed, NodeLeaving, PoolBusy, UnknownNode
from pools.manager import FAILED, READY, REMOVED, NodeEvent
from runtime.process import StartupError

Event = NodeEvent

__all__ = ["PodView", "Withdraw", "TierPods"]

log = logging.getLogger("k8s.pods")


@dataclass(frozen=True)
class PodView:
    """What the manager needs of a pod.

    `ready`: the Ready condition is True. `terminating`: it has a deletionTimestamp.
    `phase`: Pending, Running, Succeeded, Failed or Unknown. `exit_code`: the first non-zero
    exit code among its terminated containers, else 0 if one terminated, else None.
    `reason`: a short why for messages (a waiting reason, a condition's message)."""

    name: str
    ready: bool = False
    terminating: bool = False
    phase: str = "Pending"
    exit_code: Optional[int] = None
    reason: str = ""


@dataclass(frozen=True)
class Withdraw:
    """Undo one requested start: scale the tier down by one, with `pod` (if any) as the pod
    to delete (set its deletion cost lowest first)."""

    tier: str
    placeholder: str
    pod: Optional[str]
    reason: str


@dataclass
class _Start:
    placeholder: Optional[str]          # None: a pod nobody here requested
    deadline: float


class TierPods:
    """The state of one tier's pods; see the module docstring for the rules.

    Args:
        tier: the tier's name, used in events and errors.
        startup_timeout: seconds from a request (or an unrequested pod's first sight) to Ready.
        leave_timeout: seconds from `leave` until the pod must be gone.
    """

    def __init__(self, tier: str, startup_timeout: float, leave_timeout: float) -> None:
        if startup_timeout <= 0 or leave_timeout <= 0:
            raise ValueError("startup_timeout and leave_timeout must be > 0")
        self.tier = tier
        self.startup_timeout = float(startup_timeout)
        self.leave_timeout = float(leave_timeout)
        self._pods: Dict[str, PodView] = {}              # every pod the API shows
        self._nodes: List[str] = []                      # Ready nodes, in the order they joined
        self._starting: Dict[str, _Start] = {}           # pod name -> start
        self._unbound: List[Tuple[str, float]] = []      # (placeholder, deadline), oldest first
        self._leaving: Dict[str, float] = {}             # pod name -> deadline
        self._bound: Dict[str, str] = {}                 # placeholder -> pod name
        self._ignored: set = set()                       # pods given up on (withdrawn/failed)
        self._exits: Dict[str, int] = {}                 # leaving pod -> a non-zero exit seen
        self._counter = 0

    # -- queries --

    def nodes(self) -> List[str]:
        """Ready pods that are not leaving."""
        return list(self._nodes)

    def pending(self) -> List[str]:
        """Placeholders without a pod yet, then starting pods' names."""
        return [p for p, _ in self._unbound] + list(self._starting)

    def leaving(self) -> List[str]:
        """Pods asked to leave and not gone yet."""
        return list(self._leaving)

    def bound_to(self, placeholder: str) -> Optional[str]:
        """The pod a request became, once the ReplicaSet created it."""
        return self._bound.get(placeholder)

    def busy_reason(self) -> Optional[str]:
        """Why a scale-down could not choose its pod now, or None."""
        if self._unbound:
            return (f"{len(self._unbound)} requested {self.tier} pod(s) not created yet "
                    f"({', '.join(p for p, _ in self._unbound)})")
        waiting = sorted(n for n, p in self._pods.items() if not p.terminating and not p.ready)
        if waiting:
            return f"{self.tier} pod(s) not Ready yet: {', '.join(waiting)}"
        return None

    # -- requests --

    def request(self, count: int, now: float) -> List[str]:
        """Record `count` requested starts; their placeholder ids."""
        ids = []
        for _ in range(count):
            self._counter += 1
            placeholder = f"{self.tier}+{self._counter}"
            self._unbound.append((placeholder, now + self.startup_timeout))
            ids.append(placeholder)
        return ids

    def cancel(self, placeholders: Iterable[str]) -> None:
        """Forget requests the API layer could not make (the scale-up failed)."""
        drop = set(placeholders)
        self._unbound = [(p, d) for p, d in self._unbound if p not in drop]

    def check_leave(self, pod: str) -> None:
        """Raise UnknownNode, NodeLeaving, LastNode or PoolBusy if `pod` cannot leave now."""
        if pod in self._leaving:
            raise NodeLeaving(f"pod {pod} ({self.tier}) is already leaving", node_id=pod,
                              pool=self.tier)
        if pod not in self._nodes:
            if pod in self._starting or any(p == pod for p, _ in self._unbound):
                why = "is still starting (pending), not running"
            elif pod in self._pods:
                why = "is not a running node (terminating or not Ready)"
            else:
                why = "does not exist"
            raise UnknownNode(f"cannot remove pod {pod} from the {self.tier} tier: it {why}; "
                              f"running {self.tier} pods: {self._nodes}", node_id=pod,
                              pool=self.tier)
        if len(self._nodes) == 1:
            raise LastNode(f"cannot remove pod {pod}: it is the {self.tier} tier's last running "
                           f"pod", node_id=pod, pool=self.tier)
        busy = self.busy_reason()
        if busy is not None:
            raise PoolBusy(f"cannot remove pod {pod} now: {busy}; Kubernetes would delete one "
                           f"of those instead on a scale-down", node_id=pod, pool=self.tier)

    def leave(self, pod: str, now: float) -> None:
        """Mark `pod` leaving (after `check_leave` passed and before the scale-down)."""
        self.check_leave(pod)
        self._nodes.remove(pod)
        self._leaving[pod] = now + self.leave_timeout

    def unleave(self, pod: str) -> None:
        """Undo `leave` when the API calls for it failed."""
        if self._leaving.pop(pod, None) is not None:
            view = self._pods.get(pod)
            if view is not None and not view.terminating:
                self._nodes.append(pod)

    # -- what the API said --

    def sync(self, pods: Iterable[PodView], now: float) -> List[Event]:
        """A full listing (at start, and after a watch had to start over)."""
        listed = {p.name: p for p in pods}
        events: List[Event] = []
        for name in [n for n in self._pods if n not in listed]:
            events += self.observe("DELETED", self._pods[name], now)
        for view in listed.values():
            events += self.observe("MODIFIED" if view.name in self._pods else "ADDED", view, now)
        return events

    def observe(self, kind: str, view: PodView, now: float) -> List[Event]:
        """One watch event: `kind` ADDED, MODIFIED or DELETED."""
        name = view.name
        if kind == "DELETED":
            self._pods.pop(name, None)
            return self._gone(view)
        first_sight = name not in self._pods
        self._pods[name] = view
        if name in self._leaving:
            if view.exit_code:
                self._exits[name] = view.exit_code
            return []
        if name in self._ignored:
            if view.ready and not view.terminating:
                self._ignored.discard(name)
                self._nodes.append(name)
                return [NodeEvent(READY, name, f"pod {name} became Ready late; it joined "
                              f"the {self.tier} tier", pool=self.tier)]
            return []
        if view.terminating or view.phase in ("Failed", "Succeeded"):
            return self._stopped(view)
        if name in self._nodes:
            return []
        start = self._starting.get(name)
        if start is None and first_sight:
            start = self._claim(name, now)
        if start is None:                         # seen before, never started: stays out
            return []
        if view.ready:
            del self._starting[name]
            self._nodes.append(name)
            how = (f" (requested as {start.placeholder})" if start.placeholder
                   else " (not requested by this manager)")
            return [NodeEvent(READY, name, f"pod {name} is Ready; it joined the "
                          f"{self.tier} tier{how}", pool=self.tier)]
        return []

    def tick(self, now: float) -> Tuple[List[Event], List[Withdraw]]:
        """Deadlines: starts and leaves that ran out of time."""
        events: List[Event] = []
        withdrawals: List[Withdraw] = []
        for placeholder, deadline in list(self._unbound):
            if now >= deadline:
                self._unbound.remove((placeholder, deadline))
                why = (f"no pod was created for request {placeholder} within "
                       f"{self.startup_timeout:g} s (quota, admission or the controller?)")
                events.append(self._start_failed(placeholder, why))
                withdrawals.append(Withdraw(self.tier, placeholder, None, why))
        for name, start in list(self._starting.items()):
            if now >= start.deadline:
                del self._starting[name]
                self._ignored.add(name)
                view = self._pods.get(name)
                detail = f": {view.reason}" if view is not None and view.reason else ""
                why = f"pod {name} was not Ready within {self.startup_timeout:g} s{detail}"
                events.append(self._start_failed(name, why))
                if start.placeholder is not None:
                    withdrawals.append(Withdraw(self.tier, start.placeholder, name, why))
        for name, deadline in list(self._leaving.items()):
            if now >= deadline:
                del self._leaving[name]
                self._ignored.add(name)
                error = LeaveFailed(f"pod {name} ({self.tier}) was still there "
                                    f"{self.leave_timeout:g} s after it was asked to leave",
                                    node_id=name, pool=self.tier, status=None)
                events.append(NodeEvent(FAILED, name, str(error), error, pool=self.tier))
        return events, withdrawals

    # -- internals --

    def _claim(self, name: str, now: float) -> _Start:
        if self._unbound:
            placeholder, deadline = self._unbound.pop(0)
            self._bound[placeholder] = name
            start = _Start(placeholder, deadline)
        else:
            start = _Start(None, now + self.startup_timeout)
        self._starting[name] = start
        return start

    def _start_failed(self, node_id: str, why: str) -> Event:
        error = StartupError(f"{self.tier} node {node_id} did not start: {why}")
        return NodeEvent(FAILED, node_id, f"{self.tier} node {node_id} did not start: "
                     f"{why}", error, pool=self.tier)

    def _stopped(self, view: PodView) -> List[Event]:
        """A pod terminating or finished that nobody asked to leave."""
        name = view.name
        self._ignored.add(name)
        if name in self._nodes:
            self._nodes.remove(name)
            log.warning("%s pod %s is %s without being asked to leave (a crash or another "
                        "client's delete); it is no longer a node", self.tier, name,
                        "terminating" if view.terminating else f"in phase {view.phase}")
            return []
        start = self._starting.pop(name, None)
        if start is not None:
            how = "was deleted" if view.terminating else f"ended in phase {view.phase}"
            return [self._start_failed(name, f"pod {name} {how} before it was Ready"
                                       + (f": {view.reason}" if view.reason else ""))]
        return []

    def _gone(self, view: PodView) -> List[Event]:
        name = view.name
        deadline = self._leaving.pop(name, None)
        if deadline is not None:
            last = self._last_exit(name, view)
            if last:
                error = LeaveFailed(f"pod {name} ({self.tier}) exited with status {last} while "
                                    f"leaving (4: keys not all handed off, 5: no routing "
                                    f"acknowledged the leave)", node_id=name, pool=self.tier,
                                    status=last)
                return [NodeEvent(FAILED, name, str(error), error, pool=self.tier)]
            return [NodeEvent(REMOVED, name, f"pod {name} left the {self.tier} tier", pool=self.tier)]
        events = self._stopped(view) if (name in self._nodes or name in self._starting) else []
        self._ignored.discard(name)
        return events

    def _last_exit(self, name: str, view: PodView) -> Optional[int]:
        seen = self._exits.pop(name, None)
        return view.exit_code or seen
