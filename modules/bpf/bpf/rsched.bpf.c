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
 *
 * Layout: this file holds the maps and globals, the event handlers and the programs; the helpers
 * are in headers next to it, included below in dependency order: task.bpf.h (reading a task and
 * its runqueue), state.bpf.h (per-thread state, the graveyard), hist.bpf.h (histograms),
 * dirty.bpf.h (the dirty list, the compact record, the drain's callbacks), blame.bpf.h (the
 * blame group) and wakeup.bpf.h (the wakeup group).
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
/* Wakeup group: a sleep (S or other, not D) of at least this long gets its kernel stack, taken
 * from the sleeping thread at the sched_waking that ends it; 0 = none. */
const volatile __u64 long_sleep_ns = 0;
/* Bytes of one segment record: the compact record (tp_btf) or a whole rsched_task_record. */
const volatile __u32 segment_record_size = sizeof(struct rsched_task_record);
/* The kernel keeps struct sched_info (its per-task wait account: /proc/<pid>/schedstat shows a
 * non-zero pcount), as CONFIG_SCHED_INFO kernels do whenever it is built in (before Linux 5.14
 * only with schedstats or delay accounting on). Set by user space. Then a wait begins where the
 * kernel's begins, and a switch-in or the start of a wait that reached no program is recovered
 * from it (see "Switch-ins no program saw" in docs/ARCHITECTURE.md). */
const volatile bool sched_info_live = false;
/* Tests only (RSCHED_TEST_HIDE_SWITCH_INS=N in rschedd's environment): every Nth switch to a
 * thread whose comm begins with "rs-hide" is dropped whole, as if sched_switch had reached no
 * program; the sequence of a thread whose run no tracepoint sees (docs/ARCHITECTURE.md,
 * "Switch-ins no program saw"), staged on purpose. 0 (always, outside tests): the verifier
 * removes the check. */
const volatile __u32 test_hide_every = 0;
__u32 test_hide_seq;
/* Wakeup group: where this CPU's preempt count (x86 __preempt_count, or pcpu_hot.preempt_count)
 * and its hrtimer bases (hrtimer_bases) lie relative to its runqueue (runqueues): per-CPU
 * variables, at the distance of their offsets in vmlinux BTF's .data..percpu. Set by user space
 * with irq_from_preempt; without them (another architecture, a kernel without the variables in
 * BTF) the interrupt tracepoints count the contexts instead (irq_ctx). */
const volatile bool irq_from_preempt = false;
const volatile __s64 pcpu_preempt_off = 0;
const volatile __s64 pcpu_hrtimer_off = 0;

#define ON(g) ((groups & (g)) != 0)

/* Hides a value from the optimiser so that a bounds check it "knows" to be redundant is still
 * emitted for the verifier. */
#define OPAQUE(v) asm volatile("" : "+r"(v))

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

/* (tid, start_time) -> final record of an exited thread; drained by user space. The value is a
 * compact record in tp_btf mode, a whole rsched_task_record in raw_tp mode (sized by user space
 * before load, hence sizes and not BTF types). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(struct rsched_task_key));
	__uint(value_size, sizeof(struct rsched_task_record));
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

/* Wakeup group (BPF-internal): how deep this CPU is in each named interrupt context, counted
 * by the hard-irq, softirq and hrtimer-expiry tracepoints (wakeup.bpf.h). */
struct rsched_irq_ctx {
	__u32 hardirq;
	__u32 softirq;
	__u32 timer;
	__u32 pad;
};

