/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel/user ABI of rsched: every struct that crosses the BPF map boundary and the histogram
 * slot function. Compiled by clang -target bpf (with vmlinux.h) and by g++ (with
 * <linux/types.h>); the RSCHED_ABI_ASSERTs at the end pin the layout in both compilers.
 *
 * C subset only: no C++ features, constants as enums, __u32/__u64 field types.
 */
#ifndef RSCHED_ABI_SCHED_ABI_H
#define RSCHED_ABI_SCHED_ABI_H

#if defined(__bpf__)
/* vmlinux.h (included first by the .bpf.c) provides __u8/__u32/__u64. */
#else
#include <linux/types.h>
#endif

#ifdef __cplusplus
/* The header is C: its casts are C casts. Silence the C++-only style warnings for it alone. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuseless-cast"
#endif
extern "C" {
#endif

enum {
	/* Latency histogram ("hybrid" layout), values in ns, bucketed by whole microseconds:
	 *   slots  0..49: 10 us linear buckets, [10*s, 10*s + 9] us
	 *   slot      50: [500, 511] us
	 *   slots 51..73: log2 buckets, [2^(s-42), 2^(s-41) - 1] us (512 us .. ~71.6 min)
	 *   slot      74: [2^32 us, inf) (~71.6 min and above; open-ended)
	 * Upstream stops at slot 63 (>= 2^21 us, ~2.1 s); we continue the log2 run so that every
	 * value a metric keeps (10 s for delays and slices, 1 h for sleep and idle) has its own
	 * bounded bucket. */
	RSCHED_HIST_SLOTS = 75,
	RSCHED_HIST_LINEAR_SLOTS = 50,
	RSCHED_HIST_LINEAR_STEP_US = 10,
	RSCHED_HIST_LOG2_BASE_SLOT = 42, /* slot = floor(log2(us)) + 42 for us >= 512 */
	/* Fine latency histogram (layout 5, rsched_hist_fine_slot), values in ns:
	 *   slots  0..50: as above (10 us linear, then [500, 511] us)
	 *   slots 51..234: each power of two of us from 512 us split in 8 equal sub-buckets:
	 *                  slot 51 + 8 * (n - 9) + j = [(8 + j) * 2^(n-3), (9 + j) * 2^(n-3) - 1]
	 * us, n = 9..31, j = 0..7 (width 1/8 of the octave's lower bound: at most 12.5 % of the
	 * bucket's own lower bound) slot     235: [2^32 us, inf), as slot 74 above Every boundary
	 * of the layout above is one of these: latency slot k >= 51 is fine slots 51 + 8 * (k - 51)
	 * .. + 7 (rsched_fine_to_coarse), slot 74 is 235. */
	RSCHED_HIST_FINE_SLOTS = 236,
	RSCHED_HIST_FINE_SUB_BITS = 3, /* 8 sub-buckets per power of two */
	/* The fine slots past the latency ones they share (51..235): a thread's scheduling delay
	 * keeps them beside its latency histogram (struct rsched_fine_tail). */
	RSCHED_HIST_FINE_TAIL_SLOTS = RSCHED_HIST_FINE_SLOTS - RSCHED_HIST_LINEAR_SLOTS - 1,
	/* Runqueue depth histogram: slot = nr_running, the last slot holds >= 63. */
	RSCHED_DEPTH_SLOTS = 64,
	RSCHED_COMM_LEN = 16,
	RSCHED_MAX_CPUS = 1024,
	/* Perf counter slots per CPU: the four IPC counters, then up to 8 generic events. */
	RSCHED_COUNTER_SLOTS = 12,
	RSCHED_IPC_COUNTERS = 4,
	RSCHED_MAX_GENERIC_EVENTS = 8,
	/* Blame: the culprits kept per thread (struct rsched_blame) and the recent runners kept per
	 * CPU (a power of two: the ring index is masked). */
	RSCHED_BLAME_SLOTS = 16,
	/* A culprit slot last updated this many read epochs ago or more is stale: its counts were
	 * read, the kernel may give it to a new culprit, a live record leaves it out and user space
	 * keeps its previous counts. One rule for the three. */
	RSCHED_BLAME_STALE_EPOCHS = 3,
	RSCHED_BLAME_RING = 512,
	/* Blame's coarse record of older runners per CPU: an epoch is RSCHED_BLAME_EPOCH_RUNS
	 * ring entries, summarised as its top RSCHED_BLAME_EPOCH_TOP runners plus idle and the
	 * rest. Four levels, RSCHED_BLAME_EPOCHS records each; an epoch of level l + 1 merges
	 * RSCHED_BLAME_FANOUT epochs of level l (reach: 64 x 64 x 16 x 16 x 16 = 16M runs). The
	 * ring holds RSCHED_BLAME_RING / RSCHED_BLAME_EPOCH_RUNS = 8 epochs' runs: a wait's walk
	 * takes whole epochs from their records and only the parts of at most two (the newest,
	 * open one and the one the wait began in) run by run. */
	RSCHED_BLAME_EPOCH_RUNS = 64,
	RSCHED_BLAME_EPOCH_TOP = 6,
	RSCHED_BLAME_EPOCHS = 64,
	RSCHED_BLAME_FANOUT = 16,
	RSCHED_BLAME_LEVELS = 4,
	/* The parts of one wait on the CPUs it was moved from, kept until its switch-in. */
	RSCHED_MIG_PARTS = 4,
	/* Wakeup: the wakers kept per thread (struct rsched_wakeup; a power of two), the states
	 * a sleep is split by (S, D, other) and the pseudo-wakers (enum rsched_waker_pseudo). */
	RSCHED_WAKEUP_SLOTS = 8,
	RSCHED_WAKEUP_STATES = 3,
	RSCHED_WAKEUP_PSEUDO = 5,
	/* Wakeup: the kernel stacks of D sleeps kept per thread, and the frames a stack keeps. */
	RSCHED_WAKEUP_STACKS = 8,
	RSCHED_KSTACK_DEPTH = 32,
};

