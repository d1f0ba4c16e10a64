// The per-interval additions of enrich.hpp (recorder_config::enrich).
#include "rsched/rschedd/enrich.hpp"

#include "rsched/collect/sched_ext.hpp"
#include "rsched/schedstat/render.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

namespace rsched::rschedd {

namespace {

std::int64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::optional<std::string> slurp(const std::filesystem::path &path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

void add_schedstat(store::interval_row &row, const schedstat::deltas &d) {
  for (const auto &c : d.cpus) {
    for (const auto &f : schedstat::cpu_field_layout) {
      const auto v = c.fields.*f.member;
      if (v != 0) {
        row.schedstat_cpu.push_back({c.cpu, std::string(f.name), static_cast<std::int64_t>(v)});
      }
    }
  }
  for (const auto &dom : d.domains) {
    for (const auto &f : dom.fields) {
      if (f.value != 0) {
        row.schedstat_domain.push_back({dom.cpu, dom.index, dom.name, std::string(f.name),
                                        static_cast<std::int64_t>(f.value)});
      }
    }
  }
}

void counter_times::add_to(store::interval_row &row) {
  for (const auto &set : sets_) {
    auto times = set.read_times();
    if (!times) {
      continue;
    }
    for (const auto &t : *times) {
      auto &prev = prev_[{t.cpu, t.slot}];
      row.counter_times.push_back(
          {t.cpu, t.name, t.enabled_ns - prev.first, t.running_ns - prev.second});
      prev = {t.enabled_ns, t.running_ns};
    }
  }
}

result<schedstat_feed> schedstat_feed::open(std::filesystem::path schedstat,
                                            std::filesystem::path sysctl) {
  // Switched on first: the kernel fills the counters only while it is on.
  bool restore = false;
  if (auto old = slurp(sysctl); old && !old->empty() && (*old)[0] == '0') {
    std::ofstream out(sysctl);
    out << "1";
    restore = static_cast<bool>(out);
  }
  auto first = schedstat::read(schedstat);
  if (!first) {
    if (restore) {
      std::ofstream out(sysctl);
      out << "0";
    }
    return first.err();
  }
  return schedstat_feed(std::move(schedstat), std::move(sysctl), restore, std::move(*first));
}

schedstat_feed::schedstat_feed(std::filesystem::path path, std::filesystem::path sysctl,
                               bool restore, schedstat::snapshot first)
    : path_(std::move(path)), sysctl_(std::move(sysctl)), restore_(restore),
      prev_(std::move(first)) {}

schedstat_feed::schedstat_feed(schedstat_feed &&o) noexcept
    : path_(std::move(o.path_)), sysctl_(std::move(o.sysctl_)),
      restore_(std::exchange(o.restore_, false)), prev_(std::move(o.prev_)),
      live_(std::move(o.live_)) {}

schedstat_feed::~schedstat_feed() {
  if (restore_) {
    std::ofstream out(sysctl_);
    out << "0";
  }
}

void schedstat_feed::rebase() {
  if (auto cur = schedstat::read(path_)) {
    prev_ = std::move(*cur);
  }
}

void schedstat_feed::add_to(store::interval_row &row) {
  auto cur = schedstat::read(path_);
  if (!cur) {
    return;
  }
  if (auto d = schedstat::delta(prev_, *cur)) {
    add_schedstat(row, *d);
    live_ = schedstat::render(*d);
  }
  prev_ = std::move(*cur);
}

std::vector<store::cgroup_cpu_row> pressure_rows(const pressure::readings &prev,
                                                 const pressure::readings &cur,
                                                 const std::vector<store::thread_row> &threads) {
  std::set<std::string> active;
  for (const auto &t : threads) {
    active.insert(t.cgroup);
  }
  const auto i64 = [](std::optional<std::uint64_t> v) -> std::optional<std::int64_t> {
    if (!v) {
      return std::nullopt;
    }
    return static_cast<std::int64_t>(std::min<std::uint64_t>(*v, INT64_MAX));
  };
  std::vector<store::cgroup_cpu_row> out;
  for (auto &[path, d] : pressure::interval_rows(prev, cur, active)) {
    out.push_back({path, i64(d.some_ns), i64(d.full_ns), i64(d.usage_ns), i64(d.periods),
                   i64(d.throttled), i64(d.throttled_ns)});
  }
  return out;
}

namespace {
std::int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
} // namespace

void fit_pressure(std::vector<store::cgroup_cpu_row> &rows, std::int64_t read_span_ns,
                  std::int64_t dur_ns) {
  if (read_span_ns <= 0 || dur_ns <= 0) {
    return;
  }
  const double scale = static_cast<double>(dur_ns) / static_cast<double>(read_span_ns);
  const auto fit = [&](std::optional<std::int64_t> &v) {
    if (v && *v > 0) {
      const double scaled = std::round(static_cast<double>(*v) * scale);
      v = scaled >= static_cast<double>(dur_ns) ? dur_ns : static_cast<std::int64_t>(scaled);
    }
  };
  for (auto &r : rows) {
    fit(r.some_ns);
    fit(r.full_ns);
  }
}

pressure_feed::pressure_feed(pressure::sources where, std::function<void(std::string_view)> note)
    : sampler_(std::move(where)), note_(std::move(note)) {
  rebase();
}

// The time of a read is taken as it starts, when the system's file is read.
void pressure_feed::rebase() {
  prev_read_ns_ = mono_ns();
  prev_ = sampler_.read();
}

void pressure_feed::add_to(store::interval_row &row) {
  const std::int64_t read_ns = mono_ns();
  auto cur = sampler_.read();
  if (sampler_.truncated() && !warned_truncated_ && note_) {
    note_("rschedd: more than " + std::to_string(sampler_.where().max_cgroups) +
          " cgroups: pressure and throttling are read for the shallowest ones only\n");
    warned_truncated_ = true;
  }
  row.cgroup_cpu = pressure_rows(prev_, cur, row.threads);
  fit_pressure(row.cgroup_cpu, read_ns - prev_read_ns_, row.dur_ns);
  prev_ = std::move(cur);
  prev_read_ns_ = read_ns;
}

std::optional<std::int64_t> self_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  std::int64_t size = 0;
  std::int64_t resident = 0;
  if (!(in >> size >> resident)) {
    return std::nullopt;
  }
  return resident * sysconf(_SC_PAGESIZE);
}

self_health::self_health(const bpf::program *prog) : prog_(prog), cpu_prev_(process_cpu_ns()) {
  // The programs were loaded by this process, so their run counts start at zero: the first
  // interval's samples (everything since attach) are matched by everything the programs ran.
  if (prog_ != nullptr && prog_->run_stats()) {
    bpf_prev_ = bpf::program::run_totals{};
  }
}

void self_health::add_to(store::interval_row &row) {
  const std::int64_t cpu_now = process_cpu_ns();
  row.cpu_ns = cpu_now - cpu_prev_;
  cpu_prev_ = cpu_now;
  row.rss_bytes = self_rss_bytes();
  if (prog_ == nullptr) {
    return;
  }
  const auto bpf_now = prog_->run_stats();
  if (bpf_now && bpf_prev_) {
    row.bpf_run_ns = static_cast<std::int64_t>(bpf_now->run_time_ns - bpf_prev_->run_time_ns);
    row.bpf_run_cnt = static_cast<std::int64_t>(bpf_now->run_cnt - bpf_prev_->run_cnt);
  }
  bpf_prev_ = bpf_now;
}

std::vector<store::cpu_topology_row> topology_rows(const topology::topology &t) {
  std::vector<store::cpu_topology_row> out;
  out.reserve(t.cpus.size());
  for (const auto &c : t.cpus) {
    out.push_back({c.cpu, c.core, c.package, c.die, c.llc, c.numa});
  }
  return out;
}

machine_feed::machine_feed(std::filesystem::path sysfs, std::function<void(std::string_view)> note)
    : sysfs_(std::move(sysfs)), note_(std::move(note)) {}

void machine_feed::add_to(store::interval_row &row) {
  // The online mask: a CPU that came or went changes it (a missing file reads as "").
  std::string online;
  {
    std::ifstream in(sysfs_ / "devices" / "system" / "cpu" / "online");
    std::getline(in, online);
  }
  if (!online_ || online != *online_) {
    auto t = topology::load(sysfs_);
    if (t) {
      rows_ = topology_rows(*t);
      row.topology = rows_;
      online_ = std::move(online);
      since_sent_ = 0;
      topology_noted_ = false;
    } else if (!topology_noted_ && note_) {
      note_("rschedd: CPU topology not recorded: " + t.err().msg + "\n");
      topology_noted_ = true;
    }
  } else if (++since_sent_ >= resend_every) {
    // Again now and then: the writer stores it only if the file lacks it (an interval whose
    // write failed took it along).
    row.topology = rows_;
    since_sent_ = 0;
  }
  auto scx = collect::read_sched_ext(sysfs_);
  if (!scx) {
    if (!sched_ext_noted_ && note_) {
      note_("rschedd: sched_ext state not recorded: " + scx.err().msg + "\n");
      sched_ext_noted_ = true;
    }
    return;
  }
  sched_ext_noted_ = false;
  if (*scx) {
    row.sched_ext = store::sched_ext_row{(*scx)->state, (*scx)->ops, (*scx)->enable_seq};
  }
}

} // namespace rsched::rschedd