/* Wakeup group without blame: the thread on this CPU since the last switch (the waker of a
 * wakeup in process context), as blame's newest runner records it. One entry per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_runner);
} oncpu SEC(".maps");

/* 0 -> per-CPU interrupt context (wakeup group, without irq_from_preempt) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_irq_ctx);
} irq_ctx SEC(".maps");

/* Wakeup group: the kernel stacks of D sleeps, taken at the switch-out (id -> return
 * addresses, innermost first; one entry without the group). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, RSCHED_KSTACK_DEPTH * sizeof(__u64));
} kstacks SEC(".maps");

/* ... and a second map of another size (another bucket for the same hash): a stack whose
 * bucket in `kstacks` holds another one is stored here (ids | RSCHED_KSTACK_ALT). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 8192);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, RSCHED_KSTACK_DEPTH * sizeof(__u64));
} kstacks_alt SEC(".maps");

/* Wakeup group: the kernel stacks of long sleeps (not D), taken from the sleeper at its
 * sched_waking (key: the low 29 bits of the stack's hash; one entry without the group). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct rsched_kstack_sleep);
} kstacks_sleep SEC(".maps");

/* ... and a per-CPU scratch value to take one in (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rsched_kstack_sleep);
} kstack_scratch SEC(".maps");

/* Final records put into the graveyard so far: user space reads the graveyard only when this
 * moved (walking an empty 16k-bucket hash costs ~0.1 ms). Counted after the insert. */
__u64 buried;

/* The list being drained, its usable length and its epoch (set by dirty_flip). */
__u32 drain_sel;
__u32 drain_len;
__u32 drain_epoch;

/* The helpers (each header's comment says which of the maps and globals above it uses). */
#include "task.bpf.h"
#include "state.bpf.h"
#include "hist.bpf.h"
#include "dirty.bpf.h"
#include "blame.bpf.h"
#include "wakeup.bpf.h"

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

/* The monotonic clock of this event, read on first use. */
#define NOW() (now ? now : (now = bpf_ktime_get_ns()))
/* A scheduling-delay timestamp of task p: the monotonic clock, or the runqueue clock. */
#define DELAY_TS(p) (delay_rq_clock ? rq_clock_of((p), btf) : NOW())

/* Counts `n` delays of `delta` ns each in a thread's delay histograms (and tail) and the CPU's;
 * false (a discard counted) when delta is over the limit. */
static __always_inline bool count_delays(struct rsched_task_state *st, __u64 delta, __u32 n,
					 struct rsched_cpu_stats *cs)
{
	if (delta > max_delay_ns) {
		count_drop(RSCHED_DROP_TOO_LONG);
		return false;
	}
	/* one slot for the thread's and the CPU's histograms and the tail */
	__u32 fine = rsched_hist_fine_slot(delta);
	__u32 slot = rsched_fine_to_coarse(fine);
	add_delays_at(&st->delay, delta, slot, n, &st->used, RSCHED_USED_DELAY);
	add_fine_tails(&st->delay_tail, fine, n, &st->used);
	if (cs)
		add_delays_at(&cs->delay, delta, slot, n, NULL, 0);
	return true;
}

/* The wait of task `p` (state `st`) that began at t0 ended with its switch-in on this CPU at
 * `arrive` (delay clock): counted, and blamed on what ran on the CPU meanwhile. */
static __always_inline void end_wait(struct rsched_task_state *st, struct task_struct *p, __u64 t0,
				     __u64 arrive, struct rsched_cpu_stats *cs,
				     struct rsched_runners *runr, bool btf)
{
	__u64 delta = arrive > t0 ? arrive - t0 : 0;

	st->enqueue_ns = 0;
	if (!count_delays(st, delta, 1, cs))
		return;
	if (ON(RSCHED_G_BLAME)) {
		st->blame.waiter_policy = (__u8)READ(btf, p, policy);
		st->blame.waiter_prio1 = (__u8)(READ(btf, p, prio) + 1);
		blame_wait(st, t0, arrive, delta, bpf_get_smp_processor_id(),
			   (__u32)READ(btf, p, tgid), runr);
	}
	mark_dirty(st, p, btf);
}

