/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The wakeup group. Part of rsched.bpf.c, included after its maps; not a standalone header.
 *
 * Holds: the interrupt context of a wakeup (context_from_preempt: this CPU's preempt count and
 * hrtimer bases, reached from its runqueue; or, without them, irq_ctx: counted up and down by the
 * hard-irq, softirq and hrtimer-expiry tracepoints), the thread on the CPU (current_runner:
 * blame's newest runner, or oncpu, written at each switch-in by note_oncpu), the state a thread
 * sleeps in (sleep_state_of), a waker's slot in the thread's wakeup record
 * (rsched_wakeup_search) and the charge of one sleep to its waker (wakeup_charge).
 *
 * A sleep runs from the switch-out in a sleeping state (on_switch stamps off_since) to the
 * sched_wakeup that ends it, where the wait for the CPU begins (on_wakeup charges it with the
 * clock read it takes for that wait's start): the waker is found at the sched_waking before it
 * (on_waking, which runs in the waker's context: the process current then, or an interrupt it
 * interrupted; sched_wakeup may run on the woken thread's CPU after an IPI). So the sleep is
 * charged whole to one waker, and sleep and scheduling delay add up to the thread's off-CPU
 * time exactly.
 *
 * Expects, from rsched.bpf.c: the rodata irq_from_preempt, pcpu_preempt_off and
 * pcpu_hrtimer_off, the maps irq_ctx, oncpu and runners, the type struct rsched_runner and the
 * global blame_epoch (the read epoch that blame's slots are given away by, bumped by user space
 * before every read); from task.bpf.h: READ(), task_rq_of(), cgroup_of(), comm_of(),
 * copy_comm(), comm_eq().
 */
#ifndef RSCHED_WAKEUP_BPF_H
#define RSCHED_WAKEUP_BPF_H

#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_NOLOAD 0x0400

/* The state a thread left the CPU in (prev->__state at sched_switch). */
static __always_inline __u32 sleep_state_of(__u32 state)
{
	if (state & TASK_INTERRUPTIBLE)
		return RSCHED_SLEEP_S;
	if ((state & TASK_UNINTERRUPTIBLE) && !(state & TASK_NOLOAD))
		return RSCHED_SLEEP_D;
	return RSCHED_SLEEP_OTHER;
}

/* Counts one context level of this CPU up (entry) or down (exit). A level entered before the
 * programs attached is left once more than entered: the count stays at 0. Only without
 * irq_from_preempt (the interrupt tracepoints are not attached otherwise). */
static __always_inline void irq_level(__u32 which, bool enter)
{
	__u32 zero = 0;
	struct rsched_irq_ctx *c = bpf_map_lookup_elem(&irq_ctx, &zero);
	if (!c)
		return;
	__u32 *n = which == RSCHED_WAKER_HARDIRQ   ? &c->hardirq
		   : which == RSCHED_WAKER_SOFTIRQ ? &c->softirq
						   : &c->timer;
	if (enter)
		*n += 1;
	else if (*n)
		*n -= 1;
}

/* A context switch never happens inside a hard interrupt, a softirq or an hrtimer callback: at
 * one, every level of this CPU is 0. Setting them so mends a count left up by an exit not seen
 * (its program attached after the entry's, or skipped), which would otherwise name `<timer>` or
 * an interrupt as the waker of everything woken on this CPU from then on. */
static __always_inline void irq_settle(void)
{
	__u32 zero = 0;
	struct rsched_irq_ctx *c = bpf_map_lookup_elem(&irq_ctx, &zero);
	if (c && (c->hardirq | c->softirq | c->timer)) {
		c->hardirq = 0;
		c->softirq = 0;
		c->timer = 0;
	}
}

extern void *bpf_rdonly_cast(const void *obj__ign, __u32 btf_id__k) __ksym __weak;

/* include/linux/preempt.h: the hard-interrupt nesting count, and the bit set while a softirq is
 * served (a bottom half merely disabled, 2 * SOFTIRQ_OFFSET steps, is still process context). */
#define RSCHED_HARDIRQ_MASK 0x000f0000U
#define RSCHED_SOFTIRQ_OFFSET 0x00000100U

/* The pseudo-waker of this CPU's context from its preempt count and hrtimer bases (with
 * irq_from_preempt): an hrtimer callback is running on one of this CPU's clock bases (the
 * hard ones, 0-3, in a hard interrupt; the soft ones, 4-7, in a softirq), else the innermost
 * of hard interrupt and softirq; -1 in process context. Per-CPU data is reached from this CPU's
 * runqueue (the current task's) at the distance user space found in BTF, through untrusted
 * pointers: guarded loads, no helper call. */
static __always_inline int context_from_preempt(void)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct rq *rq = task_rq_of(cur, true);

	if (!rq)
		return -1;
	struct rq *pc_at = bpf_rdonly_cast((void *)rq + pcpu_preempt_off -
						   bpf_core_field_offset(struct rq, nr_running),
					   bpf_core_type_id_kernel(struct rq));
	__u32 pc = pc_at->nr_running; /* the word at that address: the preempt count */
	if (!(pc & (RSCHED_HARDIRQ_MASK | RSCHED_SOFTIRQ_OFFSET)))
		return -1;
	struct hrtimer_cpu_base *hb = bpf_rdonly_cast(
		(void *)rq + pcpu_hrtimer_off, bpf_core_type_id_kernel(struct hrtimer_cpu_base));
	/* constant indexes: a BTF pointer takes no variable offset */
	if (pc & RSCHED_HARDIRQ_MASK) {
		if (hb->clock_base[0].running || hb->clock_base[1].running ||
		    hb->clock_base[2].running || hb->clock_base[3].running)
			return RSCHED_WAKER_TIMER;
		return RSCHED_WAKER_HARDIRQ;
	}
	if (hb->clock_base[4].running || hb->clock_base[5].running || hb->clock_base[6].running ||
	    hb->clock_base[7].running)
		return RSCHED_WAKER_TIMER;
	return RSCHED_WAKER_SOFTIRQ;
}

/* The thread on this CPU as its last switch-in recorded it (blame's newest runner, or oncpu):
 * consecutive runs of one culprit share an entry, which names them all. NULL before this CPU's
 * first switch was seen. */
static __always_inline const struct rsched_runner *current_runner(void)
{
	__u32 zero = 0;
	struct rsched_runner *e;

	if (ON(RSCHED_G_BLAME)) {
		struct rsched_runners *r = bpf_map_lookup_elem(&runners, &zero);
		if (!r || !r->head)
			return NULL;
		e = &r->ring[(r->head - 1) & (RSCHED_BLAME_RING - 1)];
	} else {
		e = bpf_map_lookup_elem(&oncpu, &zero);
	}
	return e && e->ts ? e : NULL;
}

/* Records `next` as this CPU's thread (oncpu; with blame its ring does): `nst` its state, NULL
 * for the idle task (tid 0) or a thread without state. */
static __always_inline void note_oncpu(struct task_struct *next, __u32 next_tid,
				       struct rsched_task_state *nst, __u64 ts, bool btf)
{
	__u32 zero = 0;
	struct rsched_runner *e = bpf_map_lookup_elem(&oncpu, &zero);

	if (!e)
		return;
	e->ts = ts ? ts : 1;
	e->tid = next_tid;
	if (!next_tid) {
		e->tgid = 0;
		return;
	}
	e->tgid = (__u32)READ(btf, next, tgid);
	if (nst) {
		e->cgroup_id = nst->cgroup_id;
		copy_comm(e->comm, nst->comm);
	} else {
		e->cgroup_id = cgroup_of(next, btf);
		comm_of(e->comm, next, btf);
	}
}

/* The pseudo-waker of this CPU's context now (enum rsched_waker_pseudo), or -1: the current
 * process (`cur`, NULL when not known). An hrtimer callback runs inside a hard interrupt (or a
 * softirq, for soft timers): the innermost named context wins, timer before hardirq before
 * softirq. */
static __always_inline int waker_context(const struct rsched_runner *cur)
{
	__u32 zero = 0;

	if (irq_from_preempt) {
		int c = context_from_preempt();
		if (c >= 0)
			return c;
	} else {
		struct rsched_irq_ctx *c = bpf_map_lookup_elem(&irq_ctx, &zero);
		if (c) {
			if (c->timer)
				return RSCHED_WAKER_TIMER;
			if (c->hardirq)
				return RSCHED_WAKER_HARDIRQ;
			if (c->softirq)
				return RSCHED_WAKER_SOFTIRQ;
		}
	}
	if (cur ? !cur->tid : (__u32)bpf_get_current_pid_tgid() == 0)
		return RSCHED_WAKER_IDLE;
	return -1;
}

/* A waker's slot: its own if it has one; else one never used or not updated for three reads
 * (its counts have been read), which takes the waker on (`gen` moves on, counts restart at 0);
 * else -1: <other>. A global function: the verifier checks it once. */
__noinline int rsched_wakeup_search(struct rsched_task_state *st, __u32 tgid, __u64 cgroup,
				    __u64 comm0, __u64 comm1)
{
	if (!st)
		return -1;
	struct rsched_wakeup *w = &st->wakeup;
	__u16 epoch = (__u16)blame_epoch;

#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_WAKEUP_SLOTS; i++) {
		const __u64 *c = (const __u64 *)w->slot[i].comm;
		if (w->gen[i] && w->tgid[i] == tgid && w->slot[i].cgroup_id == cgroup &&
		    c[0] == comm0 && c[1] == comm1) {
			w->epoch[i] = epoch;
			w->hint = i;
			return (int)i;
		}
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_WAKEUP_SLOTS; i++) {
		if (!w->gen[i] || (__u16)(epoch - w->epoch[i]) >= 3) {
			struct rsched_wakeup_slot *s = &w->slot[i];
			__u16 gen = w->gen[i] + 1;
			w->gen[i] = gen ? gen : 1; /* 0 means never used */
			w->epoch[i] = epoch;
			w->tgid[i] = tgid;
			s->cgroup_id = cgroup;
			((__u64 *)s->comm)[0] = comm0;
			((__u64 *)s->comm)[1] = comm1;
			__builtin_memset(&s->n, 0, sizeof(s->n));
			w->hint = i;
			return (int)i;
		}
	}
	return -1;
}

/* The waker of a sleep ending now, at its sched_waking (in the waker's context): the process
 * this CPU's last switch-in recorded (current_runner: its attribution in force, as its own
 * samples are counted; read from the process only before that), or the context's pseudo-waker.
 * Returns rsched_wakeup.pending's code: its slot + 1, or RSCHED_WAKER_PENDING_PSEUDO | the
 * pseudo-waker (<other> past the slots). */
static __always_inline __u16 wakeup_waker(struct rsched_task_state *st)
{
	struct rsched_wakeup *w = &st->wakeup;
	const struct rsched_runner *cur = current_runner();
	/* A record of another process: the CPU switched to a thread whose switch-in no program saw
	 * (docs/ARCHITECTURE.md): the process itself is read then. */
	if (cur && cur->tgid != (__u32)bpf_get_current_task_btf()->tgid)
		cur = NULL;
	int ctx = waker_context(cur);

	if (ctx >= 0)
		return (__u16)(RSCHED_WAKER_PENDING_PSEUDO | ((__u32)ctx % RSCHED_WAKEUP_PSEUDO));
	__u64 comm[2] = {};
	__u32 tgid;
	__u64 cgroup;
	if (cur) {
		tgid = cur->tgid;
		cgroup = cur->cgroup_id;
		comm[0] = ((const __u64 *)cur->comm)[0];
		comm[1] = ((const __u64 *)cur->comm)[1];
	} else {
		tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
		cgroup = bpf_get_current_cgroup_id();
		bpf_get_current_comm(comm, sizeof(comm));
	}
	__u32 h = w->hint & (RSCHED_WAKEUP_SLOTS - 1);
	int i;
	if (w->gen[h] && w->tgid[h] == tgid && w->slot[h].cgroup_id == cgroup &&
	    comm_eq(w->slot[h].comm, (const char *)comm)) {
		w->epoch[h] = (__u16)blame_epoch;
		i = (int)h;
	} else {
		i = rsched_wakeup_search(st, tgid, cgroup, comm[0], comm[1]);
	}
	if (i < 0)
		return (__u16)(RSCHED_WAKER_PENDING_PSEUDO | RSCHED_WAKER_OTHER);
	return (__u16)(((__u32)i & (RSCHED_WAKEUP_SLOTS - 1)) + 1);
}

/* Charges one sleep of `ns` in state `state` to the waker of code `pending` (wakeup_waker). */
static __always_inline void wakeup_charge(struct rsched_task_state *st, __u16 pending, __u64 ns,
					  __u32 state)
{
	struct rsched_wakeup *w = &st->wakeup;
	struct rsched_wakeup_counts *n;
	__u32 s = state < RSCHED_WAKEUP_STATES ? state : RSCHED_SLEEP_OTHER;

	if (pending & RSCHED_WAKER_PENDING_PSEUDO) {
		__u32 j = pending & 7; /* a bound the verifier keeps (it loses one through %) */
		if (j >= RSCHED_WAKEUP_PSEUDO)
			j = RSCHED_WAKER_OTHER;
		n = &w->pseudo[j];
	} else
		n = &w->slot[(__u32)(pending - 1) & (RSCHED_WAKEUP_SLOTS - 1)].n;
	s &= 3;
	if (s >= RSCHED_WAKEUP_STATES)
		s = RSCHED_SLEEP_OTHER;
	n->sleep_ns[s] += ns;
	n->count[s] += 1;
}

/* A kernel stack's slot (stack map id + 1 `sid1`): as a waker's (rsched_wakeup_search). */
__noinline int rsched_stack_search(struct rsched_task_state *st, __u32 sid1)
{
	if (!st)
		return -1;
	struct rsched_wakeup *w = &st->wakeup;
	__u16 epoch = (__u16)blame_epoch;

#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_WAKEUP_STACKS; i++) {
		if (w->stack_gen[i] && w->stack_id[i] == sid1 - 1) {
			w->stack_epoch[i] = epoch;
			return (int)i;
		}
	}
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_WAKEUP_STACKS; i++) {
		if (!w->stack_gen[i] || (__u16)(epoch - w->stack_epoch[i]) >= 3) {
			__u16 gen = w->stack_gen[i] + 1;
			w->stack_gen[i] = gen ? gen : 1;
			w->stack_epoch[i] = epoch;
			w->stack_id[i] = sid1 - 1;
			w->stack_ns[i] = 0;
			w->stack_count[i] = 0;
			return (int)i;
		}
	}
	return -1;
}

/* Charges a sleep of `ns` to the slot of stack `sid1` (id + 1); false when it has no slot. */
static __always_inline bool stack_add(struct rsched_task_state *st, __u32 sid1, __u64 ns)
{
	int i = sid1 ? rsched_stack_search(st, sid1) : -1;
	if (i < 0)
		return false;
	__u32 k = (__u32)i & (RSCHED_WAKEUP_STACKS - 1);
	st->wakeup.stack_ns[k] += ns;
	st->wakeup.stack_count[k] += 1;
	return true;
}

/* Charges a D sleep of `ns` to the kernel stack it blocked in (off_stack1), or to
 * other_stack when it has none or every slot is taken. */
static __always_inline void stack_charge(struct rsched_task_state *st, __u64 ns)
{
	struct rsched_wakeup *w = &st->wakeup;
	__u32 sid1 = w->off_stack1;

	w->off_stack1 = 0;
	if (!stack_add(st, sid1, ns)) {
		w->other_stack_ns += ns;
		w->other_stack_count += 1;
	}
}

#endif /* RSCHED_WAKEUP_BPF_H */
