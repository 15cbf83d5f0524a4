"""The reports' travel format, the latency recorder and the status text (pure, no processes)."""
import json
import math

from hypothesis import given, settings, strategies as st

from anna_core.autoscale.reports import (LatencyRecorder, MAX_REPORT_BYTES, bucket_of,
                                         client_reports_key, decode_client_reports,
                                         decode_node_reports, encode_client_report,
                                         encode_node_report, expired_buckets,
                                         worker_reports_key)
from anna_core.autoscale.status import build_status, format_status, memory_get_share
from anna_core.autoscale.summaries import ClientReport, summarize
from anna_core.client_reports import next_report_time


def worker(thread=0, gets=10, hottest=(("k", 7),)):
    return {"node_id": "ignored", "tier": "memory", "thread": thread, "requests": gets,
            "gets": gets, "puts": 0, "deletes": 0, "occupancy": 0.5, "stored_bytes": 100,
            "capacity_bytes": 1000, "key_accesses": gets, "accessed_keys": 2,
            "access_square_sum": 58.0,
            "hottest": [{"key": k, "accesses": a, "size": 3} for k, a in hottest],
            "coldest": [], "tracked": []}


def test_a_node_report_round_trips_and_counts_once():
    blob = encode_node_report("memory-0", "memory", 4, 1000.0, [worker(0), worker(1)])
    seen = set()
    reports, raw, problems = decode_node_reports([blob], seen)
    assert problems == [] and len(reports) == 2
    assert {r.thread for r in reports} == {0, 1}
    assert all(r.node_id == "memory-0" and r.tier == "memory" for r in reports)
    assert reports[0].hottest[0].key == "k" and reports[0].hottest[0].accesses == 7
    assert reports[0].capacity_bytes == 1000 and raw[0]["gets"] == 10
    again, _, _ = decode_node_reports([blob], seen)
    assert again == [], "a report read from two buckets counts once"


def test_metadata_keys_never_reach_the_policy():
    blob = encode_node_report("memory-0", "memory", 1, 0.0,
                              [worker(hottest=(("__anna__/stats/workers/9", 500), ("user", 3)))])
    reports, _, _ = decode_node_reports([blob])
    assert [k.key for k in reports[0].hottest] == ["user"]


def test_bad_elements_are_skipped_and_named():
    good = encode_client_report(ClientReport("c", 5, 0.001, 0.002), 1, 0.0)
    elements = [b"not json", json.dumps({"kind": "client"}).encode(),
                b"x" * (MAX_REPORT_BYTES + 1), good,
                json.dumps({"kind": "client", "reporter": "d", "seq": 1,
                            "requests": "many"}).encode()]
    reports, problems = decode_client_reports(elements)
    assert [r.client_id for r in reports] == ["c"]
    assert len(problems) == 4
    assert any("not JSON" in p for p in problems) and any("bytes" in p for p in problems)


def test_buckets_and_schedules():
    assert bucket_of(10.0, 1.5) == 6 and bucket_of(8.99, 1.5) == 5
    assert worker_reports_key(6) != client_reports_key(6)
    assert expired_buckets(10, None) == list(range(-7, 9))
    assert expired_buckets(10, 7) == [8]
    assert expired_buckets(10, 8) == []
    t = next_report_time(10.0, 1.5)   # a quarter into a bucket, not before now
    assert t >= 10.0 and math.isclose((t / 1.5) % 1, 0.25)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1,
                max_size=5000))
def test_the_recorder_is_bounded_and_its_figures_are_of_the_samples(latencies):
    rec = LatencyRecorder(max_samples=100, max_keys=5)
    for i, x in enumerate(latencies):
        rec.record(x, f"key-{i % 9}")
    assert len(rec._samples) <= 100 and len(rec._keys) <= 5
    report = rec.take("c")
    assert report.requests == len(latencies)
    assert math.isclose(report.mean_latency, sum(latencies) / len(latencies), rel_tol=1e-9,
                        abs_tol=1e-12)
    assert min(latencies) <= report.p99_latency <= max(latencies)
    assert rec.take("c") is None, "take() starts a new period"


def test_the_status_shows_what_the_monitor_saw():
    blob = encode_node_report("memory-0", "memory", 1, 0.0, [worker(gets=30)])
    disk = encode_node_report("disk-0", "disk", 1, 0.0,
                              [dict(worker(gets=10), tier="disk")])
    reports, raw, _ = decode_node_reports([blob, disk])
    summary = summarize(reports, [ClientReport("c", 10, 0.004, 0.009)], period=1.5)
    assert memory_get_share(raw) == 0.75
    status = build_status(summary, wall=100.0, bucket=66, slo=0.003, statistic="mean",
                          raw_workers=raw, actions=["add 1 memory node(s): because"])
    json.dumps(status)   # JSON-ready
    assert status["latency"]["over_slo"] is True
    text = format_status(status, now_wall=101.0)
    assert "VIOLATED" in text and "75%" in text and "add 1 memory node(s)" in text
    assert "1.0 s old" in text


def test_the_client_s_reports_and_the_node_s_reporter_make_no_import_cycle():
    """The client imports its latency reports (`client_reports`), which import no client;
    the node's reporter (`node_reporting`) imports the client, which never imports it."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parent.parent / "anna_core"

    def imported(name):
        out = set()
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.ImportFrom):
                out.add(("." * node.level) + (node.module or ""))
            elif isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
        return out

    assert ".client_reports" in imported("client.py")
    assert not {".node_reporting", "anna_core.node_reporting"} & imported("client.py")
    assert not {".client", "anna_core.client", ".node_reporting"} & \
        imported("client_reports.py")
    assert ".client" in imported("node_reporting.py")
