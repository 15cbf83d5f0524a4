"""The FaaS layer's shared vocabulary: what the scheduler, the executor and the SDK all speak.

It sits above the KVS (`anna_core`) and HydroCache and below `scheduler/`, `executor/` and
`cloudburst/`, which all import it; it imports none of them.

- `errors`: the typed errors of the FaaS layer (`CloudburstError` and its subclasses, and
  their wire status codes); the SDK offers them as `cloudburst.errors`.
- `keys`: the KVS key names of the platform's own records (registry, worker directory,
  actors, large values).
- `values`: how call arguments and stored Python values are serialized (plain data unless a
  reader asks for objects), `Reference`, and how large a value may travel inline.
"""
