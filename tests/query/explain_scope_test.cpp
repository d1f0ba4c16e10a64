// explain()'s scope, decided before anything is read (modules/query/src/explain_scope.hpp): the
// service an annotation names, which threads are that service, and the baseline stretch.
#include "explain_scope.hpp"

#include <catch2/catch.hpp>

#include <tuple>

using rsched::query::detail::choose_baseline;
using rsched::query::detail::matches_pattern;
using rsched::query::detail::matches_service_name;
using rsched::query::detail::service_of_tags;
using rsched::query::detail::service_rule;
using rsched::query::detail::stretch;

TEST_CASE("the service an annotation's tags name", "[explain][scope]") {
  using row = std::tuple<const char *, std::optional<std::string>>;
  const auto [tags, want] = GENERATE(table<const char *, std::optional<std::string>>({
      row{"service_name:checkout,incident_number:412", "checkout"}, // PagerDuty's import
      row{"incident_number:412,service_name:API Gateway", "API Gateway"},
      row{"capture, service: api ", "api"},    // a mark's --tag, spaces trimmed
      row{"service:,service_name:web", "web"}, // an empty one is skipped
      row{"services:api", std::nullopt},       // another key
      row{"", std::nullopt}, row{"sched_ext", std::nullopt},
      row{"service_name:a;b", "a;b"},      // a comma in a value was stored as ';'
      row{"service:x\x1b[2J", "x\x1b[2J"}, // bytes are data
  }));
  INFO(tags);
  CHECK(service_of_tags(tags) == want);
}

TEST_CASE("a service's threads by its name: comm or a cgroup path component", "[explain][scope]") {
  using row = std::tuple<const char *, const char *, const char *, bool>;
  const auto [name, comm, cgroup, want] =
      GENERATE(table<const char *, const char *, const char *, bool>({
          row{"api", "api", "/", true},
          row{"API", "api", "/", true},                            // case as people write it
          row{"api", "api-worker", "/", false},                    // a comm is the whole name
          row{"api", "java", "/system.slice/api.service", true},   // its systemd unit
          row{"api", "java", "/api.slice/x.scope", true},          // a slice
          row{"api", "java", "/user.slice/api.scope", true},       // a scope
          row{"api", "java", "/system.slice/api@2.service", true}, // a template's instance
          row{"api", "java", "/system.slice/api@.socket", false},
          row{"api", "java", "/docker/api", true},                 // a cgroup named after it
          row{"api", "java", "/system.slice/rapi.service", false}, // not a part of a component
          row{"api", "java", "/system.slice/api.service.d", false},
          row{"api", "java", "/system.slice/apis.service", false},
          row{"api", "java", "", false},
          row{"", "java", "/", false},
          // The kernel keeps 15 bytes of a name.
          row{"checkout-service-eu", "checkout-servic", "/", true},
          row{"checkout-service-eu", "checkout-serv", "/", false},
      }));
  INFO(name << " " << comm << " " << cgroup);
  CHECK(matches_service_name(name, comm, cgroup) == want);
}

TEST_CASE("a service's mapping: comm, comm GLOB, cgroup and its descendants", "[explain][scope]") {
  using row = std::tuple<const char *, const char *, const char *, bool>;
  const auto [pattern, comm, cgroup, want] =
      GENERATE(table<const char *, const char *, const char *, bool>({
          row{"postgres", "postgres", "/", true},
          row{"comm:postgres", "postgres", "/", true},
          row{"postgres", "Postgres", "/", false}, // a comm pattern is exact
          row{"comm:pg_*", "pg_wal", "/", true},
          row{"pg?", "pg1", "/", true},
          row{"cgroup:/system.slice/api.service", "java", "/system.slice/api.service", true},
          row{"cgroup:/system.slice/api.service/", "java", "/system.slice/api.service/w", true},
          row{"cgroup:/system.slice/api.service", "java", "/system.slice/api.service2", false},
          row{"cgroup:/system.slice/*.service", "java", "/system.slice/db.service", true},
          row{"cgroup:/", "java", "/anything", false}, // the root alone, as blame's victims
          row{"cgroup:/", "java", "/", true},
          row{"pid:12", "java", "/", false}, // never a service's
          row{"", "java", "/", false},
      }));
  INFO(pattern << " " << comm << " " << cgroup);
  CHECK(matches_pattern(pattern, comm, cgroup) == want);
}

