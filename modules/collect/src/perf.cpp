#include "rsched/collect/perf.hpp"

#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/topology/cpulist.hpp"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <unistd.h>
#include <utility>

namespace rsched::collect {

namespace fs = std::filesystem;

namespace {

// Message building without a formatting library (collect does not link fmt).
void append(std::string &out, std::string_view s) {
  out += s;
}
void append(std::string &out, const char *s) {
  out += s;
}
void append(std::string &out, const std::string &s) {
  out += s;
}
template <typename T>
requires std::is_integral_v<T>
void append(std::string &out, T v) {
  out += std::to_string(v);
}
template <typename... Args> std::string cat(const Args &...args) {
  std::string out;
  (append(out, args), ...);
  return out;
}

// "0x<lowercase hex>", as Rust's {:x} after a literal 0x.
std::string hex(std::uint64_t v) {
  char buf[16];
  const auto r = std::to_chars(std::begin(buf), std::end(buf), v, 16);
  return "0x" + std::string(std::begin(buf), r.ptr);
}

// Left-aligned in `width` columns ({:<width}); longer text is not cut.
std::string pad(std::string_view s, std::size_t width) {
  std::string out(s);
  if (out.size() < width) {
    out.append(width - out.size(), ' ');
  }
  return out;
}

struct alias {
  std::string_view token;
  event_spec spec;
  std::string_view help; // --perf-list description
};

constexpr std::uint64_t hw_cache_config(std::uint64_t cache, std::uint64_t op,
                                        std::uint64_t result) {
  return cache | (op << 8) | (result << 16);
}

// Built-in aliases in resolution (and --perf-list) order. The first five are upstream's, with its
// names and encodings; the AMD raw encodings are used on any CPU vendor, as upstream does.
const std::vector<alias> &aliases() {
  static const std::vector<alias> all = {
      {"ipc",
       {"ipc", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true},
       "Instructions per cycle (user/kernel)"},
      {"l1d-miss",
       {"L1D Read Misses", PERF_TYPE_HW_CACHE,
        hw_cache_config(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_OP_READ,
                        PERF_COUNT_HW_CACHE_RESULT_MISS)},
       "L1 data cache read misses (PERF_TYPE_HW_CACHE)"},
      {"l2-miss",
       {"L2 Cache Misses", PERF_TYPE_RAW, encode_amd_raw(0x64, 0x09)},
       "L2 cache misses (AMD: event=0x64, umask=0x09)"},
      {"l1i-miss",
       {"L1I Cache Misses", PERF_TYPE_RAW, encode_amd_raw(0x18e, 0x18)},
       "L1 instruction cache misses (AMD: event=0x18e, umask=0x18)"},
      {"l3-miss",
       {"L3 Misses (DRAM Fills)", PERF_TYPE_RAW, encode_amd_raw(0x43, 0xd8)},
       "L3 miss proxy / DRAM fills (AMD: event=0x43, umask=0xd8)"},
      // Our extension: perf's generic hardware names (the kernel maps them to each vendor's
      // event), and software events, which need no PMU at all.
      {"cycles",
       {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
       "CPU cycles (PERF_TYPE_HARDWARE)"},
      {"instructions",
       {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
       "Instructions retired (PERF_TYPE_HARDWARE)"},
      {"cache-misses",
       {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
       "Last-level cache misses (PERF_TYPE_HARDWARE)"},
      {"branch-misses",
       {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
       "Mispredicted branches (PERF_TYPE_HARDWARE)"},
      {"cpu-clock",
       {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
       "CPU clock, ns (software)"},
      {"task-clock",
       {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
       "Task clock, ns (software)"},
      {"context-switches",
       {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
       "Context switches (software)"},
      {"cs",
       {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
       "Same as context-switches"},
      {"page-faults",
       {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
       "Page faults (software)"},
      {"cpu-migrations",
       {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
       "CPU migrations (software)"},
      {"minor-faults",
       {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
       "Minor page faults (software)"},
      {"major-faults",
       {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
       "Major page faults (software)"},
  };
  return all;
}

std::optional<std::string> read_text(const fs::path &p) {
  std::ifstream in(p);
  if (!in) {
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf(); // an empty file sets failbit on ss only
  return ss.str();
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) {
    return {};
  }
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

template <typename T> std::optional<T> parse_number(std::string_view s, int base) {
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

// "0x1f" / "0X1F" hexadecimal, else decimal (upstream's parse_hex_or_dec).
std::optional<std::uint32_t> parse_hex_or_dec(std::string_view s) {
  s = trim(s);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    return parse_number<std::uint32_t>(s.substr(2), 16);
  }
  return parse_number<std::uint32_t>(s, 10);
}

// The core PMU's device directory. Upstream reads /sys/devices/cpu; the canonical place of every
// PMU is /sys/bus/event_source/devices/<pmu> (a symlink to the same directory where both exist).
std::optional<fs::path> core_pmu_dir(const fs::path &root) {
  for (const fs::path &p : {root / "bus/event_source/devices/cpu", root / "devices/cpu"}) {
    std::error_code ec;
    if (fs::is_directory(p / "events", ec)) {
      return p;
    }
  }
  return std::nullopt;
}

// Sysfs event names of the core PMU, sorted; ".unit"/".scale" companions are skipped.
std::vector<std::string> sysfs_event_names(const fs::path &pmu_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(pmu_dir / "events", ec)) {
    std::string name = entry.path().filename().string();
    if (name.find('.') == std::string::npos) {
      names.push_back(std::move(name));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Parses an event file such as "event=0x64,umask=0x09". Only event= and umask= are used (cmask,
// inv, edge, ... are ignored), as upstream.
result<event_spec> sysfs_event(const fs::path &pmu_dir, std::string_view name) {
  const fs::path file = pmu_dir / "events" / std::string(name);
  const auto content = read_text(file);
  if (!content) {
    return make_error(cat("cannot read ", file.string()), ENOENT);
  }
  std::uint32_t event = 0;
  std::uint32_t umask = 0;
  std::string_view rest = trim(*content);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view part = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    std::uint32_t *field = part.starts_with("event=")   ? &event
                           : part.starts_with("umask=") ? &umask
                                                        : nullptr;
    if (field == nullptr) {
      continue;
    }
    const auto v = parse_hex_or_dec(part.substr(6));
    if (!v) {
      return make_error(cat("sysfs event '", name, "': cannot parse '",
                            text::escape_for_terminal(part), "' in ", file.string()),
                        EINVAL);
    }
    *field = *v;
  }
  // Type of the core PMU (dynamic on some systems); upstream falls back to PERF_TYPE_RAW (4).
  std::uint32_t type = PERF_TYPE_RAW;
  if (const auto t = read_text(pmu_dir / "type")) {
    if (const auto v = parse_number<std::uint32_t>(trim(*t), 10)) {
      type = *v;
    }
  }
  // AMD-specific, as upstream: the event select is split over config bits 0-7 and 32-35. On Intel
  // the high event bits do not exist, so events below 0x100 encode the same way; the umask is
  // 8 bits in both formats (truncated, as upstream's `as u8`).
  return event_spec{std::string(name), type,
                    encode_amd_raw(event, static_cast<std::uint8_t>(umask & 0xffu))};
}

// A name that can be looked up in a sysfs directory without leaving it.
bool plain_file_name(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name != "." && name != ".." &&
         name.find('\0') == std::string_view::npos;
}

std::string unknown_event_error(std::string_view token, const fs::path &root) {
  std::string names;
  for (const auto &a : aliases()) {
    names += names.empty() ? "" : ", ";
    names += a.token;
  }
  std::string raw_note;
  if (token.size() > 1 && token[0] == 'r') {
    raw_note =
        cat(" ('", text::escape_for_terminal(token.substr(1)), "' is not a 64-bit hex number)");
  }
  std::string sysfs;
  if (const auto dir = core_pmu_dir(root)) {
    const auto n = sysfs_event_names(*dir).size();
    sysfs =
        cat("a sysfs event of ", (*dir / "events").string(), " (", n, " here; see --perf-list)");
  } else {
    sysfs = cat("a sysfs event of ", (root / "devices/cpu/events").string(),
                " (none here: no CPU PMU in sysfs)");
  }
  return cat("unknown perf event '", text::escape_for_terminal(token),
             "': expected a built-in alias (", names, "), a raw event r<hex>", raw_note,
             " (e.g. r0964 for event=0x64, umask=0x09) or ", sysfs);
}

// --- opening counters ---------------------------------------------------------------------------

const char *type_name(std::uint32_t type) {
  switch (type) {
  case PERF_TYPE_HARDWARE:
    return "hardware";
  case PERF_TYPE_SOFTWARE:
    return "software";
  case PERF_TYPE_TRACEPOINT:
    return "tracepoint";
  case PERF_TYPE_HW_CACHE:
    return "hw-cache";
  case PERF_TYPE_RAW:
    return "raw";
  case PERF_TYPE_BREAKPOINT:
    return "breakpoint";
  default:
    return "dynamic PMU type";
  }
}

// Events counted by a hardware PMU (everything but the kernel's own software-like types).
bool needs_hw_pmu(std::uint32_t type) {
  return type != PERF_TYPE_SOFTWARE && type != PERF_TYPE_TRACEPOINT && type != PERF_TYPE_BREAKPOINT;
}

bool have_core_pmu() {
  std::error_code ec;
  // x86 names its core PMU "cpu" ("cpu_core"/"cpu_atom" on hybrid parts); other architectures
  // register theirs under other names, so this is only used to word the hint.
  for (const char *name : {"cpu", "cpu_core", "cpu_atom"}) {
    if (fs::exists(fs::path("/sys/bus/event_source/devices") / name, ec)) {
      return true;
    }
  }
  return false;
}

std::string paranoid_level() {
  const auto t = read_text("/proc/sys/kernel/perf_event_paranoid");
  return t ? std::string(trim(*t)) : std::string("unknown");
}

// Why perf_event_open failed, in words a user can act on.
std::string open_hint(int err, std::uint32_t type, unsigned cpu, std::size_t fds_needed) {
  switch (err) {
  case ENOENT:
  case EOPNOTSUPP:
    if (needs_hw_pmu(type)) {
      if (!have_core_pmu()) {
        return "this machine has no hardware PMU (common in virtual machines); software events "
               "such as context-switches or cpu-clock still work";
      }
      return err == ENOENT ? "the CPU's PMU does not support this event"
                           : "the CPU's PMU does not support this event with these exclude flags";
    }
    return "the kernel does not support this event";
  case EACCES:
  case EPERM:
    return cat("system-wide counters need root or CAP_PERFMON, or a lower "
               "kernel.perf_event_paranoid (now ",
               paranoid_level(), ")");
  case ENODEV:
    return cat("cpu ", cpu, " is offline or not covered by this PMU");
  case EINVAL:
    return cat("the kernel rejected the event configuration or cpu ", cpu);
  case EMFILE:
  case ENFILE:
    return cat("too many open files: ", fds_needed, " counter fds are needed (raise ulimit -n)");
  case EBUSY:
    return "the PMU is in exclusive use by another process";
  default:
    return {};
  }
}

struct counter_def {
  unsigned slot;
  std::string name;
  std::uint32_t type;
  std::uint64_t config;
  bool exclude_user = false;
  bool exclude_kernel = false;
};

result<int> open_counter(const counter_def &d, unsigned cpu, std::size_t fds_needed) {
  perf_event_attr attr{};
  attr.type = d.type;
  attr.size = sizeof(perf_event_attr);
  attr.config = d.config;
  // value + time enabled + time running: read() shows whether the PMU multiplexed the counter.
  // bpf_perf_event_read_value ignores read_format, so the BPF side is unaffected.
  attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  if (d.exclude_user) {
    attr.exclude_user = 1;
  }
  if (d.exclude_kernel) {
    attr.exclude_kernel = 1;
  }
  // As upstream. Software events accept exclude_idle (checked on 6.18); the clocks ignore it.
  attr.exclude_hv = 1;
  attr.exclude_idle = 1;
  // Not created disabled: counting starts now, system-wide (pid -1) on this CPU.
  const long fd = syscall(SYS_perf_event_open, &attr, pid_t{-1}, static_cast<int>(cpu), -1,
                          static_cast<unsigned long>(PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    const int e = errno;
    std::string msg = cat("perf counters unavailable: ", d.name, " (", type_name(d.type),
                          ", config ", hex(d.config), ") on cpu ", cpu, ": ", std::strerror(e));
    if (const auto hint = open_hint(e, d.type, cpu, fds_needed); !hint.empty()) {
      msg += " — " + hint;
    }
    return make_error(std::move(msg), e);
  }
  const int ifd = static_cast<int>(fd);
  // Upstream enables, then resets: the BPF side starts from a zero count on every CPU.
  if (ioctl(ifd, PERF_EVENT_IOC_ENABLE, 0) != 0 || ioctl(ifd, PERF_EVENT_IOC_RESET, 0) != 0) {
    const int e = errno;
    close(ifd);
    return make_error(cat("perf counters unavailable: enabling ", d.name, " on cpu ", cpu,
                          " failed: ", std::strerror(e)),
                      e);
  }
  return ifd;
}

} // namespace

std::uint64_t encode_amd_raw(std::uint32_t event, std::uint8_t umask) {
  const std::uint64_t low = event & 0xffu;
  const std::uint64_t high = (event >> 8) & 0xfu;
  return low | (std::uint64_t{umask} << 8) | (high << 32);
}

result<event_spec> resolve_event(std::string_view token, const fs::path &sysfs_root) {
  // 1. built-in aliases
  for (const auto &a : aliases()) {
    if (a.token == token) {
      return a.spec;
    }
  }
  // 2. r<hex>: config verbatim. A token that is not hex ("ref-cycles") falls through to sysfs.
  if (token.size() > 1 && token[0] == 'r') {
    if (const auto config = parse_number<std::uint64_t>(token.substr(1), 16)) {
      return event_spec{"raw:" + hex(*config), PERF_TYPE_RAW, *config};
    }
  }
  // 3. sysfs events of the core PMU
  if (plain_file_name(token)) {
    if (const auto dir = core_pmu_dir(sysfs_root)) {
      std::error_code ec;
      if (fs::is_regular_file(*dir / "events" / std::string(token), ec)) {
        return sysfs_event(*dir, token);
      }
    }
  }
  return make_error(unknown_event_error(token, sysfs_root), ENOENT);
}

std::string perf_list(const fs::path &sysfs_root) {
  std::string out = "Built-in perf event aliases:\n";
  for (const auto &a : aliases()) {
    out += cat("  ", pad(a.token, 12), " ", a.help, "\n");
  }
  out += "\nRaw event format: r<hex> (e.g. r0964 for event=0x64, umask=0x09)\n";
  out += cat("\nSysfs events (", (sysfs_root / "devices/cpu/events").string(), "/):\n");
  if (const auto dir = core_pmu_dir(sysfs_root)) {
    const auto names = sysfs_event_names(*dir);
    for (const auto &name : names) {
      const auto content = read_text(*dir / "events" / name);
      out += cat("  ", pad(name, 30), " ", content ? trim(*content) : std::string_view{}, "\n");
    }
    if (names.empty()) {
      out += "  (none)\n";
    }
  } else {
    out += "  (none: no CPU PMU in sysfs)\n";
  }
  // Upstream lists every libpfm4 event of each PMU present here; those names cannot be passed to
  // -g (upstream resolves only the events above too), so we do not link libpfm4.
  out += "\nlibpfm4 event listing is not included (rsched accepts only the events above)\n";
  return out;
}

result<std::vector<unsigned>> online_cpus(const fs::path &sysfs_root) {
  const fs::path file = sysfs_root / "devices/system/cpu/online";
  const auto content = read_text(file);
  if (!content) {
    return make_error(cat("cannot read ", file.string()), ENOENT);
  }
  auto cpus = topology::parse_cpulist(*content);
  if (!cpus) {
    return make_error(cat(file.string(), ": ", cpus.err().msg), EINVAL);
  }
  if (cpus->empty() || cpus->back() >= RSCHED_MAX_CPUS) {
    return make_error(cat(file.string(), ": no online CPU below ", std::to_string(RSCHED_MAX_CPUS)),
                      EINVAL);
  }
  return cpus;
}

result<counter_set> counter_set::open(const std::vector<event_spec> &generic, bool ipc,
                                      const std::vector<unsigned> &cpus) {
  if (generic.size() > RSCHED_MAX_GENERIC_EVENTS) {
    return make_error(cat("Too many generic perf events (", generic.size(), ", max ",
                          static_cast<int>(RSCHED_MAX_GENERIC_EVENTS), ")"),
                      EINVAL);
  }
  std::vector<counter_def> defs;
  if (ipc) {
    // Slot order is the ABI's rsched_counter_slot: user/kernel cycles, user/kernel instructions.
    defs.push_back({RSCHED_CTR_USER_CYCLES, "user_cycles", PERF_TYPE_HARDWARE,
                    PERF_COUNT_HW_CPU_CYCLES, false, true});
    defs.push_back({RSCHED_CTR_KERNEL_CYCLES, "kernel_cycles", PERF_TYPE_HARDWARE,
                    PERF_COUNT_HW_CPU_CYCLES, true, false});
    defs.push_back({RSCHED_CTR_USER_INSTRUCTIONS, "user_instructions", PERF_TYPE_HARDWARE,
                    PERF_COUNT_HW_INSTRUCTIONS, false, true});
    defs.push_back({RSCHED_CTR_KERNEL_INSTRUCTIONS, "kernel_instructions", PERF_TYPE_HARDWARE,
                    PERF_COUNT_HW_INSTRUCTIONS, true, false});
  }
  for (std::size_t i = 0; i < generic.size(); ++i) {
    if (generic[i].ipc) {
      return make_error("perf event 'ipc' is a counter set, not a generic event (pass ipc=true)",
                        EINVAL);
    }
    // Generic events count user and kernel (hv and idle excluded), as upstream.
    defs.push_back({static_cast<unsigned>(RSCHED_CTR_GENERIC0 + i), generic[i].name,
                    generic[i].type, generic[i].config});
  }
  for (unsigned cpu : cpus) {
    if (cpu >= RSCHED_MAX_CPUS) {
      return make_error(cat("cpu ", cpu, " is beyond rsched's limit of ",
                            static_cast<int>(RSCHED_MAX_CPUS), " CPUs"),
                        EINVAL);
    }
  }

  counter_set set; // closes what was opened if a later counter fails
  const std::size_t needed = defs.size() * cpus.size();
  set.fds_.reserve(needed);
  for (const auto &d : defs) {
    for (unsigned cpu : cpus) {
      auto fd = open_counter(d, cpu, needed);
      if (!fd) {
        return fd.err();
      }
      set.fds_.push_back({cpu, d.slot, *fd, d.name});
    }
    set.mask_ |= 1u << d.slot;
  }
  return set;
}

result<std::vector<counter_time>> counter_set::read_times() const {
  std::vector<counter_time> out;
  out.reserve(fds_.size());
  for (const auto &c : fds_) {
    // Layout for TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING without GROUP or ID.
    std::uint64_t buf[3] = {};
    const ssize_t n = read(c.fd, buf, sizeof(buf));
    if (n != static_cast<ssize_t>(sizeof(buf))) {
      const int e = n < 0 ? errno : EIO;
      return make_error(
          cat("reading perf counter ", c.name, " on cpu ", c.cpu, " failed: ", std::strerror(e)),
          e);
    }
    out.push_back({c.cpu, c.slot, c.name, buf[0], buf[1], buf[2]});
  }
  return out;
}

counter_set::counter_set(counter_set &&other) noexcept
    : fds_(std::exchange(other.fds_, {})), mask_(std::exchange(other.mask_, 0)) {}

counter_set &counter_set::operator=(counter_set &&other) noexcept {
  if (this != &other) {
    close_all();
    fds_ = std::exchange(other.fds_, {});
    mask_ = std::exchange(other.mask_, 0);
  }
  return *this;
}

counter_set::~counter_set() {
  close_all();
}

void counter_set::close_all() noexcept {
  for (const auto &c : fds_) {
    if (c.fd >= 0) {
      ::close(c.fd);
    }
  }
  fds_.clear();
  mask_ = 0;
}

} // namespace rsched::collect
