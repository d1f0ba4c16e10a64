#pragma once
// The kernel's sched_ext state, read from sysfs (<root>/kernel/sched_ext: `state`, `enable_seq`,
// and `root/ops`, the loaded BPF scheduler's name, present while one is loaded). Tests point it
// at a fake tree; this project's kernel has no sched_ext.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace rsched::collect {

struct sched_ext_state {
  std::string state; // "enabled", "disabled", "enabling", "disabling" (as the kernel says)
  std::string ops;   // the BPF scheduler's name ("scx_lavd_1.0.6_..."), "" none loaded
  std::int64_t enable_seq = 0; // BPF schedulers enabled since boot (0 when the kernel has none)
  friend bool operator==(const sched_ext_state &, const sched_ext_state &) = default;
};

// nullopt when the kernel has no sched_ext (no <sysfs_root>/kernel/sched_ext directory). Each
// value is a file's text without its trailing newline, exact bytes otherwise (ops is whatever
// name the scheduler gave itself). A missing `enable_seq` (older kernels) reads 0 and a
// missing `root/ops` none; a missing `state`, a file that cannot be read, or an enable_seq that
// is not a number is an error naming the path.
result<std::optional<sched_ext_state>>
read_sched_ext(const std::filesystem::path &sysfs_root = "/sys");

} // namespace rsched::collect
