"""Like-for-like security for the call benchmarks against Ray (`composition.py`,
`throughput.py`): the modes, and a throwaway CA for Ray's TLS.

A mode names the security of both sides of one comparison:
- `on`: Cloudburst with authentication (its default: CURVE on every socket, every peer
  authenticated by key) against Ray with TLS on its gRPC channels (mutual: every process
  presents a certificate signed by the run's CA, `RAY_USE_TLS=1`);
- `off`: both in plaintext (`cloudburst.LocalCluster(auth=False)`, Ray's default);
- `mixed`: Cloudburst with CURVE against Ray in plaintext (not a fair comparison; the only
  one these benchmarks made before, kept to compare with older figures).

`parse_modes` reads the `--security` flag; `TlsFiles.create` makes a CA and one certificate
it signed (for this host's addresses, usable as server and as client, as Ray presents the
same certificate on both ends) with the `openssl` command; `ray_tls_env` is the environment
that turns Ray's TLS on. `listening_ports` and `speaks_tls` check what a process really
serves: the benchmarks probe Ray's GCS, raylet and task workers with a TLS handshake in
every run, and fail if the answer is not what the mode asked for. These two are the only
functions here that touch sockets; the rest only starts `openssl`.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import ssl
import subprocess
from typing import Dict, Iterable, List, Sequence

MODES: Dict[str, str] = {
    "on": "Cloudburst CURVE vs Ray TLS (mutual)",
    "off": "both plaintext",
    "mixed": "Cloudburst CURVE vs Ray plaintext (unlike security)",
}
DEFAULT_MODES = "on,off"


def parse_modes(text: str) -> List[str]:
    """The modes of a `--security` value ("on,off", "off", ...), in the order given, each
    once; ValueError naming the unknown ones, or if none is given."""
    modes: List[str] = []
    for part in text.split(","):
        mode = part.strip()
        if mode and mode not in modes:
            modes.append(mode)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"--security: unknown mode(s) {unknown or [text]}; choose from "
                         f"{', '.join(MODES)} (comma-separated)")
    return modes


def add_peer_arguments(parser) -> None:
    """The options both call benchmarks share: `--security`, `--no-ray`, `--ray-venv`."""
    parser.add_argument("--security", default=DEFAULT_MODES,
                        help="comma-separated modes, each measured in every round: on "
                             "(Cloudburst CURVE vs Ray TLS), off (both plaintext), mixed "
                             "(Cloudburst CURVE vs Ray plaintext, unlike security); default "
                             f"{DEFAULT_MODES}")
    parser.add_argument("--no-ray", action="store_true", help="measure Cloudburst only")
    parser.add_argument("--ray-venv", default=os.path.join(
        os.path.expanduser("~"), ".cache", "cloudburst-bench", "ray-venv"),
        help="Ray's venv (installed there on first use)")


def parse_with_modes(parser, argv=None):
    """`parser`'s arguments and the modes of their `--security`; a bad mode is the
    parser's error (exit 2, with its message)."""
    args = parser.parse_args(argv)
    try:
        return args, parse_modes(args.security)
    except ValueError as e:
        parser.error(str(e))


def cloudburst_auth(mode: str) -> bool:
    """Whether Cloudburst authenticates (CURVE) in `mode`."""
    return mode in ("on", "mixed")


def ray_tls(mode: str) -> bool:
    """Whether Ray runs with TLS in `mode`."""
    return mode == "on"


def host_addresses() -> List[str]:
    """The IP addresses Ray may give this node and dial (loopback, the host name's address,
    and the address of the interface a default route leaves by), each once."""
    found = ["127.0.0.1"]
    try:
        found.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    try:   # a UDP connect sends nothing: it only picks the outgoing interface
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("8.8.8.8", 80))
            found.append(s.getsockname()[0])
    except OSError:
        pass
    return list(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """A CA certificate and a certificate/key pair it signed (PEM files)."""
    ca: str
    cert: str
    key: str

    @classmethod
    def create(cls, directory: str, addresses: Iterable[str] = ("127.0.0.1",),
               names: Sequence[str] = ("localhost",), days: int = 1) -> "TlsFiles":
        """Makes a fresh CA (P-256) in `directory` and one certificate it signed, valid as
        server and as client for the IP `addresses` and DNS `names` (each IP is also listed
        as a DNS name: some gRPC builds match an IP target against DNS entries only).
        The CA's key is deleted once it has signed. RuntimeError with openssl's message if
        a step fails."""
        ips = [str(ipaddress.ip_address(a)) for a in addresses]    # ValueError if not an IP
        alt = [f"IP:{ip}" for ip in ips] + [f"DNS:{n}" for n in (*names, *ips)]
        files = cls(ca=os.path.join(directory, "ca.crt"),
                    cert=os.path.join(directory, "node.crt"),
                    key=os.path.join(directory, "node.key"))
        ca_key = os.path.join(directory, "ca.key")
        csr = os.path.join(directory, "node.csr")
        ext = os.path.join(directory, "node.ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={','.join(dict.fromkeys(alt))}\n"
                    "extendedKeyUsage=serverAuth,clientAuth\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        steps = (
            ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", files.ca,
             "-days", str(days), "-subj", "/CN=cloudburst-bench-ca"],
            ["openssl", "req", *ec, "-keyout", files.key, "-out", csr,
             "-subj", f"/CN={names[0] if names else ips[0]}"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", files.ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", files.cert, "-days", str(days), "-extfile", ext],
        )
        try:
            for cmd in steps:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
                if out.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd[:3])} failed: {out.stderr.strip()}")
        except FileNotFoundError as e:
            raise RuntimeError("the `openssl` command is needed for --security on") from e
        finally:
            for path in (ca_key, csr, ext, files.ca[:-4] + ".srl"):
                if os.path.exists(path):
                    os.remove(path)
        return files


