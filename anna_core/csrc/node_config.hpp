// Node configuration and the small JSON reader that parses it.
//
// Contract: parse_node_config(json) reads one flat JSON object with the keys of DESIGN.md
// "Node config keys": node_id (required, non-empty str), tier ("memory"|"disk" or 0|1),
// threads (int >= 1), ip (str), data_dir (str; required for disk), gossip_period_ms (int >= 1),
// max_value_bytes (int >= 1), pin_threads (bool), log_level (str). Missing keys take the
// defaults below; null means "default". Unknown keys, wrong value types, nested values and
// syntax errors throw std::invalid_argument naming the problem.
#pragma once

#include <cstddef>
#include <string>

namespace anna {

struct NodeConfig {
  std::string node_id;
  int tier = 0;  // anna.Tier: 0 memory, 1 disk
  int threads = 1;
  std::string ip = "127.0.0.1";
  std::string data_dir;
  int gossip_period_ms = 100;
  std::size_t max_value_bytes = 64u << 20;
  bool pin_threads = true;
  std::string log_level = "warning";
};

NodeConfig parse_node_config(const std::string& json);

}  // namespace anna
