#include "rsched/base/mountinfo.hpp"

namespace rsched::mountinfo {

namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The space-separated fields of `s`.
std::vector<std::string_view> fields(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (pos < s.size()) {
    while (pos < s.size() && s[pos] == ' ') {
      ++pos;
    }
    const std::size_t end = std::min(s.find(' ', pos), s.size());
    if (end > pos) {
      out.push_back(s.substr(pos, end - pos));
    }
    pos = end;
  }
  return out;
}

} // namespace

std::vector<mount> parse(std::string_view text) {
  // id parent major:minor root mount-point options [optional fields...] - fstype source super
  std::vector<mount> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    const auto sep = line.find(" - ");
    if (sep == std::string_view::npos) {
      continue;
    }
    const auto head = fields(line.substr(0, sep));
    const auto tail = fields(line.substr(sep + 3));
    if (head.size() < 5 || tail.empty()) {
      continue;
    }
    out.push_back({unescape_octal(head[4]), std::string(tail[0]),
                   tail.size() >= 3 ? std::string(tail[2]) : std::string()});
  }
  return out;
}

std::optional<std::string> cgroup2(std::string_view text) {
  for (auto &m : parse(text)) {
    if (m.fstype == "cgroup2") {
      return std::move(m.point);
    }
  }
  return std::nullopt;
}

std::optional<std::string> cgroup1(std::string_view text, std::string_view controller) {
  for (auto &m : parse(text)) {
    if (m.fstype != "cgroup") {
      continue;
    }
    std::string_view opts = m.super_options;
    while (!opts.empty()) {
      const std::size_t comma = std::min(opts.find(','), opts.size());
      if (opts.substr(0, comma) == controller) {
        return std::move(m.point);
      }
      opts.remove_prefix(std::min(comma + 1, opts.size()));
    }
  }
  return std::nullopt;
}

} // namespace rsched::mountinfo
