// rschedd's user-space pipeline at scale, without BPF or root (issue 16): the recorder of rschedd
// (apps/rschedd: parse, delta, interval assembly, the store's write and maintenance) driven by a
// synthetic source that plays a machine of THREADS threads, each waking once a second, and a
// clock that moves one second per tick, so that an hour of the recorder's life takes a few
// minutes. What it leaves out is the kernel's side of a read (the dirty-list drain, ~8 ms at
// 10,000 threads: bench/big_server.sh measures that with real threads).
//
// Every interval each thread has one scheduling delay (log-normal around 6 us; with
// --long-pct P, P % of them uniform in 0.5-20 ms instead, which the kernel also counts in the
// delay's fine tail, issue 36) and one runqueue
// depth sample, a migration one second in ten, and (blame group) its wait charged to the
// workload's process, now and then to <idle>; the compact records are laid out as the drain
// writes them (sched_abi.h) and parsed by collect::parse_iter_records. Prints the recorder
// thread's CPU by stage (the --stats figures of rschedd) per block of intervals, so that a
// slowdown with the process's age shows, and the peak RSS.
//
//   build/bench/rsched-pipeline-bench [--threads N] [--intervals K] [--block B] [--db PATH]
//                                     [--groups latency,migration,blame] [--long-pct P]
// The database is a new file: by default in a directory of its own under /var/tmp, removed at
// the end; --db names a file that must not exist yet (and is kept).
#include "rsched/collect/snapshot.hpp"
#include "rsched/collect/source.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/recorder.hpp"
#include "rsched/store/writer.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace rsched;

