#include "rsched/bpf/program.hpp"
#include "rsched/collect/source.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <vector>

namespace rsched::collect {
namespace {

std::string errtext(int e) {
  return std::strerror(e < 0 ? -e : e);
}

// Reads every record of a map with the batch API (no deletes), or with lookup_and_delete when
// `drain`. Values must be trivially copyable ABI structs.
template <typename K, typename V> result<void> read_batch(int fd, bool drain, std::vector<V> &out) {
  constexpr __u32 chunk = 256;
  std::vector<K> keys(chunk);
  std::vector<V> vals(chunk);
  __u32 batch = 0;
  bool first = true;
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  for (;;) {
    __u32 count = chunk;
    const int rc = drain ? bpf_map_lookup_and_delete_batch(fd, first ? nullptr : &batch, &batch,
                                                           keys.data(), vals.data(), &count, &opts)
                         : bpf_map_lookup_batch(fd, first ? nullptr : &batch, &batch, keys.data(),
                                                vals.data(), &count, &opts);
    const int err = rc < 0 ? errno : 0;
    first = false;
    out.insert(out.end(), vals.begin(), vals.begin() + count);
    if (rc < 0) {
      if (err == ENOENT) {
        return {}; // end of map
      }
      return make_error("reading a BPF map failed: " + errtext(err), err);
    }
  }
}

result<void> read_iter(const bpf::program &prog, std::vector<thread_sample> &out) {
  auto fd = prog.open_task_iter();
  if (!fd) {
    return fd.err();
  }
  std::vector<char> buf;
  std::vector<char> chunk(1 << 16);
  for (;;) {
    const ssize_t n = ::read(*fd, chunk.data(), chunk.size());
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
    buf.insert(buf.end(), chunk.begin(), chunk.begin() + n);
  }
  ::close(*fd);
  constexpr std::size_t rec = sizeof(rsched_task_ident) + sizeof(rsched_task_state);
  static_assert(rec == sizeof(rsched_task_record));
  if (buf.size() % rec != 0) {
    return make_error("task iterator returned a partial record");
  }
  out.reserve(out.size() + buf.size() / rec);
  for (std::size_t off = 0; off < buf.size(); off += rec) {
    rsched_task_record r;
    std::memcpy(&r, buf.data() + off, rec);
    out.push_back(from_abi(r));
  }
  return {};
}

} // namespace

result<snapshot> bpf_source::read() {
  snapshot snap;
  // Order matters: live first, then the graveyard. A thread that dies between the two reads is
  // missing from `live` and present in `dead` (fine); one that died before shows only as dead.
  if (prog_.mode() == bpf::attach_mode::tp_btf) {
    snap.full = full_every_ <= 1 || reads_ % full_every_ == 0;
    ++reads_;
    prog_.set_full_read(snap.full);
    if (auto r = read_iter(prog_, snap.live); !r) {
      return r.err();
    }
  } else {
    std::vector<rsched_task_record> recs;
    if (auto r = read_batch<__u32>(prog_.task_hash_fd(), false, recs); !r) {
      return r.err();
    }
    for (const auto &rec : recs) {
      snap.live.push_back(from_abi(rec));
    }
  }
  std::vector<rsched_task_record> dead;
  if (auto r = read_batch<rsched_task_key>(prog_.graveyard_fd(), true, dead); !r) {
    return r.err();
  }
  for (const auto &rec : dead) {
    snap.dead.push_back(from_abi(rec));
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
    snap.cpus.push_back(
        {static_cast<std::uint32_t>(i), from_abi(cpus[i].delay), from_abi(cpus[i].idle)});
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
  return snap;
}

} // namespace rsched::collect
