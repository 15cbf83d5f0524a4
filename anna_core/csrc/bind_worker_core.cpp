// Python binding of the sans-I/O worker (anna_core._core.WorkerCore), for driving one Anna
// worker as a pure state machine: no sockets, no threads, no clock of its own.
//
// Contract (worker_core.hpp has the worker's own contract):
//   * WorkerCore(node_id, tier, thread_id, address, max_value_bytes=64 MiB, store_path=None,
//     membership=None, handoff_retry_ms=500, handoff_window_ms=5000, fetch_timeout_ms=1000,
//     tombstone_ttl_ms=60000, now_ns=0): a worker with a MemoryStore, or a DiskStore (RocksDB)
//     at store_path. The timing knobs must be positive (ValueError). Its clock starts at now_ns
//     and moves only by set_now(ns): tests drive hand-off retries, the fetch window, fetch
//     timeouts and tombstone expiry by setting it before end_epoch().
//     `membership` (a serialized anna.Membership) is handled at once, its outputs discarded.
//     tier must be 0 (memory) or 1 (disk); a store that cannot be opened raises RuntimeError.
//   * handle(kind, payload) feeds one received [kind][payload] message ("request", "gossip",
//     "membership", "replication", "handoff", "handoff_ack", "fetch", "fetched", "scan") and returns
//     the messages to send, in order, as a list of (address, kind, payload: bytes) tuples;
//     kind is "" for single-frame answers (KeyResponse and UPDATE pushes). A message the worker drops (unknown kind, unparsable payload) raises
//     ValueError with the worker's reason; the worker's state is unchanged apart from
//     stats()["dropped"].
//   * end_epoch() ends the gossip epoch and returns its gossip and subscription UPDATEs, then
//     runs the timers (hand-off resends, fetch timeouts), in the same form.
//   * value(key) -> the stored lattice (as _core.deserialize builds it) or None; keys() ->
//     sorted stored keys; stats() -> the core's counters (Node.stats() reports them per
//     worker, with the shell's: auth_dropped, push_refused, auth_refused, auth_accepted).
//   * A WorkerCore is not thread-safe; every call holds the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bind_stats.hpp"
#include "worker_core.hpp"

namespace py = pybind11;

