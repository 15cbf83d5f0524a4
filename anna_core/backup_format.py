"""The layout of an Anna backup in S3, without any I/O: locations, object names, the part
encoding, which keys are backed up, and the manifest.

Contract:
- A location is `s3://bucket/prefix` (`parse_location`); the prefix may be empty. Every
  object of one backup is under `prefix/`: the data parts `nodes/<node id>/w<thread>-
  p<part>.keys` (one sequence of parts per worker thread: "each node's keys as objects"), the
  cluster metadata parts `metadata/p<part>.keys`, and last `manifest.json`. Names in the
  manifest are relative to the prefix, so a backup can be copied to another prefix or bucket.
- A part object is `PART_MAGIC` followed by records, each a 4-byte big-endian length and a
  serialized `anna.KeyTuple` (key, lattice_type, payload: `anna_core.wire`'s serialized form
  of the lattice). `PartWriter` closes a part once it holds `part_bytes` (a single record
  larger than that gets a part of its own); `read_records` decodes one part, raising
  `ValueError` on anything malformed.
- `backed_up(key)`: every key outside `__anna__/`, and the persisted replication overrides
  (`__anna__/replication/...` and `__anna__/replication-index`); not the statistics or the
  monitor's status, which describe the old cluster. `is_metadata(key)` tells the overrides
  apart: they go in the metadata parts, restored before the data.
- `fit_overrides(tuples, tiers)`: the metadata tuples a target cluster with nodes in `tiers`
  can honour. An override whose vector has replicas in no tier of the target (e.g. disk
  only, restored into a memory-only cluster) would leave its key with no replica, so it is
  left out, and dropped from the index.
- The manifest (JSON, `FORMAT`, version `VERSION`) lists every object with its SHA-256,
  size and key count, plus the cluster seen at backup time, the start and end times and the
  totals; `parse_manifest` checks it strictly and raises `ManifestError`.
"""
from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from hydro_proto import anna_pb2

from . import _core
from .effects import REPLICATION_INDEX_KEY, REPLICATION_PREFIX
from .errors import BadBackupURL, ManifestError

__all__ = ["FORMAT", "VERSION", "PART_MAGIC", "MANIFEST_NAME", "DEFAULT_PART_BYTES",
           "Location", "parse_location", "part_name", "metadata_part_name", "backed_up",
           "is_metadata", "PartWriter", "Part", "read_records", "ObjectEntry", "Manifest",
           "parse_manifest", "fit_overrides"]

FORMAT = "anna-backup"
VERSION = 1
PART_MAGIC = b"ANNA-BACKUP-PART-1\n"
MANIFEST_NAME = "manifest.json"
DEFAULT_PART_BYTES = 16 << 20
METADATA_PREFIX = "__anna__/"
_LENGTH = struct.Struct(">I")
# S3's bucket naming rules (lower case letters, digits, dots, hyphens; 3-63 characters).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class Location:
    """Where a backup lives: `bucket` and `prefix` (no leading or trailing slash)."""
    bucket: str
    prefix: str

    def key(self, name: str) -> str:
        """The S3 object key of `name` (relative to the backup)."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_location(url: str) -> Location:
    """`s3://bucket/prefix` -> Location; BadBackupURL saying what is wrong otherwise."""
    text = (url or "").strip()
    if not text.startswith("s3://"):
        raise BadBackupURL(f"backup location {url!r}: expected s3://bucket/prefix")
    bucket, _, prefix = text[len("s3://"):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise BadBackupURL(f"backup location {url!r}: {bucket!r} is not a valid S3 bucket name "
                           f"(3-63 lower-case letters, digits, '.' or '-')", bucket=bucket or None)
    prefix = prefix.strip("/")
    if "//" in prefix:
        raise BadBackupURL(f"backup location {url!r}: empty path segment in the prefix",
                           bucket=bucket)
    return Location(bucket, prefix)


def part_name(node_id: str, thread: int, part: int) -> str:
    """The name of a worker's `part`-th data object."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", node_id)
    return f"nodes/{safe}/w{thread}-p{part:05d}.keys"


