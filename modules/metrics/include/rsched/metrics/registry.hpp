#pragma once
// The histogram-valued metrics rsched records, in one table. Everything downstream of the BPF
// programs works from it: collect reads a metric's kernel histogram at `offset` in the state,
// the interval assembly builds the per-second ones, the live view draws its sections, the
// store's writer inserts every metric with data, and the store creates a new metric's row in
// `metric` and its views. Adding a metric = its BPF/ABI side + one entry here + docs/SCHEMA.md.
//
// Values of one thread or CPU are kept in a `set` indexed by metric id (records.hpp of every
// stage holds one), never in per-metric fields.
#include "rsched/abi/sched_abi.h"
#include "rsched/base/block_cache.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace rsched::metrics {

enum class scope : std::uint8_t { thread, cpu };

// Where a metric's samples come from.
enum class origin : std::uint8_t {
  kernel,     // a cumulative histogram in the BPF state (count, total, slots; see `offset`)
  per_second, // built by the interval assembly: one sample per 1-s tick of a thread tally
};

// A thread's kernel tallies (plain counts) that per-second metrics sample.
enum class tally : std::uint8_t { none, migrations, cross_ccx, cross_numa };

// How the live view shows a metric (upstream's section kinds).
enum class display : std::uint8_t {
  none,        // not a section of its own
  percentiles, // p50/p90/p99 in microseconds, grouped by latency bands (-l filters CPUs)
  durations,   // CPU: p50/p90/p99 in microseconds, grouped by duration bands (idle, busy)
  timeslice,   // the voluntary/involuntary pair (this is the voluntary half)
  linear,      // a small-integer distribution (depth, rates)
};

// What the machine must have for the metric to mean anything (else it is neither shown nor
// written: the samples would all be zero).
enum class needs : std::uint8_t { nothing, dies, numa_nodes };

// Dense ids: thread metrics first (the kernel ones in rsched_task_state order), then CPU ones.
enum class id : std::uint8_t {
  sched_delay,
  runq_depth,
  slice_voluntary,
  slice_involuntary,
  sleep,
  waking_delay,
  migration_rate,
  migration_rate_cross_ccx,
  migration_rate_cross_numa,
  cpu_sched_delay,
  cpu_idle,
  cpu_busy,
};

struct def {
  id metric;
  scope where;
  std::string_view name; // metric.name in the database; "cpu_..." for CPU metrics
  int db_id;             // metric.id and thread_hist/cpu_hist.metric: stable forever
  std::string_view unit; // metric.unit
  stats::layout layout;
  std::uint32_t group; // enum rsched_group bit that records it
  origin from;
  // kernel: byte offset of its rsched_delay_stats / rsched_depth_stats (count, total, then
  // slot_count(layout) slots) in rsched_task_state (thread) or rsched_cpu_stats (CPU), and the
  // first of its bits in rsched_task_state.used (-1: CPU metrics, always read whole).
  std::size_t offset;
  int used_base;
  tally samples; // per_second: the tally it samples, in every second with a migration
  needs need;
  // The public view of the metric alone ("" = it is part of a view written by hand in
  // schema.cpp) and the name of its `total` column there ("" = the view has none).
  std::string_view view;
  std::string_view total_column;
  // The live view: section kind, order among the sections of its scope, texts.
  display shown;
  int order;
  std::string_view title;
  std::string_view subtitle;
  std::string_view heading; // linear sections: the line over the table
  std::string_view empty;   // linear sections: the line when no thread has data
};

inline constexpr std::size_t no_offset = 0;

