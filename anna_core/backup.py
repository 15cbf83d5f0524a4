"""Backups of an Anna cluster to S3 (`anna backup`, `anna restore`), through boto3.

Contract (docs/KVS.md "Backups" says it for users; the layout is `backup_format`'s):
- `backup(routing, url, auth=...)` asks routing for the membership ("members"), then pages
  through every worker of every node with the cluster-only "scan" request (one page at a
  time, resumed with the worker's cursor; a page is re-asked on silence, which is safe since
  pages are stateless) and uploads each worker's keys as parts, the replication overrides as
  metadata parts, and last the manifest. It refuses a prefix that already holds a manifest
  (BackupExists). Memory: at most `UPLOADS_IN_FLIGHT` + 1 parts.
- What a backup holds: each worker's pages show its store as of each page; a key stored on a
  worker throughout that worker's scan is in the backup at least once, with a value at least
  as new as its value when the scan began. So every write acknowledged before the backup
  started is in it (merged into its key's value), unless the key was deleted since, or moved
  between nodes by a membership change during the backup (the manifest records the versions
  before and after; a change is logged at WARNING). Writes concurrent with the backup may or
  may not be in it. A replicated key appears once per replica; restoring merges them.
- `restore(routing, url, auth=...)` reads and checks the manifest, verifies every object's
  SHA-256 and size before writing anything (`verify="first"`, streaming each object through
  the hash; `"each"` checks each object just before writing its keys, downloading once),
  then merges every key into the cluster, one object in memory at a time (a part, at most
  `part_bytes` plus one record):
  batched PUTs straight to one replica per key (routing lookups of a whole batch), a key
  that is redirected or unanswered retried through `Client.put`. Metadata (replication
  overrides) is written first; routing adopts restored overrides within its
  override_refresh_period (5 s by default); an override naming no tier the target has is
  left out (`backup_format.fit_overrides`, logged). Lattice merges make a restore idempotent.
- Credentials, region and endpoint come from the standard AWS configuration (environment,
  `~/.aws/config` and credentials, `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`); `profile`
  and `endpoint_url` override them. Failures raise the `BackupError` family
  (`anna_core.errors`) naming the bucket and object, worker or key.
- `ip` is the address the client's reply sockets bind and give to routing and workers: it
  must be reachable from them (127.0.0.1 for a local cluster; the pod's address in a pod).
"""
from __future__ import annotations

import datetime
import hashlib
import logging
import threading
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from hydro_proto import anna_pb2

from runtime.auth import CLUSTER, AuthConfig

from .backup_format import (MANIFEST_NAME, DEFAULT_PART_BYTES, Location, Manifest, ObjectEntry,
                            Part, PartWriter, backed_up, fit_overrides, is_metadata,
                            parse_location, parse_manifest, read_records)
from .client import Client
from .errors import (AnnaError, BackupError, BackupExists, BackupObjectMissing,
                     BackupStorageError, BucketNotFound, ChecksumMismatch, ManifestError,
                     NotPermitted, RestoreFailed, ScanFailed)
from .wire import tuple_to_lattice

__all__ = ["backup", "restore", "BackupResult", "RestoreResult", "S3Objects",
           "UPLOADS_IN_FLIGHT"]

log = logging.getLogger("anna.backup")

