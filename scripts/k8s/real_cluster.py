"""The real-cluster test tier: a control plane (k8s/controlplane.py, without kwok), containerd
+ runc and a real kubelet on this machine, then real pods from the project's image.

Run through `scripts/k8s/test_real.sh` (root, Debian packages containerd runc
containernetworking-plugins; it builds the pause image). Everything started here is stopped in
`finally` (and on SIGTERM/SIGINT): pods' containers, kubelet, containerd, control plane,
mounts under the work directory, cgroups the kubelet made, the sysctls the kubelet changes.

    python3 scripts/k8s/real_cluster.py --image localhost/cloudburst:dev \
        --image-tar FILE --pause-tar FILE [--deployment]
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
from k8s.controlplane import ControlPlane, _free_port, find_binaries  # noqa: E402

NODE = "cb-real-node"
NS = "default"
SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def run(cmd, timeout=120, check=True, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check,
                          **kw)


def wait(what, check, timeout, interval=0.5):
    deadline = time.monotonic() + timeout
    t = time.monotonic()
    last = None
    while time.monotonic() < deadline:
        try:
            r = check()
            if r:
                say(f"{what}: ok after {time.monotonic() - t:.1f} s")
                return r
        except subprocess.CalledProcessError as e:
            last = f"{e.cmd[-4:]}: {(e.stderr or '').strip()[-300:]}"
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(interval)
    raise RuntimeError(f"{what}: not done within {timeout} s (last error: {last})")


class Cluster:
    def __init__(self, args):
        self.args = args
        self.dir = Path(tempfile.mkdtemp(prefix="cbreal-"))
        self.sock = self.dir / "containerd.sock"
        self.procs = {}
        self.sysctls = {k: Path("/proc/sys/" + k.replace(".", "/")).read_text().strip()
                        for k in SYSCTLS}
        self.var_lib_kubelet_existed = Path("/var/lib/kubelet").exists()
        self.cp = None
        self.chains = kube_chains()

    # -- containerd --
    def start_containerd(self):
        cfg = run(["containerd", "config", "default"]).stdout
        cdir = self.dir / "containerd"
        (self.dir / "cni").mkdir()
        # CRI reports the node's network NotReady without any CNI config; pods here use
        # hostNetwork, so a loopback-only network (no bridge, no addresses) is enough
        (self.dir / "cni" / "10-loopback.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "cb-loopback", "plugins": [{"type": "loopback"}]}))
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
        # the kubelet refuses a loopback node IP: use the machine's own first address
        ip = run(["hostname", "-I"]).stdout.split()[0]
        self.node_ip = ip
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "address": ip, "port": port, "healthzBindAddress": "127.0.0.1",
            "healthzPort": hport, "readOnlyPort": 0,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            # bound to the machine's own address only; the apiserver reaches it for logs without a client cert
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "imageGCHighThresholdPercent": 99, "imageGCLowThresholdPercent": 98,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "registerNode": True, "serializeImagePulls": False,
            "resolvConf": "/etc/resolv.conf", "podPidsLimit": -1,
        }
        (self.dir / "kubelet.json").write_text(json.dumps(cfg, indent=1))
        self._spawn("kubelet", [
            str(self.cp.bin_dir / "kubelet"), f"--config={self.dir / 'kubelet.json'}",
            f"--kubeconfig={self.cp.kubeconfig}", f"--root-dir={root}",
            f"--hostname-override={NODE}", f"--node-ip={ip}", "--v=1"])
        self.kubelet_hport = hport

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
        if self.cp is not None:
            self.cp.stop()
        for k, v in self.sysctls.items():
            Path("/proc/sys/" + k.replace(".", "/")).write_text(v)
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
        remove_new_chains(self.chains)
        shutil.rmtree(self.dir, ignore_errors=True)
        if not self.var_lib_kubelet_existed:
            shutil.rmtree("/var/lib/kubelet", ignore_errors=True)
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


IPT = (("iptables", "filter"), ("iptables", "nat"), ("iptables", "mangle"),
       ("ip6tables", "filter"), ("ip6tables", "nat"), ("ip6tables", "mangle"))


def kube_chains():
    """{(tool, table): set of KUBE-* chains} (the kubelet creates a few)."""
    out = {}
    for tool, table in IPT:
        r = run([tool, "-t", table, "-S"], check=False)
        out[(tool, table)] = {ln.split()[1] for ln in r.stdout.splitlines()
                              if ln.startswith("-N KUBE-")}
    return out


def remove_new_chains(before):
    """Delete the KUBE-* chains that were not there before, and the rules jumping to them."""
    for (tool, table), chains in kube_chains().items():
        new = chains - before.get((tool, table), set())
        if not new:
            continue
        rules = run([tool, "-t", table, "-S"], check=False).stdout.splitlines()
        for ln in rules:
            parts = ln.split()
            if parts and parts[0] == "-A" and "-j" in parts and \
                    parts[parts.index("-j") + 1] in new and parts[1] not in new:
                run([tool, "-t", table, "-D", *parts[1:]], check=False)
        for ch in new:
            run([tool, "-t", table, "-F", ch], check=False)
        for ch in new:
            run([tool, "-t", table, "-X", ch], check=False)


def pod_test(c: Cluster):
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "anna-demo"},
        "spec": {"hostNetwork": True, "restartPolicy": "Never",
                 "automountServiceAccountToken": False,
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
                     "hostNetwork": True, "automountServiceAccountToken": False,
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", default="localhost/cloudburst:dev")
    ap.add_argument("--image-tar", required=True)
    ap.add_argument("--pause-tar", required=True)
    ap.add_argument("--deployment", action="store_true")
    args = ap.parse_args()
    bins = find_binaries()
    if bins is None or not os.access(bins / "kubelet", os.X_OK):
        raise SystemExit("binaries not built: scripts/k8s/build.sh")
    c = Cluster(args)

    def on_signal(signum, frame):
        raise SystemExit(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    say(f"work dir {c.dir}; sysctls before: {c.sysctls}")
    try:
        c.start_containerd()
        c.import_images()
        t = time.monotonic()
        c.cp = ControlPlane(bins, controllers=True, kwok=False).start()
        say(f"control plane up at {c.cp.server} in {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        c.start_kubelet()

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
        print(c.kubectl("get", "nodes", "-o", "wide").stdout)
        pod_test(c)
        if args.deployment:
            deployment_test(c)
        say(f"REAL-CLUSTER TEST PASSED in {time.monotonic() - T0:.1f} s")
    finally:
        c.cleanup()


if __name__ == "__main__":
    main()
