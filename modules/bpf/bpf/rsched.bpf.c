// SPDX-License-Identifier: GPL-2.0
/*
 * rsched BPF programs: per-thread and per-CPU scheduling delay (monotonic clock by default) and
 * runqueue depth at wakeup, and the other metric groups.
 *
 * Design (docs/ARCHITECTURE.md):
 *  - All per-thread state is cumulative and lives with the task: task-local storage in tp_btf
 *    mode (one cheap lookup per event, freed with the task), a tid-keyed hash in raw_tp mode.
 *    User space never resets anything; it takes deltas between reads, so no increment is lost at
 *    an interval boundary.
 *  - Live threads are read from a dirty list (tp_btf mode): the first change of a thread in a
 *    read epoch appends a task reference to the epoch's list; syscall programs run by user
 *    space flip the epoch and emit the listed threads' records into an mmapped array. The task
 *    iterator reads every thread (the periodic full read, a list overflow, a kernel or clang
 *    without referenced kptrs); raw_tp mode reads its hash with batch lookups.
 *  - When a thread makes its final context switch (prev->__state == TASK_DEAD) its final record
 *    is copied into the "graveyard" hash, from which user space reads and deletes it: a thread
 *    that exits mid-interval keeps its last partial interval.
 *  - A thread's samples are counted under its attribution (comm, cgroup) in force: a rename,
 *    an exec or a cgroup move closes it with a segment record (its counters at that moment) in
 *    the "segments" ring buffer, and user space splits the thread's delta there.
 *  - Exactly one variant per tracepoint is loaded (user space turns off autoload of the other).
 *  - Whatever cannot be recorded is counted in the per-CPU "drops" array.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "rsched/abi/sched_abi.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0
#define TASK_DEAD 0x80

/* Set by user space before load. */
const volatile __u32 groups = RSCHED_G_LATENCY;			/* enum rsched_group bits */
const volatile __u64 max_delay_ns = 10ULL * 1000 * 1000 * 1000; /* delays, slices: upstream 10 s */
const volatile __u64 max_sleep_ns = 3600ULL * 1000 * 1000 * 1000; /* sleep, idle: upstream 1 h */
const volatile __u32 counter_mask = 0;		  /* bit i: counter slot i is open */
const volatile __s32 cpu_to_die[RSCHED_MAX_CPUS]; /* migration classification, -1 unknown */
const volatile __s32 cpu_to_numa[RSCHED_MAX_CPUS];
const volatile bool dirty_list = false; /* tp_btf: live threads are read from the dirty list */
const volatile __u32 dirty_cap = 1;	/* entries of one epoch's list (dirty_tasks holds two) */
const volatile __u32 drain_batch = 1;	/* records per drain run (drain_out entries) */
/* Scheduling delay from the runqueue clock (the clock of the kernel's sched_info run_delay)
 * instead of the monotonic clock (the default: what the task lived, leaving idle included). */
const volatile bool delay_rq_clock = false;
/* Bytes of one segment record: the compact record (tp_btf) or a whole rsched_task_record. */
const volatile __u32 segment_record_size = sizeof(struct rsched_task_record);

#define ON(g) ((groups & (g)) != 0)

/* task -> struct rsched_task_state (tp_btf mode) */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct rsched_task_state);
} task_state SEC(".maps");

/* tid -> struct rsched_task_record (raw_tp mode only; sized by user space) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct rsched_task_record);
} task_hash SEC(".maps");

/* (tid, start_time) -> final record of an exited thread; drained by user space */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct rsched_task_key);
	__type(value, struct rsched_task_record);
} graveyard SEC(".maps");

/* 0 -> per-CPU cumulative stats */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_cpu_stats);
} cpu_stats SEC(".maps");

/* 0 -> per-CPU cumulative drop counters */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_drop_stats);
} drops SEC(".maps");

/* 0 -> an all-zero record, never written: the initial value of new task_hash entries */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_task_record);
} zero_record SEC(".maps");

/* 0 -> per-CPU scratch record (too large for the 512-byte stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_task_record);
} scratch SEC(".maps");

/* A dirty-list entry: a reference to the thread, so that the drain needs no pid lookup. */
struct dirty_entry {
	struct task_struct __kptr *task;
};

/* epoch % 2 * dirty_cap + i -> the i-th thread that changed in that epoch (sized before load) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct dirty_entry);
} dirty_tasks SEC(".maps");

/* i -> the i-th compact record of one drain run; user space mmaps it (value size and entries set
 * before load) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct rsched_task_ident));
	__uint(max_entries, 1);
} drain_out SEC(".maps");

/* The current read epoch (starts at 1: a new thread's `dirty` is 0) and the length each epoch's
 * list reached (may pass dirty_cap: the excess was not listed). */
__u32 dirty_epoch = 1;
__u32 dirty_n[2];

/* Segment records (sched_abi.h, RSCHED_TASK_SEGMENT): a thread's counters at the moment its
 * comm or cgroup changed, under the attribution that ended there (sized by user space). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096 * 1024);
} segments SEC(".maps");

/* cpu * RSCHED_COUNTER_SLOTS + slot -> perf event fd (filled by user space; sized before load) */
struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
	__uint(max_entries, RSCHED_COUNTER_SLOTS);
} counters SEC(".maps");

/* 0 -> per-CPU perf bookkeeping */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_perf_ctx);
} perf_ctx SEC(".maps");

/* Blame (BPF-internal): the threads that ran on each CPU, newest last. A thread switched in here
 * is blamed for the part of the scheduling delay of the threads that waited here while it ran. */
struct rsched_runner {
	__u64 ts;	 /* when it was switched in (the delay clock); 0 = empty */
	__u64 cgroup_id; /* its attribution (comm, cgroup) */
	char comm[RSCHED_COMM_LEN];
	__u32 tgid;  /* 0 with tid 0: the idle task */
	__u32 tid;   /* the first thread of the run (a run of one culprit's threads is one entry) */
	__u8 policy; /* that thread's task->policy and task->prio + 1 (priority inversion) */
	__u8 prio1;
	__u8 pad[6];
};

/* Blame's coarse record: what ran on a CPU before its ring reaches. An epoch of level 0 is
 * RSCHED_BLAME_EPOCH_RUNS consecutive ring entries (entry h is in epoch h / EPOCH_RUNS); one of
 * level l + 1 merges RSCHED_BLAME_FANOUT epochs of level l. Each keeps, exactly, the time of its
 * top runners (`top[i].ts` holds ns run, not a timestamp), of the idle task, and of the rest
 * together (`other_ns`): a runner enters the top when its time beats the smallest there, whose
 * time then goes to `other_ns`. */
struct rsched_epoch {
	__u64 seq1;  /* the epoch's number + 1 at this level; 0 = never used */
	__u64 start; /* the delay clock at its first entry */
	__u64 end;   /* ... at the first entry of the next epoch; 0 = still open */
	__u64 idle_ns;
	__u64 other_ns;
	__u16 hint[2]; /* the top entries added to last, and the one before (checked first) */
	__u32 filled;  /* level 0: its runs were summed (a thread waited on the CPU at its close) */
	struct rsched_runner top[RSCHED_BLAME_EPOCH_TOP];
};

struct rsched_runners {
	struct rsched_runner ring[RSCHED_BLAME_RING];
	__u64 head; /* entries written so far; the newest is ring[(head - 1) % RSCHED_BLAME_RING] */
	/* Threads that waited on this CPU when the open epoch began and have not been switched in
	 * here since (an upper bound: one that left by a migration is still counted). Only such a
	 * wait can cover the whole epoch, so only then are its runs summed at its close. */
	__u32 waiters;
	__u32 pad;
	struct rsched_epoch cur; /* the open level-0 epoch (copied to `epochs` when it closes) */
};

/* 0 -> per-CPU ring of recent runners (blame group) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_runners);
} runners SEC(".maps");

struct rsched_epoch_level {
	struct rsched_epoch rec[RSCHED_BLAME_EPOCHS]; /* epoch n in rec[n % RSCHED_BLAME_EPOCHS] */
};

/* level -> per-CPU epochs of that level (blame group; one entry without it) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RSCHED_BLAME_LEVELS);
	__type(key, __u32);
	__type(value, struct rsched_epoch_level);
} epochs SEC(".maps");

/* Bumped by user space before every read (mmapped .bss): a blame slot last updated at least
 * three epochs ago has had its counts read, so it may be given to a new culprit. */
__u32 blame_epoch;

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

static __always_inline void count_drop(__u32 id)
{
	__u32 zero = 0;
	struct rsched_drop_stats *d = bpf_map_lookup_elem(&drops, &zero);
	if (d && id < RSCHED_DROP_COUNT)
		__sync_fetch_and_add(&d->counters[id], 1);
}

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

/* The attribution in force (comm, cgroup) and the number of attributions closed before it. */
static __always_inline void fill_attr(struct rsched_task_ident *id, struct rsched_task_state *st)
{
	id->cgroup_id = st->cgroup_id;
	__builtin_memcpy(id->comm, st->comm, sizeof(id->comm));
	id->seg = st->seg;
}

/* Takes the attribution of a new state from its task. */
static __always_inline void init_attr(struct rsched_task_state *st, struct task_struct *t, bool btf)
{
	st->cgroup_id = cgroup_of(t, btf);
	comm_of(st->comm, t, btf);
}

/* Final records put into the graveyard so far: user space reads the graveyard only when this
 * moved (walking an empty 16k-bucket hash costs ~0.1 ms). Counted after the insert. */
__u64 buried;

