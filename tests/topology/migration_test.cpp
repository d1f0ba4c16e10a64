// Migration classification (NUMA before die, unknown outside the map) and the flat BPF tables.
#include "rsched/topology/migration.hpp"

#include <catch2/catch.hpp>

using namespace rsched::topology;

namespace {

cpu_info cpu(unsigned n, int die, int numa) {
  return {n, -1, -1, die, -1, numa};
}

// cpus 0,1: die 0 node 0; 2: die 1 node 0; 3: die 2 node 1; 4: die 2 node -1;
// 5: die -1 node 1; 8: both unknown. 6, 7 are not in the map.
topology sample() {
  return topology{{cpu(0, 0, 0), cpu(1, 0, 0), cpu(2, 1, 0), cpu(3, 2, 1), cpu(4, 2, -1),
                   cpu(5, -1, 1), cpu(8, -1, -1)}};
}

} // namespace

TEST_CASE("classify_migration follows upstream's order", "[topology]") {
  const auto t = sample();
  CHECK(classify_migration(t, 0, 1) == migration_kind::local);
  CHECK(classify_migration(t, 0, 0) == migration_kind::local);
  CHECK(classify_migration(t, 0, 2) == migration_kind::cross_ccx);
  CHECK(classify_migration(t, 2, 0) == migration_kind::cross_ccx);
  CHECK(classify_migration(t, 0, 3) == migration_kind::cross_numa);
  CHECK(classify_migration(t, 3, 2) == migration_kind::cross_numa);
  // Same die but different nodes still counts as cross-NUMA (NUMA is checked first).
  const topology odd{{cpu(0, 0, 0), cpu(1, 0, 1)}};
  CHECK(classify_migration(odd, 0, 1) == migration_kind::cross_numa);
}

TEST_CASE("classify_migration with unknown ids", "[topology]") {
  const auto t = sample();
  CHECK(classify_migration(t, 3, 4) == migration_kind::local);     // node unknown, same die
  CHECK(classify_migration(t, 0, 4) == migration_kind::cross_ccx); // node unknown, dies differ
  CHECK(classify_migration(t, 0, 5) == migration_kind::cross_numa);
  CHECK(classify_migration(t, 3, 5) == migration_kind::local); // same node, die unknown
  CHECK(classify_migration(t, 0, 8) == migration_kind::local);
}

TEST_CASE("classify_migration outside the map is unknown", "[topology]") {
  const auto t = sample();
  CHECK(classify_migration(t, 0, 6) == migration_kind::unknown);
  CHECK(classify_migration(t, 7, 0) == migration_kind::unknown);
  CHECK(classify_migration(t, -1, 0) == migration_kind::unknown);
  CHECK(classify_migration(t, 0, 1024) == migration_kind::unknown);
  CHECK(classify_migration(t, 0, 1 << 30) == migration_kind::unknown);
  CHECK(classify_migration(topology{}, 0, 0) == migration_kind::unknown);
}

TEST_CASE("to_string(migration_kind)", "[topology]") {
  CHECK(to_string(migration_kind::local) == "local");
  CHECK(to_string(migration_kind::cross_ccx) == "cross_ccx");
  CHECK(to_string(migration_kind::cross_numa) == "cross_numa");
  CHECK(to_string(migration_kind::unknown) == "unknown");
}

TEST_CASE("cpu tables for BPF rodata", "[topology]") {
  const auto t = sample();
  const auto tables = make_cpu_tables(t);
  CHECK(tables.cpu_to_die[0] == 0);
  CHECK(tables.cpu_to_die[2] == 1);
  CHECK(tables.cpu_to_numa[3] == 1);
  CHECK(tables.cpu_to_numa[4] == -1);
  CHECK(tables.cpu_to_die[6] == -1);
  CHECK(tables.cpu_to_numa[6] == -1);
  CHECK(tables.cpu_to_die[1023] == -1);
  // Classifying through the tables (as BPF does) agrees with classify_migration for every pair
  // of CPUs in the map.
  for (const auto &s : t.cpus) {
    for (const auto &d : t.cpus) {
      const auto via_tables = classify_ids(tables.cpu_to_die[s.cpu], tables.cpu_to_numa[s.cpu],
                                           tables.cpu_to_die[d.cpu], tables.cpu_to_numa[d.cpu]);
      CHECK(via_tables == classify_migration(t, static_cast<int>(s.cpu), static_cast<int>(d.cpu)));
    }
  }
  static_assert(classify_ids(0, 0, 1, 1) == migration_kind::cross_numa);
  static_assert(classify_ids(0, 0, 1, 0) == migration_kind::cross_ccx);
  static_assert(classify_ids(-1, -1, 1, 0) == migration_kind::local);
}
