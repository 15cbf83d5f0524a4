"""A client's prepared `Call`s: the fields fixed by what is called and how, set once.

A serial caller pays for every field of its `Call` in its latency; building one field by
field from keyword arguments costs several times a copy of a prepared message. So the
fields that stay the same from one call of a function or DAG to the next (its name, its
consistency, protocol and time limit) are set once per such shape in a template, and each
call starts from a copy of it; only the arguments and the per-call fields are filled in.

Contract: `CallTemplates(limit)` belongs to one client.
- `new(name, dag, consistency, protocol, time_limit)` is a fresh `pb.Call` equal to
  `pb.Call(dag=name)` (or `function=name` when not `dag`) with those `consistency`,
  `protocol` and `time_limit`; the caller owns it (changing it changes no template).
- `restock()` makes the next call of the shape last asked for ahead of time (one per shape),
  and `new` of that shape hands it out instead of copying: a serial caller restocks after
  its call went out, while it waits for the answer, so its next call starts from a ready
  copy. A restocked call is handed out once, and is as fresh as a copy made then.
- At most `limit` templates are kept (and a restocked call per template at most); when
  full, the oldest prepared is dropped first, with its restocked call.
- Safe from several threads: two threads preparing the same shape at once both get a
  correct copy (one template is kept).
"""
from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["CallTemplates", "DEFAULT_LIMIT"]

DEFAULT_LIMIT = 256      # shapes a client keeps (a few per function or DAG it calls)

Shape = Tuple[str, bool, int, int, float]


class CallTemplates:
    """Prepared `Call` templates, one per call shape (module contract)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"a template cache keeps at least one template, not {limit}")
        self.limit = limit
        self._templates: Dict[Shape, pb.Call] = {}
        self._lock = threading.Lock()      # taken only to prepare one (the dict changes)
        self._ready: Dict[Shape, pb.Call] = {}      # shape -> its restocked call
        self._last: Optional[Shape] = None          # the shape `new` was last asked for

    def new(self, name: str, dag: bool, consistency: int, protocol: int,
            time_limit: float) -> pb.Call:
        shape = (name, dag, consistency, protocol, time_limit)
        self._last = shape
        ready = self._ready.pop(shape, None)     # (atomic: one caller takes it)
        if ready is not None:
            return ready
        template = self._templates.get(shape)
        if template is None:
            template = pb.Call(consistency=consistency, protocol=protocol,
                               time_limit=time_limit)
            if dag:
                template.dag = name
            else:
                template.function = name
            with self._lock:
                while len(self._templates) >= self.limit:   # the oldest prepared goes first
                    oldest = next(iter(self._templates))
                    del self._templates[oldest]
                    self._ready.pop(oldest, None)
                self._templates[shape] = template
        call = pb.Call()
        call.CopyFrom(template)
        return call

    def restock(self) -> None:
        shape = self._last
        if shape is None or shape in self._ready:
            return
        template = self._templates.get(shape)
        if template is None:                     # (dropped meanwhile)
            return
        call = pb.Call()
        call.CopyFrom(template)
        with self._lock:                         # not kept for a template dropped meanwhile
            if shape in self._templates:
                self._ready[shape] = call

    def __len__(self) -> int:
        return len(self._templates)