/* Copies a final record into the graveyard. `rec` holds ident + state. */
static __always_inline void bury(struct rsched_task_record *rec)
{
	struct rsched_task_key key = {
		.tid = rec->id.tid,
		.start_time = rec->id.start_time,
	};
	rec->id.flags |= RSCHED_TASK_DEAD;
	if (bpf_map_update_elem(&graveyard, &key, rec, BPF_NOEXIST))
		count_drop(RSCHED_DROP_GRAVEYARD);
	else
		__sync_fetch_and_add(&buried, 1);
}

/* Per-thread state of `t`, creating it when `create`. NULL when absent or not creatable. */
static __always_inline struct rsched_task_state *state_of(struct task_struct *t, bool btf,
							  bool create)
{
	struct rsched_task_state *st;
	struct rsched_task_record *rec, *scr;
	__u32 zero = 0, tid;
	__u64 start;

	if (btf) {
		st = bpf_task_storage_get(&task_state, t, 0,
					  create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
		if (!st) {
			if (create)
				count_drop(RSCHED_DROP_TASK_STATE);
			return NULL;
		}
		if (!st->cgroup_id) /* new: the attribution is the task's now */
			init_attr(st, t, true);
		return st;
	}

	tid = (__u32)BPF_CORE_READ(t, pid);
	start = BPF_CORE_READ(t, start_time);
	rec = bpf_map_lookup_elem(&task_hash, &tid);
	if (rec) {
		if (rec->id.start_time == start)
			return &rec->st;
		/* The tid belongs to a new thread but the old one's entry is still here (its final
		 * switch was missed): keep the old data by burying it, then start afresh. */
		bury(rec);
		count_drop(RSCHED_DROP_STALE_TID);
		bpf_map_delete_elem(&task_hash, &tid);
	}
	if (!create)
		return NULL;
	scr = bpf_map_lookup_elem(&zero_record, &zero);
	if (!scr)
		return NULL;
	if (bpf_map_update_elem(&task_hash, &tid, scr, BPF_NOEXIST)) {
		count_drop(RSCHED_DROP_TASK_STATE);
		return NULL;
	}
	rec = bpf_map_lookup_elem(&task_hash, &tid);
	if (!rec)
		return NULL;
	fill_key(&rec->id, t, false);
	init_attr(&rec->st, t, false);
	fill_attr(&rec->id, &rec->st);
	return &rec->st;
}

/* The thread `t` made its final switch: bury its cumulative record. */
static __always_inline void task_dead(struct task_struct *t, struct rsched_task_state *st, bool btf)
{
	struct rsched_task_record *scr;
	__u32 zero = 0, tid;

	if (btf) {
		scr = bpf_map_lookup_elem(&scratch, &zero);
		if (!scr)
			return;
		scr->id.flags = 0;
		fill_key(&scr->id, t, true);
		fill_attr(&scr->id, st);
		bpf_probe_read_kernel(&scr->st, sizeof(scr->st), st);
		bury(scr);
		return;
	}
	tid = (__u32)BPF_CORE_READ(t, pid);
	struct rsched_task_record *rec = bpf_map_lookup_elem(&task_hash, &tid);
	if (!rec)
		return;
	bury(rec); /* its ident holds the attribution in force (kept by close_attr) */
	bpf_map_delete_elem(&task_hash, &tid);
}

/* Hides a value from the optimiser so that a bounds check it "knows" to be redundant is still
 * emitted for the verifier. */
#define OPAQUE(v) asm volatile("" : "+r"(v))

/* Counts `delta` in `s`. For a thread's histogram, `used` is its state's used mask and `base`
 * the histogram's first bit (enum rsched_used_bit); per-CPU histograms pass NULL. */
static __always_inline void add_delay(struct rsched_delay_stats *s, __u64 delta, __u64 *used,
				      __u32 base)
{
	__u32 slot = rsched_hist_slot(delta);
	s->count++;
	s->total_ns += delta;
	OPAQUE(slot);
	if (slot < RSCHED_HIST_SLOTS) {
		s->slots[slot]++;
		if (used)
			*used |= rsched_used_bit(base, slot);
	}
}

/* Adds `delta` when it is within `limit`, else counts a discard. */
static __always_inline void add_bounded(struct rsched_delay_stats *s, __u64 delta, __u64 limit,
					__u64 *used, __u32 base)
{
	if (delta > limit) {
		count_drop(RSCHED_DROP_TOO_LONG);
		return;
	}
	add_delay(s, delta, used, base);
}

extern struct task_struct *bpf_task_acquire(struct task_struct *p) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

/* A counter of thread `t` changed. With the dirty list, its first change in the current epoch
 * appends a reference to it to the epoch's list (an atomic add and a task reference per thread
 * and interval: the drain then needs no pid lookup, ~0.3 ms per 1,000 threads); otherwise the
 * iterator's flag is set. */
static __always_inline void mark_dirty(struct rsched_task_state *st, struct task_struct *t,
				       bool btf)
{
	if (!btf || !dirty_list) {
		st->dirty = 1;
		return;
	}
	__u32 e = dirty_epoch;
	if (st->dirty == e)
		return;
	st->dirty = e;
	__u32 l = e & 1;
	__u32 i = __sync_fetch_and_add(&dirty_n[l], 1);
	if (i >= dirty_cap)
		return; /* overflow: user space sees the length and reads every thread instead */
	__u32 k = l * dirty_cap + i;
	struct dirty_entry *ent = bpf_map_lookup_elem(&dirty_tasks, &k);
	if (!ent)
		return;
	struct task_struct *ref = bpf_task_acquire(t);
	if (!ref)
		return;
	/* A late entry from an earlier flip may still sit here (see dirty_flip): release it. */
	ref = bpf_kptr_xchg(&ent->task, ref);
	if (ref)
		bpf_task_release(ref);
}

/* Reads the open perf counters of this CPU and charges what they advanced since the last switch
 * to the thread that ran in between (prev). */
static __always_inline void charge_counters(struct task_struct *prev, __u32 prev_tid,
					    struct rsched_task_state *prev_st, __u32 next_tid,
					    bool btf)
{
	struct bpf_perf_event_value v;
	struct rsched_perf_ctx *ctx;
	__u32 zero = 0, cpu = bpf_get_smp_processor_id();

	ctx = bpf_map_lookup_elem(&perf_ctx, &zero);
	if (!ctx)
		return;
#pragma unroll
	for (int i = 0; i < RSCHED_COUNTER_SLOTS; i++) {
		if (!(counter_mask & (1u << i)))
			continue;
		if (bpf_perf_event_read_value(&counters, (__u64)cpu * RSCHED_COUNTER_SLOTS + i, &v,
					      sizeof(v))) {
			count_drop(RSCHED_DROP_PERF_READ);
			continue;
		}
		if (prev_st && prev_tid && ctx->running_tid == prev_tid &&
		    v.counter >= ctx->last[i]) {
			prev_st->counters[i] += v.counter - ctx->last[i];
			mark_dirty(prev_st, prev, btf);
		}
		ctx->last[i] = v.counter;
	}
	ctx->running_tid = next_tid;
}

/* Whether two 16-byte comms are equal (both 8-byte aligned). */
static __always_inline bool comm_eq(const char *a, const char *b)
{
	return ((const __u64 *)a)[0] == ((const __u64 *)b)[0] &&
	       ((const __u64 *)a)[1] == ((const __u64 *)b)[1];
}

/* Blame: a culprit's slot in the thread's blame. Its own slot if it has one; else a slot never
 * used or not updated for three reads (its counts have been read), which takes the culprit on
 * (`gen` moves on, the counts restart from 0); else -1: <other>. */
__noinline int rsched_blame_search(struct rsched_task_state *st, __u32 tgid, __u64 cgroup,
				   __u64 comm0, __u64 comm1)
{
	if (!st)
		return -1;
	struct rsched_blame *b = &st->blame;
	__u16 epoch = (__u16)blame_epoch;

	/* Rolled loops whose every branch returns: the verifier walks each slot once. A global
	 * function (the comm passed as two words): checked once, not at every caller. */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_SLOTS; i++) {
		const __u64 *c = (const __u64 *)b->slot[i].comm;
		if (b->gen[i] && b->tgid[i] == tgid && b->slot[i].cgroup_id == cgroup &&
		    c[0] == comm0 && c[1] == comm1) {
			b->epoch[i] = epoch;
			st->blame_hint = i;
			return (int)i;
		}
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_SLOTS; i++) {
		if (!b->gen[i] || (__u16)(epoch - b->epoch[i]) >= 3) {
			struct rsched_blame_slot *s = &b->slot[i];
			__u16 gen = b->gen[i] + 1;
			b->gen[i] = gen ? gen : 1; /* 0 means never used */
			b->epoch[i] = epoch;
			b->tgid[i] = tgid;
			s->cgroup_id = cgroup;
			((__u64 *)s->comm)[0] = comm0;
			((__u64 *)s->comm)[1] = comm1;
			s->wait_ns = 0;
			s->waits = 0;
			s->preempts = 0;
			s->approx_ns = 0;
			st->blame_hint = i;
			return (int)i;
		}
	}
	return -1;
}

/* blame_search, after the culprit found last (a thread usually waits behind the same few). */
static __always_inline int blame_slot(struct rsched_task_state *st, __u32 tgid, __u64 cgroup,
				      const char *comm)
{
	struct rsched_blame *b = &st->blame;
	__u32 h = st->blame_hint & (RSCHED_BLAME_SLOTS - 1);

	if (b->gen[h] && b->tgid[h] == tgid && b->slot[h].cgroup_id == cgroup &&
	    comm_eq(b->slot[h].comm, comm)) {
		b->epoch[h] = (__u16)blame_epoch;
		return (int)h;
	}
	return rsched_blame_search(st, tgid, cgroup, ((const __u64 *)comm)[0],
				   ((const __u64 *)comm)[1]);
}

