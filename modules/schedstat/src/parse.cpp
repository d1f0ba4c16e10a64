// Parsing /proc/schedstat; the rules are in schedstat.hpp.
#include "rsched/base/text.hpp"
#include "rsched/schedstat/schedstat.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <memory>
#include <system_error>
#include <unordered_set>

namespace rsched::schedstat {
namespace {

// One idle-type block of a domain line, in the kernel's print order.
constexpr std::array<std::string_view, 8> lb_fields_v15{
    "lb_count",  "lb_balanced",   "lb_failed",  "lb_imbalance",
    "lb_gained", "lb_hot_gained", "lb_nobusyq", "lb_nobusyg",
};
// v17 replaced lb_imbalance by four kinds of imbalance.
constexpr std::array<std::string_view, 11> lb_fields_v17{
    "lb_count",          "lb_balanced",       "lb_failed",           "lb_imbalance_load",
    "lb_imbalance_util", "lb_imbalance_task", "lb_imbalance_misfit", "lb_gained",
    "lb_hot_gained",     "lb_nobusyq",        "lb_nobusyg",
};
// After the three blocks: active load balance, the two legacy sched_balance_exec/fork triples,
// and wake-up affinity.
constexpr std::array<std::string_view, 12> tail_fields{
    "alb_count",    "alb_failed",       "alb_pushed",       "sbe_count",
    "sbe_balanced", "sbe_pushed",       "sbf_count",        "sbf_balanced",
    "sbf_pushed",   "ttwu_wake_remote", "ttwu_move_affine", "ttwu_move_balance",
};

// enum cpu_idle_type order: CPU_IDLE, CPU_NOT_IDLE, CPU_NEWLY_IDLE until v15; v16 swapped the
// first two (__CPU_NOT_IDLE = 0).
constexpr std::array<std::string_view, 3> idle_order_v15{"idle", "not_idle", "newly_idle"};
constexpr std::array<std::string_view, 3> idle_order_v16{"not_idle", "idle", "newly_idle"};

template <std::size_t N>
std::vector<std::string> build_names(const std::array<std::string_view, N> &lb,
                                     const std::array<std::string_view, 3> &order) {
  std::vector<std::string> names;
  names.reserve(3 * N + tail_fields.size());
  for (const auto suffix : order) {
    for (const auto f : lb) {
      names.push_back(fmt::format("{}_{}", f, suffix));
    }
  }
  for (const auto f : tail_fields) {
    names.emplace_back(f);
  }
  return names;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) {
      ++i;
    }
    const std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) {
      ++i;
    }
    if (i > start) {
      words.push_back(line.substr(start, i - start));
    }
  }
  return words;
}

// A token as it may appear in an error message: bounded and safe to print on a terminal.
std::string shown(std::string_view token) {
  constexpr std::size_t max_shown = 32;
  std::string s = text::escape_for_terminal(token.substr(0, max_shown));
  if (token.size() > max_shown) {
    s += "...";
  }
  return s;
}

template <typename T> std::optional<T> parse_unsigned(std::string_view s) {
  T v{};
  const auto *const end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc{} || ptr != end) {
    return std::nullopt;
  }
  return v;
}

