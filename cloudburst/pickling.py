"""How a function or a class is serialized for registration: the user's own code by value.

Contract: `dumps_function(obj, modules=())` serializes a function or `(class, init_args)`
(cloudpickle, `faas.values.dumps`). Functions and classes defined in the user's own modules
(a test file or script that executors cannot import) are pickled by value, and so is every
module in `modules` (what the function uses from them travels with it), so executors need
nothing but the registration. Modules of the platform's own packages (`PLATFORM_PACKAGES`,
which executors import), the standard library and installed packages are pickled by
reference. Registrations are code by design; only executors unpickle them.
"""
from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any, Iterable

import cloudpickle

from faas.values import dumps

__all__ = ["dumps_function", "PLATFORM_PACKAGES"]

# The platform's own packages: executors import them, so they are pickled by reference.
PLATFORM_PACKAGES = ("cloudburst", "scheduler", "executor", "faas", "anna_core", "hydrocache",
                     "runtime", "hydro_proto")


def _user_module(obj: Any) -> Any:
    """The module defining `obj` if it is the user's own code (not stdlib, not installed)."""
    name = getattr(obj, "__module__", None)
    module = sys.modules.get(name) if name else None
    path = getattr(module, "__file__", None)
    if module is None or name == "__main__" or not path:
        return None
    if name.split(".")[0] in PLATFORM_PACKAGES:
        return None
    path = os.path.realpath(path)
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        root = sysconfig.get_paths().get(key)
        if root and path.startswith(os.path.realpath(root) + os.sep):
            return None
    return module


def dumps_function(obj: Any, modules: Iterable[Any] = ()) -> bytes:
    """Serialize a function or `(class, init_args)` for registration. Functions and classes
    defined in the user's own modules (e.g. a test file or script that executors cannot
    import) are pickled by value, and so is every module in `modules` (what the function
    uses from them travels with it), so executors need nothing but the registration."""
    target = obj[0] if isinstance(obj, tuple) else obj
    by_value = [m for m in [_user_module(target), *modules] if m is not None]
    registered = []
    try:
        for module in by_value:
            if module.__name__ not in cloudpickle.list_registry_pickle_by_value():
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
        return dumps(obj)
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)
