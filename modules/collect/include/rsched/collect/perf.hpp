#pragma once
// Perf events of the perf group: event-name resolution and the --perf-list text (upstream
// pmu.rs), and the per-CPU counters whose fds the BPF program reads at every context switch
// (upstream perf.rs).
//
// Departures from upstream, on purpose:
//  - software aliases (cpu-clock, task-clock, context-switches/cs, page-faults, cpu-migrations,
//    minor-faults, major-faults) and generic hardware names (cycles, instructions, cache-misses,
//    branch-misses) resolve before sysfs, so they are portable across CPU vendors and usable on
//    machines without a hardware PMU (VMs);
//  - CPUs come from /sys/devices/system/cpu/online (non-contiguous lists work), not 0..nproc;
//  - counters are read with TOTAL_TIME_ENABLED/RUNNING, so multiplexing is visible;
//  - errors are one line that says why (no PMU, permissions, ...);
//  - --perf-list has no libpfm4 section.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::collect {

struct event_spec {
  std::string name;       // display name (upstream's names for its aliases, e.g. "L2 Cache Misses")
  std::uint32_t type = 0; // perf_event_attr.type (PERF_TYPE_*, or a dynamic PMU type from sysfs)
  std::uint64_t config = 0;
  bool ipc = false; // the 4-counter IPC set (counter slots 0..3); type/config are unused then
};

// AMD raw encoding of an event select and unit mask (AMD's /sys/devices/cpu/format: event is
// config:0-7,32-35, umask is config:8-15). Bits of `event` above 11 are dropped, as upstream.
std::uint64_t encode_amd_raw(std::uint32_t event, std::uint8_t umask);

// Resolves one perf-event token of `-g`. Order (upstream's, plus our aliases in step 1):
//  1. built-in aliases: ipc, l1d-miss, l2-miss, l1i-miss, l3-miss; then the software and generic
//     hardware names listed above;
//  2. r<hex>: PERF_TYPE_RAW with the config verbatim, named "raw:0x<hex>";
//  3. a sysfs event of the core PMU: <root>/bus/event_source/devices/cpu/events/<name> (or
//     <root>/devices/cpu/events/<name>, the same directory on most systems).
// The error is one line listing what is accepted.
result<event_spec> resolve_event(std::string_view token,
                                 const std::filesystem::path &sysfs_root = "/sys");

// The --perf-list text (ends with a newline).
std::string perf_list(const std::filesystem::path &sysfs_root = "/sys");

// Online CPUs from <root>/devices/system/cpu/online, ascending.
result<std::vector<unsigned>> online_cpus(const std::filesystem::path &sysfs_root = "/sys");

struct counter_fd {
  unsigned cpu = 0;
  unsigned slot = 0; // rsched_counter_slot: 0..3 IPC, 4 + i generic event i
  int fd = -1;
  std::string name; // "user_cycles", ... for IPC slots; the event name for generic slots
};

struct counter_time {
  unsigned cpu = 0;
  unsigned slot = 0;
  std::string name;
  std::uint64_t value = 0;
  std::uint64_t enabled_ns = 0; // time the counter was enabled
  std::uint64_t running_ns = 0; // time it was on the PMU; < enabled_ns when multiplexed
};

// System-wide counters, one fd per CPU per counter, opened enabled and reset. They are installed
// into the BPF program with bpf::program::set_counter_fd(cpu, slot, fd) by the caller; this
// module owns the fds and closes them.
class counter_set {
public:
  // `generic`: at most RSCHED_MAX_GENERIC_EVENTS events, event i in slot 4 + i. `ipc`: the four
  // IPC counters (cycles and instructions, user and kernel apart) in slots 0..3. Any counter that
  // cannot be opened on any CPU fails the whole set with one line.
  static result<counter_set> open(const std::vector<event_spec> &generic, bool ipc,
                                  const std::vector<unsigned> &cpus);

  [[nodiscard]] const std::vector<counter_fd> &fds() const { return fds_; }
  // Bit `slot` set for every slot opened (the BPF options' counter_mask).
  [[nodiscard]] std::uint32_t slot_mask() const { return mask_; }
  // Current value and enabled/running times of every counter, in fds() order.
  [[nodiscard]] result<std::vector<counter_time>> read_times() const;

  counter_set() = default;
  counter_set(counter_set &&other) noexcept;
  counter_set &operator=(counter_set &&other) noexcept;
  counter_set(const counter_set &) = delete;
  counter_set &operator=(const counter_set &) = delete;
  ~counter_set();

private:
  void close_all() noexcept;
  std::vector<counter_fd> fds_;
  std::uint32_t mask_ = 0;
};

} // namespace rsched::collect
