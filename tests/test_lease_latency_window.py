"""A client's usage report on its worker lease widens that worker's window before the
worker's heartbeat reports its calls' run times (`scheduler/lease_grants.py` feeding
`scheduler/window.py`'s bound): a renewal in the same report then takes the wider window.

A unit test of the glue: the scheduler's leasing mixed into a stand-in with the state it
uses (lease book, windows, stats), no sockets."""
import time
from types import SimpleNamespace

from hydro_proto import cloudburst_pb2 as pb
from scheduler.lease_grants import WorkerLeasing
from scheduler.window import Windows
from scheduler.worker_leases import LeaseBook


class _Leasing(WorkerLeasing):
    def __init__(self) -> None:
        self.worker_leases = LeaseBook(10.0)
        self._windows = Windows(2, 16, 0.005)
        self.recorded = []
        self.stats = SimpleNamespace(record=lambda *a: self.recorded.append(a))
        self._queue, self._deferred = [], []
        self.resized = []

    def _resize(self, lease) -> None:            # (the real one reads the workers' views)
        self.resized.append(self._windows.slots(lease.worker_id))

    def _tell(self, lease, request_id="") -> None:
        pass

    def _versions(self, lease):
        return {}


def test_a_usage_report_of_short_calls_widens_the_window_its_renewal_takes():
    s = _Leasing()
    lease = s.worker_leases.grant("L1", "alice", "tcp://c:1", "f", False, "w1", 2,
                                  time.monotonic())
    assert s._windows.slots("w1") == 2           # the worker has not reported yet
    req = pb.LeaseRequest(response_address="tcp://c:1", renew=[lease.lease_id])
    req.usage.add(lease_id="L1", calls=40, failed=0, latencies=[0.0005] * 40)
    s._lease_worker(req.SerializeToString(), "alice")
    assert len(s.recorded) == 40                  # the statistics as before
    assert s.resized == [10]                      # 5 ms of 0.5 ms calls, taken at renewal


def test_another_clients_report_on_a_lease_not_its_own_changes_nothing():
    s = _Leasing()
    s.worker_leases.grant("L1", "alice", "tcp://c:1", "f", False, "w1", 2, time.monotonic())
    req = pb.LeaseRequest(response_address="tcp://m:1")
    req.usage.add(lease_id="L1", calls=40, failed=0, latencies=[0.00001] * 40)
    s._lease_worker(req.SerializeToString(), "mallory")
    assert s._windows.slots("w1") == 2