// clang-format off
inline constexpr std::array<def, 12> registry{{
  {id::sched_delay, scope::thread, "sched_delay", 1, "ns", stats::layout::latency, RSCHED_G_LATENCY,
   origin::kernel, offsetof(rsched_task_state, delay), RSCHED_USED_DELAY, tally::none,
   needs::nothing, "sched_delay", "total_ns",
   display::percentiles, 1, "Scheduling Delays", "(microseconds)", "", ""},
  {id::runq_depth, scope::thread, "runq_depth", 2, "tasks", stats::layout::depth, RSCHED_G_LATENCY,
   origin::kernel, offsetof(rsched_task_state, depth), RSCHED_USED_DEPTH, tally::none,
   needs::nothing, "runq_depth", "",
   display::linear, 5, "Runqueue Depth Statistics", "(nr_running at wakeup)",
   "Processes by runqueue depth at wakeup:", "No runqueue depth data collected yet."},
  {id::slice_voluntary, scope::thread, "slice_voluntary", 3, "ns", stats::layout::latency,
   RSCHED_G_SLICE, origin::kernel, offsetof(rsched_task_state, slice_vol),
   RSCHED_USED_SLICE_VOL, tally::none, needs::nothing, "", "",
   display::timeslice, 3, "Time Slice Statistics", "", "", ""},
  {id::slice_involuntary, scope::thread, "slice_involuntary", 4, "ns", stats::layout::latency,
   RSCHED_G_SLICE, origin::kernel, offsetof(rsched_task_state, slice_invol),
   RSCHED_USED_SLICE_INVOL, tally::none, needs::nothing, "", "",
   display::none, 0, "", "", "", ""},
  {id::sleep, scope::thread, "sleep", 5, "ns", stats::layout::latency, RSCHED_G_SLEEP,
   origin::kernel, offsetof(rsched_task_state, sleep), RSCHED_USED_SLEEP, tally::none,
   needs::nothing, "sleep", "total_ns",
   display::percentiles, 4, "Sleep Duration Statistics",
   "(Time spent sleeping between sched_switch and sched_wakeup)", "", ""},
  {id::waking_delay, scope::thread, "waking_delay", 6, "ns", stats::layout::latency,
   RSCHED_G_WAKING, origin::kernel, offsetof(rsched_task_state, waking), RSCHED_USED_WAKING,
   tally::none, needs::nothing, "waking_delay", "total_ns",
   display::percentiles, 2, "Waking Delay Statistics", "(Time from sched_waking to sched_switch)",
   "", ""},
  {id::migration_rate, scope::thread, "migration_rate", 7, "migrations/s", stats::layout::count,
   RSCHED_G_MIGRATION, origin::per_second, no_offset, -1, tally::migrations, needs::nothing, "",
   "", display::linear, 6, "Migration Statistics", "(migrations per second)",
   "Processes by migration rate:", "No migration rate data collected yet."},
  {id::migration_rate_cross_ccx, scope::thread, "migration_rate_cross_ccx", 9, "migrations/s",
   stats::layout::count, RSCHED_G_MIGRATION, origin::per_second, no_offset, -1, tally::cross_ccx,
   needs::dies, "", "", display::linear, 7, "Cross-CCX Migration Statistics",
   "(cross-die migrations per second)", "Processes by cross-CCX migration rate:",
   "No cross-CCX migration rate data collected yet."},
  {id::migration_rate_cross_numa, scope::thread, "migration_rate_cross_numa", 10,
   "migrations/s", stats::layout::count, RSCHED_G_MIGRATION, origin::per_second, no_offset, -1,
   tally::cross_numa, needs::numa_nodes, "", "", display::linear, 8,
   "Cross-NUMA Migration Statistics", "(cross-node migrations per second)",
   "Processes by cross-NUMA migration rate:", "No cross-NUMA migration rate data collected yet."},
  // CPU metrics. The CPU's scheduling delay shares metric id 1 with the thread one (cpu_hist).
  {id::cpu_sched_delay, scope::cpu, "sched_delay", 1, "ns", stats::layout::latency,
   RSCHED_G_LATENCY, origin::kernel, offsetof(rsched_cpu_stats, delay), -1, tally::none,
   needs::nothing, "cpu_sched_delay", "total_ns",
   display::percentiles, 1, "Per-CPU Scheduling Delays", "(microseconds)", "",
   "No CPUs match the specified filters."},
  {id::cpu_idle, scope::cpu, "cpu_idle", 8, "ns", stats::layout::latency, RSCHED_G_SLEEP,
   origin::kernel, offsetof(rsched_cpu_stats, idle), -1, tally::none, needs::nothing,
   "cpu_idle", "total_ns", display::durations, 2, "Per-CPU Idle Duration", "(microseconds)", "",
   "No CPU idle data collected yet."},
  {id::cpu_busy, scope::cpu, "cpu_busy", 11, "ns", stats::layout::latency, RSCHED_G_SLEEP,
   origin::kernel, offsetof(rsched_cpu_stats, busy), -1, tally::none, needs::nothing,
   "cpu_busy", "total_ns", display::durations, 3, "Per-CPU Busy Duration", "(microseconds)", "",
   "No CPU busy data collected yet."},
}};
// clang-format on

