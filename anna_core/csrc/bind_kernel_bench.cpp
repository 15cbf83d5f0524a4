// Python binding of the kernel microbenchmark (anna_core._core.bench_kernel).
//
// Contract: bench_kernel(...) -> dict with throughput (ops/s), threads, replication (replicas
// per key), full_replication, total_ops, elapsed_s, rounds, ops_per_thread,
// cpu_s_per_thread, hot_key_share,
// gossip_messages, converged, pinned_threads. Bad parameters raise ValueError. Runs with the
// GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kernel_bench.hpp"

namespace py = pybind11;

namespace anna {

void bind_kernel_bench(py::module_& m) {
  m.def(
      "bench_kernel",
      [](int threads, bool full_replication, double zipf, std::size_t keys,
         std::size_t requests_per_thread, std::size_t value_size, int gossip_period_ms,
         double seconds, bool pin_threads, std::uint64_t seed) {
        KernelBenchConfig c;
        c.threads = threads;
        c.full_replication = full_replication;
        c.zipf = zipf;
        c.keys = keys;
        c.requests_per_thread = requests_per_thread;
        c.value_size = value_size;
        c.gossip_period_ms = gossip_period_ms;
        c.seconds = seconds;
        c.pin_threads = pin_threads;
        c.seed = seed;
        KernelBenchResult r;
        {
          py::gil_scoped_release release;
          r = run_kernel_bench(c);
        }
        py::dict d;
        d["throughput"] = r.throughput;
        d["threads"] = r.threads;
        d["replication"] = r.replication;
        d["full_replication"] = full_replication;
        d["total_ops"] = r.total_ops;
        d["elapsed_s"] = r.elapsed_s;
        d["rounds"] = r.rounds;
        d["ops_per_thread"] = r.ops_per_thread;
        d["cpu_s_per_thread"] = r.cpu_s_per_thread;
        d["hot_key_share"] = r.hot_key_share;
        d["gossip_messages"] = r.gossip_messages;
        d["converged"] = r.converged;
        d["pinned_threads"] = r.pinned_threads;
        return d;
      },
      "Fig. 2.6 kernel microbenchmark: update-only LWW PUTs, Zipf keys, no network, real "
      "WorkerCore path on pinned threads (replication 1, or full replication with gossip).",
      py::arg("threads"), py::arg("full_replication"), py::arg("zipf") = 4.0,
      py::arg("keys") = 100000, py::arg("requests_per_thread") = 20000,
      py::arg("value_size") = 256, py::arg("gossip_period_ms") = 100, py::arg("seconds") = 2.0,
      py::arg("pin_threads") = true, py::arg("seed") = 1);
}

}  // namespace anna
