#include "rsched/abi/sched_abi.h"
#include "rsched/bpf/program.hpp"

#include "rsched.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace rsched::bpf {
namespace {

bool g_verbose = false;

// libbpf's own messages (verifier logs included) only with options::verbose: by default a
// failure becomes one line of ours (load_error).
int libbpf_print(enum libbpf_print_level /*level*/, const char *format, va_list args) {
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

struct program::impl {
  std::unique_ptr<rsched_bpf, skel_deleter> skel;
  attach_mode mode = attach_mode::tp_btf;
  std::uint32_t groups = 0;
  std::vector<bpf_link *> links;
  bpf_link *iter_link = nullptr;
  std::vector<prog_info> progs;

  ~impl() {
    for (auto *l : links) {
      bpf_link__destroy(l);
    }
    if (iter_link != nullptr) {
      bpf_link__destroy(iter_link);
    }
  }
};

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
  auto p = std::make_unique<impl>();
  p->mode = opt.mode;
  p->groups = opt.groups;
  if (p->mode == attach_mode::automatic) {
    p->mode = kernel_supports_tp_btf() ? attach_mode::tp_btf : attach_mode::raw_tp;
  }

  p->skel.reset(rsched_bpf::open());
  if (!p->skel) {
    return make_error("opening the BPF object failed: " + errno_text(errno), errno);
  }
  auto *s = p->skel.get();
  s->rodata->groups = opt.groups;
  s->rodata->max_delay_ns = opt.max_delay_ns;
  s->rodata->max_sleep_ns = opt.max_sleep_ns;
  s->rodata->counter_mask = (opt.groups & RSCHED_G_PERF) != 0 ? opt.counter_mask : 0;
  for (std::size_t i = 0; i < opt.cpu_to_die.size(); ++i) {
    s->rodata->cpu_to_die[i] = opt.cpu_to_die[i];
    s->rodata->cpu_to_numa[i] = opt.cpu_to_numa[i];
  }

  // Which tracepoints the selected groups need. sched_switch is always attached: a thread's
  // final record is taken at its last switch. Unselected groups' programs are not loaded.
  const bool btf = p->mode == attach_mode::tp_btf;
  const bool wakeups = (opt.groups & (RSCHED_G_LATENCY | RSCHED_G_SLEEP)) != 0;
  const bool waking = (opt.groups & RSCHED_G_WAKING) != 0;
  const bool migration = (opt.groups & RSCHED_G_MIGRATION) != 0;
  struct variant_pair {
    bpf_program *btf_prog;
    bpf_program *raw_prog;
    bool wanted;
  };
  const variant_pair pairs[] = {
      {s->progs.sched_switch_btf, s->progs.sched_switch_raw, true},
      {s->progs.sched_wakeup_btf, s->progs.sched_wakeup_raw, wakeups},
      {s->progs.sched_wakeup_new_btf, s->progs.sched_wakeup_new_raw, wakeups},
      {s->progs.sched_waking_btf, s->progs.sched_waking_raw, waking},
      {s->progs.sched_migrate_task_btf, s->progs.sched_migrate_task_raw, migration},
  };
  std::vector<bpf_program *> to_attach;
  for (const auto &pr : pairs) {
    bpf_program__set_autoload(pr.btf_prog, btf && pr.wanted);
    bpf_program__set_autoload(pr.raw_prog, !btf && pr.wanted);
    if (pr.wanted) {
      to_attach.push_back(btf ? pr.btf_prog : pr.raw_prog);
    }
  }
  bpf_program__set_autoload(s->progs.dump_tasks, btf);
  const int ncpus = libbpf_num_possible_cpus();
  if (ncpus <= 0) {
    return make_error("cannot count possible CPUs");
  }
  if (int err = bpf_map__set_max_entries(
          s->maps.counters, static_cast<__u32>(ncpus) * static_cast<__u32>(RSCHED_COUNTER_SLOTS));
      err != 0) {
    return make_error("bad counter map size: " + errno_text(err), -err);
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
  return program(std::move(p));
}

attach_mode program::mode() const {
  return p_->mode;
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

void program::set_full_read(bool all) {
  if (p_->skel->bss != nullptr) {
    p_->skel->bss->iter_all = all;
  }
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
