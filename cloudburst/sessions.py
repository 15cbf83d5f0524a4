"""A client's session, shared by its threads: what its calls carry and what it notes.

Contract (the guarantee is stated in `cloudburst/client.py`; the floors and their bound are
`hydrocache.session.Session`'s): `ClientSession(max_keys)` holds one `Session` behind a lock.
- `attach(call, keys=None)` copies the session into a `Call` about to be sent; given the
  keys the call names (a causal call's references), a session of more than `WHOLE_UP_TO`
  floors goes as `Session.named(keys)`: those keys' floors and a bound for the others
  (a key the call reads without naming it is then re-read from the KVS, as after an
  overflow), instead of every floor at every hop of the call.
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
from typing import Any, Dict, Iterable, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb
from hydrocache.session import MAX_SENT_KEYS, Session

from .arguments import referenced_keys

__all__ = ["ClientSession", "WHOLE_UP_TO", "named_keys"]

WHOLE_UP_TO = 64    # floors a session sends whole even to a call that names its keys


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

    def attach(self, call: pb.Call, keys: Optional[Iterable[str]] = None) -> None:
        with self._lock:
            if keys is not None and len(self.session) > WHOLE_UP_TO:
                # a call naming its keys carries their floors and a bound for the rest
                call.session.CopyFrom(self.session.named(keys))
                return
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
        has_session, has_causal = result.HasField("session"), result.HasField("causal")
        if not (has_session or has_causal):      # nothing to note (no lock taken)
            return
        with self._lock:
            if has_session:
                self.session.absorb(result.session)
            if has_causal:
                for kv in list(result.causal.read_set) + list(result.causal.writes):
                    if kv.vc:
                        self.session.note_causal(kv.key, dict(kv.vc))


def named_keys(call: pb.Call) -> Optional[list]:
    """The keys a causal call names (every reference among its arguments, in order), the
    floors it carries when its session is large; None for other calls (they carry it whole:
    their functions' reads of keys they do not name are common, and each would be re-read)."""
    return referenced_keys(call) if call.consistency == pb.CAUSAL else None
