#include "rsched/abi/sched_abi.h"
#include "rsched/bpf/program.hpp"

#include "rsched.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string_view>
#include <unistd.h>

namespace rsched::bpf {
namespace {

bool g_verbose = false;

// libbpf's own messages (verifier logs included) only with options::verbose: by default a
// failure becomes one line of ours (load_error).
[[gnu::format(printf, 2, 0)]] int libbpf_print(enum libbpf_print_level /*level*/,
                                               const char *format, va_list args) {
  if (!g_verbose) {
    return 0;
  }
  return std::vfprintf(stderr, format, args);
}

struct skel_deleter {
  void operator()(rsched_bpf *s) const { rsched_bpf::destroy(s); }
};

std::string errno_text(int err) {
  err = err < 0 ? -err : err;
  return std::strerror(err);
}

// One line that says what is missing, for the load failures people actually hit.
error load_error(int err) {
  const int e = err < 0 ? -err : err;
  if (e == EPERM || e == EACCES) {
    if (geteuid() != 0) {
      return make_error(
          "loading BPF programs needs root (or CAP_BPF and CAP_PERFMON): " + errno_text(e), e);
    }
    return make_error("the kernel refused rsched's BPF programs (" + errno_text(e) +
                          "; run with RSCHED_BPF_VERBOSE=1 for the verifier log)",
                      e);
  }
  if (e == ENOENT || e == ESRCH) {
    return make_error("the kernel lacks a symbol or BTF type rsched needs (" + errno_text(e) +
                          "); a kernel with BTF (/sys/kernel/btf/vmlinux) is required",
                      e);
  }
  return make_error("loading BPF programs failed: " + errno_text(e), e);
}

} // namespace

const char *to_string(attach_mode m) {
  switch (m) {
  case attach_mode::automatic:
    return "auto";
  case attach_mode::tp_btf:
    return "tp_btf";
  case attach_mode::raw_tp:
    return "raw_tp";
  }
  return "?";
}

namespace {
// Whether vmlinux BTF names a kernel function (kfuncs are BTF FUNCs).
// Whether the kernel keeps struct sched_info, its per-task account of waits for the CPU (the
// BPF programs begin a wait where it does and recover events no program saw from it): then the
// calling thread, which has run, shows a non-zero pcount (the third field) in its schedstat.
// Before Linux 5.14 a kernel built with it kept it only with schedstats or delay accounting on,
// and printed "0 0 0" otherwise; without CONFIG_SCHED_INFO the file is missing.
bool kernel_keeps_sched_info() {
  std::ifstream in("/proc/thread-self/schedstat");
  std::uint64_t exec_ns = 0;
  std::uint64_t run_delay_ns = 0;
  std::uint64_t pcount = 0;
  return static_cast<bool>(in >> exec_ns >> run_delay_ns >> pcount) && pcount > 0;
}

// Where this CPU's preempt count and hrtimer bases lie relative to its runqueue: per-CPU
// variables (vmlinux BTF's .data..percpu gives each one's offset), so the distance is the same on
// every CPU. x86 only (elsewhere the count is not a per-CPU variable); nullopt when a variable is
// missing. Linux 6.2-6.14 keep the count in pcpu_hot.preempt_count, others in __preempt_count.
struct percpu_distances {
  std::int64_t preempt = 0;
  std::int64_t hrtimer = 0;
};

std::optional<percpu_distances> percpu_layout([[maybe_unused]] const btf *vmlinux) {
#if defined(__x86_64__)
  const int sec_id = btf__find_by_name_kind(vmlinux, ".data..percpu", BTF_KIND_DATASEC);
  if (sec_id <= 0) {
    return std::nullopt;
  }
  const btf_type *sec = btf__type_by_id(vmlinux, static_cast<__u32>(sec_id));
  std::optional<std::int64_t> rq;
  std::optional<std::int64_t> preempt;
  std::optional<std::int64_t> hrtimer;
  const btf_var_secinfo *v = btf_var_secinfos(sec);
  for (unsigned i = 0; i < btf_vlen(sec); ++i, ++v) {
    const btf_type *var = btf__type_by_id(vmlinux, v->type);
    const std::string_view name = btf__name_by_offset(vmlinux, var->name_off);
    const auto off = static_cast<std::int64_t>(v->offset);
    if (name == "runqueues") {
      rq = off;
    } else if (name == "hrtimer_bases") {
      hrtimer = off;
    } else if (name == "__preempt_count") {
      preempt = off;
    } else if (name == "pcpu_hot" && !preempt) {
      const btf_type *t = btf__type_by_id(vmlinux, var->type);
      const btf_member *m = btf_members(t);
      for (unsigned k = 0; btf_is_struct(t) && k < btf_vlen(t); ++k, ++m) {
        if (std::string_view(btf__name_by_offset(vmlinux, m->name_off)) == "preempt_count") {
          preempt = off + static_cast<std::int64_t>(btf_member_bit_offset(t, k) / 8);
        }
      }
    }
  }
  if (!rq || !preempt || !hrtimer) {
    return std::nullopt;
  }
  return percpu_distances{*preempt - *rq, *hrtimer - *rq};
#else
  return std::nullopt;
#endif
}

std::optional<percpu_distances> kernel_percpu_layout() {
  btf *vmlinux = btf__load_vmlinux_btf();
  if (libbpf_get_error(vmlinux) != 0 || vmlinux == nullptr) {
    return std::nullopt;
  }
  auto d = btf__find_by_name_kind(vmlinux, "bpf_rdonly_cast", BTF_KIND_FUNC) > 0
               ? percpu_layout(vmlinux)
               : std::nullopt;
  btf__free(vmlinux);
  return d;
}

bool kernel_has_func(const char *name) {
  btf *vmlinux = btf__load_vmlinux_btf();
  if (libbpf_get_error(vmlinux) != 0 || vmlinux == nullptr) {
    return false;
  }
  const bool has = btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) > 0;
  btf__free(vmlinux);
  return has;
}
} // namespace

