#include "writer_rows.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace rsched::store::detail {

bool has_data(const hist_value &v) {
  return !v.empty(); // samples, or counts in the histogram's spans
}

bool has_migrations(const thread_row &t) {
  return t.migrations != 0 || t.cross_ccx != 0 || t.cross_numa != 0;
}

bool has_ipc_data(const thread_row &t) {
  return t.has_ipc && (t.user_cycles != 0 || t.kernel_cycles != 0 || t.user_instructions != 0 ||
                       t.kernel_instructions != 0);
}

bool has_events(const thread_row &t) {
  for (const auto &[idx, v] : t.events) {
    if (v != 0) {
      return true;
    }
  }
  return false;
}

// Whether the thread has anything to write (threads without data get no thread row either).
bool has_blame(const thread_row &t) {
  for (const auto &b : t.blame) {
    if (b.wait_ns != 0 || b.waits != 0 || b.preempts != 0) {
      return true;
    }
  }
  return false;
}

bool has_any(const thread_row &t) {
  return !t.m.empty() || has_migrations(t) || has_ipc_data(t) || has_events(t) || has_blame(t);
}

// a += b for one histogram-valued metric. Layouts of values with data were checked before; an
// empty value takes the other side as it is.
void add_value(hist_value &a, const hist_value &b) {
  if (!has_data(b)) {
    return;
  }
  if (!has_data(a)) {
    a = b;
    return;
  }
  metrics::add_tail(a, b); // before the histograms: it reads a's and b's as they were
  a.count = sat_add(a.count, b.count);
  a.total = sat_add(a.total, b.total);
  (void)stats::merge_into(a.hist, b.hist);
  a.spans = static_cast<metrics::span_mask>(a.spans | b.spans);
}

template <metrics::scope S> void add_values(metrics::set<S> &a, const metrics::set<S> &b) {
  for (std::size_t i = 0; i < metrics::set<S>::n; ++i) {
    if (b.has(i)) {
      add_value(a.at(i), b.at(i));
    }
  }
}

// A metric with data must use its registry layout (it is merged and decoded as such); an empty
// one may have any (it is not written).
template <metrics::scope S> bool layouts_ok(const metrics::set<S> &v) {
  constexpr auto defs = metrics::entries<S>();
  for (std::size_t i = 0; i < defs.size(); ++i) {
    if (v.has(i) && has_data(v.at(i)) && v.at(i).hist.kind != defs[i].layout) {
      return false;
    }
  }
  return true;
}

// Sums two rows of the same thread or CPU (a duplicate in the input) into the first.
void add_row(thread_row &a, const thread_row &b) {
  add_values(a.m, b.m);
  a.migrations = sat_add(a.migrations, b.migrations);
  a.cross_ccx = sat_add(a.cross_ccx, b.cross_ccx);
  a.cross_numa = sat_add(a.cross_numa, b.cross_numa);
  if (b.has_ipc) {
    if (!a.has_ipc) {
      a.has_ipc = true;
      a.user_cycles = a.kernel_cycles = a.user_instructions = a.kernel_instructions = 0;
    }
    a.user_cycles = sat_add(a.user_cycles, b.user_cycles);
    a.kernel_cycles = sat_add(a.kernel_cycles, b.kernel_cycles);
    a.user_instructions = sat_add(a.user_instructions, b.user_instructions);
    a.kernel_instructions = sat_add(a.kernel_instructions, b.kernel_instructions);
  }
  // Summed per event when written.
  a.events.insert(a.events.end(), b.events.begin(), b.events.end());
  a.event_rates.insert(a.event_rates.end(), b.event_rates.begin(), b.event_rates.end());
  // Summed per culprit when written.
  a.blame.insert(a.blame.end(), b.blame.begin(), b.blame.end());
  a.wakeups.insert(a.wakeups.end(), b.wakeups.begin(), b.wakeups.end());
  a.blocked.insert(a.blocked.end(), b.blocked.begin(), b.blocked.end());
}

void add_row(cpu_row &a, const cpu_row &b) {
  add_values(a.m, b.m);
}

