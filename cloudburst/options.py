"""The options of a call as sent on the wire: consistency, MTCC protocol, time limit.

Contract: `_consistency_and_protocol(consistency, protocol)` returns the wire values or
raises ValueError naming what is supported; `_time_limit(seconds)` returns a time limit as
sent (0: not set) or raises ValueError unless it is a positive number; `_retry_policy(
max_retries, retry_exceptions)` returns a `RetryPolicy` (None: neither given) or raises.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["_CONSISTENCY", "_PROTOCOLS", "_consistency_and_protocol", "_time_limit",
           "_retry_policy"]

_CONSISTENCY = {"lww": pb.LWW, "causal": pb.CAUSAL}
MAX_RETRIES = 100        # a larger budget is a mistake, not a policy
_PROTOCOLS = {"hb": pb.HB, "ct": pb.CT, "opt": pb.OPT, "con": pb.CON}


def _time_limit(seconds: Optional[float]) -> float:
    """A time limit as sent (0: not set); ValueError unless a positive number."""
    if seconds is None:
        return 0.0
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


def _retry_policy(max_retries: Optional[int], retry_exceptions: Any
                  ) -> Optional[pb.RetryPolicy]:
    """The wire form of `max_retries` / `retry_exceptions` (None when neither is given);
    ValueError or TypeError naming what is wrong. `retry_exceptions` is a bool, or an
    exception class or a list of them (sent as `"module.QualName"`)."""
    if max_retries is None and retry_exceptions is None:
        return None
    policy = pb.RetryPolicy()
    if max_retries is not None:
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or \
                not 0 <= max_retries <= MAX_RETRIES:
            raise ValueError(f"max_retries must be an int from 0 to {MAX_RETRIES}, got "
                             f"{max_retries!r}")
        policy.has_max_retries, policy.max_retries = True, max_retries
    if retry_exceptions is not None:
        policy.has_exceptions = True
        if isinstance(retry_exceptions, bool):
            policy.all_exceptions = retry_exceptions
        else:
            types = [retry_exceptions] if isinstance(retry_exceptions, type) else \
                list(retry_exceptions)
            for t in types:
                if not (isinstance(t, type) and issubclass(t, BaseException)):
                    raise TypeError(f"retry_exceptions takes True, False or exception "
                                    f"classes, got {t!r}")
                policy.exception_types.append(f"{t.__module__}.{t.__qualname__}")
    return policy


def _consistency_and_protocol(consistency: str, protocol: Optional[str]) -> Tuple[int, int]:
    """The wire values of a call's consistency and protocol; ValueError when invalid."""
    if consistency not in _CONSISTENCY:
        raise ValueError(f"consistency {consistency!r} is not supported (supported: "
                         f"{sorted(_CONSISTENCY)})")
    if consistency == "lww":
        if protocol is not None:
            raise ValueError(f"protocol {protocol!r} needs consistency='causal' (got 'lww')")
        return pb.LWW, pb.HB
    name = "hb" if protocol is None else protocol
    if not isinstance(name, str) or name.lower() not in _PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not an MTCC protocol (supported: "
                         f"{sorted(_PROTOCOLS)})")
    return pb.CAUSAL, _PROTOCOLS[name.lower()]