constexpr const def &of(id m) {
  return registry[static_cast<std::size_t>(m)];
}

// Every entry sits at its id's index, and the scopes are contiguous (thread, then CPU).
constexpr bool registry_is_dense() {
  for (std::size_t i = 0; i < registry.size(); ++i) {
    if (static_cast<std::size_t>(registry[i].metric) != i) {
      return false;
    }
    if (i > 0 && registry[i - 1].where == scope::cpu && registry[i].where == scope::thread) {
      return false;
    }
  }
  return true;
}
static_assert(registry_is_dense(), "registry entries must be in id order, thread before CPU");

// The kernel thread metrics are in rsched_task_state order: the compact records of the task
// iterator (sched_abi.h) hold them in that order, and collect reads them in registry order.
constexpr bool kernel_thread_metrics_in_state_order() {
  std::size_t last = 0;
  for (const auto &d : registry) {
    if (d.where == scope::thread && d.from == origin::kernel) {
      if (d.offset < last) {
        return false;
      }
      last = d.offset;
    }
  }
  return true;
}
static_assert(kernel_thread_metrics_in_state_order());

constexpr std::size_t first(scope s) {
  for (std::size_t i = 0; i < registry.size(); ++i) {
    if (registry[i].where == s) {
      return i;
    }
  }
  return registry.size();
}
constexpr std::size_t size(scope s) {
  std::size_t n = 0;
  for (const auto &d : registry) {
    n += d.where == s ? 1 : 0;
  }
  return n;
}

// The entries of one scope, in id order.
template <scope S> constexpr auto entries() {
  std::array<def, size(S)> out{};
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = registry[first(S) + i];
  }
  return out;
}

using stats::all_spans;
using stats::for_each_span;
using stats::span_bit;
using stats::span_count;
using stats::span_mask;
using stats::span_slots;

// The latency_fine slots 51..235 of a thread's scheduling delay (sched_abi.h, struct
// rsched_fine_tail): the same samples as the value's latency slots from 512 us, each of those
// split in 8. 32-bit, as in the kernel: cumulative (read from the kernel) they wrap, and
// delta_into takes differences modulo 2^32; a delta or an interval's sum holds far fewer than
// 2^32 samples of one bucket. Half the memory of 64-bit counts: every thread that ever waited
// 512 us keeps one in the baseline of its cumulative counts.
struct fine_tail {
  std::array<std::uint32_t, RSCHED_HIST_FINE_TAIL_SLOTS> slots{};
  friend bool operator==(const fine_tail &, const fine_tail &) = default;
};

// Whether metric m keeps a fine tail (only the thread's scheduling delay: its values are
// written as latency_fine).
constexpr bool keeps_fine_tail(id m) {
  return m == id::sched_delay;
}

// One histogram-valued metric of one thread or CPU: samples, their exact sum (ns for
// durations) and their histogram.
struct value {
  std::uint64_t count = 0;
  std::uint64_t total = 0;
  // The spans of `hist` that may hold counts (a superset: the slots of every other span are
  // zero). Whoever writes hist.slots directly keeps it a superset; all_spans is always true.
  // Not part of the value: equality compares the counts only. Beside the counts, in the
  // block's first cache line with them.
  span_mask spans = all_spans;
  stats::histogram hist{stats::layout::latency, {}};
  // A scheduling delay's fine tail (keeps_fine_tail), allocated only when some of its samples
  // are >= 512 us: a thread that never waited that long costs one null pointer.
  base::cached_ptr<fine_tail> tail;

  value() = default;
  value(const value &o)
      : count(o.count), total(o.total), spans(o.spans), hist(o.hist),
        tail(o.tail ? base::make_cached<fine_tail>(*o.tail) : nullptr) {}
  value &operator=(const value &o) {
    if (this != &o) {
      count = o.count;
      total = o.total;
      spans = o.spans;
      hist = o.hist;
      if (!o.tail) {
        tail.reset();
      } else if (tail) {
        *tail = *o.tail;
      } else {
        tail = base::make_cached<fine_tail>(*o.tail);
      }
    }
    return *this;
  }
  value(value &&) noexcept = default;
  value &operator=(value &&) noexcept = default;
  ~value() = default;

