// rschedd's Prometheus side (metrics.hpp).
#include "rsched/rschedd/metrics.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/base/text.hpp"
#include "rsched/rschedd/http_request.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sstream>
#include <unistd.h>
#include <utility>

namespace rsched::rschedd {

namespace om = openmetrics;

namespace {

constexpr double ns_per_s = 1e9;
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

void add_opt(std::optional<double> &a, const std::optional<std::int64_t> &b) {
  if (b) {
    a = a.value_or(0) + static_cast<double>(*b);
  }
}

// The drop counters with a name of their own (the others are unused slots).
struct drop_kind {
  int index;
  const char *name;
};
constexpr std::array<drop_kind, 6> drop_kinds{{{RSCHED_DROP_TASK_STATE, "task_state"},
                                               {RSCHED_DROP_GRAVEYARD, "graveyard"},
                                               {RSCHED_DROP_STALE_TID, "stale_tid"},
                                               {RSCHED_DROP_NO_RQ, "no_rq"},
                                               {RSCHED_DROP_PERF_READ, "perf_read"},
                                               {RSCHED_DROP_SEGMENT, "segment"}}};

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

metrics_state::metrics_state(metrics_config cfg)
    : cfg_(std::move(cfg)), cgroup_keys_(cfg_.top, cfg_.idle_expiry_ns),
      comm_keys_(cfg_.top, cfg_.idle_expiry_ns), culprit_keys_(cfg_.top, cfg_.idle_expiry_ns) {}

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
  for (const store::thread_row &t : row.threads) {
    cgroup_samples[cgroup_of(t)] += samples_of(t.m);
    if (const auto n = t.m[metrics::id::sched_delay].count; n > 0) {
      comm_samples[t.comm] += n;
    }
    for (const store::blame_row &b : t.blame) {
      culprit_samples[culprit_key(b)] += b.wait_ns;
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
    metrics::accumulate(g.m, t.m);
    g.migrations += t.migrations;
    g.cross_ccx += t.cross_ccx;
    g.cross_numa += t.cross_numa;
    if (const metrics::value &d = t.m[metrics::id::sched_delay]; d.count > 0) {
      metrics::add(series_for(comms_, comm_keys_, t.comm, t.comm).v, d);
    }
    for (const store::blame_row &b : t.blame) {
      const std::string key = culprit_key(b);
      sum_series &s = series_for(culprits_, culprit_keys_, key, std::string_view(key).substr(2));
      s.v.count += b.waits;
      s.v.total += b.wait_ns;
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

void metrics_state::render(std::ostream &out, om::format f) const {
  om::writer w(out, f);
  const auto latency = om::latency_edges_ns();
  const auto depth = om::depth_edges();
  auto hist = [&](const om::labels &l, const metrics::value &v, std::int64_t created) {
    const bool ns = v.hist.kind == stats::layout::latency;
    const auto edges = ns ? latency : depth;
    const double sum = ns ? static_cast<double>(v.total) / ns_per_s : static_cast<double>(v.total);
    w.histogram(l, edges, om::cumulative_counts(v.hist, edges), sum, std::nullopt, created);
  };
  const bool latency_on = (groups_ & RSCHED_G_LATENCY) != 0;

  if (latency_on && !cpus_.empty()) {
    w.begin("rsched_cpu_sched_delay_seconds", om::metric_type::histogram,
            "Scheduling delay (wakeup to switch-in) on each CPU since rschedd started.", "seconds");
    for (const auto &[cpu, s] : cpus_) {
      hist({{"cpu", fmt::format("{}", cpu)}}, s.m[metrics::id::cpu_sched_delay], s.created_ns);
    }
  }
  if ((groups_ & RSCHED_G_SLEEP) != 0 && !cpus_.empty()) {
    w.begin("rsched_cpu_idle_seconds", om::metric_type::histogram,
            "Idle periods of each CPU since rschedd started.", "seconds");
    for (const auto &[cpu, s] : cpus_) {
      hist({{"cpu", fmt::format("{}", cpu)}}, s.m[metrics::id::cpu_idle], s.created_ns);
    }
  }

  struct cgroup_hist {
    std::uint32_t group;
    const char *name;
    const char *help;
    metrics::id metric;
    const char *unit;
  };
  const std::array<cgroup_hist, 4> cgroup_hists{{
      {RSCHED_G_LATENCY, "rsched_cgroup_sched_delay_seconds",
       "Scheduling delay of the threads of each of the busiest cgroups (the rest as "
       "cgroup=\"other\"), since the series was created.",
       metrics::id::sched_delay, "seconds"},
      {RSCHED_G_WAKING, "rsched_cgroup_waking_delay_seconds",
       "Waking delay (sched_waking to switch-in) per cgroup (busiest; the rest as \"other\").",
       metrics::id::waking_delay, "seconds"},
      {RSCHED_G_LATENCY, "rsched_cgroup_runqueue_depth",
       "Runqueue depth (nr_running) seen at each wakeup, per cgroup (busiest; the rest as "
       "\"other\").",
       metrics::id::runq_depth, ""},
      {RSCHED_G_SLEEP, "rsched_cgroup_sleep_seconds",
       "Sleep durations (switch-out to wakeup) per cgroup (busiest; the rest as \"other\").",
       metrics::id::sleep, "seconds"},
  }};
  for (const cgroup_hist &h : cgroup_hists) {
    if ((groups_ & h.group) == 0 || cgroups_.empty()) {
      continue;
    }
    w.begin(h.name, om::metric_type::histogram, h.help, h.unit);
    for (const auto &[cg, s] : cgroups_) {
      hist({{"cgroup", cg}}, s.m[h.metric], s.created_ns);
    }
  }
  if ((groups_ & RSCHED_G_SLICE) != 0 && !cgroups_.empty()) {
    w.begin("rsched_cgroup_timeslice_seconds", om::metric_type::histogram,
            "Time slices (switch-in to switch-out) per cgroup (busiest; the rest as \"other\"), "
            "by how they ended: kind=\"voluntary\" (the thread blocked) or \"involuntary\" "
            "(preempted).",
            "seconds");
    for (const auto &[cg, s] : cgroups_) {
      hist({{"cgroup", cg}, {"kind", "voluntary"}}, s.m[metrics::id::slice_voluntary],
           s.created_ns);
      hist({{"cgroup", cg}, {"kind", "involuntary"}}, s.m[metrics::id::slice_involuntary],
           s.created_ns);
    }
  }
  if (latency_on && !comms_.empty()) {
    w.begin("rsched_comm_sched_delay_seconds", om::metric_type::histogram,
            "Scheduling delay per comm (the busiest; the rest, and comms spelt \"\" or "
            "\"other\", as comm=\"other\").",
            "seconds");
    for (const auto &[c, s] : comms_) {
      hist({{"comm", c}}, s.v, s.created_ns);
    }
  }

  auto counters = [&](const char *name, const char *help, const char *unit, auto value_of) {
    if (cgroups_.empty()) {
      return;
    }
    w.begin(name, om::metric_type::counter, help, unit);
    for (const auto &[cg, s] : cgroups_) {
      w.counter({{"cgroup", cg}}, value_of(s), std::nullopt, s.created_ns);
    }
  };
  if ((groups_ & RSCHED_G_MIGRATION) != 0) {
    counters("rsched_cgroup_migrations", "Migrations of the threads of each cgroup.", "",
             [](const cgroup_series &s) { return static_cast<double>(s.migrations); });
    counters("rsched_cgroup_cross_ccx_migrations",
             "Migrations across a die/CCX of the threads of each cgroup.", "",
             [](const cgroup_series &s) { return static_cast<double>(s.cross_ccx); });
    counters("rsched_cgroup_cross_numa_migrations",
             "Migrations across NUMA nodes of the threads of each cgroup.", "",
             [](const cgroup_series &s) { return static_cast<double>(s.cross_numa); });
  }

  struct pressure_counter {
    const char *name;
    const char *help;
    const char *unit;
    std::optional<double> pressure_series::*field;
    double scale;
  };
  const std::array<pressure_counter, 4> pressure_counters{{
      {"rsched_cgroup_cpu_pressure_some_seconds",
       "PSI cpu some: time at least one runnable thread of the cgroup waited for a CPU "
       "(cgroup=\"/\": the system).",
       "seconds", &pressure_series::some_ns, ns_per_s},
      {"rsched_cgroup_cpu_pressure_full_seconds",
       "PSI cpu full: time all non-idle threads of the cgroup waited for a CPU.", "seconds",
       &pressure_series::full_ns, ns_per_s},
      {"rsched_cgroup_cpu_throttled_seconds",
       "Time the cgroup was throttled by its CPU bandwidth limit (cpu.stat).", "seconds",
       &pressure_series::throttled_ns, ns_per_s},
      {"rsched_cgroup_cpu_throttled_periods",
       "Enforcement periods in which the cgroup was throttled (cpu.stat nr_throttled).", "",
       &pressure_series::throttled_periods, 1},
  }};
  for (const pressure_counter &p : pressure_counters) {
    const bool any = std::any_of(pressure_.begin(), pressure_.end(),
                                 [&](const auto &e) { return (e.second.*p.field).has_value(); });
    if (!any) {
      continue;
    }
    w.begin(p.name, om::metric_type::counter, p.help, p.unit);
    for (const auto &[cg, s] : pressure_) {
      if (const auto v = s.*p.field) {
        w.counter({{"cgroup", cg}}, *v / p.scale, std::nullopt, s.created_ns);
      }
    }
  }
  if (!culprits_.empty()) {
    w.begin("rsched_culprit_wait_seconds", om::metric_type::counter,
            "Time each culprit (comm, or <idle> / <unknown>) ran on a CPU while another thread "
            "waited there (blame group; the busiest; the rest as comm=\"other\").",
            "seconds");
    for (const auto &[c, s] : culprits_) {
      w.counter({{"comm", c}}, static_cast<double>(s.v.total) / ns_per_s, std::nullopt,
                s.created_ns);
    }
  }

  // rschedd's own health.
  auto counter = [&](const char *name, const char *help, const char *unit, double v) {
    w.begin(name, om::metric_type::counter, help, unit);
    w.counter({}, v, std::nullopt, cfg_.start_ns);
  };
  counter("rsched_intervals", "Intervals recorded (the final one of a run included).", "",
          static_cast<double>(intervals_));
  counter("rsched_stalled_intervals",
          "Intervals that lasted more than 1.5 times the interval (the recorder fell behind).", "",
          static_cast<double>(stalled_));
  counter("rsched_write_failures", "Intervals that could not be written to the database.", "",
          static_cast<double>(write_failures_));
  counter("rsched_recorded_seconds", "Time covered by the recorded intervals.", "seconds",
          recorded_ns_ / ns_per_s);
  counter("rsched_collect_seconds", "Time spent reading the BPF maps and taking deltas.", "seconds",
          collect_ns_ / ns_per_s);
  counter("rsched_write_seconds", "Time spent writing intervals to SQLite.", "seconds",
          write_ns_ / ns_per_s);
  counter("rsched_maintain_seconds", "Time spent on rollups and retention.", "seconds",
          maint_ns_ / ns_per_s);
  counter("rsched_process_cpu_seconds", "CPU time (user + system) of rschedd.", "seconds",
          cpu_ns_ / ns_per_s);
  if (bpf_run_ns_) {
    counter("rsched_bpf_run_seconds",
            "Run time of rschedd's BPF programs (kernel.bpf_stats_enabled).", "seconds",
            *bpf_run_ns_ / ns_per_s);
  }
  if (bpf_runs_) {
    counter("rsched_bpf_runs", "Runs of rschedd's BPF programs (kernel.bpf_stats_enabled).", "",
            *bpf_runs_);
  }
  w.begin("rsched_drops", om::metric_type::counter,
          "Events the BPF programs could not account, by kind (docs/SCHEMA.md, intervals).", "");
  for (const drop_kind &d : drop_kinds) {
    w.counter({{"kind", d.name}}, static_cast<double>(drops_[static_cast<std::size_t>(d.index)]),
              std::nullopt, cfg_.start_ns);
  }
  counter("rsched_discarded_samples",
          "Values above their metric's limit, discarded (not an error; see docs/SCHEMA.md).", "",
          static_cast<double>(drops_[RSCHED_DROP_TOO_LONG]));
  if (rss_bytes_) {
    w.begin("rsched_resident_memory_bytes", om::metric_type::gauge,
            "Resident memory of rschedd at the end of the last interval.", "bytes");
    w.gauge({}, static_cast<double>(*rss_bytes_));
  }
  if (intervals_ > 0) {
    w.begin("rsched_last_interval_duration_seconds", om::metric_type::gauge,
            "Length of the last recorded interval.", "seconds");
    w.gauge({}, static_cast<double>(last_dur_ns_) / ns_per_s);
    w.begin("rsched_last_interval_end_timestamp_seconds", om::metric_type::gauge,
            "When the last recorded interval ended (UTC, seconds since the epoch).", "seconds");
    w.gauge({}, static_cast<double>(last_end_ns_) / ns_per_s);
  }
  w.finish();
}

// --- metrics_board ---

void metrics_board::publish(const metrics_state &s) {
  auto copy = std::make_shared<const metrics_state>(s);
  {
    std::lock_guard lock(mu_);
    state_ = std::move(copy);
    ++generation_;
  }
  cv_.notify_all();
}

metrics_board::text metrics_board::render(om::format f) {
  const std::size_t i = f == om::format::openmetrics ? 1 : 0;
  std::shared_ptr<const metrics_state> s;
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(mu_);
    if (cache_[i] && cache_gen_[i] == generation_) {
      return {cache_[i], generation_};
    }
    s = state_;
    gen = generation_;
  }
  if (!s) {
    return {std::make_shared<const std::string>(), 0};
  }
  std::lock_guard render_lock(render_mu_);
  {
    std::lock_guard lock(mu_);
    if (cache_[i] && cache_gen_[i] >= gen) { // another reader rendered it meanwhile
      return {cache_[i], cache_gen_[i]};
    }
  }
  std::ostringstream out;
  s->render(out, f);
  auto body = std::make_shared<const std::string>(std::move(out).str());
  std::lock_guard lock(mu_);
  cache_[i] = body;
  cache_gen_[i] = gen;
  return {body, gen};
}

bool metrics_board::wait_newer(std::uint64_t generation) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopped_ || generation_ > generation; });
  return !stopped_;
}

void metrics_board::stop() {
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

// --- addresses and negotiation ---

result<listen_address> parse_listen_address(std::string_view s) {
  auto bad = [&](std::string_view why) {
    return make_error(fmt::format("--metrics-listen \"{}\": {} (expected PORT, ADDR:PORT or "
                                  "[IPv6]:PORT, e.g. 9466 or 0.0.0.0:9466)",
                                  text::escape_for_terminal(s), why));
  };
  listen_address a;
  std::string_view port = s;
  if (!s.empty() && s.front() == '[') {
    const auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return bad("an IPv6 address goes in brackets, followed by :PORT");
    }
    a.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else if (const auto colon = s.rfind(':'); colon != std::string_view::npos) {
    a.host = std::string(s.substr(0, colon));
    if (a.host.find(':') != std::string::npos) {
      return bad("an IPv6 address goes in brackets");
    }
    port = s.substr(colon + 1);
  } else {
    a.host = "127.0.0.1"; // a bare port is loopback only: exposing is a decision
  }
  if (a.host.empty()) {
    return bad("the address is empty");
  }
  if (!std::all_of(a.host.begin(), a.host.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == ':' ||
               c == '-' || c == '_' || c == '%';
      })) {
    return bad("not an address");
  }
  int p = -1;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || p < 0 || p > 65535) {
    return bad("the port is not a number from 0 to 65535");
  }
  a.port = p;
  return a;
}

