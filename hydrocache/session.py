"""Sessions: read-your-writes and monotonic reads from a client into its calls (pure).

Contract:
- A session is what one client wrote and read: for each key, its *floor*, the newest version
  of the key the session knows of. A plain (last-writer-wins) value's floor is its LWW
  timestamp; a causal value's is its vector clock; a key merged as a lattice
  (`put(key, lattice)`) is only marked `merged` (it is read from every replica, whose merge
  holds every version any of them had); a plain key the session deleted has the tombstone's
  timestamp, marked `deleted`: a value older than it reads as absent.
- `Session(max_keys)` keeps at most `max_keys` floors, the least recently noted forgotten
  first. What it forgets is summed up, so the guarantee survives the bound at a cost:
  `overflow_timestamp` is the newest forgotten plain timestamp (a plain value cached with an
  older timestamp is re-read from the KVS before it is read), and `overflow_causal` says a
  causal or merged floor was forgotten (every causal read re-reads its key from the KVS once,
  and every merged lattice is read from every replica: a key listed again after it was
  forgotten may be listed with less than was forgotten).
- `note_plain(key, ts)`, `note_deleted(key, ts)`, `note_causal(key, vc)`, `note_merged(key)`
  raise a floor (never lower it: a floor is the max of what was noted, the merge of the
  clocks; `deleted` goes with the newest timestamp); `absorb(proto)` notes
  every floor of a `cloudburst.Session` (what a call read and wrote). `to_proto(keys=None)`
  is the session as sent (every floor, or the floors of `keys` and the overflow), and
  `encode()` the whole of it serialised, from each floor's encoding kept until it changes;
  `Session.from_proto(message)` reads one back. `named(keys)` is the session as a call
  naming `keys` carries it: their floors, the overflow, and the floors left out summed up
  (`omitted_timestamp`, `omitted_causal`: bounds for keys not listed only), so a call
  carries a few floors instead of up to 1,024.
- The decisions (plain functions of a `cloudburst.Session` message and what a cache holds):
  `plain_floor(session, key)` is `(floor, own)`: a cached copy of `key` older than `floor`
  is not read; `own` is the key's listed floor (0: not listed), which a read from every
  replica must reach (the overflow's part of `floor` the key itself may never have reached:
  then a read from the KVS is all it needs). `plain_fresh(cached_ts, floor)`: may a
  cached copy with timestamp `cached_ts` be read? `plain_after_fetch(ts, floor, own,
  every_replica, deleted)` decides after a read from the KVS: `ACCEPT`, `READ_ALL` (a replica may lag:
  read and merge every replica), `ABSENT` (older than the session's delete: the key reads as
  missing) or `STALE` (every replica was read and none reaches the key's own floor: the write the
  floor stands for is lost; the read fails naming the key).
  `causal_stale(session, keys, version_of)` lists the keys whose cached causal version does
  not supersede their floor (to re-read from the KVS before binding), and `causal_unmet`
  those still short of it afterwards. A key not listed in a session with floors left out
  (`omitted_*`) is held to those as to an overflow: its plain floor is at least
  `omitted_timestamp`, and with `omitted_causal` it is re-read from the KVS and treated as
  possibly merged. `Floors.restrict(keys)` folds that bound into the overflow of the request
  it makes when a key asked for is not listed, so requests never carry `omitted_*`.
  `Floors(session)` indexes a request's session by key,
  lazily: one pass over the keys' names on first use, a key's floor made when it is asked for.
- `refusal(session)` says why a session as received may not be used (more than
  `MAX_SENT_KEYS` floors, or plain keys and timestamps of different counts); None if it may.
No sockets, clocks or sleeps; the node caches and the client are thin around these.
"""
from __future__ import annotations

import collections
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

from hydro_proto import cloudburst_pb2 as pb

from .vclock import merge, supersedes

__all__ = ["ABSENT", "SessionUnmet", "Session", "refusal", "MAX_SENT_KEYS", "Floor", "DEFAULT_MAX_KEYS", "plain_floor", "plain_fresh",
           "plain_after_fetch", "ACCEPT", "READ_ALL", "STALE", "causal_stale", "causal_unmet",
           "merged_key", "Floors", "index"]

