"""Cloudburst: stateful functions as a service on the Anna KVS. What users import.

- `Client(address)`: register functions (`register`) and DAGs (`register_dag`), call them
  (`call`, `call_dag` -> `Future`), store objects (`put`, `get`).
- `LocalCluster(executor_nodes=, executors_per_node=)`: the whole platform on loopback.
- `Reference(key)`: an argument resolved to the stored object on the executor.
- `errors`: FunctionNotFound, DagNotFound, InvalidDag, NoResources, ExecutionError, Timeout.
"""
from . import errors
from .client import Client, Future, Listing
from .errors import (CloudburstError, DagNotFound, ExecutionError, FunctionNotFound, InvalidDag,
                     NoResources, ObjectNotFound, Timeout)
from .local import LocalCluster
from .reference import Reference

__all__ = ["Client", "Future", "Listing", "LocalCluster", "Reference", "errors",
           "CloudburstError", "FunctionNotFound", "DagNotFound", "InvalidDag", "NoResources",
           "ExecutionError", "Timeout", "ObjectNotFound"]
