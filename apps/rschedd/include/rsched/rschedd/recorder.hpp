#pragma once
// rschedd's recorder: reads a collect::source on a grid of ticks, sums the ticks into intervals
// (rsched::record) and hands each interval to a sink (the store writer) and to the live display.
// Time, the source and the sink are seams, so tests drive it without root or BPF
// (tests/rschedd/recorder_test.cpp).
//
// Ticks sit on a grid from setup(): one a second when per-second rates are recorded (migration,
// generic perf events), else one per interval. When the recorder wakes up past whole ticks (a
// stopped or starved process) the missed ticks are coalesced into the current interval, which is
// marked stalled when it lasted more than 1.5 intervals. A stop (signal, run time) ends the
// current interval early: it is written as the final interval.
#include "rsched/base/result.hpp"
#include "rsched/collect/delta.hpp"
#include "rsched/collect/source.hpp"
#include "rsched/record/interval.hpp"
#include "rsched/store/records.hpp"

#include <csignal>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::rschedd {

struct live_frame;

// The recorder's clocks and its wait for the next tick.
class recorder_clock {
public:
  virtual ~recorder_clock() = default;
  recorder_clock() = default;
  recorder_clock(const recorder_clock &) = delete;
  recorder_clock &operator=(const recorder_clock &) = delete;
  virtual std::int64_t mono_ns() = 0; // CLOCK_MONOTONIC: the tick grid, durations
  // CLOCK_REALTIME: interval start times, through its offset from boot_ns() read every interval
  virtual std::int64_t real_ns() = 0;
  // CLOCK_BOOTTIME: the monotonic clock with the time the system was suspended (an interval
  // that spans a suspend ends where the wall clock says, and the time asleep is a gap).
  virtual std::int64_t boot_ns() { return mono_ns(); }
  // Waits until mono_ns() >= deadline; true when the run is to stop (a signal), also when the
  // request arrived while the recorder was behind schedule.
  virtual bool wait_until(std::int64_t deadline_mono_ns) = 0;
};

// The real clocks; waits in sigtimedwait for `stop_signals` (which the caller has blocked).
// A signal given to on_signal (also blocked by the caller) runs its action instead of stopping
// the run (SIGUSR1: a flight recorder capture), and the wait goes on.
class system_clock final : public recorder_clock {
public:
  explicit system_clock(const sigset_t &stop_signals) : sigs_(stop_signals) {}
  std::int64_t mono_ns() override;
  std::int64_t real_ns() override;
  std::int64_t boot_ns() override;
  bool wait_until(std::int64_t deadline_mono_ns) override;
  void on_signal(int sig, std::function<void()> action);

private:
  // The signal was one of on_signal's: its action ran.
  bool act(int sig);
  sigset_t sigs_;
  std::vector<std::pair<int, std::function<void()>>> actions_;
};

// Where intervals go: the store writer in rschedd, a vector in tests.
class interval_sink {
public:
  virtual ~interval_sink() = default;
  interval_sink() = default;
  interval_sink(const interval_sink &) = delete;
  interval_sink &operator=(const interval_sink &) = delete;
  virtual result<void> write(const store::interval_row &row) = 0;
  // Bounded housekeeping after each write (rollups, retention); errors are reported once.
  virtual result<void> maintain(std::int64_t /*now_real_ns*/) { return {}; }
  // Once writing works again: the intervals of [start_ns, end_ns) were lost to failing writes,
  // the first with `error` (store::writer::note_write_failure). Tried again until it succeeds.
  virtual result<void> note_lost(std::int64_t /*start_ns*/, std::int64_t /*end_ns*/,
                                 std::uint64_t /*intervals*/, const std::string & /*error*/) {
    return {};
  }
};

// What the recorder did with an interval besides building it (for recorder_config::done).
struct interval_outcome {
  bool written = false;      // it reached the database (false with --no-db)
  bool write_failed = false; // writing it failed (the interval is a gap in the database)
  std::int64_t write_ns = 0; // the SQLite write (0 with --no-db)
};