enum {
	BLAME_SEEN_IDLE = 1u << RSCHED_BLAME_SLOTS,
	BLAME_SEEN_OTHER = 2u << RSCHED_BLAME_SLOTS,
};

/* Charges `ns` of a thread's wait to runner `e` (the idle task when e->tid is 0); `seen` marks
 * the culprits already counted in this wait (each one's `waits` counts the wait once). `flags`:
 * the CPU where it ran, | BLAME_APPROX when the charge is an estimate (a share of a coarse
 * epoch), counted in the culprit's approx_ns too. Inlined in the hot exact walk; epochs call the
 * global rsched_blame_add below, which the verifier checks once. */
#define BLAME_APPROX (1u << 31)

static __always_inline void blame_add(struct rsched_task_state *st, const struct rsched_runner *e,
				      __u64 ns, __u32 *seen, __u32 flags)
{
	struct rsched_blame *b = &st->blame;
	bool approx = flags & BLAME_APPROX;

	if (!e->tid) {
		b->idle_ns += ns;
		if (approx)
			b->idle_approx_ns += ns;
		if (!(*seen & BLAME_SEEN_IDLE)) {
			*seen |= BLAME_SEEN_IDLE;
			b->idle_waits++;
		}
		return;
	}
	int i = blame_slot(st, e->tgid, e->cgroup_id, e->comm);
	if (i < 0) {
		b->other_ns += ns;
		if (approx)
			b->other_approx_ns += ns;
		if (!(*seen & BLAME_SEEN_OTHER)) {
			*seen |= BLAME_SEEN_OTHER;
			b->other_waits++;
		}
		return;
	}
	__u32 k = (__u32)i & (RSCHED_BLAME_SLOTS - 1);
	b->cpu[k] = (__u16)(flags & 0xffff);
	b->policy[k] = e->policy;
	b->prio1[k] = e->prio1;
	b->slot[k].wait_ns += ns;
	if (approx)
		b->slot[k].approx_ns += ns;
	if (!(*seen & (1u << k))) {
		*seen |= 1u << k;
		b->slot[k].waits++;
	}
}

__noinline int rsched_blame_add(struct rsched_task_state *st, const struct rsched_runner *e,
				__u64 ns, __u32 *seen, __u32 flags)
{
	if (st && e && seen)
		blame_add(st, e, ns, seen, flags);
	return 0;
}

/* One wait's walk over a CPU's records, without pointers (a global function's argument): the
 * wait there is [start, end); what is newer than `end` has been charged. */
struct blame_span {
	__u64 start;	  /* the wait on this CPU began here */
	__u64 end;	  /* what is newer has been walked */
	__u64 attributed; /* ns charged */
	__u32 seen;	  /* culprits counted in this wait (rsched_blame_add) */
	__u32 cpu;	  /* the CPU whose runners these are */
	__u32 done;	  /* the wait's start was reached (or nothing older is known) */
	__u32 self_tgid;  /* the waiting thread's process */
};

/* Scales `ns` by part / whole (part <= whole), in 2^-20 steps, without 64-bit overflow. */
static __always_inline __u64 share_of(__u64 ns, __u64 part, __u64 whole)
{
	if (whole >= (1ULL << 44)) { /* one step: whole < 2^64, so < 2^44 after it */
		whole >>= 20;
		part >>= 20;
	}
	if (!whole)
		return 0;
	__u64 f = (part << 20) / whole;
	return (ns * f) >> 20;
}

/* Charges the part [sp->start, sp->end) of epoch `ep` that the wait covers: all of it exactly
 * when the wait began before the epoch, else (the epoch the wait began in) a share of each of its
 * runners in proportion to the overlap, counted as estimated; the parts add up to the overlap,
 * the rest of the epoch's named runners going to <other>. */
__noinline int rsched_blame_epoch(struct rsched_task_state *st, struct rsched_epoch *ep,
				  struct blame_span *sp)
{
	if (!st || !ep || !sp)
		return 0;
	__u64 s = ep->start, e = ep->end;
	if (!e || e <= s) {
		sp->done = 1;
		return 0;
	}
	if (s >= sp->end)
		return 0; /* all newer than the wait's part still to walk (another CPU's record,
			     read after it moved on): the next, older, epoch */
	if (e > sp->end)
		e = sp->end; /* the newer part is walked already */
	bool whole = s >= sp->start;
	__u64 from = whole ? s : sp->start;
	if (e <= from) {
		sp->done = 1;
		return 0;
	}
	__u64 overlap = e - from, span = ep->end - s, left = overlap;
	if (whole && span != overlap)
		whole = false; /* clipped at its end: a share too */
	__u32 flags = (sp->cpu & 0xffff) | (whole ? 0 : BLAME_APPROX);
	__u32 seen = sp->seen;
	/* A share: the waiter itself (its process as it runs now) did not run while it waited, so
	 * its time in the epoch, before the wait, is taken out and the rest shared in proportion.
	 */
	__u64 base = span;
	__u32 self = RSCHED_BLAME_EPOCH_TOP;
	if (!whole) {
#pragma clang loop unroll(disable)
		for (__u32 i = 0; i < RSCHED_BLAME_EPOCH_TOP; i++) {
			struct rsched_runner *t = &ep->top[i];
			if (t->tid && t->tgid == sp->self_tgid && t->cgroup_id == st->cgroup_id &&
			    comm_eq(t->comm, st->comm)) {
				self = i;
				base = span > t->ts ? span - t->ts : 0;
				break;
			}
		}
		if (base < overlap)
			base = overlap;
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_EPOCH_TOP; i++) {
		struct rsched_runner *t = &ep->top[i];
		if (!t->tid || !left || i == self)
			continue; /* only kept when named: an empty slot has no time */
		__u64 part = whole ? t->ts : share_of(t->ts, overlap, base);
		if (part > left)
			part = left;
		if (!part)
			continue;
		rsched_blame_add(st, t, part, &seen, flags);
		left -= part;
	}
	if (left) {
		__u64 idle = whole ? ep->idle_ns : share_of(ep->idle_ns, overlap, base);
		if (idle > left)
			idle = left;
		if (idle) {
			struct rsched_runner none = {};
			rsched_blame_add(st, &none, idle, &seen, flags);
			left -= idle;
		}
	}
	if (left) {
		struct rsched_blame *b = &st->blame;
		b->other_ns += left;
		if (!whole)
			b->other_approx_ns += left;
		if (!(seen & BLAME_SEEN_OTHER)) {
			seen |= BLAME_SEEN_OTHER;
			b->other_waits++;
		}
	}
	sp->seen = seen;
	sp->attributed += overlap;
	sp->end = from;
	if (from <= sp->start)
		sp->done = 1; /* the epoch the wait began in; one only clipped at the end of a
				 remote part (which began before it) leaves the walk going on */
	return 0;
}

/* The walk back through a CPU's runners over one wait: the exact ring entries of the open epoch
 * and the one before it, then the epochs of each level, newest first. */
struct blame_walk {
	struct rsched_task_state *st;
	struct rsched_runners *r;
	struct rsched_epoch_level *lv; /* the level being walked */
	struct blame_span sp;
	__u64 ep_hi; /* the level's newest epoch to walk (index k walks ep_hi - k) */
	__u64 head;  /* the ring's head at the walk; entry k is ring[head - 1 - k] */
	__u32 skip;  /* entries walked before this loop (the loop's index counts from 0) */
	__u32 pad;
};

/* Entry `k + w->skip` of the walk. The loop index, not a counter in `w`, selects the entry: the
 * verifier then checks one iteration for all (a counter it tracks would be a state per entry). */
static __always_inline long blame_step_at(__u32 k, struct blame_walk *w)
{
	struct rsched_runner *e =
		&w->r->ring[(w->head - 1 - w->skip - k) & (RSCHED_BLAME_RING - 1)];
	__u64 ts = e->ts;

	if (!ts) {
		w->sp.done = 1;
		return 1; /* nothing older */
	}
	__u64 from = ts > w->sp.start ? ts : w->sp.start;
	if (w->sp.end > from) {
		blame_add(w->st, e, w->sp.end - from, &w->sp.seen, w->sp.cpu & 0xffff);
		w->sp.attributed += w->sp.end - from;
	}
	if (ts <= w->sp.start) {
		w->sp.done = 1;
		return 1; /* the runner the wait began under: done */
	}
	if (ts < w->sp.end)
		w->sp.end = ts;
	return 0;
}

static long blame_step(__u32 k, struct blame_walk *w) { return blame_step_at(k, w); }

/* The rest of the exact walk, past its first entry: `n` entries in all. */
static __noinline void blame_walk_on(struct blame_walk *w, __u32 n)
{
	w->skip = 1;
	if (n > RSCHED_BLAME_RING - 1)
		n = RSCHED_BLAME_RING - 1;
	if (n > 1)
		bpf_loop(n - 1, blame_step, w, 0);
}

/* Epoch `ep_hi - k` of the level being walked. */
static long blame_epoch_step(__u32 k, struct blame_walk *w)
{
	if (w->sp.done || k > w->ep_hi)
		return 1;
	__u64 n = w->ep_hi - k;
	struct rsched_epoch *ep = &w->lv->rec[n & (RSCHED_BLAME_EPOCHS - 1)];
	if (ep->seq1 != n + 1) {
		w->sp.done = 1; /* overwritten, or never recorded: what is older is unknown */
		return 1;
	}
	rsched_blame_epoch(w->st, ep, &w->sp);
	return w->sp.done ? 1 : 0;
}

/* Walks the records of CPU sp->cpu over the wait's part [sp->start, sp->end), adding the ns
 * charged to sp->attributed and the culprits counted to sp->seen. `remote` when it is not this
 * CPU (a migrated wait's first part: read while that CPU may write, a torn entry can misplace a
 * share of the part but never make the parts exceed it; its records newer than the part are
 * passed over). */
