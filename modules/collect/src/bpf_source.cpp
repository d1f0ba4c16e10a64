#include "rsched/bpf/program.hpp"
#include "rsched/collect/source.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <vector>

namespace rsched::collect {
namespace {

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// parse_iter_records, its CPU time added to `ns`.
result<void> parse_timed(std::span<const char> bytes, std::uint32_t groups,
                         std::vector<thread_sample> &out, std::int64_t &ns,
                         std::uint32_t blame_epoch = 0) {
  const std::int64_t t0 = thread_cpu_ns();
  auto r = parse_iter_records(bytes, groups, out, blame_epoch);
  ns += thread_cpu_ns() - t0;
  return r;
}

std::string errtext(int e) {
  return std::strerror(e < 0 ? -e : e);
}

// Reads every value of a map of `value_size`-byte values with the batch API (no deletes), or
// with lookup_and_delete when `drain`, appended to `out` back to back (the graveyard's value
// size is set at load, so values are bytes here, not ABI structs).
result<void> read_batch(int fd, std::size_t key_size, std::size_t value_size, bool drain,
                        std::vector<char> &out) {
  constexpr __u32 chunk = 256;
  std::vector<char> keys(chunk * key_size);
  std::vector<char> vals(chunk * value_size);
  __u32 batch = 0;
  bool first = true;
  bpf_map_batch_opts opts{}; // LIBBPF_OPTS, without its GNU statement expression
  opts.sz = sizeof(opts);
  for (;;) {
    __u32 count = chunk;
    const int rc = drain ? bpf_map_lookup_and_delete_batch(fd, first ? nullptr : &batch, &batch,
                                                           keys.data(), vals.data(), &count, &opts)
                         : bpf_map_lookup_batch(fd, first ? nullptr : &batch, &batch, keys.data(),
                                                vals.data(), &count, &opts);
    const int err = rc < 0 ? errno : 0;
    first = false;
    out.insert(out.end(), vals.begin(),
               vals.begin() + static_cast<std::ptrdiff_t>(count * value_size));
    if (rc < 0) {
      if (err == ENOENT) {
        return {}; // end of map
      }
      return make_error("reading a BPF map failed: " + errtext(err), err);
    }
  }
}

// Converts records read back to back: compact ones (tp_btf: the drain's, final and segment
// records) with parse_iter_records, whole rsched_task_records (raw_tp) with from_abi.
result<void> parse_records(const bpf::program &prog, std::span<const char> bytes,
                           std::vector<thread_sample> &out, std::int64_t &ns,
                           std::uint32_t blame_epoch = 0) {
  if (prog.mode() == bpf::attach_mode::tp_btf) {
    return parse_timed(bytes, prog.groups(), out, ns, blame_epoch);
  }
  out.reserve(out.size() + bytes.size() / sizeof(rsched_task_record));
  for (std::size_t off = 0; off + sizeof(rsched_task_record) <= bytes.size();
       off += sizeof(rsched_task_record)) {
    rsched_task_record rec;
    std::memcpy(&rec, bytes.data() + off, sizeof(rec));
    from_abi(rec, out.emplace_back(), blame_epoch);
  }
  return {};
}

// Reads the task iterator's records and converts them into `out` as they arrive: `buf` (kept by
// the caller, so its capacity is reused from read to read) holds one read's bytes plus the
// partial record a read may end in, never the whole output. A full read at 10,000 threads
// is tens of MB of records; buffered whole, that buffer stayed in the process for good.
result<void> read_iter(const bpf::program &prog, std::vector<char> &buf,
                       std::vector<thread_sample> &out, std::int64_t &parse_ns,
                       std::uint32_t blame_epoch) {
  auto fd = prog.open_task_iter();
  if (!fd) {
    return fd.err();
  }
  const std::size_t rec = rsched_iter_record_size(prog.groups());
  constexpr std::size_t chunk = std::size_t{1} << 16;
  if (buf.size() < chunk + rec) {
    buf.resize(chunk + rec);
  }
  std::size_t used = 0; // bytes of a record not complete yet, at the front of buf
  for (;;) {
    const ssize_t n = ::read(*fd, buf.data() + used, chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        continue;
      }
      const int e = errno;
      ::close(*fd);
      return make_error("reading the task iterator failed: " + errtext(e), e);
    }
    if (n == 0) {
      break;
    }
    used += static_cast<std::size_t>(n);
    const std::size_t whole = used - used % rec;
    if (whole > 0) {
      if (auto r = parse_timed(std::span<const char>(buf.data(), whole), prog.groups(), out,
                               parse_ns, blame_epoch);
          !r) {
        ::close(*fd);
        return r;
      }
      std::memmove(buf.data(), buf.data() + whole, used - whole);
      used -= whole;
    }
  }
  ::close(*fd);
  // Left over: a record cut short, which parse_iter_records reports.
  return parse_timed(std::span<const char>(buf.data(), used), prog.groups(), out, parse_ns,
                     blame_epoch);
}

} // namespace