struct recorder_config {
  std::int64_t interval_ns = 1'000'000'000;
  bool per_second = false;            // 1-s ticks for the per-second rate histograms
  std::optional<std::int64_t> run_ns; // stop after this long (--run-time)
  std::uint32_t groups = 0;           // enum rsched_group bits recorded
  bool ipc = false;
  int dies = 1;
  int numa_nodes = 1;
  std::vector<store::perf_event_def> events; // generic perf events, in counter order
  std::string delay_clock;                   // "monotonic" / "runqueue" with the latency group
  std::string boot_id;
  std::string db_path; // for notes and the live header; empty: not recording (--no-db)
  bool stats = false;  // an rschedd-stats line per interval (--stats)
  // One-line notes (stderr in rschedd; the default drops them).
  std::function<void(std::string_view)> note;
  // Cgroup id -> path; new_interval() is called before each interval's rows are built.
  std::function<std::string(std::uint64_t)> cgroup_path;
  std::function<void()> new_interval;
  // Adds what the recorder does not collect itself (perf counter times, schedstat, the
  // process's CPU time, RSS and BPF run time) to each interval before it is written.
  std::function<void(store::interval_row &)> enrich;
  // The display feed: each interval but the final one, after its write.
  std::function<void(live_frame &&)> show;
  // Every interval, the final one too, after its write and before the display feed (the
  // metrics endpoint).
  std::function<void(const store::interval_row &, const interval_outcome &)> done;
};

class recorder {
public:
  // `sink` null: nothing is written (--no-db).
  recorder(recorder_config cfg, collect::source &src, recorder_clock &clock, interval_sink *sink);

  // Starts the tick grid at the clock's now.
  void setup();
  // One tick: waits for its deadline (or a stop), reads the source, and when the read ends an
  // interval writes it and feeds the display. false: the run is over (stopped, run time
  // reached, or a failed read).
  bool step();
  // After the last step: the exit status (1 when a read failed or nothing could be written).
  int finish();

  [[nodiscard]] std::uint64_t intervals_written() const { return intervals_written_; }
  [[nodiscard]] std::uint64_t write_failures() const { return write_failures_; }

private:
  void end_interval(std::int64_t now_mono);
  // end_interval's parts: the interval's row (timed, marked, enriched); its write, which
  // starts or ends a span of lost intervals; the spans noted in the database once writing
  // works again; rollups and retention; the --stats line; the live view's frame.
  store::interval_row build_row(std::int64_t now_mono, std::int64_t now_boot);
  void write_row(const store::interval_row &row, interval_outcome &outcome);
  void note_lost_spans();
  void maintain(const store::interval_row &row, std::int64_t now_boot);
  void note_stats(const store::interval_row &row, std::int64_t write_ns) const;
  void show(store::interval_row &&row);
  // other() - base() now, from the narrowest of three bracketed reads.
  template <typename Base, typename Other> std::int64_t offset_of(Base base, Other other);
  // The wall clock's offset from the boot clock (real - boot) now.
  std::int64_t wall_offset();
  // Adopts the boot clock's lead over the monotonic clock when it grew by wall_step_min_ns or
  // more (a suspend).
  void follow_suspend();
  // Adopts the wall clock's current offset when it moved by wall_step_min_ns or more since the
  // last one, and keeps the step for the next interval written (interval_row::clock_steps).
  void follow_wall_clock();
  // The `now` retention runs on after an interval ending at `data_end` (UTC): the data's time,
  // never further on than the boot clock went since the first interval: a forward step of the
  // wall clock does not move it, a backward one does (the data is then earlier).
  std::int64_t maintenance_now(std::int64_t data_end, std::int64_t now_boot);
  void note(std::string_view s) const {
    if (cfg_.note) {
      cfg_.note(s);
    }
  }