/* A stack id of the second stack map (`kstacks_alt`): RSCHED_KSTACK_ALT | its id there. */
#define RSCHED_KSTACK_ALT 0x40000000U
/* A stack id of the long-sleep stack map (`kstacks_sleep`): RSCHED_KSTACK_SLEEP | its key there,
 * the low 29 bits of the stack's hash. Those stacks are a sleeping thread's, taken at the
 * sched_wakeup that ends a sleep (not D) of at least `long_sleep_ns`. */
#define RSCHED_KSTACK_SLEEP 0x20000000U
#define RSCHED_KSTACK_SLEEP_KEY 0x1FFFFFFFU

/* A value of `kstacks_sleep`: the stack's full 64-bit hash (a key shared by two stacks is
 * detected, not merged), the state of its sleeps, and its return addresses, innermost first,
 * zero-padded. */
struct rsched_kstack_sleep {
	__u64 hash;  /* FNV-1a of the addresses, then of the state */
	__u32 state; /* its sleeps' rsched_sleep_state (S or other; two states: two stacks) */
	__u32 pad;
	__u64 ips[RSCHED_KSTACK_DEPTH];
};

/* Metric groups, a bit mask in the BPF rodata `groups`: code of an unselected group is dead
 * (the verifier removes branches on frozen rodata), so it costs nothing per event. */
enum rsched_group {
	RSCHED_G_LATENCY = 1 << 0,   /* scheduling delay (thread, CPU) + runqueue depth */
	RSCHED_G_SLICE = 1 << 1,     /* time on CPU per switch, voluntary / involuntary */
	RSCHED_G_SLEEP = 1 << 2,     /* sleep durations (thread) + idle durations (CPU) */
	RSCHED_G_WAKING = 1 << 3,    /* sched_waking -> switch-in */
	RSCHED_G_MIGRATION = 1 << 4, /* sched_migrate_task counts */
	RSCHED_G_PERF = 1 << 5,	     /* perf counters read at every switch */
	RSCHED_G_BLAME = 1 << 6,     /* who ran while a thread waited, who preempted it */
	RSCHED_G_WAKEUP = 1 << 7,    /* off-CPU time by state, and who woke the thread */
};

/* Wakeup group: the state a thread left the CPU in (rsched_wakeup_counts index). */
enum rsched_sleep_state {
	RSCHED_SLEEP_S = 0,	/* TASK_INTERRUPTIBLE */
	RSCHED_SLEEP_D = 1,	/* TASK_UNINTERRUPTIBLE, not TASK_NOLOAD (TASK_IDLE is other) */
	RSCHED_SLEEP_OTHER = 2, /* stopped, traced, TASK_IDLE, ... */
};

#define RSCHED_WAKER_PENDING_PSEUDO 0x100U

/* Wakeup group: a wakeup not made by a process, by context at sched_waking (rsched_wakeup.pseudo
 * index), and the residual of the wakers past the slots. */
enum rsched_waker_pseudo {
	RSCHED_WAKER_HARDIRQ = 0, /* a hard interrupt handler (irq_handler_entry..exit) */
	RSCHED_WAKER_SOFTIRQ = 1, /* a softirq (softirq_entry..exit), timer-wheel expiry included */
	RSCHED_WAKER_TIMER = 2,	  /* an hrtimer callback (hrtimer_expire_entry..exit): nanosleep,
				     poll/epoll timeouts */
	RSCHED_WAKER_IDLE = 3,	  /* the idle task, outside those contexts */
	RSCHED_WAKER_OTHER = 4,	  /* <other>: wakers past the slots while all were in use */
};

enum rsched_counter_slot {
	RSCHED_CTR_USER_CYCLES = 0,
	RSCHED_CTR_KERNEL_CYCLES = 1,
	RSCHED_CTR_USER_INSTRUCTIONS = 2,
	RSCHED_CTR_KERNEL_INSTRUCTIONS = 3,
	RSCHED_CTR_GENERIC0 = 4, /* generic event i is slot 4 + i */
};

/* Counters of work the BPF side could not do, cumulative per CPU (PERCPU_ARRAY "drops"). */
enum rsched_drop_id {
	RSCHED_DROP_TASK_STATE =
		0, /* per-task state could not be created (storage full / ENOMEM) */
	RSCHED_DROP_GRAVEYARD =
		1, /* an exiting thread's final record did not fit the graveyard map */
	RSCHED_DROP_STALE_TID = 2, /* raw_tp mode: tid reused before the old entry was flushed */
	RSCHED_DROP_NO_RQ = 3,	   /* runqueue of the woken task not reachable */
	RSCHED_DROP_TOO_LONG =
		4, /* a value above its metric's limit was discarded (not an error) */
	RSCHED_DROP_PERF_READ = 5, /* a perf counter could not be read at a switch */
	RSCHED_DROP_SEGMENT = 6,   /* a closed attribution (rename, exec, cgroup move) did not
				      fit the segment buffer: its samples go under the new one */
	RSCHED_DROP_UNSEEN = 7,	   /* not a loss: scheduler events that reached no program,
				      recovered from the kernel's sched_info and counted: switch-
				      ins, and the wakeups or switch-outs that began a wait */
	RSCHED_DROP_COUNT = 8,
};

