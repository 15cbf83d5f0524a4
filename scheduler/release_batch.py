"""Releases of ended causal calls, held per node cache and sent together (pure).

Contract: `ReleaseBatch(max_delay, max_attempts)` holds, per cache address, the attempts a
scheduler releases once a call's commit is granted (`scheduler.causal.CausalCall.grant`):
nothing reads their temporary versions any more, and the grant already refuses every other
commit of the call, so their CAUSAL_RELEASE need not go at once. Held releases leave:
- with the next grant answered to that cache (`take(cache, now)` -> the attempts and the
  seconds to fence them for, put in the grant's reply: no message of their own);
- as one CAUSAL_RELEASE per cache once the oldest has waited `max_delay` seconds
  (`due(now)`), or at once when a cache holds `max_attempts` (`add` returns that request).
`add(cache, attempt_ids, timeout, now)` holds them; `timeout` is the calls' time left, and a
release fences until the latest of its attempts' deadlines (plus the cache's slack), as a
release sent at once would. `held()` counts the attempts held, `next_due()` is the earliest
time `due` has something (None: nothing held). Bounded: at most `max_attempts` per cache.
Releases of aborted or stopped attempts never wait here: they go at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from hydro_proto import cloudburst_pb2 as pb

__all__ = ["ReleaseBatch", "MAX_DELAY", "MAX_ATTEMPTS"]

MAX_DELAY = 0.05          # seconds a held release waits for a grant to ride on
MAX_ATTEMPTS = 256        # attempts held per cache before they go as a message of their own


@dataclass
class _Held:
    since: float
    until: float                          # fence until (absolute, the scheduler's clock)
    attempts: List[str] = field(default_factory=list)


class ReleaseBatch:
    """Held releases per cache; see the module contract."""

    def __init__(self, max_delay: float = MAX_DELAY, max_attempts: int = MAX_ATTEMPTS) -> None:
        if max_delay < 0 or max_attempts < 1:
            raise ValueError("max_delay must be >= 0 and max_attempts >= 1")
        self.max_delay = max_delay
        self.max_attempts = max_attempts
        self._held: Dict[str, _Held] = {}

    def held(self) -> int:
        return sum(len(h.attempts) for h in self._held.values())

    def add(self, cache: str, attempt_ids: Sequence[str], timeout: float,
            now: float) -> Optional[Tuple[str, pb.CacheRequest]]:
        """Hold `attempt_ids` for `cache`; returns the release to send now when it is full."""
        if not attempt_ids:
            return None
        h = self._held.get(cache)
        if h is None:
            h = self._held[cache] = _Held(now, now + timeout)
        h.attempts.extend(attempt_ids)
        h.until = max(h.until, now + timeout)
        if len(h.attempts) >= self.max_attempts:
            return cache, self._request(self._held.pop(cache), now)
        return None

    def take(self, cache: str, now: float) -> Tuple[List[str], float]:
        """The attempts held for `cache` (now handed over) and the seconds to fence them."""
        h = self._held.pop(cache, None)
        if h is None:
            return [], 0.0
        return h.attempts, max(h.until - now, 0.001)

    def next_due(self) -> Optional[float]:
        if not self._held:
            return None
        return min(h.since for h in self._held.values()) + self.max_delay

    def due(self, now: float) -> List[Tuple[str, pb.CacheRequest]]:
        """One CAUSAL_RELEASE per cache whose oldest held release waited `max_delay`."""
        out = []
        for cache in [c for c, h in self._held.items() if now - h.since >= self.max_delay]:
            out.append((cache, self._request(self._held.pop(cache), now)))
        return out

    @staticmethod
    def _request(h: _Held, now: float) -> pb.CacheRequest:
        return pb.CacheRequest(op=pb.CAUSAL_RELEASE, attempt_id=h.attempts[0],
                               also_release=h.attempts[1:], timeout=max(h.until - now, 0.001))
