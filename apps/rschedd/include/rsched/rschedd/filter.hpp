#pragma once
// rschedd's live-display filters (-p, -c, --global-comm, --cgroup, -l), upstream's
// should_include_process as a pure object.
//
// Order, for every per-thread section: -p (wins over everything) -> --global-comm (a match includes
// the thread whatever -c and --cgroup say) -> otherwise -c must match when given AND --cgroup must
// match when given. Then -l: when the latency group is on and -l > 0, a thread whose cumulative
// scheduling-delay p50 (integer us) is below -l is hidden from every per-thread section,
// global-comm matches included; threads without delay data pass. The IPC and generic perf-event
// sections use include() only (upstream's CpuMetrics ignores -l). Per-CPU scheduling-delay rows
// with p50 < -l are hidden (cpu_delay_visible).
//
// Patterns are RE2 expressions, an unanchored search, OR'd per flag. --cgroup matches each
// thread's cgroup v2 path every time: the exact pattern `root` matches only "/"; a pattern that
// matches the text "root" matches every known cgroup; any other pattern matches a path when it
// matches the name of any component (descendants included); an unknown cgroup ("") matches none.
// Why RE2 and paths, and how that differs from upstream: docs/DIFFERENCES.md, "Live display".
#include "rsched/base/result.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace re2 {
class RE2;
} // namespace re2

namespace rsched::rschedd {

struct filter_options {
  std::optional<std::uint32_t> pid;     // -p (a kernel pid, i.e. a thread id)
  std::vector<std::string> comm;        // -c, repeatable, OR'd
  std::vector<std::string> global_comm; // --global-comm, repeatable, OR'd
  std::vector<std::string> cgroup;      // --cgroup, repeatable, OR'd
  std::uint64_t min_latency_us = 0;     // -l (0 = off)
  bool latency_on = true;               // the latency group is selected (-l applies only then)
};

class filter {
public:
  // No filtering at all: every thread is included.
  filter() = default;

  // Compiles every pattern. An invalid pattern gives a one-line error naming it and its flag.
  static result<filter> make(const filter_options &o);

  [[nodiscard]] const filter_options &options() const { return opt_; }

  // Upstream's order: pid -> global-comm -> (comm AND cgroup).
  [[nodiscard]] bool include(std::uint32_t tid, std::string_view comm,
                             std::string_view cgroup) const {
    if (opt_.pid && tid != *opt_.pid) {
      return false;
    }
    if (any_match(global_, comm)) {
      return true;
    }
    if (!comm_.empty() && !any_match(comm_, comm)) {
      return false;
    }
    if (!cgroup_.empty() && !cgroup_matches(cgroup)) {
      return false;
    }
    return true;
  }

  // Convenience for anything with tid, comm and cgroup members (thread_stats, ipc_row, ...).
  template <typename T> [[nodiscard]] bool include(const T &t) const {
    return include(t.tid, t.comm, t.cgroup);
  }

  // -l for a thread: false when the latency group is on, -l > 0, the thread has delay samples
  // and their p50 (integer us) is below -l.
  [[nodiscard]] bool passes_min_latency(const stats::histogram &cumulative_delay) const {
    if (!opt_.latency_on || opt_.min_latency_us == 0 || cumulative_delay.empty()) {
      return true;
    }
    return p50_us(cumulative_delay) >= opt_.min_latency_us;
  }

  // A per-CPU scheduling-delay row is shown when the CPU has samples and (with -l > 0) its p50
  // is at least -l (upstream print_cpu_metric_stats; the idle table has no -l filter).
  [[nodiscard]] bool cpu_delay_visible(const stats::histogram &cpu_delay) const {
    if (cpu_delay.empty()) {
      return false;
    }
    return opt_.min_latency_us == 0 || p50_us(cpu_delay) >= opt_.min_latency_us;
  }

  // True when the cgroup path matches any --cgroup pattern (see the header comment). With no
  // --cgroup pattern nothing matches; include() treats "no patterns" as "no cgroup filter".
  [[nodiscard]] bool cgroup_matches(std::string_view path) const;

private:
  using regex = std::shared_ptr<const re2::RE2>; // immutable, shared by copies of the filter

  struct cgroup_pattern {
    regex re;
    bool exact_root = false;  // the literal pattern "root"
    bool matches_all = false; // the regex matches the text "root"
  };

  static std::uint64_t p50_us(const stats::histogram &h) {
    return stats::percentile_or_zero(h, 50) / 1000;
  }

  static result<regex> compile(const char *flag, const std::string &pattern);

  static bool search(const regex &re, std::string_view s);
  static bool any_match(const std::vector<regex> &res, std::string_view s);

  filter_options opt_;
  std::vector<regex> comm_;
  std::vector<regex> global_;
  std::vector<cgroup_pattern> cgroup_;
};

} // namespace rsched::rschedd
