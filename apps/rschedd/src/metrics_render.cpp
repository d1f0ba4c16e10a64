// The text of a metrics_state (metrics_state.hpp): its families in Prometheus text or
// OpenMetrics (docs/FLEET.md).
#include "rsched/rschedd/metrics_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace rsched::rschedd {

namespace om = openmetrics;

namespace {

constexpr double ns_per_s = 1e9;

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

  if (!wakers_.empty()) {
    w.begin("rsched_waker_sleep_seconds", om::metric_type::counter,
            "Sleep that each waker (comm, or <hardirq> / <softirq> / <timer> / <idle>) ended: "
            "switch-out to its sched_waking, of the threads it woke (wakeup group; the busiest; "
            "the rest as comm=\"other\").",
            "seconds");
    for (const auto &[c, s] : wakers_) {
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

} // namespace rsched::rschedd
