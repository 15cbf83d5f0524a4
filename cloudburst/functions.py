"""Registering functions: the signature check, and the handle `@client.function` returns.

Contract:
- `check_signature(target, name)` raises `InvalidFunction` unless `target` can be called with
  the user library first: a function `f(lib, ...)`, or a class whose `run(self, lib, ...)`
  is called on one instance per executor worker. A callable whose signature Python cannot
  read (a builtin) is accepted as it is.
- `RegisteredFunction` is what the decorator returns: calling it calls the registered
  function on the cluster and returns a `Future`; `.map(*iterables)` fans calls out and
  returns their values in order; `.name` is the registered name; `.local` is the original
  Python object, for tests and local use.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Iterable, List, Optional

from runtime.errors import InvalidFunction

if TYPE_CHECKING:  # the client imports this module
    from .client import Client
    from .futures import Future

__all__ = ["check_signature", "RegisteredFunction"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def check_signature(target: Any, name: str, stateful: bool) -> None:
    """Raise `InvalidFunction` if `target` cannot take `lib` first (see the module contract)."""
    call = getattr(target, "run", None) if stateful else target
    if stateful and not callable(call):
        raise InvalidFunction(f"stateful class {target.__name__} registered as {name!r} needs "
                              f"a `run(self, lib, ...)` method")
    try:
        signature = inspect.signature(call)
    except (TypeError, ValueError):
        return
    params = list(signature.parameters.values())
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params):
        return
    needed = 2 if stateful else 1     # a class's `run` is read unbound: self, then lib
    if sum(1 for p in params if p.kind in _POSITIONAL) < needed:
        shown = f"{target.__name__}.run" if stateful else getattr(target, "__name__", name)
        raise InvalidFunction(
            f"function {name!r} must take the user library `lib` as its first argument, e.g. "
            f"`def {'run(self, lib, ...)' if stateful else shown + '(lib, ...)'}`; "
            f"{shown}{signature} does not")


class RegisteredFunction:
    """A function registered through `@client.function`; see the module contract."""

    def __init__(self, client: "Client", name: str, local: Any) -> None:
        self.client = client
        self.name = name
        self.local = local
        self.__doc__ = getattr(local, "__doc__", None)

    def __repr__(self) -> str:
        return f"<RegisteredFunction {self.name!r} on {self.client.address}>"

    def __call__(self, *args: Any, **options: Any) -> "Future":
        """Call it on the cluster; `options` are `Client.call`'s (timeout, consistency, ...)."""
        return self.client.call(self.name, *args, **options)

    def map(self, *iterables: Iterable[Any], timeout: Optional[float] = None,
            **options: Any) -> List[Any]:
        """`Client.map` of this function."""
        return self.client.map(self.name, *iterables, timeout=timeout, **options)
