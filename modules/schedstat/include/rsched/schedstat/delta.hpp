#pragma once
// Per-interval deltas of two /proc/schedstat snapshots, system-wide sums, and ratios that never
// divide by zero.
#include "rsched/schedstat/schedstat.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::schedstat {

// Ratios of one set of CPU field deltas (one CPU or the sum). nullopt when the divisor is 0.
struct derived {
  std::optional<double> avg_run_delay_ns; // run_delay_ns / pcount: mean wait per timeslice
  std::optional<double> avg_timeslice_ns; // rq_cpu_time_ns / pcount: mean run time per timeslice
  std::optional<double> ttwu_local_share; // ttwu_local / ttwu_count, normally in [0, 1]
  std::optional<double> goidle_share;     // sched_goidle / sched_count, normally in [0, 1]
};

derived derive(const cpu_fields &d);

struct cpu_delta {
  std::uint32_t cpu = 0;
  cpu_fields fields;
  bool from_zero = false; // the CPU was not in the previous snapshot: values are absolute
};

struct domain_delta {
  std::uint32_t cpu = 0;
  std::uint32_t index = 0;
  std::string name;
  std::string cpumask;
  std::vector<field_value> fields; // domain_field_names(version), in that order
  bool from_zero = false; // new (cpu, index), or its name or cpumask changed: values are absolute
  [[nodiscard]] std::optional<std::uint64_t> field(std::string_view n) const {
    return find_field(fields, n);
  }
};

struct deltas {
  int version = default_version;
  std::optional<std::uint64_t> elapsed_jiffies; // when both timestamps exist and did not go back
  std::vector<cpu_delta> cpus;                  // the current snapshot's CPUs, in its order
  std::vector<domain_delta> domains;            // the current snapshot's domains, in its order
  cpu_fields cpu_totals;                        // field-wise sum over `cpus`
  std::vector<field_value> domain_totals;       // field-wise sum over all `domains` (upstream's
                                                // table), in domain_field_names(version) order
  derived totals;                               // derive(cpu_totals)
  std::uint64_t clamped_fields = 0; // counters that went backwards and were reported as 0

  [[nodiscard]] const cpu_delta *cpu(std::uint32_t id) const;
  [[nodiscard]] const domain_delta *domain(std::uint32_t cpu, std::uint32_t index) const;
  [[nodiscard]] std::optional<std::uint64_t> domain_total(std::string_view n) const {
    return find_field(domain_totals, n);
  }
};

// cur - prev, matched by CPU id and by (CPU id, domain index). Rules:
//  - a counter lower in `cur` than in `prev` (the kernel reset it: sched domains rebuilt on
//    hotplug or cpuset changes get fresh zeroed counters) gives 0 for that field and counts in
//    `clamped_fields`; upstream saturates CPU fields the same way but lets domain fields wrap to
//    ~2^64;
//  - a CPU or domain only in `cur` is diffed against zero (`from_zero`); note that a CPU coming
//    back online keeps its runqueue counters since boot, so its first delta is since boot, not
//    since the last interval: callers that want only the interval can skip `from_zero` entries;
//  - a domain whose name or cpumask changed was rebuilt by the kernel with zeroed counters, so it
//    is diffed against zero too;
//  - CPUs and domains only in `prev` (gone offline) are not in the result;
//  - sums saturate at 2^64 - 1 instead of wrapping.
// An empty `prev` (no CPU and no domain, e.g. `snapshot{}`) is accepted whatever its version and
// gives absolute values (upstream's first collect); otherwise the versions must match.
result<deltas> delta(const snapshot &prev, const snapshot &cur);

} // namespace rsched::schedstat
