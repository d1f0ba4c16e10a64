/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The blame group. Part of rsched.bpf.c, included after its maps; not a standalone header.
 *
 * Holds both halves of blame:
 *  - attribution, at a thread's switch-in: its slot per culprit (rsched_blame_search,
 *    blame_slot), the charge of a part of a wait to a runner (blame_add, rsched_blame_add), the
 *    walk back over a CPU's ring of runners and then its epochs (rsched_blame_walk, with
 *    rsched_blame_epoch and the bpf_loop callbacks blame_step and blame_epoch_step), a whole
 *    wait with its parts before migrations (blame_wait), and preemptions (blame_preempt);
 *  - recording, at every switch: each CPU's ring of recent runners (push_runner, push_next) and
 *    its epochs, which sum the runs the ring no longer holds (rsched_epoch_add,
 *    rsched_epoch_fill, epoch_turn).
 * The global __noinline functions are checked once by the verifier, not at every caller.
 *
 * Expects, from rsched.bpf.c: the types struct rsched_runner, rsched_epoch, rsched_runners and
 * rsched_epoch_level, the maps runners and epochs, and the global blame_epoch; from task.bpf.h:
 * READ(), cgroup_of(), comm_of(), comm_eq(), task_rq_of() and rq_waiters().
 */
#ifndef RSCHED_BLAME_BPF_H
#define RSCHED_BLAME_BPF_H

/* Blame: a culprit's slot in the thread's blame. Its own slot if it has one; else a slot never
 * used or not updated for three reads (its counts have been read), which takes the culprit on
 * (`gen` moves on, the counts restart from 0); else a slot of its comm and cgroup, which then
 * holds the comm's processes together (tgid 0); else -1: <other>. */
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
		if (!b->gen[i] || (__u16)(epoch - b->epoch[i]) >= RSCHED_BLAME_STALE_EPOCHS) {
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
	/* Every slot taken: a slot of the culprit's comm and cgroup (another process of the same
	 * program: a pool of workers, a build's compilers) takes it on and names them together
	 * (tgid 0: the comm alone, never a process; the idle task is charged apart). Its counts
	 * go on: what user space reads since its last read is the comm's. Else <other>. */
#pragma clang loop unroll(disable)
	for (__u32 i = 0; i < RSCHED_BLAME_SLOTS; i++) {
		const __u64 *c = (const __u64 *)b->slot[i].comm;
		if (b->slot[i].cgroup_id == cgroup && c[0] == comm0 && c[1] == comm1) {
			b->tgid[i] = 0;
			b->epoch[i] = epoch;
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

/* Whether runner `tid` of process `tgid` running as (`cgroup`, `comm`) is the culprit of this
 * CPU's newest entry: consecutive runners of one culprit (threads of a process under one comm
 * and cgroup) share an entry, so that a wait behind a thousand short threads of one process is
 * one piece and the ring reaches back further. */
static __always_inline bool runs_on(struct rsched_runners *r, __u32 tid, __u32 tgid, __u64 cgroup,
				    const char *comm)
{
	struct rsched_runner *last = &r->ring[(r->head - 1) & (RSCHED_BLAME_RING - 1)];
	return tid && last->ts && last->tid && last->tgid == tgid && last->cgroup_id == cgroup &&
	       comm_eq(last->comm, comm);
}

/* Whether the next entry opens an epoch: every RSCHED_BLAME_EPOCH_RUNS entries one closes. */
static __always_inline bool turns_epoch(struct rsched_runners *r)
{
	return r->head % RSCHED_BLAME_EPOCH_RUNS == 0;
}

/* Closes the open epoch at `ts`, `waiting` threads waiting on this CPU now (besides the one
 * switched in). Its entries are summed into its record then, in one loop (cheaper than an add at
 * every switch: the ring and the record stay in cache), but only when a wait that went on
 * through the whole closing epoch can ever need it (an older one ended inside it, a newer one
 * began inside it): a thread waiting at its start still waits (r->waiters) and one waits now. */
static __always_inline void turn_epoch(struct rsched_runners *r, __u64 ts, __u32 waiting)
{
	__u64 h = r->head;
	epoch_turn(r, h ? (h - 1) / RSCHED_BLAME_EPOCH_RUNS : ~0ULL, ts, waiting && r->waiters);
	r->waiters = waiting; /* those waiting as the next epoch begins */
}

/* Writes the newest entry: this CPU's runner from `ts` on. */
static __always_inline void write_runner(struct rsched_runners *r, __u64 ts, __u32 tid, __u32 tgid,
					 __u64 cgroup, const char *comm, __u8 policy, __u8 prio1)
{
	__u64 h = r->head;
	struct rsched_runner *e = &r->ring[h & (RSCHED_BLAME_RING - 1)];
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
	copy_comm(e->comm, comm);
	e->policy = policy;
	e->prio1 = prio1;
	r->head = h + 1;
}

/* Records this CPU's runner from `ts` on: the idle task (tid 0), or thread `tid` of process
 * `tgid` running as (`cgroup`, `comm`), unless the same culprit runs on (runs_on). The threads
 * waiting on the CPU are read (from the runqueue of `t`, on it) only when an epoch turns. */
static __always_inline void push_runner(__u64 ts, __u32 tid, __u32 tgid, __u64 cgroup,
					const char *comm, __u8 policy, __u8 prio1,
					struct task_struct *t, bool btf, struct rsched_runners *r)
{
	if (!r || runs_on(r, tid, tgid, cgroup, comm))
		return;
	if (turns_epoch(r))
		turn_epoch(r, ts, rq_waiters(task_rq_of(t, btf), btf));
	write_runner(r, ts, tid, tgid, cgroup, comm, policy, prio1);
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

#endif /* RSCHED_BLAME_BPF_H */
