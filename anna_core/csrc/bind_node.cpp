// Python binding of the KVS node (anna_core._core.Node) and its config parser.
//
// Contract (anna_core/DESIGN.md, "Node"): Node(config) takes the config as a JSON string (or,
// for convenience, a dict, which is JSON-encoded); bad config raises ValueError. start() and
// stop() release the GIL while they wait; start() raises RuntimeError if a worker cannot
// bind or open its store. worker_addresses() -> list[str] by thread id (with the server key
// when authentication is on). stats() -> list of per-worker counter dicts as of each worker's
// last epoch: the core's (bind_stats.hpp) plus auth_dropped, push_refused, auth_refused and
// auth_accepted (node.hpp). take_report(timeout_ms=5000) closes every worker's report period
// (node.hpp; GIL released while waiting) and returns one dict per worker (report_dict below;
// DESIGN.md "Statistics"); RuntimeError when the node is not running or a worker does not
// answer in time. `auth` says whether authentication is on. A Node is a context
// manager. push_sockets (each worker's socket capacity) and cache_descriptors (the most
// descriptors the workers' socket caches hold) are set by start(); push_sockets_for and
// push_cache_descriptors expose the sizing rule (node.hpp, push_cache.hpp).
// parse_node_config never returns the secret key: only whether one is set (`curve`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bind_stats.hpp"
#include "node.hpp"

namespace py = pybind11;

