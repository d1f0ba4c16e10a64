// Parsing and deltas of pressure.hpp (pure).
#include "rsched/base/text.hpp"
#include "rsched/pressure/pressure.hpp"

#include <charconv>

namespace rsched::pressure {

namespace {

// The lines of `text` (without '\n'), empty ones skipped.
std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    if (end > 0) {
      out.push_back(text.substr(0, end));
    }
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  return out;
}

std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
    return std::nullopt;
  }
  return v;
}

error bad_line(const char *what, std::string_view line) {
  constexpr std::size_t shown = 80;
  const std::string head(line.substr(0, shown));
  return make_error(std::string(what) + ": unexpected line '" + text::escape_for_terminal(head) +
                    (line.size() > shown ? "...'" : "'"));
}

std::optional<std::uint64_t> times(std::optional<std::uint64_t> v, std::uint64_t k) {
  if (!v) {
    return std::nullopt;
  }
  return *v > UINT64_MAX / k ? UINT64_MAX : *v * k;
}

std::optional<std::uint64_t> sub(std::optional<std::uint64_t> cur,
                                 std::optional<std::uint64_t> prev) {
  if (!cur || !prev) {
    return std::nullopt;
  }
  return *cur >= *prev ? *cur - *prev : *cur;
}

} // namespace

result<psi_totals> parse_psi(std::string_view text) {
  psi_totals out;
  for (const auto line : lines(text)) {
    const std::size_t sp = line.find(' ');
    const std::string_view kind = line.substr(0, sp);
    const std::size_t at = line.find(" total=");
    if (sp == std::string_view::npos || (kind != "some" && kind != "full") ||
        at == std::string_view::npos) {
      return bad_line("PSI", line);
    }
    std::string_view rest = line.substr(at + 7);
    rest = rest.substr(0, rest.find(' '));
    const auto v = number(rest);
    if (!v) {
      return bad_line("PSI", line);
    }
    (kind == "some" ? out.some_us : out.full_us) = *v;
  }
  if (!out.some_us) {
    return make_error("PSI: no 'some' line");
  }
  return out;
}

result<cpu_stat> parse_cpu_stat(std::string_view text) {
  cpu_stat out;
  for (const auto line : lines(text)) {
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos) {
      return bad_line("cpu.stat", line);
    }
    const std::string_view key = line.substr(0, sp);
    const auto v = number(line.substr(sp + 1));
    if (!v) {
      return bad_line("cpu.stat", line);
    }
    if (key == "usage_usec") {
      out.usage_ns = times(*v, 1000);
    } else if (key == "nr_periods") {
      out.periods = *v;
    } else if (key == "nr_throttled") {
      out.throttled = *v;
    } else if (key == "throttled_usec") {
      out.throttled_ns = times(*v, 1000);
    } else if (key == "throttled_time") { // cgroup v1: ns
      out.throttled_ns = *v;
    }
  }
  return out;
}

cgroup_cpu delta(const cgroup_cpu &cur, const cgroup_cpu &prev) {
  return {sub(cur.some_ns, prev.some_ns),     sub(cur.full_ns, prev.full_ns),
          sub(cur.usage_ns, prev.usage_ns),   sub(cur.periods, prev.periods),
          sub(cur.throttled, prev.throttled), sub(cur.throttled_ns, prev.throttled_ns)};
}

std::vector<std::string> ancestors(std::string_view path) {
  std::vector<std::string> out;
  while (path.size() > 1) {
    const std::size_t slash = path.rfind('/');
    if (slash == std::string_view::npos) {
      break;
    }
    path = slash == 0 ? std::string_view("/") : path.substr(0, slash);
    out.emplace_back(path);
  }
  return out;
}

std::vector<std::pair<std::string, cgroup_cpu>>
interval_rows(const readings &prev, const readings &cur, const std::set<std::string> &active) {
  std::set<std::string> want{"/"};
  for (const auto &p : active) {
    if (p.empty() || p[0] != '/') {
      continue; // unknown cgroup
    }
    want.insert(p);
    for (auto &a : ancestors(p)) {
      want.insert(std::move(a));
    }
  }
  std::vector<std::pair<std::string, cgroup_cpu>> out;
  static const cgroup_cpu zero{0, 0, 0, 0, 0, 0};
  for (const auto &p : want) {
    auto c = cur.find(p);
    if (c == cur.end()) {
      continue;
    }
    auto b = prev.find(p);
    cgroup_cpu d = delta(c->second, b == prev.end() ? zero : b->second);
    if (d.any()) {
      out.emplace_back(p, d);
    }
  }
  return out;
}

} // namespace rsched::pressure