/* Task flags in rsched_task_ident.flags */
enum {
	RSCHED_TASK_DEAD = 1,	 /* record is the final one of an exited thread */
	RSCHED_TASK_SEGMENT = 2, /* record closes an attribution (rsched_task_ident.seg) */
};

struct rsched_delay_stats {
	__u64 count;	/* samples */
	__u64 total_ns; /* exact sum of the samples */
	__u64 slots[RSCHED_HIST_SLOTS];
};

struct rsched_depth_stats {
	__u64 count; /* samples (wakeups) */
	__u64 total; /* sum of nr_running at those wakeups */
	__u64 slots[RSCHED_DEPTH_SLOTS];
};

/* Which of a thread's histogram slots were ever counted in, by groups of RSCHED_USED_SPAN slots:
 * bit (base + slot / RSCHED_USED_SPAN) of rsched_task_state.used. Bits are only ever set, so a
 * group whose bit is clear is all zeros, and a read can skip it: the dirty-list drain copies only
 * the used groups (most threads touch a few slots of each histogram). */
enum rsched_used_bit {
	RSCHED_USED_SPAN = 8,
	RSCHED_USED_DELAY = 0,	      /* 10 groups (75 slots) */
	RSCHED_USED_DEPTH = 10,	      /* 8 groups (64 slots) */
	RSCHED_USED_SLICE_VOL = 18,   /* 10 groups */
	RSCHED_USED_SLICE_INVOL = 28, /* 10 groups */
	RSCHED_USED_SLEEP = 38,	      /* 10 groups */
	RSCHED_USED_WAKING = 48,      /* 10 groups */
	RSCHED_USED_DELAY_TAIL = 58,  /* 6 groups of delay_tail (RSCHED_TAIL_SPAN slots each) */
	/* Slots of delay_tail per used bit: 32 (4 octaves, 128 bytes, two cache lines), so that
	 * the drain and a final record copy only the octaves a thread's delays reached. */
	RSCHED_TAIL_SPAN = 32,
};

/* The used bit of delay_tail slot `i` (0-based in the tail). */
static inline __u64 rsched_tail_bit(__u32 i)
{
	return 1ULL << (RSCHED_USED_DELAY_TAIL + i / RSCHED_TAIL_SPAN);
}

/* All of delay_tail's used bits (any sample >= 512 us sets one). */
#define RSCHED_USED_TAIL_MASK (~0ULL << RSCHED_USED_DELAY_TAIL)

/* The fine tail of a thread's scheduling delay: fine slots 51..235 (layout 5, sched_abi.h's
 * rsched_hist_fine_slot) of the samples >= 512 us, also counted in delay's latency slots 51..74
 * (each of which is 8 of these). Counters are 32-bit and wrap: user space takes the difference
 * of two reads modulo 2^32 (fewer than 2^32 samples of one slot between two reads). The low
 * slots 0..50 are delay's own. */
struct rsched_fine_tail {
	__u32 slots[RSCHED_HIST_FINE_TAIL_SLOTS];
	__u32 pad;
};

/* One culprit of a thread (blame group): a process, under the comm and cgroup it ran as, that
 * ran on the CPU where the thread waited, or took the CPU from it. Cumulative. Its process id,
 * occupant number and last use are kept apart (rsched_blame.tgid, .gen, .epoch) so that finding
 * a culprit reads two cache lines, not sixteen. */
struct rsched_blame_slot {
	__u64 cgroup_id;
	char comm[RSCHED_COMM_LEN];
	__u64 wait_ns;	 /* time it ran on the CPU while the thread waited there */
	__u64 waits;	 /* scheduling delays it had a part in */
	__u64 preempts;	 /* involuntary switches of the thread in which it took the CPU */
	__u64 approx_ns; /* the part of wait_ns estimated: a share of a coarse epoch's span */
};

/* A thread's blame: the parts of its scheduling delay always add up to delay.total_ns (the same
 * samples), and its preemptions (all culprits) to its involuntary switches. A slot is given to a
 * new culprit only when its counts were read at least two reads ago (`epoch`), and its `gen`
 * then changes, so user space takes the new counts whole instead of as a difference. */
struct rsched_blame {
	__u32 tgid[RSCHED_BLAME_SLOTS]; /* slot i's culprit process */
	__u16 gen[RSCHED_BLAME_SLOTS];	/* bumped when slot i takes a new culprit; 0 = never used */
	__u16 epoch[RSCHED_BLAME_SLOTS]; /* blame_epoch (low 16 bits) at slot i's last update */
	/* Priority inversion: slot i's culprit as it last ran while the thread waited (or took the
	 * CPU from it): the CPU, its task->policy and task->prio + 1 (0 = not seen yet). */
	__u16 cpu[RSCHED_BLAME_SLOTS];
	__u8 policy[RSCHED_BLAME_SLOTS];
	__u8 prio1[RSCHED_BLAME_SLOTS];
	struct rsched_blame_slot slot[RSCHED_BLAME_SLOTS];
	__u64 idle_ns; /* <idle>: nothing else ran (leaving idle, the wakeup path) */
	__u64 idle_waits;
	__u64 idle_preempts; /* switched out for the idle task while runnable (throttling) */
	__u64 unknown_ns;    /* <unknown>: the CPU's record of runners did not reach back, or the
				wait began on another CPU */
	__u64 unknown_waits;
	__u64 other_ns; /* <other>: culprits past the slots while all were in use */
	__u64 other_waits;
	__u64 other_preempts;
	__u64 idle_approx_ns; /* the part of idle_ns, other_ns estimated (as slot.approx_ns) */
	__u64 other_approx_ns;
	/* The thread itself at its last switch-in after a wait: task->policy, task->prio + 1 (0 =
	 * no wait seen yet). */
	__u8 waiter_policy;
	__u8 waiter_prio1;
	__u8 pad[6];
};