UPLOADS_IN_FLIGHT = 4
SCAN_PAGE_KEYS = 2000
SCAN_PAGE_BYTES = 4 << 20
RESTORE_BATCH_KEYS = 1000
RESTORE_BATCH_BYTES = 4 << 20
Progress = Callable[[str], None]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class S3Objects:
    """The objects of one backup location, through a boto3 S3 client (errors typed)."""

    def __init__(self, location: Location, *, profile: Optional[str] = None,
                 endpoint_url: Optional[str] = None, client: Any = None) -> None:
        import boto3
        self.location = location
        if client is None:
            session = boto3.session.Session(profile_name=profile)
            client = session.client("s3", endpoint_url=endpoint_url)
        self.s3 = client

    def _error(self, e: Exception, what: str, name: Optional[str] = None) -> BackupError:
        from botocore.exceptions import ClientError
        bucket = self.location.bucket
        where = f"s3://{bucket}/{self.location.key(name)}" if name else f"s3://{bucket}"
        if isinstance(e, ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and name is None):
                return BucketNotFound(f"{what}: bucket {bucket!r} does not exist "
                                      f"(endpoint {self.s3.meta.endpoint_url})", bucket=bucket)
            if code in ("NoSuchKey", "404", "NotFound"):
                return BackupObjectMissing(f"{what}: {where} does not exist", bucket=bucket,
                                           object=name)
            return BackupStorageError(f"{what}: {where}: S3 error {code}: "
                                      f"{e.response.get('Error', {}).get('Message', '')}",
                                      bucket=bucket, object=name)
        return BackupStorageError(f"{what}: {where}: {type(e).__name__}: {e}", bucket=bucket,
                                  object=name)

    def check_bucket(self, what: str) -> None:
        """BucketNotFound unless the bucket exists and is reachable."""
        try:
            self.s3.head_bucket(Bucket=self.location.bucket)
        except Exception as e:  # botocore raises many types; all become typed errors
            raise self._error(e, what) from None

    def exists(self, name: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.location.bucket, Key=self.location.key(name))
            return True
        except Exception as e:
            err = self._error(e, f"checking {name}", name)
            if isinstance(err, BackupObjectMissing):
                return False
            raise err from None

    def put(self, name: str, body: bytes) -> None:
        try:
            self.s3.put_object(Bucket=self.location.bucket, Key=self.location.key(name),
                               Body=body)
        except Exception as e:
            raise self._error(e, f"uploading {name}", name) from None

    def get(self, name: str) -> bytes:
        try:
            answer = self.s3.get_object(Bucket=self.location.bucket, Key=self.location.key(name))
            return answer["Body"].read()
        except Exception as e:
            raise self._error(e, f"downloading {name}", name) from None

    def check(self, entry: ObjectEntry) -> None:
        """Streams the object through SHA-256 (1 MiB at a time) and compares it with its
        manifest entry: ChecksumMismatch when they differ."""
        digest, size = hashlib.sha256(), 0
        try:
            answer = self.s3.get_object(Bucket=self.location.bucket,
                                        Key=self.location.key(entry.name))
            for chunk in answer["Body"].iter_chunks(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        except Exception as e:
            raise self._error(e, f"downloading {entry.name}", entry.name) from None
        self._compare(entry, digest.hexdigest(), size)

    def verified(self, entry: ObjectEntry) -> bytes:
        """The object's bytes, checked against its manifest entry (ChecksumMismatch)."""
        body = self.get(entry.name)
        self._compare(entry, hashlib.sha256(body).hexdigest(), len(body))
        return body

    def _compare(self, entry: ObjectEntry, digest: str, size: int) -> None:
        if digest != entry.sha256 or size != entry.bytes:
            where = f"s3://{self.location.bucket}/{self.location.key(entry.name)}"
            raise ChecksumMismatch(
                f"{where} is corrupted: SHA-256 {digest[:16]}... and {size:,} bytes, but "
                f"the manifest recorded {entry.sha256[:16]}... and {entry.bytes:,} bytes",
                bucket=self.location.bucket, object=entry.name, expected=entry.sha256,
                actual=digest)


@dataclass
class BackupResult:
    """What `backup` wrote."""
    location: str
    manifest: Manifest
    seconds: float
    scanned_keys: int      # keys the workers returned (replicas counted once each)
    skipped_keys: int      # statistics and status keys left out
    restarts: int          # worker scans that started over (a memory store grew)


@dataclass
class RestoreResult:
    """What `restore` merged."""
    location: str
    keys: int              # records read from the backup (merged, or overrides left out)
    bytes: int
    objects: int
    seconds: float
    retried: int           # keys that needed Client.put (redirected or unanswered)
    skipped_overrides: List[str]   # keys whose override names no tier of the target


def _cluster_client(routing: Union[str, Sequence[str]], auth: Optional[AuthConfig],
                    timeout: float, ip: str = "127.0.0.1") -> Client:
    if auth is not None and auth.identity != CLUSTER:
        raise NotPermitted(f"backups and restores read and write every key and the cluster's "
                           f"metadata: they need the cluster's key (AuthConfig(key_dir) or "
                           f"--key-dir), not {auth.identity!r}")
    return Client(routing, auth=auth, timeout=timeout, retries=2, ip=ip)


def _members(kvs: Client, deadline_s: float) -> anna_pb2.Membership:
    """The routing's membership ("members"), failing over between routings."""
    deadline = time.monotonic() + deadline_s
    tried: List[str] = []
    while True:
        for address in kvs.routing.order():
            request = anna_pb2.MembersRequest(response_address=kvs.response_address,
                                              request_id=kvs._next_id())
            kvs.send_kind(address, "members", request)
            tried.append(address)
            wait = min(deadline, time.monotonic() + kvs.routing_timeout)
            answer = kvs._collect({request.request_id: address}, wait, anna_pb2.MembersResponse)
            if answer:
                return answer[request.request_id].membership
            if time.monotonic() >= deadline:
                raise BackupError(f"routing {', '.join(dict.fromkeys(tried))} did not answer "
                                  f"a membership request within {deadline_s:g} s (is the "
                                  f"routing address right, and is this the cluster's key?)",
                                  address=address)


def _scan_page(kvs: Client, address: str, cursor: bytes, attempts: int) -> Any:
    """One page of a worker's scan, asked again on silence (pages are stateless)."""
    for _ in range(attempts):
        request = anna_pb2.ScanRequest(response_address=kvs.response_address,
                                       request_id=kvs._next_id(), cursor=cursor,
                                       max_keys=SCAN_PAGE_KEYS, max_bytes=SCAN_PAGE_BYTES)
        kvs.send_kind(address, "scan", request)
        answer = kvs._collect({request.request_id: address}, time.monotonic() + kvs.timeout,
                              anna_pb2.ScanResponse)
        if answer:
            page = answer[request.request_id]
            if page.error != anna_pb2.NO_ERROR:
                raise ScanFailed(f"scan of worker {address}: {anna_pb2.AnnaError.Name(page.error)}"
                                 f" ({page.error_detail})", address=address)
            return page
    raise ScanFailed(f"scan of worker {address}: no answer to {attempts} attempts of "
                     f"{kvs.timeout:g} s each (the node may have died or left)", address=address)


class _Uploader:
    """Uploads parts in the background, at most UPLOADS_IN_FLIGHT at once."""

    def __init__(self, store: S3Objects) -> None:
        self.store = store
        self.pool = ThreadPoolExecutor(max_workers=UPLOADS_IN_FLIGHT, thread_name_prefix="upload")
        self.slots = threading.Semaphore(UPLOADS_IN_FLIGHT)
        self.futures: List[Future] = []
        self.entries: List[ObjectEntry] = []

    def submit(self, part: Optional[Part]) -> None:
        if part is None:
            return
        self.slots.acquire()
        self.entries.append(part.entry)
        future = self.pool.submit(self.store.put, part.entry.name, part.body)
        future.add_done_callback(lambda _f: self.slots.release())
        self.futures.append(future)
        for f in [f for f in self.futures if f.done()]:
            f.result()  # raises the first failure as soon as it is seen
            self.futures.remove(f)

    def finish(self) -> None:
        try:
            for f in self.futures:
                f.result()
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)


