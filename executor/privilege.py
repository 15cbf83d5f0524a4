"""Who an executor node's worker processes run as: user code never reaches a cluster secret.

Contract:
- Workers run user code, so they hold only the function role's key pair (handed to them over
  a pipe, `runtime.auth.encode_handoff`), never the cluster's. What keeps them from the
  cluster's secret key file (and from the node's memory, `/proc/<node>/environ`, ...) is the
  operating system, in two layers:
  - **Landlock** (Linux 5.13+), always when the kernel has it: before any user code runs,
    the worker restricts itself (`hide_paths`) so that no file beneath the key directory
    can be opened for reading, whatever its uid; a Landlock-restricted process also cannot
    trace or read the memory of processes outside its domain (its node, other workers),
    and from Landlock ABI 6 (Linux 6.12) it cannot signal them either. The rule is an allow-list built around the hidden paths: every sibling of every
    directory on the way to them (as they are when the worker starts) stays readable; a
    file created later directly in one of those directories (say `/tmp` when the keys are
    under `/tmp/x/keys`) cannot be read back by the worker; so a worker points `TMPDIR`
    (and `tempfile`) at a directory of its own, made before it restricts itself.
  - **another uid**: a node running as root starts its workers under
    `NodeConfig.worker_user` (a user name or a numeric uid; default `nobody`), with that
    user's gid and no supplementary groups, when that uid can reach the Python interpreter
    and the platform's code (`reachable`); key files are mode 0600, owned by the node's
    user, and another uid can neither read them nor trace the node. When the interpreter is
    out of its reach (Python installed under `/root`, mode 0700), workers keep uid 0 but
    drop every capability (`drop_capabilities`: the bounding set too, so no exec regains
    them) before any user code runs: without CAP_SYS_PTRACE they cannot read the node's
    memory or `/proc/<node>/environ`, without CAP_DAC_OVERRIDE no file another user owns
    and keeps to itself; the node says so at WARNING.
  Without Landlock and without another uid (a node that is not root, on an old kernel) the
  workers could read the key directory: the node logs a WARNING saying so at start, once
  (it does not refuse: a developer's machine runs so). On Kubernetes the workers run in a
  container of their own without the keys, under another uid, started by a worker host
  (`executor/workerhost.py`, k8s/README.md); these layers then play no part.
- `resolve_identity(worker_user, euid, lookup)` is the pure decision: a `WorkerIdentity`
  (uid and gid to switch to, or None for the node's own) or ValueError naming the user.
  `worker_user=""` keeps the node's own user even as root.
- `worker_ipc_dir(ipc_dir, node_id, identity)`: with Unix sockets, the directory a node's
  workers bind theirs in: `ipc_dir` itself when they run as the node's user, else a
  subdirectory owned by the worker uid (mode 0700). ValueError when the worker uid could not
  reach it (a parent directory it may not traverse), naming the directory.
"""
from __future__ import annotations

import ctypes
import logging
import os
import pwd
import stat
from dataclasses import dataclass
from typing import Callable, Iterable, List, Optional, Union

__all__ = ["WorkerIdentity", "resolve_identity", "worker_ipc_dir", "DEFAULT_WORKER_USER",
           "isolation_warning", "reachable", "landlock_abi", "hide_paths", "worker_identity",
           "drop_capabilities"]

log = logging.getLogger("cloudburst.node")

DEFAULT_WORKER_USER = "nobody"


@dataclass(frozen=True)
class WorkerIdentity:
    """The uid and gid workers run as; None for both: the node's own."""

    uid: Optional[int] = None
    gid: Optional[int] = None

    @property
    def separate(self) -> bool:
        return self.uid is not None


def resolve_identity(worker_user: Optional[Union[str, int]], euid: int,
                     lookup: Callable[[str], "pwd.struct_passwd"] = pwd.getpwnam,
                     lookup_uid: Callable[[int], "pwd.struct_passwd"] = pwd.getpwuid
                     ) -> WorkerIdentity:
    """See the module contract. `worker_user` None means the default (`nobody` as root)."""
    if worker_user == "":
        return WorkerIdentity()
    if euid != 0:
        if worker_user is not None:
            raise ValueError(f"worker_user={worker_user!r} needs the executor node to run as "
                             f"root (it runs as uid {euid}, which cannot switch users)")
        return WorkerIdentity()
    name = DEFAULT_WORKER_USER if worker_user is None else worker_user
    try:
        if isinstance(name, int) or (isinstance(name, str) and name.isdigit()):
            uid = int(name)
            try:
                gid = lookup_uid(uid).pw_gid
            except KeyError:
                gid = uid                   # a uid without a passwd entry: its own gid
        else:
            entry = lookup(name)
            uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        raise ValueError(f"worker_user {name!r} is not a user on this machine (set "
                         f"NodeConfig.worker_user to an unprivileged user or uid)") from None
    if uid == 0:
        raise ValueError(f"worker_user {name!r} is root: workers would read the cluster's "
                         f"keys; choose an unprivileged user")
    return WorkerIdentity(uid, gid)


