"""The pure pieces of benchmarks/mtcc.py's throughput mode: the preset, the ratios, and the
CPU accounting of the process tree."""
from benchmarks import mtcc
from waiting import poll_until


def test_throughput_preset_sets_the_workload_unless_overridden():
    a = mtcc.parse_args(["--throughput"])
    assert (a.clients, a.nodes, a.keys, a.zipfs, a.topologies, a.duration) == \
        (8, 2, 30, [1.5], ["linear"], 20.0)
    b = mtcc.parse_args(["--throughput", "--zipfs", "1.0", "--duration", "5", "--keys=40"])
    assert (b.zipfs, b.duration, b.keys, b.clients) == ([1.0], 5.0, 40, 8)


def test_latency_runs_have_no_duration():
    assert mtcc.parse_args([]).duration is None


def test_throughput_ratios_over_lww():
    cells = {"linear": {"1.5": {"lww": {"dags_per_s": 100.0}, "hb": {"dags_per_s": 61.0},
                                "opt": {"dags_per_s": 0.0}}}}
    assert mtcc.throughput_ratios(cells) == {
        "linear": {"1.5": {"lww": 1.0, "hb": 0.61, "opt": None}}}
    assert mtcc.throughput_ratios({"v": {"1": {"hb": {"dags_per_s": 3.0}}}}) == \
        {"v": {"1": {"hb": None}}}


def test_cpu_of_the_process_tree_counts_a_busy_child():
    """`tree_cpu_seconds` sums this process and every process below it: a child burning CPU
    shows up in it (the per-DAG CPU figure of every cell depends on that)."""
    import subprocess
    import sys
    before = mtcc.tree_cpu_seconds()
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\n"
                              "input()"], stdin=subprocess.PIPE)
    try:
        poll_until(lambda: mtcc.tree_cpu_seconds() - before >= 0.3, timeout=20,
                   what="the child's CPU in the process tree's")
    finally:
        child.communicate(b"\n", timeout=10)


def test_cpu_by_role_names_the_cluster_process_kinds():
    """`tree_cpu_by_role` splits the tree by what each process is: this one is "clients", a
    `-m scheduler` child is "scheduler", any other child "other"."""
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "-m",
                              "scheduler"], stdin=subprocess.PIPE)
    try:
        poll_until(lambda: "scheduler" in mtcc.tree_cpu_by_role(), timeout=20,
                   what="the child listed as a scheduler")
        roles = mtcc.tree_cpu_by_role()
        assert roles["clients"] > 0 and set(roles) <= {"clients", "scheduler", "other"}
    finally:
        child.communicate(b"", timeout=10)


def test_root_runs_the_cluster_from_another_checkout(tmp_path, monkeypatch):
    import os
    import sys
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    args = mtcc.parse_args(["--root", str(tmp_path), "--quick"])
    assert args.root == str(tmp_path) and sys.path[0] == str(tmp_path)
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]


def test_root_children_import_the_other_checkouts_code(tmp_path, monkeypatch):
    # the cluster's processes are `python -m` children: their working directory comes first
    # on sys.path, so a package present in both checkouts must come from --root's
    import os
    import subprocess
    import sys
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.chdir(mtcc.ROOT)
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "__init__.py").write_text("")
    (tmp_path / "scheduler" / "where.py").write_text("print(__file__)\n")
    args = mtcc.parse_args(["--root", str(tmp_path), "--quick", "--json", "out.json"])
    assert args.json == os.path.join(mtcc.ROOT, "out.json")    # as given, before moving
    mtcc.enter_root(args)
    got = subprocess.run([sys.executable, "-m", "scheduler.where"], capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == str(tmp_path / "scheduler" / "where.py")