bool kernel_supports_tp_btf() {
  btf *vmlinux = btf__load_vmlinux_btf();
  if (libbpf_get_error(vmlinux) != 0 || vmlinux == nullptr) {
    return false;
  }
  const bool has_tp =
      btf__find_by_name_kind(vmlinux, "btf_trace_sched_switch", BTF_KIND_TYPEDEF) > 0;
  btf__free(vmlinux);
  return has_tp && libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, nullptr) == 1;
}

const char *to_string(live_read r) {
  switch (r) {
  case live_read::automatic:
    return "auto";
  case live_read::dirty_list:
    return "dirty-list";
  case live_read::iterator:
    return "iterator";
  }
  return "?";
}

struct program::impl {
  std::unique_ptr<rsched_bpf, skel_deleter> skel;
  attach_mode mode = attach_mode::tp_btf;
  live_read read = live_read::iterator;
  std::uint32_t groups = 0;
  std::vector<bpf_link *> links;
  bpf_link *iter_link = nullptr;
  std::vector<prog_info> progs;
  // Dirty-list reads: capacity of one epoch's list, records per drain run, the mmapped output.
  std::uint32_t dirty_cap = 0;
  std::uint32_t drain_batch = 0;
  std::size_t record_size = 0;
  void *drain_out = nullptr;
  std::size_t drain_out_len = 0;
  ring_buffer *segments = nullptr;
  std::size_t segment_size = 0;
  std::vector<char> *segment_out = nullptr; // during read_segments
  std::size_t segment_count = 0;
  bool whole_process_moves = false;
  bool rq_clock = false;
  bool sched_info = false; // the kernel keeps struct sched_info (rodata sched_info_live)

  impl() = default;
  impl(const impl &) = delete;
  impl &operator=(const impl &) = delete;
  ~impl() {
    if (segments != nullptr) {
      ring_buffer__free(segments);
    }
    if (drain_out != nullptr) {
      munmap(drain_out, drain_out_len);
    }
    for (auto *l : links) {
      bpf_link__destroy(l);
    }
    if (iter_link != nullptr) {
      bpf_link__destroy(iter_link);
    }
  }
};

namespace {

// Records one dirty-list drain run emits (the drain_out map's entries): 1.9 MiB with the default
// groups (1,944-byte records), 6.7 MiB with all.
constexpr std::uint32_t drain_batch_records = 1024;

} // namespace