def metadata_part_name(part: int) -> str:
    """The name of the `part`-th object of cluster metadata (replication overrides)."""
    return f"metadata/p{part:05d}.keys"


def is_metadata(key: str) -> bool:
    """Whether `key` is a persisted replication override (or their index)."""
    return key.startswith(REPLICATION_PREFIX) or key == REPLICATION_INDEX_KEY


def backed_up(key: str) -> bool:
    """Whether a backup keeps `key` (see the module contract)."""
    return not key.startswith(METADATA_PREFIX) or is_metadata(key)


@dataclass
class ObjectEntry:
    """One object of a backup as the manifest lists it."""
    name: str
    kind: str              # "data" or "metadata"
    node_id: str           # "" for metadata
    thread: int            # -1 for metadata
    part: int
    keys: int
    bytes: int
    sha256: str


@dataclass
class Part:
    """A closed part, ready to upload: its entry (checksum included) and its bytes."""
    entry: ObjectEntry
    body: bytes


class PartWriter:
    """Accumulates records into parts of at most `part_bytes` (see the module contract).

    `add` returns a closed Part when the record filled the current one; `close` returns the
    last, partly filled Part (or None when it holds no record)."""

    def __init__(self, kind: str, node_id: str = "", thread: int = -1,
                 part_bytes: int = DEFAULT_PART_BYTES) -> None:
        if part_bytes <= 0:
            raise ValueError("part_bytes must be > 0")
        self.kind, self.node_id, self.thread, self.part_bytes = kind, node_id, thread, part_bytes
        self._next = 0
        self._chunks: List[bytes] = []
        self._size = 0
        self._keys = 0

    def add(self, key_tuple: Any) -> Optional[Part]:
        """Add one `anna.KeyTuple` (its key, lattice_type and payload are kept)."""
        record = anna_pb2.KeyTuple(key=key_tuple.key, lattice_type=key_tuple.lattice_type,
                                   payload=key_tuple.payload).SerializeToString()
        self._chunks.append(_LENGTH.pack(len(record)))
        self._chunks.append(record)
        self._size += _LENGTH.size + len(record)
        self._keys += 1
        return self._finish() if self._size >= self.part_bytes else None

    def close(self) -> Optional[Part]:
        return self._finish() if self._keys else None

    def _finish(self) -> Part:
        body = PART_MAGIC + b"".join(self._chunks)
        name = (part_name(self.node_id, self.thread, self._next) if self.kind == "data"
                else metadata_part_name(self._next))
        entry = ObjectEntry(name=name, kind=self.kind, node_id=self.node_id, thread=self.thread,
                            part=self._next, keys=self._keys, bytes=len(body),
                            sha256=hashlib.sha256(body).hexdigest())
        self._next += 1
        self._chunks, self._size, self._keys = [], 0, 0
        return Part(entry, body)


