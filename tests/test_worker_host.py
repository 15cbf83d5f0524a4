"""A worker host runs an executor node's workers where the node's keys are not (on Kubernetes,
a container of the executor pod without /keys): executor/workerhost.py, its pure decisions
(executor/workerhost_core.py), the node's view of it (executor/workerhost_view.py) and the
node's backend (executor/backends.py).

Pure checks first (hypothesis over request and exit interleavings), then real processes: an
authenticated `LocalCluster` for Anna and the scheduler, one worker host with only the
function role's keys, and an executor node that has its workers run by that host:
- calls run in workers whose parent is the host, not the node;
- a worker killed is reported by the host and restarted by the node; calls run again;
- the host admits only the cluster key: a function key (what every worker holds) or a stranger
  gets no answer and starts nothing;
- the host refuses to start with the cluster's secret key in its key directory.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import zmq
from hypothesis import given, settings, strategies as st

from hydro_proto import workerhost_pb2 as wh
from executor.workerhost_core import HostCore, Kill, Spawn
from executor.workerhost_view import HostView
from runtime.auth import CLUSTER, FUNCTION, AuthConfig, KeyPair, make_client, parse_address
from waiting import poll_until

START, SIGNAL, STOP_ALL, HELLO = (wh.HostRequest.START, wh.HostRequest.SIGNAL,
                                  wh.HostRequest.STOP_ALL, wh.HostRequest.HELLO)
TERM, KILL = int(signal.SIGTERM), int(signal.SIGKILL)


def req(op, session="s1", name="", generation=0, signum=0, grace=0.0, config="{}"):
    return wh.HostRequest(op=op, session=session, name=name, generation=generation,
                          signum=signum, grace=grace, worker_config=config)


# ---- the host's decisions (pure) -------------------------------------------------------------

def test_a_start_spawns_once_and_a_restart_waits_for_the_old_process():
    core = HostCore()
    assert core.request(req(START, name="w0", generation=1), 0) == [Spawn("w0", 1, "{}")]
    core.spawned("w0", 1, 100)
    assert core.request(req(START, name="w0", generation=1), 0) == []      # a duplicate
    # the node restarts w0 while the host still sees it run: killed first, started after
    assert core.request(req(START, name="w0", generation=2), 1) == [Kill(100, KILL)]
    assert core.exited(100, -9) == [Spawn("w0", 2, "{}")]
    core.spawned("w0", 2, 101)
    (p,) = core.report("h").processes
    assert (p.generation, p.pid, p.exited) == (2, 101, False)
    assert core.request(req(START, name="w0", generation=1), 2) == []      # late: ignored


def test_signals_go_only_to_the_generation_named_and_only_allowed_ones():
    core = HostCore()
    core.request(req(START, name="w0", generation=1), 0)
    core.spawned("w0", 1, 100)
    assert core.request(req(SIGNAL, name="w0", generation=1, signum=KILL), 0) == [Kill(100, KILL)]
    core.exited(100, -9)
    core.request(req(START, name="w0", generation=2), 0)
    core.spawned("w0", 2, 101)
    # a late SIGKILL meant for start 1 never hits start 2
    assert core.request(req(SIGNAL, name="w0", generation=1, signum=KILL), 0) == []
    assert core.request(req(SIGNAL, name="w0", generation=2, signum=int(signal.SIGSTOP)), 0) == []
    assert "only SIGTERM" in core.report("h").refused


def test_a_new_session_kills_every_worker_of_the_old_one():
    core = HostCore()
    for i, pid in ((0, 100), (1, 101)):
        core.request(req(START, name=f"w{i}", generation=1), 0)
        core.spawned(f"w{i}", 1, pid)
    actions = core.request(req(HELLO, session="s2"), 1)
    assert sorted(actions) == [Kill(100, KILL), Kill(101, KILL)]
    assert not core.report("h").processes and core.report("h").session == "s2"
    assert core.exited(100, -9) == [] and core.running_pids() == [101]


def test_stop_all_terminates_then_kills_after_the_grace():
    core = HostCore()
    core.request(req(START, name="w0", generation=1), 0)
    core.spawned("w0", 1, 100)
    assert core.request(req(STOP_ALL, grace=2.0), 10) == [Kill(100, TERM)]
    assert core.tick(11) == []
    assert core.tick(12) == [Kill(100, KILL)]
    assert core.tick(13) == []                                   # once


def test_starts_are_bounded_and_names_checked():
    core = HostCore(max_workers=2)
    assert core.request(req(START, name="a", generation=1), 0)
    assert core.request(req(START, name="b", generation=1), 0)
    assert core.request(req(START, name="c", generation=1), 0) == []
    assert "at most 2 workers" in core.report("h").refused
    assert core.request(req(START, name="../x y", generation=1), 0) == []
    assert core.request(req(START, name="d", generation=1, config="x" * (65 << 10)), 0) == []


ops = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 2)),
    st.tuples(st.just("signal"), st.integers(0, 2), st.sampled_from([TERM, KILL]),
              st.integers(-1, 0)),
    st.tuples(st.just("exit"), st.integers(0, 5)),
    st.tuples(st.just("ready"), st.integers(0, 5)),
    st.tuples(st.just("stop"),),
    st.tuples(st.just("session"),),
    st.tuples(st.just("tick"),),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(ops, max_size=40))
def test_host_interleavings_keep_one_process_per_name_and_signal_only_its_own(script):
    """Whatever the node asks and whenever processes exit: the host signals only processes it
    started that still run, runs at most one process per name of the current session, and
    its report agrees with the processes that run."""
    core = HostCore(max_workers=8)
    live = {}                # pid -> name: processes started and not exited
    next_pid, session, gens, now = [100], ["s0"], {}, [0.0]

    def carry(actions):
        for a in actions:
            if isinstance(a, Spawn):
                pid = next_pid[0]
                next_pid[0] += 1
                core.spawned(a.name, a.generation, pid)
                live[pid] = a.name
            else:
                assert a.pid in live, f"signalled {a.pid}, not a live child"

    for op in script:
        now[0] += 0.5
        if op[0] == "start":
            name = f"w{op[1]}"
            gens[name] = gens.get(name, 0) + 1
            carry(core.request(req(START, session=session[0], name=name,
                                   generation=gens[name]), now[0]))
        elif op[0] == "signal":
            name = f"w{op[1]}"
            carry(core.request(req(SIGNAL, session=session[0], name=name, signum=op[2],
                                   generation=max(0, gens.get(name, 0) + op[3])), now[0]))
        elif op[0] == "exit" and live:
            pid = sorted(live)[op[1] % len(live)]
            del live[pid]
            carry(core.exited(pid, -9))
        elif op[0] == "ready" and live:
            core.ready(sorted(live)[op[1] % len(live)], "{}")
        elif op[0] == "stop":
            carry(core.request(req(STOP_ALL, session=session[0], grace=1.0), now[0]))
        elif op[0] == "session":
            session[0] = f"s{len(gens) + int(now[0] * 2)}"
            gens.clear()
            carry(core.request(req(HELLO, session=session[0]), now[0]))
        else:
            carry(core.tick(now[0]))
        report = core.report("h")
        running = [p for p in report.processes if p.pid and not p.exited]
        assert all(live.get(p.pid) == p.name for p in running)
        assert len({p.name for p in running}) == len(running)
        assert set(core.running_pids()) == set(live)


# ---- the node's view of the host (pure) ------------------------------------------------------

def report(session="s", host="h1", **procs):
    r = wh.HostReport(session=session, host=host)
    for name, (gen, pid, ready, exited, code) in procs.items():
        r.processes.add(name=name, generation=gen, pid=pid, ready=ready, exited=exited,
                        exit_code=code)
    return r


def test_the_view_follows_reports_and_ignores_stale_and_foreign_ones():
    v = HostView("s", timeout=5)
    assert v.want("w", 0) == 1
    assert v.state("w", 1).running and not v.state("w", 1).ready
    v.apply(report(w=(1, 10, True, False, 0)), 1)
    assert v.state("w", 1).ready and v.state("w", 1).pid == 10
    v.apply(report(w=(1, 10, True, True, -9)), 2)
    assert v.state("w", 2).exit_code == -9 and not v.state("w", 2).running
    assert v.want("w", 3) == 2
    v.apply(report(w=(1, 10, True, True, -9)), 3)             # the old start's exit, again
    assert v.state("w", 3).running
    v.apply(report(session="other", w=(2, 11, True, True, 1)), 3)
    assert v.state("w", 3).running


def test_a_silent_slow_or_restarted_host_counts_as_exited_workers():
    v = HostView("s", timeout=5)
    v.want("w", 0)
    assert not v.state("w", 6).running and "did not start it" in v.state("w", 6).reason
    v.want("w", 6)
    v.apply(report(w=(2, 10, True, False, 0)), 7)
    assert v.state("w", 11).running
    assert "silent" in v.state("w", 13).reason
    v.apply(report(w=(2, 10, True, False, 0)), 13)
    assert v.state("w", 13).running
    v.apply(report(host="h2"), 14)                             # the host restarted
    assert v.state("w", 14).exit_code == -1 and "restarted" in v.state("w", 14).reason


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans(), st.booleans()), max_size=20))
def test_reports_of_older_starts_never_end_the_current_one(reports):
    v = HostView("s", timeout=100)
    for _ in range(4):
        v.want("w", 0)
    for gen, ready, exited in reports:
        if gen < 4:
            v.apply(report(w=(gen, 10 + gen, ready, exited, -9)), 1)
    assert v.state("w", 1).running


# ---- real processes --------------------------------------------------------------------------

def function_keys(key_dir, into):
    """A worker host's key directory: the function pair and the cluster's public key."""
    os.makedirs(into, mode=0o700)
    for name in (FUNCTION + ".key", FUNCTION + ".key_secret", CLUSTER + ".key"):
        shutil.copy(os.path.join(key_dir, name), os.path.join(into, name))
    return into


def start_host(key_dir, log_dir, port=0):
    from executor.config import WorkerHostConfig
    from runtime.process import ManagedProcess
    config = WorkerHostConfig(key_dir=key_dir, log_dir=log_dir, log_level="info",
                              report_period=0.2, port=port)
    p = ManagedProcess("workerhost", [sys.executable, "-m", "executor.workerhost", "--config",
                                      config.to_json()], log_dir).spawn()
    p.wait_ready(30)
    return p


def where_am_i(lib, _):
    import os
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().replace(b"\0", b" ").decode()
    return {"pid": os.getpid(), "parent": parent}


@pytest.fixture(scope="module")
def hosted(tmp_path_factory):
    import cloudburst
    from executor.config import NodeConfig
    from runtime.process import ManagedProcess, stop_all
    d = tmp_path_factory.mktemp("hosted")
    with cloudburst.LocalCluster(executor_nodes=1, executors_per_node=1) as c:
        host = start_host(function_keys(c.key_dir, str(d / "fkeys")), str(d))
        hosts = [host]
        config = NodeConfig(node_id="hosted", kvs_address=c.kvs.routing_address,
                            scheduler_addresses=c.scheduler_addresses, workers=2,
                            heartbeat_period=0.2, log_dir=str(d), key_dir=c.key_dir,
                            worker_host=parse_address(host.info["address"])[0],
                            worker_host_timeout=3.0, log_level="info")
        node = ManagedProcess("hosted", [sys.executable, "-m", "executor", "--config",
                                         config.to_json()], str(d)).spawn()
        try:
            node.wait_ready(60)
            c.remove_executor_node("node0")      # every call now goes to the hosted node
            client = c.client()
            client.register(where_am_i, "where")
            yield c, client, hosts, node
        finally:
            stop_all([node] + hosts, 5)


def call_until(client, predicate, what, timeout=30):
    def attempt():
        try:
            out = client.call("where", 0).get(timeout=5)
        except Exception:       # noqa: BLE001 - calls on the removed node or a dead worker
            return None
        return out if predicate(out) else None
    return poll_until(attempt, timeout, what)


def test_calls_run_in_workers_the_host_started(hosted):
    c, client, (host,), node = hosted
    out = call_until(client, lambda o: True, "a call to run")
    assert "executor.workerhost" in out["parent"], out
    # every worker the node announced is a child of the host, none of the node
    assert len(node.info["workers"]) == 2
    for w in node.info["workers"]:
        with open(f"/proc/{w['pid']}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == host.pid, w


def test_a_killed_worker_is_restarted_through_the_host(hosted):
    c, client, (host,), node = hosted
    first = call_until(client, lambda o: True, "a call to run")
    os.kill(first["pid"], signal.SIGKILL)
    # the host reports the exit, the node restarts the worker (same id) through the host
    again = call_until(client, lambda o: o["pid"] != first["pid"] and
                       "executor.workerhost" in o["parent"], "calls on a restarted worker")
    assert again["pid"] != first["pid"]
    poll_until(lambda: "is back (restart 1)" in node.log_tail(400), 20,
               "the node logging the restart")


def test_a_restarted_host_gets_its_workers_back(hosted):
    """The host dies (on Kubernetes, its container restarts): its workers die with it, and
    the node, hearing a new host run on the same address, starts them there again."""
    c, client, hosts, node = hosted
    old = hosts[-1]
    port = int(parse_address(old.info["address"])[0].rsplit(":", 1)[1])
    os.kill(old.pid, signal.SIGKILL)
    old.proc.wait(10)
    hosts.append(start_host(old_key_dir(old), os.path.dirname(old.log_path), port))
    new = hosts[-1]
    call_until(client, lambda o: _parent_pid(o["pid"]) == new.pid,
               "calls on workers of the new host", 40)
    # both workers came back (one was restarted once before, by the previous test)
    poll_until(lambda: node.log_tail(400).count(" is back (restart ") >= 3, 20,
               "the node restarting both workers on the new host")


def old_key_dir(p):
    config = json.loads(p.argv[p.argv.index("--config") + 1])
    return config["key_dir"]


def _parent_pid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def ask(address, credentials, server_key, request, wait):
    """Send one request to a worker host; its report, or None if none came in `wait` s."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if credentials is not None:
        make_client(s, credentials, server_key)
    s.connect(address)
    try:
        s.send(request.SerializeToString())
        if s.poll(int(wait * 1000)):
            return wh.HostReport.FromString(s.recv())
        return None
    finally:
        s.close(0)
        ctx.term()