def backup(routing: Union[str, Sequence[str]], url: str, *, auth: Optional[AuthConfig] = None,
           part_bytes: int = DEFAULT_PART_BYTES, timeout: float = 5.0,
           profile: Optional[str] = None, endpoint_url: Optional[str] = None,
           progress: Optional[Progress] = None, s3_client: Any = None,
           ip: str = "127.0.0.1") -> BackupResult:
    """Back the cluster at `routing` up to `url` (s3://bucket/prefix); see the contract."""
    location = parse_location(url)
    say = progress or (lambda text: log.info("%s", text))
    store = S3Objects(location, profile=profile, endpoint_url=endpoint_url, client=s3_client)
    store.check_bucket(f"backup to {location}")
    if store.exists(MANIFEST_NAME):
        raise BackupExists(f"backup to {location}: a backup is already there "
                           f"({location.key(MANIFEST_NAME)}); choose another prefix",
                           bucket=location.bucket, object=MANIFEST_NAME)
    started = time.monotonic()
    started_at = _now()
    kvs = _cluster_client(routing, auth, timeout, ip)
    uploader = _Uploader(store)
    try:
        before = _members(kvs, timeout * 3)
        workers = [(n.node_id, n.tier, t, a) for n in before.nodes
                   for t, a in enumerate(n.worker_addresses)]
        if not workers:
            raise BackupError("backup: routing knows no KVS node", address=kvs.routing_address)
        say(f"backup to {location}: {len(before.nodes)} node(s), {len(workers)} worker(s), "
            f"membership version {before.version}")
        metadata = PartWriter("metadata", part_bytes=part_bytes)
        scanned = skipped = restarts = 0
        last_report = time.monotonic()
        for i, (node_id, tier, thread, address) in enumerate(workers):
            writer = PartWriter("data", node_id, thread, part_bytes)
            cursor, done = b"", False
            while not done:
                page = _scan_page(kvs, address, cursor, attempts=3)
                if page.restarted:
                    restarts += 1
                    log.info("scan of %s started over (its store grew); keys seen twice are "
                             "merged on restore", address)
                for t in page.tuples:
                    scanned += 1
                    if not backed_up(t.key):
                        skipped += 1
                    elif is_metadata(t.key):
                        uploader.submit(metadata.add(t))
                    else:
                        uploader.submit(writer.add(t))
                cursor, done = page.next_cursor, page.done
                if time.monotonic() - last_report >= 1.0:
                    last_report = time.monotonic()
                    say(f"  worker {i + 1}/{len(workers)} ({node_id}/{thread}): {scanned:,} "
                        f"keys scanned, {len(uploader.entries)} object(s) so far")
            uploader.submit(writer.close())
        uploader.submit(metadata.close())
        uploader.finish()
        after = _members(kvs, timeout * 3)
    finally:
        uploader.pool.shutdown(wait=True, cancel_futures=True)
        kvs.close()
    changed = after.version != before.version
    if changed:
        log.warning("the cluster's membership changed during the backup (version %d -> %d): "
                    "keys moved between nodes meanwhile may be missing; back up again for a "
                    "complete copy", before.version, after.version)
    cluster = {"routing": list(kvs.routing_addresses),
               "membership_version": {"before": before.version, "after": after.version},
               "membership_changed": changed,
               "nodes": [{"node_id": n.node_id, "tier": anna_pb2.Tier.Name(n.tier).lower(),
                          "threads": len(n.worker_addresses)} for n in before.nodes],
               "default_replication": [before.default_replication.memory_global,
                                       before.default_replication.memory_local,
                                       before.default_replication.disk_global,
                                       before.default_replication.disk_local],
               "replication_overrides": len(before.overrides)}
    manifest = Manifest(started_at=started_at, finished_at=_now(), cluster=cluster,
                        objects=sorted(uploader.entries, key=lambda o: o.name))
    store.put(MANIFEST_NAME, manifest.to_json())
    seconds = time.monotonic() - started
    totals = manifest.totals
    say(f"backup done: {totals['keys']:,} keys in {totals['objects']} object(s), "
        f"{totals['bytes'] / 1e6:.1f} MB, {seconds:.1f} s; manifest "
        f"s3://{location.bucket}/{location.key(MANIFEST_NAME)}")
    return BackupResult(str(location), manifest, seconds, scanned, skipped, restarts)


