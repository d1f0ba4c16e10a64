#pragma once
// The flight recorder's user-side memory (pure: no BPF; tests/flight): the last `span` of each
// CPU's events, bounded, and what a capture makes of them.
//
// Memory: 64 bytes per event kept (the kernel's record as it is), at most `max_events_per_cpu`
// a CPU; the window is the last `span` ns or fewer when a CPU's events of `span` do not fit
// (then the oldest go first: the capture's window starts later; capture() says where). At
// 100,000 events/s on a CPU, 10 s is 64 MB for that CPU; the default cap, 1,048,576 events,
// is 64 MiB a CPU. Plus a name cache of at most 65,536 threads (~3 MiB).
#include "rsched/flight/flight_abi.h"
#include "rsched/trace/perfetto.hpp"

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

namespace rsched::flight {

// One event as a trace event (the switch's prev_state as ftrace reports it).
trace::sched_event to_trace_event(std::uint32_t cpu, const rsched_flight_event &e);

class window {
public:
  window(std::uint32_t cpus, std::int64_t span_ns, std::size_t max_events_per_cpu);

  // Adds `cpu`'s next event (in ring order) and drops what fell out of the window.
  void add(std::uint32_t cpu, const rsched_flight_event &e);
  // `cpu` lost events (kernel ring overrun) at about boot time `ts`.
  void note_lost(std::uint32_t cpu, std::uint64_t ts);

  struct capture {
    std::vector<trace::sched_event> events; // each CPU's in time order, CPU by CPU
    std::vector<trace::thread_name> names;  // threads the window names before they appear
    std::vector<std::uint32_t> lossy_cpus;  // lost events inside the window
    std::uint64_t from_ts = 0;              // boot ns: the window held [from_ts, to_ts]
    std::uint64_t to_ts = 0;
  };
  // The events of boot times [to_ts - span, to_ts] still held.
  [[nodiscard]] capture snapshot(std::uint64_t to_ts) const;

  [[nodiscard]] std::size_t events() const;
  [[nodiscard]] std::uint64_t evicted_early() const { return evicted_early_; }
  [[nodiscard]] std::uint64_t newest_ts() const { return newest_; }

private:
  struct cpu_events {
    std::deque<rsched_flight_event> q;
    std::optional<std::uint64_t> lost_ts; // the latest loss
  };
  std::vector<cpu_events> cpus_;
  std::int64_t span_;
  std::size_t cap_;
  std::uint64_t newest_ = 0;
  std::uint64_t evicted_early_ = 0; // dropped by the cap while younger than the span
  struct name {
    std::int32_t tgid;
    trace::comm_t comm;
  };
  std::unordered_map<std::int32_t, name> names_; // the latest name of each thread seen
  // Each rename's old name (the ring record holds the new one), by (ts, tid), oldest first.
  struct old_name {
    std::uint64_t ts;
    std::int32_t tid;
    trace::comm_t comm;
  };
  std::deque<old_name> old_names_;
};

// The "any thread's wait" trigger: from the event stream, each thread's wait (runnable from a
// waking, a wakeup_new or a preemption until its switch-in); a wait longer than the threshold
// is a crossing. Bounded: at most 65,536 threads tracked (cleared when full).
class wait_watch {
public:
  explicit wait_watch(std::uint64_t threshold_ns) : threshold_(threshold_ns) {}
  struct crossing {
    std::int32_t tid;
    trace::comm_t comm;
    std::uint64_t wait_ns;
    std::uint64_t ts; // the switch-in
  };
  // The crossing this event ends, if any.
  std::optional<crossing> add(const rsched_flight_event &e);

private:
  std::uint64_t threshold_;
  std::unordered_map<std::int32_t, std::uint64_t> since_;
};

} // namespace rsched::flight