def test_the_host_obeys_only_the_cluster_key(tmp_path):
    from runtime.auth import function_credentials, write_keys
    key_dir = str(tmp_path / "keys")
    write_keys(key_dir, ["alice"])
    host = start_host(function_keys(key_dir, str(tmp_path / "fkeys")), str(tmp_path))
    try:
        endpoint, server_key = parse_address(host.info["address"])
        assert server_key == KeyPair.load(os.path.join(key_dir, "function.key")).public
        function = function_credentials(server_key, KeyPair.load(
            os.path.join(key_dir, "function.key_secret")))
        stranger = function_credentials(server_key, KeyPair.generate())
        client = AuthConfig(key_dir, "client:alice").load()
        start = req(START, session="intruder", name="w0", generation=1,
                    config=json.dumps({"worker_id": "x", "node_id": "n", "kvs_address": "",
                                       "cache_address": ""}))
        for creds in (function, stranger, client):
            assert ask(endpoint, creds, server_key, start, 0.7) is None
        assert ask(endpoint, None, None, start, 0.7) is None          # plain: no handshake
        poll_until(lambda: "refused a connection" in host.log_tail(100), 10,
                   "the host logging the refusals")
        # the cluster key is answered, and the intruders' start never happened
        cluster = AuthConfig(key_dir).load()
        r = ask(endpoint, cluster, server_key, req(HELLO, session="node"), 10)
        assert r is not None and r.session == "node" and not r.processes
        assert "started w0" not in host.log_tail(200)
    finally:
        host.stop(5)


def test_the_host_refuses_the_cluster_secret(tmp_path):
    from executor.config import WorkerHostConfig
    from runtime.auth import write_keys
    key_dir = str(tmp_path / "keys")
    write_keys(key_dir)
    out = subprocess.run([sys.executable, "-m", "executor.workerhost", "--config",
                          WorkerHostConfig(key_dir=key_dir).to_json()], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    assert "cluster.key_secret is in the worker host's key directory" in out.stderr
