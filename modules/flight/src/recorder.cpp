#include "rsched/flight/recorder.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/base/text.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace rsched::flight {

namespace {

std::int64_t clock_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// "20261127T150102.345Z": a capture file's time, UTC, sortable.
std::string file_time(std::int64_t real_ns) {
  const auto secs = static_cast<time_t>(real_ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
  return fmt::format("{}.{:03}Z", buf, (real_ns / 1'000'000) % 1000);
}

// The database's file name, or its stem (the name before issue 51).
std::string db_file_name(const std::filesystem::path &p, bool stem) {
  auto name = (stem ? p.stem() : p.filename()).string();
  return name.empty() ? "rsched" : name;
}

} // namespace

std::string captures_dir(const std::string &db_path) {
  const std::filesystem::path p(db_path);
  return (p.parent_path() / (db_file_name(p, false) + ".captures")).string();
}

std::string legacy_captures_dir(const std::string &db_path) {
  const std::filesystem::path p(db_path);
  return (p.parent_path() / (db_file_name(p, true) + ".captures")).string();
}

result<void> remove_capture(const std::string &file, const std::vector<std::string> &dirs) {
  const std::filesystem::path p(file);
  const std::string name = p.filename().string();
  const std::string dir = p.parent_path().string();
  const std::string shown = text::escape_for_terminal(file);
  if (name.empty() || name == "." || name == ".." ||
      std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) {
    return make_error(fmt::format("{} is not in the captures directory: not removed", shown));
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return {};
    }
    return make_error(fmt::format("{} not removed: its directory cannot be opened without "
                                  "following a link ({})",
                                  shown, std::strerror(errno)));
  }
  struct stat st {};
  std::string why;
  const bool seen = ::fstat(fd, &st) == 0;
  if (seen && (st.st_uid != ::geteuid() || (st.st_mode & 0022) != 0)) {
    why = fmt::format("its directory is not this user's private directory (owner uid {}, mode "
                      "{:o})",
                      st.st_uid, st.st_mode & 07777);
  } else if (!seen || (::unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT)) {
    why = std::strerror(errno); // from fstat, or from unlinkat
  }
  ::close(fd);
  if (!why.empty()) {
    return make_error(fmt::format("{} not removed: {}", shown, why));
  }
  return {};
}

recorder::recorder(program prog, recorder_config cfg)
    : prog_(std::move(prog)), cfg_(std::move(cfg)),
      win_(prog_.cpus(), cfg_.span_ns, cfg_.max_events_per_cpu), lost_seen_(prog_.cpus(), 0),
      coalescer_(static_cast<std::uint64_t>(cfg_.span_ns)) {
  if (cfg_.threshold_ns) {
    watch_.emplace(*cfg_.threshold_ns);
  }
  thread_ = std::thread([this] { run(); });
}

recorder::~recorder() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void recorder::request(std::string trigger, std::string reason,
                       std::optional<std::int64_t> annotation_id,
                       std::optional<std::int64_t> at_real_ns) {
  const auto asked = static_cast<std::uint64_t>(clock_ns(CLOCK_BOOTTIME));
  std::lock_guard lk(mu_);
  requests_.push_back({std::move(trigger), std::move(reason), annotation_id, at_real_ns, asked});
  ++unfinished_;
}

bool recorder::pending() const {
  std::lock_guard lk(mu_);
  return unfinished_ > 0;
}

void recorder::flush() {
  std::lock_guard lk(mu_);
  flush_ = true;
}

std::vector<capture_result> recorder::take_results() {
  std::lock_guard lk(mu_);
  return std::exchange(results_, {});
}

recorder::counters recorder::stats() const {
  std::lock_guard lk(mu_);
  return counters_;
}

void recorder::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::nanoseconds(cfg_.read_every_ns), [this] { return stop_; });
    if (stop_) {
      break;
    }
    lk.unlock();
    // The three clocks together: the round's boot time and the clock snapshot of its captures.
    trace::clock_snapshot now;
    now.boottime_ns = static_cast<std::uint64_t>(clock_ns(CLOCK_BOOTTIME));
    now.monotonic_ns = static_cast<std::uint64_t>(clock_ns(CLOCK_MONOTONIC));
    now.realtime_ns = static_cast<std::uint64_t>(clock_ns(CLOCK_REALTIME));
    round(now);
    lk.lock();
  }
}

