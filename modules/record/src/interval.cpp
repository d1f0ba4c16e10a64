#include "rsched/record/interval.hpp"

#include "rsched/collect/delta.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <tuple>
#include <utility>

namespace rsched::record {

namespace {

// Adds a tick's blame (slot by slot: one slot per culprit) to the interval's, per culprit.
void add_blame(acc_thread &a, const collect::blame_state &b) {
  b.for_each_live(~0U, [&](std::size_t i) {
    if (const auto &s = b.slots[i]; !s.n.empty()) {
      a.culprit(s.who) += {s.n, s.cpu, s.prio};
    }
  });
  a.idle += b.idle;
  a.unknown += b.unknown;
  a.other += b.other;
  if (b.waiter.known()) {
    a.waiter = b.waiter;
  }
}

} // namespace

void interval_acc::add_tick(const collect::interval_delta &d, bool per_second) {
  collect::interval_delta copy = d;
  add_tick(std::move(copy), per_second);
}

namespace {
std::size_t hash_of(const attr_key &k) {
  std::uint64_t h = (k.key.start_time * 0x9E3779B97F4A7C15ULL) ^ k.key.tid;
  h ^= k.cgroup_id * 0xC2B2AE3D27D4EB4FULL;
  h ^= std::hash<std::string>{}(k.comm);
  h ^= h >> 29;
  return static_cast<std::size_t>(h * 0xBF58476D1CE4E5B9ULL);
}
} // namespace

void interval_acc::rehash(std::size_t slots) {
  index_.assign(slots, empty_slot);
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    std::size_t at = hash_of(rows_[i].key) & (slots - 1);
    while (index_[at] != empty_slot) {
      at = (at + 1) & (slots - 1);
    }
    index_[at] = static_cast<std::uint32_t>(i);
  }
}

std::size_t interval_acc::find_or_add(attr_key &&k) {
  if (2 * (rows_.size() + 1) > index_.size()) {
    rehash(std::max<std::size_t>(64, 2 * index_.size()));
  }
  const std::size_t mask = index_.size() - 1;
  std::size_t at = hash_of(k) & mask;
  for (; index_[at] != empty_slot; at = (at + 1) & mask) {
    if (rows_[index_[at]].key == k) {
      return index_[at];
    }
  }
  index_[at] = static_cast<std::uint32_t>(rows_.size());
  rows_.push_back({std::move(k), {}});
  return rows_.size() - 1;
}

void interval_acc::add_tick(collect::interval_delta &&d, bool per_second) {
  for (auto &[id, k] : d.stacks) {
    stacks_.try_emplace(id, std::move(k));
  }
  constexpr auto defs = metrics::entries<metrics::scope::thread>();
  for (auto &t : d.threads) {
    const std::size_t before = rows_.size();
    const std::size_t at = find_or_add(attr_key{t.key, t.cgroup_id, t.comm});
    const bool fresh = at == before;
    acc_thread &a = rows_[at].a;
    if (!t.c.blame.empty()) {
      add_blame(a, t.c.blame);
    }
    t.c.blame = {};
    const collect::migration_counters migrations = t.c.migrations;
    const collect::counter_values counters = t.c.counters;
    if (fresh) {
      a.s = std::move(t);
      a.event_rates.assign(events_, stats::histogram{stats::layout::log2, {}});
    } else {
      collect::accumulate(a.s.c, t.c);
      a.s.tgid = t.tgid;
      a.s.dead = a.s.dead || t.dead;
    }
    if (!per_second) {
      continue;
    }
    if (migrations.count > 0) {
      for (std::size_t i = 0; i < defs.size(); ++i) {
        if (defs[i].from == metrics::origin::per_second) {
          const std::uint64_t v = collect::tally_of(migrations, defs[i].samples);
          a.s.c.m.at(i).add_sample(v);
        }
      }
    }
    for (std::size_t e = 0; e < events_; ++e) {
      const auto v = counters[RSCHED_CTR_GENERIC0 + e];
      if (v > 0) {
        a.event_rates[e].add(v);
      }
    }
  }
  for (auto &c : d.cpus) {
    auto it = cpus_.find(c.cpu);
    if (it == cpus_.end()) {
      cpus_.emplace(c.cpu, std::move(c));
    } else {
      metrics::accumulate(it->second.m, c.m);
    }
  }
  for (std::size_t i = 0; i < drops_.size(); ++i) {
    drops_[i] += d.drops[i];
  }
}

