#include "rsched/collect/snapshot.hpp"

#include <cstring>

namespace rsched::collect {
namespace {

// The buffer gives no alignment guarantee: every field is copied out with memcpy.
const char *take(const char *at, void *dst, std::size_t n) {
  std::memcpy(dst, at, n);
  return at + n;
}

// count, total, then `slots` slot values: straight into the sample's histogram.
template <typename Counters> const char *take_hist(const char *at, Counters &c, std::size_t slots) {
  std::uint64_t head[2];
  at = take(at, head, sizeof(head));
  c.count = head[0];
  if constexpr (requires { c.total_ns; }) {
    c.total_ns = head[1];
  } else {
    c.total = head[1];
  }
  return take(at, c.hist.slots.data(), slots * sizeof(std::uint64_t));
}

} // namespace

result<void> parse_iter_records(std::span<const char> bytes, std::uint32_t groups,
                                std::vector<thread_sample> &out) {
  const std::size_t rec = rsched_iter_record_size(groups);
  if (bytes.size() % rec != 0) {
    return make_error("task iterator returned a partial record");
  }
  out.reserve(out.size() + bytes.size() / rec);
  // The parts a record leaves out stay zero in the new sample, as they are in the kernel.
  for (std::size_t off = 0; off < bytes.size(); off += rec) {
    rsched_task_ident id;
    const char *at = take(bytes.data() + off, &id, sizeof(id));
    thread_sample &t = out.emplace_back();
    t.key = {id.tid, id.start_time};
    t.tgid = id.tgid;
    t.cgroup_id = id.cgroup_id;
    t.comm.assign(id.comm, strnlen(id.comm, sizeof(id.comm)));
    t.dead = (id.flags & RSCHED_TASK_DEAD) != 0;
    if ((groups & RSCHED_G_LATENCY) != 0) {
      at = take_hist(at, t.c.delay, RSCHED_HIST_SLOTS);
      at = take_hist(at, t.c.depth, RSCHED_DEPTH_SLOTS);
    }
    if ((groups & RSCHED_G_SLICE) != 0) {
      at = take_hist(at, t.c.slice_vol, RSCHED_HIST_SLOTS);
      at = take_hist(at, t.c.slice_invol, RSCHED_HIST_SLOTS);
    }
    if ((groups & RSCHED_G_SLEEP) != 0) {
      at = take_hist(at, t.c.sleep, RSCHED_HIST_SLOTS);
    }
    if ((groups & RSCHED_G_WAKING) != 0) {
      at = take_hist(at, t.c.waking, RSCHED_HIST_SLOTS);
    }
    if ((groups & RSCHED_G_MIGRATION) != 0) {
      at = take(at, &t.c.migrations.count, sizeof(std::uint64_t));
      at = take(at, &t.c.migrations.cross_ccx, sizeof(std::uint64_t));
      at = take(at, &t.c.migrations.cross_numa, sizeof(std::uint64_t));
    }
    if ((groups & RSCHED_G_PERF) != 0) {
      static_assert(sizeof(t.c.counters) == RSCHED_ITER_PERF_BYTES);
      (void)take(at, t.c.counters.data(), sizeof(t.c.counters));
    }
  }
  return {};
}

} // namespace rsched::collect