  [[nodiscard]] bool empty() const {
    if (count != 0) {
      return false;
    }
    bool any = false;
    for_each_span(spans, [&](std::size_t a, std::size_t b) {
      for (std::size_t s = a; s < b; ++s) {
        any |= hist.slots[s] != 0;
      }
    });
    return !any;
  }
  // One sample of `v` in the histogram (the per-second metrics).
  void add_sample(std::uint64_t v) {
    const std::size_t slot = stats::slot_of(hist.kind, v);
    hist.slots[slot] += 1;
    spans = static_cast<span_mask>(spans | span_bit(slot));
    count += 1;
    total += v;
  }
  friend bool operator==(const value &a, const value &b) {
    static const fine_tail zero{};
    return a.count == b.count && a.total == b.total && a.hist == b.hist &&
           (a.tail ? *a.tail : zero) == (b.tail ? *b.tail : zero);
  }
};

// Whether a latency value's histogram has counts from 512 us up (slots past the linear ones).
inline bool has_log_slots(const value &v) {
  bool any = false;
  for_each_span(v.spans, [&](std::size_t a, std::size_t b) {
    for (std::size_t s = std::max<std::size_t>(a, RSCHED_HIST_LINEAR_SLOTS + 1); s < b; ++s) {
      any |= v.hist.slots[s] != 0;
    }
  });
  return any;
}

// Whether the value is known at latency_fine precision: it has a fine tail, or nothing from
// 512 us up (its latency slots below are latency_fine's). A latency value only.
inline bool has_fine(const value &v) {
  return v.hist.kind == stats::layout::latency && (v.tail != nullptr || !has_log_slots(v));
}

// The value's latency_fine histogram (has_fine(v)): latency's slots below 512 us, then the tail.
inline stats::fine_histogram fine_of(const value &v) {
  stats::fine_histogram f;
  for (std::size_t s = 0; s <= RSCHED_HIST_LINEAR_SLOTS; ++s) {
    f.slots[s] = v.hist.slots[s];
  }
  if (v.tail) {
    for (std::size_t s = 0; s < v.tail->slots.size(); ++s) {
      f.slots[RSCHED_HIST_LINEAR_SLOTS + 1 + s] = v.tail->slots[s];
    }
  }
  return f;
}

// encode(fine_of(v)) into `out` (cleared first), reading only v's spans below 512 us and its
// tail: the writer's per-row encoding, without the 236-slot copy.
inline void encode_fine_into(const value &v, std::vector<std::uint8_t> &out) {
  out.clear();
  out.push_back(static_cast<std::uint8_t>(stats::layout::latency_fine));
  std::int64_t prev = -1;
  const auto put = [&](std::size_t s, std::uint64_t c) {
    stats::detail::put_varint(out,
                              static_cast<std::uint64_t>(static_cast<std::int64_t>(s) - prev - 1));
    stats::detail::put_varint(out, c);
    prev = static_cast<std::int64_t>(s);
  };
  for_each_span(v.spans, [&](std::size_t a, std::size_t b) {
    for (std::size_t s = a; s < b && s <= RSCHED_HIST_LINEAR_SLOTS; ++s) {
      if (v.hist.slots[s] != 0) {
        put(s, v.hist.slots[s]);
      }
    }
  });
  if (v.tail) {
    for (std::size_t s = 0; s < v.tail->slots.size(); ++s) {
      if (v.tail->slots[s] != 0) {
        put(RSCHED_HIST_LINEAR_SLOTS + 1 + s, v.tail->slots[s]);
      }
    }
  }
}

// a's tail += b's, before a.hist += b.hist: a stays fine when both were (has_fine), else it
// loses its tail (its latency slots from 512 us are then the only ones that hold those samples).
inline void add_tail(value &a, const value &b) {
  if (!b.tail && !has_log_slots(b)) {
    return; // nothing from 512 us up in b
  }
  if (!has_fine(a) || !has_fine(b)) {
    a.tail.reset();
    return;
  }
  if (!a.tail) {
    a.tail = base::make_cached<fine_tail>();
  }
  for (std::size_t s = 0; s < a.tail->slots.size(); ++s) {
    a.tail->slots[s] += b.tail->slots[s];
  }
}