void recorder::round(const trace::clock_snapshot &now) {
  const std::uint64_t upto = now.boottime_ns;
  std::uint64_t read = 0;
  prog_.read([&](std::uint32_t cpu, const rsched_flight_event &e) {
    pending_.push_back({cpu, e});
    ++read;
  });
  std::uint64_t lost = 0;
  for (std::uint32_t cpu = 0; cpu < prog_.cpus(); ++cpu) {
    const std::uint64_t l = prog_.lost(cpu);
    if (l > lost_seen_[cpu]) {
      lost += l - lost_seen_[cpu];
      lost_seen_[cpu] = l;
      win_.note_lost(cpu, upto);
    }
  }
  // The CPUs are read one after another: an event after `upto` on one CPU may precede one not
  // read yet on another, so those wait for the next round; the rest goes in time order.
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const pending_event &a, const pending_event &b) { return a.e.ts < b.e.ts; });
  const auto split = std::partition_point(pending_.begin(), pending_.end(),
                                          [&](const pending_event &p) { return p.e.ts <= upto; });
  std::uint64_t crossings = 0;
  std::uint64_t limited = 0;
  for (auto it = pending_.begin(); it != split; ++it) {
    win_.add(it->cpu, it->e);
    if (!watch_) {
      continue;
    }
    auto c = watch_->add(it->e);
    if (!c) {
      continue;
    }
    if (!armed_ && c->ts - last_crossing_ >= static_cast<std::uint64_t>(cfg_.rearm_ns)) {
      armed_ = true;
    }
    last_crossing_ = c->ts;
    if (!armed_) {
      continue; // the same episode
    }
    armed_ = false;
    ++crossings;
    if (last_fire_ && c->ts - *last_fire_ < static_cast<std::uint64_t>(cfg_.min_gap_ns)) {
      ++limited;
      continue;
    }
    last_fire_ = c->ts;
    capture_result r;
    r.trigger = "threshold";
    r.reason = fmt::format("tid {} ({}) waited {:.1f} ms", c->tid,
                           text::escape_for_terminal(std::string(trace::comm_view(c->comm))),
                           static_cast<double>(c->wait_ns) / 1e6);
    capture(c->ts, now, std::move(r), false);
  }
  pending_.erase(pending_.begin(), split);

  const auto real_minus_boot =
      static_cast<std::int64_t>(now.realtime_ns) - static_cast<std::int64_t>(now.boottime_ns);
  std::vector<due_request> due;
  bool flush = false;
  {
    std::lock_guard lk(mu_);
    counters_.events += read;
    counters_.lost += lost;
    counters_.held = win_.events();
    counters_.crossings += crossings;
    counters_.rate_limited += limited;
    flush = flush_;
    for (auto it = requests_.begin(); it != requests_.end();) {
      const std::int64_t at = it->at_real_ns ? *it->at_real_ns - real_minus_boot
                                             : static_cast<std::int64_t>(it->asked_boot_ns);
      if (at <= static_cast<std::int64_t>(upto)) {
        due.push_back({static_cast<std::uint64_t>(std::max<std::int64_t>(at, 0)), std::move(*it)});
        it = requests_.erase(it);
      } else {
        ++it;
      }
    }
  }
  serve(std::move(due), now, flush);
}

// The due requests in the order of their moments (coalesce.hpp): answered by a capture saved
// already, joined to the next window's, or saved now.
void recorder::serve(std::vector<due_request> due, const trace::clock_snapshot &now, bool flush) {
  std::stable_sort(due.begin(), due.end(),
                   [](const due_request &a, const due_request &b) { return a.at < b.at; });
  for (auto &d : due) {
    if (next_ && next_->end <= d.at) {
      take_follow_up(now);
    }
    const auto p = coalescer_.place(d.at);
    if (p.what == request_coalescer::placement::kind::next) {
      if (!next_) {
        next_ = follow_up{p.end, std::move(d.q), 0};
      } else {
        ++next_->more;
        std::lock_guard lk(mu_);
        ++counters_.coalesced;
      }
      continue;
    }
    capture_result r;
    r.trigger = std::move(d.q.trigger);
    r.reason = std::move(d.q.reason);
    r.annotation_id = d.q.annotation_id;
    if (p.what == request_coalescer::placement::kind::inside) {
      r.skipped = "its moment is inside a capture already saved (" + p.file + ")";
      {
        std::lock_guard lk(mu_);
        ++counters_.coalesced;
      }
      finish(std::move(r), 1);
    } else {
      capture(d.at, now, std::move(r), true);
    }
  }
  if (next_ && (next_->end <= now.boottime_ns || flush)) {
    take_follow_up(now);
  }
}