namespace anna {
namespace {

py::list to_python(std::vector<OutMessage>* out) {
  py::list result;
  for (const auto& m : *out)
    result.append(py::make_tuple(m.address, m.kind, py::bytes(m.payload.data(), m.payload.size())));
  out->clear();
  return result;
}


py::list handle_message(WorkerCore& core, const std::string& kind, const py::bytes& payload) {
  std::string_view data(payload);
  std::vector<OutMessage> out;
  std::string why;
  if (!core.handle(kind, data, &out, &why)) throw py::value_error("message dropped: " + why);
  return to_python(&out);
}

}  // namespace

void bind_worker_core(py::module_& m) {
  py::class_<WorkerCore>(m, "WorkerCore",
                         "One Anna worker as a state machine: feed it messages, get back the "
                         "messages it would send (no sockets, no clock).")
      .def(py::init([](const std::string& node_id, int tier, int thread_id,
                       const std::string& address, std::size_t max_value_bytes,
                       std::optional<std::string> store_path,
                       std::optional<py::bytes> membership, std::uint64_t handoff_retry_ms,
                       std::uint64_t handoff_window_ms, std::uint64_t fetch_timeout_ms,
                       std::uint64_t tombstone_ttl_ms, std::uint64_t now_ns) {
             if (tier != MEMORY && tier != DISK)
               throw py::value_error("tier must be 0 (memory) or 1 (disk)");
             if (thread_id < 0) throw py::value_error("thread_id must be >= 0");
             std::unique_ptr<Store> store;
             if (store_path) store = std::make_unique<DiskStore>(*store_path);
             else store = std::make_unique<MemoryStore>();
             if (handoff_retry_ms == 0 || handoff_window_ms == 0 || fetch_timeout_ms == 0 ||
                 tombstone_ttl_ms == 0)
               throw py::value_error("handoff_retry_ms, handoff_window_ms, fetch_timeout_ms and "
                                     "tombstone_ttl_ms must be positive");
             WorkerIdentity id{node_id, tier, thread_id, address, max_value_bytes};
             id.handoff_retry_ms = handoff_retry_ms;
             id.handoff_window_ms = handoff_window_ms;
             id.fetch_timeout_ms = fetch_timeout_ms;
             id.tombstone_ttl_ms = tombstone_ttl_ms;
             auto core = std::make_unique<WorkerCore>(std::move(id), std::move(store));
             core->set_now(now_ns);
             if (membership) handle_message(*core, "membership", *membership);
             return core;
           }),
           py::arg("node_id"), py::arg("tier"), py::arg("thread_id"), py::arg("address"),
           py::arg("max_value_bytes") = std::size_t{64u << 20},
           py::arg("store_path") = py::none(), py::arg("membership") = py::none(),
           py::arg("handoff_retry_ms") = std::uint64_t{500},
           py::arg("handoff_window_ms") = std::uint64_t{5000},
           py::arg("fetch_timeout_ms") = std::uint64_t{1000},
           py::arg("tombstone_ttl_ms") = std::uint64_t{60000}, py::arg("now_ns") = std::uint64_t{0})
      .def("set_now", &WorkerCore::set_now, py::arg("now_ns"),
           "Set the worker's clock (ns since the Unix epoch); it never moves by itself.")
      .def_property_readonly("now", &WorkerCore::now, "The worker's clock (ns), as last set.")
      .def_property_readonly("membership_version",
                             [](const WorkerCore& c) { return c.stats().membership_version; })
      .def("handle", &handle_message, py::arg("kind"), py::arg("payload"),
           "Handle one [kind][payload] message; returns [(address, kind, payload)] to send. "
           "Raises ValueError when the worker drops the message.")
      .def("end_epoch",
           [](WorkerCore& core) {
             std::vector<OutMessage> out;
             core.end_epoch(&out);
             return to_python(&out);
           },
           "End the gossip epoch; returns its gossip and subscription UPDATE messages.")
      .def("value",
           [](WorkerCore& core, const std::string& key) -> py::object {
             int type = 0;
             std::string payload;
             AnnaError err = core.store().get_encoded(key, &type, &payload);
             if (err == KEY_DNE) return py::none();
             if (err != NO_ERROR)
               throw std::runtime_error("store read failed: " + AnnaError_Name(err));
             return py::module_::import("anna_core._core")
                 .attr("deserialize")(type, py::bytes(payload.data(), payload.size()));
           },
           py::arg("key"), "The stored lattice of key on this worker, or None.")
      .def("keys",
           [](WorkerCore& core) {
             std::vector<std::string> keys;
             core.store().for_each(
                 [&](const std::string& key, const AnyLattice&) { keys.push_back(key); });
             std::sort(keys.begin(), keys.end());
             return keys;
           },
           "The keys this worker stores, sorted.")
      .def("stats", [](const WorkerCore& core) { return worker_stats_dict(core.stats()); })
      .def_property_readonly("has_membership", &WorkerCore::has_membership)
      .def_property_readonly("changeset_size", &WorkerCore::changeset_size,
                             "Keys PUT since the last end_epoch() (pending gossip).")
      .def_property_readonly("node_id", [](const WorkerCore& c) { return c.identity().node_id; })
      .def_property_readonly("tier", [](const WorkerCore& c) { return c.identity().tier; })
      .def_property_readonly("thread_id",
                             [](const WorkerCore& c) { return c.identity().thread_id; })
      .def_property_readonly("address", [](const WorkerCore& c) { return c.identity().address; })
      .def("__repr__", [](const WorkerCore& c) {
        return "WorkerCore(" + c.identity().node_id + "/" + std::to_string(c.identity().thread_id) +
               " at " + c.identity().address + ")";
      });
}

}  // namespace anna
