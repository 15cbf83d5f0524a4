"""Actors from a client: the messages that create an actor, call its methods and kill it.

Contract (used by `Client.actor`, `Client.kill` and `ActorHandle`, `runtime/actors.py`; each
function returns the `Call` to send and how messages name it, and sends nothing):
- `creation(cls, args, kwargs, modules, max_restarts)` checks that `cls` is a class whose constructor takes
  `args` and `kwargs` (`InvalidFunction` otherwise, before anything is sent) and returns the
  creation (the class travels by value like a registered function, with `modules`) and the
  unbound `ActorHandle` of the new actor (a fresh, unguessable id). `max_restarts` (0: never,
  -1: without limit; ValueError otherwise) travels with the creation.
- `method_call(handle, method, args, kwargs)`: one method call (positional arguments may be
  `Reference`s, resolved on the worker, or `Future`s of other calls, fetched there:
  `cloudburst/arguments.py`).
- `kill_call(handle)`: the actor's kill.
What the client then guarantees (`Client.actor`) is in its docstrings and README's "Actors".
"""
from __future__ import annotations

import inspect
import uuid
from typing import Any, Mapping, Sequence, Tuple

from hydro_proto import cloudburst_pb2 as pb
from runtime.actors import ActorHandle, public_methods
from faas.errors import InvalidFunction

from .arguments import encode
from .pickling import dumps_function

__all__ = ["creation", "method_call", "kill_call"]


def creation(cls: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
             modules: Sequence[Any] = (), max_restarts: int = 0
             ) -> Tuple[pb.Call, str, ActorHandle]:
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) \
            or max_restarts < -1:
        raise ValueError(f"max_restarts must be an int >= 0, or -1 for no limit, got "
                         f"{max_restarts!r}")
    if not isinstance(cls, type):
        raise InvalidFunction(f"an actor is made from a class, not {type(cls).__name__} "
                              f"{cls!r}")
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as e:
        raise InvalidFunction(f"{cls.__name__}{_signature(cls)} cannot be constructed with "
                              f"these arguments: {e}") from None
    except ValueError:           # a signature Python cannot read: the worker will tell
        pass
    actor_id = f"actor-{uuid.uuid4().hex}"
    body = dumps_function((cls, tuple(args), dict(kwargs)), modules)
    actor = pb.ActorCall(actor_id=actor_id, op=pb.ACTOR_CREATE, method="__init__",
                         class_name=cls.__name__, body=body, max_restarts=max_restarts)
    handle = ActorHandle(actor_id, cls.__name__, public_methods(cls))
    return _call(actor, pb.ArgumentList()), f"the creation of {_name(handle)}", handle


def method_call(handle: ActorHandle, method: str, args: Sequence[Any],
                kwargs: Mapping[str, Any]) -> Tuple[pb.Call, str]:
    # keyword arguments travel in the argument list, so they are sized (and sent by
    # reference when large) like the positional ones (cloudburst/big_values.py)
    actor = pb.ActorCall(actor_id=handle.actor_id, op=pb.ACTOR_METHOD, method=method,
                         class_name=handle.class_name)
    return _call(actor, encode(args, dict(kwargs))), f"method {method!r} of {_name(handle)}"


def kill_call(handle: ActorHandle) -> Tuple[pb.Call, str]:
    actor = pb.ActorCall(actor_id=handle.actor_id, op=pb.ACTOR_KILL, method="kill",
                         class_name=handle.class_name)
    return _call(actor, pb.ArgumentList()), f"the kill of {_name(handle)}"


def _name(handle: ActorHandle) -> str:
    return f"actor {handle.actor_id} ({handle.class_name})"


def _call(actor: pb.ActorCall, args: pb.ArgumentList) -> pb.Call:
    call = pb.Call(function=f"{actor.class_name}.{actor.method}")
    call.actor.CopyFrom(actor)
    call.args[actor.method].CopyFrom(args)
    return call


def _signature(cls: type) -> str:
    try:
        return str(inspect.signature(cls))
    except (TypeError, ValueError):
        return "(...)"