program::program(std::unique_ptr<impl> p) : p_(std::move(p)) {}
program::program(program &&) noexcept = default;
program &program::operator=(program &&) noexcept = default;
program::~program() = default;

result<program> program::load(const options &opt) {
  g_verbose = opt.verbose;
  libbpf_set_print(libbpf_print);

  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    return make_error("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing); rsched needs "
                      "CONFIG_DEBUG_INFO_BTF=y");
  }
  attach_mode mode = opt.mode;
  if (mode == attach_mode::automatic) {
    mode = kernel_supports_tp_btf() ? attach_mode::tp_btf : attach_mode::raw_tp;
  }
  const bool list = mode == attach_mode::tp_btf && opt.read != live_read::iterator;
  auto p = load_with(opt, mode, list);
  if (!p && list && opt.read == live_read::automatic) {
    // The list holds task references (referenced kptrs: Linux 6.x, and BTF type tags, which
    // clang < 15 does not emit) and the drain is a syscall program: without them, the task
    // iterator reads every thread.
    if (opt.verbose) {
      std::fprintf(stderr, "rsched: dirty-list reads unavailable (%s); using the task iterator\n",
                   p.err().msg.c_str());
    }
    p = load_with(opt, mode, false);
  }
  if (!p && list && opt.read == live_read::dirty_list) {
    return make_error("dirty-list reads could not be loaded (" + p.err().msg +
                          "); they need referenced kptrs (Linux 6.x) and rsched's BPF built with "
                          "clang >= 15; --live-read iterator works without",
                      p.err().errnum);
  }
  if (!p) {
    return p.err();
  }
  return program(std::move(*p));
}

