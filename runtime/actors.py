"""Actor handles: the small value that names one actor, and how its method calls are sent.

Contract:
- `ActorHandle(actor_id, class_name, methods)` names one actor (one instance of a class,
  living on one executor worker). `handle.name(...)`, for a public method `name` of the
  class, sends one method call and returns a future at once: a `cloudburst.Future` in a
  client, an object with `get(timeout)` / `result(timeout)` / `done()` inside a function. An
  attribute that is not a public method raises `AttributeError` naming the class's methods.
  `handle.name.options(timeout=..., objects=...)(...)` sets the call's options.
  `handle.kill(timeout)` kills the actor (see the caller's `kill_actor`).
- A handle carries no connection: it pickles as `(actor_id, class_name, methods)`, so it
  can be passed to functions as an argument, stored, returned, or sent to another client;
  it is plain data (`faas/values.py` reads it without `objects=True`), and its
  constructor refuses parts that are not two strs and a tuple of strs. Who sends
  its calls is decided where it is used: the client it was made or bound by
  (`handle.bind(client)`), else the caller bound to this context (`binding(caller)`, which
  an executor worker sets around every function it runs, so a handle passed to a function
  calls through that worker). With neither, calling raises `RuntimeError` saying so.
- A caller is any object with `call_actor(handle, method, args, kwargs, options)` returning
  a future, and `kill_actor(handle, timeout)`. This module holds no sockets and no state
  beyond the context variable.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

__all__ = ["ActorHandle", "ActorMethod", "bind", "binding", "public_methods", "unbind"]

# the caller of the function running in this context (set by an executor worker)
_CALLER: "contextvars.ContextVar[Optional[Any]]" = contextvars.ContextVar(
    "cloudburst_actor_caller", default=None)


def public_methods(cls: type) -> Tuple[str, ...]:
    """The names a handle of `cls` answers: its public callables, sorted."""
    return tuple(sorted(n for n in dir(cls)
                        if not n.startswith("_") and callable(getattr(cls, n, None))))


@contextlib.contextmanager
def binding(caller: Any) -> Iterator[None]:
    """Within the block, unbound handles call through `caller`."""
    token = bind(caller)
    try:
        yield
    finally:
        unbind(token)


def bind(caller: Any) -> Any:
    """Unbound handles call through `caller` until `unbind` of what this returns."""
    return _CALLER.set(caller)


def unbind(token: Any) -> None:
    _CALLER.reset(token)


class ActorMethod:
    """One method of an actor, bound to its handle; calling it sends the call."""

    __slots__ = ("_handle", "_name", "_options")

    def __init__(self, handle: "ActorHandle", name: str,
                 options: Optional[Dict[str, Any]] = None) -> None:
        self._handle = handle
        self._name = name
        self._options = dict(options or {})

    def options(self, **options: Any) -> "ActorMethod":
        """The same method with call options (`timeout`, `objects`)."""
        unknown = set(options) - {"timeout", "objects"}
        if unknown:
            raise TypeError(f"unknown actor call option(s) {sorted(unknown)}; "
                            f"options are timeout and objects")
        return ActorMethod(self._handle, self._name, {**self._options, **options})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._handle._caller().call_actor(self._handle, self._name, args, kwargs,
                                                 self._options)

    def __repr__(self) -> str:
        return f"<method {self._name!r} of {self._handle!r}>"


class ActorHandle:
    """A reference to one actor; see the module contract."""

    def __init__(self, actor_id: str, class_name: str, methods: Sequence[str],
                 caller: Any = None) -> None:
        # a handle may be read as plain data (faas/values.py): its parts are checked
        if type(actor_id) is not str or type(class_name) is not str or \
                not isinstance(methods, (tuple, list)) or \
                any(type(m) is not str for m in methods):
            raise TypeError("an ActorHandle is (actor_id: str, class_name: str, methods: "
                            "a tuple of str)")
        self.actor_id = actor_id
        self.class_name = class_name
        self.methods = tuple(methods)
        self._bound = caller

    def __reduce__(self) -> Any:           # never the connection
        return (ActorHandle, (self.actor_id, self.class_name, self.methods))

    def __getattr__(self, name: str) -> ActorMethod:
        if name.startswith("_") or name not in self.methods:
            raise AttributeError(
                f"actor {self.actor_id} ({self.class_name}) has no method {name!r}; its "
                f"methods are {', '.join(self.methods) or '(none)'}")
        return ActorMethod(self, name)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ActorHandle) and other.actor_id == self.actor_id

    def __hash__(self) -> int:
        return hash(self.actor_id)

    def __repr__(self) -> str:
        return f"<ActorHandle {self.class_name} {self.actor_id}>"

    def bind(self, caller: Any) -> "ActorHandle":
        """A copy of this handle whose calls go through `caller` (e.g. a `Client`)."""
        return ActorHandle(self.actor_id, self.class_name, self.methods, caller)

    def kill(self, timeout: Optional[float] = None) -> None:
        """Kill the actor: calls sent before still run, later ones raise `ActorDied`."""
        self._caller().kill_actor(self, timeout)

    def _caller(self) -> Any:
        caller = self._bound if self._bound is not None else _CALLER.get()
        if caller is None:
            raise RuntimeError(
                f"{self!r} is not bound to a client here: use handle.bind(client) (inside a "
                f"function on the cluster, a handle passed as an argument works as it is)")
        return caller
