"""The errors a Cloudburst caller can catch; every one is a `CloudburstError`.

They are defined in the FaaS layer's shared package (`faas/errors.py`), because the services
raise the same classes (a function's `lib.get` raises `ObjectNotFound` in the worker, and the
SDK raises it in the client), and this module names them for users. The authentication
errors only a client meets (`AuthenticationError`, `AuthenticationRequired`) are defined
here; `KeyFileError` (a missing or malformed key file, named) is `runtime.auth`'s.
"""
from faas.errors import (STATUS_OF, Aborted, Cancelled, CloudburstError, DagNotFound, ExecutionError,
                         FunctionNotFound, InvalidDag, InvalidFunction, MalformedValue,
                         InvalidArguments, DependencyFailed, NoLibrary,
                         NoResources, ObjectNotFound, SchedulerUnavailable, Timeout,
                         UnsafeValue, NotPermitted, CorruptRecord, WorkerDied, ActorDied,
                         ValueTooLarge, ActorCallCycle, LeaseRefused, CallLinkBroken,
                         error_from_status)
from runtime.auth import AuthenticationRequired as _AuthenticationRequired, KeyFileError
from runtime.process import StartupError


class AuthenticationError(CloudburstError):
    """The cluster refused this client at the handshake (an unknown key, a key the cluster
    does not accept, or a handshake that failed); the message names the scheduler and what
    to do. Nothing was sent."""


class AuthenticationRequired(AuthenticationError, _AuthenticationRequired):
    """The cluster requires authentication and this client has no keys: pass
    `auth=cloudburst.AuthConfig(key_dir, "client:NAME")` (or use `LocalCluster.client()`).
    Also a `runtime.auth.AuthenticationRequired`, which `anna_core.Client` raises."""

__all__ = ["CloudburstError", "FunctionNotFound", "DagNotFound", "InvalidDag", "InvalidFunction",
           "InvalidArguments", "DependencyFailed", "NoLibrary", "NoResources",
           "ExecutionError", "Timeout", "ObjectNotFound", "Aborted", "Cancelled",
           "SchedulerUnavailable", "StartupError", "UnsafeValue", "MalformedValue", "NotPermitted",
           "CorruptRecord", "WorkerDied", "ActorDied", "ActorCallCycle", "ValueTooLarge", "LeaseRefused", "CallLinkBroken", "STATUS_OF",
           "error_from_status",
           "AuthenticationError", "AuthenticationRequired", "KeyFileError"]