/* Task `p` is switched in (at `arrive`, delay clock) from a wait no program saw begin (its
 * wakeup or switch-out reached none): the kernel queued it at runqueue clock `queued`
 * (sched_info.last_queued). Returns that start on the delay clock; blame takes the whole wait
 * as one on this CPU. */
static __always_inline __u64 unseen_wait_start(struct rsched_task_state *st, struct task_struct *p,
					       __u64 queued, __u64 arrive, bool btf)
{
	__u64 rq_now = delay_rq_clock ? arrive : rq_clock_of(p, btf);
	__u64 waited = rq_now > queued ? rq_now - queued : 0;
	__u64 t0 = arrive > waited ? arrive - waited : 1;

	count_drop(RSCHED_DROP_UNSEEN);
	if (ON(RSCHED_G_BLAME)) {
		st->wait_cpu = bpf_get_smp_processor_id();
		st->wait_since = t0;
		st->nmig = 0;
	}
	return t0;
}

/* Waits that ended in a switch-in no program saw, found at a thread's switch-out or switch-in
 * (unseen_at_switch_out, unseen_at_switch_in); what rsched_unseen_runs needs of the thread (it
 * takes no task pointer). */
struct unseen_run {
	__u64 t0;     /* the current run's wait began (delay clock); 0 when no program saw it */
	__u64 arrive; /* the current run's switch-in (delay clock); 0: none (all are past runs) */
	__u64 waited; /* ns the kernel counted for all of them (its run_delay's growth) */
	__u32 missed; /* how many (the current run included) */
	__u32 tid;
	__u32 tgid;
	__u32 cpu;
	__u32 waiting; /* threads waiting on this CPU besides the thread (blame's epochs) */
	__u8 policy;
	__u8 prio1;
	__u8 pad[2];
};

/* Counts the waits of `u` (a global function: checked once by the verifier, not as a second
 * copy of a switch-in's work on every path through sched_switch, which would take the program
 * with every group past the verifier's limit). The current run's wait, if any, is ended as
 * end_wait does (the caller marks the thread dirty) and the thread recorded as this CPU's runner
 * from its switch-in; it lasted from t0 when that was seen, else its share of `waited`. Runs
 * before it, switched in and out unseen, are counted with equal shares of the rest; blame
 * cannot place them (<unknown>). */
__noinline int rsched_unseen_runs(struct rsched_task_state *st, struct rsched_cpu_stats *cs,
				  struct rsched_runners *runr, struct unseen_run *u)
{
	if (!st || !u || !u->missed)
		return 0;
	__u32 past = u->missed;
	__u64 rest = u->waited;
	if (u->arrive) {
		past--;
		__u64 t0 = u->t0;
		if (!t0) {
			__u64 share = u->waited / u->missed;
			t0 = u->arrive > share ? u->arrive - share : 1;
			st->wait_cpu = u->cpu;
			st->wait_since = t0;
			st->nmig = 0;
		}
		__u64 delta = u->arrive > t0 ? u->arrive - t0 : 0;
		rest = rest > delta ? rest - delta : 0;
		st->enqueue_ns = 0;
		if (count_delays(st, delta, 1, cs) && ON(RSCHED_G_BLAME)) {
			st->blame.waiter_policy = u->policy;
			st->blame.waiter_prio1 = u->prio1;
			blame_wait(st, t0, u->arrive, delta, u->cpu, u->tgid, runr);
		}
	}
	if (past) {
		__u64 each = rest / past;
		if (count_delays(st, each, past, cs) && ON(RSCHED_G_BLAME)) {
			st->blame.unknown_ns += each * past;
			st->blame.unknown_waits += past;
		}
	}
	if (!u->arrive || !ON(RSCHED_G_BLAME) || !runr ||
	    runs_on(runr, u->tid, u->tgid, st->cgroup_id, st->comm))
		return 1;
	/* after the newest runner recorded here (what ran before it, seen switched in) */
	__u64 newest = runr->ring[(runr->head - 1) & (RSCHED_BLAME_RING - 1)].ts;
	__u64 ts = u->arrive > newest ? u->arrive : newest;
	if (turns_epoch(runr))
		turn_epoch(runr, ts, u->waiting);
	write_runner(runr, ts, u->tid, u->tgid, st->cgroup_id, st->comm, u->policy, u->prio1);
	return 1;
}