// The next window's capture, for the requests that joined it: ending at its end, or now when the
// run stops before.
void recorder::take_follow_up(const trace::clock_snapshot &now) {
  follow_up f = std::move(*next_);
  next_.reset();
  capture_result r;
  r.trigger = std::move(f.first.trigger);
  r.reason = std::move(f.first.reason);
  r.annotation_id = f.first.annotation_id;
  r.coalesced = f.more;
  capture(std::min(f.end, now.boottime_ns), now, std::move(r), true);
}

void recorder::capture(std::uint64_t to_boot, const trace::clock_snapshot &now, capture_result r,
                       bool request) {
  const std::size_t requests = request ? 1 + std::size_t{r.coalesced} : 0;
  auto snap = win_.snapshot(to_boot);
  const auto real_minus_boot =
      static_cast<std::int64_t>(now.realtime_ns) - static_cast<std::int64_t>(now.boottime_ns);
  r.start_ns = static_cast<std::int64_t>(snap.from_ts) + real_minus_boot;
  r.end_ns = static_cast<std::int64_t>(snap.to_ts) + real_minus_boot;
  r.events = snap.events.size();
  r.lossy_cpus = snap.lossy_cpus;
  if (snap.events.empty()) {
    // Nothing happened that the recorder saw (a mark's window before it started): a file would
    // hold nothing and push a real capture out of --flight-keep.
    r.skipped = "its window holds no scheduler events (before the recorder started?)";
    {
      std::lock_guard lk(mu_);
      ++counters_.empty;
    }
    finish(std::move(r), requests);
    return;
  }
  trace::trace_input in;
  in.events = snap.events;
  in.names = snap.names;
  in.lossy_cpus = snap.lossy_cpus;
  in.clocks = now;
  write(in, r);
  if (r.error.empty() && request) {
    coalescer_.saved(snap.from_ts, snap.to_ts, r.file);
  }
  finish(std::move(r), requests);
}

// The trace file: `r.file` and `r.bytes`, or `r.error`.
void recorder::write(const trace::trace_input &in, capture_result &r) {
  auto bytes = trace::encode(in);
  if (!bytes) {
    r.error = bytes.err().msg;
    return;
  }
  if (auto d =
          ensure_capture_dir(cfg_.dir, (cfg_.file_mode & 0040) != 0 ? cfg_.group : std::nullopt);
      !d) {
    r.error = d.err().msg;
    return;
  }
  std::uint64_t n = 0;
  {
    std::lock_guard lk(mu_);
    n = counters_.captures + 1;
  }
  const std::string path =
      fmt::format("{}/{}-{}-{}.pftrace", cfg_.dir, file_time(r.end_ns), r.trigger, n);
  safe_file::options o;
  o.mode = cfg_.file_mode;
  o.devices = false;
  if (auto w = write_file_safely(path, *bytes, o); !w) {
    r.error = w.err().msg;
    return;
  }
  if (cfg_.group) {
    (void)::lchown(path.c_str(), static_cast<uid_t>(-1), *cfg_.group);
  }
  r.file = path;
  r.bytes = bytes->size();
}

// The outcome goes to the results; `requests` requests are done with.
void recorder::finish(capture_result r, std::size_t requests) {
  std::lock_guard lk(mu_);
  if (r.error.empty() && r.skipped.empty()) {
    ++counters_.captures;
  }
  results_.push_back(std::move(r));
  unfinished_ -= std::min(unfinished_, requests);
}

result<void> ensure_capture_dir(const std::string &dir, std::optional<gid_t> group) {
  // As private as the database: 0750 with its group, 0700 without.
  const mode_t mode = 0700 | (group ? 0050 : 0);
  const std::string shown = text::escape_for_terminal(dir);
  if (::mkdir(dir.c_str(), mode) == 0) {
    if (group && ::lchown(dir.c_str(), static_cast<uid_t>(-1), *group) != 0) {
      return make_error(fmt::format("cannot give {} its group: {}", shown, std::strerror(errno)));
    }
    return {};
  }
  if (errno != EEXIST) {
    return make_error(fmt::format("cannot create {}: {}", shown, std::strerror(errno)));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return make_error(fmt::format("cannot read {}: {}", shown, std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return make_error(fmt::format("{} is not a directory (a link or a file there is not "
                                  "written through)",
                                  shown));
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 0022) != 0) {
    return make_error(fmt::format("{} is not this user's private directory (owner uid {}, mode "
                                  "{:o}): captures are not written into it",
                                  shown, st.st_uid, st.st_mode & 07777));
  }
  return {};
}

} // namespace rsched::flight
