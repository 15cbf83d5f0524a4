"""Typed errors of the Anna KVS, as the client and the launchers raise them.

Contract: every failure that reaches a caller is an `AnnaError` subclass whose message names
what failed and where (the key, the address or stage that was involved). Server-side error
codes (`anna.AnnaError` in proto/anna.proto) map one-to-one onto the classes below through
`error_from_code`. `KeyNotFound` is also a `KeyError` so dict-like code can catch it.
`WrongOwner` is internal: the client handles it by refreshing addresses and retrying.
"""
from __future__ import annotations

from typing import Optional, Sequence

import runtime.process as _runtime_process
from pools.errors import LeaveFailed as _PoolLeaveFailed

__all__ = [
    "AnnaError", "KeyNotFound", "LatticeTypeMismatch", "ValueTooLarge", "UnknownLatticeType",
    "MalformedRequest", "NoNodes", "Timeout", "WrongOwner", "StoreFailed", "DiskFull",
    "StartupError", "LeaveFailed", "NotPermitted", "error_from_code",
    "BackupError", "BadBackupURL", "BucketNotFound", "BackupExists", "ManifestError",
    "BackupObjectMissing", "ChecksumMismatch", "BackupStorageError", "ScanFailed",
    "RestoreFailed",
]


class AnnaError(Exception):
    """Base class of every Anna error.

    Attributes:
        key: the key involved, if any.
        address: the address (worker, routing node or process) involved, if any.
    """

    def __init__(self, message: str, *, key: Optional[str] = None,
                 address: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key
        self.address = address

    def __str__(self) -> str:
        return self.message


class KeyNotFound(AnnaError, KeyError):
    """The key does not exist on the replica(s) that were asked (server code KEY_DNE)."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.message


class LatticeTypeMismatch(AnnaError):
    """A PUT named a lattice type different from the one stored under the key."""


class ValueTooLarge(AnnaError):
    """The serialized value is larger than the server's `max_value_bytes`."""


class UnknownLatticeType(AnnaError):
    """The server does not know the lattice type named in the request."""


class MalformedRequest(AnnaError):
    """The payload does not parse as the lattice type it names."""


class NoNodes(AnnaError):
    """Routing knows no KVS node for the tier(s) the key needs."""


class Timeout(AnnaError):
    """A wait ran past its deadline. `stage` names what was being waited for."""

    def __init__(self, stage: str, *, key: Optional[str] = None,
                 address: Optional[str] = None, seconds: Optional[float] = None) -> None:
        detail = f" after {seconds:.3g} s" if seconds is not None else ""
        super().__init__(f"timed out waiting for {stage}{detail}", key=key, address=address)
        self.stage = stage
        self.seconds = seconds


class WrongOwner(AnnaError):
    """Internal: the worker does not own the key; `addresses` holds the owners (may be empty)."""

    def __init__(self, message: str, *, key: Optional[str] = None,
                 address: Optional[str] = None, addresses: Sequence[str] = ()) -> None:
        super().__init__(message, key=key, address=address)
        self.addresses = list(addresses)


class NotPermitted(AnnaError):
    """The operation is reserved to the cluster's own key (e.g. changing a key's replication);
    this client holds a client key."""


class StoreFailed(AnnaError):
    """The worker's storage (RocksDB on the disk tier) failed to read or write.

    `detail` is the worker's own account ("node disk-0 worker 0: RocksDB put in ... failed:
    ..."), also part of the message; empty if the worker sent none.
    """

    def __init__(self, message: str, *, key: Optional[str] = None,
                 address: Optional[str] = None, detail: str = "") -> None:
        super().__init__(message, key=key, address=address)
        self.detail = detail


class DiskFull(StoreFailed):
    """A disk-tier worker refused a write because its disk is (nearly) full: nothing was
    stored. Reads and deletes still work there; deleting data (or freeing space on that
    filesystem) makes writes succeed again. `detail` names the node, the worker, the data
    directory and its free space (server code DISK_FULL)."""


class LeaveFailed(AnnaError, _PoolLeaveFailed):
    """A node asked to leave gracefully did not finish: it exited with a non-zero status
    (`status`: 4 = its keys were not all handed off in time, 5 = no routing acknowledged the
    leave) or did not exit in time (`status` None). `address` is the node id. Also the node
    pools' `pools.errors.LeaveFailed`, which a pool manager reports a failed removal with."""

    def __init__(self, message: str, *, node_id: str, status: Optional[int]) -> None:
        super().__init__(message, address=node_id)
        self.node_id = node_id
        self.status = status


class BackupError(AnnaError):
    """A backup or restore (`anna_core.backup`) failed. `bucket` and `object` name the S3
    bucket and the object involved (None when not about one); `address` a worker or routing."""

    def __init__(self, message: str, *, bucket: Optional[str] = None,
                 object: Optional[str] = None, address: Optional[str] = None,
                 key: Optional[str] = None) -> None:
        super().__init__(message, key=key, address=address)
        self.bucket = bucket
        self.object = object


class BadBackupURL(BackupError, ValueError):
    """The backup location is not `s3://bucket/prefix` (with a valid bucket name)."""


class BucketNotFound(BackupError):
    """The S3 bucket does not exist (or this account cannot see it)."""


class BackupExists(BackupError):
    """A backup (its manifest) is already at that prefix: backups never overwrite."""


class ManifestError(BackupError):
    """The backup's manifest is missing, does not parse, or does not describe a backup."""


class BackupObjectMissing(BackupError):
    """An object the manifest lists is not in the bucket."""


class ChecksumMismatch(BackupError):
    """An object's SHA-256 or size differs from what the manifest recorded (`expected`,
    `actual`: hex digests): the object was corrupted or replaced after the backup."""

    def __init__(self, message: str, *, bucket: str, object: str, expected: str,
                 actual: str) -> None:
        super().__init__(message, bucket=bucket, object=object)
        self.expected = expected
        self.actual = actual


class BackupStorageError(BackupError):
    """S3 refused or failed a request (credentials, permissions, endpoint unreachable)."""


class ScanFailed(BackupError):
    """A worker did not answer a scan page in time, or its store failed to enumerate."""


class RestoreFailed(BackupError):
    """Keys could not be written back into the cluster (`key` is one of them)."""


# A local process (routing or a KVS node) failed to start or to become ready: the runtime
# layer's launcher raises it, for Anna's processes and Cloudburst's alike.
StartupError = _runtime_process.StartupError


# anna.AnnaError numbers (proto/anna.proto); kept here so this module has no dependencies.
_CODE_NAMES = {
    0: "NO_ERROR", 1: "KEY_DNE", 2: "WRONG_OWNER", 3: "LATTICE_MISMATCH", 4: "TIMEOUT",
    5: "VALUE_TOO_LARGE", 6: "UNKNOWN_LATTICE", 7: "MALFORMED", 8: "NO_NODES",
    9: "STORE_FAILED", 10: "DISK_FULL", 11: "NOT_PERMITTED",
    720: "ROUTING_NOT_READY",     # routing's answer only: the client asks again (key_routing)
}


def error_from_code(code: int, *, key: Optional[str] = None, address: Optional[str] = None,
                    operation: str = "request", addresses: Sequence[str] = (),
                    detail: str = "") -> AnnaError:
    """Build the typed error for a server error code found in a response.

    `operation` is a short verb phrase such as "GET" or "PUT" used in the message; `detail`
    is the tuple's `error_detail` (STORE_FAILED, DISK_FULL), appended to the message.
    """
    where = f" at {address}" if address else ""
    what = f"{operation} {key!r}" if key is not None else operation
    if code == 1:
        return KeyNotFound(f"{what}: key not found{where}", key=key, address=address)
    if code == 2:
        return WrongOwner(f"{what}: worker{where} does not own the key", key=key,
                          address=address, addresses=addresses)
    if code == 3:
        return LatticeTypeMismatch(
            f"{what}: lattice type differs from the one stored{where}", key=key, address=address)
    if code == 4:
        return Timeout(f"{what}{where}", key=key, address=address)
    if code == 5:
        return ValueTooLarge(f"{what}: value larger than the server's max_value_bytes{where}",
                             key=key, address=address)
    if code == 6:
        return UnknownLatticeType(f"{what}: lattice type unknown to the server{where}",
                                  key=key, address=address)
    if code == 7:
        return MalformedRequest(f"{what}: payload rejected as malformed{where}",
                                key=key, address=address)
    if code == 8:
        return NoNodes(f"{what}: no KVS node is up for the key's tier(s){where}",
                       key=key, address=address)
    more = f" ({detail})" if detail else ""
    if code == 9:
        return StoreFailed(f"{what}: the worker's storage failed{where}{more}", key=key,
                           address=address, detail=detail)
    if code == 10:
        return DiskFull(f"{what}: disk full{where}, write refused{more}", key=key,
                        address=address, detail=detail)
    if code == 11:
        return NotPermitted(f"{what}: not permitted{where}{more}", key=key, address=address)
    name = _CODE_NAMES.get(code, f"code {code}")
    return AnnaError(f"{what}: server error {name}{where}", key=key, address=address)
