// The pybind11 module anna_core._core. Each kernel file exposes one bind_xxx(py::module_&);
// this file only calls them, so editing one binding recompiles one file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace anna {
void bind_lattices(py::module_& m);
void bind_clocks(py::module_& m);
void bind_hash_ring(py::module_& m);
void bind_node(py::module_& m);
void bind_kernel_bench(py::module_& m);
void bind_loadgen(py::module_& m);
void bind_worker_core(py::module_& m);
void bind_client_transport(py::module_& m);
void bind_call_links(py::module_& m);
}  // namespace anna

PYBIND11_MODULE(_core, m) {
  m.doc() = "Anna KVS kernel: lattices, placement, the sans-I/O worker, worker nodes and native benchmarks.";
  anna::bind_lattices(m);
  anna::bind_clocks(m);
  anna::bind_hash_ring(m);
  anna::bind_node(m);
  anna::bind_kernel_bench(m);
  anna::bind_loadgen(m);
  anna::bind_worker_core(m);
  anna::bind_client_transport(m);
  anna::bind_call_links(m);
}