// Whether two values of one thread hold the same latency counts from 512 us (then their tails
// are equal too: the kernel counts a sample in both).
inline bool same_log_slots(const value &a, const value &b) {
  unsigned differ = 0;
  for (std::size_t s = RSCHED_HIST_LINEAR_SLOTS + 1; s < RSCHED_HIST_SLOTS; ++s) {
    differ |= static_cast<unsigned>(a.hist.slots[s] != b.hist.slots[s]);
  }
  return differ == 0;
}

// The values of every metric of scope S, indexed by metric id, each histogram in its layout.
// Sparse: a value takes memory only once something writes it (a value is ~620 bytes, and a
// thread uses two or three of the nine metrics: at 10,000 threads the dense array was 56 MB
// per copy of the interval). Reading a metric nobody wrote gives an empty value of its layout;
// `has` tells the two apart without allocating (the non-const accessors allocate).
template <scope S> class set {
public:
  static constexpr std::size_t n = size(S);

  set() = default;
  set(const set &o) { copy_from(o); }
  set &operator=(const set &o) {
    if (this != &o) {
      copy_from(o);
    }
    return *this;
  }
  set(set &&) noexcept = default;
  set &operator=(set &&) noexcept = default;
  ~set() = default;

  [[nodiscard]] static constexpr bool holds(id m) { return of(m).where == S; }
  value &operator[](id m) { return at(index(m)); }
  const value &operator[](id m) const { return at(index(m)); }
  // The value at position i (metric entries<S>()[i]).
  value &at(std::size_t i) {
    if (!v_[i]) {
      v_[i] = base::make_cached<value>(blank(i));
    }
    return *v_[i];
  }
  [[nodiscard]] const value &at(std::size_t i) const { return v_[i] ? *v_[i] : blank(i); }
  // Whether position i was written (it may still hold an empty value).
  [[nodiscard]] bool has(std::size_t i) const { return v_[i] != nullptr; }
  // Forgets position i (reads give the empty value again).
  void reset(std::size_t i) { v_[i].reset(); }
  // Asks the CPU to fetch the written values' first cache lines (counts, spans) ahead of a
  // walk over many sets (a hint: nothing is read).
  void prefetch() const noexcept {
    for (const auto &x : v_) {
      if (x) {
        __builtin_prefetch(x.get());
      }
    }
  }
  // Exchanges position i with o's (the blocks change hands; nothing is copied).
  void swap_at(std::size_t i, set &o) noexcept { v_[i].swap(o.v_[i]); }
  [[nodiscard]] bool empty() const {
    for (const auto &x : v_) {
      if (x && !x->empty()) {
        return false;
      }
    }
    return true;
  }
  friend bool operator==(const set &a, const set &b) {
    for (std::size_t i = 0; i < n; ++i) {
      if ((a.has(i) || b.has(i)) && !(a.at(i) == b.at(i))) {
        return false;
      }
    }
    return true;
  }

private:
  static constexpr std::size_t index(id m) {
    // A metric of the other scope is a programming error: the ids of each scope are distinct.
    return static_cast<std::size_t>(m) - first(S);
  }
  // The empty value of position i, in its metric's layout.
  static const value &blank(std::size_t i) {
    static const std::array<value, n> blanks = [] {
      std::array<value, n> b{};
      for (std::size_t k = 0; k < n; ++k) {
        b[k].hist.kind = registry[first(S) + k].layout;
      }
      return b;
    }();
    return blanks[i];
  }
  void copy_from(const set &o) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!o.v_[i]) {
        v_[i].reset();
      } else if (v_[i]) {
        *v_[i] = *o.v_[i];
      } else {
        v_[i] = base::make_cached<value>(*o.v_[i]);
      }
    }
  }
  std::array<base::cached_ptr<value>, n> v_{}; // memory: base/block_cache.hpp
};

using thread_set = set<scope::thread>;
using cpu_set = set<scope::cpu>;

