"""What a node cache does for a function key: the function role's rights, as a pure check.

Contract:
- A worker runs user code with the function role (`runtime.auth.FUNCTION`); the node cache
  acts for it with a client's rights. `refusal(request)` is None when a function may send
  the `CacheRequest`, else the reason in words, naming the operation or the key:
  - operations: only those workers send (`FUNCTION_OPS`: CACHE_GET, CACHE_PUT, CAUSAL_BIND,
    CAUSAL_READ, CAUSAL_COMMIT); snapshots, fetches, releases, cache-to-cache reads and GC
    come from the cluster only;
  - writes (CACHE_PUT's keys, CAUSAL_COMMIT's keys and the keys inside its `writes`): never
    a key under `__anna__/` (the KVS's metadata) or `__cloudburst/` (the registry and the
    worker directory), which only the cluster writes (`RESERVED_PREFIXES`). Reads are free,
    as they are to clients.
- `reserved(key)` says whether a key is one of those.
"""
from __future__ import annotations

from typing import Iterable, Optional

from google.protobuf.message import DecodeError

from hydro_proto import anna_pb2
from hydro_proto import cloudburst_pb2 as pb
from faas.keys import PREFIX as REGISTRY_PREFIX

__all__ = ["FUNCTION_OPS", "RESERVED_PREFIXES", "refusal", "reserved"]

FUNCTION_OPS = frozenset({pb.CACHE_GET, pb.CACHE_PUT, pb.CAUSAL_BIND, pb.CAUSAL_READ,
                          pb.CAUSAL_COMMIT})
RESERVED_PREFIXES = ("__anna__/", REGISTRY_PREFIX)


def reserved(key: str) -> bool:
    """Whether only the cluster may write `key`."""
    return key.startswith(RESERVED_PREFIXES)


def _written(request: pb.CacheRequest) -> Iterable[str]:
    if request.op == pb.CACHE_PUT:
        yield from request.keys
    elif request.op == pb.CAUSAL_COMMIT:
        yield from request.keys
        for raw in request.writes:
            try:
                yield anna_pb2.KeyTuple.FromString(raw).key
            except DecodeError:
                yield "(a write that does not parse)"


def refusal(request: pb.CacheRequest) -> Optional[str]:
    """See the module contract."""
    if request.op not in FUNCTION_OPS:
        name = pb.CacheOp.Name(request.op) if request.op in pb.CacheOp.values() \
            else str(request.op)
        return f"a function may not send {name} (the cluster's own operation)"
    for key in _written(request):
        if key == "(a write that does not parse)":
            return "a causal commit holds a write that does not parse"
        if reserved(key):
            return (f"a function may not write {key!r}: keys under "
                    f"{' and '.join(RESERVED_PREFIXES)} are the cluster's own")
    return None
