"""One way to configure a process (runtime/config.py): every role's configuration object
round-trips, refuses a bad field by naming the role and the field, takes flags as overrides
of its file, and a real process of each role starts from a configuration file."""
import argparse
import json
import os
import signal
import sys

import pytest

from anna_core.config import NodeConfig as AnnaNodeConfig, Replication, RoutingConfig
from anna_core.monitor_config import MonitorConfig
from cloudburst.autoscaler_config import ExecutorAutoscalerConfig
from executor.config import NodeConfig as ExecutorNodeConfig, WorkerConfig, WorkerHostConfig
from runtime.config import (ConfigError, add_config_arguments, config_from_args, from_dict,
                            parse_config, read_config_text, to_dict)
from runtime.process import ManagedProcess, stop_all, wait_all_ready
from scheduler.config import SchedulerConfig
from waiting import poll_until

ROUTING = "tcp://127.0.0.1:1"
# Each role with the fewest fields it needs, and with a few fields changed from the defaults.
ROLES = {
    "anna node": (AnnaNodeConfig, {"node_id": "m0"},
                  {"threads": 3, "routing": [ROUTING, "tcp://127.0.0.1:2"], "report_period": 2.5,
                   "tier": "disk", "data_dir": "/tmp/d", "pin_threads": False}),
    "routing": (RoutingConfig, {}, {"port": 7, "default_replication": Replication(2, 1, 1, 1),
                                    "recovery_period": 0.5}),
    "anna monitor": (MonitorConfig, {"routing": [ROUTING]},
                     {"period": 3.0, "policy_config": {"grace_period": 1.0, "max_nodes": 4},
                      "autoscale": True, "kubernetes_namespace": "ns"}),
    "scheduler": (SchedulerConfig, {"kvs_address": ROUTING},
                  {"worker_slots": 3, "seed": 5, "queue_calls": False, "metrics_port": 0}),
    "executor node": (ExecutorNodeConfig, {"node_id": "n0", "kvs_address": ROUTING},
                      {"scheduler_addresses": ["tcp://127.0.0.1:3"], "write_quorum": 2,
                       "unresponsive_timeout": 9.0, "restart_workers": False}),
    "executor worker": (WorkerConfig, {"worker_id": "w", "node_id": "n", "kvs_address": ROUTING,
                                       "cache_address": "tcp://127.0.0.1:4"},
                        {"auth": True, "max_actors": 2}),
    "worker host": (WorkerHostConfig, {}, {"port": 9, "key_dir": "/k", "max_workers": 2}),
    "executor autoscaler": (ExecutorAutoscalerConfig,
                            {"schedulers": ["tcp://127.0.0.1:3"], "kubernetes_namespace": "ns"},
                            {"policy_config": {"min_nodes": 2}, "pod_leave_timeout": 90.0}),
}
# A field of each role and a value of the wrong type for it, and one its own checks refuse.
BAD = {
    "anna node": (("threads", "two"), ("join_timeout", 0)),
    "routing": (("vnodes", 6.5), ("heartbeat_timeout", 0.5)),
    "anna monitor": (("period", "soon"), ("policy_config", {"grace": 1})),
    "scheduler": (("worker_slots", "x"), ("max_worker_slots", 1)),
    "executor node": (("workers", None), ("write_quorum", 0)),
    "executor worker": (("auth", "yes"), None),
    "worker host": (("port", "80"), None),
    "executor autoscaler": (("schedulers", [5]), ("policy_config", {"min_nodes": 0})),
}


def _config(role, changed=False):
    cls, minimal, changes = ROLES[role]
    return cls(**minimal, **(changes if changed else {}))


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("changed", [False, True])
def test_every_role_config_round_trips_through_json_and_a_file(role, changed, tmp_path):
    config = _config(role, changed)
    cls = type(config)
    assert cls.ROLE == role
    text = json.dumps(to_dict(config))
    assert from_dict(cls, json.loads(text)) == config
    if hasattr(cls, "to_json"):
        assert cls.from_json(config.to_json()) == config
    path = tmp_path / "config.json"
    path.write_text(text)
    for given in (str(path), "@" + str(path), text):
        parser = argparse.ArgumentParser()
        add_config_arguments(parser, cls)
        got, _ = parse_config(parser, cls, ["--config", given])
        assert got == config


