"""The function and DAG registry, stored in Anna so that every scheduler shares it.

Contract:
- Records are `cloudburst.FunctionRecord` / `cloudburst.DagRecord` protobufs stored as LWW
  values under `faas.keys.function_key(name)` / `dag_key(name)`; the names are also
  added to two `SetLattice` indexes (for `list`). Deleting a function or a DAG writes a
  tombstone record (`deleted = true`), so that the deletion reaches other schedulers as a
  pushed update.
- `Registry(kvs, update_address)`: `kvs` has `get(key) -> bytes` (raising
  `anna_core.KeyNotFound`), `put(key, value)` and `subscribe(key, address)`. Lookups are
  served from a local cache; a miss reads Anna and subscribes `update_address` to the key, so
  Anna pushes later changes (made through another scheduler) and `on_update` applies them.
  A registration made through another scheduler is therefore visible at once (a miss reads
  Anna), and a change to a record this scheduler already caches within one gossip epoch.
- `function(name)` / `dag(name)` return the record or None (unknown or deleted).
- Only the cluster writes `__cloudburst/` (the KVS refuses a client key's PUT or DELETE
  there), but a record can still be damaged (a holder of the cluster key, a bug, a restored
  backup of another version). A record that does not parse, is not of its kind's lattice,
  or names another function or DAG than its key raises `CorruptRecord` naming the key, at
  once, to whoever asked (`function`, `dag`, `names`); nothing is cached for it, so a new
  registration under that name (which overwrites it) heals it. `put_function` / `put_dag`
  never fail on a damaged index: the record is written (it is what calls read), and an index
  that is not a SetLattice is left alone and logged at ERROR; `names()` then raises
  `CorruptRecord` naming the index.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from anna_core import AnnaError, KeyNotFound, SetLattice

from faas.errors import CorruptRecord
from faas.keys import DAGS_INDEX, FUNCTIONS_INDEX, PREFIX, dag_key, function_key
from hydro_proto import cloudburst_pb2 as pb

__all__ = ["Registry"]

log = logging.getLogger("cloudburst.scheduler.registry")


class Registry:
    """A cache over the registry records in the KVS; see the module contract."""

    def __init__(self, kvs: Any, update_address: Optional[str]) -> None:
        self._kvs = kvs
        self._update_address = update_address
        self._functions: Dict[str, pb.FunctionRecord] = {}
        self._dags: Dict[str, pb.DagRecord] = {}
        self._subscribed: set = set()

    # ---- writes ----
    # Every replica acknowledges a registration (put_all): a worker reading the record from
    # any replica right after `register` returns must find it.
    def put_function(self, record: pb.FunctionRecord) -> None:
        self._kvs.put_all(function_key(record.name), record.SerializeToString())
        if not record.deleted:
            self._add_to_index(FUNCTIONS_INDEX, record.name)
        self._functions[record.name] = record
        self._subscribe(function_key(record.name))

    def put_dag(self, record: pb.DagRecord) -> None:
        self._kvs.put_all(dag_key(record.name), record.SerializeToString())
        if not record.deleted:
            self._add_to_index(DAGS_INDEX, record.name)
        self._dags[record.name] = record
        self._subscribe(dag_key(record.name))

    def _add_to_index(self, index: str, name: str) -> None:
        try:
            self._kvs.put_all(index, SetLattice([name.encode()]))
        except AnnaError as e:
            try:                          # a damaged index: the registration still stands
                self._index(index)
            except CorruptRecord as corrupt:
                log.error("registered %r, but not in the index: %s", name, corrupt)
                return
            raise e

    def delete_dag(self, name: str) -> bool:
        """Tombstone DAG `name`; False if it was not registered."""
        current = self.dag(name)
        if current is None:
            return False
        self.put_dag(pb.DagRecord(name=name, deleted=True, version=current.version + "-deleted"))
        return True

    def delete_function(self, name: str) -> bool:
        """Tombstone function `name` (workers stop running it: they check the record's
        version before a call); False if it was not registered."""
        current = self.function(name)
        if current is None:
            return False
        self.put_function(pb.FunctionRecord(name=name, deleted=True,
                                            version=current.version + "-deleted"))
        return True

    # ---- reads ----
    def function(self, name: str) -> Optional[pb.FunctionRecord]:
        """The record, None if unknown or deleted; CorruptRecord naming its key if damaged."""
        record = self._functions.get(name)
        if record is None:
            record = self._fetch(function_key(name), pb.FunctionRecord, name)
            if record is not None:
                self._functions[name] = record
        return None if record is None or record.deleted else record

    def dag(self, name: str) -> Optional[pb.DagRecord]:
        """The record, None if unknown or deleted; CorruptRecord naming its key if damaged."""
        record = self._dags.get(name)
        if record is None:
            record = self._fetch(dag_key(name), pb.DagRecord, name)
            if record is not None:
                self._dags[name] = record
        return None if record is None or record.deleted else record

    def names(self) -> Tuple[List[str], List[str]]:
        """(registered function names, registered DAG names), sorted; read from the KVS."""
        functions = [n for n in self._index(FUNCTIONS_INDEX) if self.function(n) is not None]
        dags = [n for n in self._index(DAGS_INDEX) if self.dag(n) is not None]
        return functions, dags

    # ---- pushed updates ----
    def on_update(self, key: str, value: Any) -> None:
        """Apply a value Anna pushed for a subscribed registry key; a damaged one is dropped
        from the cache (the next lookup reads it and raises CorruptRecord naming the key)."""
        for prefix, cls, cache in ((PREFIX + "fn/", pb.FunctionRecord, self._functions),
                                   (PREFIX + "dag/", pb.DagRecord, self._dags)):
            if key.startswith(prefix):
                name = key[len(prefix):]
                try:
                    cache[name] = _parse(key, value, cls, name)
                except CorruptRecord as e:
                    log.error("%s", e)
                    cache.pop(name, None)

    # ---- helpers ----
    def _index(self, key: str) -> List[str]:
        try:
            lattice = self._kvs.get(key)
        except KeyNotFound:
            return []
        if not isinstance(lattice, SetLattice):
            raise CorruptRecord(f"the registry index {key!r} is damaged: it holds "
                                f"{type(lattice).__name__}, not a set of names", key)
        try:
            return sorted(v.decode("utf-8") for v in lattice.reveal())
        except UnicodeDecodeError:
            raise CorruptRecord(f"the registry index {key!r} is damaged: a name in it is not "
                                f"UTF-8", key) from None

    def _fetch(self, key: str, cls: Any, name: str) -> Any:
        try:
            data = self._kvs.get(key)
        except KeyNotFound:
            return None
        self._subscribe(key)        # a later registration that heals it is pushed
        return _parse(key, data, cls, name)


    def _subscribe(self, key: str) -> None:
        if self._update_address and key not in self._subscribed:
            try:
                self._kvs.subscribe(key, self._update_address)
                self._subscribed.add(key)
            except Exception as e:  # a failed subscription only delays freshness
                log.warning("could not subscribe to %s: %s", key, e)


def _parse(key: str, data: Any, cls: Any, name: str) -> Any:
    """The record under `key`, or CorruptRecord naming the key (see the module contract)."""
    what = "function" if cls is pb.FunctionRecord else "DAG"
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CorruptRecord(f"the registry record {key!r} of {what} {name!r} is damaged: it "
                            f"holds {type(data).__name__}, not a record", key)
    try:
        record = cls.FromString(bytes(data))
    except Exception as e:        # DecodeError, or a protobuf RuntimeWarning-free failure
        raise CorruptRecord(f"the registry record {key!r} of {what} {name!r} is damaged: it "
                            f"does not parse ({type(e).__name__})", key) from None
    if record.name != name or not record.version:
        raise CorruptRecord(f"the registry record {key!r} of {what} {name!r} is damaged: it "
                            f"names {record.name[:80]!r}, version {record.version[:40]!r}",
                            key)
    return record
