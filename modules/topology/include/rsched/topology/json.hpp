#pragma once
// Upstream's topology file (rsched --gen-topology writes it, --topology FILE reads it):
//
//   {
//     "cpus": {
//       "0": {
//         "die": 0,
//         "numa": 0
//       }
//     }
//   }
//
// It lets a topology captured on one machine be replayed, or a wrong sysfs be overridden.
#include "rsched/base/result.hpp"
#include "rsched/topology/topology.hpp"

#include <string>
#include <string_view>

namespace rsched::topology {

// The text serde_json::to_string_pretty produces for upstream's TopologyJson: 2-space indent,
// CPU keys sorted as strings ("0", "1", "10", "100", "11", ...; upstream uses a
// BTreeMap<String, _>), only CPUs < max_cpus with die >= 0 or numa >= 0, and `"cpus": {}` when
// none. No trailing newline (upstream's println! adds it).
std::string to_json(const topology &t);

// Parses that format. Unknown members of any JSON type are ignored at every level; "cpus" and,
// in each CPU object, "die" and "numa" (integers fitting int32) are required. A CPU key must be
// decimal digits; keys >= max_cpus are ignored (their objects are still checked); the same CPU
// twice ("1" and "01") is an error. Every error is one line starting "topology JSON: ";
// malformed JSON (nlohmann-json's syntax message) ends "at line L column C", an error in what the
// document says names the field and the CPU key instead.
// The result has package, core and llc = -1 (the file does not carry them).
result<topology> from_json(std::string_view text);

} // namespace rsched::topology
