"""A client's objects in the KVS: `put`, `get` and `delete` of values under user keys.

Contract:
- `ObjectStore(kvs_address, ip, auth, client_id, context)` reads and writes through one
  `anna_core.Client`, serialised by a lock so a `cloudburst.Client` shared by threads stays
  safe. With keys it is made at once, on the `cloudburst.Client`'s ZeroMQ context (sharing
  its authenticator), so it never needs the key files again: a client whose key directory
  was removed (a stopped cluster's temporary one) still gets the cluster's typed errors.
  Without keys it is made on first use.
- `follow(kvs_address)` moves to another KVS address (the cluster restarted with a new one).
- `put` writes every replica (`put_all`), so a call made afterwards reads the value whichever
  replica its executor asks: a plain value last-writer-wins, a lattice is merged on the
  server, and `consistency="causal"` writes a `MultiKeyCausalLattice` version whose clock is
  `{client_id: next counter}`.
- `put` returns the version it wrote (`Written`: an LWW timestamp, a causal clock, or
  `merged` for a lattice) and `delete` its tombstone's timestamp, which the client's session
  notes. `read(key, ..., floor, own, merged, deleted)` returns the value with the version it
  read, deciding as a node cache does (`hydrocache.session.plain_after_fetch`): a plain value
  older than `floor` (replicas lag a write by up to a gossip period), or a key the session
  merged lattices into, is read from every replica and merged; older than the session's own
  delete of it (`deleted`, at `own`), the key is absent; still older than `own` after every
  replica, the version is gone from the KVS and the read fails naming the key.
- `get` reads values as data (`faas.values.loads`): plain data only unless
  `objects=True`. `ObjectNotFound` for a missing key; KVS timeouts become `Timeout`.
- `put_bytes` / `get_bytes` (None when missing) / `delete_bytes` move raw bytes (a large
  argument or result, `cloudburst.big_values`). A value above the KVS's maximum value size
  raises `ValueTooLarge` naming the key and the limit. Their puts and gets wait up to
  `BIG_VALUE_TIMEOUT` for one answer instead of retrying after 5 s: a retry would make the
  KVS send the whole value again, on top of the slow first one.
- `close()` closes the KVS client.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple

from hydro_proto import anna_pb2
from hydrocache.session import ABSENT, READ_ALL, STALE, plain_after_fetch
from runtime.auth import AuthConfig
from faas.keys import check_user_key
from faas.values import CAUSAL_LATTICES, dumps, is_lattice, loads

from .errors import CloudburstError, ObjectNotFound, Timeout, ValueTooLarge
from .options import _CONSISTENCY

__all__ = ["ObjectStore", "Written", "BIG_VALUE_TIMEOUT"]

BIG_VALUE_TIMEOUT = 30.0     # seconds one put or get of a large value may take


def _stamp(lattice: Any) -> Optional[int]:
    return lattice.timestamp if lattice is not None and \
        lattice.lattice_type == anna_pb2.LWW else None


class Written(NamedTuple):
    """The version of a key a put wrote or a read returned (for the client's session)."""

    timestamp: int = 0                       # a plain value's LWW timestamp
    vc: Optional[Dict[str, int]] = None      # a causal value's vector clock
    merged: bool = False                     # a lattice merged in the KVS


class ObjectStore:
    """User objects in the KVS (see the module contract)."""

    def __init__(self, kvs_address: str, ip: str, auth: Optional[AuthConfig],
                 client_id: str, context: Any = None) -> None:
        self.kvs_address = kvs_address
        self.client_id = client_id
        self._ip = ip
        self._auth = auth
        self._context = context
        self._kvs: Any = None
        self._lock = threading.Lock()
        self._counter = 0
        self._clock: Any = None       # LWW timestamps of this client's puts
        if auth is not None:
            self._client()

    def follow(self, kvs_address: str) -> None:
        """Read and write through the KVS at `kvs_address` from now on."""
        with self._lock:
            if kvs_address == self.kvs_address:
                return
            old, self._kvs = self._kvs, None
            self.kvs_address = kvs_address
            if old is not None:
                old.close()
            self._client()

    def put(self, key: str, value: Any, consistency: str = "lww") -> Written:
        """Store `value` (any picklable object) under `key`.

        A plain value is last-writer-wins: of two concurrent puts one is kept. An
        `anna_core` lattice (`SetLattice`, `MaxLattice`, `MapLattice`, ...) is merged with
        what the key holds, on the server, so concurrent puts all count. With
        `consistency="causal"` the value is written as a causal version
        (`MultiKeyCausalLattice`, clock `{this client's id: next counter}`, no dependencies)
        that causal calls read.

        Returns once every replica of the key in the KVS has the value, so a call made
        afterwards reads it whichever replica its executor asks."""
        check_user_key(key)
        if consistency not in _CONSISTENCY:
            raise ValueError(f"consistency {consistency!r} is not supported (supported: "
                             f"{sorted(_CONSISTENCY)})")
        if is_lattice(value):
            if consistency == "causal":
                raise ValueError("a lattice is merged as it is; consistency='causal' applies "
                                 "to plain values")
            with self._lock:
                self._client().put_all(key, value)
            return Written(merged=True)
        data = dumps(value)
        self._check_size(key, data)
        import anna_core
        from anna_core.wire import MonotoneClock
        with self._lock:
            if consistency == "causal":
                self._counter += 1
                vc = {self.client_id: self._counter}
                self._client().put_all(key, anna_core.MultiKeyCausalLattice(vc, {}, [data]))
                return Written(vc=vc)
            if self._clock is None:
                self._clock = MonotoneClock()
            lattice = anna_core.LWWLattice(self._clock.next(), data)
            self._client().put_all(key, lattice)
            return Written(timestamp=lattice.timestamp)

    def get(self, key: str, consistency: str = "lww", concurrent: bool = False, *,
            objects: bool = False) -> Any:
        """The value stored under `key`; raises `ObjectNotFound` if there is none. A causal
        key (written with `consistency="causal"` or by a causal call) yields the first of its
        concurrent values (sorted by serialized bytes), or the list of all with
        `concurrent=True`. A lattice put with `put(key, lattice)` comes back as the lattice.

        Values are data, not code: a value is read as plain data (numbers, strings, bytes,
        lists, tuples, dicts, sets, dates, ...; `faas.values`) and one that is more (an
        instance of your class, a numpy array) raises `UnsafeValue` naming the Python global
        it refers to, without running anything. `objects=True` unpickles it fully, which runs
        whatever code its writer chose: use it for keys written by someone you trust
        (docs/SECURITY.md)."""
        return self.read(key, consistency, concurrent, objects=objects)[0]

    def read(self, key: str, consistency: str = "lww", concurrent: bool = False, *,
             objects: bool = False, floor: int = 0, own: int = 0, merged: bool = False,
             deleted: bool = False) -> Tuple[Any, Written]:
        """`get`, with the version read; see the module contract for `floor` and `merged`."""
        import anna_core
        check_user_key(key)
        if consistency not in _CONSISTENCY:
            raise ValueError(f"consistency {consistency!r} is not supported (supported: "
                             f"{sorted(_CONSISTENCY)})")
        with self._lock:
            try:
                lattice = self._read(key, floor, own, merged, deleted)
            except anna_core.Timeout as e:
                raise Timeout(f"the KVS to answer GET {key!r} ({e})") from None
        if lattice is None:
            raise ObjectNotFound(key)
        if lattice.lattice_type == anna_pb2.LWW:
            data, version = lattice.reveal(), Written(timestamp=lattice.timestamp)
        elif lattice.lattice_type in CAUSAL_LATTICES:
            data, version = lattice, Written(vc=dict(lattice.vector_clock))
        else:
            data, version = lattice, Written(merged=True)
        return self._decoded(key, data, consistency, concurrent, objects), version

    def _read(self, key: str, floor: int, own: int, merged: bool, deleted: bool) -> Any:
        """The key's lattice (None: not found), from every replica when one may lag."""
        import anna_core
        kvs = self._client()
        lattice = None
        if not merged:
            try:
                lattice = kvs.get_lattice(key)
            except anna_core.KeyNotFound:
                pass
            if lattice is not None and lattice.lattice_type != anna_pb2.LWW:
                return lattice
            decision = plain_after_fetch(_stamp(lattice), floor, own, False, deleted)
            if decision != READ_ALL:
                return None if decision == ABSENT else lattice
        for _, replica in kvs.get_replicas(key):
            lattice = replica if lattice is None else lattice.merge(replica)
        if lattice is None or lattice.lattice_type != anna_pb2.LWW:
            return lattice
        decision = plain_after_fetch(_stamp(lattice), floor, own, True, deleted)
        if decision == STALE:
            raise CloudburstError(f"every replica of key {key!r} holds a value older than "
                                  f"this client wrote or read (timestamp {lattice.timestamp} "
                                  f"< {own}): that version is gone from the KVS")
        return None if decision == ABSENT else lattice

    def _decoded(self, key: str, data: Any, consistency: str, concurrent: bool,
                 objects: bool) -> Any:

        def decode(value: bytes) -> Any:
            return loads(value, objects, key=key,
                         opt_in=f"Client.get({key!r}, objects=True)")

        if isinstance(data, (bytes, bytearray, memoryview)):
            if consistency == "causal":
                raise CloudburstError(f"key {key!r} holds an LWW value, not a causal one")
            return [decode(data)] if concurrent else decode(data)
        if data.lattice_type not in CAUSAL_LATTICES:
            return data          # a lattice put with `put(key, lattice)`: merged, as stored
        revealed = data.reveal()
        if concurrent:
            return [decode(v) for v in revealed]
        if not revealed:
            raise ObjectNotFound(key)
        return decode(revealed[0])

    def delete(self, key: str) -> int:
        """Delete the object stored under `key` (deleting a missing key is not an error).
        Node caches holding a plain key drop it when Anna tells them. A causal key's history
        is not undone: its versions stay in the node caches' causal cuts and in the
        dependencies of other keys' versions, and a version put afterwards is concurrent with
        them, so causal calls may read both (use a fresh key instead of deleting and writing
        one again). Returns the tombstone's timestamp."""
        import anna_core
        check_user_key(key)
        with self._lock:
            try:
                return self._client().delete(key)
            except anna_core.Timeout as e:
                raise Timeout(f"the KVS to answer DELETE {key!r} ({e})") from None

    @property
    def max_value_bytes(self) -> int:
        """The KVS's maximum value size, as this client knows it."""
        with self._lock:
            return self._client().max_value_bytes

    def _check_size(self, key: str, data: bytes) -> None:
        limit = self.max_value_bytes
        if len(data) > limit:
            raise ValueTooLarge(f"put {key!r}: the value is {len(data) / (1 << 20):,.1f} MiB "
                                f"serialized, above the limit of {limit / (1 << 20):g} MiB "
                                f"(the KVS's maximum value size)")

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store raw `data` under `key` on every replica."""
        import anna_core
        self._check_size(key, data)
        with self._lock, self._patient():
            try:
                self._client().put_all(key, data)
            except anna_core.Timeout as e:
                raise Timeout(f"the KVS to answer PUT {key!r} ({e})") from None
            except anna_core.ValueTooLarge as e:
                raise ValueTooLarge(f"put {key!r}: {e}") from None

    def get_bytes(self, key: str) -> Optional[bytes]:
        """The raw bytes stored under `key`, None if there are none."""
        import anna_core
        with self._lock, self._patient():
            try:
                data = self._client().get(key)
            except anna_core.KeyNotFound:
                return None
            except anna_core.Timeout as e:
                raise Timeout(f"the KVS to answer GET {key!r} ({e})") from None
        return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else None

    @contextlib.contextmanager
    def _patient(self) -> Iterator[None]:
        """One attempt of up to BIG_VALUE_TIMEOUT for the operation inside (lock held)."""
        kvs = self._client()
        timeout, retries = kvs.timeout, kvs.retries
        kvs.timeout, kvs.retries = max(timeout, BIG_VALUE_TIMEOUT), 0
        try:
            yield
        finally:
            kvs.timeout, kvs.retries = timeout, retries

    def delete_bytes(self, key: str) -> None:
        """Delete `key` (a large value's, under the platform's prefix)."""
        with self._lock:
            self._client().delete(key)

    def _client(self) -> Any:
        if self._kvs is None:
            import anna_core
            self._kvs = anna_core.Client(self.kvs_address, ip=self._ip, timeout=5.0,
                                         auth=self._auth, context=self._context)
        return self._kvs

    def close(self) -> None:
        if self._kvs is not None:
            self._kvs.close()
            self._kvs = None
