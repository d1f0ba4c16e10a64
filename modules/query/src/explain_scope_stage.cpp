// explain()'s stage 1, the scope (explain_stages.hpp): the window explain() judges, the victims
// and why those, and the baseline the window is judged against.
#include "rsched/sqlite/statement.hpp"

#include "explain_stages.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <optional>
#include <sqlite3.h>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// The baseline: the period just before the window's first interval, as long as the window but
// at least this.
constexpr std::int64_t min_baseline_ns = 5LL * 60 * 1'000'000'000;

struct annotation_info {
  std::int64_t a = 0, b = 0;
  std::string tags;
};

result<annotation_info> annotation_of(sqlite3 *db, sqlite3_value *v) {
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    return make_error("explain: explain(ANNOTATION_ID) takes an annotation's id (an integer), "
                      "explain(start, end [, victims]) a window");
  }
  const std::int64_t id = sqlite3_value_int64(v);
  auto st =
      sqlite::prepare_stmt(db, "SELECT start_ns, end_ns, tags FROM annotations WHERE id = ?1");
  if (!st) {
    return make_error("explain: this database has no annotations table");
  }
  sqlite3_bind_int64(st->get(), 1, id);
  if (sqlite3_step(st->get()) != SQLITE_ROW) {
    return make_error(
        fmt::format("explain: no annotation {} (SELECT id, text FROM annotations)", id));
  }
  annotation_info out;
  out.a = sqlite3_column_int64(st->get(), 0);
  // A point in time: the interval that holds it.
  out.b = sqlite3_column_type(st->get(), 1) == SQLITE_NULL ? out.a + 1
                                                           : sqlite3_column_int64(st->get(), 1);
  out.tags = sqlite::column_text(st->get(), 2);
  if (out.b <= out.a) {
    return make_error(fmt::format("explain: annotation {} ends before it starts", id));
  }
  return out;
}

// The patterns recorded for service `name` (table services, schema 19; none before it).
result<std::vector<std::string>> service_patterns(sqlite3 *db, const std::string &name) {
  std::vector<std::string> out;
  if (!has_table(db, "services")) {
    return out;
  }
  auto st = sqlite::prepare_stmt(
      db, "SELECT pattern FROM services WHERE name = ?1 ORDER BY created_ns, pattern");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_text(st->get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back(sqlite::column_text(st->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("explain: ") + sqlite3_errmsg(db));
  }
  return out;
}

// The victims of explain(ID) without victims given: the service its tags name, by its mapping
// or its name; every thread when they name none.
result<void> victims_from_page(sqlite3 *db, const annotation_info &an, std::int64_t id,
                               explain_scope &s) {
  const auto name = service_of_tags(an.tags);
  if (!name) {
    s.rule = fmt::format("every thread (annotation {} names no service: tag it service:NAME)", id);
    return {};
  }
  auto patterns = service_patterns(db, *name);
  if (!patterns) {
    return patterns.err();
  }
  s.service = std::make_shared<const service_rule>(service_rule{*name, std::move(*patterns)});
  victim v;
  v.what = victim::kind::service;
  v.service = s.service;
  s.vs.push_back(std::move(v));
  s.rule = s.service->describe();
  return {};
}

result<victim> victim_arg(sqlite3_value *v) {
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  return parse_victim(
      std::string_view(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_value_bytes(v))),
      "explain");
}

} // namespace

result<explain_scope> scope_of(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  const auto given = [&](std::size_t i) {
    return i < args.size() && args[i] != nullptr && sqlite3_value_type(args[i]) != SQLITE_NULL;
  };
  explain_scope s;
  if (!given(1)) {
    if (!given(0)) {
      return make_error("explain: give an annotation id, or a window: explain(ANNOTATION_ID "
                        "[, NULL, victims]) or explain(start, end [, victims])");
    }
    auto an = annotation_of(db, args[0]);
    if (!an) {
      return an.err();
    }
    s.a = an->a;
    s.b = an->b;
    s.annotation = sqlite3_value_int64(args[0]);
    ctx.window_named = true;
    ctx.name_window(s.a, s.b);
    if (!given(2)) {
      if (auto r = victims_from_page(db, *an, *s.annotation, s); !r) {
        return r.err();
      }
      return s;
    }
  } else {
    if (!given(0)) {
      return make_error("explain: a window needs both start and end: explain(start, end [, "
                        "victims])");
    }
    auto ww = window_args(db, ctx, args, 0, 1, "explain");
    if (!ww) {
      return ww.err();
    }
    std::tie(s.a, s.b) = *ww;
    if (s.b <= s.a) {
      return make_error("explain: the window ends before it starts");
    }
  }
  if (given(2)) {
    auto v = victim_arg(args[2]);
    if (!v) {
      return v.err();
    }
    s.rule = "victims given: " + v->describe();
    s.vs.push_back(std::move(*v));
  } else {
    s.rule = "every thread (no victims given)";
  }
  return s;
}

result<std::vector<stretch>> other_incidents(sqlite3 *db, std::optional<std::int64_t> self) {
  std::vector<stretch> out;
  if (!has_table(db, "annotations")) {
    return out;
  }
  auto st = sqlite::prepare_stmt(db, "SELECT start_ns, end_ns FROM annotations WHERE end_ns > "
                                     "start_ns AND source <> 'rschedd' AND id IS NOT ?1");
  if (!st) {
    return st.err();
  }
  if (self) {
    sqlite3_bind_int64(st->get(), 1, *self);
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back({sqlite3_column_int64(st->get(), 0), sqlite3_column_int64(st->get(), 1)});
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("explain: ") + sqlite3_errmsg(db));
  }
  return out;
}

result<period> baseline_of(sqlite3 *db, const explain_scope &s, std::int64_t first) {
  auto incidents = other_incidents(db, s.annotation);
  if (!incidents) {
    return incidents.err();
  }
  std::int64_t horizon = first;
  if (auto st = sqlite::prepare_stmt(db, fmt::format("SELECT min(start_ns) FROM {}", timeline(db)));
      st && sqlite3_step(st->get()) == SQLITE_ROW &&
      sqlite3_column_type(st->get(), 0) != SQLITE_NULL) {
    horizon = sqlite3_column_int64(st->get(), 0);
  }
  std::optional<error> failed;
  const auto recorded = [&](std::int64_t a, std::int64_t b) -> std::int64_t {
    auto p = period_of(db, a, b);
    if (!p) {
      failed = p.err();
      return 0;
    }
    return p->recorded_ns;
  };
  const auto c = choose_baseline({first, s.b}, min_baseline_ns, *incidents, horizon, recorded);
  if (failed) {
    return *failed;
  }
  return period_of(db, c.at.a, c.at.b);
}

} // namespace rsched::query::detail
