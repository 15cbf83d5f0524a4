"""The options of a call as sent on the wire: consistency, MTCC protocol, time limit.

Contract: `_consistency_and_protocol(consistency, protocol)` returns the wire values or
raises ValueError naming what is supported; `_time_limit(seconds)` returns a time limit as
sent (0: not set) or raises ValueError unless it is a positive number.
"""
from __future__ import annotations

from typing import Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["_CONSISTENCY", "_PROTOCOLS", "_consistency_and_protocol", "_time_limit"]

_CONSISTENCY = {"lww": pb.LWW, "causal": pb.CAUSAL}
_PROTOCOLS = {"hb": pb.HB, "ct": pb.CT, "opt": pb.OPT, "con": pb.CON}


def _time_limit(seconds: Optional[float]) -> float:
    """A time limit as sent (0: not set); ValueError unless a positive number."""
    if seconds is None:
        return 0.0
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {seconds!r}")
    return float(seconds)


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
