// SPDX-License-Identifier: GPL-2.0
/*
 * What a scheduler-tracepoint program costs before it does anything (bench/bpf_floor.sh): with
 * FLOOR_EMPTY, three programs that return at once (the run's fixed cost as kernel.bpf_stats
 * counts it); without, one primitive each: a clock read (bpf_ktime_get_ns into a per-CPU value),
 * a task-storage get (creating, then one store) and both.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64[8]);
} ts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[8]);
} pc SEC(".maps");

#ifdef FLOOR_EMPTY
SEC("tp_btf/sched_switch")
int BPF_PROG(empty_switch) { return 0; }

SEC("tp_btf/sched_wakeup")
int BPF_PROG(empty_wakeup) { return 0; }

SEC("tp_btf/sched_waking")
int BPF_PROG(empty_waking) { return 0; }
#else
SEC("tp_btf/sched_switch")
int BPF_PROG(clock_read, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 z = 0;
	__u64 *v = bpf_map_lookup_elem(&pc, &z);
	if (v)
		v[0] = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(storage_get, struct task_struct *p)
{
	__u64 *v = bpf_task_storage_get(&ts, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (v)
		v[0]++;
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(storage_and_clock, struct task_struct *p)
{
	__u64 *v = bpf_task_storage_get(&ts, p, 0, 0);
	if (v)
		v[1] = bpf_ktime_get_ns();
	return 0;
}
#endif
