#include "rsched/flight/window.hpp"

#include <algorithm>
#include <cstring>

namespace rsched::flight {

namespace {

constexpr std::size_t max_names = 65536;

trace::comm_t comm_of(const char (&c)[16]) {
  trace::comm_t out{};
  std::memcpy(out.data(), c, out.size());
  out[15] = '\0';
  return out;
}

} // namespace

trace::sched_event to_trace_event(std::uint32_t cpu, const rsched_flight_event &e) {
  trace::sched_event t;
  t.ts = e.ts;
  t.cpu = cpu;
  t.pid = e.pid;
  t.tid = e.tid;
  t.tgid = e.tgid;
  t.prio = e.prio;
  t.comm = comm_of(e.comm);
  switch (e.kind) {
  case RSCHED_FL_SWITCH:
    t.kind = trace::event_kind::sched_switch;
    t.prev_prio = e.prev_prio;
    t.prev_state = trace::ftrace_prev_state(e.preempt != 0, e.state, e.exit_state);
    break;
  case RSCHED_FL_WAKING:
    t.kind = trace::event_kind::sched_waking;
    t.target_cpu = e.cpu;
    break;
  case RSCHED_FL_WAKEUP_NEW:
    t.kind = trace::event_kind::sched_wakeup_new;
    t.target_cpu = e.cpu;
    break;
  case RSCHED_FL_MIGRATE:
    t.kind = trace::event_kind::sched_migrate_task;
    t.target_cpu = e.cpu;
    t.orig_cpu = e.orig_cpu;
    break;
  case RSCHED_FL_FORK:
    t.kind = trace::event_kind::sched_process_fork;
    break;
  case RSCHED_FL_EXIT:
    t.kind = trace::event_kind::sched_process_exit;
    break;
  default:
    t.kind = trace::event_kind::task_rename;
    break;
  }
  return t;
}

window::window(std::uint32_t cpus, std::int64_t span_ns, std::size_t max_events_per_cpu)
    : cpus_(cpus), span_(span_ns), cap_(std::max<std::size_t>(max_events_per_cpu, 1)) {}

void window::add(std::uint32_t cpu, const rsched_flight_event &e) {
  if (cpu >= cpus_.size()) {
    return;
  }
  auto &c = cpus_[cpu];
  newest_ = std::max(newest_, e.ts);
  c.q.push_back(e);
  if (e.kind == RSCHED_FL_RENAME) {
    if (auto n = names_.find(e.tid); n != names_.end()) {
      old_names_.push_back({e.ts, e.tid, n->second.comm});
      if (old_names_.size() > max_names) {
        old_names_.pop_front();
      }
    }
  }
  if (e.tid > 0 && e.kind != RSCHED_FL_EXIT) {
    if (names_.size() >= max_names && !names_.contains(e.tid)) {
      names_.clear(); // rebuilt from the stream
    }
    names_[e.tid] = name{e.tgid, comm_of(e.comm)};
  }
  const std::uint64_t horizon =
      newest_ > static_cast<std::uint64_t>(span_) ? newest_ - static_cast<std::uint64_t>(span_) : 0;
  while (!c.q.empty() && c.q.front().ts < horizon) {
    c.q.pop_front();
  }
  if (c.q.size() > cap_) {
    c.q.pop_front();
    ++evicted_early_;
  }
  while (!old_names_.empty() && old_names_.front().ts < horizon) {
    old_names_.pop_front();
  }
}

void window::note_lost(std::uint32_t cpu, std::uint64_t ts) {
  if (cpu < cpus_.size()) {
    cpus_[cpu].lost_ts = ts;
  }
}

std::size_t window::events() const {
  std::size_t n = 0;
  for (const auto &c : cpus_) {
    n += c.q.size();
  }
  return n;
}

window::capture window::snapshot(std::uint64_t to_ts) const {
  capture out;
  out.to_ts = to_ts;
  out.from_ts =
      to_ts > static_cast<std::uint64_t>(span_) ? to_ts - static_cast<std::uint64_t>(span_) : 0;
  // Names as the events before the window left them: a thread's latest name at each point is
  // followed through the window's events (a fork's parent, a rename's old name).
  std::unordered_map<std::int32_t, trace::comm_t> known;
  for (std::uint32_t cpu = 0; cpu < cpus_.size(); ++cpu) {
    const auto &c = cpus_[cpu];
    const std::size_t first = out.events.size();
    for (const auto &e : c.q) {
      if (e.ts < out.from_ts || e.ts > to_ts) {
        continue;
      }
      out.events.push_back(to_trace_event(cpu, e));
    }
    // Ring order is time order except for an event that interrupted another's program on the
    // same CPU (it took the next slot but read the clock first).
    std::stable_sort(
        out.events.begin() + static_cast<std::ptrdiff_t>(first), out.events.end(),
        [](const trace::sched_event &a, const trace::sched_event &b) { return a.ts < b.ts; });
    if (c.lost_ts && *c.lost_ts >= out.from_ts) {
      out.lossy_cpus.push_back(cpu);
    }
  }
  // A CPU whose older events were dropped by the cap holds less than the span: the window
  // starts at the latest of the CPUs' first events kept.
  for (const auto &c : cpus_) {
    if (!c.q.empty() && c.q.front().ts > out.from_ts && evicted_early_ > 0) {
      out.from_ts = std::max(out.from_ts, c.q.front().ts);
    }
  }
  // Old names for forks and renames, in global time order.
  std::vector<trace::sched_event *> order;
  order.reserve(out.events.size());
  for (auto &e : out.events) {
    order.push_back(&e);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto *a, const auto *b) { return a->ts < b->ts; });
  for (auto *e : order) {
    if (e->kind == trace::event_kind::task_rename) {
      for (const auto &o : old_names_) {
        if (o.ts == e->ts && o.tid == e->tid) {
          e->comm2 = o.comm;
        }
      }
    } else if (e->kind == trace::event_kind::sched_process_fork) {
      const std::int32_t who = e->pid;
      if (auto it = known.find(who); it != known.end()) {
        e->comm2 = it->second;
      } else if (auto n = names_.find(who); n != names_.end()) {
        e->comm2 = n->second.comm;
      }
    }
    if (e->kind != trace::event_kind::sched_process_exit && e->tid > 0) {
      known[e->tid] = e->comm;
    }
  }
  // Every thread the window's events name as running before (a switch's prev, a waker), with
  // the name the cache holds.
  std::unordered_map<std::int32_t, bool> listed;
  for (const auto &e : out.events) {
    if (e.pid > 0 && !listed.contains(e.pid)) {
      listed[e.pid] = true;
      if (auto n = names_.find(e.pid); n != names_.end()) {
        out.names.push_back({e.pid, n->second.tgid, n->second.comm});
      }
    }
  }
  return out;
}

