"""How a client's worker leases size up to a burst of short calls (`scheduler/lease_grants.py`
with `scheduler/window.py`): a lease spread to a fresh worker starts at the window of the
worker the client already leases the target on, and a worker's report that widens its window
grows its leases at once, telling the worker and then each lease's client.

Unit tests of the glue: the scheduler's leasing mixed into a stand-in with the state it uses
(registry, worker table, lease book, windows), no sockets; what it would send is recorded."""
import dataclasses
import time
from types import SimpleNamespace

from hydro_proto import cloudburst_pb2 as pb
from scheduler.lease_grants import WorkerLeasing
from scheduler.policy import WorkerView
from scheduler.retries import RetryPolicy
from scheduler.window import Windows

CLIENT = "tcp://client:1"


class _Push:
    def __init__(self) -> None:
        self.sent = []

    def send(self, address, kind, message) -> bool:
        self.sent.append((address, kind, message))
        return True


class _Leasing(WorkerLeasing):
    def __init__(self, workers=("w1", "w2")) -> None:
        self.config = SimpleNamespace(worker_leases=True, worker_lease_ttl=10.0)
        self._init_worker_leases()
        self._windows = Windows(2, 16, 0.005)
        self._push = _Push()
        self.address = "tcp://scheduler:1"
        self._graceful = SimpleNamespace(refuses=lambda: False)
        self.registry = SimpleNamespace(function=lambda name: pb.FunctionRecord(version="v1"),
                                        dag=lambda name: None)
        self.lifecycle = SimpleNamespace(default=RetryPolicy(3, False))
        self.table = SimpleNamespace(callers=lambda: [], address=lambda w: f"tcp://{w}:9",
                                     control_address=lambda w: "")
        self._warm = {}
        self._queue, self._deferred = [], []
        self._views = [WorkerView(w, "n1", f"tcp://{w}:9") for w in workers]
        for w in workers:
            self._note_direct(w, f"tcp://{w}:8")

    def _placeable(self):
        return self._with_leases(self._views)

    def ask(self, spread: bool = False) -> pb.WorkerLease:
        self._push.sent.clear()
        req = pb.LeaseRequest(target="f", spread=spread, response_address=CLIENT)
        self._lease_worker(req.SerializeToString(), "alice")
        return self.to_client()[-1]

    def to_client(self):
        return [m for a, kind, m in self._push.sent if a == CLIENT and kind == "worker_lease"]


def test_a_lease_spread_to_a_fresh_worker_starts_at_the_window_of_the_clients_other_lease():
    s = _Leasing()
    s._windows.observe("w1", 1000, 1000 * 0.0001)     # w1 runs f's calls in 100 us: 16
    first = s.ask()
    assert (first.status, first.worker_id, first.slots) == (pb.OK, "w1", 16)
    spread = s.ask(spread=True)
    assert spread.status == pb.OK and spread.worker_id == "w2"
    assert not s._windows.known("w2")
    assert spread.slots == 16                         # not the configured 2


def test_a_lease_not_spread_or_on_a_worker_heard_of_keeps_that_workers_own_window():
    s = _Leasing(workers=("w2",))
    assert s.ask().slots == 2                          # nothing known anywhere: the base
    s = _Leasing()
    s._windows.observe("w1", 1000, 1000 * 0.0001)
    s._windows.observe("w2", 10, 10 * 0.004)           # w2 said its calls take 4 ms
    s.ask()
    assert s.ask(spread=True).slots == 2               # its own word stands


def test_a_report_that_widens_a_workers_window_grows_its_leases_and_tells_the_client():
    s = _Leasing()
    granted = s.ask()
    assert granted.slots == 2                          # before any report
    lease = s.worker_leases.lease(granted.lease_id)
    expires = lease.expires
    s._push.sent.clear()
    s._windows.observe("w1", 2000, 2000 * 0.00005)     # the heartbeat's report
    s._widened("w1")
    assert lease.slots == 16 and lease.expires == expires      # grown, not renewed
    told = [(a, m) for a, kind, m in s._push.sent if kind == "worker_lease"]
    assert [a for a, _ in told] == ["tcp://w1:9", CLIENT]      # the worker first
    assert all(m.lease_id == granted.lease_id and m.slots == 16 for _, m in told)
    to_client = told[1][1]
    assert 0 < to_client.ttl <= expires - time.monotonic() + 0.01
    s._push.sent.clear()
    s._widened("w1")                                   # nothing grew: nothing said
    assert s._push.sent == []


def test_a_lease_grows_only_into_what_its_worker_has_free():
    s = _Leasing(workers=("w1",))
    granted = s.ask()
    s._views = [dataclasses.replace(s._views[0], outstanding=12)]   # 12 of its own calls
    s._windows.observe("w1", 2000, 2000 * 0.00005)
    s._widened("w1")
    assert s.worker_leases.lease(granted.lease_id).slots == 4       # 16 less the 12


def test_a_worker_heard_at_a_new_direct_address_ends_its_leases_as_a_death():
    # A worker restarted under its id, whose dead process' last heartbeat came after its
    # exit report: a lease granted at the old address would send its calls to nobody.
    s = _Leasing(workers=("w1",))
    first = s.ask()
    assert first.status == pb.OK and first.worker_address == "tcp://w1:8"
    s._push.sent.clear()
    s._note_direct("w1", "tcp://w1:8")                  # the same process: nothing ends
    assert s.to_client() == []
    s._note_direct("w1", "tcp://w1:7")
    revoked = s.to_client()
    assert [(m.lease_id, m.revoked, m.worker_died) for m in revoked] == \
        [(first.lease_id, True, True)]
    assert "tcp://w1:7" in revoked[0].reason
    again = s.ask()
    assert again.status == pb.OK and again.worker_address == "tcp://w1:7"
