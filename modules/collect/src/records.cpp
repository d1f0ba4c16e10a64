#include "rsched/collect/snapshot.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace rsched::collect {
namespace {

// The buffer gives no alignment guarantee: every field is copied out with memcpy.
const char *take(const char *at, void *dst, std::size_t n) {
  std::memcpy(dst, at, n);
  return at + n;
}

// count, total, then the layout's slot values: straight into position i of the sample's set,
// group by group. Groups whose `used` bit is clear are zero in the kernel and undefined in the
// record: they are left as they are in the sample (zero). A metric the thread never counted
// (no samples, no bit set) is not written at all: it takes no memory.
template <metrics::scope S>
const char *take_hist(const char *at, metrics::set<S> &m, std::size_t i, stats::layout l,
                      std::uint64_t used, unsigned base) {
  const std::size_t slots = stats::slot_count(l);
  constexpr std::size_t span = RSCHED_USED_SPAN;
  const std::size_t spans = (slots + span - 1) / span;
  std::uint64_t head[2];
  at = take(at, head, sizeof(head));
  const std::uint64_t bits = (used >> base) & ((std::uint64_t{1} << spans) - 1);
  if (head[0] == 0 && head[1] == 0 && bits == 0) {
    return at + slots * sizeof(std::uint64_t);
  }
  metrics::value &v = m.at(i);
  v.count = head[0];
  v.total = head[1];
  v.spans = static_cast<metrics::span_mask>(bits); // the used groups are the value's spans
  static_assert(span == metrics::span_slots);
  for (std::size_t g = 0; g < spans; ++g) {
    if ((bits >> g & 1U) != 0) {
      const std::size_t n = std::min(span, slots - g * span);
      std::memcpy(v.hist.slots.data() + g * span, at + g * span * sizeof(std::uint64_t),
                  n * sizeof(std::uint64_t));
    }
  }
  return at + slots * sizeof(std::uint64_t);
}

// Delay's fine tail (sched_abi.h: all of it when its `used` bit is set, else undefined).
const char *take_tail(const char *at, metrics::thread_set &m, std::uint64_t used) {
  if ((used & RSCHED_USED_TAIL_MASK) != 0) {
    // Only the groups of RSCHED_TAIL_SPAN slots whose bit is set were written.
    rsched_fine_tail tail{};
    for (std::uint32_t first = 0; first < RSCHED_HIST_FINE_TAIL_SLOTS; first += RSCHED_TAIL_SPAN) {
      if ((used & rsched_tail_bit(first)) != 0) {
        const std::uint32_t n =
            std::min<std::uint32_t>(RSCHED_TAIL_SPAN, RSCHED_HIST_FINE_TAIL_SLOTS - first);
        std::memcpy(&tail.slots[first], at + first * sizeof(__u32), n * sizeof(__u32));
      }
    }
    fill_tail(m, tail, true);
  }
  return at + sizeof(rsched_fine_tail);
}

} // namespace

result<void> parse_iter_records(std::span<const char> bytes, std::uint32_t groups,
                                std::vector<thread_sample> &out, std::uint32_t blame_epoch) {
  const std::size_t rec = rsched_iter_record_size(groups);
  if (bytes.size() % rec != 0) {
    return make_error("task iterator returned a partial record");
  }
  if (out.capacity() < out.size() + bytes.size() / rec) {
    out.reserve(std::max(out.size() + bytes.size() / rec, 2 * out.capacity())); // batches
  }
  // The parts a record leaves out stay zero in the new sample, as they are in the kernel.
  for (std::size_t off = 0; off < bytes.size(); off += rec) {
    rsched_task_ident id;
    std::uint64_t used = 0;
    const char *at = take(bytes.data() + off, &id, sizeof(id));
    at = take(at, &used, sizeof(used));
    thread_sample &t = out.emplace_back();
    t.key = {id.tid, id.start_time};
    t.tgid = id.tgid;
    t.cgroup_id = id.cgroup_id;
    t.comm.assign(id.comm, strnlen(id.comm, sizeof(id.comm)));
    t.dead = (id.flags & RSCHED_TASK_DEAD) != 0;
    t.segment = (id.flags & RSCHED_TASK_SEGMENT) != 0;
    t.seg = id.seg;
    // The kernel histograms of the run's groups, in rsched_task_state order (registry order).
    constexpr auto defs = metrics::entries<metrics::scope::thread>();
    for (std::size_t i = 0; i < defs.size(); ++i) {
      const auto &d = defs[i];
      if (d.from == metrics::origin::kernel && (groups & d.group) != 0) {
        at = take_hist(at, t.c.m, i, d.layout, used, static_cast<unsigned>(d.used_base));
        if (d.metric == metrics::id::runq_depth) { // after delay and depth: delay's fine tail
          at = take_tail(at, t.c.m, used);
        }
      }
    }
    if ((groups & RSCHED_G_MIGRATION) != 0) {
      at = take(at, &t.c.migrations.count, sizeof(std::uint64_t));
      at = take(at, &t.c.migrations.cross_ccx, sizeof(std::uint64_t));
      at = take(at, &t.c.migrations.cross_numa, sizeof(std::uint64_t));
    }
    if ((groups & RSCHED_G_PERF) != 0) {
      static_assert(sizeof(t.c.counters) == RSCHED_ITER_PERF_BYTES);
      at = take(at, t.c.counters.data(), sizeof(t.c.counters));
    }
    if ((groups & RSCHED_G_BLAME) != 0) {
      blame_from_record(at, t.c.blame, blame_epoch);
      at += RSCHED_ITER_BLAME_BYTES;
    }
    if ((groups & RSCHED_G_WAKEUP) != 0) {
      rsched_wakeup w;
      take(at, &w, sizeof(w));
      from_abi(w, t.c.wakeup);
    }
  }
  return {};
}

} // namespace rsched::collect