result<void> validate_thread(const thread_row &t, std::size_t events) {
  if (!layouts_ok(t.m)) {
    return make_error(fmt::format("thread {}: histogram of the wrong layout", t.tid));
  }
  for (const auto &[idx, v] : t.events) {
    if (idx >= events) {
      return make_error(fmt::format("thread {}: perf event index {} out of range", t.tid, idx));
    }
  }
  for (const auto &[idx, h] : t.event_rates) {
    if (idx >= events) {
      return make_error(fmt::format("thread {}: perf event index {} out of range", t.tid, idx));
    }
    if (!h.empty() && h.kind != stats::layout::log2) {
      return make_error(fmt::format("thread {}: histogram of the wrong layout", t.tid));
    }
  }
  return {};
}

result<void> validate(const interval_row &iv) {
  for (const auto &e : iv.events) {
    if (e.name.empty()) {
      return make_error("perf event with an empty name");
    }
  }
  for (const auto &c : iv.cpus) {
    if (!layouts_ok(c.m)) {
      return make_error(fmt::format("cpu {}: histogram of the wrong layout", c.cpu));
    }
  }
  for (const auto &d : iv.schedstat_cpu) {
    if (d.field.empty()) {
      return make_error(fmt::format("cpu {}: schedstat field without a name", d.cpu));
    }
  }
  for (const auto &d : iv.schedstat_domain) {
    if (d.field.empty()) {
      return make_error(fmt::format("cpu {}: schedstat field without a name", d.cpu));
    }
  }
  for (const auto &c : iv.cgroup_cpu) {
    if (c.cgroup.empty()) {
      return make_error("CPU pressure row without a cgroup path");
    }
  }
  return {};
}

} // namespace rsched::store::detail

namespace rsched::store {

namespace {
// Scheduling classes by rank (SCHED_DEADLINE 6 > SCHED_FIFO 1 / SCHED_RR 2 > the rest: NORMAL 0,
// BATCH 3, IDLE 5, EXT 7), and a thread's position within its class, 0 (lowest) to 1.
int class_rank(int policy) {
  switch (policy) {
  case 6:
    return 2;
  case 1:
  case 2:
    return 1;
  default:
    return 0;
  }
}
double class_position(int policy, int prio) {
  if (policy == 6) {
    return 1.0;
  }
  if (policy == 1 || policy == 2) { // prio = 99 - rt_priority, rt_priority 1..99
    return std::clamp((98.0 - prio) / 98.0, 0.0, 1.0);
  }
  if (policy == 5) {
    return 0.0;
  }
  return std::clamp((139.0 - prio) / 39.0, 0.0, 1.0); // prio = 120 + nice, nice -20..19
}
} // namespace

bool priority_inversion(int policy, int prio, int by_policy, int by_prio) {
  if (policy < 0 || prio < 0 || by_policy < 0 || by_prio < 0) {
    return false;
  }
  const bool raised = class_rank(policy) > 0 || (policy != 5 && prio < 120); // nice < 0
  return raised && class_rank(by_policy) > class_rank(policy) &&
         class_position(policy, prio) > class_position(by_policy, by_prio);
}

std::string sched_ext_change(const sched_ext_row *before, const sched_ext_row &after) {
  if (before == nullptr) {
    return {};
  }
  const auto active = [](const sched_ext_row &x) { return x.state == "enabled"; };
  const auto name = [](const sched_ext_row &x) {
    return x.ops.empty() ? std::string("(unnamed)") : x.ops;
  };
  const bool was = active(*before);
  const bool is = active(after);
  if (!was && is) {
    return "sched_ext enabled: " + name(after);
  }
  if (was && !is) {
    return "sched_ext disabled (was " + name(*before) + ")";
  }
  if (was && before->ops != after.ops) {
    return "sched_ext: " + name(after) + " replaced " + name(*before);
  }
  if (before->enable_seq != after.enable_seq) {
    if (is) {
      return "sched_ext re-enabled: " + name(after);
    }
    // Between two reads that both saw it disabled (not a read in the middle of a transition).
    if (before->state == "disabled" && after.state == "disabled") {
      return "sched_ext enabled and disabled again";
    }
  }
  return {};
}

} // namespace rsched::store
