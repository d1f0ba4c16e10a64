#pragma once
// Shared by the incident timeline targets: what .import-incidents does with a file before it opens
// the database (rsched::query::import_incidents): the records, then the times of the columns it
// may read times from, in the local zone (set to Europe/Berlin by the target's initializer, so
// runs are reproducible).
#include "rsched/base/timefmt.hpp"

#include "annotations_records.hpp"
#include "fuzz_check.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace rsched::fuzz {

inline constexpr std::int64_t fixed_now_ns = 1'795'183'380'000'000'000; // 2026-11-20 14:03Z

inline void use_berlin_as_local() {
  setenv("TZ", ":Europe/Berlin", 1);
}

// Errors are one line (the caller prefixes "importing incidents: " and prints it).
inline void check_error(const std::string &msg) {
  RSCHED_FUZZ_CHECK(!msg.empty());
  RSCHED_FUZZ_CHECK(msg.find('\n') == std::string::npos);
}

inline void parse_times(const std::vector<query::detail::incident_record> &recs) {
  const auto local = timefmt::zone::local();
  for (const auto &rec : recs) {
    for (const auto &[key, value] : rec) {
      if (!value) {
        continue;
      }
      if (key == "start" || key == "end" || key == "created_on" || key == "resolved_on") {
        (void)timefmt::parse_time(*value, fixed_now_ns, local);
      }
    }
  }
}

} // namespace rsched::fuzz
