"""Cloudburst executor nodes: a node process (the node cache) and N executor worker processes.

Pure cores: `dagstate` (when an invocation is ready, argument order), `cache` (the LWW node
cache), `output` (what functions print, captured per call and bounded). Services: `node`
(`python -m executor`: the node cache, and the supervisor that restarts workers), `worker`
(`python -m executor.worker`: runs functions with time limits and cancels), `cache_client`
(a worker's requests to its node cache), `causal` (a causal invocation's reads and writes),
`library` (the `lib` a function receives), `calling` (how a function is called: with or
without `lib`, awaited when async, arguments checked), `held` (pure: the results a worker
holds for other calls) and `sharing` (fetching and serving them).
"""
