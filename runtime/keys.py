"""CURVE key pairs and key directories on disk, and the `keys` command that writes them.

Contract:
- A `KeyPair` is a CURVE key pair in Z85 (40 characters each; `secret` None for a public key
  read on its own): `KeyPair.generate()`, `KeyPair.load(path)` (a certificate file,
  `X.key_secret`, or `X.key` for the public key only; `KeyFileError` naming the file when it
  is missing, unreadable or malformed), `public_hex`, and `save(directory, name)`.
- A key directory (`write_keys`, the `cloudburst keys` / `anna keys` command) holds:
    `cluster.key`, `cluster.key_secret`         the cluster's pair (every service uses it);
    `function.key`, `function.key_secret`       the pair user code runs with (executor workers;
                                                 `runtime/auth.py`, "Roles");
    `clients/NAME.key`, `clients/NAME.key_secret` one pair per client;
    `authorized/NAME.key`                        the public keys of the clients the cluster
                                                 admits (the files are pyzmq's `zmq.auth`
                                                 certificate format, so `load_certificate(s)`
                                                 reads them).
  Secret files are created mode 0600 and never overwritten unless asked (`force=True`).
- `write_keys(key_dir, clients, force=False, add_clients=False)` generates the cluster's
  pair, the function pair and one pair per client name (`check_client_name`; a name is
  `is_client_name`), each client's public key also in `authorized/`; with `add_clients`
  the cluster's pair is kept and only the clients (and a missing function pair) are added. Nothing is written when a secret it
  would write exists and not `force` (FileExistsError); it returns the paths written. Files
  are written through a temporary file created with their mode, so a secret is never
  readable by others, even for a moment, nor half-written.
- `add_keys_arguments(parser)` / `keys_command(args, prog)`: the `keys` subcommand, shared by
  `cloudburst keys` and `anna keys` (`KEYS_HELP`, `KEYS_DESCRIPTION`).
- `CLUSTER` and `FUNCTION` name the cluster's and the functions' pairs here, and their roles
  in `runtime/auth.py`, which reads these directories (`AuthConfig.load`).
"""
from __future__ import annotations

import binascii
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Tuple

import zmq
import zmq.auth
import zmq.utils.z85

__all__ = ["KeyPair", "KeyFileError", "write_keys", "check_client_name", "is_client_name",
           "CLUSTER", "FUNCTION", "KEYS_HELP", "KEYS_DESCRIPTION", "add_keys_arguments",
           "keys_command"]

log = logging.getLogger("runtime.auth")      # the same records as before

CLUSTER = "cluster"
FUNCTION = "function"
_CLIENT_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


class KeyFileError(ValueError):
    """A key file is missing, unreadable or malformed; the message names the file."""


def is_client_name(name: str) -> bool:
    return isinstance(name, str) and _CLIENT_NAME.fullmatch(name) is not None


def check_client_name(name: str) -> str:
    """`name` if it can name a client key (letters, digits, `_ . -`, at most 64, not starting
    with a dot); ValueError otherwise."""
    if not is_client_name(name):
        raise ValueError(f"{name!r} cannot name a client key: use 1-64 letters, digits, "
                         f"'_', '.' or '-', not starting with '.' or '-'")
    return name


@dataclass(frozen=True)
class KeyPair:
    """A CURVE key pair, both keys Z85-encoded (40 bytes); `secret` is None for a public key
    read on its own."""
    public: bytes
    secret: Optional[bytes] = field(default=None, repr=False)

    @classmethod
    def generate(cls) -> "KeyPair":
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def load(cls, path: str) -> "KeyPair":
        """The pair in a certificate file (`X.key_secret`, or `X.key` for the public key only)."""
        try:
            public, secret = zmq.auth.load_certificate(path)
        except (OSError, ValueError) as e:
            raise KeyFileError(f"cannot read the key file {path!r}: {e}") from None
        if len(public) != 40 or (secret is not None and len(secret) != 40):
            raise KeyFileError(f"the key file {path!r} does not hold 40-character Z85 keys")
        return cls(public, secret)

    @property
    def public_hex(self) -> str:
        return binascii.hexlify(zmq.utils.z85.decode(self.public)).decode("ascii")

    def save(self, directory: str, name: str, *, force: bool = False) -> Tuple[str, Optional[str]]:
        """Write `directory/name.key` (public) and, with a secret, `name.key_secret` (mode
        0600). FileExistsError if the secret file exists and not `force`; the paths written."""
        os.makedirs(directory, mode=0o700 if self.secret is not None else 0o755, exist_ok=True)
        secret_path = None
        if self.secret is not None:
            secret_path = os.path.join(directory, name + ".key_secret")
            if os.path.exists(secret_path) and not force:
                raise FileExistsError(f"{secret_path} exists (a secret key is never "
                                      f"overwritten unless forced)")
            _write_atomically(secret_path, _certificate(self.public, self.secret), 0o600)
        public_path = os.path.join(directory, name + ".key")
        _write_atomically(public_path, _certificate(self.public, None), 0o644)
        return public_path, secret_path