/* `prev` (state `st`) is being switched out (`*now`: the event's monotonic clock once read, 0
 * before; read here only when something is found). A wait that ended in a switch-in no program
 * saw shows either as a kernel count of waits (sched_info.pcount) ahead of the thread's
 * (k_pcount: the switch-in, and maybe the wakeup before it, were unseen), or, where the kernel
 * keeps no sched_info, as a wait begun (enqueue_ns) that no switch-in ended. Counts them
 * (rsched_unseen_runs); the current run arrived `ran` ns ago (ran_since_switch_in). Returns
 * that arrival on the monotonic clock, 0 when nothing was unseen. */
static __always_inline __u64 unseen_at_switch_out(struct rsched_task_state *st,
						  struct task_struct *prev, __u32 prev_tid,
						  __u64 *now, struct rsched_cpu_stats *cs,
						  struct rsched_runners *runr, bool btf)
{
	struct unseen_run u = {};
	bool live = sched_info_live && bpf_core_field_exists(prev->sched_info);
	bool current_wait = false; /* enqueue_ns began the current run's wait */

	if (live) {
		__u32 pc = (__u32)READ(btf, prev, sched_info.pcount);
		u.missed = pc - st->k_pcount;
		/* the current run's arrival is the kernel's count's last step */
		current_wait = st->enqueue_ns && st->enq_pcount == (__u16)(pc - 1);
		if (!u.missed)
			return 0;
		__u32 units = kernel_delay_units(prev, btf);
		u.waited = (__u64)(units - st->k_delay) << 10;
		st->k_pcount = pc;
		st->k_delay = units;
	} else {
		if (!st->enqueue_ns)
			return 0;
		u.missed = 1;
		current_wait = true;
	}
	/* the clocks now, read only here (the monotonic clock is the caller's NOW()) */
	__u64 mono_now = *now ? *now : (*now = bpf_ktime_get_ns());
	__u64 at = delay_rq_clock ? rq_clock_of(prev, btf) : mono_now;
	__u64 ran = ran_since_switch_in(prev, live, btf);
	/* A wait begun at enqueue_ns before the kernel's count reached the current run's arrival
	 * is an earlier missed run's: then each takes its share of the kernel's time. */
	u.t0 = current_wait ? st->enqueue_ns : 0;
	u.arrive = at > ran ? at - ran : 1;
	if (u.arrive < u.t0) /* clock rounding: it cannot have arrived before it began to wait */
		u.arrive = u.t0;
	u.tid = prev_tid;
	u.tgid = (__u32)READ(btf, prev, tgid);
	u.cpu = bpf_get_smp_processor_id();
	u.policy = (__u8)READ(btf, prev, policy);
	u.prio1 = (__u8)(READ(btf, prev, prio) + 1);
	/* blame's epochs: the runqueue as it is now stands for the one at the unseen switch-in */
	if (ON(RSCHED_G_BLAME) && runr && turns_epoch(runr))
		u.waiting = rq_waiters(task_rq_of(prev, btf), btf);
	count_drops(RSCHED_DROP_UNSEEN, u.missed);
	rsched_unseen_runs(st, cs, runr, &u);
	mark_dirty(st, prev, btf);
	return mono_now > ran ? mono_now - ran : 1;
}

/* `next` (state `st`) is being switched in. Runs the kernel counted before this one that no
 * program saw begin or end (the thread was switched in and out unseen) are counted first; then
 * this switch-in is checked off in the ledger: the kernel counts it when it queued the thread
 * (`queued`, sched_info.last_queued, non-zero), adding the runqueue clock since then to
 * run_delay. */
