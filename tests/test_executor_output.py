"""What functions print (executor/output.py): captured per call, tagged in the log, bounded."""
import io
import threading

from hypothesis import given, strategies as st

from executor.output import CallOutput, Capture, UpstreamLogs, join_logs, section


def test_output_is_tagged_in_the_log_and_captured_only_during_a_call():
    log = io.StringIO()
    capture = Capture(limit=100)
    out = CallOutput(log, capture)
    out.write("before\n")
    capture.begin("c1", "f")
    out.write("hello ")
    out.write("world\nsecond line\n")
    assert capture.end() == "hello world\nsecond line\n"
    out.write("after\n")
    assert log.getvalue() == ("before\ncall c1 f: hello world\ncall c1 f: second line\n"
                              "after\n")


@given(st.lists(st.text(max_size=40), max_size=30), st.integers(min_value=1, max_value=120))
def test_a_call_keeps_the_last_limit_characters_and_says_how_many_it_dropped(parts, limit):
    capture = Capture(limit=limit)
    out = CallOutput(io.StringIO(), capture)
    capture.begin("c", "f")
    for p in parts:
        out.write(p)
    text = "".join(parts)
    got = capture.end()
    if len(text) <= limit:
        assert got == text
    else:
        note = f"[... {len(text) - limit} earlier characters dropped]\n"
        assert got == note + text[-limit:]


def test_threads_of_a_function_are_captured_too():
    capture = Capture()
    out = CallOutput(io.StringIO(), capture)
    capture.begin("c", "f")
    threads = [threading.Thread(target=lambda i=i: out.write(f"t{i}\n")) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert sorted(capture.end().split()) == sorted(f"t{i}" for i in range(8))


def test_sections_and_upstream_logs():
    assert section("f", "") == "" and section("f", "x") == "[f]\nx\n"
    assert join_logs(["[a]\n1\n", "[b]\n2\n"], 8) == "[... 4 earlier characters dropped]\n1\n[b]\n2\n"
    up = UpstreamLogs(max_calls=2)
    up.add("c1", "sink", "[a]\nx\n")
    up.add("c1", "sink", "[b]\ny\n")
    up.add("c2", "sink", "z")
    up.add("c3", "sink", "w")                       # c1 is the oldest: dropped
    assert up.take("c1", "sink") == [] and up.take("c2", "sink") == ["z"]
    assert up.take("c2", "sink") == []               # taken once
    up.drop("c3")
    assert up.take("c3", "sink") == []
