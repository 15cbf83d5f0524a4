"""How a registered function is called: with or without `lib`, awaited when it is async,
its arguments checked against its signature first.

Contract:
- `check_registrable(target, name, stateful)` raises `InvalidFunction` naming `name` unless
  `target` can run as a function. A function (any callable) is called as it is; a stateful
  class (`stateful=True`) is instantiated once per worker and its `run` method called, or
  its `__call__` when it has no `run`. Refused: something not callable; a generator or async
  generator function (a generator's values cannot be sent as a result); a class with neither
  `run` nor `__call__`; a parameter named `lib` that is not the first positional one (after
  `self`).
- A function *takes the library* when its first parameter (after `self`) is named `lib`: it
  is called as `f(lib, *args, **kwargs)`; any other function as `f(*args, **kwargs)`, and it
  reaches the library with `current_library()` (`cloudburst.lib()`). A callable whose
  signature Python cannot read (a builtin) takes no `lib`, and its arguments are not checked.
- `Entry(fn, name)` is that decision for the callable a worker runs (a function, a bound
  `run`, an instance with `__call__`). `Entry.check(args, kwargs)` raises `InvalidArguments`
  naming the function when the arguments do not bind to its signature (nothing runs).
  `Entry.call(lib, args, kwargs)` calls it with `lib` current; a coroutine it returns
  (`async def`) is run to completion on a fresh event loop, so its value is the result.
- `current_library()` is the library of the function running in this thread of this
  process (inside asyncio tasks it started too); outside one it raises `NoLibrary`.
"""
from __future__ import annotations

import asyncio
import contextvars
import inspect
from types import CoroutineType
from typing import Any, Callable, Dict, Optional, Sequence

from faas.errors import InvalidArguments, InvalidFunction, NoLibrary

__all__ = ["Entry", "check_registrable", "entry_of", "current_library", "LIB"]

LIB = "lib"          # the parameter name that asks for the library
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
MAX_SHAPES = 16     # argument shapes remembered per function as binding (Entry.check)
_current: contextvars.ContextVar[Any] = contextvars.ContextVar("cloudburst_lib", default=None)


def _defines_call(cls: type) -> bool:
    """True if `cls` (not `object`) defines `__call__`; every class has `type.__call__`."""
    return any("__call__" in vars(k) for k in cls.__mro__[:-1])


def entry_of(cls: type) -> Optional[str]:
    """The method a stateful class's instance is called through: "run", else "__call__"
    when the class defines one, else None."""
    if callable(getattr(cls, "run", None)):
        return "run"
    return "__call__" if _defines_call(cls) else None


def _signature(fn: Any) -> Optional[inspect.Signature]:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):    # a builtin without a text signature
        return None


def _is_generator(fn: Any) -> bool:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        return True
    call = None if inspect.isroutine(fn) or isinstance(fn, type) else \
        getattr(type(fn), "__call__", None)
    return call is not None and (inspect.isgeneratorfunction(call)
                                 or inspect.isasyncgenfunction(call))


def _takes_lib(sig: Optional[inspect.Signature], name: str, shown: str,
               skip_self: bool = False) -> bool:
    """Whether the first parameter is `lib`; `InvalidFunction` if `lib` is elsewhere."""
    if sig is None:
        return False
    params = list(sig.parameters.values())[1 if skip_self else 0:]
    for i, p in enumerate(params):
        if p.name == LIB and (i > 0 or p.kind not in _POSITIONAL):
            raise InvalidFunction(
                f"function {name!r}: {shown}{sig} has a parameter named `lib` that is not its "
                f"first positional one; a function that uses the library names its first "
                f"parameter `lib` (it receives the library there), or calls "
                f"cloudburst.lib() instead")
    return bool(params) and params[0].name == LIB


def check_registrable(target: Any, name: str, stateful: bool) -> None:
    """Raise `InvalidFunction` if `target` cannot run as a function (module contract)."""
    if stateful:
        method = entry_of(target)
        if method is None:
            raise InvalidFunction(
                f"stateful class {target.__name__} registered as {name!r} needs a `run` "
                f"method (e.g. `def run(self, x)`, or `def run(self, lib, x)` to receive the "
                f"library) or a `__call__` method")
        fn = getattr(target, method)
        shown = f"{target.__name__}.{method}"
        skip_self = True
    else:
        if not callable(target):
            raise InvalidFunction(f"{name!r}: {target!r} is not callable; register a function "
                                  f"or a (class, init_args) pair")
        fn, shown, skip_self = target, getattr(target, "__name__", name), False
        if isinstance(target, type):
            raise InvalidFunction(f"{name!r}: a class is registered as a stateful class "
                                  f"(`register(cls)` or `register((cls, init_args), name)`)")
    if _is_generator(fn):
        kind = "an async generator" if inspect.isasyncgenfunction(fn) or \
            inspect.isasyncgenfunction(getattr(type(fn), "__call__", None)) else "a generator"
        raise InvalidFunction(
            f"function {name!r}: {shown} is {kind} function; a call returns one value, so "
            f"return a list (or write the items with lib.put) instead of yielding them")
    _takes_lib(_signature(fn), name, shown, skip_self)


class Entry:
    """How one callable is called; see the module contract."""

    def __init__(self, fn: Callable, name: str) -> None:
        self.fn = fn
        self.name = name
        self.signature = _signature(fn)
        self.takes_lib = _takes_lib(self.signature, name, getattr(fn, "__name__", name))
        # argument shapes (how many positional, which keywords) known to bind: binding
        # depends on the shape alone, so a warm function's calls skip `Signature.bind`
        self._fits: set = set()

    def check(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """`InvalidArguments` naming the function if `args`/`kwargs` do not bind."""
        if self.signature is None:
            return
        shape = (len(args), tuple(kwargs)) if kwargs else len(args)
        if shape in self._fits:
            return
        try:
            self.signature.bind(*((None,) if self.takes_lib else ()), *args, **kwargs)
            if len(self._fits) < MAX_SHAPES:
                self._fits.add(shape)
        except TypeError as e:
            shown = f"{self.name}{self.signature}"
            raise InvalidArguments(
                f"function {self.name!r} cannot take {len(args)} positional argument(s)"
                f"{' and keyword(s) ' + ', '.join(map(repr, kwargs)) if kwargs else ''}: {e} "
                f"(its signature is {shown}"
                f"{'; the library is passed as `lib`, not by the caller' if self.takes_lib else ''})"
            ) from None

    def call(self, lib: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        token = _current.set(lib)
        try:
            result = self.fn(lib, *args, **kwargs) if self.takes_lib else \
                self.fn(*args, **kwargs)
            if isinstance(result, CoroutineType):     # (`inspect.iscoroutine`, one call less)
                result = asyncio.run(result)
            return result
        finally:
            _current.reset(token)


def current_library() -> Any:
    """The running function's library; `NoLibrary` outside one (module contract)."""
    lib = _current.get()
    if lib is None:
        raise NoLibrary("cloudburst.lib() is the library of the function running now, and no "
                        "function is running here: call it inside a function the cluster "
                        "runs (or give the function a first parameter named `lib`)")
    return lib
