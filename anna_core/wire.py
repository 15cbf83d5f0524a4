"""Anna's values on the wire: lattices in and out of `anna.KeyTuple`, and LWW timestamps.

Contract:
- `lattice_to_tuple` / `tuple_to_lattice` move lattices in and out of `anna.KeyTuple`
  through the kernel's codec (`serialize` / `_core.deserialize`); no merge logic lives here.
- `MonotoneClock` gives strictly increasing timestamps for last-writer-wins values.
Framing and sockets are the runtime layer's (`runtime.framing`, `runtime.sockets`).
"""
from __future__ import annotations

import time
from typing import Any

from hydro_proto import anna_pb2

from . import _core

__all__ = ["lattice_to_tuple", "tuple_to_lattice", "MonotoneClock"]


def lattice_to_tuple(key: str, lattice: Any) -> Any:
    """An `anna.KeyTuple` holding `lattice` (any `_core` lattice) under `key`."""
    return anna_pb2.KeyTuple(key=key, lattice_type=lattice.lattice_type,
                             payload=lattice.serialize())


def tuple_to_lattice(key_tuple: Any) -> Any:
    """The lattice held by an `anna.KeyTuple`; `ValueError` if the payload does not parse."""
    return _core.deserialize(int(key_tuple.lattice_type), bytes(key_tuple.payload))


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
