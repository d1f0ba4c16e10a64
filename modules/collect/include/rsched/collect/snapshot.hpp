#pragma once
// Plain snapshot structs: what the kernel side holds at one read (cumulative counters), and the
// per-interval deltas derived from two reads. No libbpf types here: tests build them by hand.
#include "rsched/abi/sched_abi.h"
#include "rsched/base/block_cache.hpp"
#include "rsched/base/result.hpp"
#include "rsched/metrics/registry.hpp"
#include "rsched/stats/histogram.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rsched::collect {

// A thread's or CPU's histogram-valued metrics are a metrics::set indexed by metric id (the
// registry in rsched/metrics/registry.hpp says which exist and where the kernel keeps them).
using metrics::value;

// The migration group's tallies (plain counts; the per-second rate metrics sample them).
struct migration_counters {
  std::uint64_t count = 0;
  std::uint64_t cross_ccx = 0;
  std::uint64_t cross_numa = 0;
  friend bool operator==(const migration_counters &, const migration_counters &) = default;
};

using counter_values = std::array<std::uint64_t, RSCHED_COUNTER_SLOTS>;

// Blame group (sched_abi.h, struct rsched_blame): what ran while a thread waited, who
// preempted it.
struct blame_counts {
  std::uint64_t wait_ns = 0;   // time the culprit ran on the CPU while the thread waited there
  std::uint64_t waits = 0;     // scheduling delays it had a part in
  std::uint64_t preempts = 0;  // involuntary switches of the thread in which it took the CPU
  std::uint64_t approx_ns = 0; // the part of wait_ns estimated (a share of a coarse epoch)
  [[nodiscard]] bool empty() const { return wait_ns == 0 && waits == 0 && preempts == 0; }
  blame_counts &operator+=(const blame_counts &o) {
    wait_ns += o.wait_ns;
    waits += o.waits;
    preempts += o.preempts;
    approx_ns += o.approx_ns;
    return *this;
  }
  friend bool operator==(const blame_counts &, const blame_counts &) = default;
};

// A culprit: a process (tgid) under the comm and cgroup it ran as.
struct culprit {
  std::uint32_t tgid = 0;
  std::uint64_t cgroup_id = 0;
  std::array<char, RSCHED_COMM_LEN> comm{}; // NUL-padded kernel bytes
  friend auto operator<=>(const culprit &, const culprit &) = default;
};

// How the kernel scheduled a thread (priority inversion): task->policy (SCHED_NORMAL 0, FIFO 1,
// RR 2, BATCH 3, IDLE 5, DEADLINE 6, EXT 7) and task->prio + 1 (0 = not seen).
struct sched_prio {
  std::uint8_t policy = 0;
  std::uint8_t prio1 = 0;
  [[nodiscard]] bool known() const { return prio1 != 0; }
  friend bool operator==(const sched_prio &, const sched_prio &) = default;
};

struct blame_slot {
  std::uint32_t gen = 0; // the kernel slot's occupant number; 0 = never used
  culprit who;
  blame_counts n;
  // The culprit as it last ran while the thread waited, or took the CPU from it: where and how
  // it was scheduled then (not differenced: the latest read's).
  std::uint16_t cpu = 0;
  sched_prio prio;
  friend bool operator==(const blame_slot &, const blame_slot &) = default;
};

// A thread's blame. As read: the kernel's slots, cumulative. As a delta (delta()): slot by slot
// the difference, a slot that took a new culprit since counted whole (the kernel gives a slot
// away only when its counts were read); as a sum of deltas (accumulate()): one slot per
// culprit, culprits past the slots in `other`.
// The kernel's blame slots of a thread, allocated only once one is written (most threads of a
// big server never wait behind another one: 16 empty slots are 1 KB per thread and copy).
// Reading a slot nobody wrote gives an empty one; the non-const accessors allocate.
// The slots written are tracked (live()): a busy thread uses one or two of its sixteen, and the
// walks over every thread's slots (the read, the delta, the rebase, the interval's sums) visit
// those only. Every write goes through a non-const accessor, which marks its slot (iterators
// mark all), so a slot outside live() is empty; an array is given back to its cache with only
// its live slots cleared, and handed out all zero (base::zeroed_blocks) without clearing its
// 1 KB again.
class blame_slots {
public:
  using array = std::array<blame_slot, RSCHED_BLAME_SLOTS>;
  using mask = std::uint16_t;
  static_assert(RSCHED_BLAME_SLOTS <= 16);
  blame_slots() = default;
  blame_slots(const blame_slots &o) { *this = o; }
  blame_slots &operator=(const blame_slots &o) {
    if (this != &o) {
      if (!o.p_) {
        release();
      } else {
        mut() = *o.p_;
        live_ = o.live_;
      }
    }
    return *this;
  }
  blame_slots(blame_slots &&o) noexcept : p_(o.p_), live_(o.live_) {
    o.p_ = nullptr;
    o.live_ = 0;
  }
  blame_slots &operator=(blame_slots &&o) noexcept {
    if (this != &o) {
      release();
      p_ = o.p_;
      live_ = o.live_;
      o.p_ = nullptr;
      o.live_ = 0;
    }
    return *this;
  }
  ~blame_slots() { release(); }

