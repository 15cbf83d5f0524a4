"""Where an Anna client's key requests go: routing lookups with failover between routings, the
cache of each key's worker addresses, and the choice of a replica.

Contract (the routing and replica parts of `anna_core/client.py`'s contract are implemented
here): `KeyRouting(owner, transport, next_id, salt)` belongs to one `Client` (`owner`: its
routing addresses, answer address, and `timeout`, `retries` and `routing_timeout`, read at
each use: a caller may change them between operations); `transport` sends and collects,
`next_id` numbers the requests (the client's own sequence), `salt` spreads the client's
keys over their replicas.
- `cache`: (key, all tiers?) -> the key's worker addresses, as routing last named them; the
  client drops or replaces an entry (WRONG_OWNER, a silent replica, more replicas).
- `order()`: the routing addresses to try, rotating, those silent lately (asked and not
  answering within `routing_timeout`) last, for `ROUTING_SUSPECT_SECONDS`.
- `ask(kind, request, stage, key, everyone=False, last=())`: ask routing, failing over
  between routings until the operation's deadline (`timeout * (retries + 1)`), when
  `Timeout` names `stage` and the routings asked; with `everyone` every routing is asked
  (the first answer wins); routings in `last` go after the others, silent ones after
  every other. `ask_at` also returns the routing that answered.
- `lookup(key, all_tiers)`: the key's addresses (cached, else asked). A lookup answered
  NO_NODES asks the routings that have not said so first, and raises `NoNodes` only once
  every routing said it or stayed silent and `NO_NODES_PATIENCE` routing timeouts passed.
  ROUTING_NOT_READY (a routing that has not learned the membership yet: started or made
  again, before the nodes' heartbeats reached it) is no answer about the key: the routings
  that have not said it are asked first, and the lookup goes on until the operation's
  deadline, when `Timeout` names the routings that were not ready. While some routing is
  not ready (and not silent) the lookup does not give up with `NoNodes`.
- `pick(key, candidates)`: one replica, sticky per client and key, avoiding workers in
  `suspects` (silent lately) while another is left; `suspect(address)` puts a worker there
  for a while and forgets every cached placement naming it.
"""
from __future__ import annotations

import time
import zlib
from typing import Any, Callable, Collection, Dict, List, Optional, Protocol, Set, Tuple

from hydro_proto import anna_pb2

from .errors import NoNodes, Timeout
from .transport import Transport

__all__ = ["KeyRouting", "RoutingOwner", "ROUTING_SUSPECT_SECONDS", "NO_NODES_PATIENCE"]

# A routing that did not answer in time is asked last for this long.
ROUTING_SUSPECT_SECONDS = 5.0
# How many routing timeouts a lookup answered NO_NODES by every routing keeps asking (3 s by
# default: longer than a node's heartbeat period, so a node dropped for heartbeats that
# came late is back)
NO_NODES_PATIENCE = 3


class RoutingOwner(Protocol):
    """What key routing reads of its client (at each use)."""

    routing_addresses: List[str]
    response_address: str
    timeout: float
    retries: int
    routing_timeout: float