@pytest.mark.parametrize("role", ROLES)
def test_every_field_of_every_role_is_a_documented_flag(role):
    import dataclasses
    cls = ROLES[role][0]
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, cls)
    flags = {o: a for a in parser._actions for o in a.option_strings}
    for f in dataclasses.fields(cls):
        assert f.metadata.get("help"), f"{role}: field {f.name} has no help text"
        action = flags["--" + f.name.replace("_", "-")]
        assert action.help and f.metadata["help"] in action.help
    assert flags["--config"].help


@pytest.mark.parametrize("role", ROLES)
def test_a_bad_field_is_refused_naming_the_role_and_the_field(role, tmp_path):
    cls, minimal, _ = ROLES[role]
    wrong_type, refused = BAD[role]
    cases = [({"no_such_knob": 1}, "no_such_knob"), ({wrong_type[0]: wrong_type[1]}, wrong_type[0])]
    if refused is not None:
        cases.append(({refused[0]: refused[1]}, refused[0]))
    for extra, field in cases:
        with pytest.raises(ConfigError) as info:
            from_dict(cls, {**minimal, **extra})
        assert info.value.role == role and info.value.field == field, str(info.value)
        assert role in str(info.value) and repr(field) in str(info.value)
    for field in minimal:                  # each field the role cannot do without
        with pytest.raises(ConfigError) as info:
            from_dict(cls, {k: v for k, v in minimal.items() if k != field})
        assert (info.value.role, info.value.field) == (role, field), str(info.value)
    # on the command line: argparse's one-line usage error (status 2) naming both
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**minimal, wrong_type[0]: wrong_type[1]}))
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, cls)
    with pytest.raises(SystemExit) as exit_info:
        parse_config(parser, cls, ["--config", str(path)])
    assert exit_info.value.code == 2


def test_config_text_that_is_no_object_or_no_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nowhere.json"):
        read_config_text(str(tmp_path / "nowhere.json"), "scheduler")
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        read_config_text("[1]", "scheduler")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=f"{bad}.*not valid JSON"):
        read_config_text(str(bad), "scheduler")


def _parse(cls, argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, cls)
    return config_from_args(cls, parser.parse_args(argv))


def test_flags_override_the_file_field_by_field(tmp_path):
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"node_id": "file", "threads": 2, "routing": ["tcp://f:1"],
                                "pin_threads": True, "log_level": "info"}))
    config = _parse(AnnaNodeConfig, ["--config", str(path), "--node-id", "flag",
                                     "--routing", "tcp://a:1,tcp://b:2", "--routing", "tcp://c:3",
                                     "--no-pin-threads", "--report-period", "1.5"])
    assert (config.node_id, config.threads, config.log_level) == ("flag", 2, "info")
    assert config.routing == ["tcp://a:1", "tcp://b:2", "tcp://c:3"] and not config.pin_threads
    assert config.report_period == 1.5
    # "none" clears an optional number; "" an optional string
    path.write_text(json.dumps({"kvs_address": "tcp://k:1", "seed": 3, "key_dir": "/k"}))
    config = _parse(SchedulerConfig, ["--config", str(path), "--seed", "none", "--key-dir", ""])
    assert config.seed is None and config.key_dir is None and config.kvs_address == "tcp://k:1"
    # a mapping merges key by key; a JSON or bare-word value where the type is not simple
    path.write_text(json.dumps({"routing": ["tcp://r:1"], "policy_config": {"max_nodes": 3,
                                                                            "grace_period": 5}}))
    config = _parse(MonitorConfig, ["--config", str(path), "--policy-config",
                                    '{"grace_period": 9}'])
    assert config.policy_config == {"max_nodes": 3, "grace_period": 9}
    assert config.policy().grace_period == 9 and config.policy().max_nodes == 3
    config = _parse(ExecutorNodeConfig, ["--node-id", "n", "--kvs-address", "k",
                                         "--write-quorum", "one"])
    assert config.write_quorum == "one"
    assert _parse(ExecutorNodeConfig, ["--node-id", "n", "--kvs-address", "k",
                                       "--write-quorum", "2"]).write_quorum == 2
    assert _parse(RoutingConfig, ["--default-replication", "2,1,0,1"]
                  ).default_replication == Replication(2, 1, 0, 1)
    with pytest.raises(SystemExit):      # a flag of the wrong type: argparse's usage error
        _parse(SchedulerConfig, ["--kvs-address", "k", "--worker-slots", "many"])