  static constexpr std::size_t size() { return RSCHED_BLAME_SLOTS; }
  [[nodiscard]] bool allocated() const { return p_ != nullptr; }
  // The slots written since allocation (and not cleared since); every other slot is empty.
  [[nodiscard]] mask live() const { return live_; }
  blame_slot &operator[](std::size_t i) {
    array &a = mut();
    live_ = static_cast<mask>(live_ | (1U << i));
    return a[i];
  }
  const blame_slot &operator[](std::size_t i) const { return view()[i]; }
  // Empties slot i.
  void clear(std::size_t i) {
    if (p_ != nullptr && (static_cast<unsigned>(live_) >> i & 1U) != 0) {
      (*p_)[i] = {};
      live_ = static_cast<mask>(live_ & ~(1U << i));
    }
  }
  array::iterator begin() {
    array &a = mut();
    live_ = all;
    return a.begin();
  }
  array::iterator end() {
    array &a = mut();
    live_ = all;
    return a.end();
  }
  [[nodiscard]] array::const_iterator begin() const { return view().begin(); }
  [[nodiscard]] array::const_iterator end() const { return view().end(); }
  friend bool operator==(const blame_slots &a, const blame_slots &b) {
    return a.view() == b.view();
  }

private:
  static constexpr mask all = static_cast<mask>((1U << RSCHED_BLAME_SLOTS) - 1);
  using blocks = base::zeroed_blocks<sizeof(array)>;
  [[nodiscard]] const array &view() const {
    static const array none{};
    return p_ ? *p_ : none;
  }
  array &mut() {
    if (!p_) {
      // All zero: the empty slots (a zero-filled blame_slot is the empty one).
      p_ = static_cast<array *>(blocks::get());
      live_ = 0;
    }
    return *p_;
  }
  // Gives the array back, cleared where it was written.
  void release() noexcept {
    if (p_ == nullptr) {
      return;
    }
    for (unsigned m = live_; m != 0; m &= m - 1) {
      std::memset(static_cast<void *>(&(*p_)[static_cast<std::size_t>(__builtin_ctz(m))]), 0,
                  sizeof(blame_slot));
    }
    blocks::put(p_);
    p_ = nullptr;
    live_ = 0;
  }
  array *p_ = nullptr; // memory: base/block_cache.hpp (zeroed_blocks)
  mask live_ = 0;
};

struct blame_state {
  blame_slots slots;
  blame_counts idle;    // <idle>: nothing else ran (leaving idle, the wakeup path)
  blame_counts unknown; // <unknown>: not attributable (no preempts)
  blame_counts other;   // <other>: culprits past the slots
  sched_prio waiter;    // the thread itself at its latest switch-in after a wait
  // A live read's slots that were not copied (bit i: slot i): the kernel last updated them at
  // least three reads ago, so they hold what the thread's previous read found (its baseline
  // has them) and count nothing new. Every thread of a busy machine waits behind some other
  // process sooner or later; copying and differencing 16 unchanged slots per thread per read
  // made rschedd's cost grow with its age (10,000 threads: 57 -> 80 ms per interval within
  // four minutes). Deltas and sums never have stale slots.
  std::uint16_t stale = 0;
  // Calls fn(i) for each slot i of `mask` that was written (blame_slots::live: the others are
  // empty).
  template <typename Fn> void for_each_live(unsigned mask, Fn &&fn) const {
    for (unsigned m = mask & slots.live(); m != 0; m &= m - 1) {
      fn(static_cast<std::size_t>(__builtin_ctz(m)));
    }
  }
  [[nodiscard]] bool empty() const {
    bool none = idle.empty() && unknown.empty() && other.empty();
    for_each_live(~0U, [&](std::size_t i) { none = none && slots[i].n.empty(); });
    return none;
  }
  // Asks the CPU to fetch the slots in use ahead of a walk over many threads (a hint).
  void prefetch() const noexcept {
    for_each_live(~static_cast<unsigned>(stale), [&](std::size_t i) {
      const char *p = reinterpret_cast<const char *>(&slots[i]);
      __builtin_prefetch(p);
      __builtin_prefetch(p + sizeof(blame_slot) - 1);
    });
  }
  friend bool operator==(const blame_state &, const blame_state &) = default;
};

