// Deltas of two schedstat snapshots; the rules are in delta.hpp.
#include "rsched/schedstat/delta.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace rsched::schedstat {
namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  return b > max - a ? max : a + b;
}

std::optional<double> ratio(std::uint64_t num, std::uint64_t den) {
  if (den == 0) {
    return std::nullopt;
  }
  return static_cast<double>(num) / static_cast<double>(den);
}

std::uint64_t domain_key(std::uint32_t cpu, std::uint32_t index) {
  return (static_cast<std::uint64_t>(cpu) << 32) | index;
}

} // namespace

derived derive(const cpu_fields &d) {
  derived out;
  out.avg_run_delay_ns = ratio(d.run_delay_ns, d.pcount);
  out.avg_timeslice_ns = ratio(d.rq_cpu_time_ns, d.pcount);
  out.ttwu_local_share = ratio(d.ttwu_local, d.ttwu_count);
  out.goidle_share = ratio(d.sched_goidle, d.sched_count);
  return out;
}

const cpu_delta *deltas::cpu(std::uint32_t id) const {
  const auto it =
      std::find_if(cpus.begin(), cpus.end(), [&](const cpu_delta &c) { return c.cpu == id; });
  return it == cpus.end() ? nullptr : &*it;
}

const domain_delta *deltas::domain(std::uint32_t cpu_id, std::uint32_t index) const {
  const auto it = std::find_if(domains.begin(), domains.end(), [&](const domain_delta &d) {
    return d.cpu == cpu_id && d.index == index;
  });
  return it == domains.end() ? nullptr : &*it;
}

result<deltas> delta(const snapshot &prev, const snapshot &cur) {
  const bool prev_empty = prev.cpus.empty() && prev.domains.empty();
  if (!prev_empty && prev.version != cur.version) {
    return make_error(
        fmt::format("schedstat version changed from {} to {}", prev.version, cur.version));
  }
  const std::span<const std::string> names = domain_field_names(cur.version);
  if (names.empty()) {
    return make_error(fmt::format("unsupported schedstat version {}", cur.version));
  }

  deltas out;
  out.version = cur.version;
  if (prev.timestamp_jiffies && cur.timestamp_jiffies &&
      *cur.timestamp_jiffies >= *prev.timestamp_jiffies) {
    out.elapsed_jiffies = *cur.timestamp_jiffies - *prev.timestamp_jiffies;
  }
  auto diff = [&out](std::uint64_t now, std::uint64_t before) -> std::uint64_t {
    if (now < before) {
      ++out.clamped_fields;
      return 0;
    }
    return now - before;
  };

  std::unordered_map<std::uint32_t, const cpu_record *> prev_cpus;
  for (const auto &c : prev.cpus) {
    prev_cpus.emplace(c.cpu, &c);
  }
  const cpu_fields zero_cpu{};
  out.cpus.reserve(cur.cpus.size());
  for (const auto &c : cur.cpus) {
    const auto it = prev_cpus.find(c.cpu);
    cpu_delta cd;
    cd.cpu = c.cpu;
    cd.from_zero = it == prev_cpus.end();
    const cpu_fields &base = cd.from_zero ? zero_cpu : it->second->fields;
    for (const auto &f : cpu_field_layout) {
      cd.fields.*f.member = diff(c.fields.*f.member, base.*f.member);
      out.cpu_totals.*f.member = saturating_add(out.cpu_totals.*f.member, cd.fields.*f.member);
    }
    out.cpus.push_back(cd);
  }
  out.totals = derive(out.cpu_totals);

  std::unordered_map<std::uint64_t, const domain_record *> prev_domains;
  for (const auto &d : prev.domains) {
    if (d.fields.size() != names.size()) {
      return make_error(fmt::format("domain{} of cpu{} in the previous snapshot has {} fields, "
                                    "version {} has {}",
                                    d.index, d.cpu, d.fields.size(), prev.version, names.size()));
    }
    prev_domains.emplace(domain_key(d.cpu, d.index), &d);
  }
  out.domain_totals.reserve(names.size());
  for (const auto &n : names) {
    out.domain_totals.push_back(field_value{n, 0});
  }
  out.domains.reserve(cur.domains.size());
  for (const auto &d : cur.domains) {
    if (d.fields.size() != names.size()) {
      return make_error(fmt::format("domain{} of cpu{} has {} fields, version {} has {}", d.index,
                                    d.cpu, d.fields.size(), cur.version, names.size()));
    }
    const auto it = prev_domains.find(domain_key(d.cpu, d.index));
    const domain_record *base = it == prev_domains.end() ? nullptr : it->second;
    if (base != nullptr && (base->name != d.name || base->cpumask != d.cpumask)) {
      base = nullptr; // rebuilt by the kernel: its counters restarted from 0
    }
    domain_delta dd;
    dd.cpu = d.cpu;
    dd.index = d.index;
    dd.name = d.name;
    dd.cpumask = d.cpumask;
    dd.from_zero = base == nullptr;
    dd.fields.reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::uint64_t v = diff(d.fields[i].value, base ? base->fields[i].value : 0);
      dd.fields.push_back(field_value{names[i], v});
      out.domain_totals[i].value = saturating_add(out.domain_totals[i].value, v);
    }
    out.domains.push_back(std::move(dd));
  }
  return out;
}

} // namespace rsched::schedstat