/* Wakeup group: a waker's part of a thread's sleeps, by the state the thread slept in. */
struct rsched_wakeup_counts {
	__u64 sleep_ns[RSCHED_WAKEUP_STATES]; /* switch-out -> sched_wakeup, exact */
	__u64 count[RSCHED_WAKEUP_STATES];    /* sleeps it ended */
};

struct rsched_wakeup_slot {
	__u64 cgroup_id; /* the waker's cgroup v2 id and comm (its attribution at sched_waking) */
	char comm[RSCHED_COMM_LEN];
	struct rsched_wakeup_counts n;
};

/* A thread's sleeps and who ended them: every sleep (switch-out in a sleeping state -> the
 * sched_wakeup that ends it; its waker is the one current at the sched_waking before) is charged
 * whole to one waker: a process in a slot, a pseudo-waker, or <other>; so the parts add up to the
 * thread's off-CPU time in sleeps exactly. Slots are given away as
 * blame's are (three reads after their last update, `gen` moving on). */
struct rsched_wakeup {
	__u64 off_since; /* BPF-internal: switch-out time of the sleep in progress, 0 = none */
	__u32 off_state; /* BPF-internal: its rsched_sleep_state */
	__u16 hint;	 /* BPF-internal: the slot found last */
	/* BPF-internal: the waker found at the sched_waking that ends the sleep in progress, whose
	 * sched_wakeup charges it: slot i + 1, or RSCHED_WAKER_PENDING_PSEUDO | pseudo-waker; 0
	 * none */
	__u16 pending;
	__u32 tgid[RSCHED_WAKEUP_SLOTS];
	__u16 gen[RSCHED_WAKEUP_SLOTS];	  /* as rsched_blame.gen */
	__u16 epoch[RSCHED_WAKEUP_SLOTS]; /* blame_epoch (low 16 bits) at the last update */
	struct rsched_wakeup_slot slot[RSCHED_WAKEUP_SLOTS];
	struct rsched_wakeup_counts pseudo[RSCHED_WAKEUP_PSEUDO]; /* enum rsched_waker_pseudo */
	/* Where D sleeps blocked: per kernel stack (an id of the `kstacks` stack map, taken at the
	 * switch-out), their time and count; slots given away as the wakers'; past them, or when
	 * the stack could not be taken, other_stack_*. The parts add up to the D rows above. */
	__u32 off_stack1; /* BPF-internal: the stack id + 1 of the D sleep in progress, 0 none */
	__u32 stack_hint; /* BPF-internal */
	__u32 stack_id[RSCHED_WAKEUP_STACKS];
	__u16 stack_gen[RSCHED_WAKEUP_STACKS];
	__u16 stack_epoch[RSCHED_WAKEUP_STACKS];
	__u64 stack_ns[RSCHED_WAKEUP_STACKS];
	__u64 stack_count[RSCHED_WAKEUP_STACKS];
	__u64 other_stack_ns;
	__u64 other_stack_count;
	/* The thread's I/O as the kernel's per-task accounting counts it (task->ioac,
	 * CONFIG_TASK_IO_ACCOUNTING): bytes it caused to be read from storage, and bytes of page
	 * cache it dirtied (to be written back) or wrote directly. Cumulative from when rsched took
	 * the thread on (io_base_*, BPF-internal, the counts then), as every other counter; taken
	 * when its record is written (tp_btf) or at its switch-out (raw_tp). 0 without it. */
	__u64 io_base_read;
	__u64 io_base_write;
	__u64 io_read_bytes;
	__u64 io_write_bytes;
};

/* Per-thread cumulative state. Lives in task-local storage (tp_btf mode) or in a tid-keyed hash
 * (raw_tp mode). Counters only ever grow; user space takes deltas, so nothing is lost at an
 * interval boundary. */
