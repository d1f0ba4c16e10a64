#include "rsched/flight/program.hpp"

#include "flight.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace rsched::flight {

namespace {

bool g_verbose = false;

[[gnu::format(printf, 2, 0)]] int libbpf_print(enum libbpf_print_level /*level*/,
                                               const char *format, va_list args) {
  if (!g_verbose) {
    return 0;
  }
  return std::vfprintf(stderr, format, args);
}

struct skel_deleter {
  void operator()(flight_bpf *s) const { flight_bpf::destroy(s); }
};

std::string errno_text(int err) {
  return std::strerror(err < 0 ? -err : err);
}

} // namespace

struct program::impl {
  std::unique_ptr<flight_bpf, skel_deleter> skel;
  bpf::attach_mode mode = bpf::attach_mode::tp_btf;
  std::uint32_t cpus = 0;
  std::uint32_t slots = 0;
  std::vector<bpf_link *> links;
  std::vector<bpf::prog_info> progs;
  rsched_flight_event *ring = nullptr;
  std::size_t ring_len = 0;
  std::vector<std::uint64_t> next; // per CPU: the next index to read
  std::vector<std::uint64_t> lost;

  impl() = default;
  impl(const impl &) = delete;
  impl &operator=(const impl &) = delete;
  ~impl() {
    for (auto *l : links) {
      bpf_link__destroy(l);
    }
    if (ring != nullptr) {
      munmap(ring, ring_len);
    }
  }
};

program::program(std::unique_ptr<impl> p) : p_(std::move(p)) {}
program::program(program &&) noexcept = default;
program &program::operator=(program &&) noexcept = default;
program::~program() = default;

result<program> program::load(const load_options &opt) {
  g_verbose = opt.verbose;
  libbpf_set_print(libbpf_print);
  if (opt.slots_per_cpu < 2 || !std::has_single_bit(opt.slots_per_cpu)) {
    return make_error(fmt::format("flight ring slots per CPU must be a power of two (got {})",
                                  opt.slots_per_cpu));
  }
  auto p = std::make_unique<impl>();
  p->mode =
      opt.mode == bpf::attach_mode::automatic
          ? (bpf::kernel_supports_tp_btf() ? bpf::attach_mode::tp_btf : bpf::attach_mode::raw_tp)
          : opt.mode;
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0 || ncpus > RSCHED_FLIGHT_MAX_CPUS) {
    return make_error(fmt::format("the flight recorder supports 1-{} CPUs (this machine: {})",
                                  int{RSCHED_FLIGHT_MAX_CPUS}, ncpus));
  }
  p->cpus = static_cast<std::uint32_t>(ncpus);
  p->slots = opt.slots_per_cpu;
  p->skel.reset(flight_bpf::open());
  if (!p->skel) {
    const int e = errno;
    return make_error("opening the flight recorder's BPF object failed: " + errno_text(e), e);
  }
  auto *s = p->skel.get();
  s->rodata->slot_mask = p->slots - 1;
  s->rodata->nr_cpus = p->cpus;
  if (int err = bpf_map__set_max_entries(s->maps.ring, p->cpus * p->slots); err != 0) {
    return make_error("bad flight ring size: " + errno_text(err), -err);
  }
  const bool btf = p->mode == bpf::attach_mode::tp_btf;
  const std::pair<bpf_program *, bpf_program *> pairs[] = {
      {s->progs.fl_switch_btf, s->progs.fl_switch_raw},
      {s->progs.fl_waking_btf, s->progs.fl_waking_raw},
      {s->progs.fl_wakeup_new_btf, s->progs.fl_wakeup_new_raw},
      {s->progs.fl_migrate_btf, s->progs.fl_migrate_raw},
      {s->progs.fl_fork_btf, s->progs.fl_fork_raw},
      {s->progs.fl_exit_btf, s->progs.fl_exit_raw},
      {s->progs.fl_rename_btf, s->progs.fl_rename_raw},
  };
  for (const auto &[b, r] : pairs) {
    bpf_program__set_autoload(b, btf);
    bpf_program__set_autoload(r, !btf);
  }
  if (int err = flight_bpf::load(s); err != 0) {
    const int e = err < 0 ? -err : err;
    return make_error(fmt::format("loading the flight recorder's BPF programs failed: {}{}",
                                  errno_text(e),
                                  opt.verbose ? "" : " (RSCHED_BPF_VERBOSE=1 for the log)"),
                      e);
  }
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  p->ring_len = (sizeof(rsched_flight_event) * p->cpus * p->slots + page - 1) / page * page;
  void *m = mmap(nullptr, p->ring_len, PROT_READ, MAP_SHARED, bpf_map__fd(s->maps.ring), 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    return make_error("mapping the flight ring failed: " + errno_text(e), e);
  }
  p->ring = static_cast<rsched_flight_event *>(m);
  p->next.assign(p->cpus, 0);
  p->lost.assign(p->cpus, 0);
  for (const auto &[b, r] : pairs) {
    bpf_program *prog = btf ? b : r;
    bpf_link *link = bpf_program__attach(prog);
    if (link == nullptr) {
      const int e = errno;
      return make_error(
          fmt::format("attaching {} failed: {}", bpf_program__name(prog), errno_text(e)), e);
    }
    p->links.push_back(link);
    p->progs.push_back({bpf_program__name(prog), bpf_program__fd(prog)});
  }
  return program(std::move(p));
}

std::size_t
program::read(const std::function<void(std::uint32_t cpu, const rsched_flight_event &)> &f) {
  auto &im = *p_;
  std::size_t n = 0;
  const std::uint64_t slots = im.slots;
  for (std::uint32_t cpu = 0; cpu < im.cpus; ++cpu) {
    auto *head_p = &im.skel->bss->heads[std::size_t{cpu} * RSCHED_FLIGHT_HEAD_STRIDE];
    const std::uint64_t head = __atomic_load_n(head_p, __ATOMIC_ACQUIRE);
    std::uint64_t i = im.next[cpu];
    if (head > i + slots) {
      im.lost[cpu] += head - slots - i; // overwritten before this read
      i = head - slots;
    }
    const rsched_flight_event *base = im.ring + std::size_t{cpu} * slots;
    for (; i < head; ++i) {
      const rsched_flight_event *slot = base + (i & (slots - 1));
      const std::uint64_t seq0 = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
      if (seq0 < i + 1) {
        break; // reserved, not yet written: read it next time
      }
      rsched_flight_event copy;
      std::memcpy(&copy, slot, sizeof copy);
      std::atomic_thread_fence(std::memory_order_acquire);
      const std::uint64_t seq1 = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
      if (seq0 != i + 1 || seq1 != i + 1) {
        ++im.lost[cpu]; // overwritten while read
        continue;
      }
      f(cpu, copy);
      ++n;
    }
    im.next[cpu] = i;
  }
  return n;
}

std::uint32_t program::cpus() const {
  return p_->cpus;
}
std::uint32_t program::slots_per_cpu() const {
  return p_->slots;
}
std::uint64_t program::lost(std::uint32_t cpu) const {
  return cpu < p_->lost.size() ? p_->lost[cpu] : 0;
}
bpf::attach_mode program::mode() const {
  return p_->mode;
}
std::vector<bpf::prog_info> program::attached() const {
  return p_->progs;
}

} // namespace rsched::flight
