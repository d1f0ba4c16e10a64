/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reading a task and its runqueue in either attach mode. Part of rsched.bpf.c, included after its
 * maps; not a standalone header.
 *
 * Holds: the CO-RE flavours for kernel drift (task_struct::state, the task's CPU,
 * cfs_rq::h_nr_delayed); READ() (a direct BTF load in tp_btf/iter programs, a probe read in
 * raw_tp); and the readers built on them: a task's run state, CPU, runqueue, cgroup id, comm and
 * identity (fill_key), a runqueue's waiting threads (rq_waiters) and clock (rq_clock_of), and
 * comm_eq().
 *
 * Expects: vmlinux.h, <bpf/bpf_core_read.h>, <bpf/bpf_helpers.h> and rsched/abi/sched_abi.h.
 * Uses no map or global.
 */
#ifndef RSCHED_TASK_BPF_H
#define RSCHED_TASK_BPF_H

/* Kernel drift, handled with CO-RE flavours:
 *  - v5.14 (2f064a59a1) renamed task_struct::state to __state;
 *  - v5.16 (bcf9033e5449) moved the CPU number from thread_info to task_struct on some arches.
 */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

/* READ(btf, ptr, field): direct BTF access in tp_btf/iter programs, probe read in raw_tp. `btf` is
 * a compile-time constant in every caller, so only one of the two is emitted. */
#define READ(btf, ptr, field) ((btf) ? (ptr)->field : BPF_CORE_READ((ptr), field))

static __always_inline __u32 task_run_state(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->__state))
		return READ(btf, t, __state);
	return (__u32)READ(btf, (struct task_struct___o *)t, state);
}

static __always_inline __s32 task_cpu_of(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->thread_info.cpu))
		return (__s32)READ(btf, t, thread_info.cpu);
	return (__s32)READ(btf, (struct task_struct___cpu *)t, cpu);
}

/* The runqueue a task is on, through its cfs_rq (CONFIG_FAIR_GROUP_SCHED). Upstream uses the
 * per-CPU `runqueues` ksym instead, which the verifier can only resolve with
 * CONFIG_KALLSYMS_ALL; this project's CI kernel lacks it, as many distribution kernels. */
