#include "rsched/collect/delta.hpp"

#include <cstring>
#include <set>

namespace rsched::collect {

namespace {
std::uint64_t sub(std::uint64_t cur, std::uint64_t prev) {
  return cur >= prev ? cur - prev : cur;
}
} // namespace

delay_counters from_abi(const rsched_delay_stats &s) {
  delay_counters d;
  d.count = s.count;
  d.total_ns = s.total_ns;
  for (std::size_t i = 0; i < RSCHED_HIST_SLOTS; ++i) {
    d.hist.slots[i] = s.slots[i];
  }
  return d;
}

depth_counters from_abi(const rsched_depth_stats &s) {
  depth_counters d;
  d.count = s.count;
  d.total = s.total;
  for (std::size_t i = 0; i < RSCHED_DEPTH_SLOTS; ++i) {
    d.hist.slots[i] = s.slots[i];
  }
  return d;
}

thread_sample from_abi(const rsched_task_record &r) {
  thread_sample t;
  t.key = {r.id.tid, r.id.start_time};
  t.tgid = r.id.tgid;
  t.cgroup_id = r.id.cgroup_id;
  std::size_t n = 0;
  while (n < sizeof(r.id.comm) && r.id.comm[n] != '\0') {
    ++n;
  }
  t.comm.assign(r.id.comm, n);
  t.dead = (r.id.flags & RSCHED_TASK_DEAD) != 0;
  t.c.delay = from_abi(r.st.delay);
  t.c.depth = from_abi(r.st.depth);
  t.c.slice_vol = from_abi(r.st.slice_vol);
  t.c.slice_invol = from_abi(r.st.slice_invol);
  t.c.sleep = from_abi(r.st.sleep);
  t.c.waking = from_abi(r.st.waking);
  t.c.migrations = {r.st.migrations, r.st.cross_ccx, r.st.cross_numa};
  for (std::size_t i = 0; i < t.c.counters.size(); ++i) {
    t.c.counters[i] = r.st.counters[i];
  }
  return t;
}

delay_counters delta(const delay_counters &cur, const delay_counters &prev) {
  return {sub(cur.count, prev.count), sub(cur.total_ns, prev.total_ns),
          stats::delta(cur.hist, prev.hist)};
}

thread_counters delta(const thread_counters &cur, const thread_counters &prev) {
  thread_counters d;
  d.delay = delta(cur.delay, prev.delay);
  d.depth.count = sub(cur.depth.count, prev.depth.count);
  d.depth.total = sub(cur.depth.total, prev.depth.total);
  d.depth.hist = stats::delta(cur.depth.hist, prev.depth.hist);
  d.slice_vol = delta(cur.slice_vol, prev.slice_vol);
  d.slice_invol = delta(cur.slice_invol, prev.slice_invol);
  d.sleep = delta(cur.sleep, prev.sleep);
  d.waking = delta(cur.waking, prev.waking);
  d.migrations = {sub(cur.migrations.count, prev.migrations.count),
                  sub(cur.migrations.cross_ccx, prev.migrations.cross_ccx),
                  sub(cur.migrations.cross_numa, prev.migrations.cross_numa)};
  for (std::size_t i = 0; i < d.counters.size(); ++i) {
    d.counters[i] = sub(cur.counters[i], prev.counters[i]);
  }
  return d;
}

void accumulate(delay_counters &into, const delay_counters &d) {
  into.count += d.count;
  into.total_ns += d.total_ns;
  (void)stats::merge_into(into.hist, d.hist); // same layout by construction
}

void accumulate(thread_counters &into, const thread_counters &d) {
  accumulate(into.delay, d.delay);
  into.depth.count += d.depth.count;
  into.depth.total += d.depth.total;
  (void)stats::merge_into(into.depth.hist, d.depth.hist);
  accumulate(into.slice_vol, d.slice_vol);
  accumulate(into.slice_invol, d.slice_invol);
  accumulate(into.sleep, d.sleep);
  accumulate(into.waking, d.waking);
  into.migrations.count += d.migrations.count;
  into.migrations.cross_ccx += d.migrations.cross_ccx;
  into.migrations.cross_numa += d.migrations.cross_numa;
  for (std::size_t i = 0; i < into.counters.size(); ++i) {
    into.counters[i] += d.counters[i];
  }
}

interval_delta delta_tracker::advance(const snapshot &snap) {
  interval_delta out;
  static const thread_counters zero{};
  std::set<thread_key> buried;

  // Final records first: a thread can appear dead and (briefly) still be listed as live.
  for (const auto &t : snap.dead) {
    auto it = prev_threads_.find(t.key);
    thread_sample d = t;
    d.c = delta(t.c, it == prev_threads_.end() ? zero : it->second.c);
    if (it != prev_threads_.end()) {
      prev_threads_.erase(it);
    }
    buried.insert(t.key);
    if (!d.c.empty()) {
      out.threads.push_back(std::move(d));
    }
  }

  std::map<thread_key, baseline> next;
  for (const auto &t : snap.live) {
    if (buried.contains(t.key)) {
      continue;
    }
    auto it = prev_threads_.find(t.key);
    thread_sample d = t;
    d.c = delta(t.c, it == prev_threads_.end() ? zero : it->second.c);
    if (it != prev_threads_.end()) {
      prev_threads_.erase(it);
    }
    next[t.key] = baseline{t.c, 0};
    if (!d.c.empty()) {
      out.threads.push_back(std::move(d));
    }
  }
  // Threads not listed: after a partial read they simply had no new samples; after a full read
  // they are exiting right now (final record not buried yet): keep the baseline for a while.
  for (auto &[key, b] : prev_threads_) {
    if (!snap.full) {
      next[key] = b;
    } else if (b.missing_reads + 1 < grace_reads_) {
      next[key] = baseline{b.c, b.missing_reads + 1};
    }
  }
  prev_threads_ = std::move(next);

  for (const auto &c : snap.cpus) {
    auto &prev = prev_cpus_[c.cpu];
    cpu_sample d{c.cpu, delta(c.delay, prev.delay), delta(c.idle, prev.idle)};
    prev = c;
    if (d.delay.count != 0 || d.idle.count != 0) {
      out.cpus.push_back(std::move(d));
    }
  }
  for (std::size_t i = 0; i < out.drops.size(); ++i) {
    out.drops[i] = sub(snap.drops[i], prev_drops_[i]);
  }
  prev_drops_ = snap.drops;
  return out;
}

} // namespace rsched::collect
