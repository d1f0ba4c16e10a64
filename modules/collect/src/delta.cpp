#include "rsched/collect/delta.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <tuple>

namespace rsched::collect {

namespace {
std::uint64_t sub(std::uint64_t cur, std::uint64_t prev) {
  return cur >= prev ? cur - prev : cur;
}

// One kernel metric's value from its stats struct at `at` (count, total, then the layout's
// slots; the ABI's rsched_delay_stats and rsched_depth_stats both have this shape), written
// into position i of `out` only when it holds something (an untouched metric takes no memory).
template <metrics::scope S>
void fill(metrics::set<S> &out, std::size_t i, const char *at, stats::layout l) {
  const std::size_t slots = stats::slot_count(l);
  std::uint64_t head[2];
  std::memcpy(head, at, sizeof(head));
  if (head[0] == 0 && head[1] == 0) {
    bool any = false;
    for (std::size_t s = 0; s < slots && !any; ++s) {
      std::uint64_t x = 0;
      std::memcpy(&x, at + sizeof(head) + s * sizeof(x), sizeof(x));
      any = x != 0;
    }
    if (!any) {
      out.reset(i);
      return;
    }
  }
  metrics::value &v = out.at(i);
  v.count = head[0];
  v.total = head[1];
  v.hist.kind = l;
  std::memcpy(v.hist.slots.data(), at + sizeof(head), slots * sizeof(std::uint64_t));
  std::fill(v.hist.slots.begin() + static_cast<std::ptrdiff_t>(slots), v.hist.slots.end(), 0);
  v.spans = metrics::all_spans;
}

template <metrics::scope S, typename State>
void fill_kernel(metrics::set<S> &out, const State &st) {
  const auto *base = reinterpret_cast<const char *>(&st);
  constexpr auto defs = metrics::entries<S>();
  for (std::size_t i = 0; i < defs.size(); ++i) {
    if (defs[i].from == metrics::origin::kernel) {
      fill(out, i, base + defs[i].offset, defs[i].layout);
    }
  }
}
} // namespace

void fill_tail(metrics::thread_set &m, const rsched_fine_tail &tail, bool used) {
  constexpr auto delay = static_cast<std::size_t>(metrics::id::sched_delay);
  if (!used || !m.has(delay)) {
    return;
  }
  metrics::value &v = m.at(delay);
  if (!v.tail) {
    v.tail = base::make_cached<metrics::fine_tail>();
  }
  static_assert(sizeof(v.tail->slots) == sizeof(tail.slots));
  std::memcpy(v.tail->slots.data(), tail.slots, sizeof(tail.slots));
}

void from_abi(const rsched_cpu_stats &s, metrics::cpu_set &out) {
  fill_kernel(out, s);
}

void from_abi(const rsched_task_record &r, thread_sample &t, std::uint32_t blame_epoch) {
  t.key = {r.id.tid, r.id.start_time};
  t.tgid = r.id.tgid;
  t.cgroup_id = r.id.cgroup_id;
  std::size_t n = 0;
  while (n < sizeof(r.id.comm) && r.id.comm[n] != '\0') {
    ++n;
  }
  t.comm.assign(r.id.comm, n);
  t.dead = (r.id.flags & RSCHED_TASK_DEAD) != 0;
  t.segment = (r.id.flags & RSCHED_TASK_SEGMENT) != 0;
  t.seg = r.id.seg;
  fill_kernel(t.c.m, r.st);
  fill_tail(t.c.m, r.st.delay_tail, (r.st.used & RSCHED_USED_TAIL_MASK) != 0);
  t.c.migrations = {r.st.migrations, r.st.cross_ccx, r.st.cross_numa};
  for (std::size_t i = 0; i < t.c.counters.size(); ++i) {
    t.c.counters[i] = r.st.counters[i];
  }
  from_abi(r.st.blame, t.c.blame, blame_epoch);
  from_abi(r.st.wakeup, t.c.wakeup);
}

void from_abi(const rsched_wakeup &w, wakeup_state &out) {
  out.e.clear();
  for (std::uint32_t i = 0; i < RSCHED_WAKEUP_SLOTS; ++i) {
    if (w.gen[i] == 0) {
      continue;
    }
    wakeup_entry &x = out.e.emplace_back();
    x.index = i;
    x.gen = w.gen[i];
    x.who.tgid = w.tgid[i];
    x.who.cgroup_id = w.slot[i].cgroup_id;
    std::memcpy(x.who.comm.data(), w.slot[i].comm, x.who.comm.size());
    for (std::size_t s = 0; s < RSCHED_WAKEUP_STATES; ++s) {
      x.n.sleep_ns[s] = w.slot[i].n.sleep_ns[s];
      x.n.count[s] = w.slot[i].n.count[s];
    }
  }
  for (std::uint32_t j = 0; j < RSCHED_WAKEUP_PSEUDO; ++j) {
    wakeup_entry x;
    x.index = RSCHED_WAKEUP_SLOTS + j;
    x.who.kind = static_cast<std::uint8_t>(1 + j);
    for (std::size_t s = 0; s < RSCHED_WAKEUP_STATES; ++s) {
      x.n.sleep_ns[s] = w.pseudo[j].sleep_ns[s];
      x.n.count[s] = w.pseudo[j].count[s];
    }
    if (!x.n.empty()) {
      out.e.push_back(x);
    }
  }
  out.stacks.clear();
  for (std::uint32_t i = 0; i < RSCHED_WAKEUP_STACKS; ++i) {
    if (w.stack_gen[i] != 0) {
      out.stacks.push_back({i, w.stack_gen[i], w.stack_id[i], w.stack_ns[i], w.stack_count[i]});
    }
  }
  if (w.other_stack_count != 0 || w.other_stack_ns != 0) {
    out.stacks.push_back(
        {RSCHED_WAKEUP_STACKS, 0, other_stack, w.other_stack_ns, w.other_stack_count});
  }
  out.io_read_bytes = w.io_read_bytes;
  out.io_write_bytes = w.io_write_bytes;
}

namespace {
// from_abi(rsched_blame) over `b`'s fields other than its slots, and `slot_at(i)`, which gives
// slot i's (read only for the slots copied).
template <typename SlotAt>
void blame_from(const rsched_blame &b, SlotAt &&slot_at, blame_state &out, std::uint32_t epoch) {
  // A slot that never took a culprit has gen 0 (the kernel skips 0). With an epoch, a slot the
  // kernel last updated three or more epochs ago is stale: the kernel's own rule for giving a
  // slot away (its counts were read), one epoch safer than "read by the previous read".
  std::uint16_t stale = 0;
  bool used = false;
  for (std::size_t i = 0; i < out.slots.size(); ++i) {
    if (b.gen[i] == 0) {
      continue;
    }
    if (epoch != 0 && static_cast<std::uint16_t>(static_cast<std::uint16_t>(epoch) - b.epoch[i]) >=
                          RSCHED_BLAME_STALE_EPOCHS) {
      stale = static_cast<std::uint16_t>(stale | (1U << i));
    } else {
      used = true;
    }
  }
  out.stale = stale;
  // A new array (all empty) for the slots in use; unused and stale slots stay empty.
  out.slots = {};
  for (std::size_t i = 0; used && i < out.slots.size(); ++i) {
    if (b.gen[i] == 0 || (static_cast<unsigned>(stale) >> i & 1U) != 0) {
      continue;
    }
    const rsched_blame_slot k = slot_at(i);
    blame_slot &s = out.slots[i];
    s.gen = b.gen[i];
    s.who.tgid = b.tgid[i];
    s.who.cgroup_id = k.cgroup_id;
    std::memcpy(s.who.comm.data(), k.comm, s.who.comm.size());
    s.n = {k.wait_ns, k.waits, k.preempts, k.approx_ns};
    s.cpu = b.cpu[i];
    s.prio = {b.policy[i], b.prio1[i]};
  }
  out.idle = {b.idle_ns, b.idle_waits, b.idle_preempts, b.idle_approx_ns};
  out.unknown = {b.unknown_ns, b.unknown_waits, 0, 0};
  out.other = {b.other_ns, b.other_waits, b.other_preempts, b.other_approx_ns};
  out.waiter = {b.waiter_policy, b.waiter_prio1};
}
} // namespace

void from_abi(const rsched_blame &b, blame_state &out, std::uint32_t epoch) {
  blame_from(
      b, [&b](std::size_t i) { return b.slot[i]; }, out, epoch);
}

void blame_from_record(const char *at, blame_state &out, std::uint32_t epoch) {
  // The fields before the slots and after them; a slot's 56 bytes only when it is copied (most
  // of a busy thread's 16 slots are stale: its 896 bytes are not read).
  constexpr std::size_t head = offsetof(rsched_blame, slot);
  constexpr std::size_t tail = offsetof(rsched_blame, idle_ns);
  static_assert(tail == head + sizeof(rsched_blame::slot));
  rsched_blame b; // slots not filled: blame_from reads them through slot_at
  std::memcpy(&b, at, head);
  std::memcpy(reinterpret_cast<char *>(&b) + tail, at + tail, sizeof(rsched_blame) - tail);
  blame_from(
      b,
      [at](std::size_t i) {
        rsched_blame_slot k;
        std::memcpy(&k, at + head + i * sizeof(rsched_blame_slot), sizeof(k));
        return k;
      },
      out, epoch);
}

thread_sample from_abi(const rsched_task_record &r) {
  thread_sample t;
  from_abi(r, t);
  return t;
}

namespace {
using metrics::delta_into;

// d = cur - prev, metric by metric; a metric without new samples stays unwritten in d (a value
// that went down restarts from `cur`, and an unwritten `cur` is zero: nothing to keep).
template <metrics::scope S>
void delta_into(metrics::set<S> &d, const metrics::set<S> &cur, const metrics::set<S> &prev) {
  for (std::size_t i = 0; i < metrics::set<S>::n; ++i) {
    if (!cur.has(i)) {
      d.reset(i);
      continue;
    }
    metrics::value &v = d.at(i);
    delta_into(v, cur.at(i), prev.at(i));
    if (v.empty() && v.total == 0) {
      d.reset(i);
    }
  }
}
} // namespace

namespace {
blame_counts sub(const blame_counts &cur, const blame_counts &prev) {
  return {sub(cur.wait_ns, prev.wait_ns), sub(cur.waits, prev.waits),
          sub(cur.preempts, prev.preempts), sub(cur.approx_ns, prev.approx_ns)};
}
} // namespace

blame_state delta(const blame_state &cur, const blame_state &prev) {
  blame_state d;
  // Only slots with new counts are written (d's slots stay unallocated when none has).
  // A slot stale in `cur` counts nothing new; one stale in `prev` (a baseline that never read
  // it) has an unknown start: its counts are skipped once and read again next time.
  // Slots cur never wrote are empty in cur: nothing new there.
  const unsigned skip = static_cast<unsigned>(cur.stale | prev.stale);
  cur.for_each_live(~skip, [&](std::size_t i) {
    const blame_slot &c = cur.slots[i];
    const blame_slot &p = prev.slots[i];
    // A slot that took a new culprit since the previous read restarted from 0.
    const blame_counts n = c.gen == p.gen ? sub(c.n, p.n) : c.n;
    if (!n.empty()) {
      d.slots[i] = {c.gen, c.who, n, c.cpu, c.prio};
    }
  });
  d.waiter = cur.waiter;
  d.idle = sub(cur.idle, prev.idle);
  d.unknown = sub(cur.unknown, prev.unknown);
  d.other = sub(cur.other, prev.other);
  return d;
}

wakeup_state delta(const wakeup_state &cur, const wakeup_state &prev) {
  wakeup_state d;
  for (const auto &c : cur.e) {
    const wakeup_entry *p = nullptr;
    for (const auto &x : prev.e) {
      if (x.index == c.index) {
        p = &x;
        break;
      }
    }
    // A slot that took a new waker since the previous read restarted from 0.
    wakeup_counts n = c.n;
    if (p != nullptr && p->gen == c.gen && p->who == c.who) {
      for (std::size_t s = 0; s < n.count.size(); ++s) {
        n.sleep_ns[s] = sub(c.n.sleep_ns[s], p->n.sleep_ns[s]);
        n.count[s] = sub(c.n.count[s], p->n.count[s]);
      }
    }
    if (!n.empty()) {
      d.e.push_back({c.index, c.gen, c.who, n});
    }
  }
  for (const auto &c : cur.stacks) {
    const auto p = std::find_if(prev.stacks.begin(), prev.stacks.end(), [&](const auto &x) {
      return x.index == c.index && x.gen == c.gen && x.stack == c.stack;
    });
    blocked_entry n = c;
    if (p != prev.stacks.end()) {
      n.sleep_ns = sub(c.sleep_ns, p->sleep_ns);
      n.count = sub(c.count, p->count);
    }
    if (n.sleep_ns != 0 || n.count != 0) {
      d.stacks.push_back(n);
    }
  }
  d.io_read_bytes = sub(cur.io_read_bytes, prev.io_read_bytes);
  d.io_write_bytes = sub(cur.io_write_bytes, prev.io_write_bytes);
  return d;
}

void accumulate(wakeup_state &into, const wakeup_state &d) {
  for (const auto &x : d.e) {
    auto it = std::find_if(into.e.begin(), into.e.end(),
                           [&](const wakeup_entry &y) { return y.who == x.who; });
    if (it == into.e.end()) {
      into.e.push_back(x);
    } else {
      it->n += x.n;
    }
  }
  for (const auto &x : d.stacks) {
    auto it = std::find_if(into.stacks.begin(), into.stacks.end(),
                           [&](const blocked_entry &y) { return y.stack == x.stack; });
    if (it == into.stacks.end()) {
      into.stacks.push_back(x);
    } else {
      it->sleep_ns += x.sleep_ns;
      it->count += x.count;
    }
  }
  into.io_read_bytes += d.io_read_bytes;
  into.io_write_bytes += d.io_write_bytes;
}

void accumulate(blame_state &into, const blame_state &d) {
  d.for_each_live(~0U, [&](std::size_t k) {
    const blame_slot &s = d.slots[k];
    if (s.n.empty()) {
      return;
    }
    std::size_t free = blame_slots::size();
    std::size_t same = blame_slots::size();
    for (std::size_t i = 0; i < blame_slots::size(); ++i) {
      const blame_slot &t = std::as_const(into.slots)[i];
      if (!t.n.empty() && t.who == s.who) {
        same = i;
        break;
      }
      if (free == blame_slots::size() && t.n.empty()) {
        free = i;
      }
    }
    if (same != blame_slots::size()) {
      blame_slot &t = into.slots[same];
      t.n += s.n;
      t.cpu = s.cpu; // the later tick's
      t.prio = s.prio;
    } else if (free != blame_slots::size()) {
      into.slots[free] = s;
    } else {
      into.other += s.n;
    }
  });
  into.idle += d.idle;
  into.unknown += d.unknown;
  into.other += d.other;
  if (d.waiter.known()) {
    into.waiter = d.waiter; // the later tick's
  }
}

namespace {
// Everything but the histograms: d = cur - prev for the migration tallies, the perf counters
// and the blame.
void delta_rest(thread_counters &d, const thread_counters &cur, const thread_counters &prev) {
  d.migrations = {sub(cur.migrations.count, prev.migrations.count),
                  sub(cur.migrations.cross_ccx, prev.migrations.cross_ccx),
                  sub(cur.migrations.cross_numa, prev.migrations.cross_numa)};
  for (std::size_t i = 0; i < d.counters.size(); ++i) {
    d.counters[i] = sub(cur.counters[i], prev.counters[i]);
  }
  d.blame = delta(cur.blame, prev.blame);
  d.wakeup = delta(cur.wakeup, prev.wakeup);
}

// d = cur - prev, written in place (no 3.6 KB temporary per thread).
void delta_into(thread_counters &d, const thread_counters &cur, const thread_counters &prev) {
  delta_into(d.m, cur.m, prev.m);
  delta_rest(d, cur, prev);
}
} // namespace

thread_counters delta(const thread_counters &cur, const thread_counters &prev) {
  thread_counters d;
  delta_into(d, cur, prev);
  return d;
}

void accumulate(thread_counters &into, const thread_counters &d) {
  metrics::accumulate(into.m, d.m);
  into.migrations.count += d.migrations.count;
  into.migrations.cross_ccx += d.migrations.cross_ccx;
  into.migrations.cross_numa += d.migrations.cross_numa;
  for (std::size_t i = 0; i < into.counters.size(); ++i) {
    into.counters[i] += d.counters[i];
  }
  accumulate(into.blame, d.blame);
  accumulate(into.wakeup, d.wakeup);
}

namespace {
// The baseline's blame after a live read `cur`: the read's, except the slots it left out as
// stale, which keep the baseline's values. A new baseline (`fresh`) never read them: they stay
// marked stale (unknown) until a read copies them.
void rebase_blame(blame_state &base, blame_state &&cur, bool fresh) {
  const std::uint16_t stale = cur.stale;
  if (stale == 0) {
    base = std::move(cur);
    return;
  }
  const std::uint16_t unknown = fresh ? stale : static_cast<std::uint16_t>(base.stale & stale);
  blame_slots kept = std::move(base.slots);
  blame_slots read = std::move(cur.slots);
  base = std::move(cur);
  // The slots this read copied replace the baseline's. When it copied none, every slot it did
  // not leave out is unused (gen 0) here and in the baseline alike. A slot the read did not
  // write is empty (unused): so is the baseline's.
  for (std::size_t i = 0; read.allocated() && i < blame_slots::size(); ++i) {
    if ((static_cast<unsigned>(stale) >> i & 1U) != 0) {
      continue;
    }
    if ((static_cast<unsigned>(read.live()) >> i & 1U) != 0) {
      kept[i] = std::as_const(read)[i];
    } else {
      kept.clear(i);
    }
  }
  base.slots = std::move(kept);
  base.stale = unknown;
}

// The baseline after a live read `cur`, but for the histograms: its tallies and counters, the
// blame as rebase_blame says.
void rebase_rest(thread_counters &base, thread_counters &&cur, bool fresh) {
  base.migrations = cur.migrations;
  base.counters = cur.counters;
  rebase_blame(base.blame, std::move(cur.blame), fresh);
  base.wakeup = std::move(cur.wakeup);
}

// The baseline after a live read `cur`.
void rebase(thread_counters &base, thread_counters &&cur, bool fresh) {
  base.m = std::move(cur.m);
  rebase_rest(base, std::move(cur), fresh);
}

// delta_into(d, cur, base) then rebase(base, cur), without a copy of either: each histogram's
// delta is written over the baseline's old value, whose block then passes to d, and cur's block
// becomes the baseline. At 10,000 threads this is every live read's work; the blocks of the
// two copies a thread's values take change hands instead of being allocated and filled.
void delta_rebase(thread_counters &d, thread_counters &base, thread_counters &&cur, bool fresh) {
  for (std::size_t i = 0; i < metrics::thread_set::n; ++i) {
    if (!cur.m.has(i)) {
      base.m.reset(i); // unwritten in cur: zero; no delta
      continue;
    }
    if (base.m.has(i)) {
      metrics::value &p = base.m.at(i);
      delta_into(p, std::as_const(cur.m).at(i), p);
      d.m.swap_at(i, base.m);
    } else {
      d.m.at(i) = std::as_const(cur.m).at(i); // from zero
    }
    if (const metrics::value &v = std::as_const(d.m).at(i); v.empty() && v.total == 0) {
      d.m.reset(i);
    }
    base.m.swap_at(i, cur.m);
  }
  delta_rest(d, cur, base);
  rebase_rest(base, std::move(cur), fresh);
}

// Merges the rows of one thread and attribution (a rename A -> B -> A within one read). Rare:
// only reads that applied a segment come here.
void merge_rows(std::vector<thread_sample> &rows) {
  std::map<std::tuple<thread_key, std::uint64_t, std::string>, std::size_t> first;
  std::vector<thread_sample> kept;
  kept.reserve(rows.size());
  for (auto &r : rows) {
    auto [it, fresh] = first.try_emplace({r.key, r.cgroup_id, r.comm}, kept.size());
    if (fresh) {
      kept.push_back(std::move(r));
    } else {
      thread_sample &k = kept[it->second];
      accumulate(k.c, r.c);
      k.dead = k.dead || r.dead;
    }
  }
  rows = std::move(kept);
}
} // namespace

interval_delta delta_tracker::advance(snapshot &&snap) {
  interval_delta out;
  out.threads.reserve(snap.live.size() + snap.dead.size() + snap.segments.size());
  ++generation_;
  // The delta of `t` against `base` (zero for a new thread) becomes the next output row, kept
  // only when it holds new samples.
  const auto emit = [&out](const thread_sample &t, const thread_counters &base) {
    thread_sample &d = out.threads.emplace_back();
    d.key = t.key;
    d.tgid = t.tgid;
    d.cgroup_id = t.cgroup_id;
    d.comm = t.comm;
    d.dead = t.dead;
    delta_into(d.c, t.c, base);
    if (d.c.empty()) {
      out.threads.pop_back();
    }
  };
  static const thread_counters zero{};
  // emit(t, base) and rebase(base, t), the delta written over the old baseline's values.
  const auto emit_rebase = [&out](thread_sample &t, thread_counters &base, bool fresh) {
    thread_sample &d = out.threads.emplace_back();
    d.key = t.key;
    d.tgid = t.tgid;
    d.cgroup_id = t.cgroup_id;
    d.comm = t.comm;
    d.dead = t.dead;
    delta_rebase(d.c, base, std::move(t.c), fresh);
    if (d.c.empty()) {
      out.threads.pop_back();
    }
  };

  for (const auto &s : snap.segments) {
    waiting_[s.key].segs.push_back(s);
  }
  bool split = false; // some delta was split by a segment: rows may need merging
  // Emits the row(s) of record `t` against `base`: first the segments it counts (seg <= t.seg),
  // each against the one before, then the record against the last of them.
  const auto emit_split = [&](const thread_sample &t, const thread_counters &base) {
    auto w = waiting_.empty() ? waiting_.end() : waiting_.find(t.key);
    if (w == waiting_.end()) {
      emit(t, base);
      return;
    }
    auto &segs = w->second.segs;
    std::stable_sort(segs.begin(), segs.end(),
                     [](const thread_sample &a, const thread_sample &b) { return a.seg < b.seg; });
    const thread_counters *from = &base;
    std::size_t used = 0;
    for (; used < segs.size() && segs[used].seg <= t.seg; ++used) {
      emit(segs[used], *from);
      from = &segs[used].c;
      split = true;
    }
    emit(t, *from);
    segs.erase(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(used));
    if (segs.empty()) {
      waiting_.erase(w);
    }
  };

  // Final records first: a thread can appear dead and (briefly) still be listed as live.
  std::set<thread_key> buried;
  for (const auto &t : snap.dead) {
    auto it = prev_threads_.find(t.key);
    emit_split(t, it == prev_threads_.end() ? zero : it->second.c);
    if (it != prev_threads_.end()) {
      prev_threads_.erase(it);
    }
    waiting_.erase(t.key); // nothing after a final record
    buried.insert(t.key);
  }

  // Baselines are updated in place: no per-read copy of the whole table. Their look-ups first,
  // all of them (independent of each other, so the CPU overlaps their cache misses), then the
  // deltas, each baseline's values fetched a few threads ahead.
  struct found {
    baseline *b;
    bool fresh;
  };
  std::vector<found> bases(snap.live.size(), found{nullptr, false});
  for (std::size_t k = 0; k < snap.live.size(); ++k) {
    const thread_key &key = snap.live[k].key;
    if (!buried.empty() && buried.contains(key)) {
      continue;
    }
    auto [it, fresh] = prev_threads_.try_emplace(key); // a new baseline is all zero
    bases[k] = {&it->second, fresh};
  }
  constexpr std::size_t ahead = 4;
  for (std::size_t k = 0; k < snap.live.size(); ++k) {
    if (k + ahead < snap.live.size() && bases[k + ahead].b != nullptr) {
      bases[k + ahead].b->c.m.prefetch();
      bases[k + ahead].b->c.blame.prefetch();
      snap.live[k + ahead].c.m.prefetch();
      snap.live[k + ahead].c.blame.prefetch();
    }
    if (bases[k].b == nullptr) {
      continue; // buried
    }
    thread_sample &t = snap.live[k];
    baseline &b = *bases[k].b;
    const bool fresh = bases[k].fresh;
    if (waiting_.empty() || !waiting_.contains(t.key)) {
      emit_rebase(t, b.c, fresh); // the common case: no segment splits the delta
    } else {
      emit_split(t, b.c);
      rebase(b.c, std::move(t.c), fresh);
    }
    b.missing_reads = 0;
    b.seen = generation_;
  }
  // Threads not listed: after a partial read they simply had no new samples; after a full read
  // they are exiting right now (final record not buried yet): keep the baseline for a while.
  if (snap.full) {
    // Segments whose thread no read lists any more (its final record was lost): their samples
    // are real, so they are counted under their own attribution before being forgotten.
    for (auto w = waiting_.begin(); w != waiting_.end();) {
      if (++w->second.missing_reads < grace_reads_) {
        ++w;
        continue;
      }
      auto b = prev_threads_.find(w->first);
      const thread_counters *from = b == prev_threads_.end() ? &zero : &b->second.c;
      for (auto &s : w->second.segs) {
        emit(s, *from);
        from = &s.c;
        split = true;
      }
      if (b != prev_threads_.end()) {
        b->second.c = *from;
      }
      w = waiting_.erase(w);
    }
    for (auto it = prev_threads_.begin(); it != prev_threads_.end();) {
      baseline &b = it->second;
      if (b.seen != generation_ && ++b.missing_reads >= grace_reads_) {
        it = prev_threads_.erase(it);
      } else {
        ++it;
      }
    }
  }

  if (split) {
    merge_rows(out.threads);
  }

  for (const auto &c : snap.cpus) {
    auto &prev = prev_cpus_[c.cpu];
    cpu_sample d{c.cpu, {}};
    delta_into(d.m, c.m, prev.m);
    prev = c;
    if (!d.m.empty()) {
      out.cpus.push_back(std::move(d));
    }
  }
  for (std::size_t i = 0; i < out.drops.size(); ++i) {
    out.drops[i] = sub(snap.drops[i], prev_drops_[i]);
  }
  prev_drops_ = snap.drops;
  out.stacks = std::move(snap.stacks);
  return out;
}

} // namespace rsched::collect