def test_an_address_may_name_the_cluster_key_which_comes_from_key_dir(tmp_path):
    from runtime.auth import CLUSTER, KeyPair, format_address
    pair = KeyPair.generate()
    pair.save(str(tmp_path), CLUSTER)
    routing = "tcp://anna-routing:6450"
    config = from_dict(ExecutorNodeConfig, {
        "node_id": "n", "key_dir": str(tmp_path), "kvs_address": f"{routing}#k=cluster",
        "scheduler_addresses": ["tcp://s0:6500#k=cluster", "tcp://s1:6500#k=cluster"]})
    assert config.kvs_address == format_address(routing, pair.public)
    assert config.scheduler_addresses == [format_address(f"tcp://s{i}:6500", pair.public)
                                          for i in (0, 1)]
    # a variable holding several addresses: each is marked, then keyed
    env = {"ANNA_ROUTING": "tcp://r0:6450, tcp://r1:6450", "KEYS": str(tmp_path)}
    node = from_dict(AnnaNodeConfig, {"node_id": "m", "key_dir": "${KEYS}",
                                      "routing": "${ANNA_ROUTING}#k=cluster"}, environ=env)
    assert node.routing == [format_address(f"tcp://r{i}:6450", pair.public) for i in (0, 1)]
    scheduler = from_dict(SchedulerConfig, {"key_dir": "${KEYS}",
                                            "kvs_address": "${ANNA_ROUTING}#k=cluster"},
                          environ=env)
    assert scheduler.kvs_address == ",".join(node.routing)
    plain = from_dict(AnnaNodeConfig, {"node_id": "m", "routing": f"{routing}#k=cluster"})
    assert plain.routing == [routing]             # no key_dir: authentication off, plain
    with pytest.raises(ConfigError, match="cluster.key") as info:
        from_dict(SchedulerConfig, {"kvs_address": f"{routing}#k=cluster",
                                    "key_dir": str(tmp_path / "nowhere")})
    assert info.value.field == "kvs_address"


def test_a_string_may_refer_to_the_environment_which_a_pod_fills_in():
    env = {"POD_NAME": "anna-memory-7f9c", "POD_IP": "10.0.0.7"}
    config = from_dict(AnnaNodeConfig, {"node_id": "${POD_NAME}", "ip": "${POD_IP}",
                                        "routing": ["tcp://${POD_IP}:6450"]}, environ=env)
    assert (config.node_id, config.ip, config.routing) == ("anna-memory-7f9c", "10.0.0.7",
                                                           ["tcp://10.0.0.7:6450"])
    # set but empty: an optional field is none; a list splits at commas
    config = from_dict(AnnaNodeConfig, {"node_id": "m", "key_dir": "${KEY_DIR}",
                                        "routing": ["${ROUTING}"]},
                       environ={"KEY_DIR": "", "ROUTING": "tcp://a:1, tcp://b:2"})
    assert config.key_dir is None and config.routing == ["tcp://a:1", "tcp://b:2"]
    host = from_dict(WorkerHostConfig, {"port": "${PORT}", "key_dir": "${KEYS}"},
                     environ={"PORT": "7100", "KEYS": "/function-keys"})
    assert (host.port, host.key_dir) == (7100, "/function-keys")
    with pytest.raises(ConfigError, match="expected an int") as info:
        from_dict(WorkerHostConfig, {"port": "${PORT}"}, environ={"PORT": "many"})
    assert info.value.field == "port"
    with pytest.raises(ConfigError, match=r"\$\{POD_NAME\}.*POD_NAME is not set") as info:
        from_dict(ExecutorNodeConfig, {"node_id": "${POD_NAME}", "kvs_address": "k"},
                  environ={})
    assert (info.value.role, info.value.field) == ("executor node", "node_id")