namespace anna {
namespace {

std::string config_text(const py::object& config) {
  if (py::isinstance<py::str>(config)) return config.cast<std::string>();
  if (py::isinstance<py::dict>(config)) return py::module_::import("json").attr("dumps")(config).cast<std::string>();
  throw py::type_error("Node config must be a JSON str or a dict");
}

py::dict node_worker_stats_dict(const NodeWorkerStats& s) {
  py::dict d = worker_stats_dict(s.core);
  d["auth_dropped"] = s.auth_dropped;
  d["push_refused"] = s.push_refused;
  d["links_open"] = s.links_open;
  d["links_accepted"] = s.links_accepted;
  d["links_unix"] = s.links_unix;
  d["links_refused"] = s.links_refused;
  d["links_dropped"] = s.links_dropped;
  d["link_requests"] = s.link_requests;
  d["links_auth_refused"] = s.links_auth_refused;
  d["auth_refused"] = s.auth_refused;
  d["auth_accepted"] = s.auth_accepted;
  d["wal_syncs"] = s.wal_syncs;
  d["wal_sync_failures"] = s.wal_sync_failures;
  return d;
}

py::list key_counts(const std::vector<KeyCount>& v) {
  py::list out;
  for (const auto& k : v) {
    py::dict d;
    d["key"] = k.key;
    d["accesses"] = k.accesses;
    d["size"] = k.size;
    out.append(d);
  }
  return out;
}

// Field names as anna_core/autoscale/summaries.py WorkerReport / KeyCount where shared.
py::dict report_dict(const Node& n, int tid, const NodeWorkerReport& r) {
  py::dict d;
  d["node_id"] = n.config().node_id;
  d["tier"] = n.config().tier == 0 ? "memory" : "disk";
  d["thread"] = tid;
  d["requests"] = r.core.requests;
  d["gets"] = r.core.gets;
  d["puts"] = r.core.puts;
  d["deletes"] = r.core.deletes;
  d["occupancy"] = r.occupancy;
  d["busy_ns"] = r.busy_ns;
  d["period_ns"] = r.period_ns;
  d["stored_bytes"] = r.core.stored_bytes;
  d["stored_keys"] = r.core.stored_keys;
  // The node's capacity split over its threads (summing the threads' reports gives the node's).
  // (The remainder goes to the first threads, one byte each, so the sum is exact.)
  const std::uint64_t threads = static_cast<std::uint64_t>(n.config().threads);
  d["capacity_bytes"] = n.config().capacity_bytes / threads +
                        (static_cast<std::uint64_t>(tid) < n.config().capacity_bytes % threads ? 1 : 0);
  d["key_accesses"] = r.core.key_accesses;
  d["accessed_keys"] = r.core.accessed_keys;
  d["access_square_sum"] = r.core.access_square_sum;
  d["access_mean"] = r.core.access_mean;
  d["exact"] = r.core.exact;
  d["top_k"] = n.config().stats_top_k;
  d["hottest"] = key_counts(r.core.hottest);
  d["coldest"] = key_counts(r.core.coldest);
  d["tracked"] = key_counts(r.core.tracked);
  return d;
}

}  // namespace

void bind_node(py::module_& m) {
  py::class_<Node>(m, "Node", "A KVS node: one pinned C++ worker thread per configured thread.")
      .def(py::init([](const py::object& config) {
             return std::make_unique<Node>(parse_node_config(config_text(config)));
           }),
           py::arg("config_json"))
      .def("start", &Node::start, py::call_guard<py::gil_scoped_release>(),
           "Bind every worker's sockets and start serving; returns when all are bound.")
      .def("stop", &Node::stop, py::call_guard<py::gil_scoped_release>(),
           "Stop and join the workers and close their stores (idempotent).")
      .def("worker_addresses", &Node::worker_addresses,
           "The workers' tcp request addresses, by thread id (empty before start()).")
      .def("stats",
           [](const Node& n) {
             py::list out;
             for (const auto& s : n.stats()) out.append(node_worker_stats_dict(s));
             return out;
           })
      .def("take_report",
           [](Node& n, int timeout_ms) {
             std::vector<NodeWorkerReport> reports;
             {
               py::gil_scoped_release release;
               reports = n.take_report(timeout_ms);
             }
             py::list out;
             for (std::size_t t = 0; t < reports.size(); ++t)
               out.append(report_dict(n, static_cast<int>(t), reports[t]));
             return out;
           },
           py::arg("timeout_ms") = 5000,
           "Close every worker's report period; one statistics dict per worker (DESIGN.md).")
      .def_property_readonly("node_id", [](const Node& n) { return n.config().node_id; })
      .def_property_readonly("tier", [](const Node& n) { return n.config().tier; })
      .def_property_readonly("threads", [](const Node& n) { return n.config().threads; })
      .def_property_readonly("running", &Node::running)
      .def_property_readonly("push_sockets", &Node::push_sockets,
                             "Each worker's PUSH socket capacity (set at start()).")
      .def_property_readonly("cache_descriptors", &Node::cache_descriptors,
                             "The most descriptors the workers' socket caches hold together.")
      .def_property_readonly("auth", [](const Node& n) { return n.config().curve.enabled(); })
      .def("__enter__",
           [](Node& n) -> Node& {
             {
               py::gil_scoped_release release;
               n.start();
             }
             return n;
           },
           py::return_value_policy::reference)
      .def("__exit__", [](Node& n, py::args) {
        py::gil_scoped_release release;
        n.stop();
      });

  m.def(
      "push_sockets_for",
      [](const std::string& json, std::uint64_t limit, std::size_t in_use) {
        return push_sockets_for(parse_node_config(json), limit, in_use);
      },
      py::arg("config_json"), py::arg("limit"), py::arg("in_use"),
      "The PUSH sockets each worker of this node config may keep when the process may open "
      "`limit` descriptors and has `in_use` open (node.hpp).");
  m.def(
      "push_cache_descriptors",
      [](std::size_t capacity) { return PushCache::descriptors_for(capacity); },
      py::arg("capacity"),
      "The most descriptors one worker's PUSH socket cache of `capacity` holds (push_cache.hpp).");
  m.def(
      "parse_node_config",
      [](const std::string& json) {
        NodeConfig c = parse_node_config(json);
        py::dict d;
        d["node_id"] = c.node_id;
        d["tier"] = c.tier == 0 ? "memory" : "disk";
        d["threads"] = c.threads;
        d["ip"] = c.ip;
        d["data_dir"] = c.data_dir;
        d["gossip_period_ms"] = c.gossip_period_ms;
        d["max_value_bytes"] = c.max_value_bytes;
        d["pin_threads"] = c.pin_threads;
        d["log_level"] = c.log_level;
        d["handoff_retry_ms"] = c.handoff_retry_ms;
        d["handoff_window_ms"] = c.handoff_window_ms;
        d["fetch_timeout_ms"] = c.fetch_timeout_ms;
        d["tombstone_ttl_ms"] = c.tombstone_ttl_ms;
        d["max_push_sockets"] = c.max_push_sockets;
        d["push_handshake_ms"] = c.push_handshake_ms;
        d["stats_top_k"] = c.stats_top_k;
        d["service_rate"] = c.service_rate;
        d["capacity_bytes"] = c.capacity_bytes;
        d["disk_sync"] = disk_sync_name(c.disk_sync);
        d["disk_sync_interval_ms"] = c.disk_sync_interval_ms;
        d["client_links"] = c.client_links;
        d["unix_links"] = c.unix_links;
        d["curve"] = c.curve.enabled();
        d["curve_public_key"] = c.curve.public_key;
        d["curve_admitted"] = c.curve.admitted;
        return d;
      },
      py::arg("config_json"), "The kernel's reading of a node config (for checks and tests).");
}

py::dict worker_stats_dict(const WorkerStats& s) {
  py::dict d;
  d["requests"] = s.requests;
  d["tuples"] = s.tuples;
  d["gossip_in"] = s.gossip_in;
  d["gossip_out"] = s.gossip_out;
  d["updates_out"] = s.updates_out;
  d["dropped"] = s.dropped;
  d["handed_off"] = s.handed_off;
  d["handoff_in"] = s.handoff_in;
  d["handoff_resent"] = s.handoff_resent;
  d["handoff_pending"] = s.handoff_pending;
  d["membership_version"] = s.membership_version;
  d["orphaned"] = s.orphaned;
  d["member"] = s.member;
  d["fetches_out"] = s.fetches_out;
  d["deferred"] = s.deferred;
  d["tombstones"] = s.tombstones;
  d["scans"] = s.scans;
  return d;
}

}  // namespace anna