def ray_tls_env(files: TlsFiles) -> Dict[str, str]:
    """The environment that turns on TLS for every gRPC channel of a Ray started with it
    (Ray's documented variables; its processes inherit them)."""
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": files.cert,
            "RAY_TLS_SERVER_KEY": files.key, "RAY_TLS_CA_CERT": files.ca}


def listening_ports(pid: int) -> List[int]:
    """The TCP ports process `pid` listens on (IPv4 and IPv6; Linux /proc), sorted; empty
    if the process is gone or not ours to inspect."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:   # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def speaks_tls(host: str, port: int, files: "TlsFiles | None" = None,
               timeout: float = 5.0) -> bool:
    """Whether the server at host:port completes a TLS handshake (presenting `files`'
    certificate when given, as a mutual-TLS server requires; the server's certificate is
    not checked: the question is only whether it speaks TLS). False if it answers in
    plaintext or closes; OSError if nothing listens there."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])          # gRPC servers want HTTP/2
    if files is not None:
        context.load_cert_chain(files.cert, files.key)
    with socket.create_connection((host, port), timeout=timeout) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                tls.getpeercert(binary_form=True)
                return True
        except (ssl.SSLError, ConnectionError, socket.timeout):
            return False


def probe_ray(node, worker_pids: Iterable[int], files: "TlsFiles | None") -> Dict[str, bool]:
    """Whether each of a running Ray's gRPC servers speaks TLS: its GCS, its raylet, and
    every port the processes `worker_pids` (workers that ran a task) listen on. `node` is
    the driver's `ray._private.worker.global_worker.node` (its `gcs_address`,
    `node_manager_port`, `node_ip_address`); run inside the driver."""
    host = node.node_ip_address
    gcs_host, gcs_port = node.gcs_address.rsplit(":", 1)
    found = {"gcs": speaks_tls(gcs_host, int(gcs_port), files),
             "raylet": speaks_tls(host, int(node.node_manager_port), files)}
    for pid in sorted(set(worker_pids)):
        for port in listening_ports(pid):
            found[f"worker {pid}:{port}"] = speaks_tls(host, port, files)
    return found


def probe_this_ray(ray) -> Dict[str, bool]:
    """`probe_ray` from inside a driver of the running Ray (`ray`, the imported module): runs
    20 small tasks to find the worker processes, and reads the TLS files from Ray's own
    environment variables when `RAY_USE_TLS=1`."""
    @ray.remote
    def pid() -> int:
        return os.getpid()
    pids = ray.get([pid.remote() for _ in range(20)])
    files = TlsFiles(os.environ["RAY_TLS_CA_CERT"], os.environ["RAY_TLS_SERVER_CERT"],
                     os.environ["RAY_TLS_SERVER_KEY"]) \
        if os.environ.get("RAY_USE_TLS") == "1" else None
    return probe_ray(ray._private.worker.global_worker.node, pids, files)


class SecurityMismatch(Exception):
    """A side of a comparison does not run with the security its mode asks for."""


def check_probe(found: Dict[str, bool], tls: bool) -> None:
    """SecurityMismatch unless every probed server of `found` (from `probe_ray`) speaks TLS when
    `tls`, and none does otherwise, and at least one worker was probed."""
    wrong = sorted(name for name, on in found.items() if on != tls)
    if wrong or not any(name.startswith("worker ") for name in found):
        raise SecurityMismatch(f"Ray's TLS is not what the mode asks ({'on' if tls else 'off'}): "
                           f"probed {found}")