def worker_identity(config: "object") -> WorkerIdentity:
    """The identity a node's workers run as (module contract): `resolve_identity`, then the
    default user dropped (with a WARNING) when it cannot reach the interpreter or the code;
    ValueError naming the directory when an explicitly chosen `worker_user` cannot."""
    import sys
    from runtime.process import repo_root
    identity = resolve_identity(getattr(config, "worker_user", None), os.geteuid())
    if not identity.separate:
        return identity
    blocked = reachable([sys.executable, repo_root()], identity.uid, identity.gid)
    if blocked is None:
        return identity
    if getattr(config, "worker_user", None) is not None:
        raise ValueError(f"worker_user {config.worker_user!r} (uid {identity.uid}) cannot "
                         f"search {blocked}, on the way to the Python interpreter or the "
                         f"platform's code")
    log.warning("workers keep the node's uid: %r (uid %d) cannot search %s, on the way to "
                "the Python interpreter or the platform's code", DEFAULT_WORKER_USER,
                identity.uid, blocked)
    return WorkerIdentity()


def isolation_warning(identity: WorkerIdentity, key_dir: Optional[str], euid: int,
                      landlock: int) -> Optional[str]:
    """The WARNING a node logs at start when its workers are less isolated than they
    should be (see the module contract), or None."""
    if identity.separate or not key_dir:
        return None
    if landlock <= 0:
        return (f"executor workers run as the node's own user (uid {euid}) and this kernel "
                f"has no Landlock, so the functions they run can read the cluster's secret "
                f"key in {key_dir}: run the executor node as root (workers then switch to "
                f"NodeConfig.worker_user, default {DEFAULT_WORKER_USER!r}) or give workers a "
                f"container without the keys (k8s/README.md)")
    if euid == 0:
        return (f"executor workers keep uid 0 without capabilities: Landlock keeps the "
                f"functions they run from the key directory {key_dir}, but they can still "
                f"write files root owns; install Python where NodeConfig.worker_user "
                f"(default {DEFAULT_WORKER_USER!r}) can run it")
    return None


def reachable(paths: Iterable[str], uid: int, gid: int) -> Optional[str]:
    """None if `uid`/`gid` may traverse every directory leading to each of `paths` (and
    the last component itself), else the first directory it may not search."""
    for path in paths:
        probe = os.path.realpath(path)
        chain = []
        while True:
            chain.append(probe)
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        for d in reversed(chain):
            if os.path.isdir(d) and not _may_traverse(d, uid, gid):
                return d
    return None


# ---- Landlock (linux/landlock.h): syscalls 444-446 on every architecture ----------------------
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_READ_FILE = 1 << 2
_PR_SET_NO_NEW_PRIVS = 38


_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _RulesetAttrScoped(ctypes.Structure):         # Landlock ABI 6 and later
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


_PR_CAPBSET_DROP = 24
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Drop every capability of this process for good: the bounding set (so an exec does
    not regain them, even as uid 0), then the effective, permitted and inheritable sets.
    OSError if the kernel refuses."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:        # EINVAL: past the last capability
                break
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap}) failed")
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (or it is disabled)."""
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def _allowed_around(hidden: List[str]) -> List[str]:
    """Every path whose hierarchy stays readable: the siblings of each directory on the way
    from / to a hidden path, minus the hidden paths and that way itself."""
    on_path = set()
    for h in hidden:
        probe = h
        while True:
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            on_path.add(parent)
            probe = parent
    allowed = []
    for d in sorted(on_path):
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            full = os.path.join(d, e)
            if full not in on_path and full not in hidden:
                allowed.append(full)
    return allowed


def hide_paths(paths: Iterable[str]) -> bool:
    """Restrict this process (and what it starts) so that no file beneath `paths` can be
    opened for reading (module contract). True if in force; False if the kernel has no
    Landlock. Irreversible; sets no_new_privs."""
    hidden = sorted({os.path.realpath(p) for p in paths if p})
    abi = landlock_abi()
    if not hidden or abi <= 0:
        return False
    libc = _libc()
    # ABI 6: no signals to processes outside the domain (the node, any other process of
    # the same uid), no abstract Unix sockets outside it
    attr = _RulesetAttrScoped(_READ_FILE, 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET) \
        if abi >= 6 else _RulesetAttr(_READ_FILE)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(
        ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in _allowed_around(hidden):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue                 # gone since it was listed, or a dangling link
            try:
                rule = _PathBeneath(_READ_FILE, fd)
                if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset),
                                ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                ctypes.c_uint32(0)) != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return True


def _may_traverse(path: str, uid: int, gid: int) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def worker_ipc_dir(ipc_dir: Optional[str], node_id: str,
                   identity: WorkerIdentity) -> Optional[str]:
    """See the module contract."""
    if not ipc_dir or not identity.separate:
        return ipc_dir
    path = os.path.abspath(ipc_dir)
    probe = path
    while True:
        if not _may_traverse(probe, identity.uid, identity.gid):
            raise ValueError(f"workers run as uid {identity.uid} and cannot reach the Unix "
                             f"socket directory {ipc_dir} ({probe} is not searchable by "
                             f"them): make its parents mode o+x, or use TCP")
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    own = os.path.join(path, f"workers-{node_id}")
    os.makedirs(own, mode=0o700, exist_ok=True)
    os.chown(own, identity.uid, identity.gid)
    os.chmod(own, 0o700)
    return own
