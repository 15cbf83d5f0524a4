"""The real-cluster test tier: a control plane (tests/k8s_controlplane.py, without kwok), containerd
+ runc and a real kubelet on this machine, pod networking (a bridge CNI, kube-proxy in
iptables mode, CoreDNS; scripts/k8s/real_network.py), then real pods from the project's image.

Run through `scripts/k8s/test_real.sh` (root, Debian packages containerd runc
containernetworking-plugins iptables conntrack; it builds the pause image). Modes:
- `--e2e` (scripts/k8s/real_e2e.py): the platform deployed with `kubectl apply -k` through the
  test overlay scripts/k8s/e2e/, used from this machine through its Services, and a KVS node
  crash (see that module);
- `--quick`: one pod `anna demo` to Succeeded (+ `--deployment`: a Deployment's pod replaced).

Addresses (NetSettings): pods 10.244.0.0/24 on bridge cb-br0 whose address 10.244.0.1 is the
pods' gateway and where kube-apiserver, the kubelet and CoreDNS listen (nothing listens on
the machine's external address); Services 10.96.0.0/24, routed onto the bridge. Pods with a
mounted ServiceAccount token reach the API through the `kubernetes` Service (10.96.0.1).

Everything started here is stopped in `finally` (and on SIGTERM/SIGINT): pods' containers and
shims, kubelet, kube-proxy, CoreDNS, containerd, control plane, the bridge, the pods' network
namespaces, the KUBE-*/CNI-* iptables chains made meanwhile (kube-proxy's MASQUERADE rules
are in them) and our FORWARD chain, mounts under the work directory, the cgroups the kubelet
made, and the sysctls the kubelet and kube-proxy change.

    python3 scripts/k8s/real_cluster.py --image localhost/cloudburst:dev \
        --image-tar FILE --pause-tar FILE [--e2e | --quick [--deployment]]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from k8s_controlplane import ControlPlane, _free_port, find_binaries  # noqa: E402
from real_network import (COREDNS_RBAC, T0, NetSettings, PodNetwork, corefile,  # noqa: E402
                          kube_proxy_config, leftover_report, run, say, wait,
                          write_cni_config)

NODE = "cb-real-node"
NS = "default"
# controllers real pods need besides the fast tier's: Services' endpoints (kube-proxy,
# CoreDNS), the kube-root-ca.crt ConfigMap that mounted ServiceAccount tokens use, and those
# of the platform's kinds
EXTRA_CONTROLLERS = ("endpointslice-controller", "endpoints-controller",
                     "root-ca-certificate-publisher-controller",
                     # routing, the schedulers and the disk tier are StatefulSets; the disk
                     # tier's claims bind to local volumes; every tier has a disruption budget
                     "statefulset-controller", "persistentvolume-binder-controller",
                     "persistentvolumeclaim-protection-controller",
                     "persistentvolume-protection-controller", "disruption-controller")


class Cluster:
    def __init__(self, args):
        self.args = args
        self.dir = Path(tempfile.mkdtemp(prefix="cbreal-"))
        self.sock = self.dir / "containerd.sock"
        self.procs = {}
        self.net_settings = NetSettings()
        self.net = PodNetwork(self.net_settings)   # records sysctls and iptables chains
        self.sysctls = self.net.sysctls
        self.var_lib_kubelet_existed = Path("/var/lib/kubelet").exists()
        self.cp = None

    # -- network --
    def start_network(self):
        self.net.check()
        self.net.setup()
        write_cni_config(self.dir / "cni", self.net_settings, self.dir / "cni-ipam")

    # -- containerd --
    def start_containerd(self):
        cfg = run(["containerd", "config", "default"]).stdout
        cdir = self.dir / "containerd"
        # the CNI config (bridge + host-local + portmap) is in self.dir/cni (start_network)
        repl = {
            'root = "/var/lib/containerd"': f'root = "{cdir}/root"',
            'state = "/run/containerd"': f'state = "{cdir}/state"',
            'address = "/run/containerd/containerd.sock"': f'address = "{self.sock}"',
            'restrict_oom_score_adj = false': 'restrict_oom_score_adj = true',
            'bin_dir = "/opt/cni/bin"': 'bin_dir = "/usr/lib/cni"',
            'conf_dir = "/etc/cni/net.d"': f'conf_dir = "{self.dir}/cni"',
        }
        for a, b in repl.items():
            if a not in cfg:
                raise RuntimeError(f"containerd default config lacks {a!r}")
            cfg = cfg.replace(a, b)
        import re
        cfg = re.sub(r'SystemdCgroup = true', 'SystemdCgroup = false', cfg)
        cfg = re.sub(r'sandbox_image = "[^"]*"', 'sandbox_image = "registry.k8s.io/pause:3.10"',
                     cfg)
        (self.dir / "containerd.toml").write_text(cfg)
        self._spawn("containerd", ["containerd", "--config", str(self.dir / "containerd.toml")])
        wait("containerd socket", lambda: run(self.ctr("version"), timeout=5).returncode == 0,
             30)

    def ctr(self, *a):
        return ["ctr", "-a", str(self.sock), "-n", "k8s.io", *a]

    def import_images(self):
        t = time.monotonic()
        run(self.ctr("image", "import", "--base-name", "registry.k8s.io/pause",
                     self.args.pause_tar), timeout=120)
        run(self.ctr("image", "import", "--all-platforms", self.args.image_tar), timeout=600)
        names = run(self.ctr("images", "ls", "-q")).stdout.split()
        say(f"images imported in {time.monotonic() - t:.1f} s: {names}")
        for want in ("registry.k8s.io/pause:3.10", self.args.image):
            if want not in names:
                raise RuntimeError(f"image {want} not in containerd after import: {names}")

    # -- kubelet --
    def start_kubelet(self):
        root = self.dir / "kubelet"
        root.mkdir()
        port, hport = _free_port(), _free_port()
        # the kubelet refuses a loopback node IP; the bridge's address keeps it (and its
        # anonymous read access) off the machine's external network
        ip = self.net_settings.gateway
        self.node_ip = ip
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "address": ip, "port": port, "healthzBindAddress": "127.0.0.1",
            "healthzPort": hport, "readOnlyPort": 0,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            # a test shortcut: anonymous and AlwaysAllow, so the apiserver reaches it (logs,
            # exec) without a client certificate; it listens on the bridge address only,
            # and an INPUT rule refuses pods' connections to its port
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "registerNode": True, "serializeImagePulls": False,
            "resolvConf": "/etc/resolv.conf", "podPidsLimit": -1,
            "clusterDNS": [self.net_settings.gateway],
            "clusterDomain": self.net_settings.cluster_domain,
        }
        (self.dir / "kubelet.json").write_text(json.dumps(cfg, indent=1))
        self._spawn("kubelet", [
            str(self.cp.bin_dir / "kubelet"), f"--config={self.dir / 'kubelet.json'}",
            f"--kubeconfig={self.cp.kubeconfig}", f"--root-dir={root}",
            f"--hostname-override={NODE}", f"--node-ip={ip}", "--v=1"])
        self.kubelet_hport = hport
        self.kubelet_port = port
        self.net.deny_from_pods(port, "the kubelet API")

    # -- kube-proxy and CoreDNS (host processes, each with its own ServiceAccount) --
    def start_kube_proxy_and_dns(self):
        (self.dir / "rbac.json").write_text(json.dumps(COREDNS_RBAC))
        self.kubectl("apply", "-f", str(self.dir / "rbac.json"))
        s = self.net_settings
        proxy_kc = self.cp.write_kubeconfig(
            self.dir / "kube-proxy.kubeconfig",
            self.cp.service_account_token("kube-system", "kube-proxy", 7200))
        self.proxy_healthz = _free_port()
        (self.dir / "kube-proxy.json").write_text(json.dumps(kube_proxy_config(
            s, proxy_kc, NODE, self.proxy_healthz, _free_port()), indent=1))
        self._spawn("kube-proxy", [str(self.cp.bin_dir / "kube-proxy"),
                                   f"--config={self.dir / 'kube-proxy.json'}", "--v=1"])
        dns_kc = self.cp.write_kubeconfig(
            self.dir / "coredns.kubeconfig",
            self.cp.service_account_token("kube-system", "coredns", 7200))
        self.dns_ready = _free_port()
        (self.dir / "Corefile").write_text(corefile(s, dns_kc, _free_port(), self.dns_ready))
        self._spawn("coredns", [str(self.cp.bin_dir / "coredns"),
                                f"-conf={self.dir / 'Corefile'}"])

    def wait_kube_proxy_and_dns(self):
        import urllib.request

        def ok(name, url):
            def check():
                if self.procs[name].poll() is not None:
                    raise SystemExit(f"{name} exited:\n" + self.tail(name))
                with urllib.request.urlopen(url, timeout=2) as r:
                    return r.status == 200
            return check
        try:
            wait("kube-proxy /healthz", ok("kube-proxy",
                 f"http://127.0.0.1:{self.proxy_healthz}/healthz"), 60)
            wait("CoreDNS /ready (synced with the apiserver)", ok("coredns",
                 f"http://127.0.0.1:{self.dns_ready}/ready"), 60)
        except Exception:
            print("kube-proxy log tail:\n" + self.tail("kube-proxy", 30))
            print("coredns log tail:\n" + self.tail("coredns", 30))
            raise

    def _spawn(self, name, cmd):
        log = open(self.dir / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        say(f"started {name} (pid {self.procs[name].pid})")

    def tail(self, name, n=25):
        try:
            return "\n".join((self.dir / f"{name}.log").read_text(errors="replace")
                             .splitlines()[-n:])
        except OSError:
            return "(no log)"

    def kubectl(self, *a, timeout=30, check=True):
        return run(["kubectl", f"--kubeconfig={self.cp.kubeconfig}", *a], timeout=timeout,
                   check=check)

    # -- cleanup --
    def cleanup(self):
        say("cleanup: start")
        if "kubelet" in self.procs:
            self._stop("kubelet")
        if "containerd" in self.procs and self.procs["containerd"].poll() is None:
            try:
                for cid in run(self.ctr("tasks", "ls", "-q"), timeout=10).stdout.split():
                    run(self.ctr("tasks", "kill", "-s", "SIGKILL", cid), timeout=10, check=False)
                time.sleep(1)
                for cid in run(self.ctr("tasks", "ls", "-q"), timeout=10).stdout.split():
                    run(self.ctr("tasks", "delete", "-f", cid), timeout=10, check=False)
                for cid in run(self.ctr("containers", "ls", "-q"), timeout=10).stdout.split():
                    run(self.ctr("containers", "delete", cid), timeout=10, check=False)
            except Exception as e:  # noqa: BLE001
                say(f"cleanup: removing containers: {e}")
        # shims of our containerd (found by our socket path in their command line)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                except OSError:
                    continue
                if "containerd-shim" in cmdline and str(self.sock) in cmdline:
                    os.kill(int(pid), signal.SIGKILL)
        if "containerd" in self.procs:
            self._stop("containerd")
        for name in ("kube-proxy", "coredns"):
            if name in self.procs:
                self._stop(name)
        if self.cp is not None:
            self.cp.stop()
        # bridge, netns, chains (ours, kube-proxy's KUBE-*, portmap's CNI-*), sysctls
        say(f"cleanup: network: {', '.join(self.net.cleanup()) or 'nothing made'}")
        mounts = [ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()]
        mine = [m for m in mounts if m.startswith(str(self.dir))
                or (not self.var_lib_kubelet_existed and m.startswith("/var/lib/kubelet"))]
        for m in sorted(mine, key=len, reverse=True):
            run(["umount", "-l", m], check=False)
        for ctl in Path("/sys/fs/cgroup").iterdir():
            kp = ctl / "kubepods"
            if kp.is_dir():
                for d in sorted((p for p in kp.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True) + [kp]:
                    try:
                        d.rmdir()
                    except OSError:
                        pass
        shutil.rmtree(self.dir, ignore_errors=True)
        if not self.var_lib_kubelet_existed:
            shutil.rmtree("/var/lib/kubelet", ignore_errors=True)
        left = leftover_report(self.net)
        if left:
            say(f"cleanup: LEFT BEHIND: {left}")
        say(f"cleanup: done (sysctls restored: {self.sysctls})")

    def _stop(self, name):
        p = self.procs.pop(name)
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def pod_test(c: Cluster):
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anna-demo"},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "demo", "image": c.args.image,
                                 "imagePullPolicy": "Never", "command": ["anna", "demo"]}]}}
    (c.dir / "pod.json").write_text(json.dumps(manifest))
    t = time.monotonic()
    c.kubectl("apply", "-f", str(c.dir / "pod.json"))

    def phase():
        p = json.loads(c.kubectl("get", "pod", "anna-demo", "-o", "json").stdout)
        ph = p["status"].get("phase")
        if ph == "Failed":
            raise SystemExit(f"pod Failed: {json.dumps(p['status'])[:2000]}")
        return ph if ph == "Succeeded" else None
    try:
        wait("pod anna-demo phase Succeeded", phase, 240, interval=1)
    except Exception:
        print(c.kubectl("describe", "pod", "anna-demo", check=False).stdout[-3000:])
        print("kubelet log tail:\n" + c.tail("kubelet", 40))
        raise
    say(f"POD PHASE Succeeded ({time.monotonic() - t:.1f} s from create)")
    logs = c.kubectl("logs", "anna-demo", check=False)
    if logs.returncode == 0:
        text, via = logs.stdout, "apiserver (kubectl logs)"
    else:
        say(f"kubectl logs failed ({logs.stderr.strip()}); reading the kubelet's log files")
        files = list((c.dir / "kubelet").glob("**/*.log")) + \
            list(Path("/var/log/pods").glob("default_anna-demo_*/**/*.log"))
        text, via = "".join(f.read_text(errors="replace") for f in files), "log files"
    print(f"---- pod log via {via} ----\n{text.rstrip()}\n----")
    if "demo done" not in text:
        raise SystemExit("the pod's log lacks 'demo done'")
    say("POD LOG contains 'demo done'")


def deployment_test(c: Cluster):
    manifest = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "anna-idle"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "anna-idle"}},
                 "template": {"metadata": {"labels": {"app": "anna-idle"}}, "spec": {
                     "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "idle", "image": c.args.image,
                                     "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"]}]}}}}
    (c.dir / "deploy.json").write_text(json.dumps(manifest))
    c.kubectl("apply", "-f", str(c.dir / "deploy.json"))

    def running():
        items = json.loads(c.kubectl("get", "pods", "-l", "app=anna-idle", "-o", "json")
                           .stdout)["items"]
        return [p["metadata"]["name"] for p in items
                if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]
    first = wait("deployment pod Running", running, 120)[0]
    t = time.monotonic()
    c.kubectl("delete", "pod", first, "--wait=false")
    new = wait(f"replacement for deleted pod {first} Running",
               lambda: [n for n in running() if n != first], 120)
    say(f"DEPLOYMENT replaced pod {first} with {new[0]} (Running "
        f"{time.monotonic() - t:.1f} s after delete)")
    c.kubectl("delete", "deployment", "anna-idle", "--wait=false")


def hold(c, seconds: float) -> None:
    """Keep a failed cluster up for at most `seconds` (or until the release file exists)."""
    release = c.dir / "release"
    say(f"HOLD: cluster kept up for {seconds:g} s: kubectl --kubeconfig={c.cp.kubeconfig} "
        f"-n cloudburst ...; `touch {release}` to clean up now")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not release.exists():
            time.sleep(1)
    except BaseException:  # noqa: BLE001 - a signal ends the hold; cleanup follows
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default="localhost/cloudburst:dev",
                    help="the image name inside the archive (manifests use it)")
    ap.add_argument("--image-tar", required=True, help="OCI archive of scripts/k8s/image.sh")
    ap.add_argument("--pause-tar", required=True, help="OCI archive of the pause image")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--e2e", action="store_true",
                      help="deploy the platform and run the end-to-end scenario (default)")
    mode.add_argument("--quick", action="store_true",
                      help="only a pod `anna demo` to Succeeded (quick checks)")
    ap.add_argument("--deployment", action="store_true",
                    help="with --quick: also a Deployment whose pod is deleted and replaced")
    ap.add_argument("--ha", choices=["routing", "all"], default="routing",
                    help="with --e2e, the no-single-point steps: 'routing' (default) kills a "
                         "routing pod under load; 'all' also kills a scheduler pod, upgrades "
                         "every tier and restarts a disk pod (scripts/k8s/real_ha.py; its "
                         "record: k8s/README.md)")
    ap.add_argument("--hold-on-failure", type=float, default=0, metavar="SECONDS",
                    help="on a failure, keep the cluster up for at most SECONDS to look at "
                         "it (kubectl --kubeconfig as printed); creating the file printed "
                         "ends the hold early, then everything is cleaned up as usual")
    args = ap.parse_args()
    if args.deployment and not args.quick:
        ap.error("--deployment goes with --quick")
    bins = find_binaries()
    if bins is None or not all(os.access(bins / b, os.X_OK)
                               for b in ("kubelet", "kube-proxy", "coredns")):
        raise SystemExit("binaries not built: scripts/k8s/build.sh --with-kubelet")
    c = Cluster(args)

    def on_signal(signum, frame):
        raise SystemExit(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    say(f"work dir {c.dir}; sysctls before: {c.sysctls}")
    try:
        c.start_network()
        c.start_containerd()
        c.import_images()
        t = time.monotonic()
        c.cp = ControlPlane(bins, controllers=True, kwok=False, address=c.net_settings.gateway,
                            service_cidr=c.net_settings.service_cidr,
                            extra_controllers=EXTRA_CONTROLLERS).start()
        say(f"control plane up at {c.cp.server} in {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        c.start_kubelet()
        c.start_kube_proxy_and_dns()

        def node_ready():
            if c.procs["kubelet"].poll() is not None:
                raise SystemExit("kubelet exited:\n" + c.tail("kubelet"))
            n = json.loads(c.kubectl("get", "node", NODE, "-o", "json").stdout)
            ready = any(x["type"] == "Ready" and x["status"] == "True"
                        for x in n["status"].get("conditions", []))
            tainted = any(x["key"].startswith("node.kubernetes.io/")
                          for x in n["spec"].get("taints", []))
            return ready and not tainted
        try:
            wait(f"node {NODE} Ready (real kubelet)", node_ready, 120, interval=1)
        except Exception:
            print("kubelet log tail:\n" + c.tail("kubelet", 40))
            raise
        say(f"NODE Ready {time.monotonic() - t:.1f} s after kubelet start")
        c.wait_kube_proxy_and_dns()
        print(c.kubectl("get", "nodes", "-o", "wide").stdout)
        if args.quick:
            pod_test(c)
            if args.deployment:
                deployment_test(c)
        else:
            from real_e2e import e2e
            e2e(c)
        say(f"REAL-CLUSTER TEST PASSED in {time.monotonic() - T0:.1f} s")
    except BaseException:
        if args.hold_on_failure > 0 and c.cp is not None:
            hold(c, args.hold_on_failure)
        raise
    finally:
        # a second Ctrl-C, or test_real.sh's SIGTERM after the first, must not cut the
        # cleanup short (every step of it has its own timeout)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        c.cleanup()


if __name__ == "__main__":
    main()
