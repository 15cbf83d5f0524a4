// Python binding of ClusterMap (anna_core._core.ClusterMap) and stable_hash.
//
// Contract (anna_core/DESIGN.md, "Placement"): replication vectors cross as 4-tuples
// (memory_global, memory_local, disk_global, disk_local) of non-negative ints; tiers as ints
// (0 memory, 1 disk; anything else raises ValueError); addresses and node ids as str.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "hash_ring.hpp"

namespace py = pybind11;

namespace anna {
namespace {

ReplicationVector to_replication(const py::handle& h) {
  py::tuple t = py::tuple(py::reinterpret_borrow<py::object>(h));
  if (t.size() != 4) throw py::value_error("a replication vector has 4 numbers");
  std::uint32_t v[4];
  for (int i = 0; i < 4; ++i) {
    long long x = t[i].cast<long long>();
    if (x < 0 || x > 0xffffffffLL) throw py::value_error("replication counts must be >= 0");
    v[i] = static_cast<std::uint32_t>(x);
  }
  return ReplicationVector{v[0], v[1], v[2], v[3]};
}

py::tuple from_replication(const ReplicationVector& r) {
  return py::make_tuple(r.memory_global, r.memory_local, r.disk_global, r.disk_local);
}

void check_tier(int tier) {
  if (tier != 0 && tier != 1) throw py::value_error("tier must be 0 (memory) or 1 (disk)");
}

}  // namespace

void bind_hash_ring(py::module_& m) {
  m.def("stable_hash", [](const std::string& s) { return stable_hash(s); }, py::arg("data"),
        "The kernel's deterministic 64-bit hash (str is hashed as UTF-8).");
  py::class_<ClusterMap>(m, "ClusterMap",
                         "Membership + replication vectors -> responsible worker addresses.")
      .def(py::init([](const py::handle& default_replication, int vnodes) {
             if (vnodes < 1) throw py::value_error("vnodes must be >= 1");
             return ClusterMap(to_replication(default_replication), vnodes);
           }),
           py::arg("default_replication") = py::make_tuple(1, 1, 0, 1), py::arg("vnodes") = 64)
      .def("add_node",
           [](ClusterMap& cm, const std::string& node_id, int tier,
              std::vector<std::string> addresses) {
             check_tier(tier);
             cm.add_node(node_id, tier, std::move(addresses));
           },
           py::arg("node_id"), py::arg("tier"), py::arg("worker_addresses"))
      .def("remove_node", &ClusterMap::remove_node, py::arg("node_id"),
           "Remove a node; returns whether it was present.")
      .def("set_replication",
           [](ClusterMap& cm, const std::string& key, const py::handle& r) {
             cm.set_replication(key, to_replication(r));
           },
           py::arg("key"), py::arg("replication"))
      .def("replication",
           [](const ClusterMap& cm, const std::string& key) {
             return from_replication(cm.replication(key));
           },
           py::arg("key"))
      .def_property("default_replication",
                    [](const ClusterMap& cm) { return from_replication(cm.default_replication()); },
                    [](ClusterMap& cm, const py::handle& r) {
                      cm.set_default_replication(to_replication(r));
                    })
      .def("overrides",
           [](const ClusterMap& cm) {
             py::dict out;
             for (const auto& [k, r] : cm.overrides()) out[py::str(k)] = from_replication(r);
             return out;
           })
      .def("responsible",
           [](const ClusterMap& cm, const std::string& key, int tier) {
             check_tier(tier);
             return cm.responsible(key, tier);
           },
           py::arg("key"), py::arg("tier"))
      .def("is_responsible",
           [](const ClusterMap& cm, const std::string& key, int tier, const std::string& node_id,
              int thread_id) {
             check_tier(tier);
             return cm.is_responsible(key, tier, cm.member_index(node_id, tier), thread_id);
           },
           py::arg("key"), py::arg("tier"), py::arg("node_id"), py::arg("thread_id"),
           "Whether that worker is among responsible(key, tier) (the workers' ownership test).")
      .def("addresses", &ClusterMap::addresses, py::arg("key"), py::arg("all_tiers") = false)
      .def("nodes",
           [](const ClusterMap& cm) {
             py::list out;
             for (const auto& n : cm.nodes())
               out.append(py::make_tuple(n.node_id, n.tier, n.addresses));
             return out;
           })
      .def("__len__", [](const ClusterMap& cm) { return cm.nodes().size(); })
      .def_property_readonly("vnodes", &ClusterMap::vnodes);
}

}  // namespace anna
