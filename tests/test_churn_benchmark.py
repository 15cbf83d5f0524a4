"""The churn benchmark (`benchmarks/churn.py`): its judges on hand-made histories, its options,
and a few seconds of the real scenario (a cluster, a stalled executor node)
whose summary has the promised shape and whose LWW control the checker catches."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import churn, churn_judge
from benchmarks.churn_check import check_by_segment, lost_writes, replica_gaps, segment_of
from benchmarks.tcc_workload import transaction

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "churn/r/ct/0/0"


def rec(vc, key=KEY):
    return {"key": key, "vc": vc, "deps": {}}


def test_a_write_is_kept_when_present_or_superseded_and_lost_otherwise():
    base = {f"init/{KEY}": 1}
    a = rec({**base, "tx/a": 1})
    b = rec({**base, "tx/b": 1})                   # concurrent with a
    c = rec({**base, "tx/a": 1, "tx/c": 1})        # read a, then wrote: includes a
    acked = [("ta", a), ("tb", b), ("tc", c)]
    assert lost_writes(acked, {KEY: [c, b]})["lost"] == 0
    # the system kept only c: b (which c's writer never read) is lost, a is superseded
    out = lost_writes(acked, {KEY: [c]})
    assert (out["acknowledged"], out["lost"], out["lost_txids"]) == (3, 1, ["tb"])
    # a key with nothing stored loses every write
    assert lost_writes(acked, {})["lost"] == 3


def test_replica_gaps_count_writes_some_replica_lacks():
    a = rec({"tx/a": 1})
    both = replica_gaps([("ta", a)], {KEY: [[a], [a]]})
    one = replica_gaps([("ta", a)], {KEY: [[a], []]})
    assert both["not_on_every_replica"] == 0 and one["not_on_every_replica"] == 1


def test_the_checker_runs_per_segment_and_finds_a_non_repeatable_read():
    first, second = {"init/k": 1}, {"init/k": 1, "tx/w": 1}
    result = {"obs": [{"key": KEY, "vc": first, "deps": {}},
                      {"key": KEY, "vc": second, "deps": {}}]}
    out = check_by_segment([transaction(result, "t1")])
    assert out["by_kind"] == {"non_repeatable_read": 1}
    across = {"obs": [{"key": KEY, "vc": first, "deps": {}},
                      {"key": "churn/r/ct/1/0", "vc": first, "deps": {}}]}
    with pytest.raises(ValueError, match="spans keyspace segments"):
        check_by_segment([transaction(across, "t2")])


def test_lost_writes_are_blamed_on_the_fault_around_their_acknowledgement():
    faults = [{"fault": "stall", "t": 10.0, "end": 14.0}, {"fault": "kill-kvs", "t": 30.0}]
    assert churn_judge.blame([9.5, 18.0, 25.0, 31.0], faults) == {
        "1:stall": 2, "no fault": 1, "2:kill-kvs": 1}


def test_every_option_is_documented_and_bad_ones_are_refused():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "churn.py"),
                          "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for option in ("--dags", "--modes", "--faults", "--quick", "--stall", "--replicas",
                   "--json", "--mode-timeout", "--settle", "--abandon-after"):
        assert option in out.stdout
    with pytest.raises(SystemExit):
        churn.parse_args(["--faults", "meteor"])
    with pytest.raises(SystemExit):
        churn.parse_args(["--stall", "1", "--heartbeat-timeout", "1.5"])


@pytest.mark.slow     # over 10 s: the slow tier runs it (scripts/test_slow.sh)
def test_a_short_churn_run_reports_its_figures_and_the_lww_control_fails_tcc(tmp_path, capsys):
    path = tmp_path / "churn.json"
    status = churn.main(["--modes", "lww,ct", "--lww-dags", "120", "--dags", "40",
                         "--keys", "6", "--segment-dags", "200", "--faults", "stall",
                         "--heartbeat-timeout", "1.0", "--stall", "1.5", "--slow", "0.6",
                         "--progress", "1", "--settle", "10", "--mode-timeout", "60",
                         "--json", str(path)])
    summary = json.loads(path.read_text())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == summary
    assert status == (0 if all(v.startswith("ok") for v in summary["verdicts"].values())
                      else 1)
    for mode, dags in (("lww", 120), ("ct", 40)):
        m = summary["modes"][mode]
        assert m["dags"] >= dags and 0 < m["acknowledged"] <= m["dags"]
        assert m["acknowledged_writes"] == m["acknowledged"]   # every DAG's sink writes
        assert 0 <= m["lost_writes"]["lost"] <= m["acknowledged_writes"]
        assert set(m["violations"]) >= {"total", "by_kind", "transactions"}
        assert m["throughput_dags_per_s"] > 0 and m["latency"]["n"] == m["acknowledged"]
        faults = {f["fault"]: f for f in m["faults"]}
        assert set(faults) == {"stall"}
        assert not any("error" in f or "skipped" in f for f in m["faults"]), m["faults"]
        assert faults["stall"]["pid"] > 0 and faults["stall"]["slow_dags"] == 6
        assert m["replicas"]["keys_with_fewer_replicas"] == 0
    lww = summary["modes"]["lww"]
    assert lww["violations"]["total"] > 0, "the checker must catch the LWW control"
    assert summary["verdicts"]["lww"].startswith("ok")
    assert summary["modes"]["ct"]["result_protocols"] == {
        "ct": summary["modes"]["ct"]["acknowledged"]}
    table = churn_judge.markdown(summary).splitlines()       # what `--report` prints
    assert len(table) == 4 and table[2].startswith("| LWW | ") and table[3].startswith("| CT | ")


def test_writers_leave_a_segment_whose_calls_time_out_and_stay_on_a_stalled_one():
    args = churn.parse_args(["--dags", "1000", "--segment-dags", "100", "--abandon-after", "2",
                             "--faults", "none"])
    run = churn.Run("ct", args, "r", args.dags)
    run.faults_done.set()
    assert [run.segment(run.next_index()) for _ in range(150)][-1] == 1
    timeout = lambda seg: {"error": ("Timeout", "t"), "segment": seg, "dag": churn.DAG}
    run.record(timeout(1), "a", None)
    assert run.segment(run.next_index()) == 1          # one timeout: stay
    run.record(timeout(1), "b", None)
    assert run.segment(run.next_index()) == 2 and run.abandoned == [1]
    run.pin(1)                                           # a stall pins, for 100 DAGs at most
    assert {run.segment(run.next_index()) for _ in range(100)} == {1}
    assert run.segment(run.next_index()) == 3           # pinned DAGs count in the index
    for _ in range(1000):
        run.next_index()
    assert run.next_index() is None                      # --dags issued, faults done


def test_a_mode_run_twice_writes_its_own_keys_and_keeps_its_own_figures():
    # `--modes hb,hb` once ran its second HB run on the keys the first had written and
    # deleted: the deleted versions lived on in the node caches and in other keys'
    # dependencies, so the checker (which sees one run's history) reported reads of a key's
    # new first version next to versions depending on its deleted ones; and the second run's
    # summary replaced the first's
    args = churn.parse_args(["--modes", "hb,hb,opt,hb", "--faults", "none", "--dags", "40"])
    names = churn.mode_names(args.modes)
    assert names == ["hb", "hb-2", "opt", "hb-3"]
    runs = [churn.Run(m, args, "r", args.dags, n) for m, n in zip(args.modes, names)]
    keys = [{k for seg in range(run.first_segments + 1) for k in run.keys(seg)} for run in runs]
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            assert not keys[i] & keys[j], (names[i], names[j])
    assert [r.call_kw["protocol"] for r in runs] == ["hb", "hb", "opt", "hb"]
    assert {segment_of(k).split("/")[2] for k in keys[1]} == {"hb-2"}   # the checker's groups
