"""Errors of `cloudburst k8s` beyond the API's own.

A failed API call raises the cluster manager's typed `KubernetesError`s
(`anna_core.autoscale.kubernetes_manager`: `PermissionDenied`, `ObjectNotFound`, `ApiTimeout`,
`ApiUnavailable`, `ApiConflict`), which name the verb, the resource, the object and the
server's reason. This module adds what is not one API call.
"""
from __future__ import annotations

from typing import List, Optional

from anna_core.autoscale.kubernetes_manager import KubernetesError

__all__ = ["KubeconfigError", "WaitTimeout", "RoleRefused", "KubernetesError"]


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used: missing, malformed, or no such context. `path` is the
    file (None: the default search), `context` the context asked for."""

    def __init__(self, message: str, path: Optional[str] = None,
                 context: Optional[str] = None) -> None:
        super().__init__(message)
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
