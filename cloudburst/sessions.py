"""A client's session, shared by its threads: what its calls carry and what it notes.

Contract (the guarantee is stated in `cloudburst/client.py`; the floors and their bound are
`hydrocache.session.Session`'s): `ClientSession(max_keys)` holds one `Session` behind a lock.
- `attach(call)` copies the session into a `Call` about to be sent.
- `read_floor(key)` is what a `Client.get` of `key` must meet: `(floor, own, merged,
  deleted, vc)` (`hydrocache.session.plain_floor`; `deleted`: `own` is the client's delete).
- `note_deleted(key, timestamp)` notes the client's delete of `key` (its tombstone's
  timestamp): its calls and gets then read the key as absent, or as a value written later.
- `note(key, version)` notes a version (`cloudburst.objects.Written`) the client wrote or
  read; `observed(result)` notes what a call read and wrote (`CallResult.session` and, for a
  causal call, its `CausalStats` read set and writes), for calls that succeeded.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import MAX_SENT_KEYS, Session

__all__ = ["ClientSession"]


class ClientSession:
    """A client's session behind a lock; see the module contract."""

    def __init__(self, max_keys: int) -> None:
        if isinstance(max_keys, int) and max_keys > MAX_SENT_KEYS:
            raise ValueError(f"session_keys={max_keys}: a call carries at most "
                             f"{MAX_SENT_KEYS} keys' versions")
        self.session = Session(max_keys)
        self._lock = threading.Lock()
        self._sent: Optional[bytes] = None    # the session as sent, at `_sent_at` changes
        self._sent_at = -1

    def attach(self, call: pb.Call) -> None:
        with self._lock:
            if self._sent_at != self.session.changes:
                self._sent = self.session.encode()
                self._sent_at = self.session.changes
            call.session.MergeFromString(self._sent)

    def read_floor(self, key: str) -> Tuple[int, int, bool, bool, Optional[Dict[str, int]]]:
        with self._lock:
            f = self.session.floor(key)
            own = f.timestamp if f else 0
            merged = bool(f and f.merged) or self.session.overflow_causal
            return (max(own, self.session.overflow_timestamp), own, merged,
                    bool(f and f.deleted), (dict(f.vc) if f and f.vc else None))

    def note_deleted(self, key: str, timestamp: int) -> None:
        with self._lock:
            self.session.note_deleted(key, timestamp)

    def note(self, key: str, version: Any) -> None:
        if version is None:
            return
        with self._lock:
            if version.timestamp:
                self.session.note_plain(key, version.timestamp)
            elif version.vc:
                self.session.note_causal(key, version.vc)
            elif version.merged:
                self.session.note_merged(key)

    def observed(self, result: Optional[pb.CallResult]) -> None:
        if result is None or result.status != pb.OK:
            return
        with self._lock:
            if result.HasField("session"):
                self.session.absorb(result.session)
            if result.HasField("causal"):
                for kv in list(result.causal.read_set) + list(result.causal.writes):
                    if kv.vc:
                        self.session.note_causal(kv.key, dict(kv.vc))