def read_manifest(store: S3Objects) -> Manifest:
    """The location's manifest, checked (ManifestError when missing or malformed)."""
    location = store.location
    try:
        raw = store.get(MANIFEST_NAME)
    except BackupObjectMissing:
        raise ManifestError(f"no backup at {location}: {location.key(MANIFEST_NAME)} does not "
                            f"exist (an unfinished backup has no manifest)",
                            bucket=location.bucket, object=MANIFEST_NAME) from None
    return parse_manifest(raw, bucket=location.bucket, object=location.key(MANIFEST_NAME))


class _Writer:
    """Merges key tuples into the cluster in batches (see the contract)."""

    def __init__(self, kvs: Client, location: Location) -> None:
        self.kvs, self.location = kvs, location
        self.batch: List[Any] = []
        self.batch_bytes = 0
        self.object = ""
        self.retried = 0

    def add(self, t: Any, object_name: str) -> None:
        if self.object != object_name:
            self.flush()
            self.object = object_name
        self.batch.append(t)
        self.batch_bytes += len(t.payload) + len(t.key)
        if len(self.batch) >= RESTORE_BATCH_KEYS or self.batch_bytes >= RESTORE_BATCH_BYTES:
            self.flush()

    def _fail(self, key: str, why: str) -> RestoreFailed:
        return RestoreFailed(f"restore of {key!r} (from s3://{self.location.bucket}/"
                             f"{self.location.key(self.object)}): {why}",
                             bucket=self.location.bucket, object=self.object, key=key)

    def flush(self) -> None:
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        if not batch:
            return
        kvs = self.kvs
        lookup = anna_pb2.KeyAddressRequest(keys=sorted({t.key for t in batch}),
                                            response_address=kvs.response_address)
        try:
            answer = kvs.routing.ask("address", lookup, f"routing lookup of {len(batch)} keys",
                                      None)
        except AnnaError as e:
            raise self._fail(batch[0].key, str(e)) from None
        where = {a.key: list(a.addresses) for a in answer.addresses}
        groups: Dict[str, List[Any]] = {}
        retry: List[Any] = []
        for t in batch:
            addresses = where.get(t.key) or []
            if not addresses:
                retry.append(t)
                continue
            address = addresses[zlib.crc32(t.key.encode()) % len(addresses)]
            groups.setdefault(address, []).append(t)
        pending: Dict[str, tuple] = {}
        for address, tuples in groups.items():
            request = anna_pb2.KeyRequest(type=anna_pb2.PUT, response_address=kvs.response_address,
                                          request_id=kvs._next_id())
            request.tuples.extend(tuples)
            kvs.send_kind(address, "request", request)
            pending[request.request_id] = (address, tuples)
        answers = kvs._collect({rid: a for rid, (a, _) in pending.items()},
                               time.monotonic() + kvs.timeout)
        for rid, (address, tuples) in pending.items():
            response = answers.get(rid)
            if response is None:
                retry.extend(tuples)
                continue
            by_key = {t.key: t for t in response.tuples}
            for t in tuples:
                got = by_key.get(t.key)
                code = got.error if got is not None else (response.error or anna_pb2.MALFORMED)
                if code == anna_pb2.NO_ERROR:
                    continue
                if code == anna_pb2.WRONG_OWNER:
                    retry.append(t)
                    continue
                detail = f" ({got.error_detail})" if got is not None and got.error_detail else ""
                raise self._fail(t.key, f"{anna_pb2.AnnaError.Name(code)} at {address}{detail}")
        for t in retry:   # redirected or unanswered: the client's own failover and deadline
            self.retried += 1
            try:
                kvs.put(t.key, tuple_to_lattice(t))
            except (AnnaError, ValueError) as e:
                raise self._fail(t.key, str(e)) from None


