"""The runtime layer: framing, request/reply with a deadline, launching and supervising
processes, and the package layering it exists to keep."""
import ast
import functools
import pathlib
import sys
import time

import pytest
import zmq
from hypothesis import given, strategies as st

from hydro_proto import cloudburst_pb2 as pb
from runtime import framing
from runtime.logs import configure_logging, parse_level
from runtime.process import (ManagedProcess, RestartPolicy, StartupError, Supervisor,
                             stop_all, wait_all_ready)
from hydrocache.replies import cache_reply
from runtime.rpc import collect_replies
from runtime.sockets import PushCache, bind_pull

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The layers' order, lowest first: runtime -> node pools (pools) -> Kubernetes (k8s) ->
# anna_core -> hydrocache -> (faas, placed below) -> scheduler and executor -> cloudburst. A
# package may import only packages to its left: both autoscalers (the Anna monitor, cloudburst's executor autoscaler)
# change nodes through pools, on Kubernetes through k8s; neither pools nor k8s knows them.
LAYERS = ["runtime", "pools", "k8s", "anna_core", "hydrocache", "scheduler", "executor",
          "cloudburst"]
_BELOW = {name: set(LAYERS[:i]) for i, name in enumerate(LAYERS)}
ALLOWED = {"runtime": set(), "pools": {"runtime"}, "k8s": {"runtime", "pools"},
           "anna_core": _BELOW["anna_core"], "hydrocache": _BELOW["hydrocache"],
           "scheduler": _BELOW["scheduler"],
           "executor": _BELOW["scheduler"],          # scheduler and executor: one level
           "cloudburst": _BELOW["cloudburst"]}
# Only these may import the `kubernetes` client (besides tests/).
KUBERNETES_CLIENT_USERS = ("k8s",)


def _imports(package):
    for path in (ROOT / package).rglob("*.py"):
        yield from _imports_of(path)


