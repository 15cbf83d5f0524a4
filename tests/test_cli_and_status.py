"""What the commands and the status say: honest columns and labels, errors in the words of the
command (and typed), help that states each default once, a quiet exit into a closed pipe,
`anna status ADDRESS` like `cloudburst status ADDRESS`, and a causal result that says why its
protocol produced it. Pure parts directly; the rest on one real LocalCluster (authenticated,
with metrics on) shared by the module.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import urllib.request

import pytest

import cloudburst
from cloudburst.futures import CausalStats, explain_protocol
from cloudburst.status import ClusterStatus, ExecutorNodeStatus, FunctionStatus, WorkerStatus, \
    format_status
from hydro_proto import cloudburst_pb2 as pb
from runtime.cli import BROKEN_PIPE_STATUS
from scheduler.dag import Dag, foreign_arguments
from scheduler.membership import CallRecord, ExecutorTable
from scheduler.stats import CallStats, WorkerGauge, render_prometheus
from waiting import poll_until

KEY = "ab" * 32          # a public key as an address carries it: 64 hex digits


class Ran:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run(module, *argv):
    """Run a command's `main` in this process (a Python start per command is slow on a busy
    machine); its exit status and what it printed."""
    if module == "cloudburst.cli":
        from cloudburst.cli import main
    else:
        from anna_core.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:          # argparse's usage errors
            code = e.code
    return Ran(code, out.getvalue(), err.getvalue())


# ---- pure -----------------------------------------------------------------------------------

def test_a_worker_counts_calls_placed_not_only_unfinished():
    t = ExecutorTable(heartbeat_timeout=5.0)
    t.heartbeat("w", "n0", "tcp://w", 0.0, now=0.0)
    for i in range(3):
        t.start_call(CallRecord(f"c{i}", "f", {"f": "w"}, "tcp://client", 10.0))
    t.start_call(CallRecord("c0#1", "f", {"f": "w"}, "tcp://client", 10.0), new_call=False)
    for cid in ("c0", "c1", "c2", "c0#1"):
        t.finish_call(cid)
    (view,) = t.live()
    assert (t.placed("w"), view.outstanding) == (3, 0)   # a further attempt is not a new call
    assert t.placed("unknown") == 0


def test_status_text_calls_are_calls_placed_and_unfinished_is_its_own_column():
    status = ClusterStatus(
        "tcp://s", "tcp://kvs",
        [WorkerStatus("n0.w0-x", "n0", 0.5, outstanding=1, restarts=0, placed=7)],
        [FunctionStatus("f", calls=5, errors=1, p50=0.001, p99=0.002, in_flight=2)], "",
        nodes=[ExecutorNodeStatus("n0", 1, 0.5, False, 0, 1, 1, 0, False)])
    lines = format_status(status).splitlines()
    header = next(l for l in lines if l.strip().startswith("worker"))
    row = next(l for l in lines if l.strip().startswith("n0.w0-x"))
    columns = dict(zip(header.split(), row.split()))
    assert columns["calls"] == "7" and columns["unfinished"] == "1", (header, row)
    fheader = next(l for l in lines if l.strip().startswith("name"))
    frow = next(l for l in lines if l.strip().startswith("f "))
    fcolumns = dict(zip(fheader.replace("p50 ms", "p50").replace("p99 ms", "p99").split(),
                        frow.split()))
    assert fcolumns["calls"] == "7" and fcolumns["running"] == "2", (fheader, frow)


def test_metrics_label_a_scheduler_by_its_endpoint_not_its_key():
    text = render_prometheus(CallStats(), [WorkerGauge("w", "n0", 0.0, 0)],
                             f"tcp://10.0.0.5:5000#k={KEY}")
    assert 'scheduler="tcp://10.0.0.5:5000"' in text
    assert KEY not in text


def test_arguments_for_a_function_outside_the_dag_are_named():
    dag = Dag("chain", ("increment", "square"), (("increment", "square"),))
    assert foreign_arguments(dag, ["increment"]) is None
    message = foreign_arguments(dag, ["increment", "cube"])
    assert "'cube'" in message and "'chain'" in message and "'square'" in message


def test_a_causal_result_says_why_its_protocol_produced_it():
    hb_opt = CausalStats.from_proto(pb.CausalStats(protocol=pb.OPT, requested=pb.HB))
    assert hb_opt.requested == "hb" and hb_opt.protocol == "opt"
    assert "opt's reads formed a causal snapshot" in hb_opt.why
    hb_con = CausalStats.from_proto(pb.CausalStats(protocol=pb.CON, requested=pb.HB, aborts=1))
    assert "aborted" in hb_con.why and "con finished" in hb_con.why
    ct = CausalStats.from_proto(pb.CausalStats(protocol=pb.CT, requested=pb.CT))
    assert (ct.requested, ct.why) == ("ct", "ct, as asked")
    assert explain_protocol("opt", "opt", 2) == "opt, as asked, after 2 aborted attempt(s)"


def _help_texts(main, prefix, commands):
    for argv in commands:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
        assert done.value.code == 0, argv
        yield f"{prefix} {' '.join(argv)}", out.getvalue()


def test_help_states_each_default_once():
    from anna_core.cli import main as anna
    from cloudburst.cli import main as cb
    texts = list(_help_texts(cb, "cloudburst", [[], ["local"], ["status"], ["logs"], ["demo"],
                                                ["keys"], ["k8s"], ["k8s", "deploy"],
                                                ["k8s", "status"], ["k8s", "scale"],
                                                ["k8s", "delete"]]))
    texts += list(_help_texts(anna, "anna", [[], ["local"], ["status"], ["backup"],
                                             ["restore"], ["demo"], ["keys"]]))
    for name, text in texts:
        assert "(default: None)" not in text, (name, text)
        assert not re.search(r"\(default:[^()]*(\([^()]*\))?[^()]*\)\s*\(default:", text), \
            (name, text)
    local = dict(texts)["cloudburst local"].replace("\n", " ")
    assert "(default: a temporary directory, removed)" in re.sub(r"\s+", " ", local)
    assert "(default: 3)" in local        # a default the help does not state is still shown


# ---- on a real cluster ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with cloudburst.LocalCluster(executors_per_node=1, metrics_port=0) as c:
        yield c


def _status_argv(cluster):
    return ["cloudburst.cli", "status", cluster.address, "--key-dir", cluster.key_dir,
            "--client", cluster.client_auth.identity.split(":", 1)[1]]


def test_status_counts_calls_placed_on_a_cluster(cluster):
    cb = cluster.client()
    cb.register(lambda lib, x: x + 1, "status_inc")
    assert cb.map("status_inc", range(3)) == [1, 2, 3]
    # the worker's report that its calls are done reaches the scheduler just after the results
    (worker,) = poll_until(lambda: [w for w in cb.status().workers if w.outstanding == 0], 10,
                           "the scheduler hearing that the calls are done")
    assert worker.placed >= 3
    shown = _run(*_status_argv(cluster))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = next(l for l in lines if l.strip().startswith("worker"))
    row = next(l for l in lines if l.strip().startswith(worker.worker_id))
    columns = dict(zip(header.split(), row.split()))
    assert int(columns["calls"]) == worker.placed and columns["unfinished"] == "0", shown.stdout


def test_metrics_scheduler_label_is_short_on_a_cluster(cluster):
    status = cluster.client().status()
    with urllib.request.urlopen(status.metrics_address + "/metrics", timeout=5) as r:
        text = r.read().decode()
    labels = set(re.findall(r'scheduler="([^"]*)"', text))
    assert labels == {cluster.address.split("#", 1)[0]}, labels
    assert not re.search(r"[0-9a-f]{64}", text)


def test_status_into_a_closed_pipe_exits_quietly(cluster, monkeypatch):
    read, write = os.pipe()
    os.close(read)               # the reader is gone before anything is written (`| head -0`)
    stream = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stream)
    from cloudburst.cli import main
    try:
        assert main(_status_argv(cluster)[1:]) == BROKEN_PIPE_STATUS
        sys.stdout.write("more")     # what the interpreter's flush at exit would do: no error
        sys.stdout.flush()
    finally:
        monkeypatch.undo()
        stream.close()


def test_command_errors_name_the_options_not_python(cluster):
    shown = _run("cloudburst.cli", "status", cluster.address)        # no --key-dir
    assert shown.returncode == 1
    assert "--key-dir" in shown.stderr and "AuthConfig" not in shown.stderr, shown.stderr
    assert "Traceback" not in shown.stderr
    routing = cluster.kvs.routing_address
    shown = _run("anna_core.cli", "status", "--routing", routing, "--timeout", "2")
    assert shown.returncode == 1
    assert "--key-dir" in shown.stderr and "AuthConfig" not in shown.stderr, shown.stderr


def test_anna_status_takes_the_address_as_an_argument_or_a_flag(cluster):
    routing = cluster.kvs.routing_address
    keys = ["--key-dir", cluster.key_dir]
    for argv in (["status", routing, *keys], ["status", "--routing", routing, *keys]):
        shown = _run("anna_core.cli", *argv)
        # this cluster runs no monitor: the command got as far as asking the KVS
        assert shown.returncode == 1 and "no monitor has published" in shown.stderr, \
            (argv, shown.stderr)
    missing = _run("anna_core.cli", "status")
    assert missing.returncode == 2 and "give the routing address" in missing.stderr


def test_arguments_for_a_function_outside_the_dag_get_a_typed_error(cluster):
    cb = cluster.client()
    cb.register(lambda lib, x: x + 1, "args_inc")
    cb.register(lambda lib, x: x * x, "args_square")
    cb.register_dag("args_chain", ["args_inc", "args_square"], [("args_inc", "args_square")])
    future = cb.call_dag("args_chain", {"args_inc": [1], "args_cube": [2]})
    with pytest.raises(cloudburst.InvalidArguments) as e:
        future.get(timeout=10)
    assert "'args_cube'" in str(e.value) and "'args_chain'" in str(e.value)
    assert isinstance(e.value, TypeError)


def test_an_hb_call_says_which_protocol_produced_its_result_and_why(cluster):
    cb = cluster.client()
    cb.put("why/x", 1, consistency="causal")
    cb.register(lambda lib, x: x + 1, "why_inc")
    future = cb.call("why_inc", cloudburst.Reference("why/x"), consistency="causal")
    assert future.get(timeout=10) == 2
    stats = future.causal
    assert stats.requested == "hb" and stats.protocol in ("opt", "con")
    assert stats.why == explain_protocol("hb", stats.protocol, stats.aborts)
    assert "hb runs the call optimistically" in stats.why
