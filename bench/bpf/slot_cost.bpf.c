// SPDX-License-Identifier: GPL-2.0
/*
 * The latency slot function's cost in BPF, run by the kernel's own test runner
 * (bench/slot_cost.sh): three XDP programs each compute 64 slots of durations base + i * step read
 * from the test packet. slot_plain is the division form rsched_hist_slot had (ns / 1000, then / 10
 * below 500 us), slot_abi the one sched_abi.h has (the coarse slot of the division-free fine slot),
 * and slot_none the loop alone; (prog - none) / 64 is one slot's cost.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "rsched/abi/sched_abi.h"

static __always_inline __u32 plain_slot(__u64 ns)
{
	__u64 us = ns / 1000;
	__u32 slot;
	if (us < 500)
		return (__u32)(us / RSCHED_HIST_LINEAR_STEP_US);
	if (us < 512)
		return RSCHED_HIST_LINEAR_SLOTS;
	slot = rsched_log2_u64(us) + RSCHED_HIST_LOG2_BASE_SLOT;
	return slot < RSCHED_HIST_SLOTS - 1 ? slot : RSCHED_HIST_SLOTS - 1;
}

static __always_inline __u32 no_slot(__u64 ns) { return (__u32)ns; }

#define SLOTS_OF(ctx, fn)                                                                          \
	do {                                                                                       \
		void *data = (void *)(long)(ctx)->data, *end = (void *)(long)(ctx)->data_end;      \
		__u64 acc = 0;                                                                     \
		if (data + 16 > end)                                                               \
			return 0;                                                                  \
		__u64 base = *(__u64 *)data, step = *(__u64 *)(data + 8);                          \
		for (__u32 i = 0; i < 64; i++) {                                                   \
			__u64 v = base + i * step;                                                 \
			asm volatile("" : "+r"(v)); /* no folding across iterations */             \
			acc += fn(v);                                                              \
		}                                                                                  \
		return (int)(acc & 1) + 1;                                                         \
	} while (0)

SEC("xdp") int slot_plain(struct xdp_md *ctx) { SLOTS_OF(ctx, plain_slot); }

SEC("xdp") int slot_abi(struct xdp_md *ctx) { SLOTS_OF(ctx, rsched_hist_slot); }

SEC("xdp") int slot_none(struct xdp_md *ctx) { SLOTS_OF(ctx, no_slot); }

char LICENSE[] SEC("license") = "GPL";
