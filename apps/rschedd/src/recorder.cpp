#include "rsched/rschedd/recorder.hpp"

#include "rsched/base/block_cache.hpp"
#include "rsched/base/text.hpp"
#include "rsched/rschedd/live.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <malloc.h>
#include <utility>

namespace rsched::rschedd {

namespace {

std::int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::int64_t thread_cpu_ns() {
  return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

} // namespace

std::int64_t system_clock::mono_ns() {
  return clock_ns(CLOCK_MONOTONIC);
}

std::int64_t system_clock::real_ns() {
  return clock_ns(CLOCK_REALTIME);
}

std::int64_t system_clock::boot_ns() {
  return clock_ns(CLOCK_BOOTTIME);
}

void system_clock::on_signal(int sig, std::function<void()> action) {
  sigaddset(&sigs_, sig);
  actions_.emplace_back(sig, std::move(action));
}

bool system_clock::act(int sig) {
  for (const auto &[s, f] : actions_) {
    if (s == sig) {
      f();
      return true;
    }
  }
  return false;
}

bool system_clock::wait_until(std::int64_t deadline) {
  for (;;) {
    const std::int64_t now = mono_ns();
    if (now >= deadline) {
      // Behind schedule (a slow read or write, an overloaded or stopped process): a signal
      // that arrived meanwhile still ends the run at this tick, not after the missed ones.
      const timespec zero{};
      for (;;) {
        const int sig = sigtimedwait(&sigs_, nullptr, &zero);
        if (sig <= 0) {
          return false;
        }
        if (!act(sig)) {
          return true;
        }
      }
    }
    const std::int64_t left = deadline - now;
    const timespec ts{static_cast<time_t>(left / 1'000'000'000),
                      static_cast<long>(left % 1'000'000'000)};
    if (const int sig = sigtimedwait(&sigs_, nullptr, &ts); sig > 0 && !act(sig)) {
      return true;
    }
  }
}

recorder::recorder(recorder_config cfg, collect::source &src, recorder_clock &clock,
                   interval_sink *sink)
    : cfg_(std::move(cfg)), src_(src), clock_(clock), sink_(sink), acc_(cfg_.events.size()) {
  tick_ns_ = cfg_.per_second ? 1'000'000'000 : cfg_.interval_ns;
  ticks_per_interval_ = std::max<std::int64_t>(1, cfg_.interval_ns / tick_ns_);
}

void recorder::setup() {
  mono0_ = clock_.mono_ns();
  end_mono_ = cfg_.run_ns ? mono0_ + *cfg_.run_ns : INT64_MAX;
  iv_mono_ = mono0_;
  suspended_ = offset_of([this] { return clock_.mono_ns(); }, [this] { return clock_.boot_ns(); });
  iv_boot_ = mono0_ + suspended_;
  wall_offset_ = wall_offset();
  steps_pending_.clear();
  maint_anchor_.reset();
  tick_ = 1;
  last_tick_ = 0;
  missed_ticks_ = 0;
  stop_ = false;
}

bool recorder::step() {
  if (stop_) {
    return false;
  }
  const std::int64_t deadline = std::min(mono0_ + tick_ * tick_ns_, end_mono_);
  if (clock_.wait_until(deadline)) {
    stop_ = true;
  }
  if (deadline >= end_mono_) {
    stop_ = true;
  }
  // Behind by whole ticks (SIGSTOP, a starved or slow recorder): this read covers every tick
  // missed; they are coalesced into the current interval instead of being replayed as a run
  // of sub-millisecond intervals, and the interval is marked stalled.
  if (const std::int64_t due = (clock_.mono_ns() - mono0_) / tick_ns_; due > tick_) {
    missed_ticks_ += due - tick_;
    tick_ = due;
  }

  const std::int64_t read_start = clock_.mono_ns();
  const std::int64_t cpu0 = thread_cpu_ns();
  auto snap = src_.read();
  const std::int64_t now_mono = clock_.mono_ns();
  const std::int64_t cpu1 = thread_cpu_ns();
  drain_ns_ += now_mono - read_start;
  if (!snap) {
    note(fmt::format("rschedd: {}\n", snap.err().msg));
    status_ = 1;
    stop_ = true;
    return false;
  }
  full_reads_ += snap->full ? 1U : 0U;
  const std::int64_t parse = snap->parse_cpu_ns;
  auto d = tracker_.advance(std::move(*snap));
  *snap = {}; // freed here: counted with the delta
  const std::int64_t cpu2 = thread_cpu_ns();
  acc_.add_tick(std::move(d), cfg_.per_second);
  const std::int64_t cpu3 = thread_cpu_ns();
  cpu_.parse += parse;
  cpu_.drain += cpu1 - cpu0 - parse;
  cpu_.delta += cpu2 - cpu1;
  cpu_.assemble += cpu3 - cpu2;
  read_ns_ += clock_.mono_ns() - read_start;
  // The interval ends when this read passed one of its boundaries.
  const bool interval_end = stop_ || tick_ / ticks_per_interval_ > last_tick_ / ticks_per_interval_;
  last_tick_ = tick_;
  ++tick_;
  if (interval_end) {
    end_interval(now_mono);
  }
  return !stop_;
}

template <typename Base, typename Other> std::int64_t recorder::offset_of(Base base, Other other) {
  // The narrowest of three brackets of `base` reads around one of `other`: a read preempted
  // between the two clocks would otherwise look like a step of one against the other.
  std::int64_t best_gap = INT64_MAX;
  std::int64_t off = 0;
  for (int i = 0; i < 3 && best_gap > 20'000; ++i) {
    const std::int64_t m0 = base();
    const std::int64_t r = other();
    const std::int64_t m1 = base();
    if (m1 - m0 < best_gap) {
      best_gap = m1 - m0;
      off = r - (m0 + (m1 - m0) / 2);
    }
  }
  return off;
}

std::int64_t recorder::wall_offset() {
  return offset_of([this] { return clock_.boot_ns(); }, [this] { return clock_.real_ns(); });
}

void recorder::follow_suspend() {
  // The boot clock's lead over the monotonic one grows only while the system is suspended; an
  // interval's boot-clock time is its monotonic time plus that lead, so consecutive intervals
  // meet exactly (two clocks read apart would leave them overlapping or apart by the reads'
  // distance, milliseconds for a preempted recorder).
  const std::int64_t off =
      offset_of([this] { return clock_.mono_ns(); }, [this] { return clock_.boot_ns(); });
  if (off - suspended_ >= wall_step_min_ns) {
    suspended_ = off;
  }
}

void recorder::follow_wall_clock() {
  const std::int64_t off = wall_offset();
  const std::int64_t step = off - wall_offset_;
  if (step > -wall_step_min_ns && step < wall_step_min_ns) {
    return;
  }
  wall_offset_ = off;
  const std::int64_t at = clock_.real_ns();
  if (steps_pending_.size() == 64) { // writes failing for good: the oldest go, as lost spans do
    steps_pending_.erase(steps_pending_.begin());
  }
  steps_pending_.push_back({at, step});
  note(fmt::format("rschedd: the wall clock stepped {} by {:.3f} s; intervals follow it from "
                   "here (clock_steps, gaps())\n",
                   step > 0 ? "forward" : "back",
                   static_cast<double>(step > 0 ? step : -step) / 1e9));
}

std::int64_t recorder::maintenance_now(std::int64_t data_end, std::int64_t now_boot) {
  if (!maint_anchor_) {
    maint_anchor_ = std::pair{data_end, now_boot};
  }
  return std::min(maint_anchor_->first + (now_boot - maint_anchor_->second), data_end);
}

store::interval_row recorder::build_row(std::int64_t now_mono, std::int64_t now_boot) {
  if (cfg_.new_interval) {
    cfg_.new_interval();
  }
  const std::int64_t cpu0 = thread_cpu_ns();
  const auto no_path = [](std::uint64_t) { return std::string(); };
  auto row = record::to_row(std::move(acc_), cfg_.cgroup_path ? cfg_.cgroup_path : no_path,
                            {.ipc = cfg_.ipc,
                             .migration = (cfg_.groups & RSCHED_G_MIGRATION) != 0,
                             .dies = cfg_.dies,
                             .numa_nodes = cfg_.numa_nodes});
  // Timed by the wall clock's mapping as it is now: after a step (NTP correcting a clock that
  // was wrong at boot, an administrator's date -s) the intervals are where that time says.
  follow_wall_clock();
  row.start_ns = iv_boot_ + wall_offset_;
  row.dur_ns = now_mono - iv_mono_;
  row.clock_steps = steps_pending_;
  row.boot_id = cfg_.boot_id;
  row.groups = cfg_.groups;
  row.delay_clock = cfg_.delay_clock;
  row.final_interval = stop_;
  row.stalled = row.dur_ns > cfg_.interval_ns + cfg_.interval_ns / 2;
  if (row.stalled != reported_stall_) {
    if (row.stalled) {
      note(fmt::format("rschedd: the recorder fell behind: an interval of {:.1f} s (asked {} s), "
                       "{} missed ticks coalesced; marked stalled (health, gaps())\n",
                       static_cast<double>(row.dur_ns) / 1e9, cfg_.interval_ns / 1'000'000'000,
                       missed_ticks_));
    } else {
      note("rschedd: the recorder is on schedule again\n");
    }
    reported_stall_ = row.stalled;
  }
  missed_ticks_ = 0;
  row.events = cfg_.events;
  iv_mono_ = now_mono;
  iv_boot_ = now_boot;
  row.collect_ns = read_ns_;
  row.maint_ns = maint_ns_;
  const std::int64_t cpu1 = thread_cpu_ns();
  cpu_.assemble += cpu1 - cpu0;
  if (cfg_.enrich) {
    cfg_.enrich(row);
  }
  cpu_.extras += thread_cpu_ns() - cpu1;
  return row;
}

void recorder::write_row(const store::interval_row &row, interval_outcome &outcome) {
  if (auto w = sink_->write(row); !w) {
    outcome.write_failed = true;
    ++write_failures_;
    if (!reported_write_error_) {
      note(fmt::format("rschedd: writing interval failed: {}\n", w.err().msg));
      reported_write_error_ = true;
    }
    if (!lost_) {
      lost_ = lost_span{row.start_ns, row.start_ns, 0, w.err().msg};
    }
    lost_->end_ns = row.start_ns + row.dur_ns;
    ++lost_->intervals;
    return;
  }
  if (reported_write_error_) {
    note("rschedd: writing intervals again; the time in between is a gap\n");
  }
  reported_write_error_ = false;
  steps_pending_.clear(); // written with the interval
  ++intervals_written_;
  outcome.written = true;
  note_lost_spans();
}

void recorder::note_lost_spans() {
  // What was lost is said in the database, so that gaps() can tell a failed write from a
  // stopped recorder. A span ends with the first interval written again; spans not noted yet
  // are tried again after the next write (at most 64 kept; one still pending at exit is lost
  // with the process, and its time is then "not recording").
  if (lost_) {
    if (lost_pending_.size() == 64) {
      lost_pending_.erase(lost_pending_.begin());
    }
    lost_pending_.push_back(std::move(*lost_));
    lost_.reset();
  }
  std::size_t noted = 0;
  for (const auto &l : lost_pending_) {
    auto n = sink_->note_lost(l.start_ns, l.end_ns, l.intervals, l.error);
    if (!n) {
      if (!reported_note_error_) {
        note(fmt::format("rschedd: cannot note the lost intervals in the database (tried "
                         "again after the next write): {}\n",
                         n.err().msg));
        reported_note_error_ = true;
      }
      break;
    }
    ++noted;
  }
  if (noted > 0) {
    lost_pending_.erase(lost_pending_.begin(),
                        lost_pending_.begin() + static_cast<std::ptrdiff_t>(noted));
  }
  if (lost_pending_.empty()) {
    reported_note_error_ = false;
  }
}

void recorder::maintain(const store::interval_row &row, std::int64_t now_boot) {
  // Rollups and retention: bounded work per interval, errors reported once per episode (a full
  // disk fails here too; the next call retries). Retention's now: the data's own time, which a
  // step of the wall clock does not move on (a forward step of days for a minute must not
  // delete days of history).
  const std::int64_t m0 = clock_.mono_ns();
  if (auto m = sink_->maintain(maintenance_now(row.start_ns + row.dur_ns, now_boot)); !m) {
    if (!reported_maint_error_) {
      note(fmt::format("rschedd: {}\n", m.err().msg));
      reported_maint_error_ = true;
    }
  } else {
    reported_maint_error_ = false;
  }
  maint_ns_ = clock_.mono_ns() - m0;
}

void recorder::note_stats(const store::interval_row &row, std::int64_t write_ns) const {
  // The wall times first (bench/interval_cost.sh, daemon_cost.sh), then the recorder thread's
  // CPU time by stage (bench/big_server.sh). publish: this interval's copy for the metrics
  // endpoint, the previous one's live frame and freeing its rows (after this line).
  const auto ms = [](std::int64_t ns) { return static_cast<double>(ns) / 1e6; };
  note(fmt::format("rschedd-stats: threads={} read_ms={:.3f} write_ms={:.3f} maint_ms={:.3f} "
                   "rss_kb={} drain_ms={:.3f} full_reads={} cpu_drain_ms={:.3f} "
                   "cpu_parse_ms={:.3f} cpu_delta_ms={:.3f} cpu_assemble_ms={:.3f} "
                   "cpu_extras_ms={:.3f} cpu_write_ms={:.3f} cpu_maint_ms={:.3f} "
                   "cpu_publish_ms={:.3f}\n",
                   row.threads.size(), ms(read_ns_), ms(write_ns), ms(maint_ns_.value_or(0)),
                   row.rss_bytes.value_or(0) / 1024, ms(drain_ns_), full_reads_, ms(cpu_.drain),
                   ms(cpu_.parse), ms(cpu_.delta), ms(cpu_.assemble), ms(cpu_.extras),
                   ms(cpu_.write), ms(cpu_.maint), ms(cpu_.publish)));
}

void recorder::show(store::interval_row &&row) {
  live_frame f;
  f.header.end_ns = row.start_ns + row.dur_ns;
  f.header.dur_ns = row.dur_ns;
  f.header.recording = cfg_.db_path.empty() ? std::string("not recording (--no-db)")
                                            : "recording to " + cfg_.db_path;
  if (sink_ != nullptr) {
    f.header.intervals_written = intervals_written_;
  }
  f.header.write_failures = write_failures_;
  f.header.stalled = row.stalled;
  f.row = std::move(row);
  cfg_.show(std::move(f));
}

void recorder::end_interval(std::int64_t now_mono) {
  follow_suspend();
  const std::int64_t now_boot = now_mono + suspended_;
  auto row = build_row(now_mono, now_boot);
  interval_outcome outcome;
  if (sink_ != nullptr) {
    const std::int64_t cpu0 = thread_cpu_ns();
    const std::int64_t write_start = clock_.mono_ns();
    write_row(row, outcome);
    outcome.write_ns = clock_.mono_ns() - write_start;
    const std::int64_t cpu1 = thread_cpu_ns();
    cpu_.write += cpu1 - cpu0;
    maintain(row, now_boot);
    cpu_.maint += thread_cpu_ns() - cpu1;
  } else {
    steps_pending_.clear(); // --no-db: noted on stderr only
  }
  const std::int64_t cpu2 = thread_cpu_ns();
  if (cfg_.done) {
    cfg_.done(row, outcome);
  }
  cpu_.publish += thread_cpu_ns() - cpu2;
  if (cfg_.stats) {
    note_stats(row, outcome.write_ns);
  }
  read_ns_ = 0;
  drain_ns_ = 0;
  full_reads_ = 0;
  cpu_ = {};
  const std::int64_t cpu3 = thread_cpu_ns();
  if (cfg_.show && !stop_) {
    show(std::move(row));
  }
  acc_.clear();
  row = {}; // freed here, counted
  cpu_.publish += thread_cpu_ns() - cpu3;
}

int recorder::finish() {
  if (sink_ != nullptr && intervals_written_ == 0) {
    note(fmt::format("rschedd: nothing could be written to {}\n",
                     text::escape_for_terminal(cfg_.db_path)));
    status_ = 1;
  }
  note(fmt::format("rschedd: stopped after {:.1f} s\n",
                   static_cast<double>(clock_.mono_ns() - mono0_) / 1e9));
  return status_;
}

void tune_heap() noexcept {
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024 * 1024);
}

void tune_recorder_thread() noexcept {
  base::set_block_cache_cap(65536);
}

void trim_heap() noexcept {
  base::trim_block_caches();
  malloc_trim(0);
}

} // namespace rsched::rschedd