om::format negotiate(std::string_view accept) {
  // Media ranges separated by ',', each "type/subtype" then ";name=value" parameters. A range
  // with q=0 (any spelling of zero) means "not acceptable".
  std::size_t pos = 0;
  while (pos <= accept.size()) {
    const auto end = std::min(accept.find(',', pos), accept.size());
    std::string_view range = accept.substr(pos, end - pos);
    pos = end + 1;
    auto semi = range.find(';');
    if (http::trim_ows(range.substr(0, semi)) != "application/openmetrics-text") {
      continue;
    }
    bool acceptable = true;
    while (semi != std::string_view::npos) {
      range.remove_prefix(semi + 1);
      semi = range.find(';');
      const std::string_view param = http::trim_ows(range.substr(0, semi));
      if (param.size() >= 2 && (param[0] == 'q' || param[0] == 'Q') && param[1] == '=') {
        const std::string_view q = param.substr(2);
        acceptable = q.find_first_of("123456789") != std::string_view::npos;
      }
    }
    if (acceptable) {
      return om::format::openmetrics;
    }
  }
  return om::format::prometheus;
}

std::string_view content_type(om::format f) {
  return f == om::format::openmetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                      : "text/plain; version=0.0.4; charset=utf-8";
}

// --- metrics_textfile ---