namespace {

// into += a: two rows of one thread.
void merge_into(acc_thread &into, const acc_thread &a) {
  collect::accumulate(into.s.c, a.s.c);
  into.s.dead = into.s.dead || a.s.dead;
  for (std::size_t e = 0; e < into.event_rates.size() && e < a.event_rates.size(); ++e) {
    (void)stats::merge_into(into.event_rates[e], a.event_rates[e]);
  }
  for (const auto &[who, n] : a.culprits) {
    into.culprit(who) += n;
  }
  into.idle += a.idle;
  into.unknown += a.unknown;
  into.other += a.other;
  if (a.waiter.known()) {
    into.waiter = a.waiter;
  }
}

// A blame row of a culprit process (pid 0: several processes of one comm and cgroup).
store::blame_row &add_process_row(store::thread_row &r, const collect::culprit &who,
                                  const collect::blame_counts &n, const std::string &cgroup) {
  store::blame_row &b = r.blame.emplace_back();
  b.kind = store::culprit_kind::process;
  b.pid = who.tgid;
  b.comm.assign(who.comm.data(), strnlen(who.comm.data(), who.comm.size()));
  b.cgroup = cgroup;
  b.wait_ns = n.wait_ns;
  b.waits = n.waits;
  b.preempts = n.preempts;
  b.approx_ns = n.approx_ns;
  return b;
}

// The culprits past the first store::max_culprits, summed per comm and cgroup (a pool of
// workers, a build's compilers: named by their comm rather than lost in <other>) into the rows
// already kept for that comm's processes together (pid 0, the kernel's own merge when its slots
// ran out) or new rows, the store::max_culprit_groups with the most wait; the rest into `other`.
// A wait behind two merged processes counts in both their `waits`.
void add_culprit_groups(store::thread_row &r, std::size_t kept,
                        std::span<const std::pair<collect::culprit, acc_thread::culprit_acc>> rest,
                        const std::function<std::string(std::uint64_t)> &cgroup_path,
                        collect::blame_counts &other) {
  std::map<std::pair<std::array<char, RSCHED_COMM_LEN>, std::uint64_t>, collect::blame_counts>
      groups;
  for (const auto &[who, c] : rest) {
    groups[{who.comm, who.cgroup_id}] += c.n;
  }
  std::vector<std::pair<collect::culprit, collect::blame_counts>> order;
  order.reserve(groups.size());
  for (const auto &[key, n] : groups) {
    collect::culprit who;
    who.comm = key.first;
    who.cgroup_id = key.second;
    order.emplace_back(who, n);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto &x, const auto &y) {
    return x.second.wait_ns > y.second.wait_ns;
  });
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto &[who, n] = order[i];
    const std::string cgroup = cgroup_path(who.cgroup_id);
    const std::string comm(who.comm.data(), strnlen(who.comm.data(), who.comm.size()));
    auto same = std::find_if(r.blame.begin(), r.blame.begin() + static_cast<std::ptrdiff_t>(kept),
                             [&](const store::blame_row &b) {
                               return b.pid == 0 && b.comm == comm && b.cgroup == cgroup;
                             });
    if (same != r.blame.begin() + static_cast<std::ptrdiff_t>(kept)) {
      same->wait_ns += n.wait_ns;
      same->waits += n.waits;
      same->preempts += n.preempts;
      same->approx_ns += n.approx_ns;
    } else if (i < store::max_culprit_groups) {
      add_process_row(r, who, n, cgroup);
    } else {
      other += n;
    }
  }
}

