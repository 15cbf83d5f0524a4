"""A local cluster's data directory: what makes `LocalCluster(data_dir=D)` survive a restart.

Contract:
- `DataDir(path)` names the layout: `keys/` (the cluster's CURVE keys and its "local" client
  pair, written on first use and reused afterwards, so clients keep working across
  restarts), `kvs/` (the KVS's disk tier: one RocksDB per KVS worker thread under
  `kvs/<node id>/<thread>`), `cluster.json` (the shape the data was written with) and `lock`.
- `open(shape)` creates what is missing (directories mode 0700), takes the directory's lock
  (an exclusive `flock`, released by `close()` or by the process' death, kill -9 included;
  `DataDirInUse` when another live cluster holds it), and checks `shape` against the one
  recorded: a KVS of another shape would look for keys where it never wrote them, so a
  mismatch is a `ValueError` naming both shapes, and nothing is changed.
- Durability (what the local cluster promises with a data directory): functions, DAGs and
  objects live in the KVS (the registry is under `__cloudburst/`), and the KVS runs only its
  disk tier there. A write is acknowledged once it is in the disk store's write-ahead log
  (RocksDB, written before the answer: it survives a clean stop and a kill -9 of every
  process of the cluster). Against the loss of the machine or its operating system, the
  log's fsync policy decides (`LocalCluster(disk_sync=...)`, anna_core.config "disk_sync"):
  by default the last second of acknowledged writes may be lost; with "always", nothing.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
from typing import Any, Dict, Optional, Tuple

from runtime.auth import write_keys

__all__ = ["DataDir", "DataDirInUse", "SHAPE_KEYS", "sync_policy"]

# what must not change between two runs on one data directory (where the KVS put the keys)
SHAPE_KEYS = ("kvs_nodes", "kvs_threads")
_FORMAT = 1


def sync_policy(data_dir: Optional[str], disk_sync: Optional[str],
                interval_ms: Optional[int]) -> Tuple[str, int]:
    """`(disk_sync, disk_sync_interval_ms)` for a LocalCluster's KVS: when it fsyncs its
    write-ahead log. "interval" (the default: at most every `interval_ms`, 1000, as Redis's
    appendfsync everysec; an OS crash or power loss loses at most that last interval of
    acknowledged writes), "always" (before every write is acknowledged: nothing acknowledged
    is lost, at the price of an fsync per write) or "none" (left to the OS). Every mode
    keeps all acknowledged writes through a crash of the processes. ValueError for a bad
    value, or for either given without `data_dir` (nothing is written to disk then)."""
    from anna_core.config import (DEFAULT_DISK_SYNC, DEFAULT_DISK_SYNC_INTERVAL_MS,
                                  check_disk_sync)
    if data_dir is None and (disk_sync is not None or interval_ms is not None):
        raise ValueError("LocalCluster: disk_sync applies to a data_dir's KVS; without "
                         "data_dir nothing is written to disk")
    mode = DEFAULT_DISK_SYNC if disk_sync is None else disk_sync
    interval = DEFAULT_DISK_SYNC_INTERVAL_MS if interval_ms is None else interval_ms
    check_disk_sync("LocalCluster", mode, interval)
    return mode, interval


class DataDirInUse(RuntimeError):
    """Another running cluster holds this data directory."""


class DataDir:
    """The layout and lock of a local cluster's data directory (module contract)."""

    def __init__(self, path: str) -> None:
        if not isinstance(path, str) or not path:
            raise ValueError(f"data_dir must be a non-empty path, got {path!r}")
        self.path = os.path.abspath(path)
        self.key_dir = os.path.join(self.path, "keys")
        self.kvs_dir = os.path.join(self.path, "kvs")
        self._meta = os.path.join(self.path, "cluster.json")
        self._lock_fd: Optional[int] = None

    def open(self, shape: Dict[str, Any], client: str) -> bool:
        """Create, lock and check the directory; write the cluster's keys (with client pair
        `client`) if it has none. Returns True when the directory held a cluster already."""
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        self._lock()
        try:
            recorded = self._recorded()
            if recorded is not None:
                old = {k: recorded.get(k) for k in SHAPE_KEYS}
                new = {k: shape[k] for k in SHAPE_KEYS}
                if old != new:
                    raise ValueError(
                        f"the data directory {self.path} holds a cluster of {old}, not {new}: "
                        f"its KVS keeps each key on the worker thread that owned it, so start "
                        f"it with the same kvs_nodes and kvs_threads (or use a new directory)")
            if not os.path.exists(os.path.join(self.key_dir, "cluster.key_secret")):
                os.makedirs(self.key_dir, mode=0o700, exist_ok=True)
                write_keys(self.key_dir, [client])
            os.makedirs(self.kvs_dir, mode=0o700, exist_ok=True)
            if recorded is None:
                tmp = self._meta + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"format": _FORMAT, **{k: shape[k] for k in SHAPE_KEYS}}, f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self._meta)
            return recorded is not None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the lock (idempotent)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _recorded(self) -> Optional[Dict[str, Any]]:
        try:
            with open(self._meta) as f:
                meta = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ValueError(f"{self._meta} is unreadable ({e}): is {self.path} a cloudburst "
                             f"data directory?") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            raise ValueError(f"{self._meta} is not a cloudburst data directory record of "
                             f"format {_FORMAT}: {meta!r}")
        return meta

    def _lock(self) -> None:
        path = os.path.join(self.path, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                holder = ""
                try:
                    with open(path) as f:
                        holder = f" (process {f.read().strip() or '?'})"
                except OSError:
                    pass
                raise DataDirInUse(f"the data directory {self.path} is in use by another "
                                   f"running cluster{holder}") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
