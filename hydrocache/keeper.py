"""The node cache's strict causal cut and its upkeep, as a pure state machine (no I/O).

Contract: `CutKeeper(capacity_bytes, io)` holds one node cache's `StrictCausalCut`, the LRU
order of its keys (`hydrocache.lru.ByteLru`), the keys it subscribed to, the dependency-GC
frontier and the Anna reads in flight. It never does I/O: it appends `FetchKey` and
`Subscribe` actions (`hydrocache.actions`) to the `io` list it was given, and its owner
(`hydrocache.node_cache.NodeCache`) feeds back what Anna answered. Not thread-safe.
- Versions in: `on_fetched(key, lattice, error)` (an answer to a `FetchKey`),
  `on_pushed(key, lattice)` (refresh: Anna's subscription pushes), `offer_committed(version)`
  (a commit; see its docstring for the one version it leaves out). Every version is first stripped of the dependencies the GC frontier supersedes.
  A fetched causal key is subscribed once. A pushed version the cut already has is dropped
  before it is decoded, and so is a push of a key that is neither held, pending nor needed
  (evicted since it was subscribed).
- Fetching dependencies ("fetch recursively until superseded", 4.2): whenever the cut
  reports a dependency missing, it is fetched at once unless a read of it is in flight or it
  was already read for that clock (then it is subscribed, and Anna's pushes bring newer
  versions). A dependency Anna did not have (its replicas lag) is read again at growing
  intervals while a pending version needs it, about a second in all (`next_retry()`,
  `retry(now)`), and whenever something needs it next. With nobody waiting, only
  dependencies this cache never read are fetched (the others arrive with Anna's pushes).
- Waiting for keys: `wait(keys, deadline, now, until)` registers a `KeysWait` (unregister with
  `KeysWait.close()`): "exposed" (local cut update: every key in the cut or known absent from
  Anna), "answered" (every key re-read from Anna once: an OPT retry's refresh) or "settled"
  (no key has a pending candidate; soft: at the deadline the waiter goes on with what there
  is). A wait re-reads what blocks it from Anna at growing intervals (Anna's replicas may lag)
  when its owner calls `poll(now)` at `poll_at`; a failed read of a key it needs is its
  `error`; `stage()` names the keys and the dependencies still missing.
- Capacity: `sweep()` evicts least recently used keys, each with every key depending on it,
  until the values' bytes fit `capacity_bytes`; evicted keys are no longer subscribed.
- Dependency-metadata GC (4.2.3): `gc_report()` (the keys some held version depends on, and
  every version the cut exposes or holds pending), `gc_apply(frontier)`.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from hydro_proto import anna_pb2

from .actions import FetchKey, NotCausal, Subscribe
from .cut import CutUpdate, StrictCausalCut
from .gc import collect
from .lru import ByteLru
from .vclock import merge, supersedes
from .version import Version

__all__ = ["CutKeeper", "KeysWait"]

VC = Dict[str, int]

FIRST_PAUSE = 0.001        # seconds before a waiter first re-reads what blocks it
MAX_PAUSE = 0.05           # the re-read interval doubles up to this
RETRY_FIRST = 0.002        # a needed dependency Anna did not have: read again after this,
RETRY_LAST = 0.5           # doubling, the last time after this (about 1 s in all)


class KeysWait:
    """An operation waiting for keys; see the module contract."""

    soft = False

    def __init__(self, keeper: "CutKeeper", keys: List[str], deadline: float, now: float,
                 until: str) -> None:
        self.keeper = keeper
        self.keys = keys
        self.deadline = deadline
        self.until = until
        self.soft = until == "settled"
        self.unanswered: Set[str] = set()
        self.absent: Set[str] = set()
        self.error: Optional[BaseException] = None
        self._pause = FIRST_PAUSE
        self.poll_at: Optional[float] = None if until == "answered" else now + FIRST_PAUSE

    def waiting(self) -> List[str]:
        """The keys this wait still waits for (besides unanswered reads)."""
        cut = self.keeper.cut
        if self.until == "exposed":
            return [k for k in self.keys if k not in self.absent and k not in cut]
        if self.until == "settled":
            pending = cut.pending_keys()
            return [k for k in self.keys if k in pending]
        return []

    def ready(self) -> bool:
        if self.error is not None:
            return True
        return not self.unanswered and not self.waiting()

    def on_answer(self, key: str, found: bool) -> None:
        if key in self.unanswered:
            self.unanswered.discard(key)
            if not found:
                self.absent.add(key)

    def on_error(self, key: str, error: BaseException) -> None:
        if self.error is None and (key in self.unanswered
                                   or key in self.keeper.needs(self.waiting())):
            self.error = error

    def poll(self, now: float) -> None:
        """Re-read from Anna what this wait still needs; the next poll comes later."""
        keeper = self.keeper
        waiting = self.waiting()
        if waiting:
            needs = keeper.needs(waiting)
            pending = keeper.cut.pending_keys()
            for key, need in needs.items():
                if key in self.keys and key not in keeper.cut and key not in pending:
                    self.unanswered.add(key)      # evicted meanwhile: read it again
                keeper.fetch(key, need)
        self.poll_at = now + self._pause
        self._pause = min(self._pause * 2, MAX_PAUSE)

    def stage(self) -> str:
        if self.until == "answered":
            return f"the refresh of {sorted(self.unanswered)[:5]} from Anna"
        waiting = self.waiting()
        if self.until == "settled":
            return f"the refresh of {waiting[:5]}: waiting for their dependencies"
        if self.unanswered:
            return (f"the local cut update of {waiting[:5]}: Anna did not answer for "
                    f"{sorted(self.unanswered)[:5]}")
        needs = self.keeper.needs(waiting)
        return (f"the local cut update of {waiting[:5]}: dependencies "
                f"{dict(list(needs.items())[:5])} not yet in Anna")

    def close(self) -> None:
        try:
            self.keeper.waits.remove(self)
        except ValueError:
            pass


class CutKeeper:
    """One node cache's cut and its upkeep; see the module contract."""

    def __init__(self, capacity_bytes: int, io: List[Any]) -> None:
        self.cut = StrictCausalCut()
        self.lru = ByteLru(capacity_bytes)
        self.frontier: Dict[str, VC] = {}
        self.subscribed: Set[str] = set()
        self.in_flight: Set[str] = set()
        self.waits: List[KeysWait] = []
        self.stats: Dict[str, int] = {"anna_fetches": 0, "gc_collected": 0}
        self._io = io
        self._asked: Dict[str, VC] = {}       # dependency -> the clock it was last read for
        self._retry_due: Dict[str, float] = {}     # dependency -> when to read it again
        self._retry_pause: Dict[str, float] = {}   # dependency -> the last interval

    @property
    def capacity_bytes(self) -> int:
        return self.lru.capacity

    # ---- versions in ----
    def collected(self, version: Version) -> Version:
        """`version` without the dependencies the GC frontier supersedes (4.2.3)."""
        return collect(version, self.frontier) if self.frontier else version

    def offer(self, version: Version) -> CutUpdate:
        update = self.cut.offer(self.collected(version))
        self._account(update.exposed)
        return update

    def offer_committed(self, version: Version) -> bool:
        """A version this node committed (already in Anna), offered like a fetched one,
        except for a key the cut does not hold when the version does not supersede the GC
        frontier's clock of that key: other caches may have dropped dependencies on the
        versions of the key they held at the GC round, which this one (a blind write, based
        on no version read) does not include. The next read fetches Anna's merge instead.
        False when the version was left out."""
        key = version.key
        floor = self.frontier.get(key)
        if floor and key not in self.cut and key not in self.cut.pending_keys() \
                and not supersedes(version.vc, floor):
            return False
        self.offer(version)
        return True

    def on_fetched(self, key: str, lattice: Any, error: Optional[BaseException] = None,
                   now: float = 0.0) -> None:
        self.in_flight.discard(key)
        if error is None and lattice is not None \
                and lattice.lattice_type != anna_pb2.MULTI_CAUSAL:
            error = NotCausal(f"key {key!r} holds a {type(lattice).__name__}, not a causal "
                              f"value (write it with consistency='causal')")
        if error is not None or lattice is None:
            # not read: ask again when something needs it next (a dependency read but too
            # old is subscribed now, so Anna's pushes bring the newer version), and, when a
            # pending version needs it, at growing intervals for a while (Anna's replicas lag)
            self._asked.pop(key, None)
            self._schedule_retry(key, now)
        else:
            self._retry_pause.pop(key, None)
            self._retry_due.pop(key, None)
        if error is not None:
            for w in list(self.waits):
                w.on_error(key, error)
            return
        for w in self.waits:
            w.on_answer(key, lattice is not None)
        if lattice is None:
            return
        self.subscribe(key)
        self._chase(self.offer(Version.from_lattice(key, lattice)).missing)

    def on_pushed(self, key: str, lattice: Any) -> bool:
        """Offer a pushed version; False when it was dropped unread."""
        base = self.cut.get(key)
        if base is not None and supersedes(base.vc, lattice.vector_clock):
            return False        # nothing new (e.g. this cache's own commit, pushed back)
        if base is None and key not in self.cut.pending_keys() and key not in self.cut.missing():
            return False        # evicted since it was subscribed; nobody needs it now
        self._chase(self.offer(Version.from_lattice(key, lattice)).missing)
        return True

    # ---- reads from Anna ----
    def fetch(self, key: str, need: Optional[Mapping[str, int]] = None) -> bool:
        """Ask for a read of `key` unless one is in flight; True if one was asked for."""
        if need is not None:
            self._asked[key] = dict(need)
        if key in self.in_flight:
            return False
        self.in_flight.add(key)
        self.stats["anna_fetches"] += 1
        self._io.append(FetchKey(key))
        return True

    def _schedule_retry(self, key: str, now: float) -> None:
        pause = self._retry_pause.get(key, RETRY_FIRST / 2) * 2
        if pause > RETRY_LAST or key not in self.cut.missing():
            self._retry_pause.pop(key, None)
            self._retry_due.pop(key, None)
            return
        self._retry_pause[key] = pause
        self._retry_due[key] = now + pause

    def next_retry(self) -> Optional[float]:
        """When a dependency Anna did not have is to be read again (None: nothing to)."""
        return min(self._retry_due.values()) if self._retry_due else None

    def retry(self, now: float) -> None:
        """Read again the dependencies whose retry is due (see `on_fetched`)."""
        due = [k for k, t in self._retry_due.items() if t <= now]
        if not due:
            return
        if self.waits:          # their polls re-read what they need; the rest comes later
            for k in due:
                self._retry_due[k] = now + self._retry_pause.get(k, RETRY_FIRST)
            return
        missing = self.cut.missing()
        for k in due:
            del self._retry_due[k]
            if k in missing:
                self.fetch(k, missing[k])
            else:
                self._retry_pause.pop(k, None)

    def subscribe(self, key: str) -> None:
        if key not in self.subscribed:
            self.subscribed.add(key)
            self._io.append(Subscribe(key))

    def on_subscribe_failed(self, key: str) -> None:
        self.subscribed.discard(key)

    def _chase(self, missing: Mapping[str, VC]) -> None:
        """Fetch the dependencies pending versions miss (see the module contract)."""
        waiting = bool(self.waits)
        pending: Optional[Set[str]] = None
        for dep, need in missing.items():
            if dep in self.in_flight:
                continue
            if not waiting:
                if dep in self.cut:
                    continue
                if pending is None:
                    pending = self.cut.pending_keys()
                if dep in pending:
                    continue
            asked = self._asked.get(dep)
            if asked is not None and supersedes(asked, need):
                continue
            self.fetch(dep, need)
        if len(self._asked) > 2 * len(missing) + 64:
            self._asked = {k: v for k, v in self._asked.items() if k in missing}

    def needs(self, keys: Iterable[str]) -> Dict[str, VC]:
        """What keeps `keys` out of the cut: each key neither held nor pending (clock {}),
        and, through the pending candidates, each dependency nothing held supersedes."""
        cut = self.cut
        pending = cut.pending()
        out: Dict[str, VC] = {}
        seen: Set[str] = set()
        stack = list(keys)
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            cand = pending.get(k)
            if cand is None:
                if k not in cut:
                    out.setdefault(k, {})
                continue
            for dep, need in cand.deps.items():
                have = cut.get(dep)
                if have is not None and supersedes(have.vc, need):
                    continue
                other = pending.get(dep)
                if other is None or not supersedes(other.vc, need):
                    out[dep] = merge(out.get(dep, {}), need)
                stack.append(dep)
        return out

    # ---- waiting for keys ----
    def wait(self, keys: List[str], deadline: float, now: float, until: str) -> KeysWait:
        w = KeysWait(self, keys, deadline, now, until)
        self.waits.append(w)
        if until == "answered":
            for k in keys:                        # re-read each, or join a read in flight
                w.unanswered.add(k)
                self.fetch(k)
            return w
        if until == "exposed":
            pending = self.cut.pending_keys()
            for k in keys:
                if k not in self.cut and k not in pending:
                    w.unanswered.add(k)
                    self.fetch(k)
        w.poll(now)       # and at once what blocks them (later polls re-read at intervals)
        return w

    # ---- capacity ----
    def _account(self, exposed: Iterable[str]) -> None:
        """Sizes and recency of newly exposed versions."""
        for k in exposed:
            v = self.cut.get(k)
            self.lru.put(k, sum(len(x) for x in v.values) if v is not None else 0)

    def sweep(self) -> List[str]:
        """Evict over capacity (each key with its dependents); returns the evicted keys."""
        evicted: List[str] = []
        while self.lru.over():
            key = self.lru.pop_oldest()
            if key is None:
                break
            for k in self.cut.evict(key) | {key}:
                self.lru.discard(k)
                self.subscribed.discard(k)
                evicted.append(k)
        return evicted

    # ---- dependency-metadata GC (4.2.3) ----
    def gc_report(self) -> Tuple[List[str], List[Version]]:
        """The keys some exposed or pending version depends on, and every exposed and pending
        version (the caller adds its temporary versions). Every held version counts, not only
        those of this cache's own dependency keys: another cache's version may depend on a
        key whose old version only this cache holds, and a reader may pair the two. Pending
        versions count because they may be exposed later (even by this very GC round)."""
        cut = self.cut
        dep_keys: Set[str] = set()
        held = []
        for k in cut.keys():
            v = cut.get(k)
            dep_keys.update(v.deps)
            held.append(v)
        for v in cut.pending().values():
            dep_keys.update(v.deps)
            held.append(v)
        return sorted(dep_keys), held

    def gc_apply(self, frontier: Mapping[str, Mapping[str, int]]) -> int:
        """Merge a stable frontier in and drop what it supersedes from the cut; returns how
        many versions changed. Pending versions may become exposed."""
        for k, vc in frontier.items():
            self.frontier[k] = merge(self.frontier.get(k, {}), vc)
        before = self.cut.pending_keys()
        changed = self.cut.collect(self.frontier)
        self._account(k for k in before if k in self.cut)
        self.stats["gc_collected"] += changed
        return changed
