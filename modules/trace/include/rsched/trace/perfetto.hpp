#pragma once
// Scheduler events as a Perfetto protobuf trace (the format ui.perfetto.dev and trace_processor
// open with thread states, as they open scxtop's and Perfetto's own ftrace traces), and back.
//
// Written by hand from Perfetto's public protos (the subset is proto/rsched_perfetto.proto):
// a trace is a handful of messages, all of them varints, strings and length-delimited nests, so
// a 100-line wire writer is simpler than Debian's protobuf (libprotobuf-dev plus protoc code
// generation at build time, a C++ runtime of ~3 MB linked into a daemon that otherwise never
// parses protobuf, and generated classes that copy every event into heap-allocated messages
// before serializing). The encoder writes each bundle's packed arrays straight from the events.
// The tests check it against `protoc --decode` over the .proto subset (tests/trace).
//
// What is written (docs/ARCHITECTURE.md, "Flight recorder"):
//  - a ClockSnapshot packet first, when the input has one: BOOTTIME, MONOTONIC and REALTIME read
//    together, BOOTTIME the primary trace clock (as Perfetto's traced writes one), so that
//    trace_processor and the UI can put wall time on the BOOTTIME timestamps;
//  - one ProcessTree packet: every thread named by an event (tid, tgid, name) and every
//    process (pid, its first thread's name as cmdline, cmdline_is_comm);
//  - per CPU, FtraceEventBundles of at most `bundle_events` events in time order: sched_switch
//    and sched_waking in the compact form (CompactSched: delta-coded timestamps, interned comms),
//    the rest (sched_wakeup_new, sched_migrate_task, sched_process_fork, sched_process_exit,
//    task_rename) as FtraceEvents; `lost_events` on a CPU's first bundle when events were lost
//    on that CPU before or inside the window.
// Timestamps are CLOCK_BOOTTIME ns, the clock Perfetto assumes for ftrace data.
#include "rsched/base/result.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::trace {

enum class event_kind : std::uint8_t {
  sched_switch = 1,
  sched_waking = 2,
  sched_wakeup_new = 3,
  sched_migrate_task = 4,
  sched_process_fork = 5,
  sched_process_exit = 6,
  task_rename = 7,
};

using comm_t = std::array<char, 16>; // NUL-padded, as the kernel's; any bytes (no UTF-8 check)

// One scheduler event as the flight recorder keeps it. Fields by kind:
//  sched_switch: pid = prev tid, prev_prio, prev_state (as ftrace prints it: ftrace_prev_state());
//    tid/tgid/prio/comm = next.
//  sched_waking, sched_wakeup_new: pid = the waker (current on `cpu`), tid/tgid/prio/comm = the
//    woken thread, target_cpu.
//  sched_migrate_task: tid/tgid/prio/comm = the thread, orig_cpu, target_cpu = destination.
//  sched_process_fork: pid = parent tid, comm2 = parent comm, tid/tgid/comm = child.
//  sched_process_exit: tid/tgid/prio/comm = the exiting thread.
//  task_rename: tid/tgid = the thread, comm2 = old name, comm = new name.
struct sched_event {
  std::uint64_t ts = 0; // CLOCK_BOOTTIME ns
  std::uint32_t cpu = 0;
  event_kind kind = event_kind::sched_switch;
  std::int32_t pid = 0;
  std::int32_t tid = 0;
  std::int32_t tgid = 0;
  std::int32_t prio = 0;
  std::int32_t prev_prio = 0;
  std::int64_t prev_state = 0;
  std::int32_t target_cpu = 0;
  std::int32_t orig_cpu = 0;
  comm_t comm{};
  comm_t comm2{};
  bool operator==(const sched_event &) const = default;
};

// A thread's name and process known before the window (from /proc, or from older events), for
// threads that appear in the window only as the one switched out.
struct thread_name {
  std::int32_t tid = 0;
  std::int32_t tgid = 0;
  comm_t comm{};
};

// The three clocks read together (ns): written as the trace's ClockSnapshot.
struct clock_snapshot {
  std::uint64_t boottime_ns = 0;
  std::uint64_t monotonic_ns = 0;
  std::uint64_t realtime_ns = 0;
  bool operator==(const clock_snapshot &) const = default;
};

struct trace_input {
  // Every CPU's events; each CPU's in time order (the encoder keeps per-CPU order and does not
  // sort; events of one CPU out of order are an error).
  std::span<const sched_event> events;
  std::span<const thread_name> names;
  // CPUs that lost events (kernel ring full) within or before the window: their first bundle
  // says lost_events.
  std::vector<std::uint32_t> lossy_cpus;
  std::size_t bundle_events = 4096;
  // The clock snapshot packet; nullopt: none (the trace's times are then boot times only).
  std::optional<clock_snapshot> clocks;
};

// The trace's bytes. Errors: a CPU's events out of time order.
result<std::string> encode(const trace_input &in);

// What decode() read back: the events (per CPU in file order; switch and waking expanded from
// the compact form, the switch's prev tid taken from the previous switch on that CPU, 0 for the
// first, its prev_prio 0 as the compact form does not keep it) and the ProcessTree's threads.
struct decoded_trace {
  std::vector<sched_event> events;
  std::vector<thread_name> threads;
  std::vector<std::uint32_t> lossy_cpus;
  std::optional<clock_snapshot> clocks; // the first ClockSnapshot's BOOTTIME, MONOTONIC, REALTIME
  std::size_t packets = 0;
};

// Reads a trace this encoder wrote (the subset above; other fields are skipped). Errors: bytes
// that are not protobuf wire format, a truncated message.
result<decoded_trace> decode(std::string_view bytes);

// sched_switch's prev_state as the kernel's tracepoint reports it (__trace_sched_switch_state,
// Linux >= 4.14, the form Perfetto parses): TASK_REPORT_MAX (0x100) for a preemption, else
// 1 << (index - 1) of the highest TASK_REPORT bit of `state | exit_state` (TASK_IDLE reported as
// TASK_REPORT_IDLE, 0x80), 0 for a thread still runnable.
std::int64_t ftrace_prev_state(bool preempt, std::uint32_t state, std::uint32_t exit_state);

std::string_view comm_view(const comm_t &c);
comm_t make_comm(std::string_view s);

} // namespace rsched::trace
