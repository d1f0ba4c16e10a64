// rschedd's live view thread and its non-blocking terminal (live.hpp).
#include "rsched/rschedd/live.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include <cerrno>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

namespace rsched::rschedd {

std::optional<terminal_out> terminal_out::open_stdout() {
  const int fd = ::open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return std::nullopt;
  }
  return terminal_out(fd);
}

terminal_out::~terminal_out() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

terminal_out::status terminal_out::write_all(std::string_view s,
                                             const std::atomic<bool> &stop) const {
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

std::pair<int, int> terminal_out::size() const {
  winsize ws{};
  if (::ioctl(fd_, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    return {ws.ws_row, ws.ws_col};
  }
  return {24, 80};
}

live_display::live_display(live_config cfg, terminal_out out)
    : cfg_(std::move(cfg)), out_(std::move(out)), window_(cfg_.window_ns) {
  thread_ = std::thread([this] { run(); });
}

live_display::~live_display() {
  {
    const std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  stopping_.store(true);
  cv_.notify_one();
  thread_.join();
  // A compact frame has no line end (it would scroll a full screen): end its last line, so that
  // what the shell or rschedd prints next ("rschedd: stopped after ...") starts a line of its own.
  if (line_open_) {
    (void)out_.write_all("\n", stopping_);
  }
}

void live_display::offer(live_frame &&f) {
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

void live_display::run() {
  // Lowest useful priority: the recorder (nice 0, or SCHED_FIFO when asked) and the workload come
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
    const auto st = out_.write_all(frame, stopping_);
    if (st == terminal_out::status::gone) {
      gone = true;
      line_open_ = false;
    } else {
      line_open_ = st == terminal_out::status::stopped || frame.back() != '\n';
    }
  }
}

} // namespace rsched::rschedd