# ---- real processes of each role, started from a configuration file ------------------------

def _file(tmp_path, name, config):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(to_dict(config)))
    return str(path)


def test_a_process_of_each_role_starts_from_a_config_file(tmp_path):
    """Routing, an Anna node, the monitor, a scheduler, an executor node and a worker host,
    each from its file (no other option than the launcher's `--ready-file`-style extras), on
    free ports; the monitor shows it runs by publishing its status."""
    from anna_core import Client
    from anna_core.autoscale.reports import STATUS_KEY
    from anna_core.errors import KeyNotFound
    log_dir = str(tmp_path)
    py = [sys.executable, "-m"]
    me = os.getpid()
    procs = []

    def start(name, module, config, *extra):
        p = ManagedProcess(name, py + [module, "--config", _file(tmp_path, name, config)]
                           + list(extra), log_dir).spawn()
        procs.append(p)
        return p

    try:
        routing = start("routing", "anna_core.routing", RoutingConfig(parent_pid=me,
                                                                      heartbeat_period=0.2,
                                                                      heartbeat_timeout=1.0))
        host = start("workerhost", "executor.workerhost", WorkerHostConfig(log_dir=log_dir))
        wait_all_ready([routing], 20)
        address = routing.info["address"]
        node = start("node", "anna_core.node", AnnaNodeConfig(
            node_id="m0", routing=[address], pin_threads=False, heartbeat_period=0.2,
            parent_pid=me))
        scheduler = start("scheduler", "scheduler", SchedulerConfig(kvs_address=address,
                                                                    parent_pid=me))
        monitor = start("monitor", "anna_core.monitor", MonitorConfig(routing=[address],
                                                                      period=0.5))
        wait_all_ready([node, scheduler, host], 30)
        assert node.info["node_id"] == "m0" and host.info["address"]
        executor = start("executor", "executor", ExecutorNodeConfig(
            node_id="e0", kvs_address=address, workers=1, parent_pid=me, log_dir=log_dir,
            scheduler_addresses=[scheduler.info["address"]]))
        wait_all_ready([executor], 30)
        assert executor.info["node_id"] == "e0" and len(executor.info["workers"]) == 1
        with Client(address, timeout=2.0) as kvs:
            def status():
                try:
                    return json.loads(kvs.get(STATUS_KEY))
                except KeyNotFound:
                    return None
            published = poll_until(status, 20, "the monitor's first status")
        assert published["period"] == 0.5 and published["autoscaling"] is False
        assert monitor.running()
    finally:
        stop_all(procs, 10, signal.SIGINT)       # the node stops without a leave hand-off


def test_a_process_given_a_bad_config_file_exits_2_naming_role_and_field(tmp_path):
    """The process' last line names the role and the field, without a traceback (every
    role's parse ends the same way: test_a_bad_field_is_refused_naming_the_role_and_the_field)."""
    import subprocess
    cases = [("anna_core.node", {"node_id": "m", "threads": 0, "routing": [ROUTING]},
              "anna node", "threads"),
             ("cloudburst.autoscaler", {"schedulers": [ROUTING]}, "executor autoscaler",
              "kubernetes_namespace")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      os.environ.get("PYTHONPATH")])))
    procs = []
    for i, (module, data, _, _) in enumerate(cases):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(data))
        procs.append(subprocess.Popen([sys.executable, "-m", module, "--config", str(path)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=env))
    for proc, (module, _, role, field) in zip(procs, cases):
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 2, (module, err)
        last = err.strip().splitlines()[-1]
        assert f"{role} configuration, field {field!r}" in last, (module, last)
        assert "Traceback" not in err
