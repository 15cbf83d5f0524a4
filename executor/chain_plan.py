"""How a worker runs a leased DAG's direct calls when every function of it is here: a plan
made once per lease grant. Pure: no sockets, no clocks.

A lease's schedules (the scheduler's, one per source, the others in `Schedule.forward`)
say where each function runs. A lease places its whole target on its worker, so every
function of a direct call runs here, one after another within the call. Run the general
way, each call copies the source's schedule with all its forwarded schedules, copies each
downstream schedule again as its upstream ends, and keeps the downstream function pending
until its input arrives. None of that is needed when the whole DAG is here: the functions
run in an order where each one's upstreams ran before it, and each result goes straight to
the functions that take it.

Contract: `ChainPlan.of(templates, here, describe)` is that plan for a lease's
`templates`, or None when the lease's calls must run the general way: a function placed on
another address than `here`, a function whose schedule the templates do not carry, a
causal, actor or `output_key` schedule, or connections that do not form a DAG over the
functions. `steps` are the functions in run order (the templates' order where the DAG
allows), each a `Step`: its name, upstreams (the schedule's order, which is the order of
its upstream arguments), targets, whether it is the sink, `what` (`describe(schedule)`,
the wording of its errors) and `schedule`: the plan's own copy of its schedule without
forwarded schedules or arguments, which the runner fills with each call's fields (so a plan serves one
call at a time, as a worker runs them). `functions`: every function of the DAG; `sources`:
those with no upstream; `scheduler`: the scheduler every schedule names (schedules naming
different ones have no plan: a function's actor calls go through its schedule's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ChainPlan", "Step"]


@dataclass(frozen=True)
class Step:
    function: str
    upstreams: Tuple[str, ...]
    targets: Tuple[str, ...]
    sink: bool
    what: str
    schedule: Any          # the plan's own copy: filled per call (module contract)


@dataclass(frozen=True)
class ChainPlan:
    steps: Tuple[Step, ...]
    functions: FrozenSet[str]
    sources: Tuple[str, ...]
    scheduler: str

    @classmethod
    def of(cls, templates: Sequence[Any], here: str,
           describe: Callable[[Any], str]) -> Optional["ChainPlan"]:
        schedules: Dict[str, Any] = {}
        for t in templates:
            for s in (t, *t.forward):
                if s.function not in schedules:
                    schedules[s.function] = s
        if not templates or not schedules:
            return None
        schedulers = {s.scheduler_address for s in schedules.values()}
        if len(schedulers) != 1:
            return None
        for s in schedules.values():
            if any(a != here for a in s.locations.values()) or \
                    s.consistency != pb.LWW or s.HasField("actor") or s.output_key:
                return None
            if any(u not in schedules for u in s.upstreams) or \
                    any(t not in schedules for t in s.targets):
                return None
        order = _run_order(schedules)
        if order is None:
            return None
        steps = []
        for name in order:
            s = schedules[name]
            own = pb.Schedule()
            own.CopyFrom(s)
            own.ClearField("forward")
            own.ClearField("args")          # (a call's are read from the call)
            steps.append(Step(name, tuple(s.upstreams), tuple(s.targets), s.sink,
                              describe(own), own))
        return cls(tuple(steps), frozenset(schedules),
                   tuple(st.function for st in steps if not st.upstreams), schedulers.pop())


def _run_order(schedules: Dict[str, Any]) -> Optional[List[str]]:
    """The functions with each after its upstreams (the given order where it allows), or
    None if upstreams and targets disagree or form a cycle."""
    for name, s in schedules.items():
        for u in s.upstreams:
            if name not in schedules[u].targets:
                return None
        for t in s.targets:
            if name not in schedules[t].upstreams:
                return None
    order: List[str] = []
    placed = set()
    while len(order) < len(schedules):
        ready = [n for n, s in schedules.items()
                 if n not in placed and all(u in placed for u in s.upstreams)]
        if not ready:
            return None                     # a cycle
        order.append(ready[0])
        placed.add(ready[0])
    return order
