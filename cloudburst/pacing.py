"""How a burst of direct calls is paced on the client: batch sizes, how long a call waits for
company, how often answers are read and leases renewed to grow. Pure.

A burst of short calls keeps every slot of its leases in use; the client sends more only as
answers free slots. Two things decide how busy the leased workers stay meanwhile:
- `batch_cap(slots)`: the most calls one `direct_batch` to a lease may carry: half its slots
  (rounded up), at most `MAX_BATCH`. A worker runs a batch and answers it as one message
  (`executor/result_batch.py`); were a batch to fill every slot, the worker would idle from
  its last answer until the client's next batch arrived (a round trip and the client's
  reaction), every batch. With at most half, the client sends the next batch while the
  worker still runs the other, so it has calls to run when it finishes one.
- `read_every(starved, slots=0)`: seconds between reads of the answers while calls are
  being sent (`DirectPath.send`). While calls wait in the client's queue for want of a free
  slot (`starved`) reading sooner is what frees one (at the client's reading only every
  `READ_EVERY`, a lease of 2 slots made a whole burst run at 2 calls per `READ_EVERY`): then
  every `slots * READ_PER_SLOT` s, within `[STARVED_READ_EVERY, STARVED_READ_MOST]`, where
  `slots` is the full lease's. A full lease of n slots has at least n/2 calls at its worker
  (batches of half), at least n/2 times the shortest call's run (~25 us, a no-op), so a
  read that often refills it before its worker idles; and a rarer read lets more answers
  gather per read and per batch (at 64 slots, 0.8 ms against 0.3 ms: ~10 % less CPU per
  call over client and workers, `benchmarks/hotpath_cpu.py --mode burst`). Else
  `READ_EVERY` (a read costs ~5 us; a caller with free slots needs none).
- `next_grow_wait(wait, grew)`: seconds until a lease whose slots are all in use is renewed
  early again, after a renewal answered with (`grew`) or without more slots: `GROW_EVERY`
  while renewals grow it (the scheduler learnt a wider window: a burst takes it at once),
  else twice the last wait, up to `GROW_MOST`. A lease kept full by long calls, whose
  window will not widen, so costs its scheduler about one renewal a second, not twenty.
"""
from __future__ import annotations

__all__ = ["MAX_BATCH", "CORK_SECONDS", "CORK_CALLS", "READ_EVERY", "STARVED_READ_EVERY",
           "STARVED_READ_MOST", "READ_PER_SLOT", "GROW_EVERY", "GROW_MOST",
           "batch_cap", "read_every", "next_grow_wait"]

MAX_BATCH = 64                 # calls in one direct_batch message
# A call for a worker that still has calls of this client to run waits for others to go with
# it in one direct_batch, at most CORK_SECONDS (or until CORK_CALLS wait, or its caller waits
# for an answer): each message costs both sides more CPU than a no-op call does
CORK_SECONDS = 0.001
CORK_CALLS = 16
READ_EVERY = 0.005             # seconds between reads while a burst is being sent
STARVED_READ_EVERY = 0.0003    # the same while its calls wait for a slot: at least...
STARVED_READ_MOST = 0.0008     # ... at most
READ_PER_SLOT = 0.0000125      # ... per slot of the full lease (half a no-op's run)
GROW_EVERY = 0.05              # seconds between early renewals of a full lease that grows
GROW_MOST = 1.0                # ... of one that stopped growing (a worker's heartbeat period)


def batch_cap(slots: int) -> int:
    """The most calls one direct_batch to a lease of `slots` slots carries (at least 1)."""
    return max(1, min(MAX_BATCH, (slots + 1) // 2))


def read_every(starved: bool, slots: int = 0) -> float:
    """Seconds between reads of the answers while sending (`starved`: calls wait for a slot
    of a full lease of `slots` slots)."""
    if not starved:
        return READ_EVERY
    return min(STARVED_READ_MOST, max(STARVED_READ_EVERY, slots * READ_PER_SLOT))


def next_grow_wait(wait: float, grew: bool) -> float:
    """Seconds before a full lease's next early renewal (see the module contract)."""
    return GROW_EVERY if grew else min(GROW_MOST, max(GROW_EVERY, 2 * wait))
