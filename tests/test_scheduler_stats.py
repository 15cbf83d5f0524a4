"""The scheduler's call statistics (pure) and their Prometheus rendering, parsed by the
Prometheus client's own parser."""
import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from scheduler.stats import BUCKETS, CallStats, WorkerGauge, render_prometheus

events = st.lists(st.tuples(st.sampled_from(["f", "g", "dag"]),
                            st.floats(min_value=0, max_value=100), st.booleans()),
                  max_size=60)


@settings(max_examples=100, deadline=None)
@given(events)
def test_counts_latencies_and_histograms_agree(calls):
    stats = CallStats()
    for i, (name, latency, ok) in enumerate(calls):
        stats.started(str(i), name, 0.0)
        stats.finished(str(i), ok, latency)
        stats.finished(str(i), not ok, 2000.0)          # a second report is ignored
    for name, s in stats.names().items():
        mine = [(lat, ok) for n, lat, ok in calls if n == name]
        assert s.calls == len(mine) and s.errors == sum(1 for _, ok in mine if not ok)
        assert s.latency_sum == pytest.approx(sum(lat for lat, _ in mine), abs=1e-6)
        for bound, count in zip(BUCKETS, s.buckets):
            assert count == sum(1 for lat, _ in mine if lat <= bound)
    for summary in stats.summaries():
        mine = sorted(lat for n, lat, _ in calls if n == summary.name)
        assert summary.p50 == pytest.approx(mine[len(mine) // 2], abs=1e-6)
        assert summary.p50 <= summary.p99 == pytest.approx(mine[min(len(mine) - 1,
                                                                     int(0.99 * len(mine)))], abs=1e-6)


def test_memory_is_bounded_and_old_calls_expire():
    stats = CallStats(max_pending=3, recent=2)
    for i in range(5):
        stats.started(str(i), "f", float(i))
    assert sum(stats.in_flight().values()) == 3 and stats.forgotten == 2
    assert stats.expire(now=10.0, horizon=6.5) == 2      # the calls started at 2 and 3, not 4
    for i, latency in enumerate([5.0, 1.0, 2.0]):
        stats.started(f"x{i}", "g", 0.0)
        stats.finished(f"x{i}", True, latency)
    assert list(stats.names()["g"].recent) == [1.0, 2.0]
    assert stats.finished("never-started", True, 1.0) is None and stats.names()["g"].calls == 3


def test_prometheus_text_parses_and_holds_the_numbers():
    stats = CallStats()
    for i, (name, ok, latency) in enumerate([("f", True, 0.003), ("f", False, 0.2),
                                             ('we"ird\nname', True, 7.0)]):
        stats.started(str(i), name, 0.0)
        stats.finished(str(i), ok, latency)
    stats.started("running", "f", 0.0)
    text = render_prometheus(stats, [WorkerGauge("w1", "n1", 0.25, 2)], "tcp://s:1")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    label = (("function", "f"), ("scheduler", "tcp://s:1"))
    assert samples[("cloudburst_calls_total", label)] == 2
    assert samples[("cloudburst_call_errors_total", label)] == 1
    assert samples[("cloudburst_call_latency_seconds_count", label)] == 2
    assert samples[("cloudburst_call_latency_seconds_bucket", tuple(sorted(label + (("le", "0.005"),))))] == 1
    assert samples[("cloudburst_call_latency_seconds_bucket", tuple(sorted(label + (("le", "+Inf"),))))] == 2
    assert samples[("cloudburst_calls_total", (("function", 'we"ird\nname'),
                                               ("scheduler", "tcp://s:1")))] == 1
    assert samples[("cloudburst_calls_in_flight", (("scheduler", "tcp://s:1"),))] == 1
    assert samples[("cloudburst_workers_live", (("scheduler", "tcp://s:1"),))] == 1
    assert families["cloudburst_call_latency_seconds"].type == "histogram"