// The blame rows of a thread: the store::max_culprits culprits with the most wait (then
// preemptions), the rest summed per comm (add_culprit_groups) and into <other>, then the
// pseudo-culprits with counts.
void add_blame_rows(store::thread_row &r, acc_thread &a,
                    const std::function<std::string(std::uint64_t)> &cgroup_path) {
  if (a.culprits.empty() && a.idle.empty() && a.unknown.empty() && a.other.empty()) {
    return;
  }
  // The most wait first (then preemptions, waits); equals in culprit order. Sorted in place:
  // the thread's culprits are not used again.
  auto &order = a.culprits;
  std::sort(order.begin(), order.end(), [](const auto &x, const auto &y) {
    const auto kx = std::tie(x.second.n.wait_ns, x.second.n.preempts, x.second.n.waits);
    const auto ky = std::tie(y.second.n.wait_ns, y.second.n.preempts, y.second.n.waits);
    if (kx != ky) {
      return kx > ky;
    }
    return x.first < y.first;
  });
  const std::size_t kept = std::min(order.size(), store::max_culprits);
  r.blame.reserve(kept + store::max_culprit_groups + 3);
  collect::blame_counts other = a.other;
  for (std::size_t i = 0; i < kept; ++i) {
    const auto &[who, c] = order[i];
    store::blame_row &b = add_process_row(r, who, c.n, cgroup_path(who.cgroup_id));
    if (c.prio.known()) {
      b.cpu = c.cpu;
      b.policy = c.prio.policy;
      b.prio = c.prio.prio1 - 1;
    }
    if (a.waiter.known()) {
      b.waiter_policy = a.waiter.policy;
      b.waiter_prio = a.waiter.prio1 - 1;
    }
  }
  add_culprit_groups(r, kept, std::span(order).subspan(kept), cgroup_path, other);
  const std::pair<store::culprit_kind, collect::blame_counts> pseudo[] = {
      {store::culprit_kind::idle, a.idle},
      {store::culprit_kind::unknown, a.unknown},
      {store::culprit_kind::other, other}};
  for (const auto &[kind, n] : pseudo) {
    if (!n.empty()) {
      store::blame_row &b = r.blame.emplace_back();
      b.kind = kind;
      b.wait_ns = n.wait_ns;
      b.waits = n.waits;
      b.preempts = n.preempts;
      b.approx_ns = n.approx_ns;
    }
  }
}

