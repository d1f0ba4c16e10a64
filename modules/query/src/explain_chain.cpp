// explain()'s stage 6 (explain_stages.hpp), and the pass it and explain() share: one pass of
// explain over a set of threads (analyze), and the chain behind a held sleep, each waker judged
// as a victim itself over every thread of the window.
#include "explain_stages.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace rsched::query::detail {

result<std::unique_ptr<analysis>> analyze(sqlite3 *db, const victims &vs, const period &window,
                                          const period &baseline) {
  auto a = std::make_unique<analysis>();
  if (auto r = delay_by_thread(db, vs, window, a->in_window); !r) {
    return r.err();
  }
  if (auto r = delay_by_thread(db, vs, baseline, a->in_baseline); !r) {
    return r.err();
  }
  wakers_map wake_w, wake_b;
  sleep_reader sleep(db, vs);
  if (auto r = sleep.read(window, a->in_window, wake_w); !r) {
    return r.err();
  }
  if (auto r = sleep.read(baseline, a->in_baseline, wake_b); !r) {
    return r.err();
  }
  // The baseline rate over the window's recorded time; with no recorded baseline, nothing is
  // expected (every wait is extra).
  if (baseline.recorded_ns > 0) {
    a->at_baseline_rate.scale = static_cast<long double>(window.recorded_ns) /
                                static_cast<long double>(baseline.recorded_ns);
  }
  a->ranked = rank_victims(a->in_window, a->in_baseline, a->at_baseline_rate);
  auto e = gather(db, vs, window, baseline, a->ranked, std::move(wake_w), std::move(wake_b));
  if (!e) {
    return e.err();
  }
  a->e = std::move(*e);
  return a;
}

// --- Stage 6: the chain behind a held sleep --------------------------------------------------

namespace {

constexpr double min_hop_share_pct = 10.0;
constexpr int max_hops = 3;

std::string thread_label(const std::string &comm, std::int64_t id) {
  return fmt::format("{}[{}]", comm, id);
}

// Where a chain ends: the culprit of its last hop's cause.
std::string end_label(const cause_row &c) {
  if (c.kind == "throttle") {
    return "throttling of " + c.cgroup.value_or("?");
  }
  if (c.kind == "io") {
    return c.comm ? "I/O \u2190 " + (c.pid && *c.pid > 0 ? thread_label(*c.comm, *c.pid) : *c.comm)
                  : std::string("I/O");
  }
  return c.pid && *c.pid > 0 ? thread_label(c.comm.value_or("?"), *c.pid) : c.comm.value_or("?");
}

} // namespace

void chain_follower::follow(const victim_row &v, std::vector<cause_row> &causes) {
  for (auto &c : causes) {
    if (c.kind == "wakeup" && c.pid && *c.pid > 0 && c.comm &&
        c.share.value_or(0.0) >= min_hop_share_pct) {
      follow_one(v, c);
    } else if (c.share) {
      c.via = thread_label(v.w->comm, v.w->tid) + " \u2190 " + end_label(c);
    }
  }
}

void chain_follower::follow_one(const victim_row &v, cause_row &c) {
  std::vector<std::string> via{thread_label(v.w->comm, v.w->tid)};
  const key own{v.w->pid, v.w->comm};
  std::set<key> seen{own};
  key k{*c.pid, *c.comm};
  std::string story;
  for (int n = 1;; ++n) {
    // A sleep another thread of its own group ended (a pool handing a lock on) is followed
    // through that thread: the group's worst thread but the victim, its causes beyond the
    // group.
    const bool handoff = n == 1 && k == own;
    const hop *x = hop_of(k, handoff ? v.w->tid : 0);
    via.push_back(x != nullptr ? thread_label(x->comm, x->tid) : thread_label(k.second, k.first));
    // Held up by a waker of the path already (each woke the other): neither is the root.
    bool cycle = false;
    if (x != nullptr && x->top && x->top->kind == "wakeup" && x->top->pid && x->top->comm) {
      const key next{*x->top->pid, *x->top->comm};
      cycle = next == k || seen.contains(next);
    }
    // The path is max_hops long: this waker is named the root, whatever held it up.
    const bool held = x != nullptr && x->top && !cycle && (handoff || !seen.contains(k));
    if (held && n >= max_hops) {
      story += fmt::format("; {} was held up in turn: why() follows it", via.back());
    }
    if (!held || n >= max_hops) {
      if (n > 1) { // a waker further on, not held up itself (or the last named): the root
        c.pid = k.first;
        c.comm = k.second;
        c.cgroup = x != nullptr ? std::optional<std::string>(x->cgroup) : std::nullopt;
      }
      break;
    }
    seen.insert(k);
    const cause_row &t = *x->top;
    c.kind = "lock";
    std::string_view said = t.summary;
    if (constexpr std::string_view follows = "; why() follows it"; said.ends_with(follows)) {
      said.remove_suffix(follows.size());
    }
    story += fmt::format("; {} was held up: {}", via.back(), said);
    if (t.kind == "wakeup" && t.pid && *t.pid > 0 && t.comm) {
      k = {*t.pid, *t.comm};
      continue;
    }
    c.pid = t.pid;
    c.comm = t.comm;
    c.cgroup = t.cgroup;
    via.push_back(end_label(t));
    break;
  }
  std::string path;
  for (const auto &p : via) {
    path += (path.empty() ? "" : " \u2190 ") + p;
  }
  c.via = std::move(path);
  if (!story.empty()) {
    constexpr std::string_view follows = "; why() follows it";
    if (c.summary.ends_with(follows)) {
      c.summary.resize(c.summary.size() - follows.size());
    }
    c.summary += story;
  }
}

const hop *chain_follower::hop_of(const key &k, std::int64_t but_tid) {
  const auto memo = std::make_tuple(k.first, k.second, but_tid);
  if (auto it = hops_.find(memo); it != hops_.end()) {
    return it->second ? &*it->second : nullptr;
  }
  const analysis &a = all_;
  const victim_row *worst = nullptr;
  const auto of_k = [&](const thread_stats &t) {
    return t.pid == k.first && t.comm == k.second && t.tid != but_tid;
  };
  for (const auto &v : a.ranked) {
    if (of_k(*v.w) && (worst == nullptr || v.late_excess_ns > worst->late_excess_ns)) {
      worst = &v;
    }
  }
  std::optional<hop> h;
  if (worst != nullptr) {
    h = hop{worst->w->tid, worst->w->pid, worst->w->comm, worst->w->cgroup, std::nullopt};
    const judge j{a.e, window_, a.at_baseline_rate, static_cast<double>(a.at_baseline_rate.scale)};
    for (auto &c : causes_for(*worst, j)) {
      // Sleeps another thread of the group ended are the group's own hand-offs: what held
      // the group up is beyond it.
      const bool within = c.kind == "wakeup" && c.pid == k.first && c.comm == k.second;
      if (c.order == 0 && !within && c.share.value_or(0.0) >= min_hop_share_pct) {
        h->top = std::move(c);
        break;
      }
    }
  } else {
    const thread_stats *latest = nullptr;
    for (const auto &[id, t] : a.in_window) {
      if (of_k(t) && (latest == nullptr || t.late_ns() > latest->late_ns())) {
        latest = &t;
      }
    }
    if (latest != nullptr) {
      h = hop{latest->tid, latest->pid, latest->comm, latest->cgroup, std::nullopt};
    }
  }
  auto &slot = hops_[memo];
  slot = std::move(h);
  return slot ? &*slot : nullptr;
}

} // namespace rsched::query::detail
