#pragma once
// What explain() looks at, decided before anything is read (private to the query module): the
// victims an annotation's service names (docs/SQL.md, "explain": "Victims from the page") and
// the baseline stretch a window is judged against. Pure functions over plain data; the SQL
// edges are in tvf_explain.cpp.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::query::detail {

// The service an annotation's tags name: `service_name:X` (PagerDuty's export, kept as a tag by
// .import-incidents) or `service:X` (any other timeline's tags, a mark's --tag); the first one
// of those, trimmed; nullopt when there is none or it is empty.
std::optional<std::string> service_of_tags(std::string_view tags);

// Whether a thread (its comm and cgroup path) is service `name` by name: its comm is the name
// (the kernel keeps 15 bytes of it), or a component of its cgroup path is the name itself,
// NAME.service, NAME.slice, NAME.scope or an instance NAME@....service (systemd units, slices
// and scopes; a container runtime's cgroup named after the service).
bool matches_service_name(std::string_view name, std::string_view comm, std::string_view cgroup);

// One pattern of a service's mapping (table services), as explain's victims read it: `comm:GLOB`
// or a bare comm (GLOB when it has * ? or [), `cgroup:PATH` (the cgroup and its descendants;
// GLOB with wildcards). Whether it matches the thread.
bool matches_pattern(std::string_view pattern, std::string_view comm, std::string_view cgroup);

// A service's threads: by its recorded mapping (`patterns`, any of them) or, without one, by its
// name (matches_service_name).
struct service_rule {
  std::string name;
  std::vector<std::string> patterns;
  [[nodiscard]] bool matches(std::string_view comm, std::string_view cgroup) const;
  // "service api: its mapping (comm:api*, cgroup:/system.slice/api.service)" or "service api:
  // threads whose comm or a cgroup path component is its name", escaped for a terminal.
  [[nodiscard]] std::string describe() const;
};

// The SQL function a service victim's condition calls (rsched_in_service(rule, comm, cgroup),
// registered with rsched's functions) and the pointer type its rule is bound as.
inline constexpr const char *in_service_function = "rsched_in_service";
inline constexpr const char *service_rule_pointer_type = "rsched_service_rule";

// A stretch of time [a, b) (UTC ns).
struct stretch {
  std::int64_t a = 0, b = 0;
  friend bool operator==(const stretch &, const stretch &) = default;
};

// The baseline of `window`: the nearest stretch before it, as long as the window but at least
// `min_len`, that overlaps none of `incidents` (the other annotations' windows) and of which at
// least half was recorded (`recorded_ns(a, b)`: the recorded time in [a, b)), looked for back
// to `horizon` (the oldest recorded time) in at most 256 steps. `clean` false when there is
// none: the stretch just before the window, as explain always took it.
struct baseline_choice {
  stretch at;
  bool clean = true;
  int skipped = 0; // incidents stepped over to reach it
};
baseline_choice
choose_baseline(stretch window, std::int64_t min_len, const std::vector<stretch> &incidents,
                std::int64_t horizon,
                const std::function<std::int64_t(std::int64_t, std::int64_t)> &recorded_ns);

} // namespace rsched::query::detail
