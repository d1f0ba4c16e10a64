/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Histogram helpers. Part of rsched.bpf.c, included after its maps; not a standalone header.
 *
 * Holds: add_delay(), which counts a value in a struct rsched_delay_stats (its slot from
 * rsched_hist_slot, and for a thread the slot group's bit in its `used` mask), and add_delay_at()
 * for a slot already known; add_fine_tail(), the scheduling delay's fine slots from 512 us
 * (rsched_hist_fine_slot, whose coarse slot is the delay's latency slot); add_bounded(),
 * the same within a limit (past it, a discard counted in drops); copy_hist(), which copies a
 * histogram into a compact record, reading only the slot groups whose `used` bit is set, and
 * copy_tail(), the same for a fine tail.
 *
 * Expects: OPAQUE() from rsched.bpf.c; count_drop() from state.bpf.h (the drops map).
 */
#ifndef RSCHED_HIST_BPF_H
#define RSCHED_HIST_BPF_H

/* Counts `delta` in `s`, in latency slot `slot` (rsched_hist_slot(delta)). For a thread's
 * histogram, `used` is its state's used mask and `base` the histogram's first bit (enum
 * rsched_used_bit); per-CPU histograms pass NULL. */
static __always_inline void add_delays_at(struct rsched_delay_stats *s, __u64 delta, __u32 slot,
					  __u32 n, __u64 *used, __u32 base)
{
	s->count += n;
	s->total_ns += delta * n;
	OPAQUE(slot);
	if (slot < RSCHED_HIST_SLOTS) {
		s->slots[slot] += n;
		if (used)
			*used |= rsched_used_bit(base, slot);
	}
}

/* add_delays_at for one sample. */
static __always_inline void add_delay_at(struct rsched_delay_stats *s, __u64 delta, __u32 slot,
					 __u64 *used, __u32 base)
{
	add_delays_at(s, delta, slot, 1, used, base);
}

static __always_inline void add_delay(struct rsched_delay_stats *s, __u64 delta, __u64 *used,
				      __u32 base)
{
	add_delay_at(s, delta, rsched_hist_slot(delta), used, base);
}

/* Counts a delay of fine slot `fine` (rsched_hist_fine_slot) in a thread's fine tail (struct
 * rsched_fine_tail) when it is >= 512 us: the samples add_delay counts in latency slots 51..74.
 * Sets the used bit of the slot's group of RSCHED_TAIL_SPAN (its 4 octaves). */
static __always_inline void add_fine_tails(struct rsched_fine_tail *t, __u32 fine, __u32 n,
					   __u64 *used)
{
	__u32 i;
	if (fine <= RSCHED_HIST_LINEAR_SLOTS)
		return;
	i = fine - (RSCHED_HIST_LINEAR_SLOTS + 1);
	OPAQUE(i);
	if (i < RSCHED_HIST_FINE_TAIL_SLOTS) {
		t->slots[i] += n;
		*used |= rsched_tail_bit(i);
	}
}

/* add_fine_tails for one sample. */
static __always_inline void add_fine_tail(struct rsched_fine_tail *t, __u32 fine, __u64 *used)
{
	add_fine_tails(t, fine, 1, used);
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

/* Copies the groups of a fine tail (RSCHED_TAIL_SPAN slots each) whose used bit is set into a
 * record; the others are zero in the state and left unwritten (most threads never wait 8 ms: of
 * the tail's 12 cache lines, a drain then reads two). In 8-byte words, two slots each (the last
 * group's odd slot with the zero pad): `dst` and the tail are 8-byte aligned (sched_abi.h), and
 * a __builtin_memcpy to a char pointer is compiled to single bytes, a load and a store each. */
static __always_inline void copy_tail(char *dst, const struct rsched_fine_tail *src, __u64 used)
{
	__u64 *d = (__u64 *)dst;
	const __u64 *s = (const __u64 *)src->slots;

#pragma unroll
	for (__u32 g = 0;
	     g < (RSCHED_HIST_FINE_TAIL_SLOTS + RSCHED_TAIL_SPAN - 1) / RSCHED_TAIL_SPAN; g++) {
		const __u32 first = g * RSCHED_TAIL_SPAN;
		const __u32 end = first + RSCHED_TAIL_SPAN <= RSCHED_HIST_FINE_TAIL_SLOTS
					  ? first + RSCHED_TAIL_SPAN
					  : RSCHED_HIST_FINE_TAIL_SLOTS;
		if (used & rsched_tail_bit(first)) {
#pragma unroll
			for (__u32 w = first / 2; w < (end + 1) / 2; w++) /* odd end: + the pad */
				d[w] = s[w];
		}
	}
}

#endif /* RSCHED_HIST_BPF_H */
