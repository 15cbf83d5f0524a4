"""Anna's values on the wire: lattices in and out of `anna.KeyTuple`, and LWW timestamps.

Contract:
- `lattice_to_tuple` / `tuple_to_lattice` move lattices in and out of `anna.KeyTuple`
  through the kernel's codec (`serialize` / `_core.deserialize`); no merge logic lives here.
- `lattice_from_payload(lattice_type, payload)` is how lattices unpickle (their `__reduce__`
  names it): the kernel's codec, `ValueError` for an unknown type or a malformed payload. A
  pickle never builds a lattice through its class.
- `MonotoneClock` gives strictly increasing timestamps for last-writer-wins values.
Framing and sockets are the runtime layer's (`runtime.framing`, `runtime.sockets`).
"""
from __future__ import annotations

import time
from typing import Any

from hydro_proto import anna_pb2

from . import _core

__all__ = ["lattice_to_tuple", "tuple_to_lattice", "lattice_from_payload", "MonotoneClock"]


def lattice_to_tuple(key: str, lattice: Any) -> Any:
    """An `anna.KeyTuple` holding `lattice` (any `_core` lattice) under `key`."""
    return anna_pb2.KeyTuple(key=key, lattice_type=lattice.lattice_type,
                             payload=lattice.serialize())


def tuple_to_lattice(key_tuple: Any) -> Any:
    """The lattice held by an `anna.KeyTuple`; `ValueError` if the payload does not parse."""
    return _core.deserialize(int(key_tuple.lattice_type), bytes(key_tuple.payload))


def lattice_from_payload(lattice_type: int, payload: bytes) -> Any:
    """The lattice of `lattice_type` (an `anna.LatticeType` number) encoded in `payload`, by the
    kernel's codec; what a pickled lattice calls when it is unpickled."""
    return _core.deserialize(lattice_type, payload)


class MonotoneClock:
    """Nanosecond wall-clock timestamps that strictly increase within one process object.

    Used for LWW timestamps: `time.time_ns()` when it moved forward, else last + 1, so two
    writes from the same writer are always ordered even within one clock tick.
    """

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        """The next timestamp (strictly greater than the previous one)."""
        now = time.time_ns()
        self._last = now if now > self._last else self._last + 1
        return self._last
