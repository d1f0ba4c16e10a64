// SPDX-License-Identifier: GPL-2.0
/*
 * rsched's flight recorder (rschedd --flight-recorder): every scheduler event of the tracepoints
 * below, as one 64-byte record in its CPU's ring (flight_abi.h: the protocol), for user space to
 * keep the last seconds of. A separate object from rsched.bpf.c, loaded only when asked, so the
 * default recording costs nothing more. Exactly one variant per tracepoint is loaded: tp_btf
 * (direct loads), or raw_tp (probe reads) where the kernel cannot take tp_btf.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "rsched/flight/flight_abi.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by user space before load: slots per CPU ring (a power of two) less one, and the CPUs. */
const volatile __u32 slot_mask = 0;
const volatile __u32 nr_cpus = 1;

/* cpu * (slot_mask + 1) + index: every CPU's ring, back to back (sized and mmapped by user
 * space). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct rsched_flight_event);
	__uint(max_entries, 1);
} ring SEC(".maps");

/* Each CPU's next ring index, one cache line apart (mmapped .bss). */
__u64 heads[RSCHED_FLIGHT_MAX_CPUS * RSCHED_FLIGHT_HEAD_STRIDE];

/* Kernel drift (CO-RE): task_struct::state became __state in v5.14; the CPU moved from
 * thread_info into task_struct on some arches in v5.16. */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

#define READ(btf, ptr, field) ((btf) ? (ptr)->field : BPF_CORE_READ((ptr), field))

static __always_inline __u32 run_state(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->__state))
		return READ(btf, t, __state);
	return (__u32)READ(btf, (struct task_struct___o *)t, state);
}

static __always_inline __u32 cpu_of(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->thread_info.cpu))
		return READ(btf, t, thread_info.cpu);
	return READ(btf, (struct task_struct___cpu *)t, cpu);
}

static __always_inline void comm_of(char *out, struct task_struct *t, bool btf)
{
	if (btf)
		__builtin_memcpy(out, t->comm, 16);
	else
		bpf_probe_read_kernel_str(out, 16, &t->comm);
}

/* The next slot of this CPU's ring, or NULL (a CPU beyond the table). */
static __always_inline struct rsched_flight_event *reserve(__u64 *idx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	if (cpu >= nr_cpus || cpu >= RSCHED_FLIGHT_MAX_CPUS)
		return NULL;
	*idx = __sync_fetch_and_add(&heads[cpu * RSCHED_FLIGHT_HEAD_STRIDE], 1);
	__u32 key = cpu * (slot_mask + 1) + ((__u32)*idx & slot_mask);
	return bpf_map_lookup_elem(&ring, &key);
}

static __always_inline void publish(struct rsched_flight_event *e, __u64 idx)
{
	__sync_lock_test_and_set(&e->seq, idx + 1);
}

/* Fills the common part: time, the running thread, the kind, and the subject `t`. */
static __always_inline void fill(struct rsched_flight_event *e, __u8 kind, struct task_struct *t,
				 bool btf)
{
	e->ts = bpf_ktime_get_boot_ns();
	e->pid = (__s32)bpf_get_current_pid_tgid();
	e->kind = kind;
	e->tid = READ(btf, t, pid);
	e->tgid = READ(btf, t, tgid);
	e->prio = (__s16)READ(btf, t, prio);
	comm_of(e->comm, t, btf);
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev,
				     struct task_struct *next, bool btf)
{
	__u64 idx;
	struct rsched_flight_event *e = reserve(&idx);
	if (!e)
		return 0;
	fill(e, RSCHED_FL_SWITCH, next, btf);
	e->pid = READ(btf, prev, pid);
	e->prev_prio = (__s16)READ(btf, prev, prio);
	e->state = run_state(prev, btf);
	e->exit_state = READ(btf, prev, exit_state);
	e->preempt = preempt;
	e->cpu = 0;
	e->orig_cpu = 0;
	publish(e, idx);
	return 0;
}

static __always_inline int on_wake(struct task_struct *p, __u8 kind, bool btf)
{
	__u64 idx;
	struct rsched_flight_event *e = reserve(&idx);
	if (!e)
		return 0;
	fill(e, kind, p, btf);
	e->cpu = (__u16)cpu_of(p, btf);
	e->orig_cpu = 0;
	e->state = 0;
	e->exit_state = 0;
	e->preempt = 0;
	e->prev_prio = 0;
	publish(e, idx);
	return 0;
}

static __always_inline int on_migrate(struct task_struct *p, int dest, bool btf)
{
	__u64 idx;
	struct rsched_flight_event *e = reserve(&idx);
	if (!e)
		return 0;
	fill(e, RSCHED_FL_MIGRATE, p, btf);
	e->cpu = (__u16)dest;
	e->orig_cpu = (__u16)cpu_of(p, btf);
	e->state = 0;
	e->exit_state = 0;
	e->preempt = 0;
	e->prev_prio = 0;
	publish(e, idx);
	return 0;
}

/* fork: the child; exit: the exiting thread; rename: the thread with its new name. */
static __always_inline int on_task(struct task_struct *t, __u8 kind, const char *new_comm, bool btf)
{
	__u64 idx;
	struct rsched_flight_event *e = reserve(&idx);
	if (!e)
		return 0;
	fill(e, kind, t, btf);
	if (new_comm)
		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), new_comm);
	e->cpu = 0;
	e->orig_cpu = 0;
	e->state = 0;
	e->exit_state = 0;
	e->preempt = 0;
	e->prev_prio = 0;
	publish(e, idx);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(fl_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(fl_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, false);
}

SEC("tp_btf/sched_waking")
int BPF_PROG(fl_waking_btf, struct task_struct *p) { return on_wake(p, RSCHED_FL_WAKING, true); }

SEC("raw_tp/sched_waking")
int BPF_PROG(fl_waking_raw, struct task_struct *p) { return on_wake(p, RSCHED_FL_WAKING, false); }

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(fl_wakeup_new_btf, struct task_struct *p)
{
	return on_wake(p, RSCHED_FL_WAKEUP_NEW, true);
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(fl_wakeup_new_raw, struct task_struct *p)
{
	return on_wake(p, RSCHED_FL_WAKEUP_NEW, false);
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(fl_migrate_btf, struct task_struct *p, int dest_cpu)
{
	return on_migrate(p, dest_cpu, true);
}

SEC("raw_tp/sched_migrate_task")
int BPF_PROG(fl_migrate_raw, struct task_struct *p, int dest_cpu)
{
	return on_migrate(p, dest_cpu, false);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(fl_fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return on_task(child, RSCHED_FL_FORK, NULL, true);
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(fl_fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return on_task(child, RSCHED_FL_FORK, NULL, false);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(fl_exit_btf, struct task_struct *p) { return on_task(p, RSCHED_FL_EXIT, NULL, true); }

SEC("raw_tp/sched_process_exit")
int BPF_PROG(fl_exit_raw, struct task_struct *p) { return on_task(p, RSCHED_FL_EXIT, NULL, false); }

SEC("tp_btf/task_rename")
int BPF_PROG(fl_rename_btf, struct task_struct *t, const char *comm)
{
	return on_task(t, RSCHED_FL_RENAME, comm, true);
}

SEC("raw_tp/task_rename")
int BPF_PROG(fl_rename_raw, struct task_struct *t, const char *comm)
{
	return on_task(t, RSCHED_FL_RENAME, comm, false);
}
