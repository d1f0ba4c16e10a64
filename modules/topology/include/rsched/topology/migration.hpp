#pragma once
// Classification of a task migration by the topology distance it crosses (upstream's
// handle_migrate): a different NUMA node first, else a different die ("CCX"), else local.
#include "rsched/topology/topology.hpp"

#include <array>
#include <cstdint>
#include <string_view>

namespace rsched::topology {

enum class migration_kind {
  local,      // same die, or the ids needed to tell are unknown (-1)
  cross_ccx,  // same (or unknown) NUMA node, different die
  cross_numa, // different NUMA nodes
  unknown,    // a CPU outside the topology (offline, absent, negative or >= max_cpus)
};

std::string_view to_string(migration_kind k);

// The rule on raw ids, shared with the BPF side (which reads the tables below): NUMA nodes both
// >= 0 and different -> cross_numa; else dies both >= 0 and different -> cross_ccx; else local.
constexpr migration_kind classify_ids(int src_die, int src_numa, int dst_die, int dst_numa) {
  if (src_numa >= 0 && dst_numa >= 0 && src_numa != dst_numa) {
    return migration_kind::cross_numa;
  }
  if (src_die >= 0 && dst_die >= 0 && src_die != dst_die) {
    return migration_kind::cross_ccx;
  }
  return migration_kind::local;
}

// Classifies a migration from src_cpu to dst_cpu; unknown if either CPU is not in `t`.
migration_kind classify_migration(const topology &t, int src_cpu, int dst_cpu);

// The flat per-CPU tables the BPF programs get as rodata (upstream's cpu_to_die/cpu_to_numa):
// index = CPU number, -1 for CPUs not in the topology.
struct cpu_tables {
  std::array<std::int32_t, max_cpus> cpu_to_die;
  std::array<std::int32_t, max_cpus> cpu_to_numa;
};

cpu_tables make_cpu_tables(const topology &t);

} // namespace rsched::topology
