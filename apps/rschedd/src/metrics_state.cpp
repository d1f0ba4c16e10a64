// The intervals summed into bounded series (metrics_state.hpp): top_keys and metrics_state::add.
#include "rsched/rschedd/metrics_state.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

namespace rsched::rschedd {

namespace {

const std::string other_key = "other";
const std::string unknown_cgroup = "<unknown>";

bool reserved_comm(const std::string &c) {
  return c.empty() || c == "other" || c == "<idle>" || c == "<unknown>";
}

std::uint64_t samples_of(const metrics::thread_set &m) {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < metrics::thread_set::n; ++i) {
    n += m.at(i).count;
  }
  return n;
}

// A culprit's key: "p:comm" for a process, "x:<idle>" / "x:<unknown>" for the pseudo-culprits,
// "o:" for the ones past the bound (always in "other").
std::string culprit_key(const store::blame_row &b) {
  switch (b.kind) {
  case store::culprit_kind::process:
    return "p:" + b.comm;
  case store::culprit_kind::idle:
    return "x:<idle>";
  case store::culprit_kind::unknown:
    return "x:<unknown>";
  case store::culprit_kind::other:
    break;
  }
  return "o:";
}

// A waker's key: "p:comm" for a process, "x:<hardirq>" and the like for the pseudo-wakers,
// "o:" for <other> (the wakers past the kernel's slots), which goes to "other".
std::string waker_key(const store::wakeup_row &w) {
  switch (w.kind) {
  case store::waker_kind::process:
    return "p:" + w.comm;
  case store::waker_kind::hardirq:
    return "x:<hardirq>";
  case store::waker_kind::softirq:
    return "x:<softirq>";
  case store::waker_kind::timer:
    return "x:<timer>";
  case store::waker_kind::idle:
    return "x:<idle>";
  case store::waker_kind::other:
    break;
  }
  return "o:";
}

void add_opt(std::optional<double> &a, const std::optional<std::int64_t> &b) {
  if (b) {
    a = a.value_or(0) + static_cast<double>(*b);
  }
}

} // namespace

void top_keys::update(const std::map<std::string, std::uint64_t> &samples, std::int64_t now_ns,
                      const std::function<bool(const std::string &)> &eligible) {
  expired_.clear();
  if (last_update_ns_ && now_ns > *last_update_ns_) {
    const double f = std::exp2(-static_cast<double>(now_ns - *last_update_ns_) /
                               static_cast<double>(half_life_ns_));
    for (auto &[k, v] : score_) {
      v *= f;
    }
  }
  last_update_ns_ = now_ns;
  for (const auto &[k, n] : samples) {
    if (n == 0 || (eligible && !eligible(k))) {
      continue;
    }
    score_[k] += static_cast<double>(n);
    if (auto it = named_.find(k); it != named_.end()) {
      it->second.last_seen_ns = now_ns;
    }
  }
  for (auto it = named_.begin(); it != named_.end();) {
    if (now_ns - it->second.last_seen_ns > expiry_ns_) {
      expired_.push_back(it->first);
      it = named_.erase(it);
    } else {
      ++it;
    }
  }
  // Candidates: keys with samples in this interval and no slot, busiest first (ties by name,
  // so the choice depends on nothing else).
  std::vector<std::pair<double, const std::string *>> fresh;
  for (const auto &[k, n] : samples) {
    if (n > 0 && !named_.contains(k)) {
      if (const auto it = score_.find(k); it != score_.end()) {
        fresh.emplace_back(it->second, &it->first);
      }
    }
  }
  std::sort(fresh.begin(), fresh.end(), [](const auto &x, const auto &y) {
    return x.first != y.first ? x.first > y.first : *x.second < *y.second;
  });
  auto weakest = [&]() {
    auto w = named_.end();
    double ws = 0;
    for (auto it = named_.begin(); it != named_.end(); ++it) {
      const double sc = score_.contains(it->first) ? score_.at(it->first) : 0.0;
      if (w == named_.end() || sc < ws) {
        w = it;
        ws = sc;
      }
    }
    return std::pair{w, ws};
  };
  for (const auto &[sc, k] : fresh) {
    if (sc < 1.0) {
      break; // not one sample lately
    }
    if (named_.size() < n_) {
      named_.emplace(*k, slot{now_ns, now_ns});
      continue;
    }
    const auto [w, ws] = weakest();
    if (w == named_.end() || sc < 2 * ws) {
      break; // the rest are less busy still
    }
    expired_.push_back(w->first);
    named_.erase(w);
    named_.emplace(*k, slot{now_ns, now_ns});
  }
  // Forget keys with no sample lately that hold no slot: the map stays as small as the set of
  // keys active in the last minutes.
  for (auto it = score_.begin(); it != score_.end();) {
    if (it->second < 0.5 && !named_.contains(it->first)) {
      it = score_.erase(it);
    } else {
      ++it;
    }
  }
}

metrics_state::metrics_state(const metrics_config &cfg)
    : cfg_(cfg), cgroup_keys_(cfg_.top, cfg_.idle_expiry_ns),
      comm_keys_(cfg_.top, cfg_.idle_expiry_ns), culprit_keys_(cfg_.top, cfg_.idle_expiry_ns),
      waker_keys_(cfg_.top, cfg_.idle_expiry_ns) {}

