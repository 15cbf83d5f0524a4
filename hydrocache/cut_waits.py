"""A node cache's waits for its cut (pure): keys brought in, an OPT retry's refresh, and the
re-reads a caller's session demands.

Contract: `CutWaits` is mixed into `hydrocache.node_cache.NodeCache` (it uses the core's
`keeper`, `_ops`, `_now` and `stats`); each method is a generator step of an operation run by
`hydrocache.pending.Operations`:
- `_ensure(keys, deadline)` brings `keys` into the cut (local cut update, dissertation 4.2)
  and returns those Anna does not have;
- `_refresh(req, deadline)` re-reads from Anna the keys an aborted OPT attempt read too old
  (`req.refresh`), and waits at most a fifth of the request's time for their dependencies;
- `_session_floors(req, keys, deadline)` re-reads, at growing intervals (`SESSION_PAUSE`),
  every key whose cut version is short of the caller's session floor until it is not, and
  raises `SessionUnmet` naming the keys when the deadline comes first.
"""
from __future__ import annotations

from typing import Dict, Generator, Iterable, List, Optional

from hydro_proto import cloudburst_pb2 as pb

from .actions import DEFAULT_TIMEOUT
from .pending import Pause
from .session import SessionUnmet, causal_stale, causal_unmet

__all__ = ["CutWaits", "SESSION_PAUSE"]

SESSION_PAUSE = (0.002, 0.05)   # between re-reads of a key short of its session floor: the
                                # first pause and the most it doubles to (replicas lag a gossip)


class CutWaits:
    """Waits for the cut (module contract)."""

    # ---- waiting for the cut (local cut update, 4.2) ----
    def _ensure(self, keys: Iterable[str], deadline: float) -> Generator:
        """Bring `keys` into the cut; returns the keys Anna does not have."""
        keys = list(dict.fromkeys(keys))
        cut = self.keeper.cut
        if all(k in cut for k in keys):
            return set()
        w = self.keeper.wait(keys, deadline, self._now, "exposed")
        yield from self._ops.wait(w)
        return w.absent

    def _refresh(self, req: pb.CacheRequest, deadline: float) -> Generator:
        """Re-read from Anna the keys an earlier attempt read too old (OPT retries): without
        this a retry within Anna's push period would see the same stale cut and abort again.
        A fresh version may wait for dependencies (e.g. written together with other keys):
        they are fetched too, for at most a fifth of the request's time."""
        cut = self.keeper.cut
        pending = cut.pending_keys()
        keys = [k for k in dict.fromkeys(req.refresh) if k in cut or k in pending]
        if not keys:
            return
        yield from self._ops.wait(self.keeper.wait(keys, deadline, self._now, "answered"))
        settle = self._now + 0.2 * (req.timeout if req.timeout > 0 else DEFAULT_TIMEOUT)
        yield from self._ops.wait(self.keeper.wait(keys, min(settle, deadline), self._now,
                                               "settled"))

    def _session_floors(self, req: pb.CacheRequest, keys: List[str],
                        deadline: float) -> Generator:
        """Re-read from Anna the keys whose cut version is short of the caller's session
        floor (module contract, "Sessions")."""
        if not req.HasField("session"):
            return
        cut = self.keeper.cut

        def version_of(key: str) -> Optional[Dict[str, int]]:
            v = cut.get(key)
            return None if v is None else v.vc

        stale = causal_stale(req.session, keys, version_of)
        pause, longest = SESSION_PAUSE
        while stale:
            self.stats["session_refreshes"] += 1
            yield from self._ops.wait(self.keeper.wait(stale, deadline, self._now, "answered"))
            yield from self._ops.wait(self.keeper.wait(stale, deadline, self._now, "settled"))
            stale = causal_unmet(req.session, stale, version_of)
            if not stale:
                return
            if self._now + pause >= deadline:
                raise SessionUnmet(f"the versions of {stale[:5]} in the KVS stayed older than "
                                   f"this caller's session (what it wrote or read before) "
                                   f"until the request's deadline")
            # the replica read may lag the one that had the version: read again a bit later
            yield from self._ops.wait(Pause(self._now + pause, f"a re-read of {stale[:5]}"))
            pause = min(2 * pause, longest)