def _imports_of(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield path, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield path, alias.name


@pytest.mark.parametrize("package", LAYERS)
def test_packages_import_only_lower_layers_and_no_private_sdk_module(package):
    for path, module in _imports(package):
        top = module.split(".")[0]
        where = str(path.relative_to(ROOT))
        if top in LAYERS and top != package:
            assert top in ALLOWED[package], f"{where} imports {module}"
        if package != "cloudburst":
            assert not module.startswith("cloudburst"), f"{where} imports {module}"


def test_the_layers_order_is_stated_once_and_each_layer_sees_only_those_below():
    for i, name in enumerate(LAYERS):
        assert ALLOWED[name] <= set(LAYERS[:i]), name
    assert ALLOWED["pools"] == {"runtime"} and ALLOWED["k8s"] == {"runtime", "pools"}
    assert {"pools", "k8s"} <= ALLOWED["anna_core"] and "scheduler" not in ALLOWED["executor"]


def test_only_the_k8s_package_and_tests_import_the_kubernetes_client():
    product = [p for p in ROOT.rglob("*.py")
               if p.relative_to(ROOT).parts[0] not in ("tests", "build", ".git")
               and p.relative_to(ROOT).parts[0] not in KUBERNETES_CLIENT_USERS]
    assert product, "no Python files found outside k8s/ and tests/"
    for path in product:
        for _, module in _imports_of(path):
            assert module.split(".")[0] != "kubernetes", \
                f"{path.relative_to(ROOT)} imports {module}: Kubernetes code lives in k8s/"


def test_the_test_control_plane_is_not_part_of_the_installed_package():
    assert not (ROOT / "k8s" / "controlplane.py").exists()
    assert (ROOT / "tests" / "k8s_controlplane.py").exists()


@given(st.sampled_from(framing.KIND_ORDER), st.binary(max_size=64))
def test_cloudburst_frames_round_trip(kind, request_id):
    message = pb.CacheRequest(request_id=request_id.hex())
    got_kind, payload = framing.parse(framing.encode(kind, message))
    assert got_kind == kind and pb.CacheRequest.FromString(payload) == message


@pytest.mark.parametrize("frame", [b"", bytes([0]), bytes([len(framing.KIND_ORDER) + 1])])
def test_bad_cloudburst_frames_raise_frame_error(frame):
    with pytest.raises(framing.FrameError):
        framing.parse(frame)


@pytest.mark.parametrize("frames", [[b"request"], [b"nope", b""], [b"a", b"b", b"c"]])
def test_bad_anna_frames_raise_frame_error(frames):
    with pytest.raises(framing.FrameError):
        framing.split_frames(frames)


def test_unknown_log_levels_are_refused():
    assert parse_level("INFO") == parse_level("info")
    with pytest.raises(ValueError, match="verbose"):
        configure_logging("verbose", "test")


def test_collect_replies_keeps_wanted_ids_drops_strays_and_stops_at_the_deadline():
    ctx = zmq.Context()
    pull, address = bind_pull(ctx)
    push = PushCache(ctx, linger_ms=0)
    try:
        push.send_frame(address, b"\xff not a frame")                  # malformed: dropped
        for rid in ("late-answer", "a", "b"):
            push.send(address, "cache_reply", pb.CacheResponse(request_id=rid))
        push.send_with_frames(address, "cache_reply", pb.CacheResponse(request_id="c"), [b"v"])
        got = collect_replies(pull, {"a", "b", "c"}, time.monotonic() + 5, cache_reply)
        assert set(got) == {"a", "b", "c"}
        assert [bytes(f) for f in got["c"][1]] == [b"v"]
        start = time.monotonic()
        assert collect_replies(pull, {"never"}, start + 0.2, cache_reply) == {}
        assert 0.15 < time.monotonic() - start < 2.0
    finally:
        push.close()
        pull.close(0)
        ctx.term()


def _python(code):
    return [sys.executable, "-c", code]


READY = "from runtime.process import announce_ready; announce_ready({'pid': __import__('os').getpid()}); "


def test_ready_announcement_exit_and_silence_are_told_apart(tmp_path):
    ok = ManagedProcess("ok", _python(READY + "import time; time.sleep(30)"), str(tmp_path))
    dies = ManagedProcess("dies", _python("import sys; print('boom'); sys.exit(3)"), str(tmp_path))
    silent = ManagedProcess("silent", _python("import time; time.sleep(30)"), str(tmp_path))
    try:
        wait_all_ready([ok.spawn()], 10)
        assert ok.info["pid"] == ok.pid
        with pytest.raises(StartupError, match=r"dies exited with code 3(.|\n)*boom"):
            wait_all_ready([dies.spawn()], 10)
        with pytest.raises(StartupError, match="silent did not report ready within 0.3 s"):
            wait_all_ready([silent.spawn()], 0.3)
    finally:
        stop_all([ok, dies, silent], timeout=2)
    assert not ok.running() and not silent.running()


@given(st.integers(min_value=1, max_value=40))
def test_restart_back_off_doubles_up_to_its_maximum(failures):
    policy = RestartPolicy(initial=0.1, maximum=10.0)
    assert policy.delay(failures) <= 10.0
    assert policy.delay(failures + 1) == min(10.0, 2 * policy.delay(failures))
    assert policy.failures_after(failures, uptime=policy.stable) == 1
    assert policy.failures_after(failures, uptime=0.0) == failures + 1


def test_supervisor_restarts_a_crashing_process_only_after_its_back_off(tmp_path):
    # the child announces itself (with which start it is), then exits: a crash loop
    code = ("import os; from runtime.process import announce_ready, process_start; "
            "announce_ready({'start': process_start()}); os._exit(7)")
    p = ManagedProcess("crashy", _python(code), str(tmp_path))
    ready = []
    sup = Supervisor(RestartPolicy(initial=1.0, maximum=4.0), on_ready=ready.append)
    try:
        wait_all_ready([p.spawn()], 10)
        sup.watch(p, now=0.0)
        p.proc.wait(10)
        exits = sup.check(now=0.5)               # first failure: reported, restart in 1 s
        assert [(e.process, e.code) for e in exits] == [(p, 7)] and p.starts == 1
        assert sup.check(now=1.4) == [] and p.starts == 1
        assert sup.check(now=1.6) == [] and p.starts == 2 and sup.restarts["crashy"] == 1
        wait_all_ready([p], 10)                  # (the supervisor itself never waits)
        assert p.info == {"start": 2}
        p.proc.wait(10)
        exits = sup.check(now=1.7)               # second failure in a row: restart in 2 s
        assert len(exits) == 1
        assert sup.check(now=3.6) == [] and p.starts == 2
        sup.check(now=3.8)
        assert p.starts == 3 and sup.restarts["crashy"] == 2
    finally:
        stop_all([p], timeout=2)


def test_supervisor_tells_when_a_restarted_process_is_ready(tmp_path):
    code = ("import time; from runtime.process import announce_ready, process_start; "
            "announce_ready({'start': process_start()}); time.sleep(30)")
    p = ManagedProcess("sleepy", _python(code), str(tmp_path))
    ready = []
    sup = Supervisor(RestartPolicy(initial=0.0), on_ready=ready.append)
    try:
        wait_all_ready([p.spawn()], 10)
        sup.watch(p, now=0.0)
        p.proc.kill()
        p.proc.wait(10)
        assert len(sup.check(now=100.0)) == 1 and p.starts == 2     # restarted at once
        deadline = time.monotonic() + 10
        while not ready and time.monotonic() < deadline:
            select_ready = p.fileno() if p._ready_fd is not None else None
            if select_ready is not None:
                import select
                select.select([select_ready], [], [], 0.5)
            sup.check(now=100.1)
        assert ready == [p] and p.info == {"start": 2}
    finally:
        stop_all([p], timeout=2)


# ---- Every package, and modules named in strings ----
# The FaaS layer's shared vocabulary (`faas/`: errors, key names, values) sits right above
# hydrocache; Kubernetes (`k8s/`), where the order above does not name it, right above
# runtime. A package put in the order here may import what the package below it may, and
# that package; it may be imported by whatever may import the package below it. The
# generated wire schema (`hydro_proto`) is layer 0.
WIRE = "hydro_proto"
ORDER = list(LAYERS)
PLACED = {"faas": "hydrocache"} if "k8s" in ORDER else {"k8s": "runtime", "faas": "hydrocache"}
for _package, _below in PLACED.items():
    ORDER.insert(ORDER.index(_below) + 1, _package)
PACKAGES = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
_NAMED_IMPORTERS = {"import_module", "__import__", "find_spec", "reload"}


def _allowed(package):
    """The packages `package` may import (the module comment above)."""
    if package == WIRE:
        return set()
    if package in PLACED:
        below = PLACED[package]
        return _allowed(below) | {below}
    allowed = set(ALLOWED[package]) | {WIRE}
    return allowed | {p for p, below in PLACED.items() if below in allowed}


def _module_file(name):
    """The file of our module `name` (a dotted name), or None."""
    parts = name.split(".")
    if parts[0] not in PACKAGES or not all(p.isidentifier() for p in parts):
        return None
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    found = sorted(base.parent.glob(base.name + ".*.so"))
    return found[0] if found else None


@functools.lru_cache(maxsize=None)
def _is_program(path):
    """A module run as its own process (`python -m`): naming it starts it, not imports it."""
    if path.suffix != ".py":
        return False
    if path.name == "__init__.py" and (path.parent / "__main__.py").is_file():
        return True
    text = path.read_text()
    return "__name__ == \"__main__\"" in text or "__name__ == '__main__'" in text


def _named_modules(path):
    """Modules of ours that `path` names: imports, string arguments of importlib and
    `__import__`, and every other string that is the dotted name of one of our modules
    (pickle globals, lazy imports); programs started by name are not imports, and a bare
    word is not taken for a package ("cloudburst" is also the product's name)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _NAMED_IMPORTERS:
                yield node.args[0].value
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            target = _module_file(node.value)
            if target is not None and not _is_program(target):
                yield node.value


def test_every_package_has_a_place_in_the_layer_order():
    assert {"faas", "k8s", WIRE} <= set(PACKAGES)
    assert set(PACKAGES) == set(ORDER) | {WIRE}, "a package with no place in the order"


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_name_only_lower_layers_in_imports_and_in_strings(package):
    allowed = _allowed(package)
    for path in (ROOT / package).rglob("*.py"):
        where = path.relative_to(ROOT)
        for module in _named_modules(path):
            top = module.split(".")[0]
            if top in PACKAGES and top != package:
                assert top in allowed, f"{where} names {module!r} ({package} is below {top})"


def test_the_string_check_sees_importlib_dunder_import_and_module_names(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("import importlib\nimportlib.import_module('cloudburst.client')\n"
                      "__import__('scheduler.server')\nGLOBAL = ('executor.node', 'X')\n"
                      "LOGGER = 'cloudburst.nothing_here'\nRUN = 'executor.worker'\n")
    named = set(_named_modules(source))
    assert {"cloudburst.client", "scheduler.server", "executor.node"} <= named
    assert "cloudburst.nothing_here" not in named     # names no module: a logger's name
    assert "executor.worker" not in named             # a program, started by name


def test_a_kind_code_is_the_first_byte_of_that_kinds_frames_and_parses_back_to_it():
    from runtime.framing import KIND_ORDER, code_of, encode, parse
    call = pb.Call(request_id="r1", dag="d")
    for kind in KIND_ORDER:
        frame = encode(kind, call)
        assert frame[:1] == code_of(kind)
        assert parse(frame)[0] == kind
    assert len({code_of(k) for k in KIND_ORDER}) == len(KIND_ORDER)


def test_the_readers_shortcuts_for_their_common_kind_read_what_parse_reads():
    from cloudburst.call_link import answers_of
    from runtime.framing import encode
    result = pb.CallResult(request_id="r2", status=pb.OK)
    assert answers_of(encode("result", result)) == [("result", result)]
    batch = pb.DirectResults(results=[result, pb.CallResult(request_id="r3")])
    assert [r.request_id for _, r in answers_of(encode("direct_results", batch))] == ["r2", "r3"]