  recorder_config cfg_;
  collect::source &src_;
  recorder_clock &clock_;
  interval_sink *sink_;
  collect::delta_tracker tracker_;
  record::interval_acc acc_;

  std::int64_t tick_ns_ = 0;
  std::int64_t ticks_per_interval_ = 1;
  std::int64_t mono0_ = 0;
  std::int64_t end_mono_ = 0;
  std::int64_t iv_mono_ = 0;
  // Offsets of the wall clock under 1 ms apart are one mapping (reading noise; NTP slews both
  // clocks alike): only a step moves the intervals.
  static constexpr std::int64_t wall_step_min_ns = 1'000'000;
  std::int64_t suspended_ = 0;   // boot - mono: the time spent suspended
  std::int64_t iv_boot_ = 0;     // the interval's start on the boot clock (mono + suspended_)
  std::int64_t wall_offset_ = 0; // real - boot, as the intervals use it
  std::vector<store::clock_step> steps_pending_; // steps not yet written with an interval
  // The first interval's end (UTC) and the boot clock then: maintenance_now's origin.
  std::optional<std::pair<std::int64_t, std::int64_t>> maint_anchor_;
  std::int64_t tick_ = 1;      // the deadline the next read is for
  std::int64_t last_tick_ = 0; // the deadline the previous read was for
  std::int64_t missed_ticks_ = 0;
  bool stop_ = false;
  int status_ = 0;
  bool reported_write_error_ = false;
  // The span lost to failing writes, still to be noted in the database (note_lost).
  struct lost_span {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::uint64_t intervals = 0;
    std::string error;
  };
  std::optional<lost_span> lost_;       // the span being lost now (writes still failing)
  std::vector<lost_span> lost_pending_; // ended spans not yet noted (oldest first, at most 64)
  bool reported_note_error_ = false;
  bool reported_maint_error_ = false;
  bool reported_stall_ = false;
  std::uint64_t intervals_written_ = 0;
  std::uint64_t write_failures_ = 0;
  std::int64_t read_ns_ = 0;  // reading the source and taking deltas, this interval
  std::int64_t drain_ns_ = 0; // of which reading the source
  unsigned full_reads_ = 0;   // reads of every thread
  std::optional<std::int64_t> maint_ns_;
  // The recorder thread's CPU time by stage this interval (--stats; bench/big_server.sh).
  struct stage_cpu {
    std::int64_t drain = 0;    // reading the kernel side (BPF syscalls), parse excluded
    std::int64_t parse = 0;    // records into samples
    std::int64_t delta = 0;    // delta tracker
    std::int64_t assemble = 0; // ticks into the interval, the interval into store rows
    std::int64_t extras = 0;   // enrich: pressure, schedstat, perf times, own usage
    std::int64_t write = 0;    // SQLite
    std::int64_t maint = 0;    // rollups and retention
    std::int64_t publish = 0;  // the metrics endpoint's copy, the live view's frame
  } cpu_;
};

// The heap as the recorder wants it, set once at start before any thread: every interval
// builds and frees a few MB of per-thread buffers, which glibc would hand back to the kernel
// each time (mmap for large blocks, trimming the heap top) and fault in again the next second
// (measured: a fifth of rschedd's CPU at 1000 threads). trim_heap() gives them back instead.
void tune_heap() noexcept;
// On the recorder's thread, before its first interval: its block caches keep enough freed metric
// values and blame slots for 10,000 threads (base/block_cache.hpp).
void tune_recorder_thread() noexcept;
// Once a minute, on the recorder's thread: frees the blocks its caches did not need in that
// minute and gives the heap's free pages back to the kernel (malloc_trim also releases free
// pages inside the heap, which tune_heap's trim threshold never does), so that what a burst of
// threads or a long maintenance step took does not stay resident for good.
void trim_heap() noexcept;

} // namespace rsched::rschedd