result<std::unique_ptr<program::impl>> program::load_with(const options &opt, attach_mode mode,
                                                          bool list) {
  auto p = std::make_unique<impl>();
  p->mode = mode;
  p->read = list ? live_read::dirty_list : live_read::iterator;
  p->groups = opt.groups;

  p->skel.reset(rsched_bpf::open());
  if (!p->skel) {
    return make_error("opening the BPF object failed: " + errno_text(errno), errno);
  }
  auto *s = p->skel.get();
  s->rodata->groups = opt.groups;
  s->rodata->max_delay_ns = opt.max_delay_ns;
  s->rodata->max_sleep_ns = opt.max_sleep_ns;
  s->rodata->delay_rq_clock = opt.delay_rq_clock;
  p->sched_info = kernel_keeps_sched_info();
  s->rodata->sched_info_live = p->sched_info;
  s->rodata->test_hide_every = opt.test_hide_every;
  s->rodata->long_sleep_ns = (opt.groups & RSCHED_G_WAKEUP) != 0 ? opt.long_sleep_ns : 0;
  p->rq_clock = opt.delay_rq_clock;
  s->rodata->counter_mask = (opt.groups & RSCHED_G_PERF) != 0 ? opt.counter_mask : 0;
  for (std::size_t i = 0; i < opt.cpu_to_die.size(); ++i) {
    s->rodata->cpu_to_die[i] = opt.cpu_to_die[i];
    s->rodata->cpu_to_numa[i] = opt.cpu_to_numa[i];
  }

  // Which tracepoints the selected groups need. sched_switch is always attached: a thread's
  // final record is taken at its last switch. Unselected groups' programs are not loaded.
  const bool btf = p->mode == attach_mode::tp_btf;
  const bool wakeups = (opt.groups & (RSCHED_G_LATENCY | RSCHED_G_SLEEP | RSCHED_G_WAKEUP)) != 0;
  // The wakeup group finds a sleep's waker at sched_waking, in the waker's context (the sleep
  // ends at sched_wakeup).
  const bool waking = (opt.groups & (RSCHED_G_WAKING | RSCHED_G_WAKEUP)) != 0;
  const bool wakeup = (opt.groups & RSCHED_G_WAKEUP) != 0;
  // A wakeup's interrupt context is read from the preempt count and hrtimer bases where they
  // can be reached; else six interrupt tracepoints count it.
  const auto percpu = wakeup && !opt.irq_tracepoints ? kernel_percpu_layout() : std::nullopt;
  s->rodata->irq_from_preempt = percpu.has_value();
  s->rodata->pcpu_preempt_off = percpu ? percpu->preempt : 0;
  s->rodata->pcpu_hrtimer_off = percpu ? percpu->hrtimer : 0;
  const bool irq_tps = wakeup && !percpu;
  // Blame follows a waiting thread that is moved to another runqueue.
  const bool migration = (opt.groups & (RSCHED_G_MIGRATION | RSCHED_G_BLAME)) != 0;
  struct variant_pair {
    bpf_program *btf_prog;
    bpf_program *raw_prog;
    bool wanted;
  };
  // A rename (exec included), an exec and a cgroup move close a thread's attribution. Moving a
  // whole process reaches its other threads through the open-coded task iterator (Linux 6.7);
  // without it only the thread the kernel names (a process's leader) is seen.
  p->whole_process_moves = btf && kernel_has_func("bpf_iter_task_new");
  const variant_pair pairs[] = {
      {s->progs.sched_switch_btf, s->progs.sched_switch_raw, true},
      {s->progs.task_rename_btf, s->progs.task_rename_raw, true},
      {s->progs.sched_process_exec_btf, s->progs.sched_process_exec_raw, true},
      {s->progs.sched_wakeup_btf, s->progs.sched_wakeup_raw, wakeups},
      {s->progs.sched_wakeup_new_btf, s->progs.sched_wakeup_new_raw, wakeups},
      {s->progs.sched_waking_btf, s->progs.sched_waking_raw, waking},
      {s->progs.sched_migrate_task_btf, s->progs.sched_migrate_task_raw, migration},
      // Exits before entries: an entry seen always has its exit attached (and a context
      // switch settles the levels anyway: irq_settle in wakeup.bpf.h).
      {s->progs.irq_exit_btf, s->progs.irq_exit_raw, irq_tps},
      {s->progs.softirq_exit_btf, s->progs.softirq_exit_raw, irq_tps},
      {s->progs.hrtimer_exit_btf, s->progs.hrtimer_exit_raw, irq_tps},
      {s->progs.irq_entry_btf, s->progs.irq_entry_raw, irq_tps},
      {s->progs.softirq_entry_btf, s->progs.softirq_entry_raw, irq_tps},
      {s->progs.hrtimer_entry_btf, s->progs.hrtimer_entry_raw, irq_tps},
  };
  std::vector<bpf_program *> to_attach;
  for (const auto &pr : pairs) {
    bpf_program__set_autoload(pr.btf_prog, btf && pr.wanted);
    bpf_program__set_autoload(pr.raw_prog, !btf && pr.wanted);
    if (pr.wanted) {
      to_attach.push_back(btf ? pr.btf_prog : pr.raw_prog);
    }
  }
  bpf_program__set_autoload(s->progs.cgroup_attach_task_btf, p->whole_process_moves);
  bpf_program__set_autoload(s->progs.cgroup_attach_leader_btf, btf && !p->whole_process_moves);
  bpf_program__set_autoload(s->progs.cgroup_attach_task_raw, !btf);
  to_attach.push_back(!btf                     ? s->progs.cgroup_attach_task_raw
                      : p->whole_process_moves ? s->progs.cgroup_attach_task_btf
                                               : s->progs.cgroup_attach_leader_btf);
  bpf_program__set_autoload(s->progs.dump_tasks, btf);
  bpf_program__set_autoload(s->progs.dirty_flip, list);
  bpf_program__set_autoload(s->progs.dirty_drain, list);
  // Without the list its maps stay at one entry (the programs still name them).
  p->record_size = rsched_iter_record_size(opt.groups);
  p->segment_size = btf ? p->record_size : sizeof(rsched_task_record);
  s->rodata->segment_record_size = static_cast<__u32>(p->segment_size);
  if (int err = bpf_map__set_max_entries(s->maps.segments, opt.segment_buffer_bytes); err != 0) {
    return make_error("bad segment buffer size: " + errno_text(err), -err);
  }
  p->dirty_cap = list ? std::max<std::uint32_t>(opt.dirty_list_entries, 1) : 1;
  p->drain_batch = list ? drain_batch_records : 1;
  s->rodata->dirty_list = list;
  s->rodata->dirty_cap = p->dirty_cap;
  s->rodata->drain_batch = p->drain_batch;
  if (int err = bpf_map__set_max_entries(s->maps.dirty_tasks, 2 * p->dirty_cap); err != 0) {
    return make_error("bad dirty list size: " + errno_text(err), -err);
  }
  if (int err = bpf_map__set_value_size(s->maps.drain_out, static_cast<__u32>(p->record_size));
      err != 0) {
    return make_error("bad drain record size: " + errno_text(err), -err);
  }
  if (int err = bpf_map__set_max_entries(s->maps.drain_out, p->drain_batch); err != 0) {
    return make_error("bad drain batch: " + errno_text(err), -err);
  }
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) {
    return make_error("cannot count possible CPUs");
  }
  if (int err = bpf_map__set_max_entries(
          s->maps.counters, static_cast<__u32>(ncpus) * static_cast<__u32>(RSCHED_COUNTER_SLOTS));
      err != 0) {
    return make_error("bad counter map size: " + errno_text(err), -err);
  }
  // Blame's coarse record of older runners (~21 KB a level per CPU): one level entry without it.
  if (int err = bpf_map__set_max_entries(
          s->maps.epochs,
          (opt.groups & RSCHED_G_BLAME) != 0 ? static_cast<__u32>(RSCHED_BLAME_LEVELS) : 1U);
      err != 0) {
    return make_error("bad blame epoch map size: " + errno_text(err), -err);
  }
  // The wakeup group's stacks of D sleeps (6.8 MB: 16,384 + 8,192 stacks of 32 frames; a new
  // stack whose hash bucket is taken in both maps is not stored, and its sleeps go to
  // <other>): one entry each without it.
  if (int err = bpf_map__set_max_entries(s->maps.kstacks, wakeup ? 16384U : 1U); err != 0) {
    return make_error("bad stack map size: " + errno_text(err), -err);
  }
  if (int err = bpf_map__set_max_entries(s->maps.kstacks_alt, wakeup ? 8192U : 1U); err != 0) {
    return make_error("bad stack map size: " + errno_text(err), -err);
  }
  // ... and of long sleeps (2.1 MB: 8,192 stacks; preallocated, as hash maps are).
  const bool long_sleeps = wakeup && opt.long_sleep_ns != 0;
  if (int err = bpf_map__set_max_entries(s->maps.kstacks_sleep, long_sleeps ? 8192U : 1U);
      err != 0) {
    return make_error("bad stack map size: " + errno_text(err), -err);
  }
  // Only the state map of the chosen mode is created.
  bpf_map__set_autocreate(s->maps.task_state, btf);
  bpf_map__set_autocreate(s->maps.task_hash, !btf);
  bpf_map__set_autocreate(s->maps.zero_record, !btf);
  if (int err = bpf_map__set_max_entries(s->maps.task_hash, opt.task_hash_entries); err != 0) {
    return make_error("bad task map size: " + errno_text(err), -err);
  }
  if (int err = bpf_map__set_max_entries(s->maps.graveyard, opt.graveyard_entries); err != 0) {
    return make_error("bad graveyard map size: " + errno_text(err), -err);
  }
  // Final records are the size of a segment record: compact in tp_btf mode (a third of a whole
  // one with the default groups, in the copy an exit makes and in the preallocated map).
  if (int err = bpf_map__set_value_size(s->maps.graveyard, static_cast<__u32>(p->segment_size));
      err != 0) {
    return make_error("bad graveyard record size: " + errno_text(err), -err);
  }

  if (int err = rsched_bpf::load(s); err != 0) {
    return load_error(err);
  }
  for (const auto &c : opt.counter_fds) {
    const __u32 key = c.cpu * RSCHED_COUNTER_SLOTS + c.slot;
    const auto value = static_cast<__u32>(c.fd);
    if (c.slot >= RSCHED_COUNTER_SLOTS ||
        bpf_map_update_elem(bpf_map__fd(s->maps.counters), &key, &value, BPF_ANY) != 0) {
      const int e = errno;
      return make_error(fmt::format("installing perf counter (cpu {}, slot {}) failed: {}", c.cpu,
                                    c.slot, errno_text(e)),
                        e);
    }
  }

  auto attach = [&](bpf_program *prog) -> result<void> {
    bpf_link *link = bpf_program__attach(prog);
    if (link == nullptr) {
      const int e = errno;
      return make_error(
          fmt::format("attaching {} failed: {}", bpf_program__name(prog), errno_text(e)), e);
    }
    p->links.push_back(link);
    p->progs.push_back({bpf_program__name(prog), bpf_program__fd(prog)});
    return {};
  };
  for (auto *prog : to_attach) {
    if (auto r = attach(prog); !r) {
      return r.err();
    }
  }
  if (btf) {
    p->iter_link = bpf_program__attach_iter(s->progs.dump_tasks, nullptr);
    if (p->iter_link == nullptr) {
      const int e = errno;
      return make_error("attaching the task iterator failed: " + errno_text(e), e);
    }
  }
  p->segments = ring_buffer__new(
      bpf_map__fd(s->maps.segments),
      [](void *ctx, void *data, std::size_t size) -> int {
        auto *self = static_cast<impl *>(ctx);
        if (self->segment_out != nullptr && size == self->segment_size) {
          const auto *b = static_cast<const char *>(data);
          self->segment_out->insert(self->segment_out->end(), b, b + size);
          ++self->segment_count;
        }
        return 0;
      },
      p.get(), nullptr);
  if (p->segments == nullptr) {
    const int e = errno;
    return make_error("opening the segment buffer failed: " + errno_text(e), e);
  }
  if (list) {
    // Array values are laid out 8-byte aligned; every compact record size is a multiple of 8,
    // so the map's memory is the records back to back.
    static_assert(sizeof(rsched_task_ident) % 8 == 0 && RSCHED_ITER_LATENCY_BYTES % 8 == 0);
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    p->drain_out_len = (p->record_size * p->drain_batch + page - 1) / page * page;
    void *m = mmap(nullptr, p->drain_out_len, PROT_READ, MAP_SHARED | MAP_POPULATE,
                   bpf_map__fd(s->maps.drain_out), 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      return make_error("mapping the drain output failed: " + errno_text(e), e);
    }
    p->drain_out = m;
  }
  return p;
}

