"""Registering functions: what can be registered, and the handle `@client.function` returns.

Contract:
- `check_signature(target, name, stateful)` raises `InvalidFunction` unless `target` can run
  as a function (`executor/calling.py` decides, on the client and on the workers alike): a
  function receives the user library only when its first parameter is named `lib`
  (`def f(lib, x)`); any other function gets only its arguments (`def f(x)`) and reaches the
  library with `cloudburst.lib()`. A stateful class is called through `run` (or `__call__`)
  on one instance per executor worker, with the same rule after `self`. Generator and
  async generator functions, non-callables, and a `lib` parameter that is not first are
  refused; `async def` functions are awaited on the worker.
- `RegisteredFunction` is what the decorator returns: calling it calls the registered
  function on the cluster and returns a `Future` (keywords that are `Client.call` options,
  `timeout`, `consistency`, `protocol`, `time_limit`, `objects`, `session`, are options;
  the others go to the function); `.options(**call_options)` returns a caller whose
  keywords all go to the function; `.map(*iterables)` fans calls out and returns their values in order;
  `.name` is the registered name; `.local` is the original Python object, for tests and
  local use.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional

from executor.calling import check_registrable

if TYPE_CHECKING:  # the client imports this module
    from .client import Client
    from .futures import Future

__all__ = ["check_signature", "RegisteredFunction"]


def check_signature(target: Any, name: str, stateful: bool) -> None:
    """Raise `InvalidFunction` if `target` cannot run as a function (module contract)."""
    check_registrable(target, name, stateful)


class RegisteredFunction:
    """A function registered through `@client.function`; see the module contract."""

    def __init__(self, client: "Client", name: str, local: Any) -> None:
        self.client = client
        self.name = name
        self.local = local
        self.__doc__ = getattr(local, "__doc__", None)

    def __repr__(self) -> str:
        return f"<RegisteredFunction {self.name!r} on {self.client.address}>"

    def __call__(self, *args: Any, **keywords: Any) -> "Future":
        """Call it on the cluster: `Client.call`'s options (timeout, consistency, ...) are
        options, other keywords go to the function."""
        return self.client.call(self.name, *args, **keywords)

    def options(self, **options: Any) -> Callable[..., "Future"]:
        """A caller with these `Client.call` options whose keywords all go to the function
        (for a function with a parameter named like an option, e.g. `timeout`)."""
        def call(*args: Any, **kwargs: Any) -> "Future":
            return self.client.call(self.name, *args, kwargs=kwargs, **options)
        return call

    def map(self, *iterables: Iterable[Any], timeout: Optional[float] = None,
            **options: Any) -> List[Any]:
        """`Client.map` of this function."""
        return self.client.map(self.name, *iterables, timeout=timeout, **options)