// a += b: samples, sum and histogram (of one metric: the layouts are equal); b's spans only.
// Without `tails`, a keeps none (a sum that never writes a latency_fine blob: the /metrics
// series, which live as long as rschedd and would wrap 32-bit counts).
inline void add(value &a, const value &b, bool tails = true) {
  if (tails) {
    add_tail(a, b);
  } else {
    a.tail.reset();
  }
  a.count += b.count;
  a.total += b.total;
  for_each_span(b.spans, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi; ++s) {
      a.hist.slots[s] += b.hist.slots[s];
    }
  });
  a.spans = static_cast<span_mask>(a.spans | b.spans);
}

// d's tail = cur's - prev's (cumulative kernel tails: 32-bit counters, modulo 2^32), or cur's
// when the histogram went down (`down`); none when no slot changed. d may be prev.
inline void delta_tail(value &d, const value &cur, const value &prev, bool down) {
  if (!cur.tail || (!down && prev.tail && same_log_slots(cur, prev))) {
    d.tail.reset(); // no sample from 512 us since prev (the common case: one compare pass)
    return;
  }
  if (!d.tail) {
    d.tail = base::make_cached<fine_tail>();
  }
  std::uint32_t any = 0;
  for (std::size_t s = 0; s < cur.tail->slots.size(); ++s) {
    const std::uint32_t p = down || !prev.tail ? 0 : prev.tail->slots[s];
    d.tail->slots[s] = static_cast<std::uint32_t>(cur.tail->slots[s] - p); // modulo 2^32
    any |= d.tail->slots[s];
  }
  if (any == 0) {
    d.tail.reset();
  }
}

// d = cur - prev for two cumulative values of one thread or CPU, field by field; d may be
// prev itself (the delta is then written over the baseline). Reads the spans of `cur` (and of
// prev's that cur has not); d's spans are the ones that changed. A count that went down counts
// from zero again; so does the histogram when a bucket went down (the counters were reset: a
// new thread behind a reused key), its delta then being `cur`'s.
inline void delta_into(value &d, const value &cur, const value &prev) {
  const auto sub = [](std::uint64_t c, std::uint64_t p) { return c >= p ? c - p : c; };
  bool down = false;
  // Slots of prev outside cur's spans are zero in cur: any count there went down.
  for_each_span(static_cast<span_mask>(prev.spans & ~cur.spans),
                [&](std::size_t lo, std::size_t hi) {
                  for (std::size_t s = lo; s < hi; ++s) {
                    down |= prev.hist.slots[s] != 0;
                  }
                });
  span_mask changed = 0;
  for_each_span(cur.spans, [&](std::size_t lo, std::size_t hi) {
    std::uint64_t any = 0;
    unsigned went_down = 0;
    for (std::size_t s = lo; s < hi; ++s) {
      const std::uint64_t c = cur.hist.slots[s];
      const std::uint64_t p = prev.hist.slots[s];
      went_down |= static_cast<unsigned>(c < p);
      any |= c ^ p;
    }
    down |= went_down != 0;
    changed = static_cast<span_mask>(changed | (any != 0 ? span_bit(lo) : 0));
  });
  d.count = sub(cur.count, prev.count);
  d.total = sub(cur.total, prev.total);
  delta_tail(d, cur, prev, down);
  if (down) {
    d.hist = cur.hist;
    d.spans = cur.spans;
    return;
  }
  d.hist.kind = cur.hist.kind;
  // d's slots outside cur's spans must be zero (prev's are, as checked above).
  if (&d != &prev) {
    for_each_span(static_cast<span_mask>(d.spans & ~cur.spans),
                  [&](std::size_t lo, std::size_t hi) {
                    for (std::size_t s = lo; s < hi; ++s) {
                      d.hist.slots[s] = 0;
                    }
                  });
  }
  for_each_span(cur.spans, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi; ++s) {
      d.hist.slots[s] = cur.hist.slots[s] - prev.hist.slots[s];
    }
  });
  d.spans = changed;
}

// a += b, metric by metric (layouts are equal by construction).
template <scope S> void accumulate(set<S> &a, const set<S> &b, bool tails = true) {
  for (std::size_t i = 0; i < set<S>::n; ++i) {
    if (b.has(i)) {
      add(a.at(i), b.at(i), tails);
    }
  }
}

} // namespace rsched::metrics
