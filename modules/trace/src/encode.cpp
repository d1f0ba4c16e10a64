#include "rsched/trace/perfetto.hpp"

#include "pb.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <unordered_map>

namespace rsched::trace {

namespace {

// Field numbers (proto/rsched_perfetto.proto).
namespace f {
constexpr std::uint32_t trace_packet = 1;
constexpr std::uint32_t packet_timestamp = 8;
constexpr std::uint32_t packet_ftrace_events = 1;
constexpr std::uint32_t packet_process_tree = 2;
constexpr std::uint32_t packet_clock_snapshot = 6;
constexpr std::uint32_t packet_sequence_id = 10;
constexpr std::uint32_t tree_processes = 1;
constexpr std::uint32_t tree_threads = 2;
constexpr std::uint32_t thread_tid = 1;
constexpr std::uint32_t thread_name = 2;
constexpr std::uint32_t thread_tgid = 3;
constexpr std::uint32_t process_pid = 1;
constexpr std::uint32_t process_cmdline = 3;
constexpr std::uint32_t process_cmdline_is_comm = 9;
constexpr std::uint32_t bundle_cpu = 1;
constexpr std::uint32_t bundle_event = 2;
constexpr std::uint32_t bundle_lost_events = 3;
constexpr std::uint32_t bundle_compact_sched = 4;
constexpr std::uint32_t cs_switch_timestamp = 1;
constexpr std::uint32_t cs_switch_prev_state = 2;
constexpr std::uint32_t cs_switch_next_pid = 3;
constexpr std::uint32_t cs_switch_next_prio = 4;
constexpr std::uint32_t cs_intern_table = 5;
constexpr std::uint32_t cs_switch_next_comm_index = 6;
constexpr std::uint32_t cs_waking_timestamp = 7;
constexpr std::uint32_t cs_waking_pid = 8;
constexpr std::uint32_t cs_waking_target_cpu = 9;
constexpr std::uint32_t cs_waking_prio = 10;
constexpr std::uint32_t cs_waking_comm_index = 11;
constexpr std::uint32_t cs_waking_common_flags = 12;
constexpr std::uint32_t event_timestamp = 1;
constexpr std::uint32_t event_pid = 2;
constexpr std::uint32_t event_wakeup_new = 114;
constexpr std::uint32_t event_task_rename = 236;
constexpr std::uint32_t event_process_exit = 238;
constexpr std::uint32_t event_process_fork = 239;
constexpr std::uint32_t event_migrate_task = 491;
constexpr std::uint32_t snapshot_clocks = 1;
constexpr std::uint32_t snapshot_primary_trace_clock = 2;
constexpr std::uint32_t clock_id = 1;
constexpr std::uint32_t clock_timestamp = 2;
} // namespace f

// BuiltinClock (protos/perfetto/common/builtin_clock.proto).
namespace builtin_clock {
constexpr std::uint32_t realtime = 1;
constexpr std::uint32_t monotonic = 3;
constexpr std::uint32_t boottime = 6;
} // namespace builtin_clock

constexpr std::uint32_t sequence_id = 1;

// The packed arrays of one bundle's CompactSched, filled as events come.
struct compact {
  std::string switch_ts, switch_state, switch_pid, switch_prio, switch_comm;
  std::string waking_ts, waking_pid, waking_cpu, waking_prio, waking_comm, waking_flags;
  std::uint64_t last_switch = 0;
  std::uint64_t last_waking = 0;
  std::vector<std::string_view> interned;
  std::unordered_map<std::string_view, std::uint32_t> index;

