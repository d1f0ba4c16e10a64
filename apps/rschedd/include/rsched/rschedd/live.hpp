#pragma once
// rschedd's live view, on a thread of its own so that recording never waits for it.
//
// The recorder hands over each interval's rows once they are written (a move, under a mutex held
// only for a queue push) and goes back to recording. The display thread folds them into its own
// bounded state (the compact window, or upstream's cumulative tables bounded by bound_threads),
// renders, and writes to the terminal through a non-blocking file description of its own: a
// paused terminal (a stopped tmux, Ctrl-S, a slow ssh link) holds up only the display, which
// drops the frames it could not show and says how many. The thread runs at a low priority (nice
// 10, SCHED_OTHER) so that rendering never competes with the recorder or the workload.
#include "rsched/rschedd/compact.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/model.hpp"
#include "rsched/rschedd/render.hpp"
#include "rsched/store/records.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace rsched::rschedd {

enum class view_kind {
  compact, // default on a terminal: one screen, the last few seconds, worst first
  tables,  // upstream rsched's tables, cumulative since start
};

// The terminal, written without ever blocking: a file description of our own (reopened through
// /proc/self/fd/1) in O_NONBLOCK mode, so the shell's description of the same terminal keeps its
// flags.
class terminal_out {
public:
  // nullopt when stdout cannot be reopened (then there is no live view).
  static std::optional<terminal_out> open_stdout();
  explicit terminal_out(int fd) : fd_(fd) {}
  terminal_out(terminal_out &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  terminal_out &operator=(terminal_out &&) = delete;
  terminal_out(const terminal_out &) = delete;
  terminal_out &operator=(const terminal_out &) = delete;
  ~terminal_out();

  enum class status { written, stopped, gone };

  // Writes all of `s`, waiting for the terminal in slices of 100 ms so that `stop` is honoured
  // within that; `gone` when the terminal is closed or fails (no more frames are tried).
  status write_all(std::string_view s, const std::atomic<bool> &stop) const;

  // The terminal's size (rows, columns); 24 x 80 when it cannot tell.
  [[nodiscard]] std::pair<int, int> size() const;

private:
  int fd_ = -1;
};

// One recorded interval for the display.
struct live_frame {
  store::interval_row row;                    // as written
  std::optional<std::string> schedstat_table; // rendered by the schedstat module, if any
  compact_header header;                      // the recorder's own state
};

struct live_config {
  view_kind view = view_kind::compact;
  render_options ropt;
  filter filt;
  bool ipc = false;
  std::vector<std::string> event_names;
  std::int64_t window_ns = 5'000'000'000; // compact: the sliding window
  std::size_t max_threads = 16384;        // tables: threads kept in the cumulative tables
  std::size_t max_queued = 4;             // intervals waiting for the display before it skips
};

class live_display {
public:
  live_display(live_config cfg, terminal_out out);
  live_display(const live_display &) = delete;
  live_display &operator=(const live_display &) = delete;
  // Stops the thread within ~100 ms, whatever the terminal is doing (a frame being written to a
  // paused terminal is abandoned), then ends the last frame's line.
  ~live_display();

  // Never blocks on the display: when it is `max_queued` intervals behind, the oldest waiting
  // one is dropped (counted, and shown on the next frame).
  void offer(live_frame &&f);

private:
  void run();

  live_config cfg_;
  terminal_out out_;
  model model_;           // tables view
  compact_window window_; // compact view
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<live_frame> queue_;
  std::uint64_t skipped_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopping_{false};
  bool line_open_ = false; // the last frame written ends inside a line (display thread, then dtor)
  std::thread thread_;
};

} // namespace rsched::rschedd