// Wakeup group (sched_abi.h, struct rsched_wakeup): a waker's part of a thread's sleeps, by the
// state the thread slept in (enum rsched_sleep_state).
struct wakeup_counts {
  std::array<std::uint64_t, RSCHED_WAKEUP_STATES> sleep_ns{}; // switch-out -> sched_waking
  std::array<std::uint64_t, RSCHED_WAKEUP_STATES> count{};    // sleeps it ended
  [[nodiscard]] bool empty() const {
    for (std::size_t s = 0; s < count.size(); ++s) {
      if (count[s] != 0 || sleep_ns[s] != 0) {
        return false;
      }
    }
    return true;
  }
  wakeup_counts &operator+=(const wakeup_counts &o) {
    for (std::size_t s = 0; s < count.size(); ++s) {
      sleep_ns[s] += o.sleep_ns[s];
      count[s] += o.count[s];
    }
    return *this;
  }
  friend bool operator==(const wakeup_counts &, const wakeup_counts &) = default;
};

// A waker: a process (kind 0: tgid, comm and cgroup at sched_waking) or a pseudo-waker, kind
// 1 + enum rsched_waker_pseudo (<hardirq>, <softirq>, <timer>, <idle>, <other>).
struct waker {
  std::uint8_t kind = 0;
  std::uint32_t tgid = 0;
  std::uint64_t cgroup_id = 0;
  std::array<char, RSCHED_COMM_LEN> comm{}; // NUL-padded kernel bytes
  friend auto operator<=>(const waker &, const waker &) = default;
};

// One waker's counts. As read: `index` is the kernel slot (0..RSCHED_WAKEUP_SLOTS - 1, `gen`
// its occupant number) or RSCHED_WAKEUP_SLOTS + the pseudo-waker's index (gen 0); in deltas and
// sums only `who` identifies it.
struct wakeup_entry {
  std::uint32_t index = 0;
  std::uint32_t gen = 0;
  waker who;
  wakeup_counts n;
  friend bool operator==(const wakeup_entry &, const wakeup_entry &) = default;
};

// Where a thread's D sleeps blocked: a kernel stack (the stack map's id; `other_stack` for the
// stacks past the slots or not taken), their time and count. `index`/`gen` as wakeup_entry's.
inline constexpr std::uint32_t other_stack = 0xFFFFFFFFU;
struct blocked_entry {
  std::uint32_t index = 0;
  std::uint32_t gen = 0;
  std::uint32_t stack = other_stack;
  std::uint64_t sleep_ns = 0;
  std::uint64_t count = 0;
  friend bool operator==(const blocked_entry &, const blocked_entry &) = default;
};

// A thread's wakers (empty without the group: a vector, so a thread without the group carries
// no slots) and its D sleeps' stacks.
struct wakeup_state {
  std::vector<wakeup_entry> e;
  std::vector<blocked_entry> stacks;
  // Its I/O by the kernel's per-task accounting (rsched_wakeup.io_*): bytes read from storage,
  // bytes of page cache dirtied or written.
  std::uint64_t io_read_bytes = 0, io_write_bytes = 0;
  [[nodiscard]] bool empty() const {
    if (io_read_bytes != 0 || io_write_bytes != 0) {
      return false;
    }
    for (const auto &x : e) {
      if (!x.n.empty()) {
        return false;
      }
    }
    for (const auto &x : stacks) {
      if (x.count != 0 || x.sleep_ns != 0) {
        return false;
      }
    }
    return true;
  }
  friend bool operator==(const wakeup_state &, const wakeup_state &) = default;
};

struct thread_counters {
  // The kernel metrics (the per-second ones stay empty here: the interval assembly builds them).
  metrics::thread_set m;
  migration_counters migrations;
  counter_values counters{}; // perf counter deltas by slot (rsched_counter_slot)
  blame_state blame;         // blame group
  wakeup_state wakeup;       // wakeup group
  [[nodiscard]] bool empty() const {
    bool none = m.empty() && migrations.count == 0 && blame.empty() && wakeup.empty();
    for (auto c : counters) {
      none = none && c == 0;
    }
    return none;
  }
  friend bool operator==(const thread_counters &, const thread_counters &) = default;
};

// The count of a tally.
constexpr std::uint64_t tally_of(const migration_counters &m, metrics::tally t) {
  switch (t) {
  case metrics::tally::migrations:
    return m.count;
  case metrics::tally::cross_ccx:
    return m.cross_ccx;
  case metrics::tally::cross_numa:
    return m.cross_numa;
  case metrics::tally::none:
    break;
  }
  return 0;
}
constexpr std::uint64_t tally_of(const thread_counters &c, metrics::tally t) {
  return tally_of(c.migrations, t);
}