__noinline int rsched_blame_walk(struct rsched_task_state *st, struct blame_span *sp, int remote)
{
	struct blame_walk w = {};
	__u32 zero = 0;

	if (!st || !sp || sp->end <= sp->start)
		return 0;
	w.st = st;
	w.sp.start = sp->start;
	w.sp.end = sp->end;
	w.sp.cpu = sp->cpu;
	w.sp.seen = sp->seen;
	w.sp.self_tgid = sp->self_tgid;
	w.r = remote ? bpf_map_lookup_percpu_elem(&runners, &zero, w.sp.cpu)
		     : bpf_map_lookup_elem(&runners, &zero);
	if (!w.r)
		return 0;
	w.head = w.r->head;
	if (w.head == 0)
		goto out;
	/* Exact: the entries of the open epoch (the one of the newest entry). */
	__u64 open = (w.head - 1) / RSCHED_BLAME_EPOCH_RUNS;
	__u32 n = (__u32)(w.head - open * RSCHED_BLAME_EPOCH_RUNS);
	/* Most waits lie within the newest runner's time: no loop then. */
	if (blame_step_at(0, &w) == 0)
		blame_walk_on(&w, n);
	if (w.sp.done || open < 1)
		goto out;
	/* The closed epochs whose runs the ring still holds (one fewer than it could: a remote
	 * CPU's ring may move on while it is read), newest first: from the record when the wait
	 * covers all of it and the record names all that ran (no `other_ns`: the same charges as
	 * its runs', in RSCHED_BLAME_EPOCH_TOP + 2 adds instead of up to RSCHED_BLAME_EPOCH_RUNS
	 * steps), else (the epoch the wait began in, one with more runners than the record names,
	 * one not filled, one newer than a remote part's end) run by run: exact either way. */
	__u32 key0 = 0;
	struct rsched_epoch_level *lv0 =
		remote ? bpf_map_lookup_percpu_elem(&epochs, &key0, w.sp.cpu)
		       : bpf_map_lookup_elem(&epochs, &key0);
	__u64 nx = open - 1; /* the next epoch to walk */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_RING / RSCHED_BLAME_EPOCH_RUNS - 2; i++) {
		struct rsched_epoch *ep = lv0 ? &lv0->rec[nx & (RSCHED_BLAME_EPOCHS - 1)] : NULL;
		bool rec = ep && ep->seq1 == nx + 1;
		if (rec && ep->filled && !ep->other_ns && ep->start >= w.sp.start &&
		    ep->end == w.sp.end) {
			rsched_blame_epoch(st, ep, &w.sp);
		} else if (!rec || ep->start < w.sp.end) {
			w.skip = (__u32)(w.head - (nx + 1) * RSCHED_BLAME_EPOCH_RUNS);
			bpf_loop(RSCHED_BLAME_EPOCH_RUNS, blame_step, &w, 0);
		} /* else: all newer than a remote part's end, nothing of it to charge */
		if (w.sp.done || nx == 0)
			goto out;
		nx--;
	}
	/* Coarse: level 0 epochs from nx down to the first that level 1 starts after, then level
	 * 1 likewise, and so on up as far as the last level holds. */
	__u64 hi = nx; /* newest epoch to walk at this level */
#pragma clang loop unroll(disable)
	for (__u32 l = 0; l < RSCHED_BLAME_LEVELS; l++) {
		/* the level's newest epoch that may still be open: the one holding entry head - 1
		 */
		__u64 newest = (w.head - 1) / RSCHED_BLAME_EPOCH_RUNS;
		for (__u32 j = 0; j < l; j++)
			newest /= RSCHED_BLAME_FANOUT;
		__u64 oldest =
			newest >= RSCHED_BLAME_EPOCHS - 1 ? newest - (RSCHED_BLAME_EPOCHS - 1) : 0;
		/* stop where the next level's epochs begin (they hold what is older), except at the
		 * last */
		__u64 lo = oldest;
		if (l + 1 < RSCHED_BLAME_LEVELS)
			lo = (oldest + RSCHED_BLAME_FANOUT - 1) / RSCHED_BLAME_FANOUT *
			     RSCHED_BLAME_FANOUT;
		__u32 key = l;
		w.lv = remote ? bpf_map_lookup_percpu_elem(&epochs, &key, w.sp.cpu)
			      : bpf_map_lookup_elem(&epochs, &key);
		if (!w.lv)
			break;
		if (hi + 1 > lo) {
			w.ep_hi = hi;
			bpf_loop((__u32)(hi + 1 - lo), blame_epoch_step, &w, 0);
		}
		if (w.sp.done || lo == 0 || l + 1 == RSCHED_BLAME_LEVELS)
			break;
		hi = lo / RSCHED_BLAME_FANOUT - 1;
	}
out:
	sp->seen = w.sp.seen;
	sp->attributed = w.sp.attributed;
	return 0;
}

/* Blames a thread's scheduling delay of `delta` (enqueued at t0, switched in at t1 on `cpu`) on
 * what ran meanwhile on the CPU where it waited, newest first; after migrations while waiting,
 * each earlier part on the CPU it waited on then. Only what is older than all of a CPU's
 * records, or a part dropped from a wait moved more than RSCHED_MIG_PARTS times, is <unknown>:
 * the parts add up to delta. */
static __always_inline void blame_wait(struct rsched_task_state *st, __u64 t0, __u64 t1,
				       __u64 delta, __u32 cpu, __u32 tgid, struct rsched_runners *r)
{
	struct rsched_blame *b = &st->blame;
	__u64 attributed = 0;

	if (st->wait_cpu == cpu) {
		__u64 since = t0;
		if (st->wait_since > t0 && st->wait_since < t1)
			since = st->wait_since;
		struct blame_span w = {.start = since, .end = t1, .cpu = cpu, .self_tgid = tgid};
		if (r && r->waiters && since <= r->cur.start)
			r->waiters--; /* one of the open epoch's first waiters is done */
		struct rsched_runner *e =
			r && r->head ? &r->ring[(r->head - 1) & (RSCHED_BLAME_RING - 1)] : NULL;
		if (e && e->ts && e->ts <= since) {
			/* most waits lie within the newest runner's time: no walk then */
			blame_add(st, e, t1 - since, &w.seen, cpu & 0xffff);
			w.attributed = t1 - since;
		} else {
			rsched_blame_walk(st, &w, 0);
		}
		attributed = w.attributed;
		/* the parts before migrations, newest first, each on the CPU it was on then (never
		 * more than the rest of the delay) */
		if (st->nmig && since > t0 &&
		    bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_map_lookup_percpu_elem)) {
			__u64 end = since;
			__u32 n = st->nmig < RSCHED_MIG_PARTS ? st->nmig : RSCHED_MIG_PARTS;
#pragma clang loop unroll(disable)
			for (__u32 k = 0; k < RSCHED_MIG_PARTS; k++) {
				if (k >= n)
					break;
				__u32 i = (n - 1 - k) & (RSCHED_MIG_PARTS - 1);
				__u64 at = st->mig_at[i];
				__u32 pc = st->mig_cpu[i];
				__u64 from = at > t0 ? at : t0;
				__u64 room = delta > attributed ? delta - attributed : 0;
				if (from >= end || room == 0 || pc >= RSCHED_MAX_CPUS)
					break;
				if (end - from > room)
					from = end - room;
				w.start = from;
				w.end = end;
				w.cpu = pc;
				w.attributed = 0;
				rsched_blame_walk(st, &w, pc != cpu);
				attributed += w.attributed;
				end = from;
			}
		}
	}
	st->nmig = 0;
	if (delta > attributed) {
		b->unknown_ns += delta - attributed;
		b->unknown_waits++;
	}
}

/* The thread whose state is `st` was switched out while runnable (an involuntary switch): the
 * idle task (next_tid 0) or a thread of process `tgid` running as `nst`'s attribution took the
 * CPU. */
static __always_inline void blame_preempt(struct rsched_task_state *st, __u32 next_tid, __u32 tgid,
					  struct rsched_task_state *nst, __u8 policy, __u8 prio1)
{
	struct rsched_blame *b = &st->blame;

	if (!next_tid) {
		b->idle_preempts++;
		return;
	}
	if (!nst) {
		b->other_preempts++;
		return;
	}
	int i = blame_slot(st, tgid, nst->cgroup_id, nst->comm);
	if (i < 0) {
		b->other_preempts++;
	} else {
		__u32 k = (__u32)i & (RSCHED_BLAME_SLOTS - 1);
		b->slot[k].preempts++;
		b->cpu[k] = (__u16)bpf_get_smp_processor_id();
		b->policy[k] = policy;
		b->prio1[k] = prio1;
	}
}

/* Adds `ns` run by `e` (its `ts` unused; tid 0: idle) to epoch `ep`: to its entry among the
 * top runners, or into a free one, or in place of the smallest when `ns` beats it (whose time
 * goes to other_ns), else to other_ns. Exact: only which runners are named is a choice. A global
 * function: the verifier checks it once, not once per path of its callers. */
