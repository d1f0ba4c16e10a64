#include "rsched/topology/migration.hpp"

namespace rsched::topology {

std::string_view to_string(migration_kind k) {
  switch (k) {
  case migration_kind::local:
    return "local";
  case migration_kind::cross_ccx:
    return "cross_ccx";
  case migration_kind::cross_numa:
    return "cross_numa";
  case migration_kind::unknown:
    break;
  }
  return "unknown";
}

migration_kind classify_migration(const topology &t, int src_cpu, int dst_cpu) {
  auto lookup = [&t](int cpu) -> std::optional<cpu_info> {
    if (cpu < 0 || static_cast<unsigned>(cpu) >= max_cpus) {
      return std::nullopt;
    }
    return t.find(static_cast<unsigned>(cpu));
  };
  const auto src = lookup(src_cpu);
  const auto dst = lookup(dst_cpu);
  if (!src || !dst) {
    return migration_kind::unknown;
  }
  return classify_ids(src->die, src->numa, dst->die, dst->numa);
}

cpu_tables make_cpu_tables(const topology &t) {
  cpu_tables tables{};
  tables.cpu_to_die.fill(-1);
  tables.cpu_to_numa.fill(-1);
  for (const auto &c : t.cpus) {
    if (c.cpu < max_cpus) {
      tables.cpu_to_die[c.cpu] = c.die;
      tables.cpu_to_numa[c.cpu] = c.numa;
    }
  }
  return tables;
}

} // namespace rsched::topology
