"""The function and DAG registry, stored in Anna so that every scheduler shares it.

Contract:
- Records are `cloudburst.FunctionRecord` / `cloudburst.DagRecord` protobufs stored as LWW
  values under `runtime.keys.function_key(name)` / `dag_key(name)`; the names are also
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
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from anna_core import KeyNotFound, SetLattice

from runtime.keys import DAGS_INDEX, FUNCTIONS_INDEX, PREFIX, dag_key, function_key
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
            self._kvs.put_all(FUNCTIONS_INDEX, SetLattice([record.name.encode()]))
        self._functions[record.name] = record
        self._subscribe(function_key(record.name))

    def put_dag(self, record: pb.DagRecord) -> None:
        self._kvs.put_all(dag_key(record.name), record.SerializeToString())
        if not record.deleted:
            self._kvs.put_all(DAGS_INDEX, SetLattice([record.name.encode()]))
        self._dags[record.name] = record
        self._subscribe(dag_key(record.name))

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
        record = self._functions.get(name)
        if record is None:
            record = self._fetch(function_key(name), pb.FunctionRecord)
            if record is not None:
                self._functions[name] = record
        return None if record is None or record.deleted else record

    def dag(self, name: str) -> Optional[pb.DagRecord]:
        record = self._dags.get(name)
        if record is None:
            record = self._fetch(dag_key(name), pb.DagRecord)
            if record is not None:
                self._dags[name] = record
        return None if record is None or record.deleted else record

    def names(self) -> Tuple[List[str], List[str]]:
        """(registered function names, registered DAG names), sorted; read from the KVS."""
        functions = [n for n in self._index(FUNCTIONS_INDEX) if self.function(n) is not None]
        dags = [n for n in self._index(DAGS_INDEX) if self.dag(n) is not None]
        return functions, dags

    # ---- pushed updates ----
    def on_update(self, key: str, value: bytes) -> None:
        """Apply a value Anna pushed for a subscribed registry key."""
        if key.startswith(PREFIX + "fn/"):
            record = pb.FunctionRecord.FromString(value)
            self._functions[record.name] = record
        elif key.startswith(PREFIX + "dag/"):
            record = pb.DagRecord.FromString(value)
            self._dags[record.name] = record

    # ---- helpers ----
    def _index(self, key: str) -> List[str]:
        try:
            lattice = self._kvs.get(key)
        except KeyNotFound:
            return []
        return sorted(v.decode() for v in lattice.reveal())

    def _fetch(self, key: str, cls: Any) -> Any:
        try:
            data = self._kvs.get(key)
        except KeyNotFound:
            return None
        self._subscribe(key)
        return cls.FromString(data)

    def _subscribe(self, key: str) -> None:
        if self._update_address and key not in self._subscribed:
            try:
                self._kvs.subscribe(key, self._update_address)
                self._subscribed.add(key)
            except Exception as e:  # a failed subscription only delays freshness
                log.warning("could not subscribe to %s: %s", key, e)
