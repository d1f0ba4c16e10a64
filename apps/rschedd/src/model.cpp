// The live model's side of an interval (model.hpp): folds the rows the recorder wrote into the
// cumulative tables and keeps them bounded. The interval assembly itself is rsched::record.
#include "rsched/rschedd/model.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace rsched::rschedd {

void fold_row(model &m, const store::interval_row &row, bool ipc,
              const std::vector<std::string> &event_names, std::uint64_t seq) {
  m.ipc.clear();
  m.events.clear();
  for (const auto &name : event_names) {
    m.events.push_back({name, {}});
  }
  for (const auto &r : row.threads) {
    thread_stats &t = m.threads[{r.tid, r.start_time_ns}];
    t.tid = r.tid;
    t.tgid = r.pid;
    t.comm = r.comm;
    t.cgroup = r.cgroup;
    t.last_seen = seq;
    metrics::accumulate(t.m, r.m, false); // the live view reads no fine tail
    if (ipc && r.has_ipc) {
      m.ipc.push_back({r.tid, r.pid, r.comm, r.cgroup, r.user_cycles, r.kernel_cycles,
                       r.user_instructions, r.kernel_instructions});
    }
    for (const auto &[e, h] : r.event_rates) {
      if (e < m.events.size() && !h.empty()) {
        m.events[e].threads.push_back({r.tid, r.pid, r.comm, r.cgroup, h});
      }
    }
  }
  for (const auto &c : row.cpus) {
    cpu_stats &s = m.cpus[c.cpu];
    s.cpu = c.cpu;
    metrics::accumulate(s.m, c.m);
  }
}

void bound_threads(model &m, std::size_t max_threads) {
  if (m.threads.size() <= max_threads) {
    return;
  }
  const std::size_t keep = max_threads - max_threads / 10;
  std::vector<std::pair<std::uint64_t, thread_id>> age;
  age.reserve(m.threads.size());
  for (const auto &[id, t] : m.threads) {
    age.emplace_back(t.last_seen, id);
  }
  const auto cut = age.begin() + static_cast<std::ptrdiff_t>(age.size() - keep);
  std::nth_element(age.begin(), cut, age.end());
  for (auto it = age.begin(); it != cut; ++it) {
    m.threads.erase(it->second);
  }
  m.evicted_threads += static_cast<std::uint64_t>(cut - age.begin());
}

} // namespace rsched::rschedd
