"""What a worker runs, told to its node through shared memory instead of a message.

A node enforces the time limit of a function stuck in C code (`executor/liveness.py`
`RunningCalls`): it must know which call each worker runs and until when. Telling it by a
message costs every call a send, a wake-up of the node's I/O and main threads and the
parse, about two context switches per call. A worker that is the node's own child (the
local backend; not one run by a worker host) writes that record into a small shared file
instead, mapped by both, and the node reads it every heartbeat period, when its watchdog
looks for overruns anyway. No message, no wake-up; the node learns of a start at most a
period late, which the watchdog's slack of two periods covers (it acts only on a function
running past its deadline on a worker silent since then).

Contract:
- `RunSlots(uid, gid)` (node side) makes a private directory (mode 0700, owned by the
  workers' uid when they run as another user) and, per worker, `create(worker_id)` a
  zeroed slot file of `SLOT_BYTES` (mode 0600) whose path goes to the worker in
  `WorkerConfig.run_slot`; `read(worker_id)` returns the slot's `SlotState` (or None before
  the worker wrote it, or when the slot cannot be read consistently); `close()` removes
  the directory.
- `sync(calls, worker_id, pid, state)` (pure) applies a slot's state to the node's
  `RunningCalls`: a state written by another process than the worker's current one (`pid`:
  a process that exited, before its restart) is ignored; RUNNING records the function's
  call and deadline; IDLE ends the run it names; MESSAGED (a call id too long for the slot,
  told by message instead) leaves the record to the messages.
- `SlotReports(path)` (worker side) has `RunReports`'s interface: `start(call_id,
  deadline)` writes the slot and returns None (nothing to send), unless the start
  `continues` the run the slot holds (`executor/liveness.py`: a chain's next function of
  the same call and deadline), which writes nothing, as `RunReports` sends nothing;
  `end(...)` writes IDLE and returns None. A call id longer than `MAX_CALL_ID` bytes goes
  by message as `RunReports` does (the returned `WorkerStatus`), its slot marked MESSAGED
  meanwhile. The worker opens the slot before it restricts itself (Landlock), so the
  mapping stays usable.
- The record is a seqlock: the writer makes the sequence odd, writes, makes it even; a
  reader retries while it is odd or changed under it. One writer per slot (the worker's
  main thread).

Trust: a worker can write only its own slot (mode 0600 file in a 0700 directory of the node,
or of the workers' uid); what it writes there it could equally send as a message with its
function-role key, so the slot gives a worker no power it did not have.
"""
from __future__ import annotations

import logging
import mmap
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from hydro_proto import cloudburst_pb2 as pb

from .liveness import continues

__all__ = ["RunSlots", "SlotReports", "SlotState", "sync", "SLOT_BYTES", "MAX_CALL_ID",
           "IDLE", "RUNNING", "MESSAGED"]

log = logging.getLogger("cloudburst.node")

SLOT_BYTES = 512
# seq u64, pid u64, run u64, state u32, call id length u32, deadline f64
_HEAD = struct.Struct("<QQQIId")
MAX_CALL_ID = SLOT_BYTES - _HEAD.size
IDLE, RUNNING, MESSAGED = 0, 1, 2
_READ_TRIES = 64


@dataclass(frozen=True)
class SlotState:
    pid: int
    run: int              # the worker's count of functions started
    state: int            # IDLE, RUNNING or MESSAGED
    call_id: str
    deadline: float       # time.monotonic() of the running function's limit


def _read(buf: mmap.mmap) -> Optional[SlotState]:
    for _ in range(_READ_TRIES):
        seq, pid, run, state, size, deadline = _HEAD.unpack_from(buf, 0)
        if seq & 1:
            continue
        call_id = bytes(buf[_HEAD.size:_HEAD.size + min(size, MAX_CALL_ID)])
        if _HEAD.unpack_from(buf, 0)[0] != seq:
            continue
        if seq == 0:
            return None                              # never written
        return SlotState(pid, run, state, call_id.decode("utf-8", "replace"), deadline)
    return None