struct rsched_task_state {
	__u64 enqueue_ns; /* when the thread became runnable (wakeup or preemption); 0 = not queued
			   */
	__u64 oncpu_ns;	  /* when it was last switched in (slice) */
	__u64 sleep_ns;	  /* when it last went to sleep (sleep) */
	__u64 waking_ns;  /* sched_waking time (waking) */
	__u64 used;	  /* histogram slot groups ever counted in (enum rsched_used_bit) */
	/* The attribution in force: the cgroup and comm the thread's samples are counted under.
	 * Taken from the task when the state is created, replaced when a rename (task_rename, exec
	 * included) or a cgroup move closes the attribution (a segment record carries the old one
	 * and the counters at that moment). cgroup_id 0: not taken yet. */
	__u64 cgroup_id;
	char comm[RSCHED_COMM_LEN];
	/* In this order: what a wakeup, a switch and a migration of the service's groups touch
	 * comes first, in the element's first 4 KiB page (see "state layout" below). */
	__u64 migrations; /* sched_migrate_task events */
	__u64 cross_ccx;  /* ... between dies of one NUMA node */
	__u64 cross_numa; /* ... between NUMA nodes */
	/* Read bookkeeping (BPF-internal). Dirty-list reads: `dirty` is the read epoch in which
	 * the thread was put on the dirty list, `drained` the epoch whose drain last emitted it.
	 * Iterator-only reads: `dirty` is 1 when a counter changed since the iterator emitted it.
	 */
	__u32 dirty;
	__u32 drained;
	__u32 seg; /* attributions closed so far (segment records emitted or dropped) */
	/* The kernel's count of the thread's waits for the CPU (sched_info.pcount, low 32 bits)
	 * that its delay samples account for; with k_delay, its sched_info.run_delay then, in
	 * 1024 ns units (low 32 bits). BPF-internal: a switch-in the kernel counted and no program
	 * saw is found and counted from them (docs/ARCHITECTURE.md, "Switch-ins no program saw").
	 * Kept only where the kernel keeps sched_info (rsched.bpf.c, sched_info_live). */
	__u32 k_pcount;
	/* Blame (BPF-internal): the CPU whose runqueue the thread waits on while enqueue_ns is set,
	 * and since when (a migration while waiting moves it; the wait before is <unknown>). Kept
	 * in the cache line of the migration counts and `dirty`, which a wakeup, a preemption and
	 * a switch-in touch anyway (asserted below): a thread's state is cold memory when
	 * thousands of threads take turns. */
	__u32 wait_cpu;
	__u16 blame_hint; /* the culprit slot found last (checked first) */
	/* The kernel's count of waits (sched_info.pcount, low 16 bits) when enqueue_ns was set: a
	 * wait whose switch-in no program saw left enqueue_ns behind, and the count moved on since
	 * (sched_info_live only). */
	__u16 enq_pcount;
	__u64 wait_since;
	/* Migrations while waiting: part i of the wait, [mig_at[i], mig_at[i + 1]) (the last one
	 * up to wait_since), was on CPU mig_cpu[i]; oldest first, nmig of them. Each is blamed at
	 * switch-in on that CPU's runners. A wait moved more than RSCHED_MIG_PARTS times keeps its
	 * newest parts; only the dropped oldest is <unknown>. */
	__u32 nmig;
	__u32 k_delay; /* see k_pcount */
	__u64 mig_at[RSCHED_MIG_PARTS];
	__u32 mig_cpu[RSCHED_MIG_PARTS];
	struct rsched_delay_stats delay; /* scheduling delay */
	struct rsched_depth_stats depth; /* runqueue depth at wakeup */
	struct rsched_blame blame;   /* who ran while it waited, who preempted it (blame group) */
	struct rsched_wakeup wakeup; /* its sleeps and their wakers (wakeup group) */
	/* delay's fine slots >= 512 us (latency group): touched only by waits that long, its
	 * groups up to 128 ms still in the first page */
	struct rsched_fine_tail delay_tail;
	struct rsched_delay_stats slice_vol;   /* time on CPU ending in a voluntary switch */
	struct rsched_delay_stats slice_invol; /* time on CPU ending in a preemption */
	struct rsched_delay_stats sleep;       /* switch-out (not runnable) -> wakeup */
	struct rsched_delay_stats waking;      /* sched_waking -> switch-in */
	__u64 counters[RSCHED_COUNTER_SLOTS];  /* perf counter deltas charged to this thread */
};

struct rsched_task_ident {
	__u32 tid;	  /* task->pid */
	__u32 tgid;	  /* task->tgid (the "pid" of the process) */
	__u64 start_time; /* task->start_time, ns since boot: (tid, start_time) is unique per boot
			   */
	__u64 cgroup_id;  /* cgroup v2 kernfs id (= inode number of the cgroup directory) */
	char comm[RSCHED_COMM_LEN];
	__u32 flags; /* RSCHED_TASK_* */
	/* Live and final records: the attributions closed before it (rsched_task_state.seg). A
	 * segment record: its own number (1, 2, ...): the counters as they were when attribution
	 * `seg` (comm, cgroup_id of this record) was closed. */
	__u32 seg;
};

/* What user space reads per thread: the task iterator emits ident then state back to back, the
 * graveyard map and the raw_tp state map store it as one value. */
struct rsched_task_record {
	struct rsched_task_ident id;
	struct rsched_task_state st;
};

/* The records of the task iterator and of the dirty-list drain (tp_btf mode) are compact: the
 * ident, then only the parts of rsched_task_state that the run's groups fill, in this order, each
 * as laid out in the state:
 *   struct rsched_task_ident                    always
 *   used                                        always
 *   delay, depth, delay_tail                    RSCHED_G_LATENCY
 *   slice_vol, slice_invol                      RSCHED_G_SLICE
 *   sleep                                       RSCHED_G_SLEEP
 *   waking                                      RSCHED_G_WAKING
 *   migrations, cross_ccx, cross_numa           RSCHED_G_MIGRATION
 *   counters                                    RSCHED_G_PERF
 *   blame                                       RSCHED_G_BLAME
 *   wakeup                                      RSCHED_G_WAKEUP
 * The parts left out are zero for the whole run (their groups' code is dead). In a histogram, the
 * slot groups whose `used` bit is clear are zero in the kernel and undefined in the record (the
 * drain does not write them); readers must take only the used groups (delay_tail too: its groups of
 * RSCHED_TAIL_SPAN slots, bits RSCHED_USED_DELAY_TAIL..63). With the default groups a record is
 * 1944 bytes instead of 5808. In tp_btf mode the graveyard's final records are compact too (an
 * exiting thread's bury reads and copies only what its groups filled); in raw_tp mode the
 * graveyard and the tid-keyed map keep whole rsched_task_record values. */