class KeyRouting:
    """A client's routing lookups, address cache and replica choice; see the module contract."""

    def __init__(self, owner: RoutingOwner, transport: Transport, next_id: Callable[[], str],
                 salt: int) -> None:
        self._owner = owner
        self._transport = transport
        self._next_id = next_id
        self._salt = salt
        self.cache: Dict[Tuple[str, bool], List[str]] = {}
        # Workers that recently timed out, until when: avoided while another replica exists.
        self.suspects: Dict[str, float] = {}
        self.routing_suspects: Dict[str, float] = {}
        self._turn = 0

    def order(self) -> List[str]:
        """Routing addresses to try, rotating, those that recently stayed silent last."""
        now = time.monotonic()
        for address, until in list(self.routing_suspects.items()):
            if until <= now:
                del self.routing_suspects[address]
        n = len(self._owner.routing_addresses)
        self._turn = (self._turn + 1) % n
        order = [self._owner.routing_addresses[(self._turn + i) % n] for i in range(n)]
        return ([a for a in order if a not in self.routing_suspects]
                + [a for a in order if a in self.routing_suspects])

    def ask(self, kind: str, request: Any, stage: str, key: Optional[str],
            everyone: bool = False, last: Collection[str] = ()) -> Any:
        """Ask routing, failing over between routing addresses until the deadline.

        With `everyone`, the request goes to every routing (the first answer is returned).
        Routings in `last` are asked only after the others, even ones silent lately; a
        routing silent during this call goes after every other."""
        return self.ask_at(kind, request, stage, key, everyone, last)[0]

    def ask_at(self, kind: str, request: Any, stage: str, key: Optional[str],
               everyone: bool = False, last: Collection[str] = ()) -> Tuple[Any, str]:
        """`ask`, and the routing that answered (the first asked, with `everyone`)."""
        deadline = time.monotonic() + self._owner.timeout * (self._owner.retries + 1)
        asked: List[str] = []
        silent: Set[str] = set()
        while True:
            order = self.order()
            if last or silent:
                order = ([a for a in order if a not in last and a not in silent]
                         + [a for a in order if a in last and a not in silent]
                         + [a for a in order if a in silent])
            targets = order if everyone else order[:1]
            request.request_id = self._next_id()
            for address in targets:
                self._transport.send_kind(address, kind, request)
            asked.extend(a for a in targets if a not in asked)
            wait_until = min(deadline, time.monotonic() + self._owner.routing_timeout)
            answers = self._transport.collect({request.request_id: targets[0]}, wait_until,
                                    anna_pb2.KeyAddressResponse)
            if answers:
                return answers[request.request_id], targets[0]
            for address in targets:
                self.routing_suspects[address] = time.monotonic() + ROUTING_SUSPECT_SECONDS
                silent.add(address)
            if time.monotonic() >= deadline:
                raise Timeout(f"{stage} from routing {', '.join(asked)}", key=key,
                              address=asked[-1], seconds=self._owner.timeout * (self._owner.retries + 1))

    def lookup(self, key: str, all_tiers: bool) -> List[str]:
        cached = self.cache.get((key, all_tiers))
        if cached:
            return cached
        # NO_NODES is retried (the routings that have not said it first, even one that was
        # silent lately): a routing that just restarted knows no node until their heartbeats
        # reach it, while another routing does, and a routing that dropped a node whose
        # heartbeats came late takes it back at its next heartbeat. Given up once every
        # routing said it or stayed silent, and NO_NODES_PATIENCE routing timeouts have passed.
        # ROUTING_NOT_READY is retried until the operation's deadline: that routing has not
        # learned the membership yet, and says nothing about the key.
        start = time.monotonic()
        give_up = start + NO_NODES_PATIENCE * self._owner.routing_timeout
        deadline = start + self._owner.timeout * (self._owner.retries + 1)
        said: Dict[str, int] = {}           # routing -> its latest error (NO_NODES, NOT_READY)
        while True:
            request = anna_pb2.KeyAddressRequest(keys=[key], all_tiers=all_tiers,
                                                 response_address=self._owner.response_address)
            response, routing = self.ask_at("address", request,
                                                     f"routing lookup of {key!r}", key,
                                                     last=said)
            addresses: List[str] = []
            for entry in response.addresses:
                if entry.key == key:
                    addresses = list(entry.addresses)
            if addresses:
                self.cache[(key, all_tiers)] = addresses
                return addresses
            said[routing] = (anna_pb2.ROUTING_NOT_READY
                             if response.error == anna_pb2.ROUTING_NOT_READY
                             else anna_pb2.NO_NODES)
            now = time.monotonic()
            no_nodes = {r for r, e in said.items() if e == anna_pb2.NO_NODES}
            not_ready = sorted(r for r, e in said.items() if e == anna_pb2.ROUTING_NOT_READY)
            # a routing that answered NOT_READY is not silent, whatever it was before
            heard_or_silent = no_nodes | (set(self.routing_suspects) - set(not_ready))
            if now >= give_up and heard_or_silent >= set(self._owner.routing_addresses):
                raise NoNodes(f"routing lookup of {key!r}: no KVS node is up for the key's "
                              f"tier(s)", key=key, address=", ".join(self._owner.routing_addresses))
            if now >= deadline and not_ready:
                raise Timeout(f"routing lookup of {key!r} (routing {', '.join(not_ready)} not "
                              f"ready: it has not learned the cluster's membership yet)",
                              key=key, address=", ".join(not_ready),
                              seconds=self._owner.timeout * (self._owner.retries + 1))
            time.sleep(0.05)

    def pick(self, key: str, candidates: List[str]) -> str:
        """A replica, sticky per client and key, avoiding recently silent workers."""
        if self.suspects:
            now = time.monotonic()
            for address, until in list(self.suspects.items()):
                if until <= now:
                    del self.suspects[address]
            candidates = [a for a in candidates if a not in self.suspects] or candidates
        if len(candidates) == 1:
            return candidates[0]
        return candidates[(self._salt + zlib.crc32(key.encode())) % len(candidates)]

    def suspect(self, address: str) -> None:
        """`address` stayed silent: avoid it for a while, and forget every cached placement
        naming it (routing may have removed it by the next lookup)."""
        for cache_key, addresses in list(self.cache.items()):
            if address in addresses:
                del self.cache[cache_key]
        self.suspects[address] = time.monotonic() + max(5.0, 4 * self._owner.timeout)
