"""Cloudburst executor nodes: a node process (the node cache) and N executor worker processes.

Pure cores: `dagstate` (when an invocation is ready, argument order), `cache` (the LWW node
cache). Services: `node` (`python -m executor`), `worker` (`python -m executor.worker`).
"""