attach_mode program::mode() const {
  return p_->mode;
}
live_read program::read_mode() const {
  return p_->read;
}
std::uint32_t program::dirty_list_capacity() const {
  return p_->dirty_cap;
}
std::uint32_t program::drain_batch() const {
  return p_->drain_batch;
}

result<std::uint32_t> program::flip_dirty_list() {
  if (p_->read != live_read::dirty_list) {
    return make_error("the programs were loaded without the dirty list");
  }
  bpf_test_run_opts run{}; // LIBBPF_OPTS, without its GNU statement expression
  run.sz = sizeof(run);
  if (bpf_prog_test_run_opts(bpf_program__fd(p_->skel->progs.dirty_flip), &run) != 0) {
    const int e = errno;
    return make_error("ending a read epoch failed: " + errno_text(e), e);
  }
  return run.retval;
}

result<std::span<const char>> program::drain_dirty_list(std::uint32_t pos, bool emit) {
  if (p_->read != live_read::dirty_list) {
    return make_error("the programs were loaded without the dirty list");
  }
  rsched_drain_args args{pos, emit ? 1U : 0U};
  bpf_test_run_opts run{};
  run.sz = sizeof(run);
  run.ctx_in = &args;
  run.ctx_size_in = sizeof(args);
  if (bpf_prog_test_run_opts(bpf_program__fd(p_->skel->progs.dirty_drain), &run) != 0) {
    const int e = errno;
    return make_error("draining the dirty list failed: " + errno_text(e), e);
  }
  const std::size_t n = std::min<std::size_t>(run.retval, p_->drain_batch);
  return std::span<const char>(static_cast<const char *>(p_->drain_out), n * p_->record_size);
}
result<std::size_t> program::read_segments(std::vector<char> &out) {
  p_->segment_out = &out;
  p_->segment_count = 0;
  const int rc = ring_buffer__consume(p_->segments);
  p_->segment_out = nullptr;
  if (rc < 0) {
    return make_error("reading the segment buffer failed: " + errno_text(rc), -rc);
  }
  return p_->segment_count;
}
std::size_t program::segment_record_size() const {
  return p_->segment_size;
}
bool program::moves_whole_process() const {
  return p_->whole_process_moves;
}
bool program::delay_rq_clock() const {
  return p_->rq_clock;
}