void metrics_state::add(const store::interval_row &row, const interval_outcome &o) {
  const std::int64_t now = row.start_ns;
  groups_ |= row.groups;

  for (const store::cpu_row &c : row.cpus) {
    auto [it, fresh] = cpus_.try_emplace(c.cpu);
    if (fresh) {
      it->second.created_ns = cfg_.start_ns;
    }
    metrics::accumulate(it->second.m, c.m);
  }

  // Pass 1: this interval's samples per key, which decide the keys with a series of their own.
  auto cgroup_of = [](const store::thread_row &t) -> const std::string & {
    return t.cgroup.empty() ? unknown_cgroup : t.cgroup;
  };
  std::map<std::string, std::uint64_t> cgroup_samples;
  std::map<std::string, std::uint64_t> comm_samples;
  std::map<std::string, std::uint64_t> culprit_samples; // by wait
  std::map<std::string, std::uint64_t> waker_samples;   // by the sleep they ended
  for (const store::thread_row &t : row.threads) {
    cgroup_samples[cgroup_of(t)] += samples_of(t.m);
    if (const auto n = t.m[metrics::id::sched_delay].count; n > 0) {
      comm_samples[t.comm] += n;
    }
    for (const store::blame_row &b : t.blame) {
      culprit_samples[culprit_key(b)] += b.wait_ns;
    }
    for (const store::wakeup_row &w : t.wakeups) {
      waker_samples[waker_key(w)] += w.sleep_ns;
    }
  }
  cgroup_keys_.update(cgroup_samples, now);
  comm_keys_.update(comm_samples, now, [](const std::string &c) { return !reserved_comm(c); });
  culprit_keys_.update(culprit_samples, now, [](const std::string &k) {
    return k.starts_with("x:") || (k.starts_with("p:") && !reserved_comm(k.substr(2)));
  });
  for (const std::string &k : cgroup_keys_.expired()) {
    cgroups_.erase(k);
    if (k != "/") {
      pressure_.erase(k);
    }
  }
  for (const std::string &k : comm_keys_.expired()) {
    comms_.erase(k);
  }
  for (const std::string &k : culprit_keys_.expired()) {
    culprits_.erase(k.substr(2));
  }
  waker_keys_.update(waker_samples, now, [](const std::string &k) {
    return k.starts_with("x:") || (k.starts_with("p:") && !reserved_comm(k.substr(2)));
  });
  for (const std::string &k : waker_keys_.expired()) {
    wakers_.erase(k.substr(2));
  }

  // Pass 2: each thread's values into its key's series or into "other".
  auto series_for = [&](auto &families, const top_keys &keys, const std::string &key,
                        std::string_view label) -> auto & {
    const bool named = keys.named(key);
    auto [it, fresh] = families.try_emplace(named ? std::string(label) : other_key);
    if (fresh) {
      it->second.created_ns = named ? keys.created(key) : cfg_.start_ns;
    }
    return it->second;
  };
  for (const store::thread_row &t : row.threads) {
    const std::string &cg = cgroup_of(t);
    cgroup_series &g = series_for(cgroups_, cgroup_keys_, cg, cg);
    metrics::accumulate(g.m, t.m, false); // the series never write a fine tail
    g.migrations += t.migrations;
    g.cross_ccx += t.cross_ccx;
    g.cross_numa += t.cross_numa;
    if (const metrics::value &d = t.m[metrics::id::sched_delay]; d.count > 0) {
      metrics::add(series_for(comms_, comm_keys_, t.comm, t.comm).v, d, false);
    }
    for (const store::blame_row &b : t.blame) {
      const std::string key = culprit_key(b);
      sum_series &s = series_for(culprits_, culprit_keys_, key, std::string_view(key).substr(2));
      s.v.count += b.waits;
      s.v.total += b.wait_ns;
    }
    for (const store::wakeup_row &w : t.wakeups) {
      const std::string key = waker_key(w);
      sum_series &s = series_for(wakers_, waker_keys_, key, std::string_view(key).substr(2));
      s.v.count += w.count;
      s.v.total += w.sleep_ns;
    }
  }

  // Pressure and throttling of the system and of the cgroups with a series.
  for (const store::cgroup_cpu_row &c : row.cgroup_cpu) {
    if (c.cgroup != "/" && !cgroup_keys_.named(c.cgroup)) {
      continue;
    }
    auto [it, fresh] = pressure_.try_emplace(c.cgroup);
    pressure_series &p = it->second;
    if (fresh) {
      p.created_ns = cgroup_keys_.named(c.cgroup) ? cgroup_keys_.created(c.cgroup) : cfg_.start_ns;
    }
    add_opt(p.some_ns, c.some_ns);
    add_opt(p.full_ns, c.full_ns);
    add_opt(p.throttled_ns, c.throttled_ns);
    add_opt(p.throttled_periods, c.throttled);
  }

  // Health.
  ++intervals_;
  stalled_ += row.stalled ? 1 : 0;
  write_failures_ += o.write_failed ? 1 : 0;
  recorded_ns_ += static_cast<double>(row.dur_ns);
  collect_ns_ += static_cast<double>(row.collect_ns.value_or(0));
  write_ns_ += static_cast<double>(o.write_ns);
  maint_ns_ += static_cast<double>(row.maint_ns.value_or(0));
  cpu_ns_ += static_cast<double>(row.cpu_ns.value_or(0));
  if (row.bpf_run_ns) {
    bpf_run_ns_ = bpf_run_ns_.value_or(0) + static_cast<double>(*row.bpf_run_ns);
  }
  if (row.bpf_run_cnt) {
    bpf_runs_ = bpf_runs_.value_or(0) + static_cast<double>(*row.bpf_run_cnt);
  }
  for (std::size_t i = 0; i < drops_.size(); ++i) {
    drops_[i] += row.drops[i];
  }
  if (row.rss_bytes) {
    rss_bytes_ = row.rss_bytes;
  }
  last_dur_ns_ = row.dur_ns;
  last_end_ns_ = row.start_ns + row.dur_ns;
}

} // namespace rsched::rschedd