result<snapshot> bpf_source::read() {
  snapshot snap;
  // Live records leave out the blame slots unchanged since this epoch's previous reads.
  const std::uint32_t epoch = prog_.begin_read();
  // Order matters: live first, then the graveyard. A thread that dies between the two reads is
  // missing from `live` and present in `dead` (fine); one that died before shows only as dead.
  if (prog_.mode() == bpf::attach_mode::tp_btf) {
    snap.full = full_every_ <= 1 || reads_ % full_every_ == 0;
    ++reads_;
    bool iterate = true;
    if (prog_.read_mode() == bpf::live_read::dirty_list) {
      // Every read ends an epoch, a full one too: the lists are reused every other epoch.
      auto changed = prog_.flip_dirty_list();
      if (!changed) {
        return changed.err();
      }
      // More changed threads than the list holds: only a read of every thread is complete.
      snap.full = snap.full || *changed > prog_.dirty_list_capacity();
      iterate = snap.full;
      // Drained either way: each entry holds a task reference, released here (a full read
      // emits nothing from the list).
      const std::uint32_t listed = std::min(*changed, prog_.dirty_list_capacity());
      if (!snap.full) {
        // One allocation for all batches: growing 3.6 KB samples batch by batch copied and
        // faulted in tens of MB per read at 10,000 threads.
        snap.live.reserve(listed);
      }
      for (std::uint32_t pos = 0; pos < listed; pos += prog_.drain_batch()) {
        auto bytes = prog_.drain_dirty_list(pos, !snap.full);
        if (!bytes) {
          return bytes.err();
        }
        if (auto r = parse_timed(*bytes, prog_.groups(), snap.live, snap.parse_cpu_ns, epoch); !r) {
          return r.err();
        }
      }
    }
    if (iterate) {
      prog_.set_full_read(snap.full);
      if (auto r = read_iter(prog_, iter_buf_, snap.live, snap.parse_cpu_ns, epoch); !r) {
        return r.err();
      }
    }
  } else {
    iter_buf_.clear();
    if (auto r = read_batch(prog_.task_hash_fd(), sizeof(__u32), sizeof(rsched_task_record), false,
                            iter_buf_);
        !r) {
      return r.err();
    }
    if (auto r = parse_records(prog_, iter_buf_, snap.live, snap.parse_cpu_ns, epoch); !r) {
      return r.err();
    }
  }
  // Read after the live threads, so a record counted here was inserted before this read. Final
  // records are laid out as segment records: compact in tp_btf mode, whole in raw_tp mode.
  if (const std::uint64_t buried = prog_.buried(); buried != buried_seen_) {
    buried_seen_ = buried;
    dead_buf_.clear();
    if (auto r = read_batch(prog_.graveyard_fd(), sizeof(rsched_task_key),
                            prog_.segment_record_size(), true, dead_buf_);
        !r) {
      return r.err();
    }
    if (auto r = parse_records(prog_, dead_buf_, snap.dead, snap.parse_cpu_ns); !r) {
      return r.err();
    }
  }
  // Segments last: every segment that a live or final record above counts was written before
  // that record was read, so it is in the buffer now.
  seg_buf_.clear();
  auto nseg = prog_.read_segments(seg_buf_);
  if (!nseg) {
    return nseg.err();
  }
  if (auto r = parse_records(prog_, seg_buf_, snap.segments, snap.parse_cpu_ns); !r) {
    return r.err();
  }

  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) {
    return make_error("cannot count possible CPUs");
  }
  const auto n = static_cast<std::size_t>(ncpus);
  static_assert(sizeof(rsched_cpu_stats) % 8 == 0, "per-CPU values are laid out 8-byte aligned");
  std::vector<rsched_cpu_stats> cpus(n);
  const __u32 zero = 0;
  if (bpf_map_lookup_elem(prog_.cpu_stats_fd(), &zero, cpus.data()) != 0) {
    const int e = errno;
    return make_error("reading per-CPU stats failed: " + errtext(e), e);
  }
  for (std::size_t i = 0; i < n; ++i) {
    cpu_sample &c = snap.cpus.emplace_back();
    c.cpu = static_cast<std::uint32_t>(i);
    from_abi(cpus[i], c.m);
  }
  std::vector<rsched_drop_stats> drops(n);
  if (bpf_map_lookup_elem(prog_.drops_fd(), &zero, drops.data()) != 0) {
    const int e = errno;
    return make_error("reading drop counters failed: " + errtext(e), e);
  }
  for (const auto &d : drops) {
    for (std::size_t i = 0; i < snap.drops.size(); ++i) {
      snap.drops[i] += d.counters[i];
    }
  }
  resolve_stacks(snap);
  return snap;
}

