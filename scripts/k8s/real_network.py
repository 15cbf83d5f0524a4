"""Pod networking for the real-cluster tier (scripts/k8s/real_cluster.py): a Linux bridge with
the pods' own subnet, the CNI config containerd uses, kube-proxy (iptables mode) and CoreDNS
as host processes, and the cleanup of all of it.

Contract:
- `PodNetwork.check()` refuses to start (NetworkError naming the clash) when the bridge name
  exists or the pod subnet / service range overlaps an address or route of this machine.
- `PodNetwork.setup()` records the sysctls it or kube-proxy may change, makes the bridge with
  the gateway address (the apiserver, the kubelet and CoreDNS bind it, so pods reach them and
  nothing listens on the machine's external address), routes the service range onto the
  bridge (ClusterIP traffic never leaves the machine, even without kube-proxy's rules), turns
  on IPv4 forwarding and adds a FORWARD chain that keeps traffic to and from the bridge on it
  (pods cannot reach other networks; nothing outside reaches pods), and an INPUT chain
  for pods' traffic to this machine where `deny_from_pods(port)` closes ports (the kubelet's).
- `write_cni_config()` writes a bridge + host-local (+ portmap) conflist into a directory of
  our own; containerd adds the loopback interface itself (its `loopback` plugin from
  /usr/lib/cni). host-local keeps its leases under the work directory.
- `kube_proxy_config()` / `corefile()` are plain functions of the settings.
- `PodNetwork.cleanup()` (idempotent, never raises) removes our chains, the route,
  the bridge, network namespaces created since `setup()`, the KUBE-*/CNI-* iptables chains
  that appeared since `setup()` (kube-proxy's and portmap's, with the rules jumping to them:
  kube-proxy's MASQUERADE rules live in its KUBE-POSTROUTING chain) and restores sysctls.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

log = logging.getLogger("real_network")
REPO = Path(__file__).resolve().parents[2]
T0 = time.monotonic()
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))   # the pod, ready and wait helpers shared with tests
from k8s_helpers import wait_for  # noqa: E402


def say(msg: str) -> None:
    """A progress line with the wall clock and the seconds since the tier started."""
    print(f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def wait(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll `check` until it returns something true (returned); RuntimeError naming `what`
    and the last error after `timeout` seconds (tests/k8s_helpers.py's `wait_for`, with a
    progress line)."""
    return wait_for(what, check, timeout, interval=interval, say=say)

# Sysctls the kubelet, kube-proxy or this module may change; restored on cleanup.
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops",
           "net.ipv4.ip_forward", "net.ipv4.conf.all.route_localnet",
           "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
           "net.netfilter.nf_conntrack_max",
           "net.netfilter.nf_conntrack_tcp_timeout_established",
           "net.netfilter.nf_conntrack_tcp_timeout_close_wait")
IPT = (("iptables", "filter"), ("iptables", "nat"), ("iptables", "mangle"),
       ("ip6tables", "filter"), ("ip6tables", "nat"), ("ip6tables", "mangle"))
CHAIN_PREFIXES = ("KUBE-", "CNI-")
FORWARD_CHAIN = "CB-POD-FORWARD"
INPUT_CHAIN = "CB-POD-INPUT"     # ports of this machine that pods must not reach
NETNS_DIR = Path("/var/run/netns")


class NetworkError(RuntimeError):
    """The network could not be set up; the message names what clashed or failed."""


@dataclass(frozen=True)
class NetSettings:
    """Addresses of the test cluster's network (chosen to be unlikely to clash)."""
    bridge: str = "cb-br0"
    pod_cidr: str = "10.244.0.0/24"
    service_cidr: str = "10.96.0.0/24"
    cluster_domain: str = "cluster.local"

    @property
    def gateway(self) -> str:
        """The bridge's own address: pods' default gateway; apiserver, kubelet and DNS."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def api_service_ip(self) -> str:
        """The `kubernetes` Service's ClusterIP (first address of the range)."""
        return str(next(ipaddress.ip_network(self.service_cidr).hosts()))