static __always_inline void unseen_at_switch_in(struct rsched_task_state *st,
						struct task_struct *next, __u64 queued,
						struct rsched_cpu_stats *cs, bool btf)
{
	if (!sched_info_live || !bpf_core_field_exists(next->sched_info))
		return;
	__u32 pc = (__u32)READ(btf, next, sched_info.pcount);
	__u32 units = kernel_delay_units(next, btf);
	__u32 missed = pc - st->k_pcount;
	if (missed) {
		struct unseen_run u = {
			.missed = missed,
			.waited = (__u64)(units - st->k_delay) << 10,
		};
		count_drops(RSCHED_DROP_UNSEEN, missed);
		rsched_unseen_runs(st, cs, NULL, &u);
		/* a wait begun before them ended with the first of them (counted just now); one
		 * begun since (its stamp is the kernel's count now) is this switch-in's */
		if (st->enq_pcount != (__u16)pc)
			st->enqueue_ns = 0;
		mark_dirty(st, next, btf);
	}
	if (queued) {
		__u64 now = rq_clock_of(next, btf);
		pc++;
		units = (__u32)((READ(btf, next, sched_info.run_delay) +
				 (now > queued ? now - queued : 0)) >>
				10);
	}
	st->k_pcount = pc;
	st->k_delay = units;
}

/* test_hide_every: whether this switch from `prev` to `next` is to be dropped whole. Never a
 * thread's final switch (`prev` dead): on this VM the switch hidden is always the one out of a
 * thread whose run no tracepoint reports, and none of those exits. */
static __always_inline bool test_hidden(struct task_struct *prev, struct task_struct *next,
					bool btf)
{
	char c[8] = {};

	if (task_run_state(prev, btf) & TASK_DEAD)
		return false;

	if (btf)
		__builtin_memcpy(c, next->comm, sizeof(c));
	else
		bpf_probe_read_kernel(c, sizeof(c), &next->comm);
	if (c[0] != 'r' || c[1] != 's' || c[2] != '-' || c[3] != 'h' || c[4] != 'i' ||
	    c[5] != 'd' || c[6] != 'e')
		return false;
	return __sync_fetch_and_add(&test_hide_seq, 1) % test_hide_every == 0;
}

