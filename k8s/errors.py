"""The Kubernetes package's errors: one tree, rooted at `KubernetesError`.

Contract:
- A failed API call raises a `KubernetesError` naming the verb, the resource, the object and
  the server's reason: `PermissionDenied` (401/403, RBAC), `ObjectNotFound` (404),
  `ApiConflict` (409, or a read-test-write that kept losing), `ApiTimeout` (no answer within
  the request timeout), `ApiUnavailable` (refused, reset, TLS). `api_error` turns an exception
  out of the `kubernetes` client into one of them; `client_errors()` lists what the client
  raises.
- `KubernetesConfigError` (also a `KubernetesError`): no usable API configuration (a missing
  or malformed kubeconfig, an unknown context, not in a pod); `path` and `context` say which.
- `WaitTimeout` (a `TimeoutError`): a wait ran past its deadline, naming what is not done.
- `RoleRefused` (a `ValueError`): `cloudburst k8s scale` refused a role.
- `KubernetesError` is not a data-path error (not an `AnnaError` nor a `CloudburstError`):
  callers that carry out control-plane actions catch it by name.
"""
from __future__ import annotations

import json
from typing import Any, List, Optional, Tuple

__all__ = ["KubernetesError", "PermissionDenied", "ObjectNotFound", "ApiTimeout",
           "ApiUnavailable", "ApiConflict", "KubernetesConfigError", "WaitTimeout",
           "RoleRefused", "api_error", "client_errors"]


class KubernetesError(Exception):
    """A Kubernetes API call failed. `verb`, `resource`, `name` and `namespace` say which call
    on which object; `address` is `namespace/name`; `status` is the HTTP status (None without
    an answer); `reason` is the server's message or the client's error."""

    def __init__(self, message: str, *, verb: str, resource: str, name: str, namespace: str,
                 status: Optional[int] = None, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.verb = verb
        self.resource = resource
        self.name = name
        self.namespace = namespace
        self.address = f"{namespace}/{name}" if name else namespace
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        return self.message


class PermissionDenied(KubernetesError):
    """401 or 403: the credentials were refused, or RBAC does not allow the verb."""


class ObjectNotFound(KubernetesError):
    """404: the Deployment, pod or namespace does not exist."""


class ApiTimeout(KubernetesError):
    """The API did not answer within the request timeout."""


class ApiUnavailable(KubernetesError):
    """The API could not be reached (refused, reset, TLS)."""


class ApiConflict(KubernetesError):
    """The object kept changing under the caller (scale read-test-write retries ran out)."""


class KubernetesConfigError(KubernetesError):
    """No usable API configuration: the kubeconfig file is missing or malformed, the context
    does not exist, or the process is not in a pod (no in-cluster ServiceAccount token).
    `path` is the kubeconfig file (None: none was found), `context` the context asked for."""

    def __init__(self, message: str, path: Optional[str] = None,
                 context: Optional[str] = None) -> None:
        super().__init__(message, verb="configure", resource="client", name=path or "",
                         namespace="", reason=message)
        self.path = path
        self.context = context


class WaitTimeout(TimeoutError):
    """A wait ran past its deadline. `what` names what was awaited (e.g. `Deployment
    cloudburst/anna-memory Available`); `pending` lists the objects still not there, each
    with its last known condition."""

    def __init__(self, what: str, seconds: float, pending: List[str]) -> None:
        super().__init__(f"timed out after {seconds:g} s waiting for {what}; still not done: "
                         + " | ".join(pending))
        self.what = what
        self.seconds = seconds
        self.pending = pending


class RoleRefused(ValueError):
    """`cloudburst k8s scale` was asked to scale a role that cannot be scaled safely (the
    message says why), or a role that does not exist."""


def _server_message(e: Any) -> str:
    body = getattr(e, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)
    return str(getattr(e, "reason", "") or e)


def api_error(e: BaseException, verb: str, resource: str, name: str,
              namespace: str) -> KubernetesError:
    """The typed error for an exception out of the kubernetes client."""
    import urllib3
    from kubernetes.client.exceptions import ApiException
    what = f"{verb} {resource} {namespace}/{name}" if name else f"{verb} {resource} in {namespace}"
    kw = dict(verb=verb, resource=resource, name=name, namespace=namespace)
    if isinstance(e, ApiException):
        status = e.status
        message = _server_message(e)
        if status == 401:
            return PermissionDenied(f"{what}: unauthorized (401): the credentials were not "
                                    f"accepted: {message}", status=status, reason=message, **kw)
        if status == 403:
            return PermissionDenied(f"{what}: forbidden (403): {message}", status=status,
                                    reason=message, **kw)
        if status == 404:
            return ObjectNotFound(f"{what}: not found (404): {message}", status=status,
                                  reason=message, **kw)
        if status == 409:
            return ApiConflict(f"{what}: conflict (409): {message}", status=status,
                               reason=message, **kw)
        return KubernetesError(f"{what}: HTTP {status}: {message}", status=status,
                               reason=message, **kw)
    timeouts = (urllib3.exceptions.TimeoutError, TimeoutError)
    refused = urllib3.exceptions.NewConnectionError   # a ConnectTimeoutError subclass in urllib3
    reason = getattr(e, "reason", None)
    if isinstance(e, refused) or isinstance(reason, refused):
        return ApiUnavailable(f"{what}: the API could not be reached: {e}", reason=str(e), **kw)
    if isinstance(e, timeouts) or isinstance(reason, timeouts):
        return ApiTimeout(f"{what}: no answer in time: {e}", reason=str(e), **kw)
    return ApiUnavailable(f"{what}: the API could not be reached: {e}", reason=str(e), **kw)


def client_errors() -> Tuple[type, ...]:
    """The exceptions a kubernetes client call raises (imported lazily: the client is optional
    outside Kubernetes)."""
    import urllib3
    from kubernetes.client.exceptions import ApiException
    return (ApiException, urllib3.exceptions.HTTPError, OSError)
