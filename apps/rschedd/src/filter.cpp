// The live display's filters (filter.hpp): RE2 patterns compiled once, matched per thread.
#include "rsched/rschedd/filter.hpp"

#include "rsched/base/text.hpp"

#include <re2/re2.h>

namespace rsched::rschedd {

namespace {

std::string fmt_error(const char *flag, const std::string &pattern, const char *what) {
  // A pattern of thousands of characters is shown by its start: the message stays readable.
  constexpr std::size_t shown = 80;
  const std::string head = pattern.size() > shown ? pattern.substr(0, shown) + "..." : pattern;
  std::string msg = std::string("invalid regular expression for ") + flag + " '" +
                    text::escape_for_terminal(head) + "': ";
  for (const char *p = what; *p != '\0'; ++p) {
    msg += (*p == '\n' || *p == '\r') ? ' ' : *p; // one line
  }
  return msg;
}

} // namespace

result<filter> filter::make(const filter_options &o) {
  filter f;
  f.opt_ = o;
  for (const auto &p : o.comm) {
    auto r = compile("-c", p);
    if (!r) {
      return r.err();
    }
    f.comm_.push_back(std::move(*r));
  }
  for (const auto &p : o.global_comm) {
    auto r = compile("--global-comm", p);
    if (!r) {
      return r.err();
    }
    f.global_.push_back(std::move(*r));
  }
  for (const auto &p : o.cgroup) {
    auto r = compile("--cgroup", p);
    if (!r) {
      return r.err();
    }
    cgroup_pattern cp;
    cp.exact_root = p == "root";
    cp.matches_all = !cp.exact_root && RE2::PartialMatch("root", **r);
    cp.re = std::move(*r);
    f.cgroup_.push_back(std::move(cp));
  }
  return f;
}

bool filter::cgroup_matches(std::string_view path) const {
  if (path.empty()) {
    return false; // unknown cgroup
  }
  const bool is_root = path.find_first_not_of('/') == std::string_view::npos;
  for (const auto &cp : cgroup_) {
    if (cp.exact_root) {
      if (is_root) {
        return true;
      }
      continue;
    }
    if (cp.matches_all) {
      return true;
    }
    std::size_t pos = 0;
    while (pos < path.size()) {
      const std::size_t end = std::min(path.find('/', pos), path.size());
      if (end > pos && search(cp.re, path.substr(pos, end - pos))) {
        return true;
      }
      pos = end + 1;
    }
  }
  return false;
}

result<filter::regex> filter::compile(const char *flag, const std::string &pattern) {
  RE2::Options opts;
  opts.set_log_errors(false); // the error is returned, in one line, not logged to stderr
  auto re = std::make_shared<const RE2>(pattern, opts);
  if (!re->ok()) {
    return make_error(fmt_error(flag, pattern, re->error().c_str()));
  }
  return re;
}

bool filter::search(const regex &re, std::string_view s) {
  return RE2::PartialMatch(re2::StringPiece(s.data(), s.size()), *re);
}

bool filter::any_match(const std::vector<regex> &res, std::string_view s) {
  for (const auto &re : res) {
    if (search(re, s)) {
      return true;
    }
  }
  return false;
}

} // namespace rsched::rschedd
