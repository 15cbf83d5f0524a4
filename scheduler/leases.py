"""Client leases: a call whose caller is gone is cancelled within seconds. Pure.

Contract: `LeaseTable` keeps, per client (its answer address), the calls it waits for and
when its lease ends. Every method takes `now`; nothing reads a clock.
- `add(client, call_id, ttl, now)`: a call made under a lease of `ttl` seconds (a call
  sent with `Call.lease_ttl > 0`); it also renews the client's lease.
- `renew(client, ttl, now)`: the client is alive (a `lease` message). A client with no
  calls here is not kept (nothing to cancel), so a renewal never grows the table.
- `leave(client)`: the client said it is leaving (a `lease` with ttl 0): returns its calls
  to cancel now and forgets it.
- `finish(call_id)`: the call ended; forgets it (and its client once it has none).
- `expire(now)`: returns `(client, call ids)` for every client whose lease ended, and
  forgets them: the scheduler cancels those calls.
- `credit(seconds)`: the scheduler could not read its socket for that long, so renewals
  may be waiting unread: every lease is extended by as much.
Calls that store their result under an `output_key` are fire-and-forget: the scheduler does
not add them here, so no lease ends them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

__all__ = ["LeaseTable", "MAX_TTL"]

MAX_TTL = 300.0      # seconds: a renewal asking for more is capped (a lease is not forever)


@dataclass
class _Lease:
    expires: float
    calls: Set[str] = field(default_factory=set)


class LeaseTable:
    """See the module contract."""

    def __init__(self) -> None:
        self._clients: Dict[str, _Lease] = {}
        self._owner: Dict[str, str] = {}          # call id -> client

    def __len__(self) -> int:
        return len(self._clients)

    def calls(self, client: str) -> List[str]:
        lease = self._clients.get(client)
        return sorted(lease.calls) if lease is not None else []

    def add(self, client: str, call_id: str, ttl: float, now: float) -> None:
        lease = self._clients.setdefault(client, _Lease(now))
        lease.calls.add(call_id)
        self._owner[call_id] = client
        self.renew(client, ttl, now)

    def renew(self, client: str, ttl: float, now: float) -> None:
        lease = self._clients.get(client)
        if lease is not None:
            lease.expires = max(lease.expires, now + min(max(ttl, 0.0), MAX_TTL))

    def leave(self, client: str) -> List[str]:
        lease = self._clients.pop(client, None)
        if lease is None:
            return []
        for c in lease.calls:
            self._owner.pop(c, None)
        return sorted(lease.calls)

    def finish(self, call_id: str) -> None:
        client = self._owner.pop(call_id, None)
        if client is None:
            return
        lease = self._clients.get(client)
        if lease is not None:
            lease.calls.discard(call_id)
            if not lease.calls:
                del self._clients[client]

    def expire(self, now: float) -> List[Tuple[str, List[str]]]:
        gone = [c for c, lease in self._clients.items() if now > lease.expires]
        return [(c, self.leave(c)) for c in gone]

    def credit(self, seconds: float) -> None:
        for lease in self._clients.values():
            lease.expires += seconds
