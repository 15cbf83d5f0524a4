"""Building the per-executor schedules of one call (pure; no sockets).

Contract: `build_schedules(call, dag, placement, addresses, versions, scheduler_address,
timeout)` returns one `(worker_address, cloudburst.Schedule)` per function of `dag`: the
function, its registration version, its upstreams and downstream targets in connection
order, the call's own arguments for it, every function's worker address, whether it is the
sink, where the result goes (`call.response_address`, `call.output_key`) and the deadline in
seconds from receipt. Sources are the schedules with no upstreams: a worker runs them on
receipt, which is how the scheduler triggers them. Sources are listed first so they start
at once; a downstream worker keeps results that arrive before its schedule
(`executor.dagstate`).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .dag import Dag

__all__ = ["build_schedules", "references_by_function"]


def references_by_function(call: pb.Call) -> Dict[str, List[str]]:
    """function -> keys referenced by its arguments in `call`."""
    return {fn: [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]
            for fn, arglist in call.args.items()}


def build_schedules(call: pb.Call, dag: Dag, placement: Mapping[str, str],
                    addresses: Mapping[str, str], versions: Mapping[str, str],
                    scheduler_address: str, timeout: float) -> List[Tuple[str, pb.Schedule]]:
    """One schedule per function; see the module contract."""
    locations = {fn: addresses[placement[fn]] for fn in dag.functions}
    sink = dag.sink()
    out: List[Tuple[str, pb.Schedule]] = []
    sources: List[Tuple[str, pb.Schedule]] = []
    for fn in dag.functions:
        s = pb.Schedule(
            call_id=call.request_id, function=fn, version=versions[fn],
            upstreams=dag.upstreams(fn), targets=dag.downstreams(fn), sink=(fn == sink),
            response_address=call.response_address, output_key=call.output_key,
            scheduler_address=scheduler_address, timeout=timeout, dag=dag.name,
            consistency=call.consistency)
        s.locations.update(locations)
        if fn in call.args:
            s.args.CopyFrom(call.args[fn])
        (sources if not s.upstreams else out).append((locations[fn], s))
    return sources + out
