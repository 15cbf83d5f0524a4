"""How a burst of direct calls is paced on the client: batch sizes, and how often answers are read. Pure.

A burst of short calls keeps every slot of its leases in use; the client sends more only as
answers free slots. Two things decide how busy the leased workers stay meanwhile:
- `batch_cap(slots)`: the most calls one `direct_batch` to a lease may carry: half its slots
  (rounded up), at most `MAX_BATCH`. A worker runs a batch and answers it as one message
  (`executor/result_batch.py`); were a batch to fill every slot, the worker would idle from
  its last answer until the client's next batch arrived (a round trip and the client's
  reaction), every batch. With at most half, the client sends the next batch while the
  worker still runs the other, so it has calls to run when it finishes one.
- `read_every(starved)`: seconds between reads of the answers while calls are being sent
  (`DirectPath.send`): `STARVED_READ_EVERY` while calls wait in the client's queue for want
  of a free slot (reading sooner is what frees one: at the client's reading only every
  `READ_EVERY`, a lease of 2 slots made a whole burst run at 2 calls per `READ_EVERY`),
  else `READ_EVERY` (a read costs ~5 us; a caller with free slots needs none).
"""
from __future__ import annotations

__all__ = ["MAX_BATCH", "READ_EVERY", "STARVED_READ_EVERY", "batch_cap", "read_every"]

MAX_BATCH = 64                 # calls in one direct_batch message
READ_EVERY = 0.005             # seconds between reads while a burst is being sent
STARVED_READ_EVERY = 0.0003    # the same while its calls wait for a slot


def batch_cap(slots: int) -> int:
    """The most calls one direct_batch to a lease of `slots` slots carries (at least 1)."""
    return max(1, min(MAX_BATCH, (slots + 1) // 2))


def read_every(starved: bool) -> float:
    """Seconds between reads of the answers while sending (`starved`: calls wait for a slot)."""
    return STARVED_READ_EVERY if starved else READ_EVERY
