#pragma once
// rschedd's Prometheus side (--metrics-listen, --metrics-textfile): the recorded intervals summed
// since the start of the run into a bounded set of series, served as Prometheus text (0.0.4) or
// OpenMetrics 1.0 (docs/FLEET.md lists the families). This header holds the summing
// (metrics_state, its keys chosen by top_keys; its text is rendered in metrics_render.cpp);
// metrics_board.hpp publishes it to the readers: the HTTP endpoint (http_server.hpp, its address
// and content type in metrics_endpoint.hpp) and the textfile (metrics_textfile.hpp).
//
// Cardinality is bounded: per-CPU series (one per CPU that had data), and for cgroups, comms and
// culprits and wakers at most `top` named series each plus one for the rest ("other"). Which keys
// are named follows recent activity (top_keys): samples decayed with a half-life of a minute; a
// free slot goes to the busiest key, and a key at least twice as busy as the least busy named one
// takes its slot. A key's series starts at zero when it gets its slot (`_created` = that interval's
// start) and what it did before stays in "other"; a key that loses its slot (or is idle for
// `idle_expiry_ns`) loses its series (Prometheus marks it stale) and counts in "other" again.
// So every series only ever grows while it exists (a shrinking counter would read as a reset).
// Keys that cannot be told from the rest — an empty comm (an absent label in Prometheus) or a
// comm spelt "other" — always count in "other".
#include "rsched/metrics/registry.hpp"
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/store/records.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace rsched::rschedd {

// Which keys of a family have a series of their own (see the header comment).
class top_keys {
public:
  top_keys(std::size_t n, std::int64_t idle_expiry_ns, std::int64_t half_life_ns = 60'000'000'000)
      : n_(n), expiry_ns_(idle_expiry_ns), half_life_ns_(half_life_ns) {}

  // One interval starting at `now_ns` (UTC): `samples` of every key seen in it. Decays the
  // scores, adds these, expires idle named keys, fills free slots with the busiest keys, then
  // lets a key twice as busy as the least busy named one take its slot. Keys for which
  // `eligible` is false are never named.
  void update(const std::map<std::string, std::uint64_t> &samples, std::int64_t now_ns,
              const std::function<bool(const std::string &)> &eligible = {});
  [[nodiscard]] bool named(const std::string &key) const { return named_.contains(key); }
  // When the key got its series (UTC ns); only for named keys.
  [[nodiscard]] std::int64_t created(const std::string &key) const {
    return named_.at(key).created_ns;
  }
  // Keys that lost their slot in the last update, idle or outrun (their series are dropped).
  [[nodiscard]] const std::vector<std::string> &expired() const { return expired_; }
  [[nodiscard]] std::size_t size() const { return named_.size(); }

private:
  struct slot {
    std::int64_t created_ns = 0;
    std::int64_t last_seen_ns = 0;
  };
  std::size_t n_;
  std::int64_t expiry_ns_;
  std::int64_t half_life_ns_;
  std::optional<std::int64_t> last_update_ns_;
  std::map<std::string, double> score_; // decayed samples of the keys seen lately
  std::map<std::string, slot> named_;
  std::vector<std::string> expired_;
};

struct metrics_config {
  std::size_t top = 20;                          // --metrics-top
  std::int64_t idle_expiry_ns = 900'000'000'000; // 15 minutes
  std::int64_t start_ns = 0;                     // UTC ns the run started (`_created`)
};

// The run so far, summed from the intervals. Plain data: copied to publish it.
class metrics_state {
public:
  explicit metrics_state(const metrics_config &cfg);

  void add(const store::interval_row &row, const interval_outcome &o);
  void render(std::ostream &out, openmetrics::format f) const;
  [[nodiscard]] std::uint64_t intervals() const { return intervals_; }

  // A keyed series: the metric values or counters since `created_ns`.
  struct cgroup_series {
    std::int64_t created_ns = 0;
    metrics::thread_set m;
    std::uint64_t migrations = 0;
    std::uint64_t cross_ccx = 0;
    std::uint64_t cross_numa = 0;
  };
  struct pressure_series {
    std::int64_t created_ns = 0;
    std::optional<double> some_ns, full_ns, throttled_ns, throttled_periods;
  };
  struct cpu_series {
    std::int64_t created_ns = 0;
    metrics::cpu_set m;
  };
  struct sum_series {
    std::int64_t created_ns = 0;
    metrics::value v; // comm: sched delay; culprit: wait in `total`, waits in `count`; waker:
                      // the sleep it ended in `total`, those sleeps in `count`
  };

private:
  metrics_config cfg_;
  top_keys cgroup_keys_;
  top_keys comm_keys_;
  top_keys culprit_keys_;
  top_keys waker_keys_;
  std::map<std::uint32_t, cpu_series> cpus_;
  std::map<std::string, cgroup_series> cgroups_; // named ones and "other"
  std::map<std::string, pressure_series> pressure_;
  std::map<std::string, sum_series> comms_;
  std::map<std::string, sum_series> culprits_;
  std::map<std::string, sum_series> wakers_;
  std::uint32_t groups_ = 0;

  // Health.
  std::uint64_t intervals_ = 0;
  std::uint64_t stalled_ = 0;
  std::uint64_t write_failures_ = 0;
  double recorded_ns_ = 0;
  double collect_ns_ = 0;
  double write_ns_ = 0;
  double maint_ns_ = 0;
  double cpu_ns_ = 0;
  std::optional<double> bpf_run_ns_;
  std::optional<double> bpf_runs_;
  std::array<std::uint64_t, RSCHED_DROP_COUNT> drops_{};
  std::optional<std::int64_t> rss_bytes_;
  std::int64_t last_dur_ns_ = 0;
  std::int64_t last_end_ns_ = 0;
};

} // namespace rsched::rschedd