bool program::sched_info_live() const {
  return p_->sched_info;
}
std::uint32_t program::groups() const {
  return p_->groups;
}
int program::graveyard_fd() const {
  return bpf_map__fd(p_->skel->maps.graveyard);
}
int program::cpu_stats_fd() const {
  return bpf_map__fd(p_->skel->maps.cpu_stats);
}
int program::drops_fd() const {
  return bpf_map__fd(p_->skel->maps.drops);
}
result<program::stack_trace> program::kernel_stack(std::uint32_t id) const {
  stack_trace t;
  if ((id & RSCHED_KSTACK_SLEEP) != 0) {
    const std::uint32_t key = id & RSCHED_KSTACK_SLEEP_KEY;
    rsched_kstack_sleep v{};
    if (bpf_map_lookup_elem(bpf_map__fd(p_->skel->maps.kstacks_sleep), &key, &v) != 0) {
      const int e = errno;
      return make_error(fmt::format("reading kernel stack {} failed: {}", id, errno_text(e)), e);
    }
    t.ips.assign(std::begin(v.ips), std::end(v.ips));
    t.state = static_cast<std::uint8_t>(v.state);
  } else {
    t.ips.resize(RSCHED_KSTACK_DEPTH);
    const bool alt = (id & RSCHED_KSTACK_ALT) != 0;
    const std::uint32_t key = id & ~RSCHED_KSTACK_ALT;
    if (bpf_map_lookup_elem(bpf_map__fd(alt ? p_->skel->maps.kstacks_alt : p_->skel->maps.kstacks),
                            &key, t.ips.data()) != 0) {
      const int e = errno;
      return make_error(fmt::format("reading kernel stack {} failed: {}", id, errno_text(e)), e);
    }
  }
  while (!t.ips.empty() && t.ips.back() == 0) {
    t.ips.pop_back();
  }
  return t;
}
int program::task_hash_fd() const {
  return bpf_map__fd(p_->skel->maps.task_hash);
}
std::vector<prog_info> program::attached() const {
  return p_->progs;
}