// True when `word` is `prefix` followed by at least one digit and nothing else.
bool is_numbered(std::string_view word, std::string_view prefix) {
  if (word.size() <= prefix.size() || !word.starts_with(prefix)) {
    return false;
  }
  return std::all_of(word.begin() + static_cast<std::ptrdiff_t>(prefix.size()), word.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

class parser {
public:
  explicit parser(std::string_view source) : source_(source) {}

  result<snapshot> run(std::string_view text) {
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find('\n', start);
      if (end == std::string_view::npos) {
        end = text.size();
      }
      ++lineno_;
      if (auto r = line(split_words(text.substr(start, end - start))); !r) {
        return r.err();
      }
      start = end + 1;
    }
    if (snap_.cpus.empty()) {
      return make_error(fmt::format("{}: no cpu lines (not a /proc/schedstat text)", source_));
    }
    return std::move(snap_);
  }

private:
  error fail(std::string_view msg) const {
    return make_error(fmt::format("{} line {}: {}", source_, lineno_, msg));
  }

  result<void> line(const std::vector<std::string_view> &words) {
    if (words.empty()) {
      return {};
    }
    const std::string_view key = words[0];
    if (key == "version") {
      return version(words);
    }
    if (key == "timestamp") {
      return timestamp(words);
    }
    if (is_numbered(key, "cpu")) {
      return cpu(words);
    }
    if (is_numbered(key, "domain")) {
      return domain(words);
    }
    return {}; // cpufreq..., unknown keywords: not ours
  }

  result<void> version(const std::vector<std::string_view> &words) {
    if (snap_.version_line) {
      return fail("second version line");
    }
    if (!snap_.cpus.empty()) {
      return fail("version line after the per-CPU lines");
    }
    if (words.size() < 2) {
      return fail("version line without a number");
    }
    const auto v = parse_unsigned<std::uint64_t>(words[1]);
    if (!v) {
      return fail(fmt::format("invalid version \"{}\"", shown(words[1])));
    }
    if (*v < min_version || *v > max_version) {
      return fail(fmt::format("unsupported schedstat version {} (supported: 15, 16, 17)", *v));
    }
    snap_.version = static_cast<int>(*v);
    snap_.version_line = true;
    return {};
  }

  result<void> timestamp(const std::vector<std::string_view> &words) {
    if (snap_.timestamp_jiffies) {
      return fail("second timestamp line");
    }
    if (words.size() < 2) {
      return fail("timestamp line without a number");
    }
    const auto t = parse_unsigned<std::uint64_t>(words[1]);
    if (!t) {
      return fail(fmt::format("invalid timestamp \"{}\"", shown(words[1])));
    }
    snap_.timestamp_jiffies = *t;
    return {};
  }

  result<void> cpu(const std::vector<std::string_view> &words) {
    const auto id = parse_unsigned<std::uint32_t>(words[0].substr(3));
    if (!id) {
      return fail(fmt::format("cpu id out of range in \"{}\"", shown(words[0])));
    }
    if (!cpu_ids_.insert(*id).second) {
      return fail(fmt::format("second line for cpu{}", *id));
    }
    const std::size_t have = words.size() - 1;
    if (have < cpu_field_layout.size()) {
      return fail(
          fmt::format("cpu{} has {} values, expected {}", *id, have, cpu_field_layout.size()));
    }
    cpu_record rec;
    rec.cpu = *id;
    for (std::size_t i = 0; i < cpu_field_layout.size(); ++i) {
      const auto v = parse_unsigned<std::uint64_t>(words[1 + i]);
      if (!v) {
        return fail(fmt::format("invalid {} \"{}\" for cpu{}", cpu_field_layout[i].name,
                                shown(words[1 + i]), *id));
      }
      rec.fields.*cpu_field_layout[i].member = *v;
    }
    snap_.cpus.push_back(rec);
    domain_ids_.clear();
    return {};
  }

  result<void> domain(const std::vector<std::string_view> &words) {
    const auto index = parse_unsigned<std::uint32_t>(words[0].substr(6));
    if (!index) {
      return fail(fmt::format("domain index out of range in \"{}\"", shown(words[0])));
    }
    if (snap_.cpus.empty()) {
      return fail("domain line before any cpu line");
    }
    const std::uint32_t cpu_id = snap_.cpus.back().cpu;
    if (!domain_ids_.insert(*index).second) {
      return fail(fmt::format("second domain{} line for cpu{}", *index, cpu_id));
    }
    const std::span<const std::string> names = domain_field_names(snap_.version);
    const bool named = snap_.version >= 17; // v17 prints the domain name before the cpumask
    const std::size_t first = named ? 3 : 2;
    const std::size_t have = words.size() > first ? words.size() - first : 0;
    if (words.size() < first || have < names.size()) {
      return fail(fmt::format("domain{} of cpu{} has {} values, version {} needs {}{}", *index,
                              cpu_id, have, snap_.version, names.size(),
                              named ? " after the name and cpumask" : " after the cpumask"));
    }
    domain_record rec;
    rec.cpu = cpu_id;
    rec.index = *index;
    if (named) {
      rec.name = std::string(words[1]);
    }
    rec.cpumask = std::string(words[first - 1]);
    rec.fields.reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto v = parse_unsigned<std::uint64_t>(words[first + i]);
      if (!v) {
        return fail(fmt::format("invalid {} \"{}\" for domain{} of cpu{}", names[i],
                                shown(words[first + i]), *index, cpu_id));
      }
      rec.fields.push_back(field_value{names[i], *v});
    }
    snap_.domains.push_back(std::move(rec));
    return {};
  }

  std::string_view source_;
  std::size_t lineno_ = 0;
  snapshot snap_;
  std::unordered_set<std::uint32_t> cpu_ids_;
  std::unordered_set<std::uint32_t> domain_ids_; // of the current CPU
};

struct file_closer {
  void operator()(std::FILE *f) const { std::fclose(f); }
};

} // namespace

std::span<const std::string> domain_field_names(int version) {
  static const std::vector<std::string> v15 = build_names(lb_fields_v15, idle_order_v15);
  static const std::vector<std::string> v16 = build_names(lb_fields_v15, idle_order_v16);
  static const std::vector<std::string> v17 = build_names(lb_fields_v17, idle_order_v16);
  switch (version) {
  case 15:
    return v15;
  case 16:
    return v16;
  case 17:
    return v17;
  default:
    return {};
  }
}

std::optional<std::uint64_t> find_field(std::span<const field_value> fields,
                                        std::string_view name) {
  const auto it = std::find_if(fields.begin(), fields.end(),
                               [&](const field_value &f) { return f.name == name; });
  if (it == fields.end()) {
    return std::nullopt;
  }
  return it->value;
}

const cpu_record *snapshot::cpu(std::uint32_t id) const {
  const auto it =
      std::find_if(cpus.begin(), cpus.end(), [&](const cpu_record &c) { return c.cpu == id; });
  return it == cpus.end() ? nullptr : &*it;
}

const domain_record *snapshot::domain(std::uint32_t cpu_id, std::uint32_t index) const {
  const auto it = std::find_if(domains.begin(), domains.end(), [&](const domain_record &d) {
    return d.cpu == cpu_id && d.index == index;
  });
  return it == domains.end() ? nullptr : &*it;
}

result<snapshot> parse(std::string_view text) {
  return parser("schedstat").run(text);
}

result<snapshot> read(const std::filesystem::path &path) {
  const std::string name = path.string();
  errno = 0;
  std::unique_ptr<std::FILE, file_closer> f(std::fopen(name.c_str(), "rb"));
  if (!f) {
    const int e = errno;
    if (e == ENOENT) {
      return make_error(
          fmt::format("{} is not available (kernel built without CONFIG_SCHEDSTATS)", name), e);
    }
    return make_error(fmt::format("cannot open {}: {}", name, std::generic_category().message(e)),
                      e);
  }
  std::string text;
  std::array<char, 64 * 1024> buf{};
  for (;;) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    text.append(buf.data(), n);
    if (n < buf.size()) {
      break;
    }
  }
  if (std::ferror(f.get()) != 0) {
    const int e = errno;
    return make_error(fmt::format("cannot read {}: {}", name, std::generic_category().message(e)),
                      e);
  }
  return parser(name).run(text);
}

} // namespace rsched::schedstat
