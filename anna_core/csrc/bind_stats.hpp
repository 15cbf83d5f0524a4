// A worker's counters as a Python dict: one conversion, used by the bindings of the node
// (`Node.stats()`) and of the sans-I/O core (`WorkerCore.stats()`).
#pragma once

#include <pybind11/pybind11.h>

#include "worker_core.hpp"

namespace anna {

pybind11::dict worker_stats_dict(const WorkerStats& s);

}  // namespace anna