void bpf_source::resolve_stacks(snapshot &snap) {
  if ((prog_.groups() & RSCHED_G_WAKEUP) == 0) {
    return;
  }
  const auto add = [&](const std::vector<thread_sample> &ts) {
    for (const auto &t : ts) {
      for (const auto &b : t.c.wakeup.stacks) {
        if (b.stack == other_stack || snap.stacks.count(b.stack) != 0) {
          continue;
        }
        auto it = stacks_.find(b.stack);
        if (it == stacks_.end()) {
          // Once per stack and run: its addresses, hashed (FNV-1a: the same stack has the same
          // hash in every run of a boot), and its functions.
          auto ips = prog_.kernel_stack(b.stack);
          if (!ips) {
            continue; // counted under the id; not named
          }
          if (!syms_) {
            syms_ = kallsyms::load();
          }
          kernel_stack k;
          for (const std::uint64_t ip : ips->ips) {
            k.frames.push_back(syms_->name_of(ip));
          }
          // Without our own program's frames (its address changes with every start of rschedd,
          // and a user reads from the kernel's own path on).
          const std::size_t skip = kallsyms::tracing_frames(k.frames);
          k.frames.erase(k.frames.begin(), k.frames.begin() + static_cast<std::ptrdiff_t>(skip));
          k.hash = 1469598103934665603ULL;
          for (std::size_t i = skip; i < ips->ips.size(); ++i) {
            for (int s = 0; s < 64; s += 8) {
              k.hash = (k.hash ^ ((ips->ips[i] >> s) & 0xFF)) * 1099511628211ULL;
            }
          }
          // A long sleep's stack (not D): the state too, so that one path slept in two states
          // is two rows, and none is a D stack's.
          k.state = ips->state;
          if (k.state != RSCHED_SLEEP_D) {
            k.hash = (k.hash ^ (0x100U | k.state)) * 1099511628211ULL;
          }
          it = stacks_.emplace(b.stack, std::move(k)).first;
        }
        snap.stacks.emplace(it->first, it->second);
      }
    }
  };
  add(snap.live);
  add(snap.dead);
  add(snap.segments);
}

} // namespace rsched::collect