// The wakeup rows of a thread: the store::max_wakers processes with the most sleep ended (then
// count), the rest summed into <other>, then the pseudo-wakers; one row per state with counts.
void add_wakeup_rows(store::thread_row &r, const collect::wakeup_state &w,
                     const std::function<std::string(std::uint64_t)> &cgroup_path,
                     const collect::kernel_stacks &stacks) {
  if (w.empty()) {
    return;
  }
  r.io_read_bytes = w.io_read_bytes;
  r.io_write_bytes = w.io_write_bytes;
  // Where its D sleeps and long sleeps blocked: per stack (a stack not resolved goes with
  // <other>).
  for (const auto &b : w.stacks) {
    if (b.sleep_ns == 0 && b.count == 0) {
      continue;
    }
    const auto k = b.stack == collect::other_stack ? stacks.end() : stacks.find(b.stack);
    const std::uint64_t hash = k == stacks.end() ? 0 : k->second.hash;
    auto same = std::find_if(r.blocked.begin(), r.blocked.end(),
                             [&](const store::blocked_row &x) { return x.hash == hash; });
    if (same == r.blocked.end()) {
      store::blocked_row &x = r.blocked.emplace_back();
      x.hash = hash;
      if (k != stacks.end()) {
        x.frames = k->second.frames;
        x.state = k->second.state;
      }
      same = r.blocked.end() - 1;
    }
    same->sleep_ns += b.sleep_ns;
    same->count += b.count;
  }
  const auto total = [](const collect::wakeup_counts &n) {
    std::uint64_t ns = 0, c = 0;
    for (std::size_t s = 0; s < n.count.size(); ++s) {
      ns += n.sleep_ns[s];
      c += n.count[s];
    }
    return std::pair{ns, c};
  };
  std::vector<const collect::wakeup_entry *> procs;
  std::array<collect::wakeup_counts, RSCHED_WAKEUP_PSEUDO> pseudo{};
  for (const auto &x : w.e) {
    if (x.who.kind == 0) {
      procs.push_back(&x);
    } else if (x.who.kind <= RSCHED_WAKEUP_PSEUDO) {
      pseudo[x.who.kind - 1U] += x.n;
    }
  }
  std::sort(procs.begin(), procs.end(), [&](const auto *a, const auto *b) {
    const auto ka = total(a->n), kb = total(b->n);
    if (ka != kb) {
      return ka > kb;
    }
    return a->who < b->who;
  });
  const auto emit = [&](store::waker_kind kind, const collect::waker *who,
                        const collect::wakeup_counts &n) {
    for (std::size_t s = 0; s < n.count.size(); ++s) {
      if (n.count[s] == 0 && n.sleep_ns[s] == 0) {
        continue;
      }
      store::wakeup_row &x = r.wakeups.emplace_back();
      x.kind = kind;
      if (who != nullptr) {
        x.pid = who->tgid;
        x.comm.assign(who->comm.data(), strnlen(who->comm.data(), who->comm.size()));
        x.cgroup = cgroup_path(who->cgroup_id);
      }
      x.state = static_cast<std::uint8_t>(s);
      x.sleep_ns = n.sleep_ns[s];
      x.count = n.count[s];
    }
  };
  for (std::size_t i = 0; i < procs.size(); ++i) {
    if (i >= store::max_wakers) {
      pseudo[RSCHED_WAKER_OTHER] += procs[i]->n;
    } else {
      emit(store::waker_kind::process, &procs[i]->who, procs[i]->n);
    }
  }
  for (std::size_t j = 0; j < pseudo.size(); ++j) {
    emit(static_cast<store::waker_kind>(j + 1), nullptr, pseudo[j]);
  }
}

bool written(const metrics::def &d, const row_options &o) {
  if (d.from != metrics::origin::per_second) {
    return true; // the kernel fills only the run's groups; empty values are not written
  }
  switch (d.need) {
  case metrics::needs::dies:
    return o.migration && o.dies > 1;
  case metrics::needs::numa_nodes:
    return o.migration && o.numa_nodes > 1;
  case metrics::needs::nothing:
    break;
  }
  return o.migration;
}

// The store row of thread `key` under one attribution (`a`, its cgroup `path`); the
// histograms are moved out of `a` (which is not used again).
void add_thread_row(store::interval_row &row, const collect::thread_key &key, acc_thread &a,
                    std::string path, const row_options &o, std::size_t events,
                    const std::function<std::string(std::uint64_t)> &cgroup_path,
                    const collect::kernel_stacks &stacks) {
  const auto &c = a.s.c;
  store::thread_row &r = row.threads.emplace_back();
  r.tid = key.tid;
  r.pid = a.s.tgid;
  r.start_time_ns = key.start_time;
  r.comm = a.s.comm;
  r.cgroup = std::move(path);
  r.m = std::move(a.s.c.m);
  constexpr auto defs = metrics::entries<metrics::scope::thread>();
  for (std::size_t i = 0; i < defs.size(); ++i) {
    if (!written(defs[i], o)) {
      r.m.reset(i);
    }
  }
  r.migrations = c.migrations.count;
  r.cross_ccx = c.migrations.cross_ccx;
  r.cross_numa = c.migrations.cross_numa;
  if (o.ipc) {
    r.user_cycles = c.counters[RSCHED_CTR_USER_CYCLES];
    r.kernel_cycles = c.counters[RSCHED_CTR_KERNEL_CYCLES];
    r.user_instructions = c.counters[RSCHED_CTR_USER_INSTRUCTIONS];
    r.kernel_instructions = c.counters[RSCHED_CTR_KERNEL_INSTRUCTIONS];
    r.has_ipc = r.user_cycles + r.kernel_cycles + r.user_instructions + r.kernel_instructions != 0;
  }
  for (std::size_t e = 0; e < events; ++e) {
    const auto v = c.counters[RSCHED_CTR_GENERIC0 + e];
    if (v != 0) {
      r.events.emplace_back(static_cast<std::uint32_t>(e), v);
      if (!a.event_rates[e].empty()) {
        r.event_rates.emplace_back(static_cast<std::uint32_t>(e), a.event_rates[e]);
      }
    }
  }
  add_blame_rows(r, a, cgroup_path);
  add_wakeup_rows(r, c.wakeup, cgroup_path, stacks);
}

} // namespace

