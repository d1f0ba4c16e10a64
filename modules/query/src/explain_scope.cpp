#include "explain_scope.hpp"

#include "tvf_blame.hpp"

#include <algorithm>
#include <cstddef>

namespace rsched::query::detail {

namespace {

// The kernel keeps this many bytes of a thread's name (TASK_COMM_LEN - 1).
constexpr std::size_t comm_bytes = 15;

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// ASCII case-insensitive equality: incident tools name services as people write them ("API"),
// the kernel as programs do ("api").
bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

bool starts_with_ci(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && same(s.substr(0, p.size()), p);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// Whether cgroup path component `c` is service `name`'s unit, slice, scope or cgroup.
bool component_is(std::string_view c, std::string_view name) {
  if (same(c, name)) {
    return true;
  }
  for (std::string_view suffix : {".service", ".slice", ".scope"}) {
    if (c.size() == name.size() + suffix.size() && starts_with_ci(c, name) &&
        c.substr(name.size()) == suffix) {
      return true;
    }
  }
  // A template unit's instance: NAME@INSTANCE.service
  constexpr std::string_view service = ".service";
  return c.size() > name.size() + 1 + service.size() && starts_with_ci(c, name) &&
         c[name.size()] == '@' && c.substr(c.size() - service.size()) == service;
}

} // namespace

std::optional<std::string> service_of_tags(std::string_view tags) {
  while (!tags.empty()) {
    const std::size_t comma = tags.find(',');
    const std::string_view tag = trim(tags.substr(0, comma));
    tags = comma == std::string_view::npos ? std::string_view() : tags.substr(comma + 1);
    for (std::string_view key : {"service_name:", "service:"}) {
      if (tag.starts_with(key)) {
        const std::string_view name = trim(tag.substr(key.size()));
        if (!name.empty()) {
          return std::string(name);
        }
      }
    }
  }
  return std::nullopt;
}

bool matches_service_name(std::string_view name, std::string_view comm, std::string_view cgroup) {
  name = trim(name);
  if (name.empty()) {
    return false;
  }
  if (same(comm, name.substr(0, std::min(name.size(), comm_bytes)))) {
    return true;
  }
  while (!cgroup.empty()) {
    const std::size_t slash = cgroup.find('/');
    const std::string_view c = cgroup.substr(0, slash);
    if (!c.empty() && component_is(c, name)) {
      return true;
    }
    if (slash == std::string_view::npos) {
      break;
    }
    cgroup.remove_prefix(slash + 1);
  }
  return false;
}

bool matches_pattern(std::string_view pattern, std::string_view comm, std::string_view cgroup) {
  // explain's victim grammar (parse_victim), matched as its SQL matches; pid:N and tid:N never
  // (set_service refuses them: they change with every restart).
  if (pattern.starts_with("pid:") || pattern.starts_with("tid:")) {
    return false;
  }
  auto v = parse_victim(pattern, "service");
  return v && v->what != victim::kind::all && v->matches(comm, cgroup);
}

bool service_rule::matches(std::string_view comm, std::string_view cgroup) const {
  if (patterns.empty()) {
    return matches_service_name(name, comm, cgroup);
  }
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string &p) { return matches_pattern(p, comm, cgroup); });
}

std::string service_rule::describe() const {
  const std::string who = "service " + name;
  if (patterns.empty()) {
    return who + ": threads whose comm or a cgroup path component is its name";
  }
  std::string list;
  for (const auto &p : patterns) {
    list += (list.empty() ? "" : ", ") + p;
  }
  return who + ": its mapping (" + list + ")";
}

baseline_choice
choose_baseline(stretch window, std::int64_t min_len, const std::vector<stretch> &incidents,
                std::int64_t horizon,
                const std::function<std::int64_t(std::int64_t, std::int64_t)> &recorded_ns) {
  const std::int64_t len = std::max(window.b - window.a, min_len);
  const baseline_choice plain{{window.a - len, window.a}, false, 0};
  std::int64_t end = window.a;
  int skipped = 0;
  // Bounded: a candidate steps back past an incident, a quarter of its length or (nothing
  // recorded) its whole length each time: 256 steps of a 5-minute baseline reach back a day
  // through gaps, ~5 hours through a half-recorded stretch.
  for (int step = 0; step < 256 && end - len >= horizon; ++step) {
    const std::int64_t start = end - len;
    std::optional<std::int64_t> before;
    for (const auto &x : incidents) {
      if (x.a < end && x.b > start) {
        before = before ? std::min(*before, x.a) : x.a;
      }
    }
    if (before) {
      end = *before;
      ++skipped;
      continue;
    }
    const std::int64_t recorded = recorded_ns(start, end);
    if (2 * recorded >= len) {
      return {{start, end}, true, skipped};
    }
    // Back a quarter of its length, or across the whole stretch when none of it was recorded
    // (rschedd stopped: a gap is crossed in a few steps).
    end -= recorded == 0 ? len : std::max<std::int64_t>(1, len / 4);
  }
  return plain;
}

} // namespace rsched::query::detail
