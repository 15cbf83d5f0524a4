"""Deletes the large values a scheduler decided to delete (`scheduler/values.py`), off its loop.

Contract: `ValueDeleter(context, kvs_address, ip, auth, max_pending)`. `delete(keys)` queues
keys and returns at once (the scheduler's loop never waits for the KVS); a daemon thread,
with its own `anna_core.Client`, deletes them in order. Past `max_pending` queued keys the
newest are dropped with a warning (they stay in the KVS: garbage, never a wrong answer). A
failed delete is logged at WARNING and not retried. `close()` stops the thread after the
keys already queued (at most `CLOSE_PATIENCE` seconds). `deleted` counts keys deleted.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Iterable, Optional

import zmq

import anna_core

__all__ = ["ValueDeleter"]

log = logging.getLogger("cloudburst.scheduler")

CLOSE_PATIENCE = 2.0


class ValueDeleter:
    """See the module contract."""

    def __init__(self, context: zmq.Context, kvs_address: str, ip: str = "127.0.0.1",
                 auth: Any = None, max_pending: int = 65536) -> None:
        self._args = (kvs_address, ip, auth, context)
        self._queue: "queue.Queue[Optional[str]]" = queue.Queue(max_pending)
        self.deleted = 0
        self._thread = threading.Thread(target=self._run, name="value-deleter", daemon=True)
        self._thread.start()

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            try:
                self._queue.put_nowait(key)
            except queue.Full:
                log.warning("did not delete %r (a large value of a finished call): %d keys "
                            "are already waiting to be deleted", key, self._queue.maxsize)

    def close(self) -> None:
        try:
            self._queue.put(None, timeout=CLOSE_PATIENCE)
        except queue.Full:
            pass
        self._thread.join(CLOSE_PATIENCE)

    def _run(self) -> None:
        kvs_address, ip, auth, context = self._args
        kvs = None
        try:
            while True:
                key = self._queue.get()
                if key is None:
                    return
                try:
                    if kvs is None:
                        kvs = anna_core.Client(kvs_address, timeout=2.0, ip=ip,
                                               context=context, auth=auth)
                    kvs.delete(key)
                    self.deleted += 1
                    log.debug("deleted %r, a large value of a finished call", key)
                except Exception as e:    # the call is over either way: the key is garbage
                    log.warning("could not delete %r, a large value of a finished call: %s",
                                key, e)
        finally:
            if kvs is not None:
                kvs.close()