namespace {

store::interval_row make_row(interval_acc &acc,
                             const std::function<std::string(std::uint64_t)> &cgroup_path,
                             const row_options &o) {
  store::interval_row row;
  row.drops = acc.drops();
  row.threads.reserve(acc.threads().size());
  // Rows of one thread are adjacent in the accumulator's order; only a merge copies.
  struct pending {
    std::string path;
    acc_thread *a;
  };
  std::vector<pending> one_thread;
  std::deque<acc_thread> copies; // merged rows
  const auto flush = [&](const collect::thread_key &key) {
    for (auto &p : one_thread) {
      add_thread_row(row, key, *p.a, std::move(p.path), o, acc.events(), cgroup_path, acc.stacks());
    }
    one_thread.clear();
    copies.clear();
  };
  // In attribution order (rows of one thread adjacent), as the store's rows always came:
  // sorted by thread and cgroup id first, the comm only for a thread's rows of one cgroup.
  auto &rows = acc.threads();
  struct pos {
    collect::thread_key key;
    std::uint64_t cgroup_id;
    std::uint32_t at;
  };
  std::vector<pos> order;
  order.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    order.push_back({rows[i].key.key, rows[i].key.cgroup_id, static_cast<std::uint32_t>(i)});
  }
  std::sort(order.begin(), order.end(), [&rows](const pos &x, const pos &y) {
    if (x.key != y.key || x.cgroup_id != y.cgroup_id) {
      return std::tie(x.key, x.cgroup_id) < std::tie(y.key, y.cgroup_id);
    }
    return rows[x.at].key.comm < rows[y.at].key.comm;
  });
  const collect::thread_key *current = nullptr;
  for (const pos &next : order) {
    const auto &key = rows[next.at].key;
    acc_thread &a = rows[next.at].a;
    if (current != nullptr && !(*current == key.key)) {
      flush(*current);
    }
    current = &key.key;
    std::string path = cgroup_path(a.s.cgroup_id);
    auto same = std::find_if(one_thread.begin(), one_thread.end(), [&](const pending &p) {
      return p.path == path && p.a->s.comm == a.s.comm;
    });
    if (same == one_thread.end()) {
      one_thread.push_back({std::move(path), &a});
    } else {
      acc_thread &m = copies.emplace_back(*same->a);
      merge_into(m, a);
      same->a = &m;
    }
  }
  if (current != nullptr) {
    flush(*current);
  }
  for (const auto &[cpu, c] : std::as_const(acc).cpus()) {
    store::cpu_row r;
    r.cpu = cpu;
    r.m = c.m;
    row.cpus.push_back(std::move(r));
  }
  return row;
}

} // namespace

store::interval_row to_row(const interval_acc &acc,
                           const std::function<std::string(std::uint64_t)> &cgroup_path,
                           const row_options &o) {
  interval_acc copy = acc;
  return to_row(std::move(copy), cgroup_path, o);
}

store::interval_row to_row(interval_acc &&acc,
                           const std::function<std::string(std::uint64_t)> &cgroup_path,
                           const row_options &o) {
  auto row = make_row(acc, cgroup_path, o);
  acc.clear();
  return row;
}

} // namespace rsched::record
