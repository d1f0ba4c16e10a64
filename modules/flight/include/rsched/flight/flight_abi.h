/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * The flight recorder's kernel/user boundary (modules/flight/bpf/flight.bpf.c and
 * rsched::flight): one 64-byte record per scheduler event in a per-CPU ring of a mmapped array
 * map, and the per-CPU head each CPU's programs advance. Compiled by clang -target bpf and g++.
 *
 * The ring protocol (never blocking the kernel side): a program takes the next index of its
 * CPU's ring with one atomic add on that CPU's head (so a program interrupted by another on the
 * same CPU, an interrupt's wakeup inside a fork's, gets the next slot), writes the record, then
 * publishes it by exchanging `seq` to index + 1 (BPF_XCHG is fully ordered). The reader copies
 * a slot and takes it only when `seq` was index + 1 before and after the copy; a slot the
 * writers passed before it was read (more than RSCHED_FLIGHT_SLOTS behind the head) is lost
 * and counted by the reader.
 */
#ifndef RSCHED_FLIGHT_ABI_H
#define RSCHED_FLIGHT_ABI_H

#ifdef __cplusplus
#include <cstddef>
#include <cstdint>
typedef std::uint64_t rsched_fl_u64;
typedef std::int32_t rsched_fl_s32;
typedef std::uint32_t rsched_fl_u32;
typedef std::int16_t rsched_fl_s16;
typedef std::uint16_t rsched_fl_u16;
typedef std::uint8_t rsched_fl_u8;
#else
typedef __u64 rsched_fl_u64;
typedef __s32 rsched_fl_s32;
typedef __u32 rsched_fl_u32;
typedef __s16 rsched_fl_s16;
typedef __u16 rsched_fl_u16;
typedef __u8 rsched_fl_u8;
#endif

enum rsched_flight_kind {
  RSCHED_FL_SWITCH = 1,
  RSCHED_FL_WAKING = 2,
  RSCHED_FL_WAKEUP_NEW = 3,
  RSCHED_FL_MIGRATE = 4,
  RSCHED_FL_FORK = 5,
  RSCHED_FL_EXIT = 6,
  RSCHED_FL_RENAME = 7,
};

enum {
  RSCHED_FLIGHT_MAX_CPUS = 1024,
  /* u64s between two CPUs' heads: one cache line each. */
  RSCHED_FLIGHT_HEAD_STRIDE = 8,
};

/* One event. pid: the thread running on the CPU (ftrace's common_pid; a switch's prev).
 * tid/tgid/prio/comm: the event's subject (switch: next; waking, wakeup_new: the woken thread;
 * migrate: the moved one; fork: the child; exit: the exiting thread; rename: the thread, comm its
 * new name). state/exit_state/preempt: a switch's prev->__state, prev->exit_state and the
 * tracepoint's preempt; prev_prio its prio. cpu: a waking's target (task_cpu), a migration's
 * destination; orig_cpu: a migration's origin. */
struct rsched_flight_event {
  rsched_fl_u64 seq; /* ring index + 1 once written */
  rsched_fl_u64 ts;  /* CLOCK_BOOTTIME ns (bpf_ktime_get_boot_ns) */
  rsched_fl_s32 pid;
  rsched_fl_s32 tid;
  rsched_fl_s32 tgid;
  rsched_fl_s16 prio;
  rsched_fl_s16 prev_prio;
  rsched_fl_u32 state;
  rsched_fl_u32 exit_state;
  rsched_fl_u16 cpu;
  rsched_fl_u16 orig_cpu;
  rsched_fl_u8 kind;
  rsched_fl_u8 preempt;
  rsched_fl_u16 pad;
  char comm[16];
};

#ifdef __cplusplus
static_assert(sizeof(rsched_flight_event) == 64, "one cache line per event");
static_assert(offsetof(rsched_flight_event, comm) == 48);
#else
_Static_assert(sizeof(struct rsched_flight_event) == 64, "one cache line per event");
#endif

#endif /* RSCHED_FLIGHT_ABI_H */
