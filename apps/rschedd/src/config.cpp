// rschedd's options to the config of each part (config.hpp).
#include "rsched/rschedd/config.hpp"

#include <algorithm>

namespace rsched::rschedd {

result<daemon_config> make_config(const options &opt) {
  daemon_config c;
  const std::uint32_t groups = opt.groups.groups;
  const bool latency = (groups & RSCHED_G_LATENCY) != 0;
  constexpr std::int64_t ns_per_s = 1'000'000'000;

  c.bpf.mode = opt.mode;
  c.bpf.groups = groups;
  c.bpf.graveyard_entries = opt.graveyard_entries;
  c.bpf.task_hash_entries = opt.task_hash_entries;
  c.bpf.read = opt.read;
  c.bpf.dirty_list_entries = opt.dirty_list_entries;
  c.bpf.delay_rq_clock = opt.delay_rq_clock;
  if (opt.stack_sleep_ns) {
    c.bpf.long_sleep_ns = static_cast<std::uint64_t>(*opt.stack_sleep_ns);
  }
  c.bpf.verbose = opt.verbose;

  if (!opt.no_db) {
    store_config s;
    s.path = opt.db_path;
    s.group_name = opt.db_group;
    s.keep = opt.keep;
    c.store = std::move(s);
  }

  c.filter.pid = opt.pid;
  c.filter.comm = opt.comm;
  c.filter.global_comm = opt.global_comm;
  c.filter.cgroup = opt.cgroup;
  c.filter.min_latency_us = opt.min_latency_us;
  c.filter.latency_on = latency;

  const std::int64_t interval_ns = static_cast<std::int64_t>(opt.interval_s) * ns_per_s;
  c.live.view = opt.view ? (*opt.view == "tables" ? view_kind::tables : view_kind::compact)
                : opt.display != display_mode::collapsed ? view_kind::tables
                                                         : view_kind::compact;
  c.live.ropt.mode = opt.display == display_mode::detailed  ? output_mode::detailed
                     : opt.display == display_mode::grouped ? output_mode::grouped
                                                            : output_mode::collapsed;
  c.live.ropt.groups = groups;
  c.live.window_ns = std::max<std::int64_t>(5'000'000'000, interval_ns);

  c.recorder.interval_ns = interval_ns;
  // Migration needs 1-second ticks for its per-second rate histograms (so do perf events).
  c.recorder.per_second = (groups & RSCHED_G_MIGRATION) != 0;
  if (opt.run_time_s) {
    c.recorder.run_ns = static_cast<std::int64_t>(*opt.run_time_s) * ns_per_s;
  }
  c.recorder.groups = groups;
  if (latency) {
    c.recorder.delay_clock = opt.delay_rq_clock ? "runqueue" : "monotonic";
  }
  c.recorder.db_path = opt.no_db ? std::string() : opt.db_path;
  c.recorder.stats = opt.stats;

  c.metrics.state.top = opt.metrics_top;
  if (opt.metrics_listen) {
    auto addr = parse_listen_address(*opt.metrics_listen);
    if (!addr) {
      return addr.err();
    }
    c.metrics.listen = *addr;
  }
  c.metrics.textfile = opt.metrics_textfile;

  c.priority.rt_priority = opt.rt_priority;
  c.priority.nice = opt.recorder_nice;
  c.priority.slice_us = opt.recorder_slice_us;
  c.priority.verbose = opt.verbose;

  if (opt.flight_seconds != 0 && !opt.no_db) {
    flight_setup f;
    f.load.mode = opt.mode;
    f.load.verbose = opt.verbose;
    f.recorder.span_ns = static_cast<std::int64_t>(opt.flight_seconds) * ns_per_s;
    if (opt.flight_trigger_ns) {
      f.recorder.threshold_ns = static_cast<std::uint64_t>(*opt.flight_trigger_ns);
    }
    if (opt.flight_trigger_gap_ns) {
      f.recorder.min_gap_ns = *opt.flight_trigger_gap_ns;
    }
    f.recorder.dir = flight::captures_dir(opt.db_path);
    f.legacy_dir = flight::legacy_captures_dir(opt.db_path);
    f.keep = opt.flight_keep.value_or(20);
    f.max_bytes = opt.flight_max_bytes.value_or(1ULL << 30);
    c.flight = std::move(f);
  }

  c.feeds.schedstat = opt.groups.schedstat;
  c.feeds.pressure = opt.groups.pressure;
  return c;
}

} // namespace rsched::rschedd