TEST_CASE("a recorded mapping replaces the name rule", "[explain][scope]") {
  service_rule by_name{"api", {}};
  service_rule mapped{"api", {"comm:gunicorn", "cgroup:/web"}};
  CHECK(by_name.matches("api", "/"));
  CHECK_FALSE(mapped.matches("api", "/"));
  CHECK(mapped.matches("gunicorn", "/"));
  CHECK(mapped.matches("x", "/web/worker"));
  CHECK(by_name.describe() == "service api: threads whose comm or a cgroup path component is its "
                              "name");
  CHECK(mapped.describe() == "service api: its mapping (comm:gunicorn, cgroup:/web)");
  // Bytes are data here: the shell escapes a column once when it shows it (no \\x1b twice).
  CHECK(service_rule{"a\x1b[2J", {}}.describe() ==
        "service a\x1b[2J: threads whose comm or a cgroup path component is its name");
}

TEST_CASE("the baseline: the nearest recorded stretch before the window outside every other "
          "incident",
          "[explain][scope]") {
  constexpr std::int64_t min = 60;
  const auto all_recorded = [](std::int64_t a, std::int64_t b) { return b - a; };
  SECTION("no other incident: just before the window, as long as it but at least the minimum") {
    auto c = choose_baseline({1000, 1030}, 5 * min, {}, 0, all_recorded);
    CHECK(c.at == stretch{700, 1000});
    CHECK(c.clean);
    CHECK(c.skipped == 0);
    c = choose_baseline({1000, 1600}, 5 * min, {}, 0, all_recorded);
    CHECK(c.at == stretch{400, 1000});
  }
  SECTION("an earlier incident in the way: the stretch before it") {
    auto c = choose_baseline({1000, 1030}, 5 * min, {{900, 950}}, 0, all_recorded);
    CHECK(c.at == stretch{600, 900});
    CHECK(c.skipped == 1);
    // two, the second reached only after the first was stepped over
    c = choose_baseline({1000, 1030}, 5 * min, {{900, 950}, {500, 700}}, 0, all_recorded);
    CHECK(c.at == stretch{200, 500});
    CHECK(c.skipped == 2);
    // one that ended just where the stretch starts does not count
    c = choose_baseline({1000, 1030}, 5 * min, {{600, 700}}, 0, all_recorded);
    CHECK(c.at == stretch{700, 1000});
  }
  SECTION("a stretch less than half recorded is passed over") {
    const auto gap = [](std::int64_t a, std::int64_t b) { // nothing recorded in [600, 1000)
      return std::max<std::int64_t>(0, std::min<std::int64_t>(b, 600) - a);
    };
    auto c = choose_baseline({1000, 1030}, 5 * min, {}, 0, gap);
    CHECK(c.clean);
    CHECK(c.at.b <= 750); // [a, b) holds at least 150 s of [.., 600)
    CHECK(2 * gap(c.at.a, c.at.b) >= 300);
    // Ten hours with nothing recorded (rschedd stopped) are crossed, not walked a quarter at a
    // time (256 quarters of 5 minutes are 5.3 hours).
    auto far = choose_baseline({40'000, 40'030}, 5 * min, {}, 0, gap);
    CHECK(far.clean);
    CHECK(2 * gap(far.at.a, far.at.b) >= 300);
  }
  SECTION("nothing clean back to the oldest record: the stretch just before, not clean") {
    auto c = choose_baseline({1000, 1030}, 5 * min, {{500, 950}}, 400, all_recorded);
    CHECK_FALSE(c.clean);
    CHECK(c.at == stretch{700, 1000});
    const auto none = [](std::int64_t, std::int64_t) { return std::int64_t{0}; };
    c = choose_baseline({1000, 1030}, 5 * min, {}, 0, none);
    CHECK_FALSE(c.clean);
  }
}
