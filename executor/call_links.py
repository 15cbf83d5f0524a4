"""Call links at the worker: direct calls that arrive over a TCP link from the client
instead of the ZeroMQ direct socket (TCP, or a Unix-domain socket from the same host), and
their results sent back on that link.

A direct call over ZeroMQ crosses an I/O thread at each end of each hop; a link is written
and read by the worker's own thread (`anna_core/csrc/call_links.hpp`, built on the KVS's
client links), so a call and its result cost a read and a write.

Contract: `WorkerCallLinks.open(ip, credentials, where, unix_links=True)` listens for links
(None when it cannot: the direct socket serves alone, and the failure is logged), with
`unix_links` on a Unix-domain socket too, which clients on the same host use (the address
names both: `anna_core/csrc/link.hpp`); `address` is what the worker reports next to its
direct address, and the scheduler puts in its leases.
- Admission is the direct socket's: with credentials every link is secured (a CURVE-shaped
  handshake with the worker's key pair, then every frame sealed) and admitted for the keys
  and roles the direct socket admits (`credentials.allowed`), each frame handed on with its
  key's role, which the lease admission then checks as for a frame from the direct socket;
  without, links are plain. At most `MAX_LINKS` links; a frame above `MAX_FRAME_BYTES` (the
  direct socket's limit), a handshake not done within a second, or a frame that does not
  open closes that link alone; its last frame (the kernel's farewell) tells the client how
  many of its frames were served, so the client sends the calls it wrote after them
  elsewhere (none of them ran here).
- `fileno()`: one descriptor a poller waits on (readable when a link needs service);
  `frames()`: the frames that arrived, as `(link, data, role)`, without blocking.
- Routing results: `arrived(request_id, link, expires)` records that a call came on `link`
  (the first link a call id came on keeps it) until `expires` (its deadline and
  `ROUTE_GRACE` more: a call that never gets a result leaves no route for long; one swept
  later only costs its result a send over ZeroMQ). Routes are swept oldest first as calls
  arrive, and at most `MAX_ROUTES` are kept, the oldest forgotten;
  `route(request_id)` is its link or 0; `finished(request_id, link)` forgets it if it is
  that link's, so a call of the same id from another link (refused as a duplicate, its
  refusal sent on its own link: `executor/direct_calls.py`) never takes the first one's
  route away, and nothing of one link's is ever sent on another's. `send(link,
  kind, message)` writes the message on the link; False when the link is gone or the
  message is above the frame limit, and the caller sends it over ZeroMQ to the call's
  answer address instead, where the client reads too: a result is never lost for a link.
- `stats()`: the links' counters (open, accepted, unix (of those accepted, over the
  Unix-domain socket), refused, dropped, frames, auth_refused).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from runtime.auth import Credentials
from runtime.framing import MAX_FRAME_BYTES, encode

__all__ = ["WorkerCallLinks", "MAX_LINKS", "MAX_ROUTES", "ROUTE_GRACE", "MAX_FRAME_BYTES"]

log = logging.getLogger("cloudburst.worker")

MAX_LINKS = 256          # links one worker serves at once (one per client that leases it)
MAX_ROUTES = 65536       # calls whose result goes back on a link, remembered (bounded)
ROUTE_GRACE = 60.0       # seconds a route outlives its call's deadline


_NO_ROUTE = (0, 0.0)


class WorkerCallLinks:
    """A worker's call links (module contract)."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self.address: str = server.address
        # call id -> (the link it came on, when the route expires), oldest first
        self._routes: Dict[str, Tuple[int, float]] = {}

    @classmethod
    def open(cls, ip: str, credentials: Optional[Credentials], where: str,
             unix_links: bool = True) -> Optional["WorkerCallLinks"]:
        try:
            from anna_core import _core
            if credentials is None:
                server = _core.CallLinkServer(ip, MAX_FRAME_BYTES, MAX_LINKS, where,
                                              unix_links=unix_links)
            else:
                server = _core.CallLinkServer(
                    ip, MAX_FRAME_BYTES, MAX_LINKS, where, credentials.keypair.public,
                    credentials.keypair.secret, dict(credentials.allowed), unix_links)
        except (ImportError, AttributeError, RuntimeError, ValueError) as e:
            log.warning("%sno call links (%s): direct calls use the direct socket only", where, e)
            return None
        return cls(server)

    def fileno(self) -> int:
        return self._server.fileno()

    def frames(self) -> List[Tuple[int, bytes, str]]:
        return self._server.service()

    def arrived(self, request_id: str, link: int, expires: float, now: float) -> None:
        routes = self._routes
        if request_id in routes:
            return
        while routes:           # the oldest, while expired (or too many)
            first = next(iter(routes))
            if routes[first][1] > now and len(routes) < MAX_ROUTES:
                break
            del routes[first]
        routes[request_id] = (link, expires)

    def route(self, request_id: str) -> int:
        return self._routes.get(request_id, _NO_ROUTE)[0]

    def finished(self, request_id: str, link: int) -> None:
        if link and self._routes.get(request_id, _NO_ROUTE)[0] == link:
            del self._routes[request_id]

    def send(self, link: int, kind: str, message: Any) -> bool:
        frame = encode(kind, message)
        return len(frame) <= MAX_FRAME_BYTES and self._server.send(link, frame)

    def stats(self) -> Dict[str, Any]:
        return self._server.stats()
