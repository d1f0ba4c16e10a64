// explain(annotation_id) and explain(start, end [, victims]): from an incident's window to the
// threads that did worst against their own baseline and, for each, the causes the history
// holds, ranked by the share of the thread's extra wait they explain (docs/SQL.md, "explain").
// The stages are explain_stages.hpp's (the scope, the victims ranked, the evidence, the causes of
// one victim, the chain behind a held sleep); here are the rows (stage 5) and explain() itself.
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include "explain_stages.hpp"
#include "table_functions.hpp"
#include "tvf_window.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// --- Stage 5: the rows -----------------------------------------------------------------------

std::optional<std::int64_t> p99(const std::optional<stats::histogram> &h) {
  if (!h) {
    return std::nullopt;
  }
  auto r = stats::percentile(*h, 99.0);
  if (!r) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(r->value);
}

const char *class_name(victim_class c) {
  switch (c) {
  case victim_class::baseline:
    return "baseline";
  case victim_class::fresh:
    return "new";
  case victim_class::culprit:
    return "culprit";
  }
  return "";
}

template <typename T> value opt_value(const std::optional<T> &o) {
  value x;
  if (o) {
    x = *o;
  }
  return x;
}

// One victim's rows: one per cause, or one saying nothing was found. The victim's columns
// first, then the cause's, then how the victims and the baseline were chosen.
void emit(rows &out, std::int64_t rank, const victim_row &v, std::vector<cause_row> causes,
          const explain_scope &s, const period &baseline) {
  const thread_stats &t = *v.w;
  const auto victim_part = [&] {
    row r;
    r.reserve(31);
    r.emplace_back(rank);
    r.emplace_back(t.tid);
    r.emplace_back(t.pid);
    r.emplace_back(t.comm);
    r.emplace_back(t.cgroup);
    r.push_back(opt_value(v.base != nullptr ? p99(v.base->hist) : std::nullopt));
    r.push_back(opt_value(p99(t.hist)));
    r.emplace_back(t.wait_ns);
    r.emplace_back(v.expected_ns);
    r.emplace_back(v.excess_ns);
    return r;
  };
  const auto scope_part = [&](row &r) {
    r.emplace_back(std::string(class_name(v.cls)));
    r.emplace_back(s.rule);
    r.emplace_back(baseline.a);
    r.emplace_back(baseline.b);
    r.emplace_back(t.held_ns);
    r.emplace_back(t.blocked_ns);
    r.emplace_back(v.late_excess_ns);
  };
  if (causes.empty()) {
    row r = victim_part();
    for (int i = 0; i < 13; ++i) {
      r.emplace_back();
    }
    r.emplace_back(std::string("no recorded cause"));
    scope_part(r);
    out.push_back(std::move(r));
    return;
  }
  std::int64_t cause_rank = 0;
  for (auto &c : causes) {
    row r = victim_part();
    r.emplace_back(++cause_rank);
    r.emplace_back(c.kind);
    r.push_back(opt_value(c.pid));
    r.push_back(opt_value(c.comm));
    r.push_back(opt_value(c.cgroup));
    r.push_back(opt_value(c.via));
    r.push_back(opt_value(c.share));
    // measure_ns, baseline_ns, measure_pct, baseline_pct, measure_count, baseline_count: the
    // pair of the cause's unit.
    for (const auto u : {cause_row::unit::ns, cause_row::unit::pct, cause_row::unit::count}) {
      if (u == c.in) {
        if (u == cause_row::unit::ns) {
          r.emplace_back(static_cast<std::int64_t>(std::llround(c.measure)));
          r.emplace_back(static_cast<std::int64_t>(std::llround(c.measure_baseline)));
        } else {
          r.emplace_back(c.measure);
          r.emplace_back(c.measure_baseline);
        }
      } else {
        r.emplace_back();
        r.emplace_back();
      }
    }
    r.emplace_back(std::move(c.summary));
    scope_part(r);
    out.push_back(std::move(r));
  }
}

// Whether thread `t` is one of the victims `vs` (it matches every one), as victims_sql() says.
bool in_scope(const victims &vs, const thread_stats &t) {
  return std::all_of(vs.begin(), vs.end(), [&](const victim &v) {
    switch (v.what) {
    case victim::kind::pid:
      return t.pid == v.number;
    case victim::kind::tid:
      return t.tid == v.number;
    default:
      return v.matches(t.comm, t.cgroup);
    }
  });
}

} // namespace

result<rows> explain_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto s = scope_of(db, ctx, args);
  if (!s) {
    return s.err();
  }
  // The window and the baseline before its first interval.
  auto window = period_of(db, s->a, s->b);
  if (!window) {
    return window.err();
  }
  std::int64_t first = s->a;
  if (auto ivs = intervals_in(db, s->a, s->b); ivs && !ivs->empty()) {
    first = ivs->front().start;
  }
  auto baseline = baseline_of(db, *s, first);
  if (!baseline) {
    return baseline.err();
  }
  // Every thread is judged (the chains behind the victims' sleeps lead to others), once; the
  // victims are those of the scope among them.
  auto a = analyze(db, {}, *window, *baseline);
  if (!a) {
    return a.err();
  }
  const analysis &an = **a;
  std::vector<victim_row> ranked = an.ranked; // the victims' (the chains read every thread's)
  if (!s->vs.empty()) {
    const bool any = std::any_of(an.in_window.begin(), an.in_window.end(),
                                 [&](const auto &t) { return in_scope(s->vs, t.second); });
    if (s->service && !any) {
      // The service names no thread in the window: every thread, and the rule says so.
      s->rule += ": no thread of it in the window; every thread";
      s->vs.clear();
    } else {
      std::erase_if(ranked, [&](const victim_row &v) { return !in_scope(s->vs, *v.w); });
    }
  }
  classify(ranked, an.e.blame[0]);
  const judge j{an.e, *window, an.at_baseline_rate, static_cast<double>(an.at_baseline_rate.scale)};
  chain_follower chains(*window, an);
  rows out;
  std::int64_t rank = 0;
  for (const auto &v : ranked) {
    auto causes = causes_for(v, j);
    chains.follow(v, causes);
    emit(out, ++rank, v, std::move(causes), *s, *baseline);
  }
  return out;
}

} // namespace rsched::query::detail