def _certificate(public: bytes, secret: Optional[bytes]) -> bytes:
    """A key file in zmq.auth's (ZPL) certificate format."""
    kind = "Secret" if secret else "Public"
    lines = [f"#   ZeroMQ CURVE **{kind}** Certificate",
             "#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions." if secret
             else "#   Exchange securely, or use a secure mechanism to verify the contents.",
             "", "metadata", "curve", f'    public-key = "{public.decode("ascii")}"']
    if secret:
        lines.append(f'    secret-key = "{secret.decode("ascii")}"')
    return ("\n".join(lines) + "\n").encode("ascii")


def _write_atomically(path: str, data: bytes, mode: int) -> None:
    """Write `path` through a temporary file created with `mode`, so it is never readable by
    others, even for a moment, and never half-written."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_keys(key_dir: str, clients: Iterable[str] = (), *, force: bool = False,
               add_clients: bool = False) -> List[str]:
    """Generate the cluster's pair and one pair per client name in `key_dir`, each client's
    public key also in `authorized/`. With `add_clients`, the cluster's existing pair is kept
    (it must exist) and only the clients are added. Refuses (FileExistsError, nothing
    written) when any secret key it would write exists, unless `force`. Returns the paths
    written."""
    names = [check_client_name(n) for n in clients]
    if len(set(names)) != len(names):
        raise ValueError("a client name is given twice")
    cluster_secret = os.path.join(key_dir, CLUSTER + ".key_secret")
    function_secret = os.path.join(key_dir, FUNCTION + ".key_secret")
    if add_clients and not os.path.exists(cluster_secret):
        raise FileNotFoundError(f"{cluster_secret} does not exist: create the cluster's keys "
                                f"first (without --add-client)")
    secrets = ([] if add_clients else [cluster_secret, function_secret]) + \
              [os.path.join(key_dir, "clients", n + ".key_secret") for n in names]
    existing = [p for p in secrets if os.path.exists(p)]
    if existing and not force:
        raise FileExistsError(f"{', '.join(existing)} exist(s); secret keys are never "
                              f"overwritten unless forced (--force)")
    written: List[str] = []
    if not add_clients:
        written += [p for p in KeyPair.generate().save(key_dir, CLUSTER, force=force) if p]
    if not add_clients or not os.path.exists(function_secret):
        # the pair user code runs with (a key directory made before it existed gets one
        # with --add-client)
        written += [p for p in KeyPair.generate().save(key_dir, FUNCTION, force=force) if p]
    for name in names:
        pair = KeyPair.generate()
        written += [p for p in pair.save(os.path.join(key_dir, "clients"), name, force=force) if p]
        written += [p for p in KeyPair(pair.public).save(os.path.join(key_dir, "authorized"),
                                                         name) if p]
    log.info("wrote %d key files in %s", len(written), key_dir)
    return written


# --- the `keys` command (shared by `cloudburst keys` and `anna keys`) -----------------------

KEYS_HELP = "generate the cluster's CURVE key pair and client key pairs in a directory"
KEYS_DESCRIPTION = """Generate CURVE keys for an authenticated cluster in DIR:
  DIR/cluster.key, DIR/cluster.key_secret        the cluster's pair (every service)
  DIR/clients/NAME.key, .key_secret              one pair per --client NAME
  DIR/authorized/NAME.key                        the client public keys the cluster admits
Give services DIR without clients/; give a client DIR/cluster.key and its own
clients/NAME.key_secret. Secret files are mode 0600; an existing secret key is never
overwritten unless --force."""


def add_keys_arguments(parser) -> None:
    """The `keys` subcommand's arguments on an argparse parser; its handler is `keys_command`."""
    parser.add_argument("dir", metavar="DIR", help="directory to write the keys in "
                                                   "(created if missing)")
    parser.add_argument("--client", action="append", default=[], metavar="NAME",  # noqa
                        help="also generate a client key pair NAME and authorize it "
                             "(repeatable)")
    parser.add_argument("--add-client", action="store_true",
                        help="keep the existing cluster keys in DIR and only add the --client "
                             "key pairs (to authorize a new client of a running cluster)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing secret keys")


def keys_command(args, prog: str = "keys") -> int:
    """Run `keys` with parsed arguments: 0 on success, 1 (message on stderr) on refusal."""
    import sys
    try:
        written = write_keys(args.dir, args.client, force=args.force,
                             add_clients=args.add_client)
    except (FileExistsError, ValueError, OSError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