__noinline int rsched_epoch_add(struct rsched_epoch *ep, const struct rsched_runner *e, __u64 ns)
{
	if (!ep || !e)
		return 0;
	if (!e->tid) {
		ep->idle_ns += ns;
		return 0;
	}
	__u32 min_i = 0;
	__u64 min_ns = ~0ULL;
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_EPOCH_TOP; i++) {
		struct rsched_runner *t = &ep->top[i];
		if (t->tgid == e->tgid && t->tid && t->cgroup_id == e->cgroup_id &&
		    comm_eq(t->comm, e->comm)) {
			t->ts += ns;
			t->policy = e->policy;
			t->prio1 = e->prio1;
			ep->hint[1] = ep->hint[0];
			ep->hint[0] = (__u16)i;
			return 0;
		}
		__u64 have = t->tid ? t->ts : 0;
		if (have < min_ns) {
			min_ns = have;
			min_i = i;
		}
	}
	if (min_ns && ns <= min_ns) {
		ep->other_ns += ns;
		return 0;
	}
	if (min_i >= RSCHED_BLAME_EPOCH_TOP)
		return 0;
	struct rsched_runner *t = &ep->top[min_i];
	ep->other_ns += min_ns;
	__builtin_memcpy(t, e, sizeof(*t));
	t->ts = ns;
	ep->hint[1] = ep->hint[0];
	ep->hint[0] = (__u16)min_i;
	return 0;
}

/* rsched_epoch_add, after the two entries added to last (a CPU mostly alternates between a
 * few runners). */
static __always_inline bool epoch_hit(struct rsched_epoch *ep, __u32 k,
				      const struct rsched_runner *e, __u64 ns)
{
	if (k >= RSCHED_BLAME_EPOCH_TOP)
		return false;
	struct rsched_runner *t = &ep->top[k];
	if (t->tgid != e->tgid || !t->tid || t->cgroup_id != e->cgroup_id ||
	    !comm_eq(t->comm, e->comm))
		return false;
	t->ts += ns;
	t->policy = e->policy;
	t->prio1 = e->prio1;
	return true;
}

static __always_inline void epoch_add_fast(struct rsched_epoch *ep, const struct rsched_runner *e,
					   __u64 ns)
{
	if (!e->tid) {
		ep->idle_ns += ns;
		return;
	}
	if (epoch_hit(ep, ep->hint[0], e, ns))
		return;
	if (epoch_hit(ep, ep->hint[1], e, ns)) {
		__u32 k = ep->hint[1];
		ep->hint[1] = ep->hint[0];
		ep->hint[0] = (__u16)k;
		return;
	}
	rsched_epoch_add(ep, e, ns);
}

/* Epoch `n`'s record at a level: opened at `ts` (its contents cleared) when it holds another. */
static __always_inline struct rsched_epoch *epoch_open(struct rsched_epoch_level *lv, __u64 n,
						       __u64 ts)
{
	struct rsched_epoch *ep = &lv->rec[n & (RSCHED_BLAME_EPOCHS - 1)];
	if (ep->seq1 != n + 1) {
		__builtin_memset(ep, 0, sizeof(*ep));
		ep->seq1 = n + 1;
		ep->start = ts;
	}
	return ep;
}

/* Adds the times of ring entries [base, base + RSCHED_BLAME_EPOCH_RUNS) to the open epoch: each
 * until the next entry began, the last until `ts`. A global function with a plain loop: checked
 * once, and no callback per entry. */
__noinline int rsched_epoch_fill(struct rsched_runners *r, __u64 base, __u64 ts)
{
	if (!r)
		return 0;
	__u64 prev = r->ring[base & (RSCHED_BLAME_RING - 1)].ts;
	for (__u32 k = 0; k < RSCHED_BLAME_EPOCH_RUNS; k++) {
		__u64 i = base + k;
		struct rsched_runner *e = &r->ring[i & (RSCHED_BLAME_RING - 1)];
		__u64 end = k + 1 < RSCHED_BLAME_EPOCH_RUNS
				    ? r->ring[(i + 1) & (RSCHED_BLAME_RING - 1)].ts
				    : ts;
		if (prev && end > prev)
			epoch_add_fast(&r->cur, e, end - prev);
		prev = end;
	}
	return 0;
}

/* The open level-0 epoch `r->cur` (number n) closed at `ts`: copied into the level-0 records and
 * merged into its epoch of level 1, which closes too when `n` was the last of its fan-out, and so
 * on up; then epoch n + 1 opens at `ts`. Once per RSCHED_BLAME_EPOCH_RUNS switches: the loop
 * over its entries (when `fill`: a thread waits on this CPU now), a 336-byte copy and
 * RSCHED_BLAME_EPOCH_TOP + 2 adds per level. An epoch left unfilled is never wholly inside a
 * wait; in the epoch above it, its time is <other> in the share of a wait that began there. */
static __noinline void epoch_turn(struct rsched_runners *r, __u64 n, __u64 ts, bool fill)
{
	__u32 key = 0;

	if (!r)
		return;
	struct rsched_epoch_level *lv = bpf_map_lookup_elem(&epochs, &key);
	if (!lv)
		goto open;
	if (!r->cur.seq1 || r->cur.seq1 != n + 1)
		goto open; /* never opened (recording began inside it) */
	r->cur.filled = fill;
	/* Its runs' times, from the ring (all still there: it holds 8 epochs' runs). */
	if (fill)
		rsched_epoch_fill(r, n * RSCHED_BLAME_EPOCH_RUNS, ts);
	r->cur.end = ts;
	struct rsched_epoch *ep = &lv->rec[n & (RSCHED_BLAME_EPOCHS - 1)];
	__builtin_memcpy(ep, &r->cur, sizeof(*ep));
#pragma clang loop unroll(disable)
	for (__u32 l = 1; l < RSCHED_BLAME_LEVELS; l++) {
		key = l;
		lv = bpf_map_lookup_elem(&epochs, &key);
		if (!lv)
			break;
		__u64 up = n / RSCHED_BLAME_FANOUT;
		struct rsched_epoch *cur = epoch_open(lv, up, ep->start);
#pragma clang loop unroll(disable)
		for (__u32 i = 0; i < RSCHED_BLAME_EPOCH_TOP; i++) {
			struct rsched_runner *t = &ep->top[i];
			if (t->tid && t->ts)
				rsched_epoch_add(cur, t, t->ts);
		}
		cur->idle_ns += ep->idle_ns;
		cur->other_ns += ep->other_ns;
		if ((n + 1) % RSCHED_BLAME_FANOUT != 0)
			break; /* the epoch above stays open */
		cur->end = ts;
		ep = cur;
		n = up;
	}
open:
	__builtin_memset(&r->cur, 0, sizeof(r->cur));
	r->cur.seq1 = (r->head / RSCHED_BLAME_EPOCH_RUNS) + 1;
	r->cur.start = ts;
}

/* Records this CPU's runner from `ts` on: the idle task (tid 0), or thread `tid` of process
 * `tgid` running as (`cgroup`, `comm`). Consecutive runners of one culprit (threads of a process
 * under one comm and cgroup) share an entry: a wait behind a thousand short threads of one
 * process is one piece, and the ring reaches back further. Every RSCHED_BLAME_EPOCH_RUNS entries
 * an epoch closes: its entries are summed into its record then, in one loop (cheaper than an add
 * at every switch: the ring and the record stay in cache). */
static __always_inline void push_runner(__u64 ts, __u32 tid, __u32 tgid, __u64 cgroup,
					const char *comm, __u8 policy, __u8 prio1,
					struct task_struct *t, bool btf, struct rsched_runners *r)
{
	if (!r)
		return;
	__u64 h = r->head;
	struct rsched_runner *last = &r->ring[(h - 1) & (RSCHED_BLAME_RING - 1)];
	struct rsched_runner *e = &r->ring[h & (RSCHED_BLAME_RING - 1)];
	if (tid && last->ts && last->tid && last->tgid == tgid && last->cgroup_id == cgroup &&
	    comm_eq(last->comm, comm))
		return; /* the same culprit runs on */
	if (h % RSCHED_BLAME_EPOCH_RUNS == 0) {
		/* Only a wait that went on through the whole closing epoch can ever need its record
		 * (an older one ended inside it, a newer one began inside it): its runs are summed
		 * only when a thread waiting at its start still waits (r->waiters) and one waits
		 * now (other than the one switched in). */
		__u32 now_waiting = rq_waiters(task_rq_of(t, btf), btf);
		epoch_turn(r, h ? (h - 1) / RSCHED_BLAME_EPOCH_RUNS : ~0ULL, ts,
			   now_waiting && r->waiters);
		r->waiters = now_waiting; /* those waiting as the next epoch begins */
	}
	if (!tid) {
		e->ts = ts;
		e->tid = 0;
		e->tgid = 0;
		e->cgroup_id = 0;
		__builtin_memset(e->comm, 0, RSCHED_COMM_LEN);
		r->head = h + 1;
		return;
	}
	e->ts = ts;
	e->tid = tid;
	e->tgid = tgid;
	e->cgroup_id = cgroup;
	__builtin_memcpy(e->comm, comm, RSCHED_COMM_LEN);
	e->policy = policy;
	e->prio1 = prio1;
	r->head = h + 1;
}

/* push_runner for `next` (its state `nst`; NULL for the idle task or without state). */
static __always_inline void push_next(__u64 ts, struct task_struct *next, __u32 next_tid,
				      struct rsched_task_state *nst, bool btf,
				      struct rsched_runners *r)
{
	__u64 name[2] = {};

	if (!next_tid) {
		push_runner(ts, 0, 0, 0, (const char *)name, 0, 0, next, btf, r);
		return;
	}
	__u32 tgid = (__u32)READ(btf, next, tgid);
	__u8 policy = (__u8)READ(btf, next, policy);
	__u8 prio1 = (__u8)(READ(btf, next, prio) + 1);
	if (nst) {
		push_runner(ts, next_tid, tgid, nst->cgroup_id, nst->comm, policy, prio1, next, btf,
			    r);
		return;
	}
	comm_of((char *)name, next, btf);
	push_runner(ts, next_tid, tgid, cgroup_of(next, btf), (const char *)name, policy, prio1,
		    next, btf, r);
}