DEFAULT_MAX_KEYS = 1024    # floors a client's session keeps before it sums up the oldest
MAX_SENT_KEYS = 65536      # floors a call's session may carry (a scheduler refuses more)

ACCEPT, READ_ALL, STALE, ABSENT = "accept", "read_all", "stale", "absent"


class SessionUnmet(Exception):
    """A causal key's versions in the KVS stay short of the session's floor for it."""


class Floor(NamedTuple):
    """One key's floor: a plain timestamp (a delete's when `deleted`), a causal clock, whether
    it is a merged lattice."""

    timestamp: int = 0
    vc: Mapping[str, int] = {}
    merged: bool = False
    deleted: bool = False


class Session:
    """A bounded session; see the module contract."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"a session keeps at least one key, got max_keys={max_keys!r}")
        self.max_keys = max_keys
        self._floors: "collections.OrderedDict[str, Floor]" = collections.OrderedDict()
        self.overflow_timestamp = 0
        self.overflow_causal = False
        self.changes = 0       # counts changes, so a sender may keep the session as sent
        self._encoded: Dict[str, bytes] = {}   # key -> its floor as sent (`encode`)
        # bounds of what `named` leaves out, kept as floors change: the newest timestamp of
        # any floor ever held (floors only rise; a forgotten one went to the overflow), and
        # how many floors held are causal or merged
        self._newest_timestamp = 0
        self._causal_floors = 0

    def __len__(self) -> int:
        return len(self._floors)

    def __contains__(self, key: object) -> bool:
        return key in self._floors

    def floor(self, key: str) -> Optional[Floor]:
        return self._floors.get(key)

    # ---- noting ----
    def _note(self, key: str, timestamp: int = 0, vc: Optional[Mapping[str, int]] = None,
              merged: bool = False, deleted: bool = False) -> None:
        old = self._floors.pop(key, None)
        if old is not None:
            if timestamp < old.timestamp or (timestamp == old.timestamp and old.deleted):
                deleted = old.deleted          # the newest timestamp says whether it was gone
            timestamp = max(timestamp, old.timestamp)
            vc = merge(old.vc, vc or {}) if (vc or old.vc) else {}
            merged = merged or old.merged
        new = Floor(timestamp, dict(vc or {}), merged, deleted and timestamp > 0)
        if new != old:
            self.changes += 1
            self._encoded.pop(key, None)
        self._floors[key] = new
        self._newest_timestamp = max(self._newest_timestamp, timestamp)
        self._causal_floors += _causal(new) - (old is not None and _causal(old))
        while len(self._floors) > self.max_keys:
            gone_key, gone = self._floors.popitem(last=False)
            self._encoded.pop(gone_key, None)
            self._causal_floors -= _causal(gone)
            self.overflow_timestamp = max(self.overflow_timestamp, gone.timestamp)
            self.overflow_causal = self.overflow_causal or bool(gone.vc) or gone.merged

    def note_plain(self, key: str, timestamp: int) -> None:
        """`key` was written or read at LWW timestamp `timestamp`."""
        self._note(key, timestamp=int(timestamp))

    def note_deleted(self, key: str, timestamp: int) -> None:
        """`key` was deleted with tombstone timestamp `timestamp`."""
        self._note(key, timestamp=int(timestamp), deleted=True)

    def note_causal(self, key: str, vc: Mapping[str, int]) -> None:
        """A causal version of `key` with clock `vc` was written or read."""
        self._note(key, vc=dict(vc))

    def note_merged(self, key: str) -> None:
        """`key` holds a merged lattice this session wrote or read."""
        self._note(key, merged=True)

    def absorb(self, message: pb.Session) -> None:
        """Note every floor of `message` (what a call read and wrote)."""
        for key, ts in zip(message.plain_keys, message.plain_timestamps):
            self._note(key, ts)
        for k in message.keys:
            self._note(k.key, k.timestamp, dict(k.vc), k.merged, k.deleted)
        # floors `message` left out are not known here: their bound becomes an overflow
        over_ts = max(message.overflow_timestamp, message.omitted_timestamp)
        over_causal = message.overflow_causal or message.omitted_causal
        if over_ts > self.overflow_timestamp or (over_causal and not self.overflow_causal):
            self.changes += 1
        self.overflow_timestamp = max(self.overflow_timestamp, over_ts)
        self.overflow_causal = self.overflow_causal or over_causal

    # ---- as sent ----
    def to_proto(self, keys: Optional[Iterable[str]] = None) -> pb.Session:
        out = pb.Session(overflow_timestamp=self.overflow_timestamp,
                         overflow_causal=self.overflow_causal)
        chosen = self._floors.items() if keys is None else \
            ((k, self._floors[k]) for k in dict.fromkeys(keys) if k in self._floors)
        return _pack(out, chosen)

    def encode(self) -> bytes:
        """`to_proto()` serialised, from each floor's encoding kept since it last changed:
        a call carries the whole session, and between two calls a few floors change.
        (Repeated fields of concatenated encodings concatenate, in order.)"""
        encoded = self._encoded
        parts = []
        for key, f in self._floors.items():
            e = encoded.get(key)
            if e is None:
                e = encoded[key] = _pack(pb.Session(), ((key, f),)).SerializeToString()
            parts.append(e)
        parts.append(pb.Session(overflow_timestamp=self.overflow_timestamp,
                                overflow_causal=self.overflow_causal).SerializeToString())
        return b"".join(parts)

    def named(self, keys: Iterable[str]) -> pb.Session:
        """The session as a call naming `keys` carries it: the floors of `keys` (a key
        without one listed with none: plain, timestamp 0), the overflow, and a bound for every floor left out (`omitted_timestamp`: at
        least the newest timestamp left out; `omitted_causal`: a causal or merged floor was
        left out). Exact for the listed keys; for the others as strict as an overflow."""
        keys = list(dict.fromkeys(keys))
        out = self.to_proto(keys)
        listed = len(out.plain_keys) + len(out.keys)
        if listed < len(self._floors):
            out.omitted_timestamp = self._newest_timestamp
            out.omitted_causal = self._causal_floors > sum(
                1 for k in out.keys if k.vc or k.merged)
            # a named key without a floor is listed with none (plain, timestamp 0), so the
            # bound of what was left out does not apply to it
            unheld = [k for k in keys if k not in self._floors]
            out.plain_keys.extend(unheld)
            out.plain_timestamps.extend([0] * len(unheld))
        return out

    @classmethod
    def from_proto(cls, message: pb.Session, max_keys: Optional[int] = None) -> "Session":
        size = len(message.keys) + len(message.plain_keys)
        s = cls(max_keys or max(DEFAULT_MAX_KEYS, size))
        s.absorb(message)
        return s


def _causal(f: Floor) -> bool:
    return bool(f.vc) or f.merged


def _pack(out: pb.Session, floors: Iterable[Tuple[str, Floor]]) -> pb.Session:
    """Floors into `out`: plain ones as the two parallel lists, the others as entries."""
    plain_keys, plain_ts, entries = [], [], []
    for key, f in floors:
        if not f.vc and not f.merged and not f.deleted:
            plain_keys.append(key)
            plain_ts.append(f.timestamp)
            continue
        e = pb.SessionKey(key=key, timestamp=f.timestamp, merged=f.merged, deleted=f.deleted)
        if f.vc:
            e.vc.update(f.vc)
        entries.append(e)
    out.plain_keys.extend(plain_keys)
    out.plain_timestamps.extend(plain_ts)
    out.keys.extend(entries)
    return out


# ---- decisions ----
def _entry(session: Optional[pb.Session], key: str) -> Optional[Floor]:
    return index(session).get(key)


def index(session: Optional[pb.Session]) -> Dict[str, Floor]:
    """key -> its `Floor` (a request's keys look their floors up here)."""
    if session is None:
        return {}
    out = {key: Floor(ts) for key, ts in zip(session.plain_keys, session.plain_timestamps)}
    for k in session.keys:
        old = out.get(k.key)
        out[k.key] = Floor(max(k.timestamp, old.timestamp if old else 0), dict(k.vc), k.merged,
                           k.deleted)
    return out


def plain_floor(session: Optional[pb.Session], key: str,
                entries: "Optional[Mapping[str, Floor] | Floors]" = None) -> Tuple[int, int]:
    """(floor, own): a cached copy of `key` older than `floor` is not read (0: none); `own`
    is the key's listed floor (0: not listed), which a read from every replica must reach
    (the overflow's part of `floor` is a bound the key itself may never have reached)."""
    if session is None:
        return 0, 0
    e = entries.get(key) if entries is not None else _entry(session, key)
    if e is None:        # not listed: bounded by what was left out, if anything was
        return max(session.overflow_timestamp, session.omitted_timestamp), 0
    return max(e.timestamp, session.overflow_timestamp), e.timestamp


def merged_key(session: Optional[pb.Session], key: str,
               entries: "Optional[Mapping[str, Floor] | Floors]" = None) -> bool:
    """Is `key` a merged lattice of the session, or may it be (after an overflow)? Such a
    key is read from every replica."""
    if session is None:
        return False
    e = entries.get(key) if entries is not None else _entry(session, key)
    if e is None:
        return session.overflow_causal or session.omitted_causal
    return e.merged or session.overflow_causal


def refusal(session: pb.Session) -> Optional[str]:
    """Why `session` (as received) may not be used; None if it may."""
    plain, stamps = len(session.plain_keys), len(session.plain_timestamps)
    if plain != stamps:
        return f"its session has {plain} plain keys but {stamps} timestamps"
    if plain + len(session.keys) > MAX_SENT_KEYS:
        return (f"its session carries {plain + len(session.keys)} floors; at most "
                f"{MAX_SENT_KEYS} are accepted (Client(session_keys=...))")
    return None


def plain_fresh(cached_ts: Optional[int], floor: int) -> bool:
    """May a cached copy with LWW timestamp `cached_ts` (None: not cached) be read?"""
    return cached_ts is not None and cached_ts >= floor


def plain_after_fetch(ts: Optional[int], floor: int, own: int, every_replica: bool,
                      deleted: bool = False) -> str:
    """After reading a key from the KVS (`ts`: the value's timestamp, None: not found), with
    the key's `floor` and `own` floor (`plain_floor`); `deleted`: `own` is the session's
    delete of the key."""
    if deleted and own and (ts is None or ts < own):
        return ABSENT          # older than the delete this session made: gone, for it
    if floor == 0 or (ts is not None and ts >= floor):
        return ACCEPT
    if not every_replica:
        return READ_ALL
    # every replica merged: nothing newer exists. Short of its own floor, the version the
    # session wrote or read is gone; a missing key was deleted since (a newer act); the
    # overflow's part of the floor the key may simply never have reached
    return STALE if ts is not None and ts < own else ACCEPT


def _last_clocks(session: pb.Session) -> Dict[str, Any]:
    """key -> the clock of its last causal listing, as received (what `index` keeps of it);
    a node cache asks this of every bind, so no `Floor` is built and no clock converted here."""
    return {k.key: k.vc for k in session.keys}


def causal_stale(session: Optional[pb.Session], keys: Sequence[str],
                 version_of: Callable[[str], Optional[Mapping[str, int]]]) -> List[str]:
    """Keys of `keys` to re-read from the KVS before a causal read binds them: their cached
    version (`version_of(key)`: its clock, None when not cached) does not supersede their
    floor, or (after an overflow of causal floors) every one that is cached."""
    if session is None:
        return []
    clocks = _last_clocks(session)
    # only a key listed nowhere is held to the omitted floors
    plain = frozenset(session.plain_keys) if session.omitted_causal else frozenset()
    out = []
    for key in dict.fromkeys(keys):
        vc = version_of(key)
        if vc is None:
            continue             # not cached: it is read from the KVS anyway
        floor = clocks.get(key)
        if session.overflow_causal or \
                (floor is None and session.omitted_causal and key not in plain) or \
                (floor and not supersedes(vc, floor)):
            out.append(key)
    return out


def causal_unmet(session: Optional[pb.Session], keys: Sequence[str],
                 version_of: Callable[[str], Optional[Mapping[str, int]]]) -> List[str]:
    """Keys of `keys` whose cached version is still short of their listed floor."""
    if session is None:
        return []
    clocks = _last_clocks(session)
    out = []
    for key in dict.fromkeys(keys):
        floor = clocks.get(key)
        if not floor:
            continue
        vc = version_of(key)
        if vc is not None and not supersedes(vc, floor):
            out.append(key)      # (not cached after a read: the KVS has no such key)
    return out


class Floors:
    """A request's session, indexed by key: what a node cache asks of it per key.

    The index is built on first use and holds the received entries as they are; a key's
    `Floor` is made only when that key is asked for. A call's session may list a thousand
    keys while the call reads a few, so indexing costs one pass over the keys' names, not a
    conversion of every floor (its clock) per request."""

    __slots__ = ("session", "_plain", "_causal", "_stamps", "_made")

    def __init__(self, session: Optional[pb.Session]) -> None:
        self.session = session
        self._plain: Optional[Dict[str, int]] = None
        self._causal: Dict[str, pb.SessionKey] = {}
        self._stamps: Dict[str, int] = {}       # keys listed more than once: newest timestamp
        self._made: Dict[str, Floor] = {}

    def _index(self) -> None:
        s = self.session
        if s is None:
            self._plain = {}
            return
        # as `index`: the last plain listing of a key counts; an entry's timestamp is the
        # newest of every listing of its key; its clock and marks are the last entry's
        self._plain = dict(zip(s.plain_keys, s.plain_timestamps))
        causal = self._causal
        for k in s.keys:
            old = causal.get(k.key)
            if old is not None:
                self._stamps[k.key] = max(self._stamps.get(k.key, old.timestamp), k.timestamp)
            causal[k.key] = k

    def get(self, key: str) -> Optional[Floor]:
        """The floor of `key` (None: not listed), the same as `index(session).get(key)`."""
        made = self._made.get(key)
        if made is not None:
            return made
        if self._plain is None:
            self._index()
        assert self._plain is not None
        ts = self._plain.get(key)
        k = self._causal.get(key)
        if k is None:
            return None if ts is None else self._made.setdefault(key, Floor(ts))
        stamp = max(self._stamps.get(key, k.timestamp), ts or 0)
        return self._made.setdefault(key, Floor(stamp, dict(k.vc), k.merged, k.deleted))

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def floor(self, key: str) -> Tuple[int, int]:
        return plain_floor(self.session, key, self)

    def merged(self, key: str) -> bool:
        return merged_key(self.session, key, self)

    def deleted(self, key: str) -> bool:
        """Is the floor of `key` the session's delete of it?"""
        e = self.get(key)
        return e is not None and e.deleted

    def fresh(self, key: str, cached_ts: Optional[int]) -> bool:
        """May the cached plain copy of `key` (timestamp `cached_ts`) be read?"""
        return plain_fresh(cached_ts, self.floor(key)[0])

    def restrict(self, keys: Iterable[str]) -> pb.Session:
        """The floors of `keys` (those listed) with the overflow: what a request carries."""
        s = self.session
        out = pb.Session(overflow_timestamp=s.overflow_timestamp if s else 0,
                         overflow_causal=s.overflow_causal if s else False)
        chosen = []
        listed = []         # causal floors passed on as received (see below)
        unlisted = False
        if self._plain is None:
            self._index()
        assert self._plain is not None
        causal, plain, stamps = self._causal, self._plain, self._stamps
        for k in dict.fromkeys(keys):
            entry = causal.get(k)
            if entry is not None and k not in plain and k not in stamps:
                # listed once and only as causal: its floor is the received entry itself,
                # copied into the request by protobuf without a `Floor` made and re-encoded
                # (a causal worker restricts its call's session on every bind)
                listed.append(entry)
                continue
            f = self.get(k)
            if f is not None:
                chosen.append((k, f))
            else:
                unlisted = True
        if unlisted and s is not None:
            # a key asked for whose floor may have been left out: held to the bound of
            # what was left out, which in a request only the overflow can say
            out.overflow_timestamp = max(out.overflow_timestamp, s.omitted_timestamp)
            out.overflow_causal = out.overflow_causal or s.omitted_causal
        out.keys.extend(listed)
        return _pack(out, chosen)