class RunSlots:
    """The node's slots, one per worker; see the module contract."""

    def __init__(self, uid: Optional[int] = None, gid: Optional[int] = None) -> None:
        self._uid, self._gid = uid, gid
        self.directory = tempfile.mkdtemp(prefix="cloudburst-runslots-")
        os.chmod(self.directory, 0o700)
        if uid is not None:
            os.chown(self.directory, uid, gid if gid is not None else -1)
        self._maps: Dict[str, mmap.mmap] = {}

    def create(self, worker_id: str) -> str:
        """A zeroed slot for `worker_id`; its path (for `WorkerConfig.run_slot`)."""
        path = os.path.join(self.directory, f"{worker_id}.slot")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, SLOT_BYTES)
            if self._uid is not None:
                os.fchown(fd, self._uid, self._gid if self._gid is not None else -1)
            old = self._maps.pop(worker_id, None)
            if old is not None:
                old.close()
            self._maps[worker_id] = mmap.mmap(fd, SLOT_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        return path

    def read(self, worker_id: str) -> Optional[SlotState]:
        buf = self._maps.get(worker_id)
        return None if buf is None else _read(buf)

    def close(self) -> None:
        for buf in self._maps.values():
            buf.close()
        self._maps.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def sync(calls, worker_id: str, pid: Optional[int], state: Optional[SlotState]) -> None:
    """Apply a slot's state to `calls` (a `RunningCalls`); see the module contract."""
    if state is None or pid is None or state.pid != pid:
        return
    if state.state == RUNNING:
        calls.started(worker_id, state.call_id, state.deadline, state.run)
    elif state.state == IDLE and state.run:
        calls.ended_run(worker_id, state.run)


class SlotReports:
    """The worker's side; `RunReports`'s interface (module contract)."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._buf = mmap.mmap(fd, SLOT_BYTES, mmap.MAP_SHARED,
                                  mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._seq = 0
        self._pid = os.getpid()
        self.runs = 0
        self.ended_run = 0            # the heartbeat thread tells no ends: the slot does
        self._messaged: Optional[str] = None
        self._told: Optional[Tuple[str, float, int]] = None   # the run held: call, deadline, run
        self._write(IDLE, b"", 0.0)

    def _write(self, state: int, call_id: bytes, deadline: float) -> None:
        buf = self._buf
        self._seq += 1                                # odd: being written
        struct.pack_into("<Q", buf, 0, self._seq)
        _HEAD.pack_into(buf, 0, self._seq, self._pid, self.runs, state, len(call_id), deadline)
        buf[_HEAD.size:_HEAD.size + len(call_id)] = call_id
        self._seq += 1                                # even: consistent
        struct.pack_into("<Q", buf, 0, self._seq)

    def start(self, call_id: str, deadline: float) -> Optional[pb.WorkerStatus]:
        if continues(self._told, call_id, deadline):
            return None
        self.runs += 1
        self._told = (call_id, deadline, self.runs)
        raw = call_id.encode()
        if len(raw) > MAX_CALL_ID:                    # too long for the slot: a message
            self._messaged = call_id
            self._write(MESSAGED, b"", deadline)
            return pb.WorkerStatus(running=1, call_id=call_id, deadline=deadline, run=self.runs)
        self._messaged = None
        self._write(RUNNING, raw, deadline)
        return None

    def end(self, call_id: str, deadline: float, now: float,
            follows: bool) -> Optional[pb.WorkerStatus]:
        self._told = None
        self._write(IDLE, b"", 0.0)
        if self._messaged is not None and self._messaged == call_id:
            self._messaged = None
            return pb.WorkerStatus(running=0, call_id=call_id, run=self.runs)
        return None

    def close(self) -> None:
        self._buf.close()