enum {
	RSCHED_ITER_LATENCY_BYTES = sizeof(struct rsched_delay_stats) +
				    sizeof(struct rsched_depth_stats) +
				    sizeof(struct rsched_fine_tail),
	RSCHED_ITER_SLICE_BYTES = 2 * sizeof(struct rsched_delay_stats),
	RSCHED_ITER_SLEEP_BYTES = sizeof(struct rsched_delay_stats),
	RSCHED_ITER_WAKING_BYTES = sizeof(struct rsched_delay_stats),
	RSCHED_ITER_MIGRATION_BYTES = 3 * sizeof(__u64),
	RSCHED_ITER_PERF_BYTES = RSCHED_COUNTER_SLOTS * sizeof(__u64),
	RSCHED_ITER_BLAME_BYTES = sizeof(struct rsched_blame),
	RSCHED_ITER_WAKEUP_BYTES = sizeof(struct rsched_wakeup),
};

static inline __u32 rsched_iter_record_size(__u32 groups)
{
	__u32 n = sizeof(struct rsched_task_ident) + sizeof(__u64);
	if (groups & RSCHED_G_LATENCY)
		n += RSCHED_ITER_LATENCY_BYTES;
	if (groups & RSCHED_G_SLICE)
		n += RSCHED_ITER_SLICE_BYTES;
	if (groups & RSCHED_G_SLEEP)
		n += RSCHED_ITER_SLEEP_BYTES;
	if (groups & RSCHED_G_WAKING)
		n += RSCHED_ITER_WAKING_BYTES;
	if (groups & RSCHED_G_MIGRATION)
		n += RSCHED_ITER_MIGRATION_BYTES;
	if (groups & RSCHED_G_PERF)
		n += RSCHED_ITER_PERF_BYTES;
	if (groups & RSCHED_G_BLAME)
		n += RSCHED_ITER_BLAME_BYTES;
	if (groups & RSCHED_G_WAKEUP)
		n += RSCHED_ITER_WAKEUP_BYTES;
	return n;
}

/* Context of the dirty-list drain program (BPF_PROG_TEST_RUN of a syscall program): take list
 * entries [pos, pos + batch) out and, when `emit`, write their records into the drain output map
 * (a read of every thread by the iterator only releases the entries' task references). */
struct rsched_drain_args {
	__u32 pos;
	__u32 emit;
};

/* Key of the graveyard map (final records of exited threads). */
struct rsched_task_key {
	__u32 tid;
	__u32 pad;
	__u64 start_time;
};

/* Per-CPU cumulative stats (PERCPU_ARRAY with one element; each CPU writes its own copy). */
struct rsched_cpu_stats {
	struct rsched_delay_stats delay; /* scheduling delay of threads switched in on this CPU */
	struct rsched_delay_stats idle;	 /* idle periods of this CPU */
	struct rsched_delay_stats busy;	 /* busy periods: leaving idle -> going idle again */
	__u64 idle_start_ns;		 /* BPF-internal: when the CPU went idle, 0 = not idle */
	__u64 busy_start_ns;		 /* BPF-internal: when it left idle, 0 = not known */
};

/* Per-CPU perf bookkeeping (BPF-internal): counter values at the last switch and the thread
 * they will be charged to. */
struct rsched_perf_ctx {
	__u64 last[RSCHED_COUNTER_SLOTS];
	__u32 running_tid;
	__u32 pad;
};

struct rsched_drop_stats {
	__u64 counters[RSCHED_DROP_COUNT];
};

/* Layout pins: both compilers must agree byte for byte (user space reads these from maps). */
#ifdef __cplusplus
#define RSCHED_ABI_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define RSCHED_ABI_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
RSCHED_ABI_ASSERT(sizeof(struct rsched_delay_stats) == 16 + 8 * RSCHED_HIST_SLOTS, "delay stats");
RSCHED_ABI_ASSERT(sizeof(struct rsched_depth_stats) == 16 + 8 * RSCHED_DEPTH_SLOTS, "depth stats");
RSCHED_ABI_ASSERT(sizeof(struct rsched_blame_slot) == 56, "blame slot");
RSCHED_ABI_ASSERT(sizeof(struct rsched_blame) == 68 * RSCHED_BLAME_SLOTS + 64 + 8 + 16, "blame");
RSCHED_ABI_ASSERT(sizeof(struct rsched_wakeup_counts) == 48, "wakeup counts");
RSCHED_ABI_ASSERT(sizeof(struct rsched_wakeup) ==
			  16 + 64 + 72 * RSCHED_WAKEUP_SLOTS + 240 + 216 + 32,
		  "wakeup");
RSCHED_ABI_ASSERT(sizeof(struct rsched_fine_tail) == 4 * RSCHED_HIST_FINE_TAIL_SLOTS + 4, "tail");
RSCHED_ABI_ASSERT(sizeof(struct rsched_task_state) == 3808 + 72 + 1176 + 1144 + 744, "task state");
RSCHED_ABI_ASSERT(sizeof(struct rsched_task_ident) == 48, "task ident");
RSCHED_ABI_ASSERT(sizeof(struct rsched_task_record) == 3856 + 72 + 1176 + 1144 + 744,
		  "task record");
RSCHED_ABI_ASSERT((RSCHED_WAKEUP_SLOTS & (RSCHED_WAKEUP_SLOTS - 1)) == 0,
		  "wakeup slots: a power of 2");