namespace {

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A thread of the synthetic machine: its kernel state as the drain would copy it.
struct sim_thread {
  rsched_task_ident id{};
  std::uint64_t used = 0;
  rsched_delay_stats delay{};
  rsched_depth_stats depth{};
  rsched_fine_tail delay_tail{};
  std::uint64_t migrations[3] = {};
  rsched_blame blame{};
};

class synth_source final : public collect::source {
public:
  synth_source(std::size_t threads, std::uint32_t groups, int long_pct)
      : groups_(groups), long_pct_(long_pct), rng_(16) {
    threads_.resize(threads);
    for (std::size_t i = 0; i < threads; ++i) {
      sim_thread &t = threads_[i];
      t.id.tid = static_cast<std::uint32_t>(10'000 + i);
      t.id.tgid = 9'999;
      t.id.start_time = 1'000'000'000ULL + i * 1000;
      t.id.cgroup_id = 1;
      const auto name = fmt::format("worker-{}", i % 64);
      std::memcpy(t.id.comm, name.data(), std::min(name.size(), sizeof(t.id.comm) - 1));
    }
  }

  result<collect::snapshot> read() override {
    ++epoch_;
    collect::snapshot snap;
    snap.full = reads_++ % 60 == 0;
    std::lognormal_distribution<double> delay_ns(std::log(6000.0), 1.0);
    std::uniform_int_distribution<int> pct(0, 99);
    const std::size_t rec = rsched_iter_record_size(groups_);
    bytes_.resize(threads_.size() * rec);
    char *out = bytes_.data();
    for (auto &t : threads_) {
      // One wakeup: its delay, the runqueue depth it found, sometimes a migration.
      std::uint64_t d = static_cast<std::uint64_t>(delay_ns(rng_)) + 1;
      if (pct(rng_) < long_pct_) {
        d = 500'000 + rng_() % 19'500'000;
      }
      if (d >= 512'000) {
        const std::uint32_t i = rsched_hist_fine_slot(d) - RSCHED_HIST_LINEAR_SLOTS - 1;
        ++t.delay_tail.slots[i];
        t.used |= rsched_tail_bit(i);
      }
      const auto slot = rsched_hist_slot(d);
      ++t.delay.count;
      t.delay.total_ns += d;
      ++t.delay.slots[slot];
      t.used |= rsched_used_bit(RSCHED_USED_DELAY, slot);
      const auto depth = static_cast<std::uint64_t>(pct(rng_) % 4);
      ++t.depth.count;
      t.depth.total += depth;
      ++t.depth.slots[rsched_depth_slot(depth)];
      t.used |= rsched_used_bit(RSCHED_USED_DEPTH, static_cast<__u32>(depth));
      if (pct(rng_) < 10) {
        ++t.migrations[0];
      }
      // Blame: the wait behind the workload's own process (slot 0), sometimes <idle>.
      if (pct(rng_) < 80) {
        t.blame.gen[0] = 1;
        t.blame.tgid[0] = 9'999;
        t.blame.epoch[0] = static_cast<__u16>(epoch_);
        std::memcpy(t.blame.slot[0].comm, "threads", 7);
        t.blame.slot[0].wait_ns += d;
        ++t.blame.slot[0].waits;
        t.blame.policy[0] = 0;
        t.blame.prio1[0] = 121;
      } else {
        t.blame.idle_ns += d;
        ++t.blame.idle_waits;
      }
      t.blame.waiter_prio1 = 121;
      out = put(out, t);
    }
    const std::int64_t t0 = thread_cpu_ns();
    if (auto r = collect::parse_iter_records(bytes_, groups_, snap.live, epoch_); !r) {
      return r.err();
    }
    snap.parse_cpu_ns = thread_cpu_ns() - t0;
    for (std::uint32_t c = 0; c < 2; ++c) {
      rsched_cpu_stats s{};
      s.delay.count = epoch_ * threads_.size() / 2;
      s.delay.total_ns = s.delay.count * 6000;
      s.delay.slots[0] = s.delay.count;
      collect::cpu_sample cs;
      cs.cpu = c;
      collect::from_abi(s, cs.m);
      snap.cpus.push_back(std::move(cs));
    }
    return snap;
  }

private:
  // The thread's compact record (sched_abi.h), as the drain writes it.
  char *put(char *at, const sim_thread &t) const {
    const auto copy = [&at](const void *p, std::size_t n) {
      std::memcpy(at, p, n);
      at += n;
    };
    copy(&t.id, sizeof(t.id));
    copy(&t.used, sizeof(t.used));
    if ((groups_ & RSCHED_G_LATENCY) != 0) {
      copy(&t.delay, sizeof(t.delay));
      copy(&t.depth, sizeof(t.depth));
      copy(&t.delay_tail, sizeof(t.delay_tail));
    }
    if ((groups_ & RSCHED_G_MIGRATION) != 0) {
      copy(t.migrations, sizeof(t.migrations));
    }
    if ((groups_ & RSCHED_G_BLAME) != 0) {
      copy(&t.blame, sizeof(t.blame));
    }
    return at;
  }
  std::uint32_t groups_;
  int long_pct_;
  std::mt19937_64 rng_;
  std::vector<sim_thread> threads_;
  std::vector<char> bytes_;
  std::uint32_t epoch_ = 0;
  unsigned reads_ = 0;
};

// One second per tick, no waiting.
class sim_clock final : public rschedd::recorder_clock {
public:
  std::int64_t mono_ns() override { return mono_; }
  std::int64_t real_ns() override { return real0_ + mono_; }
  bool wait_until(std::int64_t deadline) override {
    mono_ = std::max(mono_, deadline);
    return false;
  }

private:
  std::int64_t mono_ = 0;
  std::int64_t real0_ = 1'795'000'000'000'000'000; // 2026-11-18
};

class writer_sink final : public rschedd::interval_sink {
public:
  explicit writer_sink(store::writer &w) : w_(w) {}
  result<void> write(const store::interval_row &row) override { return w_.write(row); }
  result<void> maintain(std::int64_t now) override {
    if (auto m = w_.maintain(now); !m) {
      return m.err();
    }
    return {};
  }

private:
  store::writer &w_;
};

// The --stats line's cpu_*_ms figures.
std::map<std::string, double> parse_stats(std::string_view line) {
  std::map<std::string, double> out;
  std::size_t pos = 0;
  while (pos < line.size()) {
    const std::size_t end = std::min(line.find(' ', pos), line.size());
    const std::string_view kv = line.substr(pos, end - pos);
    if (const auto eq = kv.find('='); eq != std::string_view::npos && kv.starts_with("cpu_")) {
      out[std::string(kv.substr(4, eq - 4))] = std::stod(std::string(kv.substr(eq + 1)));
    }
    pos = end + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int usage(const char *msg) {
  std::fprintf(stderr, "rsched-pipeline-bench: %s\n", msg);
  std::fprintf(stderr, "usage: rsched-pipeline-bench [--threads N] [--intervals K] [--block B] "
                       "[--db PATH] [--groups latency,migration,blame] [--long-pct P]\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  std::size_t threads = 10'000;
  long intervals = 600;
  long block = 60;
  std::string db; // default: a new directory under /var/tmp
  std::string groups_arg = "latency,migration,blame";
  int long_pct = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) {
      return usage("every option takes a value");
    }
    const std::string v = argv[++i];
    try {
      if (a == "--threads") {
        threads = std::stoul(v);
      } else if (a == "--intervals") {
        intervals = std::stol(v);
      } else if (a == "--block") {
        block = std::stol(v);
      } else if (a == "--db") {
        db = v;
      } else if (a == "--groups") {
        groups_arg = v;
      } else if (a == "--long-pct") {
        long_pct = std::stoi(v);
      } else {
        return usage("unknown option");
      }
    } catch (const std::exception &) {
      return usage("not a number");
    }
  }
  if (threads == 0 || intervals <= 0 || block <= 0) {
    return usage("threads, intervals and block must be positive");
  }
  if (long_pct < 0 || long_pct > 100) {
    return usage("--long-pct: a percentage, 0 to 100");
  }
  std::vector<std::string> tokens;
  for (std::size_t p = 0; p <= groups_arg.size();) {
    const std::size_t e = std::min(groups_arg.find(',', p), groups_arg.size());
    tokens.push_back(groups_arg.substr(p, e - p));
    p = e + 1;
  }
  auto sel = rschedd::parse_groups(tokens); // rschedd's -g
  constexpr std::uint32_t played = RSCHED_G_LATENCY | RSCHED_G_MIGRATION | RSCHED_G_BLAME;
  if (!sel || (sel->groups & ~played) != 0) {
    return usage("groups: latency, migration, blame (what the synthetic source plays)");
  }
  const std::uint32_t groups = sel->groups;

  std::filesystem::path own_dir;
  if (db.empty()) {
    std::string tmpl = "/var/tmp/rsched-pipeline-bench.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::fprintf(stderr, "rsched-pipeline-bench: cannot create a directory under /var/tmp: %s\n",
                   std::strerror(errno));
      return 1;
    }
    own_dir = tmpl;
    db = (own_dir / "bench.db").string();
  } else if (std::error_code ec; std::filesystem::exists(db, ec) || ec) {
    return usage("--db: the file exists (the bench writes a new database; give a new path)");
  }
  // rschedd's heap and recorder-thread settings (recorder.hpp).
  rschedd::tune_heap();
  rschedd::tune_recorder_thread();
  auto w = store::writer::open(db);
  if (!w) {
    std::fprintf(stderr, "rsched-pipeline-bench: %s\n", w.err().msg.c_str());
    return 1;
  }
  writer_sink sink(*w);
  synth_source src(threads, groups, long_pct);
  sim_clock clock;