/* The monotonic clock of this event, read on first use. */
#define NOW() (now ? now : (now = bpf_ktime_get_ns()))
/* A scheduling-delay timestamp of task p: the monotonic clock, or the runqueue clock. */
#define DELAY_TS(p) (delay_rq_clock ? rq_clock_of((p), btf) : NOW())

static __always_inline int on_switch(bool preempt, struct task_struct *prev,
				     struct task_struct *next, bool btf)
{
	struct rsched_task_state *st = NULL, *nst = NULL;
	struct rsched_cpu_stats *cs = NULL;
	/* The monotonic clock, read at most once and only when a metric needs it (~35 ns a read
	 * on a paravirtualised VM): see NOW(). */
	__u64 now = 0;
	__u32 zero = 0;
	__u32 prev_tid = (__u32)READ(btf, prev, pid);
	__u32 next_tid = (__u32)READ(btf, next, pid);
	bool runnable = false;

	if (ON(RSCHED_G_LATENCY | RSCHED_G_SLEEP))
		cs = bpf_map_lookup_elem(&cpu_stats, &zero);
	/* Blame needs next's attribution before prev is done with (prev's preemption names it). */
	if (ON(RSCHED_G_BLAME) && next_tid != 0)
		nst = state_of(next, btf, true);
	/* This CPU's runners (blame): one lookup for the wait's walk and the new runner's entry. */
	struct rsched_runners *runr =
		ON(RSCHED_G_BLAME) ? bpf_map_lookup_elem(&runners, &zero) : NULL;

	__u32 prev_state = 0;
	if (prev_tid != 0) {
		__u32 state = task_run_state(prev, btf);
		prev_state = state;
		/* Still on the runqueue: preempted, or switched out while runnable (yield). This is
		 * also the kernel's nvcsw/nivcsw split: involuntary unless it blocked. */
		runnable = preempt || state == TASK_RUNNING;
		st = state_of(prev, btf,
			      runnable || ON(RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_PERF));
		if (st) {
			if (ON(RSCHED_G_LATENCY)) {
				/* delay runs from preemption */
				st->enqueue_ns = runnable ? DELAY_TS(prev) : 0;
				if (ON(RSCHED_G_BLAME) && runnable) {
					st->wait_cpu = bpf_get_smp_processor_id();
					st->wait_since = st->enqueue_ns;
					st->nmig = 0;
				}
			}
			if (ON(RSCHED_G_WAKING) && runnable)
				st->waking_ns =
					NOW(); /* as upstream: a preempted thread waits again */
			if (ON(RSCHED_G_SLICE) && st->oncpu_ns) {
				__u64 slice = NOW() - st->oncpu_ns;
				st->oncpu_ns = 0;
				if (runnable)
					add_bounded(&st->slice_invol, slice, max_delay_ns,
						    &st->used, RSCHED_USED_SLICE_INVOL);
				else
					add_bounded(&st->slice_vol, slice, max_delay_ns, &st->used,
						    RSCHED_USED_SLICE_VOL);
				mark_dirty(st, prev, btf);
			}
			if (ON(RSCHED_G_SLEEP))
				st->sleep_ns = runnable ? 0 : NOW();
			if (ON(RSCHED_G_BLAME) && runnable) {
				blame_preempt(st, next_tid,
					      next_tid ? (__u32)READ(btf, next, tgid) : 0, nst,
					      (__u8)READ(btf, next, policy),
					      (__u8)(READ(btf, next, prio) + 1));
				mark_dirty(st, prev, btf);
			}
		}
	} else if (ON(RSCHED_G_SLEEP) && cs && next_tid != 0 && cs->idle_start_ns) {
		/* the idle task leaves the CPU: an idle period ends, a busy one begins */
		add_bounded(&cs->idle, NOW() - cs->idle_start_ns, max_sleep_ns, NULL, 0);
		cs->idle_start_ns = 0;
		cs->busy_start_ns = NOW();
	}
	if (ON(RSCHED_G_SLEEP) && cs && next_tid == 0 && prev_tid != 0) {
		/* the CPU goes idle: a busy period (known only after the first idle exit) ends */
		if (cs->busy_start_ns)
			add_bounded(&cs->busy, NOW() - cs->busy_start_ns, max_sleep_ns, NULL, 0);
		cs->busy_start_ns = 0;
		cs->idle_start_ns = NOW();
	}

	if (ON(RSCHED_G_PERF))
		charge_counters(prev, prev_tid, st, next_tid, btf);

	/* Last use of prev's state: a dead thread's final record is complete now. */
	if (st && (prev_state & TASK_DEAD))
		task_dead(prev, st, btf);

	if (next_tid == 0) {
		if (ON(RSCHED_G_BLAME))
			push_next(DELAY_TS(next), next, 0, NULL, btf, runr);
		return 0;
	}
	st = ON(RSCHED_G_BLAME) ? nst : state_of(next, btf, true);
	if (!st) {
		if (ON(RSCHED_G_BLAME))
			push_next(DELAY_TS(next), next, next_tid, NULL, btf, runr);
		return 0;
	}
	if (ON(RSCHED_G_SLICE))
		st->oncpu_ns = NOW();
	if (ON(RSCHED_G_WAKING) && st->waking_ns) {
		add_bounded(&st->waking, NOW() - st->waking_ns, max_delay_ns, &st->used,
			    RSCHED_USED_WAKING);
		mark_dirty(st, next, btf);
		st->waking_ns = 0;
	}
	/* The delay clock at this switch-in (blame's runner record uses it too). */
	__u64 arrive = 0;
	if (ON(RSCHED_G_LATENCY) && st->enqueue_ns) {
		arrive = DELAY_TS(next);
		__u64 t0 = st->enqueue_ns;
		__u64 delta = arrive > t0 ? arrive - t0 : 0;
		st->enqueue_ns = 0;
		if (delta > max_delay_ns) {
			count_drop(RSCHED_DROP_TOO_LONG);
		} else {
			add_delay(&st->delay, delta, &st->used, RSCHED_USED_DELAY);
			if (ON(RSCHED_G_BLAME)) {
				st->blame.waiter_policy = (__u8)READ(btf, next, policy);
				st->blame.waiter_prio1 = (__u8)(READ(btf, next, prio) + 1);
				blame_wait(st, t0, arrive, delta, bpf_get_smp_processor_id(),
					   (__u32)READ(btf, next, tgid), runr);
			}
			mark_dirty(st, next, btf);
			if (cs)
				add_delay(&cs->delay, delta, NULL, 0);
		}
	}
	if (ON(RSCHED_G_BLAME))
		push_next(arrive ? arrive : DELAY_TS(next), next, next_tid, st, btf, runr);
	return 0;
}

static __always_inline int on_wakeup(struct task_struct *p, bool btf)
{
	struct rsched_task_state *st;
	struct rq *rq;
	__u64 now;
	__u32 tid = (__u32)READ(btf, p, pid);

	if (tid == 0)
		return 0;
	st = state_of(p, btf, true);
	if (!st)
		return 0;
	now = ON(RSCHED_G_SLEEP) ? bpf_ktime_get_ns() : 0; /* only sleep uses it here */
	if (ON(RSCHED_G_SLEEP) && st->sleep_ns) {
		add_bounded(&st->sleep, now - st->sleep_ns, max_sleep_ns, &st->used,
			    RSCHED_USED_SLEEP);
		mark_dirty(st, p, btf);
		st->sleep_ns = 0;
	}
	if (!ON(RSCHED_G_LATENCY))
		return 0;
	/* Keep an earlier timestamp: a thread preempted on its way to sleep is already queued. */
	rq = task_rq_of(p, btf);
	if (!st->enqueue_ns) {
		st->enqueue_ns = delay_rq_clock ? rq_clock_of(p, btf) : (now ?: bpf_ktime_get_ns());
		if (ON(RSCHED_G_BLAME)) {
			/* the runqueue it waits on: the CPU the wakeup chose */
			st->wait_cpu = (__u32)task_cpu_of(p, btf);
			st->wait_since = st->enqueue_ns;
			st->nmig = 0;
		}
	}
	if (!rq) {
		count_drop(RSCHED_DROP_NO_RQ);
		return 0;
	}
	/* nr_running after activation: the woken task counts itself, as upstream */
	__u64 depth = btf ? rq->nr_running : BPF_CORE_READ(rq, nr_running);
	mark_dirty(st, p, btf);
	st->depth.count++;
	st->depth.total += depth;
	__u32 slot = rsched_depth_slot(depth);
	OPAQUE(slot);
	if (slot < RSCHED_DEPTH_SLOTS) {
		st->depth.slots[slot]++;
		st->used |= rsched_used_bit(RSCHED_USED_DEPTH, slot);
	}
	return 0;
}

#define TASK_WAKING 0x0200

