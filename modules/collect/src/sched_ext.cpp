#include "rsched/collect/sched_ext.hpp"

#include "rsched/base/text.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace rsched::collect {
namespace {

// A sysfs attribute's text without its trailing newline; nullopt when the file does not exist.
result<std::optional<std::string>> read_attr(const std::filesystem::path &p) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) {
    if (ec) {
      return make_error(p.string() + ": " + ec.message());
    }
    return std::optional<std::string>();
  }
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  if (!in || !(ss << in.rdbuf())) {
    // An empty file also fails `<<` (no characters): tell it apart from a read error.
    if (in && in.peek() == std::char_traits<char>::eof() && !in.bad()) {
      return std::optional<std::string>(std::string());
    }
    return make_error(p.string() + ": cannot read");
  }
  std::string text = ss.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  return std::optional<std::string>(std::move(text));
}

} // namespace

result<std::optional<sched_ext_state>> read_sched_ext(const std::filesystem::path &sysfs_root) {
  const auto dir = sysfs_root / "kernel" / "sched_ext";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return make_error(dir.string() + ": " + ec.message());
    }
    return std::optional<sched_ext_state>();
  }
  sched_ext_state s;
  auto state = read_attr(dir / "state");
  if (!state) {
    return state.err();
  }
  if (!*state || (*state)->empty()) {
    return make_error((dir / "state").string() + ": missing or empty");
  }
  s.state = std::move(**state);
  auto ops = read_attr(dir / "root" / "ops");
  if (!ops) {
    return ops.err();
  }
  if (*ops) {
    s.ops = std::move(**ops);
  }
  auto seq = read_attr(dir / "enable_seq");
  if (!seq) {
    return seq.err();
  }
  if (*seq) {
    const std::string &t = **seq;
    const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), s.enable_seq);
    if (err != std::errc() || end != t.data() + t.size() || t.empty() || s.enable_seq < 0) {
      return make_error((dir / "enable_seq").string() + ": not a count: '" +
                        text::escape_for_terminal(t) + "'");
    }
  }
  return std::optional<sched_ext_state>(std::move(s));
}

} // namespace rsched::collect
