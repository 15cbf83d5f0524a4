"""A local Kubernetes control plane for tests: etcd, kube-apiserver, controller-manager,
scheduler and kwok (fake nodes whose pods become Ready without a kubelet), on free loopback
ports in a temporary directory.

    from k8s_controlplane import ControlPlane, find_binaries   # tests/ on sys.path

    with ControlPlane(find_binaries()) as cp:        # ~5 s once the binaries are built
        api = cp.api_client()                        # admin (system:masters) client
        cp.create_namespace("anna")                  # waits for its default ServiceAccount
        token = cp.service_account_token("anna", "cluster-manager")
        limited = cp.api_client(token)               # what RBAC allows that ServiceAccount

The binaries are built by `scripts/k8s/build.sh` into a cache outside the checkout;
`find_binaries()` returns their directory, or None when they are not built (the tests that
need them are then skipped, naming the command). `python tests/k8s_controlplane.py` starts one and
prints its kubeconfig until Ctrl-C.

Authentication is a static admin token (`--token-auth-file`) plus ServiceAccount tokens;
authorization is RBAC. TLS serving certificates are the apiserver's own self-signed ones
(`--cert-dir`), which clients trust as the CA. Every wait has a deadline and raises
`ControlPlaneError` with the component's log tail; `stop()` (also on exit from `with`, and at
interpreter exit) stops the components apiserver-before-etcd and removes the directory.
Children get SIGKILL if the thread that started them dies (PR_SET_PDEATHSIG; start control
planes from the main thread), so a killed test run does not leave etcd behind; the directory
such a run leaves is removed by the next `ControlPlane`.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["ControlPlane", "ControlPlaneError", "find_binaries", "BUILD_COMMAND"]

log = logging.getLogger("tests.k8s_controlplane")

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "scripts" / "k8s" / "build.sh"
BUILD_COMMAND = "scripts/k8s/build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
NODE_NAME = "kwok-node-0"
_live: List["ControlPlane"] = []


class ControlPlaneError(RuntimeError):
    """A component did not start, or a wait ran past its deadline; the message names the
    component, what was awaited, and ends with its log tail."""


def cache_dir() -> Optional[Path]:
    """The build cache directory `scripts/k8s/build.sh` uses (built or not)."""
    try:
        out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-dir"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out) if out else None


def find_binaries() -> Optional[Path]:
    """The directory holding the built binaries ($CLOUDBURST_K8S_BIN, else the build cache),
    or None when any is missing."""
    explicit = os.environ.get("CLOUDBURST_K8S_BIN")
    if explicit:
        bin_dir: Optional[Path] = Path(explicit)
    else:
        root = cache_dir()
        bin_dir = root / "bin" if root is not None and (root / "BUILT").exists() else None
    if bin_dir is None or not all(os.access(bin_dir / b, os.X_OK) for b in BINARIES):
        return None
    return bin_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep_stale(base_dir: Optional[str]) -> None:
    """Remove directories left by control planes whose process was killed (SIGKILL skips
    `stop()`; their children died with them through PR_SET_PDEATHSIG)."""
    for d in Path(base_dir or tempfile.gettempdir()).glob("cb-k8s-*"):
        try:
            pid = int((d / "owner.pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            log.info("removing %s, left by process %d which is gone", d, pid)
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except OSError:
        pass


def _wait(what: str, check: Callable[[], bool], deadline: float, interval: float = 0.1,
          alive: Optional[Callable[[], Optional[str]]] = None) -> None:
    """Call `check` until it is true; ControlPlaneError at `deadline` or if `alive` says a
    process died. Between checks it waits `interval` (these are readiness probes of other
    processes, which offer nothing to block on)."""
    start = time.monotonic()
    while True:
        if alive is not None:
            dead = alive()
            if dead:
                raise ControlPlaneError(f"waiting for {what}: {dead}")
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - a failed probe is "not yet"
            last = e
        else:
            last = None
        if time.monotonic() >= deadline:
            raise ControlPlaneError(f"{what}: not done within {time.monotonic() - start:.1f} s"
                                    + (f" (last probe: {last})" if last else ""))
        time.sleep(interval)


class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager, scheduler, kwok) for tests.

    Args:
        bin_dir: directory with the binaries (see `find_binaries`).
        base_dir: where to make the temporary directory (default: the system's).
        startup_timeout: seconds for everything to be up.
        controllers: also run controller-manager, scheduler and kwok with one fake node
            (False: etcd + apiserver only, enough for API-only tests).
        kwok: with controllers, also run kwok and its fake node (False: no node is made;
            a real kubelet registers its own, as in `scripts/k8s/real_cluster.py`).
        address: the address kube-apiserver binds and advertises (the `kubernetes`
            Service's endpoint). The default, loopback, serves only this machine's processes;
            pods in their own network namespaces need an address they reach, such as a
            bridge's gateway (`scripts/k8s/real_cluster.py`).
        service_cidr: the Services' ClusterIP range; its first address is the `kubernetes`
            Service, which the self-signed serving certificate names.
        extra_controllers: controller-manager controllers to run besides the ones the
            fake-node tests need (real pods need e.g. `endpointslice-controller` for
            Services and `root-ca-certificate-publisher-controller` for mounted
            ServiceAccount tokens).
    """

    def __init__(self, bin_dir: Path, base_dir: Optional[str] = None,
                 startup_timeout: float = 60.0, controllers: bool = True,
                 kwok: bool = True, address: str = "127.0.0.1",
                 service_cidr: str = "10.0.0.0/24",
                 extra_controllers: Sequence[str] = ()) -> None:
        self.bin_dir = Path(bin_dir)
        self.startup_timeout = float(startup_timeout)
        self.controllers = controllers
        self.kwok = kwok
        self.address = address
        self.service_cidr = service_cidr
        self.extra_controllers = tuple(extra_controllers)
        _sweep_stale(base_dir)
        self.dir = Path(tempfile.mkdtemp(prefix="cb-k8s-", dir=base_dir))
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        self.token = secrets.token_hex(16)
        self.procs: Dict[str, subprocess.Popen] = {}
        self.etcd_port = _free_port()
        self.peer_port = _free_port()
        self.port = _free_port()
        self.server = f"https://{address}:{self.port}"
        self.ca_file = self.dir / "certs" / "apiserver.crt"
        self.kubeconfig = self.dir / "admin.kubeconfig"
        self._clients: List[Any] = []
        self._stopped = False

    # -- lifecycle --

    def start(self) -> "ControlPlane":
        """Start every component and wait until the API serves and (with controllers) the
        fake node is Ready. Cleans up and raises ControlPlaneError on failure."""
        deadline = time.monotonic() + self.startup_timeout
        _live.append(self)
        t0 = time.monotonic()
        try:
            self._write_files()
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            if self.controllers:
                self._start_controllers(deadline)
        except BaseException:
            self.stop()
            raise
        log.info("control plane up at %s in %.1f s (%s)", self.server, time.monotonic() - t0,
                 self.dir)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every component (apiserver before etcd) and remove the directory."""
        if self._stopped:
            return
        self._stopped = True
        for c in self._clients:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing pools is best effort
                pass
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver",
                     "etcd"):
            self._stop_proc(name, timeout)
        shutil.rmtree(self.dir, ignore_errors=True)
        if self in _live:
            _live.remove(self)

    def restart_apiserver(self, timeout: float = 30.0) -> None:
        """Kill kube-apiserver and start it again on the same port and etcd: open watches
        break, as when an apiserver crashes. (A graceful stop takes tens of seconds while the
        controllers hold watches open.)"""
        p = self.procs.pop("kube-apiserver")
        p.kill()
        p.wait(timeout)
        self._start_apiserver(time.monotonic() + timeout)

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- clients --

    def api_client(self, token: Optional[str] = None) -> Any:
        """A `kubernetes.client.ApiClient` with `token` (default: the admin's)."""
        from kubernetes import client
        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"BearerToken": token or self.token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        api = client.ApiClient(cfg)
        self._clients.append(api)
        return api

    def write_kubeconfig(self, path: Path, token: Optional[str] = None) -> Path:
        """A kubeconfig for this control plane with `token` (default: the admin's)."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": "user", "user": {"token": token or self.token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "user"}}],
        }
        Path(path).write_text(json.dumps(config, indent=1))
        return Path(path)

    def create_namespace(self, name: str, timeout: float = 30.0) -> None:
        """Create a namespace and wait for its default ServiceAccount (pods need it)."""
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)),
                              _request_timeout=10)
        if self.controllers:
            _wait(f"ServiceAccount {name}/default (the controller-manager creates it)",
                  lambda: bool(core.list_namespaced_service_account(
                      name, field_selector="metadata.name=default", _request_timeout=5).items),
                  time.monotonic() + timeout, alive=self._dead)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """Create ServiceAccount `name` (if missing) and return a token for it."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        core = client.CoreV1Api(self.api_client())
        try:
            core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
                metadata=client.V1ObjectMeta(name=name)), _request_timeout=10)
        except ApiException as e:
            if e.status != 409:
                raise
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds))
        answer = core.create_namespaced_service_account_token(name, namespace, request,
                                                              _request_timeout=10)
        return answer.status.token

    def log_tail(self, component: str, lines: int = 30) -> str:
        """The last lines of a component's log."""
        path = self.dir / "logs" / f"{component}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- internals --

    def _write_files(self) -> None:
        (self.dir / "logs").mkdir()
        (self.dir / "certs").mkdir()
        (self.dir / "tokens.csv").write_text(f'{self.token},admin,admin,"system:masters"\n')
        key = self.dir / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                       capture_output=True, timeout=30)
        subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out",
                        str(self.dir / "sa.pub")], check=True, capture_output=True, timeout=30)
        self.write_kubeconfig(self.kubeconfig)

    def _spawn(self, name: str, args: List[str]) -> None:
        out = open(self.dir / "logs" / f"{name}.log", "ab")
        try:
            self.procs[name] = subprocess.Popen(
                [str(self.bin_dir / name)] + args, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.dir, start_new_session=True,
                preexec_fn=_die_with_parent)
        finally:
            out.close()
        log.debug("started %s (pid %d)", name, self.procs[name].pid)

    def _dead(self) -> Optional[str]:
        for name, p in self.procs.items():
            if p.poll() is not None:
                return (f"{name} exited with status {p.returncode}; its log ends:\n"
                        f"{self.log_tail(name)}")
        return None

    def _stop_proc(self, name: str, timeout: float) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not stop within %.3g s of SIGTERM; killing it", name,
                        p.pid, timeout)
            p.kill()
            p.wait(5)

    def _start_etcd(self, deadline: float) -> None:
        url = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self._spawn("etcd", [
            "--name=default", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true",
            "--log-level=warn"])

        def healthy() -> bool:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        _wait("etcd health", healthy, deadline, alive=self._dead)

    def _start_apiserver(self, deadline: float) -> None:
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}",
            f"--secure-port={self.port}", f"--cert-dir={self.dir / 'certs'}",
            f"--token-auth-file={self.dir / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={self.dir / 'sa.pub'}",
            f"--service-account-signing-key-file={self.dir / 'sa.key'}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--enable-priority-and-fairness=false",
            # a real kubelet's node name does not resolve; reach it (logs) by its address
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--profiling=false", "--v=1"])

        def ready() -> bool:
            if not self.ca_file.exists():
                return False
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
            req = urllib.request.Request(f"{self.server}/readyz",
                                         headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                return r.status == 200
        _wait("kube-apiserver /readyz", ready, deadline, interval=0.2, alive=self._dead)

    def _start_controllers(self, deadline: float) -> None:
        kubeconfig = str(self.kubeconfig)
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0",
            f"--service-account-private-key-file={self.dir / 'sa.key'}",
            f"--root-ca-file={self.ca_file}", "--use-service-account-credentials=false",
            "--controllers=deployment-controller,replicaset-controller,statefulset-controller,"
            "garbage-collector-controller,namespace-controller,serviceaccount-controller,"
            "resourcequota-controller,node-lifecycle-controller,statefulset-controller,"
            "persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,"
            "persistentvolume-protection-controller,disruption-controller"
            + "".join("," + c for c in self.extra_controllers),
            "--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2", "--v=1"])
        self._spawn("kube-scheduler", [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
            "--secure-port=0", "--v=1"])
        if not self.kwok:
            return
        stages = self.bin_dir.parent / "stages" / "kwok.yaml"
        self._spawn("kwok", [
            f"--kubeconfig={kubeconfig}", "--manage-all-nodes=true",
            f"--config={stages}", "--v=WARN"])
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        capacity = {"cpu": "64", "memory": "256Gi", "pods": "250"}
        core.create_node(client.V1Node(
            metadata=client.V1ObjectMeta(name=NODE_NAME, labels={
                "type": "kwok", "kubernetes.io/hostname": NODE_NAME},
                annotations={"kwok.x-k8s.io/node": "fake"}),
            status=client.V1NodeStatus(allocatable=capacity, capacity=capacity)),
            _request_timeout=10)

        def node_ready() -> bool:
            node = core.read_node(NODE_NAME, _request_timeout=5)
            ready = any(c.type == "Ready" and c.status == "True"
                        for c in (node.status.conditions or []))
            tainted = any(t.key.startswith("node.kubernetes.io/")
                          for t in (node.spec.taints or []))
            return ready and not tainted
        _wait(f"node {NODE_NAME} Ready (kwok) and untainted (node-lifecycle controller)",
              node_ready, deadline, interval=0.2, alive=self._dead)


@atexit.register
def _stop_all() -> None:
    for cp in list(_live):
        cp.stop()


def main() -> None:  # pragma: no cover - interactive helper
    """Start a control plane and print how to reach it until Ctrl-C."""
    logging.basicConfig(level=logging.INFO)
    bin_dir = find_binaries()
    if bin_dir is None:
        raise SystemExit(f"the binaries are not built: run {BUILD_COMMAND}")
    with ControlPlane(bin_dir) as cp:
        path = cp.write_kubeconfig(Path.cwd() / "local-k8s.kubeconfig")
        print(f"control plane at {cp.server}\n  kubectl --kubeconfig {path} get nodes\n"
              f"Ctrl-C stops it and removes {cp.dir}", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":  # pragma: no cover
    main()