static __always_inline int on_waking(struct task_struct *p, bool btf)
{
	struct rsched_task_state *st;
	__u32 state;

	if (!ON(RSCHED_G_WAKING) || READ(btf, p, pid) == 0)
		return 0;
	state = task_run_state(p, btf);
	if (state == TASK_RUNNING || (state & TASK_WAKING))
		return 0;
	st = state_of(p, btf, true);
	if (st)
		st->waking_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int on_migrate(struct task_struct *p, int dest_cpu, bool btf)
{
	struct rsched_task_state *st;
	__s32 src;
	__u32 tid = (__u32)READ(btf, p, pid);

	if (!ON(RSCHED_G_MIGRATION | RSCHED_G_BLAME) || tid == 0)
		return 0;
	/* the tracepoint fires before the task's CPU field changes: it is the source. The kernel
	 * counts se.nr_migrations only when the CPU really changes; so do we (upstream counts
	 * every event). */
	src = task_cpu_of(p, btf);
	if (src == dest_cpu)
		return 0;
	st = state_of(p, btf, ON(RSCHED_G_MIGRATION));
	if (!st)
		return 0;
	if (ON(RSCHED_G_BLAME) && st->enqueue_ns) {
		/* Moved while waiting: it waits on dest now. The part so far, on src, is kept and
		 * blamed on src's runners at switch-in (blame_wait); past RSCHED_MIG_PARTS parts
		 * the oldest is dropped (<unknown>). The runqueue clock is still src's here. */
		__u64 at = delay_rq_clock ? rq_clock_of(p, btf) : bpf_ktime_get_ns();
		if (st->wait_cpu == (__u32)src) {
			__u64 from = st->wait_since ? st->wait_since : st->enqueue_ns;
			__u32 n = st->nmig;
			if (n >= RSCHED_MIG_PARTS) {
#pragma clang loop unroll(full)
				for (__u32 i = 0; i + 1 < RSCHED_MIG_PARTS; i++) {
					st->mig_at[i] = st->mig_at[i + 1];
					st->mig_cpu[i] = st->mig_cpu[i + 1];
				}
				n = RSCHED_MIG_PARTS - 1;
			}
			st->mig_at[n & (RSCHED_MIG_PARTS - 1)] = from;
			st->mig_cpu[n & (RSCHED_MIG_PARTS - 1)] = (__u32)src;
			st->nmig = n + 1;
			/* one of src's waiters at its epoch's start no longer waits there */
			__u32 zero = 0;
			struct rsched_runners *sr =
				bpf_core_enum_value_exists(enum bpf_func_id,
							   BPF_FUNC_map_lookup_percpu_elem)
					? bpf_map_lookup_percpu_elem(&runners, &zero, (__u32)src)
					: NULL;
			if (sr && sr->waiters && from <= sr->cur.start)
				__sync_fetch_and_sub(&sr->waiters, 1);
		} else {
			st->nmig = 0;
		}
		st->wait_cpu = (__u32)dest_cpu;
		st->wait_since = at;
	}
	if (!ON(RSCHED_G_MIGRATION))
		return 0;
	st->migrations++;
	mark_dirty(st, p, btf);
	if (src < 0 || src >= RSCHED_MAX_CPUS || dest_cpu < 0 || dest_cpu >= RSCHED_MAX_CPUS)
		return 0;
	/* RSCHED_MAX_CPUS is a power of two: the masks keep the verifier's bounds */
	__u32 s = (__u32)src & (RSCHED_MAX_CPUS - 1), d = (__u32)dest_cpu & (RSCHED_MAX_CPUS - 1);
	OPAQUE(s);
	OPAQUE(d);
	s &= RSCHED_MAX_CPUS - 1;
	d &= RSCHED_MAX_CPUS - 1;
	__s32 sn = cpu_to_numa[s], dn = cpu_to_numa[d];
	__s32 sd = cpu_to_die[s], dd = cpu_to_die[d];
	if (sn >= 0 && dn >= 0 && sn != dn)
		st->cross_numa++;
	else if (sd >= 0 && dd >= 0 && sd != dd)
		st->cross_ccx++;
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, false);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup_btf, struct task_struct *p) { return on_wakeup(p, true); }

SEC("raw_tp/sched_wakeup")
int BPF_PROG(sched_wakeup_raw, struct task_struct *p) { return on_wakeup(p, false); }

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_btf, struct task_struct *p) { return on_wakeup(p, true); }

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new_raw, struct task_struct *p) { return on_wakeup(p, false); }

SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking_btf, struct task_struct *p) { return on_waking(p, true); }

SEC("raw_tp/sched_waking")
int BPF_PROG(sched_waking_raw, struct task_struct *p) { return on_waking(p, false); }

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(sched_migrate_task_btf, struct task_struct *p, int dest_cpu)
{
	return on_migrate(p, dest_cpu, true);
}

SEC("raw_tp/sched_migrate_task")
int BPF_PROG(sched_migrate_task_raw, struct task_struct *p, int dest_cpu)
{
	return on_migrate(p, dest_cpu, false);
}

/* Set by user space (mmapped .bss) for a read that must see every thread, not only those whose
 * counters changed since the last read. */
bool iter_all = false;

/* Writes one compact iterator record (sched_abi.h, rsched_iter_record_size): the ident and the
 * parts of the state that this run's groups fill. The writes of one task are all or nothing:
 * when the buffer overflows, the kernel drops the task's partial record and shows it again. */
static __always_inline int emit_task(struct seq_file *seq, struct rsched_task_ident *id,
				     struct rsched_task_state *st)
{
	if (bpf_seq_write(seq, id, sizeof(*id)) || bpf_seq_write(seq, &st->used, sizeof(st->used)))
		return -1;
	if (ON(RSCHED_G_LATENCY) && bpf_seq_write(seq, &st->delay, RSCHED_ITER_LATENCY_BYTES))
		return -1;
	if (ON(RSCHED_G_SLICE) && bpf_seq_write(seq, &st->slice_vol, RSCHED_ITER_SLICE_BYTES))
		return -1;
	if (ON(RSCHED_G_SLEEP) && bpf_seq_write(seq, &st->sleep, RSCHED_ITER_SLEEP_BYTES))
		return -1;
	if (ON(RSCHED_G_WAKING) && bpf_seq_write(seq, &st->waking, RSCHED_ITER_WAKING_BYTES))
		return -1;
	if (ON(RSCHED_G_MIGRATION) &&
	    bpf_seq_write(seq, &st->migrations, RSCHED_ITER_MIGRATION_BYTES))
		return -1;
	if (ON(RSCHED_G_PERF) && bpf_seq_write(seq, st->counters, RSCHED_ITER_PERF_BYTES))
		return -1;
	if (ON(RSCHED_G_BLAME) && bpf_seq_write(seq, &st->blame, RSCHED_ITER_BLAME_BYTES))
		return -1;
	return 0;
}

/* Emits ident + cumulative state of every live thread that has state (tp_btf mode). Threads that
 * are exiting (exit_state set) are skipped: their final record arrives through the graveyard. */
SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct rsched_task_ident id = {};
	struct rsched_task_state *st;

	if (!t || t->exit_state)
		return 0;
	st = bpf_task_storage_get(&task_state, t, 0, 0);
	if (!st || (!st->dirty && !iter_all))
		return 0;
	fill_key(&id, t, true);
	fill_attr(&id, st);
	/* Clear the flag only once the record is in the buffer: when the buffer is full the
	 * kernel shows this task again on the next read(), and it must still be dirty then. A
	 * change racing with the clear is carried by the cumulative counters: it is read with the
	 * thread's next change, a full read or its final record. With the dirty list, `dirty` is
	 * the list's epoch mark and stays. */
	if (emit_task(seq, &id, st) == 0 && !dirty_list)
		st->dirty = 0;
	return 0;
}

/* The dirty-list drain: two syscall programs that user space runs with BPF_PROG_TEST_RUN. */

/* The list being drained, its usable length and its epoch (set by dirty_flip). */
__u32 drain_sel;
__u32 drain_len;
__u32 drain_epoch;

/* Ends the current epoch: changes from now on go to the other list, and this epoch's list is
 * handed to dirty_drain. Returns the length the list reached (more than dirty_cap: overflow). */
SEC("syscall")
int dirty_flip(void *ctx)
{
	__u32 e = dirty_epoch;
	__u32 l = e & 1;

	dirty_epoch = e + 1;
	/* A change that read the old epoch just before the flip may still append after this
	 * exchange: its entry is read with the list's next use, and the thread is listed again by
	 * its next change in the new epoch (its counters are cumulative, so nothing is lost). */
	__u32 n = __sync_lock_test_and_set(&dirty_n[l], 0);
	drain_sel = l;
	drain_epoch = e;
	drain_len = n < dirty_cap ? n : dirty_cap;
	return (int)n;
}

struct drain_ctx {
	__u32 base;    /* first list index of this run */
	__u32 emitted; /* records written to drain_out */
};

/* Copies a histogram (count, total, then `nslots` slots) from the state to a record, skipping the
 * slot groups whose `used` bit is clear: their slots are zero, and not reading them is what makes
 * the drain cheap (a thread's 1.1 KB of latency histograms is mostly cache misses otherwise). */
static __always_inline void copy_hist(__u64 *dst, const __u64 *src, __u32 nslots, __u64 used,
				      __u32 base)
{
	dst[0] = src[0];
	dst[1] = src[1];
#pragma unroll
	for (__u32 g = 0; g < (nslots + RSCHED_USED_SPAN - 1) / RSCHED_USED_SPAN; g++) {
		if (!(used & (1ULL << (base + g))))
			continue;
#pragma unroll
		for (__u32 i = g * RSCHED_USED_SPAN; i < (g + 1) * RSCHED_USED_SPAN && i < nslots;
		     i++)
			dst[2 + i] = src[2 + i];
	}
}

/* Writes the compact record of `t` (sched_abi.h) into a drain_out value. Offsets are constants
 * for the verifier: `groups` is frozen rodata. */
static __always_inline void write_record(char *out, struct task_struct *t,
					 struct rsched_task_state *st)
{
	struct rsched_task_ident *id = (struct rsched_task_ident *)out;
	__u64 used = st->used;
	__u32 off = sizeof(*id) + sizeof(used);