struct thread_key {
  std::uint32_t tid = 0;
  std::uint64_t start_time = 0; // task->start_time, ns since boot
  friend auto operator<=>(const thread_key &, const thread_key &) = default;
};

// A thread's counters under one attribution (comm, cgroup). A rename (exec included) or a move
// to another cgroup closes the attribution in force: the kernel side then emits a segment record
// with the counters at that moment under the old comm and cgroup, numbered `seg` = 1, 2, ...;
// a live or final record carries in `seg` how many attributions were closed before it.
struct thread_sample {
  thread_key key;
  std::uint32_t tgid = 0;
  std::uint64_t cgroup_id = 0;
  std::string comm;     // exact kernel bytes
  bool dead = false;    // final record of an exited thread
  bool segment = false; // the counters at the close of attribution number `seg`
  std::uint32_t seg = 0;
  thread_counters c;
};

struct cpu_sample {
  std::uint32_t cpu = 0;
  metrics::cpu_set m; // scheduling delay of threads switched in here, idle periods, ...
};

using drop_counters = std::array<std::uint64_t, RSCHED_DROP_COUNT>;

// A kernel stack of the wakeup group, resolved once: a hash of its return addresses (the same
// stack in every run of one boot) and its functions, innermost first.
struct kernel_stack {
  std::uint64_t hash = 0;
  std::uint8_t state = 1; // the sleeps it is of: 0 S, 1 D, 2 other (rsched_sleep_state)
  std::vector<std::string> frames;
  friend bool operator==(const kernel_stack &, const kernel_stack &) = default;
};
using kernel_stacks = std::map<std::uint32_t, kernel_stack>; // by the stack map's id

// One read of the kernel side: cumulative values.
struct snapshot {
  // A full read lists every live thread with state; a partial one only threads whose counters
  // changed since their last read (the others keep their baseline).
  bool full = true;
  std::vector<thread_sample> live; // threads alive at the read (see `full`)
  std::vector<thread_sample> dead; // final records of threads that exited since the last read
  // Segment records written since the last read, oldest first (read after `live` and `dead`,
  // so every segment a live or final record counts in its `seg` is here or was earlier).
  std::vector<thread_sample> segments;
  std::vector<cpu_sample> cpus; // every possible CPU
  drop_counters drops{};
  // The kernel stacks the samples name (wakeup group), by id: each resolved once per run.
  kernel_stacks stacks;
  // CPU time the source spent turning kernel records into samples (--stats), ns.
  std::int64_t parse_cpu_ns = 0;
};

// What happened between two reads.
struct interval_delta {
  // Only threads with new samples, one row per thread and attribution (comm, cgroup) in force
  // while they happened: a thread renamed or moved in the interval has a row for each.
  std::vector<thread_sample> threads;
  std::vector<cpu_sample> cpus; // only CPUs with new samples
  drop_counters drops{};
  kernel_stacks stacks; // the read's (snapshot::stacks)
};

// Conversions from the ABI structs.
// `epoch`: the blame epoch of a live read (bpf::program::begin_read), whose slots not updated
// in the last three epochs are left out as stale (blame_state::stale); 0: every slot copied
// (final and segment records, tests).
void from_abi(const rsched_blame &b, blame_state &out, std::uint32_t epoch = 0);
// The same from the bytes of an rsched_blame in a record (no alignment): copies only the slots
// it keeps.
void blame_from_record(const char *at, blame_state &out, std::uint32_t epoch = 0);
void from_abi(const rsched_cpu_stats &s, metrics::cpu_set &out);
// The scheduling delay's fine tail of a thread read from the kernel into its sched_delay value,
// when `used` (its bit in rsched_task_state.used) and the value exists.
void fill_tail(metrics::thread_set &m, const rsched_fine_tail &tail, bool used);
// The wakeup group's wakers as read (slots in use and pseudo-wakers with counts).
void from_abi(const rsched_wakeup &w, wakeup_state &out);
thread_sample from_abi(const rsched_task_record &r);
// Fills `out` in place (`blame_epoch`: as for the blame above).
void from_abi(const rsched_task_record &r, thread_sample &out, std::uint32_t blame_epoch = 0);

// Appends the samples of the task iterator's compact records (layout: sched_abi.h,
// rsched_iter_record_size) of a run with `groups` (enum rsched_group bits) to `out`. Bytes that
// are not whole records are an error and append nothing. `blame_epoch`: as for from_abi (live
// records; 0 for segment records).
result<void> parse_iter_records(std::span<const char> bytes, std::uint32_t groups,
                                std::vector<thread_sample> &out, std::uint32_t blame_epoch = 0);

} // namespace rsched::collect
