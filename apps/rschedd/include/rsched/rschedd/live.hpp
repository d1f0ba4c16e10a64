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
#include "rsched/store/records.hpp"

#include "rsched/rschedd/compact.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/interval.hpp"
#include "rsched/rschedd/model.hpp"
#include "rsched/rschedd/render.hpp"

#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <fcntl.h>
#include <mutex>
#include <optional>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <string_view>
#include <thread>
#include <unistd.h>
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
  static std::optional<terminal_out> open_stdout() {
    const int fd = ::open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      return std::nullopt;
    }
    return terminal_out(fd);
  }
  explicit terminal_out(int fd) : fd_(fd) {}
  terminal_out(terminal_out &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  terminal_out &operator=(terminal_out &&) = delete;
  terminal_out(const terminal_out &) = delete;
  terminal_out &operator=(const terminal_out &) = delete;
  ~terminal_out() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }

  enum class status { written, stopped, gone };

  // Writes all of `s`, waiting for the terminal in slices of 100 ms so that `stop` is honoured
  // within that; `gone` when the terminal is closed or fails (no more frames are tried).
  status write_all(std::string_view s, const std::atomic<bool> &stop) const {
    while (!s.empty()) {
      const ssize_t n = ::write(fd_, s.data(), s.size());
      if (n > 0) {
        s.remove_prefix(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && errno != EAGAIN) {
        return status::gone;
      }
      pollfd p{fd_, POLLOUT, 0};
      for (;;) {
        if (stop.load(std::memory_order_relaxed)) {
          return status::stopped;
        }
        const int r = ::poll(&p, 1, 100);
        if (r > 0) {
          if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
            return status::gone;
          }
          break;
        }
        if (r < 0 && errno != EINTR) {
          return status::gone;
        }
      }
    }
    return status::written;
  }

  // The terminal's size (rows, columns); 24 x 80 when it cannot tell.
  [[nodiscard]] std::pair<int, int> size() const {
    winsize ws{};
    if (::ioctl(fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      return {ws.ws_row, ws.ws_col};
    }
    return {24, 80};
  }

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
  live_display(live_config cfg, terminal_out out)
      : cfg_(std::move(cfg)), out_(std::move(out)), window_(cfg_.window_ns) {
    thread_ = std::thread([this] { run(); });
  }
  live_display(const live_display &) = delete;
  live_display &operator=(const live_display &) = delete;
  // Stops the thread within ~100 ms, whatever the terminal is doing (a frame being written to a
  // paused terminal is abandoned).
  ~live_display() {
    {
      const std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    stopping_.store(true);
    cv_.notify_one();
    thread_.join();
  }

  // Never blocks on the display: when it is `max_queued` intervals behind, the oldest waiting
  // one is dropped (counted, and shown on the next frame).
  void offer(live_frame &&f) {
    {
      const std::lock_guard<std::mutex> g(mu_);
      if (queue_.size() >= cfg_.max_queued) {
        queue_.pop_front();
        ++skipped_;
      }
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }

private:
  void run() {
    // Lowest useful priority: the recorder (SCHED_FIFO when allowed) and the workload come
    // first. A thread inherits its creator's policy, so reset it explicitly.
    sched_param sp{};
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    std::uint64_t seq = 0;
    bool gone = false;
    for (;;) {
      std::deque<live_frame> batch;
      std::uint64_t skipped = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
        if (stop_) {
          return;
        }
        batch.swap(queue_);
        skipped = skipped_;
      }
      if (gone) {
        continue; // the terminal is closed: keep taking frames so the recorder never waits
      }
      for (auto &f : batch) {
        ++seq;
        if (cfg_.view == view_kind::tables) {
          fold_row(model_, f.row, cfg_.ipc, cfg_.event_names, seq);
          bound_threads(model_, cfg_.max_threads);
          model_.ipc_elapsed_s = static_cast<double>(f.row.dur_ns) / 1e9;
          if (f.schedstat_table) {
            model_.schedstat_table = std::move(f.schedstat_table);
          }
        } else {
          window_.push(f.row, cfg_.filt);
        }
      }
      std::string frame = "\x1b[H\x1b[2J"; // home, clear
      if (cfg_.view == view_kind::tables) {
        if (skipped > 0) {
          frame += fmt::format("(the display fell behind: {} intervals were recorded but not "
                               "shown here)\n",
                               skipped);
        }
        frame += render(model_, cfg_.ropt, cfg_.filt);
      } else {
        compact_header h = batch.back().header;
        h.display_skipped = skipped;
        const auto [rows, cols] = out_.size();
        frame += render_compact(window_, h, cfg_.ropt, cfg_.filt, rows, cols);
      }
      if (out_.write_all(frame, stopping_) == terminal_out::status::gone) {
        gone = true;
      }
    }
  }

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
  std::thread thread_;
};

} // namespace rsched::rschedd