RSCHED_ABI_ASSERT(sizeof(struct rsched_task_key) == 16, "task key");
RSCHED_ABI_ASSERT(sizeof(struct rsched_kstack_sleep) == 16 + 8 * RSCHED_KSTACK_DEPTH,
		  "kstack sleep");
RSCHED_ABI_ASSERT((RSCHED_KSTACK_SLEEP & RSCHED_KSTACK_ALT) == 0 &&
			  (RSCHED_KSTACK_SLEEP_KEY & (RSCHED_KSTACK_SLEEP | RSCHED_KSTACK_ALT)) ==
				  0,
		  "stack id flags are apart");
RSCHED_ABI_ASSERT(sizeof(struct rsched_drain_args) == 8, "drain args");
RSCHED_ABI_ASSERT(sizeof(struct rsched_cpu_stats) == 1864, "cpu stats");
RSCHED_ABI_ASSERT(sizeof(struct rsched_drop_stats) == 8 * RSCHED_DROP_COUNT, "drop stats");
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_record, st) == 48, "record layout");
/* What the service's groups (latency, migration, blame, wakeup) touch per event comes first:
 * the timestamps, the read and wait bookkeeping, delay, depth, blame and wakeup, 3,608 bytes,
 * then the fine tail, whose groups up to 128 ms still end in the first 4 KiB page of the task
 * storage element (its value begins 72-80 bytes into an 8 KiB block). On this project's VM
 * (PVM, shadow paging) a second page touched per event is a TLB miss: a wakeup cost ~100 ns
 * more with the wait bookkeeping past 4 KiB. */
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, delay) == 176, "state layout");
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, delay_tail) +
				  2 * RSCHED_TAIL_SPAN * sizeof(__u32) <=
			  4096 - 128,
		  "the service's parts in the first page");
/* The BPF record writers copy the tail and blame's parts in 8-byte words. */
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, delay_tail) % 8 == 0 &&
			  sizeof(struct rsched_fine_tail) % 8 == 0 &&
			  __builtin_offsetof(struct rsched_blame, slot) % 8 == 0 &&
			  __builtin_offsetof(struct rsched_task_ident, comm) % 8 == 0 &&
			  __builtin_offsetof(struct rsched_task_state, comm) % 8 == 0,
		  "word copies");
/* A wait's bookkeeping shares one cache line with `dirty` and the migration counts. */
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, migrations) / 64 ==
			  (__builtin_offsetof(struct rsched_task_state, k_delay) + 3) / 64,
		  "wait line");
/* Used-bit groups: ceil(75 / 8) = 10 per latency histogram, 64 / 8 = 8 for depth; 58 bits. */
RSCHED_ABI_ASSERT((int)RSCHED_USED_DEPTH - (int)RSCHED_USED_DELAY ==
			  ((int)RSCHED_HIST_SLOTS + (int)RSCHED_USED_SPAN - 1) /
				  (int)RSCHED_USED_SPAN,
		  "delay groups");
RSCHED_ABI_ASSERT((int)RSCHED_USED_SLICE_VOL - (int)RSCHED_USED_DEPTH ==
			  (int)RSCHED_DEPTH_SLOTS / (int)RSCHED_USED_SPAN,
		  "depth groups");
RSCHED_ABI_ASSERT((int)RSCHED_USED_WAKING + 10 <= 64, "used bits fit");
RSCHED_ABI_ASSERT((int)RSCHED_USED_DELAY_TAIL == (int)RSCHED_USED_WAKING + 10, "tail bit");
RSCHED_ABI_ASSERT((int)RSCHED_USED_DELAY_TAIL +
				  ((int)RSCHED_HIST_FINE_TAIL_SLOTS + (int)RSCHED_TAIL_SPAN - 1) /
					  (int)RSCHED_TAIL_SPAN ==
			  64,
		  "tail groups fill the used mask");
/* Fine layout: the 51 slots below 512 us, 8 per octave of the 23 coarse log2 slots, the open top.
 */
RSCHED_ABI_ASSERT((int)RSCHED_HIST_FINE_SLOTS ==
			  (int)RSCHED_HIST_LINEAR_SLOTS + 1 +
				  ((int)RSCHED_HIST_SLOTS - (int)RSCHED_HIST_LINEAR_SLOTS - 2) *
					  (1 << RSCHED_HIST_FINE_SUB_BITS) +
				  1,
		  "fine slots");
RSCHED_ABI_ASSERT((RSCHED_BLAME_RING & (RSCHED_BLAME_RING - 1)) == 0, "blame ring is a power of 2");
RSCHED_ABI_ASSERT(RSCHED_BLAME_RING % RSCHED_BLAME_EPOCH_RUNS == 0 &&
			  RSCHED_BLAME_RING / RSCHED_BLAME_EPOCH_RUNS >= 4,
		  "the blame ring holds whole epochs, at least four");
RSCHED_ABI_ASSERT((RSCHED_BLAME_SLOTS & (RSCHED_BLAME_SLOTS - 1)) == 0,
		  "blame slots: a power of 2");
/* The iterator's parts are contiguous runs of the state. */
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, depth) ==
			  __builtin_offsetof(struct rsched_task_state, delay) +
				  sizeof(struct rsched_delay_stats),
		  "delay + depth are contiguous");
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, sleep) ==
			  __builtin_offsetof(struct rsched_task_state, slice_vol) +
				  RSCHED_ITER_SLICE_BYTES,
		  "slices are contiguous");
