#pragma once
// rsched::schedstat: /proc/schedstat as printed by the kernel's show_schedstat()
// (kernel/sched/stats.c, Documentation/scheduler/sched-stats.rst), versions 15, 16 and 17:
//
//   version N
//   timestamp <jiffies>
//   cpuN yld_count 0 sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time run_delay pcount
//   domainN <cpumask> <36 fields>          (v15, v16)
//   domainN <name> <cpumask> <45 fields>   (v17)
//
// Every field is labelled by the kernel's real layout. Upstream rsched shifts the CPU labels by
// one from index 1 on (it does not know about the legacy zero field) and never shows pcount; we
// depart from upstream there on purpose.
#include "rsched/base/result.hpp"

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::schedstat {

// Used when the text has no `version` line (upstream does the same).
inline constexpr int default_version = 15;
inline constexpr int min_version = 15;
inline constexpr int max_version = 17;

// The nine values of a `cpuN` line, in the kernel's order. Times are in nanoseconds.
struct cpu_fields {
  std::uint64_t yld_count = 0;      // sched_yield() calls
  std::uint64_t legacy_zero = 0;    // O(1)-scheduler array-expiry count, always printed as 0
  std::uint64_t sched_count = 0;    // schedule() calls
  std::uint64_t sched_goidle = 0;   // schedule() calls that left the CPU idle
  std::uint64_t ttwu_count = 0;     // try_to_wake_up() calls on this CPU
  std::uint64_t ttwu_local = 0;     // ... that woke a task on this same CPU
  std::uint64_t rq_cpu_time_ns = 0; // time spent running by tasks on this CPU
  std::uint64_t run_delay_ns = 0;   // time spent waiting to run by tasks on this CPU
  std::uint64_t pcount = 0;         // timeslices run on this CPU
  friend bool operator==(const cpu_fields &, const cpu_fields &) = default;
};

struct cpu_field_desc {
  std::string_view name;
  std::uint64_t cpu_fields::*member;
};

// Name and member of each `cpuN` value, in the kernel's print order (index i = i-th value).
inline constexpr std::array<cpu_field_desc, 9> cpu_field_layout{{
    {"yld_count", &cpu_fields::yld_count},
    {"legacy_zero", &cpu_fields::legacy_zero},
    {"sched_count", &cpu_fields::sched_count},
    {"sched_goidle", &cpu_fields::sched_goidle},
    {"ttwu_count", &cpu_fields::ttwu_count},
    {"ttwu_local", &cpu_fields::ttwu_local},
    {"rq_cpu_time_ns", &cpu_fields::rq_cpu_time_ns},
    {"run_delay_ns", &cpu_fields::run_delay_ns},
    {"pcount", &cpu_fields::pcount},
}};

// Names of the values of a `domainN` line of `version`, in the kernel's print order; empty for an
// unsupported version. Each load-balancing field is named `<field>_<idle|not_idle|newly_idle>`;
// the idle-type blocks are printed IDLE, NOT_IDLE, NEWLY_IDLE in v15 and NOT_IDLE, IDLE,
// NEWLY_IDLE from v16 on. Names follow the kernel's struct sched_domain (`lb_balanced`,
// `sbe_count`, `sbf_count`); upstream rsched spells them `lb_balance`, `sbe_cnt`, `sbf_cnt`.
// The strings live for the whole program (field_value::name points into them).
std::span<const std::string> domain_field_names(int version);

struct field_value {
  std::string_view name; // points into domain_field_names(): valid for the whole program
  std::uint64_t value = 0;
  friend bool operator==(const field_value &, const field_value &) = default;
};

// Value of the field called `name`, nullopt when there is none.
std::optional<std::uint64_t> find_field(std::span<const field_value> fields, std::string_view name);

struct cpu_record {
  std::uint32_t cpu = 0;
  cpu_fields fields;
};

struct domain_record {
  std::uint32_t cpu = 0;           // the `cpuN` line this domain line follows
  std::uint32_t index = 0;         // N of `domainN` (0 = the smallest span)
  std::string name;                // v17 only (SMT, MC, PKG, NUMA...); empty before
  std::string cpumask;             // as printed: hex words, comma separated
  std::vector<field_value> fields; // domain_field_names(version), in that order
  [[nodiscard]] std::optional<std::uint64_t> field(std::string_view n) const {
    return find_field(fields, n);
  }
};

struct snapshot {
  int version = default_version;
  bool version_line = false; // false when the version was defaulted to 15
  std::optional<std::uint64_t> timestamp_jiffies;
  std::vector<cpu_record> cpus;       // in file order
  std::vector<domain_record> domains; // in file order (each CPU's domains after it)

  [[nodiscard]] const cpu_record *cpu(std::uint32_t id) const;
  [[nodiscard]] const domain_record *domain(std::uint32_t cpu, std::uint32_t index) const;
};

// Parses the text of /proc/schedstat. Rules (errors name the 1-based line):
//  - `version N`: must come before any cpu or domain line and appear at most once; missing → 15;
//    N other than 15, 16, 17 → "unsupported schedstat version N".
//  - `timestamp J`: optional, at most once.
//  - `cpu<digits>`: needs 9 values; a duplicate CPU id is an error.
//  - `domain<digits>`: belongs to the last cpu line (an error before any); needs 36 values (45
//    in v17) after the cpumask (after name and cpumask in v17).
//  - Values are unsigned decimal 64-bit integers; anything else is an error (upstream silently
//    turns it into 0, which would make a corrupt read look like an idle interval).
//  - Fewer values than the layout needs is an error; values past it are ignored unparsed, so a
//    future kernel that appends fields keeps working with the fields we know.
//  - Other lines (blank, `cpufreq...`, `cpu` not followed only by digits, unknown keywords) are
//    ignored.
//  - Text without any cpu line is an error (it is not /proc/schedstat).
result<snapshot> parse(std::string_view text);

// Reads and parses `path`. A missing file gives "<path> is not available (kernel built without
// CONFIG_SCHEDSTATS)" with errnum ENOENT; other errors are prefixed with the path.
result<snapshot> read(const std::filesystem::path &path = "/proc/schedstat");

} // namespace rsched::schedstat
