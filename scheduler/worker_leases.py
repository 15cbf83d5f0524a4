"""Worker leases, the scheduler's side (pure): which client may send calls straight to which
worker, for how long, and when that right is taken back.

A worker lease lets a client send the calls of one target (a function, or a DAG placed whole
on one worker) straight to a warm worker, `slots` at a time, without the scheduler in the
call's path; the client tells the scheduler afterwards, batched, how many it made. The
scheduler keeps the decisions:

Contract: `LeaseBook(ttl, max_leases, max_per_client)` is pure state; every method takes
`now` (any monotonic clock) and returns what to do; nothing here sends or sleeps.
- `grant(lease_id, client, answer, target, dag, worker_id, slots, now, waiting)` returns the
  new `Lease`, or a `str` saying why none is granted: calls wait in the scheduler's queue
  (`waiting` > 0: the capacity is wanted by calls that already wait), the book is full
  (`max_leases`), or the client holds `max_per_client` leases. A client asking again for a
  target it holds a live lease on gets that lease back, renewed (one lease per client and
  target, so a client cannot multiply its slots by asking twice); with `spread` (a client
  whose calls queue against the slots it holds) it may hold one per worker: asking again
  for the same worker gets that lease back. Either way a lease takes only free slots, which
  then count as the worker's load, so spreading never takes more than the workers have
  free, and a client's leases stay within `max_per_client`.
- `workers_of(client, answer, target, dag, now)`: the workers this client holds live
  leases of the target on. `on_worker(worker_id)`: the live leases on a worker.
- `leasable(window, others)`: the slots a grant or renewal may lease on a worker: what is
  free, less `SCHEDULER_SLOTS` kept for the scheduler (0: a lease may take them all).
- `resize(lease_id, slots)`: at a renewal, a lease grows to what its worker's window
  leaves it now (never shrinks: its client may have calls in flight on those slots).
- `renew(lease_id, client, now, waiting, versions)`: a lease of that client still in the
  book runs for `ttl` more seconds (`Lease`); while calls wait in the queue it is revoked instead
  (`Revoked`: the capacity goes back to them), and so it is when `versions` (its functions'
  registered versions now) differ from those it was granted with (a re-registration reaches
  leased calls at the next renewal); an unknown, expired or foreign lease gives None.
- `release(lease_id, client)`: the client gives it back (None if not its own).
- `expire(now, behind=False)`: the leases whose time ran out, revoked. A renewal is sent
  half a ttl before the end, but a scheduler that is behind (messages wait unread in its
  input: `behind`) may not have read it yet: then only the leases past their end by one
  more ttl are revoked, and a renewal read meanwhile renews the lease (as a grant asked
  again does). So a busy scheduler does not take away, mid-burst, the lease of a client
  that renewed in time. The worker is told each lease for that longer time
  (`worker_ttl`): it ends a lease sooner only when the scheduler says so.
- `worker_lost(worker_id)`: every lease on a worker that died, revoked with `worker_died`
  (calls in flight there are lost; their client retries them within their budget).
- `reclaim(waiting, loads)`: calls wait for a worker: revoke leases until their slots
  cover `waiting` calls (all of them when fewer slots are leased), first those on the
  workers with the fewest of the scheduler's own calls unfinished (`loads`: worker id ->
  calls; a worker missing counts 0), oldest first among equals. So calls keep following
  capacity: a lease never holds a worker that waiting calls need, and the capacity given
  back is first that of idle workers: a waiting call then runs at once, rather than in a
  slot freed behind a call already running there (which may be a long one) while a leased
  worker idles.
- Holders that die. Calls a worker admitted under a lease run on after the lease ends
  (revoked, expired, given back). So that a client killed mid-lease does not leave them
  running to their time limits, the book keeps each ended lease (`ended`, at most
  `max_leases`, for at most `ENDED_KEEP` s) and hears of its holder: `heard(answer, ttl,
  now)` for every sign of life (a `lease` renewal of the client's calls with its ttl, or a
  lease request: the last ttl heard, else `HOLDER_TTL`); `left(answer)` when the client
  said it leaves (a `lease` with ttl 0). `gone(now)` returns, once each, the ended leases
  whose holder left or has been silent past its ttl, as `Revoked` with `holder_gone`: the
  worker then cancels what it admitted under them. A living client renews its `lease`
  while it has calls in flight, direct ones included, so its calls are never cancelled
  so; one with none left has nothing to cancel. `idle()`: no lease, live or ended.
- `registered_again(name, dag)`: function `name` (or, with `dag`, the DAG `name`) was
  registered again or deleted through this scheduler: the live leases that run it,
  revoked at once (a renewal would catch it too, up to a lease's ttl later).
- `revoke_all(reason)`: every live lease, revoked (a stopping scheduler's: its clients'
  calls then go to another scheduler).
- One caller at a time on a leased worker. A worker runs its calls one at a time, so a
  direct call sent to a worker that runs another caller's call waits behind it, however
  long it is, while the platform could have run it elsewhere. So a worker never holds a
  client's lease and another caller's call at once: `placed(workers, answer)` (the
  scheduler places a call of the caller whose answer address is `answer` on `workers`)
  revokes at once the live leases other clients hold on them; the scheduler tells the
  worker before it sends the call, so a direct call that reaches the worker afterwards is
  refused (it did not run; its client sends it through the scheduler) and its client's
  further calls go elsewhere. And a lease is granted only on a worker that runs no other
  caller's call of this scheduler (`shared_workers(calls, answer)`: the workers among
  `calls`, pairs of a caller's answer address and the workers its call runs on, that run
  a call of another caller than `answer`). A client's own calls never revoke its leases.
- `reserved()`: worker id -> slots leased on it. The scheduler counts them as that worker's
  load, so its own placement treats a leased slot as taken.
- `lease(lease_id)`: the live lease, or None.
Bounded: at most `max_leases` leases, `max_per_client` per client.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, Union

__all__ = ["Lease", "Revoked", "LeaseBook", "DEFAULT_TTL", "MAX_LEASES", "MAX_PER_CLIENT",
           "SCHEDULER_SLOTS", "leasable", "shared_workers", "worker_ttl"]

DEFAULT_TTL = 2.0          # seconds a lease lasts unless renewed
HOLDER_TTL = 5.0           # a holder's lease on its calls when none was heard (Client's default)
ENDED_KEEP = 600.0         # seconds an ended lease waits for its holder's verdict at most
MAX_LEASES = 4096          # leases one scheduler keeps at once
MAX_PER_CLIENT = 16        # leases one client holds at once
# Slots of a worker's window never leased, kept for the scheduler's own calls. 0: with 1, a
# client's burst of short calls held half the slots of window-2 workers and ran 35 % slower
# than on the scheduler's path, and a call the scheduler must place while every slot is
# leased waits only until `reclaim` revokes an idle worker's lease (least loaded first).
SCHEDULER_SLOTS = 0


def leasable(window: int, others: int) -> int:
    """How many slots a lease may take on a worker whose window is `window` and which holds
    `others` calls or leased slots besides: what is free, less `SCHEDULER_SLOTS`. With a
    reserve, leases never take a worker's whole window, so the scheduler can place a call on a
    leased worker that idles rather than behind a call running on another (a long one)."""
    return max(0, window - others - SCHEDULER_SLOTS)


def worker_ttl(ttl: float) -> float:
    """How long a worker keeps a lease from a grant or renewal: the scheduler's ttl and the
    one more it waits for a renewal while behind (`LeaseBook.expire`); the scheduler revokes
    it explicitly before then."""
    return 2 * ttl


def shared_workers(calls: Iterable[Tuple[str, Iterable[str]]], answer: str) -> Set[str]:
    """The workers that run a call of another caller than the one at `answer` (`calls`:
    each call in flight's caller answer address and workers): no lease of that client goes
    there, or its direct calls would wait behind that call (module contract)."""
    return {worker for caller, workers in calls if caller != answer for worker in workers}



@dataclass
class Lease:
    """One granted lease. `client` is the holder's role ("" on a plain cluster); `answer`
    its answer address, where grants, renewals and revocations go."""

    lease_id: str
    client: str
    answer: str
    target: str
    dag: bool
    worker_id: str
    slots: int
    expires: float
    granted: float
    versions: Dict[str, Any] = field(default_factory=dict)   # what it was granted to run


@dataclass
class Revoked:
    """A lease taken back: tell its worker and its client why."""

    lease: Lease
    reason: str
    worker_died: bool = False
    holder_gone: bool = False      # its client is gone: cancel the calls admitted under it


class LeaseBook:
    """The scheduler's worker leases; see the module contract."""

    def __init__(self, ttl: float = DEFAULT_TTL, max_leases: int = MAX_LEASES,
                 max_per_client: int = MAX_PER_CLIENT) -> None:
        if not ttl > 0 or max_leases < 1 or max_per_client < 1:
            raise ValueError(f"LeaseBook: need ttl > 0 and positive bounds, not {ttl!r}, "
                             f"{max_leases!r}, {max_per_client!r}")
        self.ttl = float(ttl)
        self._ended: Dict[str, Tuple[Lease, float]] = {}   # lease id -> (lease, when it ended)
        self._holders: Dict[str, Tuple[float, float]] = {}  # answer -> (last heard, its ttl)
        self.max_leases = max_leases
        self.max_per_client = max_per_client
        self._leases: Dict[str, Lease] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def lease(self, lease_id: str) -> Optional[Lease]:
        return self._leases.get(lease_id)

    def grant(self, lease_id: str, client: str, answer: str, target: str, dag: bool,
              worker_id: str, slots: int, now: float, waiting: int = 0,
              versions: Optional[Dict[str, Any]] = None,
              spread: bool = False) -> Union[Lease, str]:
        """A new lease, the client's live one for `target` renewed, or why none."""
        if waiting > 0:
            return (f"{waiting} call(s) wait in the scheduler's queue for a free worker: "
                    f"its capacity goes to them, not to a lease")
        for held in self._leases.values():
            if held.client == client and held.answer == answer and held.target == target \
                    and held.dag == dag and held.expires + self.ttl > now \
                    and (not spread or held.worker_id == worker_id):
                held.expires = now + self.ttl
                return held
        if len(self._leases) >= self.max_leases:
            return f"the scheduler holds its most leases ({self.max_leases})"
        mine = sum(1 for held in self._leases.values()
                   if held.client == client and held.answer == answer)
        if mine >= self.max_per_client:
            return f"this client holds its most leases ({self.max_per_client})"
        if slots < 1:
            return "no slot to lease"
        lease = Lease(lease_id, client, answer, target, dag, worker_id, int(slots),
                      now + self.ttl, now, dict(versions or {}))
        self._leases[lease_id] = lease
        return lease

    def resize(self, lease_id: str, slots: int) -> None:
        """The lease holds `slots` from now if that is more: its worker's window grew. Never
        fewer: its client may have calls in flight on them (reclaiming is `reclaim`'s)."""
        lease = self._leases.get(lease_id)
        if lease is not None:
            lease.slots = max(lease.slots, int(slots))

    def workers_of(self, client: str, answer: str, target: str, dag: bool,
                   now: float) -> List[str]:
        return sorted({held.worker_id for held in self._leases.values()
                       if held.client == client and held.answer == answer
                       and held.target == target and held.dag == dag
                       and held.expires + self.ttl > now})     # still here: see `expire`

    def on_worker(self, worker_id: str) -> List[Lease]:
        return [held for held in self._leases.values() if held.worker_id == worker_id]

    def renew(self, lease_id: str, client: str, now: float, waiting: int = 0,
              versions: Optional[Dict[str, Any]] = None) -> Union[Lease, Revoked, None]:
        lease = self._leases.get(lease_id)
        # past its end but still here: its scheduler was behind (`expire`); renewed
        if lease is None or lease.client != client or lease.expires + self.ttl <= now:
            return None
        if versions is not None and versions != lease.versions:
            self._end(self._leases.pop(lease_id))
            return Revoked(lease, "its functions were registered again (or its DAG deleted) "
                                  "since it was granted")
        if waiting > 0:
            self._end(self._leases.pop(lease_id))
            return Revoked(lease, f"{waiting} call(s) wait for a free worker: the lease's "
                                  f"slots go back to the scheduler")
        lease.expires = now + self.ttl
        return lease

    def release(self, lease_id: str, client: str) -> Optional[Lease]:
        lease = self._leases.get(lease_id)
        if lease is None or lease.client != client:
            return None
        self._end(self._leases.pop(lease_id))
        return lease

    def expire(self, now: float, behind: bool = False) -> List[Revoked]:
        end = now - self.ttl if behind else now      # behind: its renewal may wait unread
        out = [Revoked(lease, f"it expired ({now - lease.expires + self.ttl:.1f} s without "
                              f"a renewal)")
               for lease in self._leases.values() if lease.expires <= end]
        for r in out:
            self._end(self._leases.pop(r.lease.lease_id))
        return out

    def worker_lost(self, worker_id: str, why: str = "died") -> List[Revoked]:
        out = [Revoked(lease, f"its worker {worker_id} {why}", worker_died=True)
               for lease in self._leases.values() if lease.worker_id == worker_id]
        for r in out:
            del self._leases[r.lease.lease_id]
        return out

    def reclaim(self, waiting: int, loads: Optional[Dict[str, int]] = None) -> List[Revoked]:
        if waiting <= 0:
            return []
        loads = loads or {}
        out: List[Revoked] = []
        freed = 0
        for lease in sorted(self._leases.values(),
                            key=lambda held: (loads.get(held.worker_id, 0), held.granted)):
            if freed >= waiting:
                break
            out.append(Revoked(lease, f"{waiting} call(s) wait for a free worker: the "
                                      f"lease's slots go back to the scheduler"))
            freed += lease.slots
        for r in out:
            self._end(self._leases.pop(r.lease.lease_id))
        return out

    # ---- holders that die ----
    def _end(self, lease: Lease) -> None:
        """The lease ended with calls perhaps still running under it: kept for `gone`."""
        if len(self._ended) >= self.max_leases:
            del self._ended[min(self._ended, key=lambda lid: self._ended[lid][1])]
        self._ended[lease.lease_id] = (lease, lease.expires + ENDED_KEEP)

    def _holds(self, answer: str) -> bool:
        return any(held.answer == answer for held in self._leases.values()) or \
            any(lease.answer == answer for lease, _ in self._ended.values())

    def heard(self, answer: str, ttl: Optional[float], now: float) -> None:
        """A sign of life from the holder at `answer` (its calls' lease ttl, if it said)."""
        if answer not in self._holders and not self._holds(answer):
            return                            # not a holder: nothing to keep (bounded)
        last = self._holders.get(answer)
        self._holders[answer] = (now, ttl if ttl else (last[1] if last else HOLDER_TTL))

    def left(self, answer: str) -> None:
        """The holder said it leaves: its ended leases' calls are cancelled at `gone`."""
        if answer in self._holders or self._holds(answer):
            self._holders[answer] = (float("-inf"), 0.0)

    def gone(self, now: float) -> List[Revoked]:
        out: List[Revoked] = []
        for lease_id, (lease, keep_until) in list(self._ended.items()):
            heard = self._holders.get(lease.answer)
            if heard is None:                 # never heard since: from when it ended
                heard = (lease.expires - self.ttl, HOLDER_TTL)
                self._holders[lease.answer] = heard
            if now > heard[0] + heard[1]:
                del self._ended[lease_id]
                out.append(Revoked(lease, "its client is gone (it stopped renewing its "
                                          "lease, or left)", holder_gone=True))
            elif now > keep_until:
                del self._ended[lease_id]
        for answer in [a for a in self._holders if not self._holds(a)]:
            del self._holders[answer]
        return out

    def registered_again(self, name: str, dag: bool) -> List[Revoked]:
        what = f"DAG {name!r}" if dag else f"function {name!r}"
        out = [Revoked(lease, f"its {what} was registered again or deleted")
               for lease in self._leases.values()
               if (lease.dag and lease.target == name if dag else name in lease.versions)]
        for r in out:
            self._end(self._leases.pop(r.lease.lease_id))
        return out

    def revoke_all(self, reason: str) -> List[Revoked]:
        """Every live lease, revoked (the scheduler is stopping)."""
        out = [Revoked(lease, reason) for lease in self._leases.values()]
        for r in out:
            self._end(self._leases.pop(r.lease.lease_id))
        return out

    def placed(self, workers: Iterable[str], answer: str) -> List[Revoked]:
        """A call of the caller at `answer` was placed on `workers`: the live leases other
        clients hold there, revoked at once (module contract)."""
        on = set(workers)
        out = [Revoked(lease, f"its worker {lease.worker_id} was given another caller's "
                              f"call, which a direct call would wait behind")
               for lease in self._leases.values()
               if lease.worker_id in on and lease.answer != answer]
        for r in out:
            self._end(self._leases.pop(r.lease.lease_id))
        return out

    def idle(self) -> bool:
        """No lease, live or ended: nothing for a tick to do."""
        return not self._leases and not self._ended

    def reserved(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for lease in self._leases.values():
            out[lease.worker_id] = out.get(lease.worker_id, 0) + lease.slots
        return out