RSCHED_ABI_ASSERT(__builtin_offsetof(struct rsched_task_state, cross_numa) ==
			  __builtin_offsetof(struct rsched_task_state, migrations) +
				  2 * sizeof(__u64),
		  "migration counts are contiguous");

/* floor(log2(v)) for v > 0, branch-free (libbpf-tools bits.bpf.h). */
static inline __u32 rsched_log2_u64(__u64 v)
{
	__u32 r, shift;
	__u32 hi = (__u32)(v >> 32);
	if (hi) {
		v = hi;
		r = 32;
	} else {
		r = 0;
	}
	{
		__u32 w = (__u32)v;
		shift = (__u32)(w > 0xFFFF) << 4;
		w >>= shift;
		r |= shift;
		shift = (__u32)(w > 0xFF) << 3;
		w >>= shift;
		r |= shift;
		shift = (__u32)(w > 0xF) << 2;
		w >>= shift;
		r |= shift;
		shift = (__u32)(w > 0x3) << 1;
		w >>= shift;
		r |= shift;
		r |= (w >> 1);
	}
	return r;
}

/* Lower bound in ns of fine slot `slot`, 51 <= slot <= 235: (1000 + 125 j) << n, for
 * slot = 51 + 8 (n - 9) + j (a multiply and a shift). */
static inline __u64 rsched_fine_lo_ns(__u32 slot)
{
	__u32 k = slot - (RSCHED_HIST_LINEAR_SLOTS + 1);
	return (__u64)(1000 + 125 * (k & 7)) << (9 + (k >> RSCHED_HIST_FINE_SUB_BITS));
}

/* Slot of a duration in ns in the fine latency histogram (layout above). No loop and no
 * division: each quotient is a multiply-shift by a constant rounded down, which is the exact
 * quotient or one less, then one exact correction against the next slot's lower bound in ns.
 *  - below 500 us: c = ns * floor(2^32 / 10^4) >> 32 is floor(ns / 10^4) - e with
 *    e < 500000 * 0.73 / 2^32 + 1 < 2, so e is 0 or 1: take c + 1 when ns >= (c + 1) * 10^4.
 *  - from 512 us to 2^32 us: us = ns * floor(2^32 / 1000) >> 32 is floor(ns / 1000) - e with
 *    0 <= e <= 296 and e < 1 + ns * 7e-11; the slot of that (log2, then the next 3 bits) is the
 *    true slot or the one below, as e is far below the narrowest bucket there (32 us at 2^9 us,
 *    2^(n-4) us in octave n); take the next slot when ns reaches its lower bound.
 * ns * 4294967 fits 64 bits for ns < 2^32 * 1000 (4294967 < 2^32 / 1000). Tested against a
 * division-based reference at every boundary (b - 1, b, b + 1 ns) in tests/stats/slot_test.cpp. */
static inline __u32 rsched_hist_fine_slot(__u64 ns)
{
	__u64 us;
	__u32 n, slot;
	if (ns < 500000) {
		__u32 c = (__u32)((ns * 429496ULL) >> 32);
		return c + (__u32)(ns >= (__u64)(c + 1) * 10000);
	}
	if (ns < 512000)
		return RSCHED_HIST_LINEAR_SLOTS;
	if (ns >= 4294967296000ULL) /* 2^32 us */
		return RSCHED_HIST_FINE_SLOTS - 1;
	us = (ns * 4294967ULL) >> 32;
	if (us < 512)
		us = 512;
	n = rsched_log2_u64(us); /* 9..31 */
	slot = RSCHED_HIST_LINEAR_SLOTS + 1 + ((n - 9) << RSCHED_HIST_FINE_SUB_BITS) +
	       (__u32)((us >> (n - RSCHED_HIST_FINE_SUB_BITS)) & 7);
	return slot + (__u32)(ns >= rsched_fine_lo_ns(slot + 1));
}

/* The latency (coarse) slot that holds fine slot `fine`. */
static inline __u32 rsched_fine_to_coarse(__u32 fine)
{
	if (fine <= RSCHED_HIST_LINEAR_SLOTS)
		return fine;
	return RSCHED_HIST_LINEAR_SLOTS + 1 +
	       ((fine - RSCHED_HIST_LINEAR_SLOTS - 1) >> RSCHED_HIST_FINE_SUB_BITS);
}

/* Slot of a duration in ns in the latency histogram (layout above): the coarse slot of its fine
 * slot, which is exact because every latency boundary is a fine boundary. No division: the
 * plain form (ns / 1000, then / 10 below 500 us) costs two 64-bit divisions per sample in BPF,
 * which has no multiply-high to turn a division by a constant into. tests/stats/slot_test.cpp
 * checks it against that plain form at every boundary and over random values. */
static inline __u32 rsched_hist_slot(__u64 ns)
{
	return rsched_fine_to_coarse(rsched_hist_fine_slot(ns));
}

/* The `used` bit of `slot` in a histogram whose groups start at bit `base`. */
static inline __u64 rsched_used_bit(__u32 base, __u32 slot)
{
	return 1ULL << (base + slot / RSCHED_USED_SPAN);
}

/* Slot of a runqueue depth in the depth histogram. */
static inline __u32 rsched_depth_slot(__u64 depth)
{
	return depth < RSCHED_DEPTH_SLOTS - 1 ? (__u32)depth : RSCHED_DEPTH_SLOTS - 1;
}

#ifdef __cplusplus
}
#pragma GCC diagnostic pop
#endif

#endif /* RSCHED_ABI_SCHED_ABI_H */
