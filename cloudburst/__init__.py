"""Cloudburst: stateful functions as a service on the Anna KVS. What users import.

- `Client(address)`: register functions (`register`, or the `@client.function` decorator)
  and DAGs (`register_dag`), call them (`call`, `call_dag` -> `Future`; `map` fans calls out),
  store objects (`put`, `get`).
- `Future`: `get`/`result`, `done`, `wait`, and `await future` in asyncio; `gather(futures)`
  and `wait(futures)` for many at once. A `Future` passed to another call is replaced by its
  value where that call runs.
- `lib()`: inside a function running on the cluster, its user library (for functions that
  do not take `lib` as their first parameter); `NoLibrary` elsewhere.
- `call_dag(..., consistency="causal", protocol="hb"|"ct"|"opt"|"con")`: transactional causal
  consistency through HydroCache (`hydrocache/DESIGN.md`); `Future.causal` is a
  `CausalStats` (protocol used, aborts, remote fetches, read set, writes).
- `LocalCluster(executor_nodes=, executors_per_node=)`: the whole platform on loopback;
  `autoscale=True` or `autoscale=ExecutorPolicyConfig(min_nodes=, max_nodes=, ...)` adds and
  drains executor nodes with the load.
- `client.actor(Cls, *args)` -> `ActorHandle`: one instance on one worker; `handle.method(...)`
  returns a `Future`, calls run one at a time in order; `ActorDied` once it is gone
  (`create_actor(..., max_restarts=n)` re-creates it after its worker dies);
  `ActorCallCycle` for a method call that would wait on itself through other workers.
- `Reference(key, concurrent=False, objects=False)`: an argument resolved to the stored
  object on the executor (with `concurrent=True`, the list of a causal key's concurrent
  values).
- Values are data, not code: `get`, `lib.get`, a `Reference` and a call's result are read as
  plain data unless `objects=True` is given; a value that is more raises `UnsafeValue` and
  runs nothing. docs/SECURITY.md is the trust model.
- `errors`: FunctionNotFound, DagNotFound, InvalidDag, InvalidFunction, InvalidArguments,
  DependencyFailed, NoLibrary, NoResources,
  ExecutionError, Timeout, ObjectNotFound, Aborted, Cancelled, SchedulerUnavailable,
  UnsafeValue (MalformedValue: stored bytes that do not decode), NotPermitted, CorruptRecord,
  WorkerDied (an ExecutionError: every attempt lost its worker), ActorDied, ActorCallCycle,
  ValueTooLarge, CallLinkBroken (a direct call's result may be lost on a broken call link),
  AuthenticationError, AuthenticationRequired.
- `AuthConfig(key_dir, "client:NAME")`: a client's keys for a cluster that authenticates
  (`Client(address, auth=...)`; `cloudburst keys` writes them; `LocalCluster` does so itself).
"""
from typing import Any

from runtime.auth import AuthConfig, KeyFileError
from runtime.actors import ActorHandle
from faas.values import Reference
from executor.calling import current_library

from . import errors
from .client import Client, Listing
from .functions import RegisteredFunction
from .futures import CausalStats, Future, gather, wait
from .errors import (Aborted, AuthenticationError, AuthenticationRequired, Cancelled,
                     CloudburstError, DagNotFound, ExecutionError, FunctionNotFound,
                     InvalidDag, InvalidFunction, MalformedValue, NoResources,
                     InvalidArguments, DependencyFailed, NoLibrary,
                     ObjectNotFound, SchedulerUnavailable, Timeout, UnsafeValue, NotPermitted,
                     CorruptRecord, WorkerDied, ActorDied, ActorCallCycle, ValueTooLarge,
                     CallLinkBroken)
from .local import LocalCluster
from .executor_policy import ExecutorPolicyConfig

__all__ = ["Client", "Future", "Listing", "CausalStats", "LocalCluster", "Reference", "errors",
           "RegisteredFunction", "gather", "wait", "InvalidFunction",
           "Cancelled",
           "CloudburstError", "FunctionNotFound", "DagNotFound", "InvalidDag", "NoResources",
           "ExecutionError", "Timeout", "ObjectNotFound", "Aborted", "SchedulerUnavailable",
           "UnsafeValue", "MalformedValue", "NotPermitted", "CorruptRecord", "WorkerDied",
           "ValueTooLarge", "CallLinkBroken",
           "AuthConfig",
           "KeyFileError", "AuthenticationError",
           "AuthenticationRequired", "ExecutorPolicyConfig", "ActorHandle", "ActorDied", "lib",
           "ActorCallCycle",
           "InvalidArguments", "DependencyFailed", "NoLibrary"]


def lib() -> Any:
    """The user library (`get`, `put`, `send`, `recv`, `getid`) of the function running now,
    for a function without a `lib` parameter; raises `NoLibrary` outside such a function."""
    return current_library()
