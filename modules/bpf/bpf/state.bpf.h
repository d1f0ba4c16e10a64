/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-thread state. Part of rsched.bpf.c, included after its maps; not a standalone header.
 *
 * Holds: count_drop(); state_of(), a thread's cumulative state in either mode (task-local storage
 * in tp_btf, the tid-keyed hash in raw_tp; created on demand, a stale tid's entry buried first);
 * the attribution (comm, cgroup) a new state takes and an ident carries (init_attr, fill_attr);
 * a thread's final record into the graveyard (bury, task_dead).
 *
 * Expects, from rsched.bpf.c: the maps drops, task_state, task_hash, graveyard, zero_record and
 * scratch, and the global buried; from task.bpf.h: READ(), cgroup_of(), comm_of(), fill_key();
 * from dirty.bpf.h (declared here): write_record().
 */
#ifndef RSCHED_STATE_BPF_H
#define RSCHED_STATE_BPF_H

static __always_inline void count_drops(__u32 id, __u64 n)
{
	__u32 zero = 0;
	struct rsched_drop_stats *d = bpf_map_lookup_elem(&drops, &zero);
	if (d && id < RSCHED_DROP_COUNT)
		__sync_fetch_and_add(&d->counters[id], n);
}

static __always_inline void count_drop(__u32 id) { count_drops(id, 1); }

/* The attribution in force (comm, cgroup) and the number of attributions closed before it. */
static __always_inline void fill_attr(struct rsched_task_ident *id, struct rsched_task_state *st)
{
	id->cgroup_id = st->cgroup_id;
	copy_comm(id->comm, st->comm);
	id->seg = st->seg;
}

/* A new state starts at the kernel's count of waits of the moment (k_pcount, k_delay; with
 * sched_info_live): what came before is not this recording's. */
static __always_inline void ledger_init(struct rsched_task_state *st, struct task_struct *t,
					bool btf)
{
	if (!sched_info_live || !bpf_core_field_exists(t->sched_info))
		return;
	st->k_pcount = (__u32)READ(btf, t, sched_info.pcount);
	st->k_delay = kernel_delay_units(t, btf);
}

/* The wakeup group's I/O counts of `t` (sched_abi.h, rsched_wakeup.io_*): its task->ioac now. */
static __always_inline __u64 io_read_of(struct task_struct *t, bool btf)
{
	return bpf_core_field_exists(t->ioac) ? READ(btf, t, ioac.read_bytes) : 0;
}

static __always_inline __u64 io_write_of(struct task_struct *t, bool btf)
{
	return bpf_core_field_exists(t->ioac) ? READ(btf, t, ioac.write_bytes) : 0;
}

/* Brings the thread's I/O counts up to date in its state (the iterator's copy, raw_tp). */
static __always_inline void note_io(struct rsched_task_state *st, struct task_struct *t, bool btf)
{
	if (!ON(RSCHED_G_WAKEUP))
		return;
	st->wakeup.io_read_bytes = io_read_of(t, btf) - st->wakeup.io_base_read;
	st->wakeup.io_write_bytes = io_write_of(t, btf) - st->wakeup.io_base_write;
}

/* Takes the attribution of a new state from its task (and its ledger_init). */
static __always_inline void init_attr(struct rsched_task_state *st, struct task_struct *t, bool btf)
{
	st->cgroup_id = cgroup_of(t, btf);
	comm_of(st->comm, t, btf);
	ledger_init(st, t, btf);
	if (ON(RSCHED_G_WAKEUP)) { /* its I/O before rsched took it on is not counted */
		st->wakeup.io_base_read = io_read_of(t, btf);
		st->wakeup.io_base_write = io_write_of(t, btf);
	}
}

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

static __always_inline void write_record(char *out, struct task_struct *t,
					 struct rsched_task_state *st, bool live); /* dirty.bpf.h */

/* The thread `t` made its final switch: bury its cumulative record. In tp_btf mode that is the
 * compact record (sched_abi.h), as the drain writes it: only the parts the run's groups fill and
 * the histogram groups the thread used are read from its state, and the graveyard's values are
 * that size. A whole 6.9 KB state copied twice per exit (in and out of the scratch record) was
 * most of what a short-lived thread cost (bench/bpf_cost.py, stress-ng --sleep). */
static __always_inline void task_dead(struct task_struct *t, struct rsched_task_state *st, bool btf)
{
	struct rsched_task_record *scr;
	__u32 zero = 0, tid;

	if (btf) {
		scr = bpf_map_lookup_elem(&scratch, &zero);
		if (!scr)
			return;
		write_record((char *)scr, t, st, false);
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

#endif /* RSCHED_STATE_BPF_H */