  std::uint32_t intern(std::string_view s) {
    auto [it, fresh] = index.try_emplace(s, static_cast<std::uint32_t>(interned.size()));
    if (fresh) {
      interned.push_back(s);
    }
    return it->second;
  }
  void add_switch(const sched_event &e) {
    pb::put_varint(switch_ts, e.ts - last_switch);
    last_switch = e.ts;
    pb::put_varint(switch_state, static_cast<std::uint64_t>(e.prev_state));
    pb::put_varint(switch_pid, static_cast<std::uint64_t>(std::int64_t{e.tid}));
    pb::put_varint(switch_prio, static_cast<std::uint64_t>(std::int64_t{e.prio}));
    pb::put_varint(switch_comm, intern(comm_view(e.comm)));
  }
  void add_waking(const sched_event &e) {
    pb::put_varint(waking_ts, e.ts - last_waking);
    last_waking = e.ts;
    pb::put_varint(waking_pid, static_cast<std::uint64_t>(std::int64_t{e.tid}));
    pb::put_varint(waking_cpu, static_cast<std::uint64_t>(std::int64_t{e.target_cpu}));
    pb::put_varint(waking_prio, static_cast<std::uint64_t>(std::int64_t{e.prio}));
    pb::put_varint(waking_comm, intern(comm_view(e.comm)));
    pb::put_varint(waking_flags, 0);
  }
  [[nodiscard]] bool empty() const { return switch_ts.empty() && waking_ts.empty(); }
  void write(std::string &out) const {
    for (const auto &s : interned) {
      pb::put_bytes(out, f::cs_intern_table, s);
    }
    const std::pair<std::uint32_t, const std::string *> arrays[] = {
        {f::cs_switch_timestamp, &switch_ts},
        {f::cs_switch_prev_state, &switch_state},
        {f::cs_switch_next_pid, &switch_pid},
        {f::cs_switch_next_prio, &switch_prio},
        {f::cs_switch_next_comm_index, &switch_comm},
        {f::cs_waking_timestamp, &waking_ts},
        {f::cs_waking_pid, &waking_pid},
        {f::cs_waking_target_cpu, &waking_cpu},
        {f::cs_waking_prio, &waking_prio},
        {f::cs_waking_comm_index, &waking_comm},
        {f::cs_waking_common_flags, &waking_flags}};
    for (const auto &[field, bytes] : arrays) {
      if (!bytes->empty()) {
        pb::put_bytes(out, field, *bytes);
      }
    }
  }
};

// One FtraceEvent of the kinds not in the compact form.
void put_event(std::string &out, const sched_event &e) {
  std::string body;
  std::uint32_t field = 0;
  switch (e.kind) {
  case event_kind::sched_wakeup_new:
    field = f::event_wakeup_new;
    pb::put_bytes(body, 1, comm_view(e.comm));
    pb::put_int(body, 2, e.tid);
    pb::put_int(body, 3, e.prio);
    pb::put_int(body, 4, 1);
    pb::put_int(body, 5, e.target_cpu);
    break;
  case event_kind::sched_migrate_task:
    field = f::event_migrate_task;
    pb::put_bytes(body, 1, comm_view(e.comm));
    pb::put_int(body, 2, e.tid);
    pb::put_int(body, 3, e.prio);
    pb::put_int(body, 4, e.orig_cpu);
    pb::put_int(body, 5, e.target_cpu);
    break;
  case event_kind::sched_process_fork:
    field = f::event_process_fork;
    pb::put_bytes(body, 1, comm_view(e.comm2));
    pb::put_int(body, 2, e.pid);
    pb::put_bytes(body, 3, comm_view(e.comm));
    pb::put_int(body, 4, e.tid);
    break;
  case event_kind::sched_process_exit:
    field = f::event_process_exit;
    pb::put_bytes(body, 1, comm_view(e.comm));
    pb::put_int(body, 2, e.tid);
    pb::put_int(body, 3, e.tgid);
    pb::put_int(body, 4, e.prio);
    break;
  case event_kind::task_rename:
    field = f::event_task_rename;
    pb::put_int(body, 1, e.tid);
    pb::put_bytes(body, 2, comm_view(e.comm2));
    pb::put_bytes(body, 3, comm_view(e.comm));
    break;
  case event_kind::sched_switch:
  case event_kind::sched_waking:
    return; // compact
  }
  std::string ev;
  pb::put_uint(ev, f::event_timestamp, e.ts);
  pb::put_uint(ev, f::event_pid, static_cast<std::uint32_t>(e.pid));
  pb::put_bytes(ev, field, body);
  pb::put_bytes(out, f::bundle_event, ev);
}

void put_packet(std::string &out, std::uint64_t ts, std::uint32_t field, std::string_view body) {
  std::string p;
  pb::put_uint(p, f::packet_timestamp, ts);
  pb::put_bytes(p, field, body);
  pb::put_uint(p, f::packet_sequence_id, sequence_id);
  pb::put_bytes(out, f::trace_packet, p);
}

// The ClockSnapshot packet: no timestamp of its own (trace_processor reads the clocks' values, as
// in the packets Perfetto's service writes), BOOTTIME the primary trace clock.
void put_clock_snapshot(std::string &out, const clock_snapshot &c) {
  std::string snap;
  const std::pair<std::uint32_t, std::uint64_t> clocks[] = {
      {builtin_clock::boottime, c.boottime_ns},
      {builtin_clock::monotonic, c.monotonic_ns},
      {builtin_clock::realtime, c.realtime_ns}};
  for (const auto &[id, ts] : clocks) {
    std::string one;
    pb::put_uint(one, f::clock_id, id);
    pb::put_uint(one, f::clock_timestamp, ts);
    pb::put_bytes(snap, f::snapshot_clocks, one);
  }
  pb::put_uint(snap, f::snapshot_primary_trace_clock, builtin_clock::boottime);
  std::string p;
  pb::put_bytes(p, f::packet_clock_snapshot, snap);
  pb::put_uint(p, f::packet_sequence_id, sequence_id);
  pb::put_bytes(out, f::trace_packet, p);
}

// The ProcessTree: each thread's name as of its first appearance in the window.
std::string process_tree(const trace_input &in) {
  struct known {
    std::uint64_t ts;
    std::int32_t tgid;
    comm_t comm;
  };
  std::map<std::int32_t, known> threads;
  auto see = [&](std::uint64_t ts, std::int32_t tid, std::int32_t tgid, const comm_t &c) {
    if (tid <= 0) {
      return;
    }
    auto [it, fresh] = threads.try_emplace(tid, known{ts, tgid, c});
    if (!fresh && ts < it->second.ts) {
      it->second = known{ts, tgid != 0 ? tgid : it->second.tgid, c};
    }
  };
  for (const auto &e : in.events) {
    if (e.kind == event_kind::task_rename) {
      see(e.ts, e.tid, e.tgid, e.comm2); // its name before
    } else {
      see(e.ts, e.tid, e.tgid, e.comm);
    }
  }
  for (const auto &n : in.names) {
    if (n.tid > 0) {
      threads.try_emplace(n.tid, known{UINT64_MAX, n.tgid, n.comm});
    }
  }
  std::map<std::int32_t, comm_t> processes;
  for (const auto &[tid, k] : threads) {
    if (k.tgid > 0 && (tid == k.tgid || !processes.contains(k.tgid))) {
      processes[k.tgid] = k.comm;
    }
  }
  std::string tree;
  for (const auto &[pid, comm] : processes) {
    std::string p;
    pb::put_int(p, f::process_pid, pid);
    pb::put_bytes(p, f::process_cmdline, comm_view(comm));
    pb::put_uint(p, f::process_cmdline_is_comm, 1);
    pb::put_bytes(tree, f::tree_processes, p);
  }
  for (const auto &[tid, k] : threads) {
    std::string t;
    pb::put_int(t, f::thread_tid, tid);
    pb::put_bytes(t, f::thread_name, comm_view(k.comm));
    if (k.tgid > 0) {
      pb::put_int(t, f::thread_tgid, k.tgid);
    }
    pb::put_bytes(tree, f::tree_threads, t);
  }
  return tree;
}

} // namespace

std::string_view comm_view(const comm_t &c) {
  const auto *end = std::find(c.begin(), c.end(), '\0');
  return {c.data(), static_cast<std::size_t>(end - c.begin())};
}

comm_t make_comm(std::string_view s) {
  comm_t c{};
  std::copy_n(s.begin(), std::min(s.size(), c.size() - 1), c.begin());
  return c;
}

std::int64_t ftrace_prev_state(bool preempt, std::uint32_t state, std::uint32_t exit_state) {
  constexpr std::uint32_t task_report = 0x7F;      // TASK_REPORT
  constexpr std::uint32_t task_idle = 0x402;       // TASK_UNINTERRUPTIBLE | TASK_NOLOAD
  constexpr std::uint32_t task_report_idle = 0x80; // TASK_REPORT + 1
  if (preempt) {
    return 0x100; // TASK_REPORT_MAX
  }
  std::uint32_t s = (state | exit_state) & task_report;
  if (state == task_idle) {
    s = task_report_idle;
  }
  const auto index = static_cast<int>(std::bit_width(s)); // fls()
  return index == 0 ? 0 : std::int64_t{1} << (index - 1);
}

result<std::string> encode(const trace_input &in) {
  std::map<std::uint32_t, std::vector<const sched_event *>> per_cpu;
  std::uint64_t first_ts = UINT64_MAX;
  for (const auto &e : in.events) {
    auto &v = per_cpu[e.cpu];
    if (!v.empty() && e.ts < v.back()->ts) {
      return make_error(fmt::format("events of CPU {} out of time order ({} after {})", e.cpu, e.ts,
                                    v.back()->ts));
    }
    v.push_back(&e);
    first_ts = std::min(first_ts, e.ts);
  }
  std::string out;
  if (in.clocks) {
    put_clock_snapshot(out, *in.clocks);
  }
  put_packet(out, first_ts == UINT64_MAX ? 0 : first_ts, f::packet_process_tree, process_tree(in));
  const std::size_t chunk = std::max<std::size_t>(in.bundle_events, 1);
  for (const auto &[cpu, evs] : per_cpu) {
    const bool lossy =
        std::find(in.lossy_cpus.begin(), in.lossy_cpus.end(), cpu) != in.lossy_cpus.end();
    for (std::size_t i = 0; i < evs.size(); i += chunk) {
      std::string bundle;
      pb::put_uint(bundle, f::bundle_cpu, cpu);
      if (lossy && i == 0) {
        pb::put_uint(bundle, f::bundle_lost_events, 1);
      }
      compact cs;
      const std::size_t end = std::min(evs.size(), i + chunk);
      for (std::size_t j = i; j < end; ++j) {
        const auto &e = *evs[j];
        if (e.kind == event_kind::sched_switch) {
          cs.add_switch(e);
        } else if (e.kind == event_kind::sched_waking) {
          cs.add_waking(e);
        } else {
          put_event(bundle, e);
        }
      }
      if (!cs.empty()) {
        std::string c;
        cs.write(c);
        pb::put_bytes(bundle, f::bundle_compact_sched, c);
      }
      put_packet(out, evs[i]->ts, f::packet_ftrace_events, bundle);
    }
  }
  return out;
}

} // namespace rsched::trace
