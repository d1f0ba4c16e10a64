// SPDX-License-Identifier: GPL-2.0
/*
 * An independent measurement of scheduling delay for the root tests, written the way runqlat
 * (libbpf-tools) measures it and sharing no code with rsched: the monotonic clock at sched_wakeup
 * / sched_wakeup_new, or at a switch-out that leaves the task TASK_RUNNING, to its next switch-in.
 * Only the children of the processes user space lists in `watched` (by tgid) are measured, from
 * their creation on; per thread it sums the delays, counts them and keeps the longest.
 *
 * For the wakeup group, the same children's sleeps: from a switch-out that does not leave the
 * task runnable to the sched_wakeup that ends it (where its wait for the CPU begins), counted
 * and summed per (sleeper tid, the waking process's tgid: whatever is current at the
 * sched_waking before it, interrupts included).
 *
 * Each delay itself, in the order measured, with its thread: the first SAMPLES of them (exact
 * percentiles; user space reads nsamples, sample_tid and sample_ns from .bss).
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct totals {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct totals);
} delay SEC(".maps");

#define SAMPLES 32768
__u32 nsamples;
__u32 sample_tid[SAMPLES];
__u64 sample_ns[SAMPLES];

struct waker_key {
	__u32 tid;  /* the sleeper */
	__u32 tgid; /* current at its sched_waking */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} asleep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct waker_key);
	__type(value, struct totals);
} wakers SEC(".maps");

/* sleeper tid -> the process current at its sched_waking (its waker) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} waker SEC(".maps");

SEC("tp_btf/sched_waking")
int BPF_PROG(waking, struct task_struct *p)
{
	__u32 tid = p->pid;
	__u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);

	if (bpf_map_lookup_elem(&asleep, &tid))
		bpf_map_update_elem(&waker, &tid, &tgid, BPF_ANY);
	return 0;
}

/* A sleep ends at the sched_wakeup that follows its sched_waking, charged to that waker. */
static __always_inline void woken(struct task_struct *p, __u64 now)
{
	__u32 tid = p->pid;
	__u64 *since = bpf_map_lookup_elem(&asleep, &tid);
	__u32 *by = bpf_map_lookup_elem(&waker, &tid);
	struct totals *t, zero = {};

	if (!since || !by)
		return;
	struct waker_key k = {.tid = tid, .tgid = *by};
	__u64 ns = now > *since ? now - *since : 0;
	bpf_map_delete_elem(&asleep, &tid);
	bpf_map_delete_elem(&waker, &tid);
	t = bpf_map_lookup_elem(&wakers, &k);
	if (!t) {
		bpf_map_update_elem(&wakers, &k, &zero, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&wakers, &k);
	}
	if (t) {
		__sync_fetch_and_add(&t->count, 1);
		__sync_fetch_and_add(&t->total_ns, ns);
	}
}

static __always_inline void enqueued(struct task_struct *p, __u64 now)
{
	__u32 parent = p->real_parent->tgid;
	__u32 tid = p->pid;

	if (!bpf_map_lookup_elem(&watched, &parent))
		return;
	bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(wakeup, struct task_struct *p)
{
	__u64 now = bpf_ktime_get_ns();

	woken(p, now);
	enqueued(p, now);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(wakeup_new, struct task_struct *p)
{
	enqueued(p, bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 tid = next->pid;
	__u64 *ts;
	struct totals *t, zero = {};

	if (prev->__state == 0) { /* runqlat's rule (and the kernel's sched_info_depart) */
		enqueued(prev, now);
	} else if (!preempt) { /* preempted on its way to sleep: neither waits nor sleeps yet */
		__u32 parent = prev->real_parent->tgid, ptid = prev->pid;
		if (bpf_map_lookup_elem(&watched, &parent))
			bpf_map_update_elem(&asleep, &ptid, &now, BPF_ANY);
	}
	ts = bpf_map_lookup_elem(&start, &tid);
	if (!ts)
		return 0;
	if (now > *ts) {
		t = bpf_map_lookup_elem(&delay, &tid);
		if (!t) {
			bpf_map_update_elem(&delay, &tid, &zero, BPF_NOEXIST);
			t = bpf_map_lookup_elem(&delay, &tid);
		}
		if (t) {
			__sync_fetch_and_add(&t->count, 1);
			__sync_fetch_and_add(&t->total_ns, now - *ts);
			if (now - *ts > t->max_ns)
				t->max_ns = now -
					    *ts; /* a thread is switched in on one CPU at a time */
		}
		__u32 i = __sync_fetch_and_add(&nsamples, 1);
		if (i < SAMPLES) {
			sample_tid[i] = tid;
			sample_ns[i] = now - *ts;
		}
	}
	bpf_map_delete_elem(&start, &tid);
	return 0;
}