std::optional<program::run_totals> program::run_stats() const {
  std::ifstream in("/proc/sys/kernel/bpf_stats_enabled");
  int enabled = 0;
  if (!(in >> enabled) || enabled == 0) {
    return std::nullopt;
  }
  run_totals t;
  for (const auto &p : p_->progs) {
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(p.fd, &info, &len) != 0) {
      return std::nullopt;
    }
    t.run_time_ns += info.run_time_ns;
    t.run_cnt += info.run_cnt;
  }
  return t;
}

result<void> program::set_counter_fd(unsigned cpu, unsigned slot, int fd) {
  if (slot >= RSCHED_COUNTER_SLOTS) {
    return make_error("counter slot out of range");
  }
  const __u32 key = cpu * RSCHED_COUNTER_SLOTS + slot;
  const __u32 value = static_cast<__u32>(fd);
  if (bpf_map_update_elem(bpf_map__fd(p_->skel->maps.counters), &key, &value, BPF_ANY) != 0) {
    const int e = errno;
    return make_error(fmt::format("installing perf counter (cpu {}, slot {}) failed: {}", cpu, slot,
                                  errno_text(e)),
                      e);
  }
  return {};
}

std::uint64_t program::buried() const {
  if (p_->skel->bss == nullptr) {
    return 0;
  }
  return __atomic_load_n(&p_->skel->bss->buried, __ATOMIC_ACQUIRE);
}

void program::set_full_read(bool all) {
  if (p_->skel->bss != nullptr) {
    p_->skel->bss->iter_all = all;
  }
}

std::uint32_t program::begin_read() {
  if (p_->skel->bss != nullptr) {
    return __atomic_add_fetch(&p_->skel->bss->blame_epoch, 1, __ATOMIC_SEQ_CST);
  }
  return 0;
}

result<int> program::open_task_iter() const {
  if (p_->iter_link == nullptr) {
    return make_error("no task iterator in raw_tp mode");
  }
  const int fd = bpf_iter_create(bpf_link__fd(p_->iter_link));
  if (fd < 0) {
    const int e = errno;
    return make_error("creating a task iterator failed: " + errno_text(e), e);
  }
  return fd;
}

} // namespace rsched::bpf
