/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The dirty list and the compact record. Part of rsched.bpf.c, included after its maps; not a
 * standalone header.
 *
 * Holds: mark_dirty(), called on every counter change (tp_btf with the dirty list: a thread's
 * first change in a read epoch appends a task reference to that epoch's list; else it sets the
 * iterator's `dirty` flag); write_record(), a thread's compact record (sched_abi.h) as the drain
 * and the segment records carry it; the bpf_loop callbacks of the dirty_drain program,
 * drain_one() and release_one(), and their struct drain_ctx.
 *
 * Expects, from rsched.bpf.c: the rodata dirty_list, dirty_cap and groups (ON()); the maps
 * dirty_tasks (struct dirty_entry), drain_out and task_state; the globals blame_epoch, dirty_epoch,
 * dirty_n, drain_sel and drain_epoch (dirty_flip sets the last two). From state.bpf.h: fill_attr();
 * from hist.bpf.h: copy_hist().
 */
#ifndef RSCHED_DIRTY_BPF_H
#define RSCHED_DIRTY_BPF_H

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

struct drain_ctx {
	__u32 base;    /* first list index of this run */
	__u32 emitted; /* records written to drain_out */
};

/* Copies a thread's blame into a record: the arrays before the slots and the fields after them
 * whole, and of the 16 culprit slots (56 bytes each) only those a reader takes: a slot that
 * took a culprit (gen != 0) and, in a `live` record, was updated in one of the last three read
 * epochs (collect's blame_from skips the others: their counts were read before; it judges by
 * the record's own epoch array, which is copied first, so both sides decide on the same value).
 * Final and segment records (read with no epoch) take every slot in use. A busy thread's stale
 * slots are most of its 1.2 KB of blame, read from cold memory at every drain otherwise. */
static __always_inline void copy_blame(char *dst, const struct rsched_blame *src, bool live)
{
	const __u32 head = __builtin_offsetof(struct rsched_blame, slot);
	const __u32 after = __builtin_offsetof(struct rsched_blame, idle_ns);
	struct rsched_blame *b = (struct rsched_blame *)dst;
	__u16 now = (__u16)blame_epoch;

	/* In 8-byte words (a memcpy to a char pointer would copy single bytes): both parts are
	 * whole words (sched_abi.h). */
#pragma unroll
	for (__u32 w = 0; w < head / 8; w++)
		((__u64 *)dst)[w] = ((const __u64 *)src)[w];
#pragma unroll
	for (__u32 w = after / 8; w < sizeof(*src) / 8; w++)
		((__u64 *)dst)[w] = ((const __u64 *)src)[w];
#pragma unroll
	for (__u32 i = 0; i < RSCHED_BLAME_SLOTS; i++) {
		if (b->gen[i] && (!live || (__u16)(now - b->epoch[i]) < RSCHED_BLAME_STALE_EPOCHS))
			__builtin_memcpy(&b->slot[i], &src->slot[i], sizeof(src->slot[i]));
	}
}

/* Writes the compact record of `t` (sched_abi.h) into `out` (a drain_out value, a segment record
 * or the scratch record of a final one); `live` for the drain's records (see copy_blame).
 * Offsets are constants for the verifier: `groups` is frozen rodata. */
static __always_inline void write_record(char *out, struct task_struct *t,
					 struct rsched_task_state *st, bool live)
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
		/* the fine tail's groups of 4 octaves that a delay reached (from 512 us) */
		copy_tail(out + off, &st->delay_tail, used);
		off += sizeof(st->delay_tail);
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
		copy_blame(out + off, &st->blame, live);
		off += RSCHED_ITER_BLAME_BYTES;
	}
	if (ON(RSCHED_G_WAKEUP)) {
		__u64 *b = (__u64 *)(out + off);
		const __u64 *src = (const __u64 *)&st->wakeup;
#pragma unroll
		for (int i = 0; i < RSCHED_ITER_WAKEUP_BYTES / 8; i++)
			b[i] = src[i];
		/* its I/O now (the state keeps only the counts it was taken on with) */
		struct rsched_wakeup *w = (struct rsched_wakeup *)b;
		w->io_read_bytes = io_read_of(t, true) - st->wakeup.io_base_read;
		w->io_write_bytes = io_write_of(t, true) - st->wakeup.io_base_write;
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
			write_record(out, t, st, true);
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

#endif /* RSCHED_DIRTY_BPF_H */