static __always_inline struct rq *task_rq_of(struct task_struct *p, bool btf)
{
	if (!bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return NULL;
	return btf ? p->se.cfs_rq->rq : BPF_CORE_READ(p, se.cfs_rq, rq);
}

/* Linux 6.12-6.13: a fair task that sleeps while it still owes lag stays queued ("delayed
 * dequeue"), counted in h_nr_running and h_nr_delayed (6.14 on: h_nr_queued - h_nr_runnable). */
struct cfs_rq___v612 {
	unsigned int h_nr_delayed;
} __attribute__((preserve_access_index));

/* The threads that wait on runqueue `rq` for its CPU besides the one running (switched in): its
 * nr_running less one and less the sleeping fair tasks still queued (delayed dequeue), which
 * wait for nothing. 1 when the runqueue cannot be read (as if one waited). */
static __always_inline __u32 rq_waiters(struct rq *rq, bool btf)
{
	if (!rq)
		return 1;
	__u32 nr = btf ? rq->nr_running : BPF_CORE_READ(rq, nr_running), delayed = 0;
	struct cfs_rq *cfs = &rq->cfs;
	if (bpf_core_field_exists(cfs->h_nr_runnable) && bpf_core_field_exists(cfs->h_nr_queued)) {
		__u32 q = btf ? cfs->h_nr_queued : BPF_CORE_READ(cfs, h_nr_queued);
		__u32 run = btf ? cfs->h_nr_runnable : BPF_CORE_READ(cfs, h_nr_runnable);
		delayed = q > run ? q - run : 0;
	} else {
		struct cfs_rq___v612 *old = (struct cfs_rq___v612 *)cfs;
		if (bpf_core_field_exists(old->h_nr_delayed))
			delayed = BPF_CORE_READ(old, h_nr_delayed);
	}
	nr = nr > delayed ? nr - delayed : 0;
	return nr > 1 ? nr - 1 : 0;
}

/* The runqueue clock (rq->clock, the clock the kernel's own sched_info run_delay uses, updated
 * under the rq lock just before these tracepoints): with --delay-clock runqueue the recorded delay
 * is measured exactly as /proc/<pid>/schedstat's. It is not advanced on the switch that follows
 * a wakeup preemption, so it misses the time a CPU takes to leave idle; the default is therefore
 * the monotonic clock, as upstream, runqlat, perf sched and Perfetto. Without a reachable rq, the
 * monotonic clock. */
static __always_inline __u64 rq_clock_of(struct task_struct *p, bool btf)
{
	struct rq *rq = task_rq_of(p, btf);
	if (rq) {
		__u64 c = btf ? rq->clock : BPF_CORE_READ(rq, clock);
		if (c)
			return c;
	}
	return bpf_ktime_get_ns();
}

/* The kernel's own account of a task's waits (struct sched_info, CONFIG_SCHED_INFO): the runqueue
 * clock when the task was queued to wait (last_queued; 0 while it does not wait: set by
 * sched_info_enqueue at a wakeup's enqueue or a switch-out in state TASK_RUNNING, cleared by its
 * switch-in or a dequeue) and when a counted wait last ended in a switch-in (last_arrival). Both
 * are read only when user space found the kernel keeping them (`live`, see rsched.bpf.c). */
static __always_inline __u64 kernel_queued_at(struct task_struct *t, bool live, bool btf)
{
	if (!live || !bpf_core_field_exists(t->sched_info))
		return 0;
	return READ(btf, t, sched_info.last_queued);
}

/* The kernel's count of `t`'s waits (sched_info.pcount), low 16 bits: enq_pcount's stamp. 0
 * unless `live`. */
static __always_inline __u16 kernel_pcount16(struct task_struct *t, bool live, bool btf)
{
	if (!live || !bpf_core_field_exists(t->sched_info))
		return 0;
	return (__u16)READ(btf, t, sched_info.pcount);
}

/* The kernel's run_delay of `t` in k_delay's 1024 ns units (low 32 bits). */
static __always_inline __u32 kernel_delay_units(struct task_struct *t, bool btf)
{
	return (__u32)(READ(btf, t, sched_info.run_delay) >> 10);
}

/* How long `t`, running on this CPU and being switched out now, has been on the CPU since its
 * last switch-in, in runqueue-clock ns: from the kernel's sched_info.last_arrival (the
 * runqueue clock at that switch-in) when it is kept, else from the fair class's CPU time since
 * the task was picked (se.sum_exec_runtime - se.prev_sum_exec_runtime, both brought up to date
 * before the switch). 0 when neither can tell. */
static __always_inline __u64 ran_since_switch_in(struct task_struct *t, bool live, bool btf)
{
	if (live && bpf_core_field_exists(t->sched_info)) {
		__u64 at = READ(btf, t, sched_info.last_arrival);
		__u64 now = rq_clock_of(t, btf);
		if (at && now >= at)
			return now - at;
	}
	__u64 sum = READ(btf, t, se.sum_exec_runtime);
	__u64 before = READ(btf, t, se.prev_sum_exec_runtime);
	return sum > before ? sum - before : 0;
}

/* The cgroup v2 id of `t`. tp_btf: direct loads (the JIT guards them against faults; each
 * probe-read helper call costs ~90 ns on a paravirtualised VM). */
static __always_inline __u64 cgroup_of(struct task_struct *t, bool btf)
{
	return btf ? t->cgroups->dfl_cgrp->kn->id : BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* The comm of `t` into `out` (16 bytes). The kernel pads comm with zeros (strscpy_pad), so in
 * tp_btf mode its 16 bytes are copied as they are. */
static __always_inline void comm_of(char *out, struct task_struct *t, bool btf)
{
	if (btf)
		__builtin_memcpy(out, t->comm, RSCHED_COMM_LEN);
	else
		bpf_probe_read_kernel_str(out, RSCHED_COMM_LEN, &t->comm);
}

/* The identity of `t` (tid, tgid, start time). */
static __always_inline void fill_key(struct rsched_task_ident *id, struct task_struct *t, bool btf)
{
	id->tid = (__u32)READ(btf, t, pid);
	id->tgid = (__u32)READ(btf, t, tgid);
	id->start_time = READ(btf, t, start_time);
}

/* Copies a 16-byte comm, both 8-byte aligned, as two words: __builtin_memcpy through char
 * pointers is compiled to single bytes (a load and a store each: 32 instructions). */
static __always_inline void copy_comm(char *dst, const char *src)
{
	((__u64 *)dst)[0] = ((const __u64 *)src)[0];
	((__u64 *)dst)[1] = ((const __u64 *)src)[1];
}

/* Whether two 16-byte comms are equal (both 8-byte aligned). */
static __always_inline bool comm_eq(const char *a, const char *b)
{
	return ((const __u64 *)a)[0] == ((const __u64 *)b)[0] &&
	       ((const __u64 *)a)[1] == ((const __u64 *)b)[1];
}

#endif /* RSCHED_TASK_BPF_H */
