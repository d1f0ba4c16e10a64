#pragma once
// Test doubles for the recorder's seams: a collect::source returning scripted snapshots, a
// clock whose waits are scripted, and a sink that keeps the rows.
#include "rsched/collect/source.hpp"
#include "rsched/rschedd/recorder.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rsched::rschedd::test {

// Returns the scripted snapshots in order; past the script, an error (a failed read).
class fake_source final : public collect::source {
public:
  explicit fake_source(std::vector<collect::snapshot> script) : script_(std::move(script)) {}
  result<collect::snapshot> read() override {
    if (reads_ >= script_.size()) {
      return make_error("fake source: no more snapshots");
    }
    return script_[reads_++];
  }
  [[nodiscard]] std::size_t reads() const { return reads_; }

private:
  std::vector<collect::snapshot> script_;
  std::size_t reads_ = 0;
};

// Monotonic time starts at 0 (UTC at 1,000 s). A wait ends exactly at its deadline unless the
// script says otherwise for that wait (numbered from 1): then it ends `late_ns` past it, or
// early with a stop request at `stop_at_ns`; the wall clock steps by `ns` during a wait of
// step_wall's; the system sleeps `ns` (the boot and wall clocks go on, the monotonic one does
// not) during a wait of suspend's. With boot_jitter(j), every read of the boot clock is late by
// 0, j or 2j ns in turn (a recorder preempted between two clocks' reads).
class fake_clock final : public recorder_clock {
public:
  std::int64_t mono_ns() override { return now_; }
  std::int64_t real_ns() override { return 1'000'000'000'000 + now_ + wall_ + asleep_; }
  std::int64_t boot_ns() override { return now_ + asleep_ + (boot_reads_++ % 3) * jitter_; }
  bool wait_until(std::int64_t deadline) override {
    ++waits_;
    if (auto w = wall_steps_.find(waits_); w != wall_steps_.end()) {
      wall_ += w->second;
    }
    if (auto z = suspends_.find(waits_); z != suspends_.end()) {
      asleep_ += z->second;
    }
    if (auto s = stop_at_.find(waits_); s != stop_at_.end()) {
      now_ = std::max(now_, s->second);
      return true;
    }
    now_ = std::max(now_, deadline);
    if (auto l = late_.find(waits_); l != late_.end()) {
      now_ += l->second;
    }
    return false;
  }
  void late(int wait, std::int64_t ns) { late_[wait] = ns; }
  void stop_at(int wait, std::int64_t mono_ns) { stop_at_[wait] = mono_ns; }
  void step_wall(int wait, std::int64_t ns) { wall_steps_[wait] = ns; }
  void suspend(int wait, std::int64_t ns) { suspends_[wait] = ns; }
  void boot_jitter(std::int64_t ns) { jitter_ = ns; }

private:
  std::int64_t now_ = 0;
  int waits_ = 0;
  std::map<int, std::int64_t> late_;
  std::map<int, std::int64_t> stop_at_;
  std::map<int, std::int64_t> wall_steps_;
  std::map<int, std::int64_t> suspends_;
  std::int64_t wall_ = 0;
  std::int64_t asleep_ = 0;
  std::int64_t jitter_ = 0;
  std::int64_t boot_reads_ = 0;
};

class vector_sink final : public interval_sink {
public:
  result<void> write(const store::interval_row &row) override {
    const std::size_t call = calls++;
    if (fail || (call >= fail_from && call < fail_until) ||
        (call >= fail_from2 && call < fail_until2)) {
      return make_error("disk full");
    }
    rows.push_back(row);
    return {};
  }
  result<void> maintain(std::int64_t now_real_ns) override {
    maintained.push_back(now_real_ns);
    return {};
  }
  result<void> note_lost(std::int64_t start_ns, std::int64_t end_ns, std::uint64_t intervals,
                         const std::string &error) override {
    if (fail_notes > 0) {
      --fail_notes;
      return make_error("still full");
    }
    lost.push_back({start_ns, end_ns, intervals, error});
    return {};
  }
  struct lost_span {
    std::int64_t start_ns;
    std::int64_t end_ns;
    std::uint64_t intervals;
    std::string error;
  };
  std::vector<store::interval_row> rows;
  std::vector<lost_span> lost;
  std::vector<std::int64_t> maintained; // each maintain()'s now
  bool fail = false;
  std::size_t calls = 0;
  std::size_t fail_from = 0; // writes number fail_from .. fail_until - 1 fail
  std::size_t fail_until = 0;
  std::size_t fail_from2 = 0; // and a second range
  std::size_t fail_until2 = 0;
  int fail_notes = 0; // so many note_lost calls fail first
};

} // namespace rsched::rschedd::test