  std::vector<std::map<std::string, double>> stats;
  rschedd::recorder_config cfg;
  cfg.per_second = (groups & RSCHED_G_MIGRATION) != 0;
  cfg.run_ns = intervals * 1'000'000'000LL;
  cfg.groups = groups;
  cfg.delay_clock = "monotonic";
  cfg.boot_id = "00000000-0000-4000-8000-000000000016";
  cfg.db_path = db;
  cfg.stats = true;
  cfg.note = [&stats](std::string_view s) {
    if (s.starts_with("rschedd-stats:")) {
      stats.push_back(parse_stats(s));
    }
  };
  cfg.cgroup_path = [](std::uint64_t) { return std::string("/"); };
  long ticks = 0;
  cfg.new_interval = [&ticks] { // rschedd's once-a-minute trim, on the simulated clock
    if (++ticks % 60 == 0) {
      rschedd::trim_heap();
    }
  };
  rschedd::recorder rec(cfg, src, clock, &sink);
  rec.setup();
  while (rec.step()) {
  }
  const int rc = rec.finish();
  if (!own_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(own_dir, ec);
  }
  if (rc != 0) {
    return 1;
  }

  fmt::print("# rsched-pipeline-bench --threads {} --intervals {} --groups {} --long-pct {}: {} "
             "intervals\n",
             threads, intervals, groups_arg, long_pct, stats.size());
  fmt::print("# recorder thread CPU per interval, median of each block of {} (ms); drain here "
             "is the synthetic source's own work\n",
             block);
  const char *stages[] = {"parse", "delta", "assemble", "write", "maint", "publish"};
  fmt::print("{:>9}", "intervals");
  for (const char *s : stages) {
    fmt::print(" {:>9}", s);
  }
  fmt::print(" {:>9} {:>9}\n", "sum", "sum mean");
  for (std::size_t b = 0; b < stats.size(); b += static_cast<std::size_t>(block)) {
    const std::size_t e = std::min(stats.size(), b + static_cast<std::size_t>(block));
    fmt::print("{:>9}", fmt::format("{}-{}", b, e - 1));
    std::vector<double> sums;
    for (std::size_t i = b; i < e; ++i) {
      double s = 0;
      for (const char *k : stages) {
        s += stats[i][std::string(k) + "_ms"];
      }
      sums.push_back(s);
    }
    for (const char *k : stages) {
      std::vector<double> v;
      for (std::size_t i = b; i < e; ++i) {
        v.push_back(stats[i][std::string(k) + "_ms"]);
      }
      fmt::print(" {:>9.2f}", median(v));
    }
    double mean = 0;
    for (double s : sums) {
      mean += s / static_cast<double>(sums.size());
    }
    fmt::print(" {:>9.2f} {:>9.2f}\n", median(sums), mean);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  fmt::print("# max RSS {:.1f} MiB (the synthetic machine's own state included: {:.1f} MiB)\n",
             static_cast<double>(ru.ru_maxrss) / 1024.0,
             static_cast<double>(threads * sizeof(sim_thread)) / (1024.0 * 1024.0));
  return 0;
}
