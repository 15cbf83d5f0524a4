"""The errors a Cloudburst caller can catch; every one is a `CloudburstError`.

They are defined in the platform's runtime layer (`runtime/errors.py`), because the services
raise the same classes (a function's `lib.get` raises `ObjectNotFound` in the worker, and the
SDK raises it in the client), and this module names them for users.
"""
from runtime.errors import (STATUS_OF, Aborted, Cancelled, CloudburstError, DagNotFound, ExecutionError,
                            FunctionNotFound, InvalidDag, InvalidFunction, NoResources, ObjectNotFound,
                            SchedulerUnavailable, Timeout, UnsafeValue, error_from_status)
from runtime.process import StartupError

__all__ = ["CloudburstError", "FunctionNotFound", "DagNotFound", "InvalidDag", "InvalidFunction",
           "NoResources",
           "ExecutionError", "Timeout", "ObjectNotFound", "Aborted", "Cancelled", "SchedulerUnavailable", "StartupError", "UnsafeValue",
           "STATUS_OF",
           "error_from_status"]