def read_records(body: bytes) -> Iterator[Any]:
    """The `anna.KeyTuple`s of one part; ValueError when the part is malformed."""
    if not body.startswith(PART_MAGIC):
        raise ValueError("not an Anna backup part (bad header)")
    view = memoryview(body)
    at = len(PART_MAGIC)
    while at < len(body):
        if at + _LENGTH.size > len(body):
            raise ValueError(f"truncated record length at byte {at}")
        (n,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        if at + n > len(body):
            raise ValueError(f"truncated record at byte {at} ({n} bytes announced)")
        t = anna_pb2.KeyTuple.FromString(bytes(view[at:at + n]))
        at += n
        yield t


@dataclass
class Manifest:
    """What a backup holds (see the module contract)."""
    started_at: str
    finished_at: str
    cluster: Dict[str, Any]
    objects: List[ObjectEntry] = field(default_factory=list)
    format: str = FORMAT
    version: int = VERSION

    @property
    def totals(self) -> Dict[str, int]:
        return {"objects": len(self.objects), "keys": sum(o.keys for o in self.objects),
                "bytes": sum(o.bytes for o in self.objects)}

    def to_json(self) -> bytes:
        doc = {"format": self.format, "version": self.version, "started_at": self.started_at,
               "finished_at": self.finished_at, "cluster": self.cluster,
               "totals": self.totals, "objects": [asdict(o) for o in self.objects]}
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def ordered(self) -> List[ObjectEntry]:
        """Objects in restore order: metadata first, then data."""
        return ([o for o in self.objects if o.kind == "metadata"]
                + [o for o in self.objects if o.kind == "data"])


_ENTRY_FIELDS: Dict[str, Tuple[type, ...]] = {
    "name": (str,), "kind": (str,), "node_id": (str,), "thread": (int,), "part": (int,),
    "keys": (int,), "bytes": (int,), "sha256": (str,)}


def parse_manifest(raw: bytes, *, bucket: Optional[str] = None,
                   object: Optional[str] = None) -> Manifest:
    """Parse and check a manifest; ManifestError naming the object and the problem."""
    def bad(why: str) -> ManifestError:
        return ManifestError(f"manifest s3://{bucket}/{object}: {why}", bucket=bucket,
                             object=object)
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise bad(f"not an Anna backup manifest (format is not {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise bad(f"unsupported version {doc.get('version')!r} (this tool reads {VERSION})")
    for name in ("started_at", "finished_at"):
        if not isinstance(doc.get(name), str):
            raise bad(f"{name!r} missing")
    if not isinstance(doc.get("cluster"), dict) or not isinstance(doc.get("objects"), list):
        raise bad("'cluster' or 'objects' missing")
    objects: List[ObjectEntry] = []
    names = set()
    for i, o in enumerate(doc["objects"]):
        if not isinstance(o, dict):
            raise bad(f"object #{i} is not a JSON object")
        for name, types in _ENTRY_FIELDS.items():
            if not isinstance(o.get(name), types) or isinstance(o.get(name), bool):
                raise bad(f"object #{i}: field {name!r} missing or of the wrong type")
        if o["kind"] not in ("data", "metadata") or not re.fullmatch(r"[0-9a-f]{64}", o["sha256"]):
            raise bad(f"object #{i} ({o['name']!r}): bad kind or sha256")
        if o["name"] in names or o["name"].startswith("/") or ".." in o["name"].split("/"):
            raise bad(f"object #{i}: name {o['name']!r} repeated or not relative")
        names.add(o["name"])
        objects.append(ObjectEntry(**{k: o[k] for k in _ENTRY_FIELDS}))
    manifest = Manifest(started_at=doc["started_at"], finished_at=doc["finished_at"],
                        cluster=doc["cluster"], objects=objects)
    totals = doc.get("totals")
    if totals is not None and totals != manifest.totals:
        raise bad(f"totals {totals} do not match its objects {manifest.totals}")
    return manifest


def fit_overrides(tuples: List[Any], tiers: Set[int]) -> Tuple[List[Any], List[str]]:
    """(tuples to restore, keys whose override is left out); see the module contract.
    `tiers` holds `anna.Tier` numbers. Tuples that do not decode are kept as they are (the
    routing that reads them reports them)."""
    skipped: List[str] = []
    kept: List[Any] = []
    index: List[Any] = []
    for t in tuples:
        if t.key == REPLICATION_INDEX_KEY:
            index.append(t)
            continue
        if t.key.startswith(REPLICATION_PREFIX) and t.lattice_type == anna_pb2.LWW:
            try:
                r = anna_pb2.Replication.FromString(
                    _core.deserialize(anna_pb2.LWW, bytes(t.payload)).reveal())
            except Exception:   # noqa: BLE001 - undecodable: keep, routing reports it
                kept.append(t)
                continue
            if not ((r.memory_global > 0 and anna_pb2.MEMORY in tiers)
                    or (r.disk_global > 0 and anna_pb2.DISK in tiers)):
                skipped.append(t.key[len(REPLICATION_PREFIX):])
                continue
        kept.append(t)
    drop = {k.encode() for k in skipped}
    for t in index:
        if drop and t.lattice_type == anna_pb2.SET:
            values = _core.deserialize(anna_pb2.SET, bytes(t.payload)).reveal() - drop
            t = anna_pb2.KeyTuple(key=t.key, lattice_type=t.lattice_type,
                                  payload=_core.SetLattice(sorted(values)).serialize())
        kept.append(t)
    return kept, skipped
