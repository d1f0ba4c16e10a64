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

#if defined(FLOOR_MINIMAL)
/* The least a per-thread wait measurement can do (bench/bpf_floor.sh --minimal): runqlat's
 * design with task storage for its hash map and no histogram, pid filter or depth. A wakeup
 * stamps the wait's start (the clock, once), a switch-in adds the wait to the thread's total, a
 * preempted thread's wait starts at its switch-out (sharing the switch's read). Named
 * sched_switch* so that bench/bpf_cost.py counts its time per context switch. */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_min, struct task_struct *p)
{
	__u64 *v = bpf_task_storage_get(&ts, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (v && !v[0])
		v[0] = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_min, struct task_struct *p)
{
	__u64 *v = bpf_task_storage_get(&ts, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (v && !v[0])
		v[0] = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_min, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = 0, *v;

	if (prev->__state == 0 /* TASK_RUNNING: still queued */) {
		v = bpf_task_storage_get(&ts, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (v)
			v[0] = now = bpf_ktime_get_ns();
	}
	v = bpf_task_storage_get(&ts, next, 0, 0);
	if (v && v[0]) {
		if (!now)
			now = bpf_ktime_get_ns();
		v[1] += now - v[0];
		v[2]++;
		v[0] = 0;
	}
	return 0;
}
#elif defined(FLOOR_EMPTY)
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
