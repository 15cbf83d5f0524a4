"""Recording checkable histories from real calls (used by the tests and benchmarks/mtcc.py).

Contract: values written by this module's functions carry their own application-level causal
metadata, so `hydrocache.checker` can judge a run without trusting the system's metadata and
the same workload can run with consistency "lww" (the control) and "causal":
- `initial_value(key, pad)` is a key's first version: `{"key", "vc": {"init/<key>": 1},
  "deps": {}, "pad"}`.
- `read_step(lib, *args)` is a DAG function: each argument is a referenced value (a record,
  or with `Reference(key, concurrent=True)` the list of its concurrent records) or an
  upstream step's result; it returns `{"obs": [...]}` with every record observed so far.
  Concurrent records of one key are observed as their merge (Definition 1 on the
  application's clocks).
- `write_step(lib, *args)` is a sink: it observes like `read_step`, then writes one key chosen
  from what it read (by the call's `seed` argument when given, else the first) with
  `vc = merge(observed vcs of that key) + {txid: 1}` and `deps` = every other observed key's
  vc, and returns `{"obs": ..., "write": record}`.
- `lookup_step` / `lookup_write_step`: the same, but their string arguments are key names
  read with `lib.get(key, concurrent=True)` inside the function (a read set the scheduler
  does not know in advance: 4.3.6).
- `transaction(result, txid)` turns a sink's result into a `checker.Transaction`.
"""
from __future__ import annotations

import uuid
from typing import Any, Dict, List

from hydrocache.checker import Observed, Transaction
from hydrocache.vclock import merge

__all__ = ["initial_value", "read_step", "write_step", "lookup_step", "lookup_write_step",
           "transaction", "observe_args"]


def initial_value(key: str, pad: int = 8) -> Dict[str, Any]:
    return {"key": key, "vc": {f"init/{key}": 1}, "deps": {}, "pad": b"x" * pad}


def _merge_records(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    out = {"key": records[0]["key"], "vc": dict(records[0]["vc"]),
           "deps": {k: dict(v) for k, v in records[0]["deps"].items()}}
    for r in records[1:]:
        out["vc"] = merge(out["vc"], r["vc"])
        for k, v in r["deps"].items():
            out["deps"][k] = merge(out["deps"].get(k, {}), v)
    return out


def observe_args(args: Any) -> List[Dict[str, Any]]:
    obs: List[Dict[str, Any]] = []
    for a in args:
        if isinstance(a, dict) and "obs" in a:
            obs.extend(a["obs"])
        elif isinstance(a, dict) and "key" in a:
            obs.append(_merge_records([a]))
        elif isinstance(a, list) and a and isinstance(a[0], dict) and "key" in a[0]:
            obs.append(_merge_records(a))
    return obs


def read_step(lib: Any, *args: Any) -> Dict[str, Any]:
    return {"obs": observe_args(args)}


def write_step(lib: Any, *args: Any) -> Dict[str, Any]:
    seed = next((a for a in args if isinstance(a, int) and not isinstance(a, bool)), 0)
    obs = observe_args(args)
    if not obs:
        return {"obs": obs, "write": None}
    keys = sorted({o["key"] for o in obs})
    key = keys[seed % len(keys)]
    vc: Dict[str, int] = {}
    deps: Dict[str, Dict[str, int]] = {}
    for o in obs:
        if o["key"] == key:
            vc = merge(vc, o["vc"])
        else:
            deps[o["key"]] = merge(deps.get(o["key"], {}), o["vc"])
    vc[f"tx/{uuid.uuid4().hex[:12]}"] = 1
    record = {"key": key, "vc": vc, "deps": deps, "pad": b"x" * 8}
    lib.put(key, record)
    return {"obs": obs, "write": record}


def _looked_up(lib: Any, args: Any) -> List[Any]:
    return [lib.get(a, concurrent=True) if isinstance(a, str) else a for a in args]


def lookup_step(lib: Any, *args: Any) -> Dict[str, Any]:
    return read_step(lib, *_looked_up(lib, args))


def lookup_write_step(lib: Any, *args: Any) -> Dict[str, Any]:
    return write_step(lib, *_looked_up(lib, args))


def transaction(result: Dict[str, Any], txid: str) -> Transaction:
    reads = [Observed(o["key"], o["vc"], o["deps"]) for o in result.get("obs", [])]
    w = result.get("write")
    writes = [Observed(w["key"], w["vc"], w["deps"])] if w else []
    return Transaction(txid, reads, writes)
