"""A worker's actor table: the instances of the actors placed on this worker.

Contract:
- `ActorTable(max_actors, load)` holds at most `max_actors` instances; `load(bytes)` unpickles
  a creation body (the worker passes `faas.values.loads(..., objects=True)`: the body is
  the registrant's code, like a function registration).
- `target(actor)` turns one `cloudburst.ActorCall` into what the worker runs in place of a
  registered function: a callable `(lib, *args)`, run by the worker like any function (one
  at a time, under its time limit, output captured, errors reported to the caller):
  - ACTOR_CREATE: constructs `cls(*args, **kwargs)` from the body and keeps it under the
    actor id (a second creation of a held id keeps the first instance). `ActorTableFull`
    when the table holds `max_actors` already.
  - ACTOR_METHOD: calls the method on the instance, with the call's arguments and keyword
    arguments; a method whose first parameter (after `self`) is named `lib` gets the user
    library first. An exception in the method fails that call only; the instance stays.
    A name that is not a public method raises `AttributeError` (that call fails).
  - ACTOR_KILL: drops the instance (calls queued before the kill have run already: the
    worker runs its calls in arrival order).
  `ActorGone` is raised by `target`, before anything runs, for a method call or a kill of an
  actor this worker does not hold: killed here (remembered, bounded), or never placed on
  this process (its worker was restarted since, losing it). The worker answers ACTOR_DIED.
- Single-threaded: the worker's loop owns it.
"""
from __future__ import annotations

import collections
import inspect
from typing import Any, Callable, Dict, Optional

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ActorTable", "ActorGone", "ActorTableFull", "describe"]

_REMEMBER_ENDED = 1024     # killed actor ids remembered, to say "killed" rather than "not here"


class ActorGone(Exception):
    """The actor is not held by this worker; the message says why."""


class ActorTableFull(Exception):
    """This worker holds `max_actors` instances already."""


def describe(actor: pb.ActorCall) -> str:
    """How messages name the actor: `actor <id> (<Class>)`."""
    return f"actor {actor.actor_id} ({actor.class_name or '?'})"


def _takes_lib(method: Callable) -> bool:
    try:
        params = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "lib"


class ActorTable:
    """The instances held by one worker; see the module contract."""

    def __init__(self, max_actors: int, load: Callable[[bytes], Any]) -> None:
        self.max_actors = max(1, int(max_actors))
        self._load = load
        self._instances: Dict[str, Any] = {}
        self._killed: "collections.OrderedDict[str, None]" = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._instances)

    def holds(self, actor_id: str) -> bool:
        return actor_id in self._instances

    def target(self, actor: pb.ActorCall, worker_id: str) -> Callable[..., Any]:
        """What to run for `actor` (see the module contract)."""
        if actor.op == pb.ACTOR_CREATE:
            if actor.actor_id not in self._instances and len(self._instances) >= self.max_actors:
                raise ActorTableFull(f"worker {worker_id} holds {len(self._instances)} actors, "
                                     f"its maximum (max_actors)")
            return lambda lib, *args: self._create(actor)
        instance = self._instances.get(actor.actor_id)
        if instance is None:
            why = "was killed" if actor.actor_id in self._killed else \
                f"is not held by worker {worker_id} (the worker was restarted since the " \
                f"actor was placed there, and the instance died with the old process)"
            raise ActorGone(f"{describe(actor)} {why}")
        if actor.op == pb.ACTOR_KILL:
            return lambda lib, *args: self._kill(actor.actor_id)
        kwargs = self._load(actor.kwargs) if actor.kwargs else {}

        def run(lib: Any, *args: Any, **given: Any) -> Any:
            if actor.method.startswith("_"):
                raise AttributeError(f"{describe(actor)}: {actor.method!r} is not a public "
                                     f"method")
            method = getattr(instance, actor.method)    # AttributeError: this call fails
            # keyword arguments: in the call's argument list (a client's), or pickled in
            # the ActorCall (a handle used inside a function)
            if _takes_lib(method):
                return method(lib, *args, **kwargs, **given)
            return method(*args, **kwargs, **given)
        return run

    def _create(self, actor: pb.ActorCall) -> None:
        if actor.actor_id in self._instances:
            return None
        cls, args, kwargs = self._load(actor.body)
        self._instances[actor.actor_id] = cls(*args, **kwargs)
        return None

    def _kill(self, actor_id: str) -> None:
        self._instances.pop(actor_id, None)
        self._killed[actor_id] = None
        while len(self._killed) > _REMEMBER_ENDED:
            self._killed.popitem(last=False)
        return None
