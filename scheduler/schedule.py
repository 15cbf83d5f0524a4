"""Building the per-executor schedules of one call (pure; no sockets).

Contract: `build_schedules(call, dag, placement, addresses, versions, scheduler_address,
timeout)` returns one `(worker_address, cloudburst.Schedule)` per *source* of `dag`. Every
function's schedule (the sources' and, in each source's `forward`, the downstream ones) holds the
function, its registration version, its upstreams and downstream targets in connection
order, the call's own arguments for it, every function's worker address, whether it is the
sink, where the result goes (`call.response_address`, `call.output_key`), the deadline in
seconds from receipt, the call's time limit per function (`call.time_limit`, 0: each
function's own), and the caller's session (`call.session`, read-your-writes) when it has one
(once per message: a forwarded schedule gets its sender's). A worker runs a source on receipt, which is how the scheduler triggers
it. Downstream schedules travel with the data: a worker attaches its target's schedule (from
`forward`) to the result it sends there, so each executor gets its schedule without a
message (and a wake-up) of its own. That costs the square of the DAG's size per hop (every
schedule names every function's worker), so a DAG of more than `FORWARD_MAX_FUNCTIONS`
functions instead gets one schedule per function, each sent to its worker at once (a worker
holds a schedule until its upstream results arrive): linear per function, no `forward`.
`all_schedules` returns every function's schedule. `call_id` names the run when it is not
the call's request id (a causal call's attempt), so the call need not be copied.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .dag import Dag

__all__ = ["build_schedules", "all_schedules", "references_by_function",
           "FORWARD_MAX_FUNCTIONS"]

# Largest DAG whose downstream schedules travel with the data (see the module contract).
FORWARD_MAX_FUNCTIONS = 16


def references_by_function(call: pb.Call) -> Dict[str, List[str]]:
    """function -> keys referenced by its arguments in `call`."""
    return {fn: [a.reference for a in arglist.args if a.WhichOneof("kind") == "reference"]
            for fn, arglist in call.args.items()}


def build_schedules(call: pb.Call, dag: Dag, placement: Mapping[str, str],
                    addresses: Mapping[str, str], versions: Mapping[str, str],
                    scheduler_address: str, timeout: float,
                    call_id: Optional[str] = None) -> List[Tuple[str, pb.Schedule]]:
    """One schedule per source, carrying the downstream schedules (or, for a DAG of more than
    FORWARD_MAX_FUNCTIONS functions, one per function); see the module contract. `call_id`
    (default: the call's request id) names the run, e.g. a causal call's attempt."""
    forwarded = len(dag.functions) <= FORWARD_MAX_FUNCTIONS
    # the session travels once per message: a worker passes its own downstream
    everything = all_schedules(call, dag, placement, addresses, versions, scheduler_address,
                               timeout, session_to_sources_only=forwarded, call_id=call_id)
    if not forwarded:
        return everything
    downstream = [s for _, s in everything if s.upstreams]
    out = []
    for address, s in everything:
        if not s.upstreams:
            s.forward.extend(downstream)
            out.append((address, s))
    return out


def all_schedules(call: pb.Call, dag: Dag, placement: Mapping[str, str],
                  addresses: Mapping[str, str], versions: Mapping[str, str],
                  scheduler_address: str, timeout: float,
                  session_to_sources_only: bool = False,
                  call_id: Optional[str] = None) -> List[Tuple[str, pb.Schedule]]:
    """One schedule per function (without `forward`), in `dag.functions` order. The caller's
    session goes into each (only into the sources' with `session_to_sources_only`: copying a
    session of a thousand floors costs about a millisecond)."""
    locations = {fn: addresses[placement[fn]] for fn in dag.functions}
    sink = dag.sink()
    out: List[Tuple[str, pb.Schedule]] = []
    for fn in dag.functions:
        s = pb.Schedule(
            call_id=call.request_id if call_id is None else call_id, function=fn,
            version=versions[fn],
            upstreams=dag.upstreams(fn), targets=dag.downstreams(fn), sink=(fn == sink),
            response_address=call.response_address, output_key=call.output_key,
            scheduler_address=scheduler_address, timeout=timeout, dag=dag.name,
            consistency=call.consistency, time_limit=call.time_limit)
        s.locations.update(locations)
        if call.HasField("session") and not (session_to_sources_only and s.upstreams):
            s.session.CopyFrom(call.session)
        if fn in call.args:
            s.args.CopyFrom(call.args[fn])
        out.append((locations[fn], s))
    return out