metrics_textfile::metrics_textfile(std::string path, metrics_board &board,
                                   std::function<void(std::string_view)> note)
    : path_(std::move(path)), board_(board), note_(std::move(note)) {
  thread_ = std::thread([this] { run(); });
}

metrics_textfile::~metrics_textfile() {
  board_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void metrics_textfile::run() {
  std::uint64_t seen = 0;
  while (board_.wait_newer(seen)) {
    (void)flush(); // noted there
    std::lock_guard lock(write_mu_);
    seen = attempted_gen_; // a failed write is tried again with the next interval
  }
}

result<void> metrics_textfile::flush() {
  std::lock_guard lock(write_mu_);
  auto w = write_once();
  if (!w && !reported_) {
    if (note_) {
      note_(fmt::format("rschedd: --metrics-textfile: {}\n", w.err().msg));
    }
    reported_ = true;
  } else if (w && reported_) {
    if (note_) {
      note_("rschedd: --metrics-textfile: writing again\n");
    }
    reported_ = false;
  }
  return w;
}

result<void> metrics_textfile::write_once() {
  const metrics_board::text t = board_.render(om::format::prometheus);
  attempted_gen_ = std::max(attempted_gen_, t.generation);
  if (t.generation == 0 || t.generation <= written_gen_) {
    return {};
  }
  // A temporary with an unpredictable name opened O_EXCL|O_NOFOLLOW in FILE's directory, renamed
  // over FILE (rsched::safe_file): the directory may belong to node_exporter's user, who could
  // otherwise plant a link at a predictable name and make root write through it. 0644 whatever
  // the umask (the service's is 0027): node_exporter reads it as another user. No fsync: the
  // file is rewritten every interval and a crash loses at most that interval's text.
  safe_file::options o;
  o.mode = 0644;
  o.apply_umask = false;
  o.sync = false;
  o.devices = false; // a FIFO planted there would block or be swapped: replaced, never opened
  if (auto w = write_file_safely(path_, *t.body, o); !w) {
    return w.err();
  }
  written_gen_ = t.generation;
  return {};
}

} // namespace rsched::rschedd
