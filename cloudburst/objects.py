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
- `get` reads values as data (`runtime.values.loads`): plain data only unless
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
from typing import Any, Iterator, Optional

from runtime.auth import AuthConfig
from runtime.keys import check_user_key
from runtime.values import CAUSAL_LATTICES, dumps, is_lattice, loads

from .errors import CloudburstError, ObjectNotFound, Timeout, ValueTooLarge
from .options import _CONSISTENCY

__all__ = ["ObjectStore", "BIG_VALUE_TIMEOUT"]

BIG_VALUE_TIMEOUT = 30.0     # seconds one put or get of a large value may take


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

    def put(self, key: str, value: Any, consistency: str = "lww") -> None:
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
            return
        data = dumps(value)
        self._check_size(key, data)
        with self._lock:
            if consistency == "causal":
                import anna_core
                self._counter += 1
                lattice = anna_core.MultiKeyCausalLattice(
                    {self.client_id: self._counter}, {}, [data])
                self._client().put_all(key, lattice)
            else:
                self._client().put_all(key, data)

    def get(self, key: str, consistency: str = "lww", concurrent: bool = False, *,
            objects: bool = False) -> Any:
        """The value stored under `key`; raises `ObjectNotFound` if there is none. A causal
        key (written with `consistency="causal"` or by a causal call) yields the first of its
        concurrent values (sorted by serialized bytes), or the list of all with
        `concurrent=True`. A lattice put with `put(key, lattice)` comes back as the lattice.

        Values are data, not code: a value is read as plain data (numbers, strings, bytes,
        lists, tuples, dicts, sets, dates, ...; `runtime.values`) and one that is more (an
        instance of your class, a numpy array) raises `UnsafeValue` naming the Python global
        it refers to, without running anything. `objects=True` unpickles it fully, which runs
        whatever code its writer chose: use it for keys written by someone you trust
        (docs/SECURITY.md)."""
        import anna_core
        check_user_key(key)
        if consistency not in _CONSISTENCY:
            raise ValueError(f"consistency {consistency!r} is not supported (supported: "
                             f"{sorted(_CONSISTENCY)})")
        with self._lock:
            try:
                data = self._client().get(key)
            except anna_core.KeyNotFound:
                raise ObjectNotFound(key) from None
            except anna_core.Timeout as e:
                raise Timeout(f"the KVS to answer GET {key!r} ({e})") from None

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

    def delete(self, key: str) -> None:
        """Delete the object stored under `key` (deleting a missing key is not an error).
        Node caches holding it drop it when Anna tells them."""
        import anna_core
        check_user_key(key)
        with self._lock:
            try:
                self._client().delete(key)
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
