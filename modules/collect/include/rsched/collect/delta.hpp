#pragma once
// Turns successive cumulative snapshots into per-interval deltas. Pure logic over plain data.
//
// Rules:
//  - a thread is identified by (tid, start_time): a reused tid is a new thread;
//  - a dead thread's final record is diffed against its last live values, then forgotten;
//  - a thread missing from a partial read had no new samples and keeps its baseline; one
//    missing from a full read (exiting, its final record not yet buried) keeps it for up to
//    `grace_reads` full reads, so its final record is not counted twice;
//  - a counter that went down (cannot happen unless state was recreated) restarts from 0;
//  - segment records split a thread's delta by attribution: the part up to segment k goes under
//    segment k's comm and cgroup, the rest under the next one's; a segment is applied with the
//    first live or final record that counts it (its `seg` >= k) and waits until then. The rows
//    of one thread and attribution within a read are merged (a rename A -> B -> A).
#include "rsched/collect/snapshot.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>

namespace rsched::collect {

thread_counters delta(const thread_counters &cur, const thread_counters &prev);

// into += d (used to add up several 1-second ticks into one interval).
void accumulate(thread_counters &into, const thread_counters &d);

// Blame deltas: cur - prev slot by slot (a slot whose `gen` changed counts whole), and a sum of
// deltas by culprit (one slot per culprit; past the slots, `other`).
blame_state delta(const blame_state &cur, const blame_state &prev);
void accumulate(blame_state &into, const blame_state &d);

// Wakeup deltas: cur - prev per kernel slot (a slot whose `gen` changed counts whole), and a sum
// of deltas per waker.
wakeup_state delta(const wakeup_state &cur, const wakeup_state &prev);
void accumulate(wakeup_state &into, const wakeup_state &d);

class delta_tracker {
public:
  explicit delta_tracker(unsigned grace_reads = 8) : grace_reads_(grace_reads) {}

  // Deltas since the previous call (the first call diffs against zero).
  interval_delta advance(const snapshot &snap) { return advance(snapshot(snap)); }
  // The same, taking the snapshot's live counters as the new baselines instead of copying
  // them: each thread's old baseline is freed as soon as its delta is taken, so its blocks
  // serve the next thread's delta (base/block_cache.hpp) and a read never holds three copies
  // of every thread's histograms (snapshot, baseline, delta), only about two. `snap` is left
  // with its live threads' counters moved from.
  interval_delta advance(snapshot &&snap);

  [[nodiscard]] std::size_t tracked_threads() const { return prev_threads_.size(); }

private:
  struct baseline {
    thread_counters c;
    unsigned missing_reads = 0; // consecutive full reads that did not list the thread
    std::uint64_t seen = 0;     // generation of the last read that listed it
  };
  // Segment records that no live or final record has counted yet.
  struct waiting {
    std::vector<thread_sample> segs; // by `seg`
    unsigned missing_reads = 0;      // full reads since they arrived
  };
  struct key_hash {
    std::size_t operator()(const thread_key &k) const noexcept {
      return std::hash<std::uint64_t>{}(k.start_time * 0x9E3779B97F4A7C15ULL ^ k.tid);
    }
  };
  unsigned grace_reads_;
  std::unordered_map<thread_key, baseline, key_hash> prev_threads_;
  std::unordered_map<thread_key, waiting, key_hash> waiting_;
  std::uint64_t generation_ = 0;
  std::map<std::uint32_t, cpu_sample> prev_cpus_;
  drop_counters prev_drops_{};
};

} // namespace rsched::collect