def run(cmd: List[str], timeout: float = 120, check: bool = True,
        **kw: Any) -> subprocess.CompletedProcess:
    """Run `cmd`, capturing its output; CalledProcessError (with stderr) on failure."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check,
                          **kw)


def sysctl_path(name: str) -> Path:
    return Path("/proc/sys/" + name.replace(".", "/"))


def read_sysctls() -> Dict[str, str]:
    """The current values of SYSCTLS that exist on this kernel."""
    out = {}
    for k in SYSCTLS:
        try:
            out[k] = sysctl_path(k).read_text().strip()
        except OSError:
            pass
    return out


def chains(prefixes: Tuple[str, ...] = CHAIN_PREFIXES) -> Dict[Tuple[str, str], Set[str]]:
    """{(tool, table): chains whose names start with one of `prefixes`}."""
    out = {}
    for tool, table in IPT:
        r = run([tool, "-t", table, "-S"], check=False)
        out[(tool, table)] = {ln.split()[1] for ln in r.stdout.splitlines()
                              if ln.startswith("-N ") and ln.split()[1].startswith(prefixes)}
    return out


def rules() -> Set[Tuple[str, str, str]]:
    """Every iptables/ip6tables rule and chain of the tables we touch, as (tool, table, line)
    (for checking that cleanup left them as they were)."""
    return {(tool, table, ln) for tool, table in IPT
            for ln in run([tool, "-t", table, "-S"], check=False).stdout.splitlines()}


def remove_new_chains(before: Dict[Tuple[str, str], Set[str]]) -> List[str]:
    """Delete the chains that were not there `before`, and the rules jumping to them from
    other chains; returns what was removed ("tool/table/chain")."""
    removed = []
    for (tool, table), now in chains().items():
        new = now - before.get((tool, table), set())
        if not new:
            continue
        for ln in run([tool, "-t", table, "-S"], check=False).stdout.splitlines():
            parts = shlex.split(ln)     # comments are quoted and hold spaces
            if parts and parts[0] == "-A" and "-j" in parts and \
                    parts[parts.index("-j") + 1] in new and parts[1] not in new:
                run([tool, "-t", table, "-D", *parts[1:]], check=False)
        for ch in new:
            run([tool, "-t", table, "-F", ch], check=False)
        for ch in new:
            if run([tool, "-t", table, "-X", ch], check=False).returncode == 0:
                removed.append(f"{tool}/{table}/{ch}")
    return removed


def cni_conflist(s: NetSettings, ipam_dir: Path) -> dict:
    """The CNI network: a bridge with host-local addresses from the pod subnet, the bridge
    address as gateway (no IP masquerade: pods only talk to this machine and each other),
    hairpin mode (a pod reaching itself through a Service) and portmap for hostPorts."""
    return {
        "cniVersion": "0.4.0", "name": "cb-pods",
        "plugins": [
            {"type": "bridge", "bridge": s.bridge, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                      "ranges": [[{"subnet": s.pod_cidr, "gateway": s.gateway}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}


def write_cni_config(conf_dir: Path, s: NetSettings, ipam_dir: Path) -> Path:
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "10-cb-pods.conflist"
    path.write_text(json.dumps(cni_conflist(s, ipam_dir), indent=1))
    return path


def kube_proxy_config(s: NetSettings, kubeconfig: Path, node: str, healthz_port: int,
                      metrics_port: int) -> dict:
    """kube-proxy in iptables mode. Conntrack limits and timeouts 0: leave the machine's as
    they are; NodePorts only on the gateway address, not on localhost (no route_localnet)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables", "clusterCIDR": s.pod_cidr, "hostnameOverride": node,
        "bindAddress": s.gateway,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": [f"{s.gateway}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False,
                     "syncPeriod": "30s", "minSyncPeriod": "1s"},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }


def corefile(s: NetSettings, kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """CoreDNS serving the cluster domain from the apiserver, on the gateway address only.
    Other names are not forwarded anywhere (pods have nothing to reach off this machine)."""
    return f""".:53 {{
    bind {s.gateway}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {s.cluster_domain} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


# RBAC for the host processes: kube-proxy uses the built-in system:node-proxier role;
# CoreDNS gets read access to what its kubernetes plugin watches.
COREDNS_RBAC = {
    "apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "cb-coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods",
                                                     "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "cb-coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cb-coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns",
                       "namespace": "kube-system"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "cb-kube-proxy"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:node-proxier"},
         "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy",
                       "namespace": "kube-system"}]},
    ]}


def find_clash(s: NetSettings, routes: List[str], addrs: List[str]) -> Optional[str]:
    """Why the pod subnet or service range cannot be used here (None: they can), given the
    lines of `ip -4 -o route show table all` and `ip -4 -o addr show`. Loopback and the
    default route do not count."""
    mine = [ipaddress.ip_network(s.pod_cidr), ipaddress.ip_network(s.service_cidr)]
    for ln in routes:
        words = ln.split()
        if not words:
            continue
        dst = words[1] if words[0] in ("local", "broadcast", "unreachable", "blackhole",
                                       "prohibit", "multicast") and len(words) > 1 else words[0]
        if dst == "default":
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        for m in mine:
            if net.overlaps(m) and not net.is_loopback:
                return f"{m} overlaps this machine's route {ln.strip()!r}"
    for ln in addrs:
        words = ln.split()
        if len(words) < 4 or words[2] != "inet":
            continue
        net = ipaddress.ip_interface(words[3]).network
        for m in mine:
            if net.overlaps(m) and not net.is_loopback:
                return f"{m} overlaps this machine's address {words[3]} on {words[1]}"
    return None


class PodNetwork:
    """The bridge, route, FORWARD chain and sysctls of the test cluster (see the module
    contract). `sysctls` holds the values before `setup()`, restored by `cleanup()`."""

    def __init__(self, settings: NetSettings) -> None:
        self.s = settings
        self.sysctls = read_sysctls()
        self.chains_before = chains()
        self.rules_before = rules()
        self.netns_before = set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else set()
        self._made_bridge = False
        self._made_route = False
        self._made_chain = False

    def check(self) -> None:
        """NetworkError when the bridge exists or our ranges overlap this machine's."""
        if Path(f"/sys/class/net/{self.s.bridge}").exists():
            raise NetworkError(f"interface {self.s.bridge} already exists (another run still "
                               f"up, or left over: `ip link del {self.s.bridge}`)")
        routes = run(["ip", "-4", "-o", "route", "show", "table", "all"]).stdout.splitlines()
        addrs = run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines()
        clash = find_clash(self.s, routes, addrs)
        if clash:
            raise NetworkError(clash)

    def setup(self) -> None:
        s = self.s
        prefix = ipaddress.ip_network(s.pod_cidr).prefixlen
        run(["ip", "link", "add", s.bridge, "type", "bridge"])
        self._made_bridge = True
        run(["ip", "addr", "add", f"{s.gateway}/{prefix}", "dev", s.bridge])
        run(["ip", "link", "set", s.bridge, "up"])
        run(["ip", "route", "add", s.service_cidr, "dev", s.bridge, "src", s.gateway])
        self._made_route = True
        # forwarding between pods (through Service DNAT) needs it; the FORWARD chain keeps
        # the bridge's traffic on the bridge
        sysctl_path("net.ipv4.ip_forward").write_text("1")
        if sysctl_path("net.bridge.bridge-nf-call-iptables").exists():
            # pod -> Service -> pod on one bridge: replies must pass conntrack to be un-NATed
            sysctl_path("net.bridge.bridge-nf-call-iptables").write_text("1")
        run(["iptables", "-N", FORWARD_CHAIN])
        self._made_chain = True
        run(["iptables", "-A", FORWARD_CHAIN, "-i", s.bridge, "-o", s.bridge, "-j", "ACCEPT"])
        run(["iptables", "-A", FORWARD_CHAIN, "-i", s.bridge, "-j", "DROP"])
        run(["iptables", "-A", FORWARD_CHAIN, "-o", s.bridge, "-j", "DROP"])
        run(["iptables", "-I", "FORWARD", "1", "-j", FORWARD_CHAIN])
        run(["iptables", "-N", INPUT_CHAIN])
        run(["iptables", "-I", "INPUT", "1", "-i", s.bridge, "-j", INPUT_CHAIN])
        log.info("bridge %s %s/%d up; services %s routed onto it", s.bridge, s.gateway, prefix,
                 s.service_cidr)

    def deny_from_pods(self, port: int, what: str) -> None:
        """Refuse TCP connections from pods to `port` on the bridge address (e.g. the
        kubelet's API, which this test cluster serves without authentication)."""
        run(["iptables", "-A", INPUT_CHAIN, "-p", "tcp", "--dport", str(port), "-m", "comment",
             "--comment", f"cloudburst test: pods may not reach {what}", "-j", "REJECT",
             "--reject-with", "tcp-reset"])

    def cleanup(self) -> List[str]:
        """Remove what setup() and the cluster's network made; returns a list of what was
        done (for the log). Never raises."""
        done: List[str] = []
        try:
            if self._made_chain:
                run(["iptables", "-D", "FORWARD", "-j", FORWARD_CHAIN], check=False)
                run(["iptables", "-F", FORWARD_CHAIN], check=False)
                run(["iptables", "-X", FORWARD_CHAIN], check=False)
                done.append(f"chain {FORWARD_CHAIN}")
                run(["iptables", "-D", "INPUT", "-i", self.s.bridge, "-j", INPUT_CHAIN],
                    check=False)
                run(["iptables", "-F", INPUT_CHAIN], check=False)
                run(["iptables", "-X", INPUT_CHAIN], check=False)
                done.append(f"chain {INPUT_CHAIN}")
            done += remove_new_chains(self.chains_before)
            done += remove_new_rules(self.rules_before)
            if NETNS_DIR.is_dir():
                for ns in sorted(set(os.listdir(NETNS_DIR)) - self.netns_before):
                    if ns.startswith("cni-"):
                        run(["ip", "netns", "delete", ns], check=False)
                        done.append(f"netns {ns}")
            if self._made_route:
                run(["ip", "route", "del", self.s.service_cidr, "dev", self.s.bridge],
                    check=False)
            if self._made_bridge:
                run(["ip", "link", "del", self.s.bridge], check=False)
                done.append(f"bridge {self.s.bridge}")
            # veths whose pod namespace is gone are gone too; any left on no master are ours
            # only if they were enslaved to the bridge, which no longer exists: nothing to do
            restore_sysctls(self.sysctls)
            if conntrack_available():
                for flag in ("-s", "-d"):
                    run(["conntrack", "-D", flag, self.s.pod_cidr], check=False)
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            log.warning("network cleanup: %s", e)
            done.append(f"error: {e}")
        return done


def restore_sysctls(values: Dict[str, str]) -> None:
    for k, v in values.items():
        try:
            if sysctl_path(k).read_text().strip() != v:
                sysctl_path(k).write_text(v)
        except OSError as e:
            log.warning("could not restore sysctl %s=%s: %s", k, v, e)


def conntrack_available() -> bool:
    return any(os.access(Path(d) / "conntrack", os.X_OK)
               for d in os.environ.get("PATH", "/usr/sbin:/sbin").split(":"))


def remove_new_rules(before: Set[Tuple[str, str, str]]) -> List[str]:
    """Delete rules added since `before` in chains named with CHAIN_PREFIXES, or jumping to
    one (kube-proxy fills KUBE-* chains that may have existed already, e.g. left by an
    earlier cluster); other rules are left alone (other programs may be adding theirs)."""
    removed = []
    for tool, table, ln in sorted(rules() - before):
        parts = shlex.split(ln)
        if not parts or parts[0] != "-A":
            continue
        target = parts[parts.index("-j") + 1] if "-j" in parts else ""
        if parts[1].startswith(CHAIN_PREFIXES) or target.startswith(CHAIN_PREFIXES):
            if run([tool, "-t", table, "-D", *parts[1:]], check=False).returncode == 0:
                removed.append(f"rule {tool}/{table}/{parts[1]}")
    return removed


def leftover_report(net: PodNetwork) -> Optional[str]:
    """What differs from before `setup()` after `cleanup()` (None: nothing): the bridge, and
    iptables rules added or removed. Informational: other programs on the machine may have
    changed rules meanwhile."""
    left = []
    if Path(f"/sys/class/net/{net.s.bridge}").exists():
        left.append(f"bridge {net.s.bridge}")
    now = rules()
    left += [f"added {t}/{tb}: {ln}" for t, tb, ln in sorted(now - net.rules_before)]
    left += [f"removed {t}/{tb}: {ln}" for t, tb, ln in sorted(net.rules_before - now)]
    return "; ".join(left) or None