std::optional<wait_watch::crossing> wait_watch::add(const rsched_flight_event &e) {
  if (since_.size() >= max_names) {
    since_.clear();
  }
  switch (e.kind) {
  case RSCHED_FL_WAKING:
  case RSCHED_FL_WAKEUP_NEW:
    since_.try_emplace(e.tid, e.ts);
    return std::nullopt;
  case RSCHED_FL_SWITCH: {
    // prev stays runnable: preempted, or switched out while TASK_RUNNING.
    if (e.pid > 0 && (e.preempt != 0 || e.state == 0)) {
      since_[e.pid] = e.ts;
    } else if (e.pid > 0) {
      since_.erase(e.pid);
    }
    if (e.tid <= 0) {
      return std::nullopt;
    }
    auto it = since_.find(e.tid);
    if (it == since_.end()) {
      return std::nullopt;
    }
    const std::uint64_t wait = e.ts > it->second ? e.ts - it->second : 0;
    since_.erase(it);
    if (wait > threshold_) {
      return crossing{e.tid, comm_of(e.comm), wait, e.ts};
    }
    return std::nullopt;
  }
  case RSCHED_FL_EXIT:
    since_.erase(e.tid);
    return std::nullopt;
  default:
    return std::nullopt;
  }
}

} // namespace rsched::flight