def restore(routing: Union[str, Sequence[str]], url: str, *, auth: Optional[AuthConfig] = None,
            verify: str = "first", timeout: float = 5.0, profile: Optional[str] = None,
            endpoint_url: Optional[str] = None, progress: Optional[Progress] = None,
            s3_client: Any = None, ip: str = "127.0.0.1") -> RestoreResult:
    """Merge the backup at `url` into the cluster at `routing`; see the contract."""
    if verify not in ("first", "each"):
        raise ValueError(f"verify must be 'first' or 'each', not {verify!r}")
    location = parse_location(url)
    say = progress or (lambda text: log.info("%s", text))
    store = S3Objects(location, profile=profile, endpoint_url=endpoint_url, client=s3_client)
    store.check_bucket(f"restore from {location}")
    manifest = read_manifest(store)
    totals = manifest.totals
    say(f"restore from {location}: backup of {manifest.started_at}, {totals['keys']:,} keys in "
        f"{totals['objects']} object(s), {totals['bytes'] / 1e6:.1f} MB")
    started = time.monotonic()
    objects = manifest.ordered()
    if verify == "first":
        for i, entry in enumerate(objects):
            store.check(entry)
            if i + 1 == len(objects) or (i + 1) % 50 == 0:
                say(f"  verified {i + 1}/{len(objects)} object(s)")
    kvs = _cluster_client(routing, auth, timeout, ip)
    writer = _Writer(kvs, location)
    keys = size = 0
    last_report = time.monotonic()
    try:
        tiers = {n.tier for n in _members(kvs, timeout * 3).nodes}

        def records_of(entry: ObjectEntry) -> List[Any]:
            body = store.verified(entry)   # checked again: it may have changed since
            try:
                return list(read_records(body))
            except ValueError as e:   # the checksum matched, so the backup itself is bad
                raise ManifestError(f"s3://{location.bucket}/{location.key(entry.name)}: "
                                    f"does not decode ({e})", bucket=location.bucket,
                                    object=entry.name) from None

        # The overrides (small: routing holds them all in memory too) go first, as a whole,
        # so an override the target cannot honour leaves the index as well.
        metadata = [e for e in objects if e.kind == "metadata"]
        kept, left_out = fit_overrides([t for e in metadata for t in records_of(e)], tiers)
        skipped = sorted(set(left_out))
        for key in skipped:
            log.warning("replication override of %r left out: it names no tier this cluster "
                        "has (the key gets the default replication)", key)
        for t in kept:
            writer.add(t, metadata[0].name)
            keys += 1
        keys += len(left_out)
        writer.flush()
        for i, entry in enumerate(objects):
            if entry.kind == "metadata":
                size += entry.bytes
                continue
            for t in records_of(entry):
                writer.add(t, entry.name)
                keys += 1
            writer.flush()
            size += entry.bytes
            if time.monotonic() - last_report >= 1.0 or i + 1 == len(objects):
                last_report = time.monotonic()
                say(f"  restored {i + 1}/{len(objects)} object(s), {keys:,} keys")
    finally:
        kvs.close()
    seconds = time.monotonic() - started
    say(f"restore done: {keys:,} keys merged in {seconds:.1f} s"
        + (f" ({writer.retried} retried through the client)" if writer.retried else "")
        + (f"; {len(skipped)} replication override(s) left out (no such tier here)"
           if skipped else ""))
    return RestoreResult(str(location), keys, size, len(objects), seconds, writer.retried,
                         skipped)