static __always_inline int on_switch(void *ctx, bool preempt, struct task_struct *prev,
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

	if (test_hide_every && test_hidden(prev, next, btf))
		return 0;
	if (ON(RSCHED_G_WAKEUP) && !irq_from_preempt)
		irq_settle();
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
		/* It waits for the CPU from now on where the kernel's sched_info says so too
		 * (sched_info_depart: still TASK_RUNNING), as runqlat. A thread preempted on its
		 * way to sleep (its sleep state already set) stays queued, but neither counts a
		 * wait then: its switch is involuntary, and its next run is no wait's end. */
		bool queued = state == TASK_RUNNING;
		/* A thread that goes to sleep needs its state here only for a group that records
		 * the switch-out, or its final record. Latency's check for a switch-in no program
		 * saw is then left to its next switch-in (the kernel's count is exact there too,
		 * and enq_pcount tells a wait begun since from one left behind); without the
		 * kernel's sched_info it is only here. */
		bool want = runnable || (state & TASK_DEAD) || !sched_info_live ||
			    ON(RSCHED_G_SLICE | RSCHED_G_SLEEP | RSCHED_G_PERF | RSCHED_G_WAKEUP |
			       RSCHED_G_WAKING);
		st = want ? state_of(prev, btf,
				     runnable || ON(RSCHED_G_SLICE | RSCHED_G_SLEEP |
						    RSCHED_G_PERF | RSCHED_G_WAKEUP))
			  : NULL;
		if (st) {
			/* the monotonic time prev was switched in, when no program saw it */
			__u64 arrived = 0;
			if (ON(RSCHED_G_LATENCY)) {
				arrived = unseen_at_switch_out(st, prev, prev_tid, &now, cs, runr,
							       btf);
				/* delay runs from preemption */
				st->enqueue_ns = queued ? DELAY_TS(prev) : 0;
				st->enq_pcount = kernel_pcount16(prev, sched_info_live, btf);
				if (ON(RSCHED_G_BLAME) && queued) {
					st->wait_cpu = bpf_get_smp_processor_id();
					st->wait_since = st->enqueue_ns;
					st->nmig = 0;
				}
			}
			if (arrived) {
				if (ON(RSCHED_G_SLICE) && !st->oncpu_ns)
					st->oncpu_ns = arrived;
				if (ON(RSCHED_G_WAKING) && st->waking_ns) {
					add_bounded(&st->waking,
						    arrived > st->waking_ns
							    ? arrived - st->waking_ns
							    : 0,
						    max_delay_ns, &st->used, RSCHED_USED_WAKING);
					st->waking_ns = 0;
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
			if (ON(RSCHED_G_WAKEUP)) {
				/* a sleep begins (ended and charged at its sched_waking) */
				st->wakeup.off_since = runnable ? 0 : NOW();
				st->wakeup.pending = 0; /* a waking whose wakeup no program saw */
				st->wakeup.off_state = sleep_state_of(state);
				if (!btf) /* raw_tp: user space reads the state itself */
					note_io(st, prev, false);
				/* where a D sleep blocks: this kernel stack (prev's) */
				long sid = -1;
				if (!runnable && st->wakeup.off_state == RSCHED_SLEEP_D) {
					sid = bpf_get_stackid(ctx, &kstacks, BPF_F_FAST_STACK_CMP);
					if (sid ==
					    -17 /* -EEXIST: its bucket holds another stack */) {
						sid = bpf_get_stackid(ctx, &kstacks_alt,
								      BPF_F_FAST_STACK_CMP);
						if (sid >= 0)
							sid |= RSCHED_KSTACK_ALT;
					}
				}
				st->wakeup.off_stack1 = sid >= 0 ? (__u32)sid + 1 : 0;
			}
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
		else if (ON(RSCHED_G_WAKEUP))
			note_oncpu(next, 0, NULL, now, btf);
		return 0;
	}
	st = ON(RSCHED_G_BLAME) ? nst : state_of(next, btf, true);
	if (ON(RSCHED_G_WAKEUP) && !ON(RSCHED_G_BLAME))
		note_oncpu(next, next_tid, st, now, btf); /* blame's ring records it otherwise */
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
	if (ON(RSCHED_G_LATENCY)) {
		__u64 kq = kernel_queued_at(next, sched_info_live, btf);
		unseen_at_switch_in(st, next, kq, cs, btf);
		__u64 t0 = st->enqueue_ns;
		/* No wait began for us, but the kernel's did: the wakeup or switch-out that began
		 * it reached no program. */
		if (t0 || kq) {
			arrive = DELAY_TS(next);
			if (!t0)
				t0 = unseen_wait_start(st, next, kq, arrive, btf);
			end_wait(st, next, t0, arrive, cs, runr, btf);
		}
	}
	if (ON(RSCHED_G_BLAME))
		push_next(arrive ? arrive : DELAY_TS(next), next, next_tid, st, btf, runr);
	return 0;
}

#define TASK_WAKING 0x0200

/* A long sleep (not D) of `ns` ends: its stack, the sleeper's (`p`, off the CPU since), is
 * stored once in kstacks_sleep and the sleep charged to it in one of the thread's stack slots.
 * Without a stack (none taken, a hash key taken by another stack, the map full) or a slot, it is
 * not charged: the `<other>` stack row stays the D sleeps' residual. */
static __always_inline void long_sleep_charge(struct rsched_task_state *st, struct task_struct *p,
					      __u64 ns)
{
	__u32 zero = 0;
	struct rsched_kstack_sleep *k = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!k)
		return;
	long n = bpf_get_task_stack(p, k->ips, sizeof(k->ips), 0);
	if (n <= 0)
		return;
	/* FNV-1a over the addresses, 8 bytes a step (the verifier sees a fixed bound) */
	__u64 h = 1469598103934665603ULL;
#pragma unroll
	for (__u32 i = 0; i < RSCHED_KSTACK_DEPTH; i++)
		h = (h ^ k->ips[i]) * 1099511628211ULL;
	h = (h ^ st->wakeup.off_state) * 1099511628211ULL;
	k->hash = h;
	k->state = st->wakeup.off_state;
	k->pad = 0;
	__u32 key = (__u32)h & RSCHED_KSTACK_SLEEP_KEY;
	struct rsched_kstack_sleep *have = bpf_map_lookup_elem(&kstacks_sleep, &key);
	if (!have && bpf_map_update_elem(&kstacks_sleep, &key, k, BPF_NOEXIST) != 0) {
		/* full, or another CPU stored this key first: which stack it holds decides */
		have = bpf_map_lookup_elem(&kstacks_sleep, &key);
		if (!have)
			return;
	}
	if (have && have->hash != h)
		return;
	stack_add(st, (key | RSCHED_KSTACK_SLEEP) + 1, ns);
}

/* The sleep of `p` (state `st`) whose waker its sched_waking found (wakeup.pending) ends at
 * `now`, its sched_wakeup: charged whole to that waker, and a D sleep to the kernel stack it
 * blocked in, a long one (tp_btf) to the stack it sleeps in now. */
static __always_inline void wakeup_end(struct rsched_task_state *st, struct task_struct *p,
				       __u64 now, bool btf)
{
	__u64 t0 = st->wakeup.off_since;
	__u16 pending = st->wakeup.pending;

	st->wakeup.pending = 0;
	if (!t0)
		return;
	st->wakeup.off_since = 0;
	__u64 ns = now > t0 ? now - t0 : 0;
	wakeup_charge(st, pending, ns, st->wakeup.off_state);
	if (st->wakeup.off_state == RSCHED_SLEEP_D)
		stack_charge(st, ns);
	else if (btf && long_sleep_ns && ns >= long_sleep_ns)
		/* tp_btf only: bpf_get_task_stack needs a BTF task pointer */
		long_sleep_charge(st, p, ns);
	mark_dirty(st, p, btf);
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
	now = ON(RSCHED_G_SLEEP) ? bpf_ktime_get_ns() : 0; /* else read on first use: NOW() */
	if (ON(RSCHED_G_SLEEP) && st->sleep_ns) {
		add_bounded(&st->sleep, now - st->sleep_ns, max_sleep_ns, &st->used,
			    RSCHED_USED_SLEEP);
		mark_dirty(st, p, btf);
		st->sleep_ns = 0;
	}
	/* the sleep its sched_waking found a waker for ends here (NOW(): the read a wait's start
	 * below shares) */
	if (ON(RSCHED_G_WAKEUP) && st->wakeup.pending)
		wakeup_end(st, p, NOW(), btf);
	if (!ON(RSCHED_G_LATENCY))
		return 0;
	/* Keep an earlier timestamp (a thread woken while it waits for the CPU already). A wait
	 * begins where the kernel's does: when it queued the woken thread (sched_info.last_queued,
	 * set just before this tracepoint), not when the thread still runs (woken after it set its
	 * sleep state, before it called schedule(): it never leaves the CPU). Without the kernel's
	 * sched_info: unless the thread is on a CPU. */
	rq = task_rq_of(p, btf);
	/* A wait left behind (its switch-in reached no program: the kernel's count moved on since
	 * it began) is no earlier timestamp: its end is counted at the next switch-in. */
	__u16 pc = kernel_pcount16(p, sched_info_live, btf);
	if ((!st->enqueue_ns || st->enq_pcount != pc) &&
	    (sched_info_live ? kernel_queued_at(p, true, btf) != 0 : !READ(btf, p, on_cpu))) {
		st->enqueue_ns = delay_rq_clock ? rq_clock_of(p, btf) : NOW();
		st->enq_pcount = pc;
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

static __always_inline int on_waking(struct task_struct *p, bool btf)
{
	struct rsched_task_state *st;
	__u32 state;

	if (!ON(RSCHED_G_WAKING | RSCHED_G_WAKEUP) || READ(btf, p, pid) == 0)
		return 0;
	state = task_run_state(p, btf);
	if (state == TASK_RUNNING || (state & TASK_WAKING))
		return 0;
	st = state_of(p, btf, ON(RSCHED_G_WAKING));
	if (!st)
		return 0;
	if (ON(RSCHED_G_WAKING))
		st->waking_ns = bpf_ktime_get_ns();
	/* the sleep that began at its switch-out ends at the sched_wakeup that follows: its waker
	 * is the one current here (no clock read: on_wakeup reads one anyway) */
	if (ON(RSCHED_G_WAKEUP) && st->wakeup.off_since)
		st->wakeup.pending = wakeup_waker(st);
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
	return on_switch(ctx, preempt, prev, next, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(ctx, preempt, prev, next, false);
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

/* Wakeup group: the interrupt contexts a wakeup can come from (wakeup.bpf.h, irq_ctx). */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(irq_entry_btf)
{
	irq_level(RSCHED_WAKER_HARDIRQ, true);
	return 0;
}

SEC("raw_tp/irq_handler_entry")
int BPF_PROG(irq_entry_raw)
{
	irq_level(RSCHED_WAKER_HARDIRQ, true);
	return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(irq_exit_btf)
{
	irq_level(RSCHED_WAKER_HARDIRQ, false);
	return 0;
}

SEC("raw_tp/irq_handler_exit")
int BPF_PROG(irq_exit_raw)
{
	irq_level(RSCHED_WAKER_HARDIRQ, false);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(softirq_entry_btf)
{
	irq_level(RSCHED_WAKER_SOFTIRQ, true);
	return 0;
}

SEC("raw_tp/softirq_entry")
int BPF_PROG(softirq_entry_raw)
{
	irq_level(RSCHED_WAKER_SOFTIRQ, true);
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(softirq_exit_btf)
{
	irq_level(RSCHED_WAKER_SOFTIRQ, false);
	return 0;
}

SEC("raw_tp/softirq_exit")
int BPF_PROG(softirq_exit_raw)
{
	irq_level(RSCHED_WAKER_SOFTIRQ, false);
	return 0;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(hrtimer_entry_btf)
{
	irq_level(RSCHED_WAKER_TIMER, true);
	return 0;
}

SEC("raw_tp/hrtimer_expire_entry")
int BPF_PROG(hrtimer_entry_raw)
{
	irq_level(RSCHED_WAKER_TIMER, true);
	return 0;
}

SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(hrtimer_exit_btf)
{
	irq_level(RSCHED_WAKER_TIMER, false);
	return 0;
}

SEC("raw_tp/hrtimer_expire_exit")
int BPF_PROG(hrtimer_exit_raw)
{
	irq_level(RSCHED_WAKER_TIMER, false);
	return 0;
}

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
	if (ON(RSCHED_G_LATENCY) &&
	    (bpf_seq_write(seq, &st->delay, sizeof(st->delay) + sizeof(st->depth)) ||
	     bpf_seq_write(seq, &st->delay_tail, sizeof(st->delay_tail))))
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
	if (ON(RSCHED_G_WAKEUP) && bpf_seq_write(seq, &st->wakeup, RSCHED_ITER_WAKEUP_BYTES))
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
	note_io(st, t, true);
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
			write_record((char *)rec, t, st, false);
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
	copy_comm(st->comm, comm);
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