	id->tid = (__u32)t->pid;
	id->tgid = (__u32)t->tgid;
	id->start_time = t->start_time;
	fill_attr(id, st);
	id->flags = 0;
	*(__u64 *)(out + sizeof(*id)) = used;
	if (ON(RSCHED_G_LATENCY)) {
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->delay, RSCHED_HIST_SLOTS, used,
			  RSCHED_USED_DELAY);
		off += sizeof(st->delay);
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->depth, RSCHED_DEPTH_SLOTS, used,
			  RSCHED_USED_DEPTH);
		off += sizeof(st->depth);
	}
	if (ON(RSCHED_G_SLICE)) {
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->slice_vol, RSCHED_HIST_SLOTS,
			  used, RSCHED_USED_SLICE_VOL);
		off += sizeof(st->slice_vol);
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->slice_invol, RSCHED_HIST_SLOTS,
			  used, RSCHED_USED_SLICE_INVOL);
		off += sizeof(st->slice_invol);
	}
	if (ON(RSCHED_G_SLEEP)) {
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->sleep, RSCHED_HIST_SLOTS, used,
			  RSCHED_USED_SLEEP);
		off += sizeof(st->sleep);
	}
	if (ON(RSCHED_G_WAKING)) {
		copy_hist((__u64 *)(out + off), (const __u64 *)&st->waking, RSCHED_HIST_SLOTS, used,
			  RSCHED_USED_WAKING);
		off += sizeof(st->waking);
	}
	if (ON(RSCHED_G_MIGRATION)) {
		__u64 *m = (__u64 *)(out + off);
		m[0] = st->migrations;
		m[1] = st->cross_ccx;
		m[2] = st->cross_numa;
		off += RSCHED_ITER_MIGRATION_BYTES;
	}
	if (ON(RSCHED_G_PERF)) {
		__u64 *c = (__u64 *)(out + off);
#pragma unroll
		for (int i = 0; i < RSCHED_COUNTER_SLOTS; i++)
			c[i] = st->counters[i];
		off += RSCHED_ITER_PERF_BYTES;
	}
	if (ON(RSCHED_G_BLAME)) {
		__u64 *b = (__u64 *)(out + off);
		const __u64 *src = (const __u64 *)&st->blame;
#pragma unroll
		for (int i = 0; i < RSCHED_ITER_BLAME_BYTES / 8; i++)
			b[i] = src[i];
	}
}

static long drain_one(__u32 i, struct drain_ctx *c)
{
	__u32 k = drain_sel * dirty_cap + c->base + i;
	struct dirty_entry *ent = bpf_map_lookup_elem(&dirty_tasks, &k);
	struct rsched_task_state *st = NULL;
	struct task_struct *t;

	if (!ent)
		return 1;
	/* Take the reference out: the entry is empty for the list's next use. */
	t = bpf_kptr_xchg(&ent->task, NULL);
	if (!t)
		return 0; /* not written yet (a late append, see dirty_flip) */
	/* Exiting threads are left to the graveyard, as in the iterator. A thread listed twice (a
	 * race between two CPUs, or a reused tid) is emitted once: `drained` marks it. */
	if (!t->exit_state)
		st = bpf_task_storage_get(&task_state, t, 0, 0);
	if (st && st->drained != drain_epoch) {
		__u32 o = c->emitted;
		char *out = bpf_map_lookup_elem(&drain_out, &o);
		if (out) {
			st->drained = drain_epoch;
			write_record(out, t, st);
			c->emitted = o + 1;
		}
	}
	bpf_task_release(t);
	return 0;
}

/* Only releases a list entry's task reference (the iterator reads every thread this time). */
static long release_one(__u32 i, struct drain_ctx *c)
{
	__u32 k = drain_sel * dirty_cap + c->base + i;
	struct dirty_entry *ent = bpf_map_lookup_elem(&dirty_tasks, &k);
	struct task_struct *t;

	if (!ent)
		return 1;
	t = bpf_kptr_xchg(&ent->task, NULL);
	if (t)
		bpf_task_release(t);
	return 0;
}

/* Takes list entries [pos, pos + drain_batch) of the flipped epoch out; with `emit`, writes their
 * records into drain_out[0 .. return value). Every flipped entry must pass through here once:
 * it holds a task reference. */
SEC("syscall")
int dirty_drain(struct rsched_drain_args *args)
{
	struct drain_ctx c = {.base = args->pos, .emitted = 0};
	__u32 n = 0;

	if (c.base < drain_len)
		n = drain_len - c.base;
	if (n > drain_batch)
		n = drain_batch;
	/* Two callbacks rather than a flag in one: the record writer's branches on `used` are
	 * already near the verifier's limit on pending branches. */
	if (args->emit)
		bpf_loop(n, drain_one, &c, 0);
	else
		bpf_loop(n, release_one, &c, 0);
	return (int)c.emitted;
}

/* The thread's comm or cgroup changes to (comm, cgroup): the attribution in force ends here.
 * A segment record carries the counters as they are now under the old comm and cgroup, so that
 * user space files the samples before the change under them and those after under the new ones.
 * Without room in the buffer the change still takes effect (counted as a drop): the samples
 * since the last read then go under the new attribution, and no count is lost either way. */
static __always_inline void close_attr(struct task_struct *t, struct rsched_task_state *st,
				       const char *comm, __u64 cgroup, bool btf)
{
	struct rsched_task_record *rec;

	if (!st->cgroup_id || (st->cgroup_id == cgroup && comm_eq(st->comm, comm)))
		return;
	/* Built in the ring buffer itself: these programs can be preempted, and a per-CPU scratch
	 * record could be overwritten meanwhile by a sched_switch on this CPU. */
	rec = bpf_ringbuf_reserve(&segments, segment_record_size, 0);
	if (rec) {
		if (btf) {
			write_record((char *)rec, t, st);
		} else {
			fill_key(&rec->id, t, false);
			fill_attr(&rec->id, st);
			bpf_probe_read_kernel(&rec->st, sizeof(rec->st), st);
		}
		rec->id.flags = RSCHED_TASK_SEGMENT;
		rec->id.seg = st->seg + 1;
		bpf_ringbuf_submit(rec, 0);
	} else {
		count_drop(RSCHED_DROP_SEGMENT);
	}
	st->seg++;
	st->cgroup_id = cgroup;
	__builtin_memcpy(st->comm, comm, RSCHED_COMM_LEN);
	if (!btf) {
		/* raw_tp mode: user space reads the hash record's ident */
		struct rsched_task_record *hrec =
			(struct rsched_task_record *)((char *)st -
						      __builtin_offsetof(struct rsched_task_record,
									 st));
		fill_attr(&hrec->id, st);
	}
	mark_dirty(st, t, btf);
}

/* task_rename fires before the new name is copied in: `comm` is the new one. exec renames
 * through it too. */
static __always_inline int on_rename(struct task_struct *t, const char *comm, bool btf)
{
	__u64 name[2] = {};
	struct rsched_task_state *st = state_of(t, btf, false);

	if (!st)
		return 0; /* no samples yet: the state takes the new name when it is created */
	bpf_probe_read_kernel_str(name, sizeof(name), comm);
	close_attr(t, st, (const char *)name, st->cgroup_id, btf);
	return 0;
}

/* After an exec: whatever the thread is called and wherever it is now (exec renames through
 * task_rename, so this usually finds nothing to do). */
static __always_inline int on_exec(struct task_struct *t, bool btf)
{
	__u64 name[2] = {};
	struct rsched_task_state *st = state_of(t, btf, false);

	if (!st)
		return 0;
	comm_of((char *)name, t, btf);
	close_attr(t, st, (const char *)name, cgroup_of(t, btf), btf);
	return 0;
}

/* `t` was moved to another cgroup (cgroup_attach_task fires after the move). */
static __always_inline void on_moved(struct task_struct *t, bool btf)
{
	struct rsched_task_state *st = state_of(t, btf, false);

	if (st)
		close_attr(t, st, st->comm, cgroup_of(t, btf), btf);
}

SEC("tp_btf/task_rename")
int BPF_PROG(task_rename_btf, struct task_struct *t, const char *comm)
{
	return on_rename(t, comm, true);
}

SEC("raw_tp/task_rename")
int BPF_PROG(task_rename_raw, struct task_struct *t, const char *comm)
{
	return on_rename(t, comm, false);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec_btf, struct task_struct *t, pid_t old_pid, struct linux_binprm *b)
{
	return on_exec(t, true);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(sched_process_exec_raw, struct task_struct *t, pid_t old_pid, struct linux_binprm *b)
{
	return on_exec(t, false);
}

extern int bpf_iter_task_new(struct bpf_iter_task *it, struct task_struct *task,
			     unsigned int flags) __weak __ksym;
extern struct task_struct *bpf_iter_task_next(struct bpf_iter_task *it) __weak __ksym;
extern void bpf_iter_task_destroy(struct bpf_iter_task *it) __weak __ksym;
#define RSCHED_TASK_ITER_PROC_THREADS 2 /* enum bpf_iter_task_type (kernel/bpf/task_iter.c) */

/* A process (threadgroup) or one thread moved: with the open-coded task iterator (Linux 6.7)
 * every thread of the process is visited. Loaded only where the kernel has the iterator. */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(cgroup_attach_task_btf, struct cgroup *dst, const char *path, struct task_struct *t,
	     bool threadgroup)
{
	struct bpf_iter_task it;
	struct task_struct *pos;

	if (!threadgroup) {
		on_moved(t, true);
		return 0;
	}
	bpf_iter_task_new(&it, t, RSCHED_TASK_ITER_PROC_THREADS);
	while ((pos = bpf_iter_task_next(&it)))
		on_moved(pos, true);
	bpf_iter_task_destroy(&it);
	return 0;
}

/* Without the iterator (tp_btf before Linux 6.7, raw_tp): the thread named by the tracepoint
 * only (a process's leader). */
SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(cgroup_attach_leader_btf, struct cgroup *dst, const char *path, struct task_struct *t,
	     bool threadgroup)
{
	on_moved(t, true);
	return 0;
}

SEC("raw_tp/cgroup_attach_task")
int BPF_PROG(cgroup_attach_task_raw, struct cgroup *dst, const char *path, struct task_struct *t,
	     bool threadgroup)
{
	on_moved(t, false);
	return 0;
}
