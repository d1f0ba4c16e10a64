#pragma once
// explain()'s stages (docs/SQL.md, "explain"), private to the query module and apart so that each
// can be tested on its own over plain data:
//   1 the scope: the window, the victims and why those, the baseline (explain_scope_stage.cpp);
//   2 the victims, ranked, and 3 the evidence of the window and the baseline (explain_rank.cpp);
//   4 the causes of one victim (explain_causes.cpp);
//   5 the rows, and explain() itself (tvf_explain.cpp);
//   6 one pass over a set of threads (analyze) and the chain behind a held sleep
//     (explain_chain.cpp).
// The reads of a period are explain_read.hpp's; the pure choices of the scope explain_scope.hpp's.
#include "rsched/base/result.hpp"

#include "causes.hpp"
#include "explain_read.hpp"
#include "explain_scope.hpp"
#include "vtab.hpp"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

struct sqlite3;

namespace rsched::query::detail {

// A culprit process's identity: pid (NULL on rollup rows, 0 for <idle>), comm, cgroup.
using culprit_key = std::tuple<int, std::int64_t, std::string, std::string>;
inline culprit_key key_of(const culprit_sum &c) {
  return {c.kind, c.pid.value_or(-1), c.comm, c.cgroup};
}

// One cause of one victim.
struct cause_row {
  std::string kind;
  std::optional<std::int64_t> pid;
  std::optional<std::string> comm, cgroup;
  std::optional<double> share; // percent of the victim's excess wait; NULL for evidence
  // The cause's size in the window and at the baseline rate, in `unit`'s columns.
  enum class unit : std::uint8_t { ns, pct, count } in = unit::ns;
  double measure = 0, measure_baseline = 0;
  std::string summary;
  std::optional<std::string> via; // the path from the victim to the culprit (a held sleep's)
  int order = 0; // 0: a share of the wait; 1: migrations; 2: pressure; 3: a waker (after them)
};

// How a victim is ranked: against its own baseline; new in the window (no baseline of its own:
// everything is excess), ranked after those; a culprit of the window (its process held up
// other processes' threads longer than its own threads' excess), ranked last.
enum class victim_class : std::uint8_t { baseline, fresh, culprit };

struct victim_row {
  std::int64_t thread_id = 0;
  const thread_stats *w = nullptr;
  const thread_stats *base = nullptr; // nullptr: nothing of it in the baseline
  std::int64_t expected_ns = 0;       // its scheduling delay at the baseline rate
  std::int64_t excess_ns = 0;         // ... and the delay beyond it
  std::int64_t late_excess_ns = 0;    // its lateness (delay, held, blocked) beyond the rate's
  victim_class cls = victim_class::baseline;
};

// --- Stage 1: the scope (the window, the victims and why those, the baseline) ---------------

// What explain() judges.
struct explain_scope {
  std::int64_t a = 0, b = 0;                   // the window, as given
  std::optional<std::int64_t> annotation;      // explain(ID)
  victims vs;                                  // empty: every thread
  std::shared_ptr<const service_rule> service; // victims from the page
  std::string rule;                            // which rule chose the victims (victims_rule)
};

// The scope of explain(ANNOTATION_ID [, NULL, victims]) or explain(start, end [, victims]):
// the window (an annotation's is named in `ctx`), the victims given, else those of the service
// the annotation's tags name, else every thread; and the rule that chose them.
result<explain_scope> scope_of(sqlite3 *db, const fn_context &ctx, const args_t &args);

// The windows of the other incidents (annotations with an end, not rschedd's own notes).
result<std::vector<stretch>> other_incidents(sqlite3 *db, std::optional<std::int64_t> self);

// The baseline before the window's first interval `first`: the nearest stretch outside every
// other incident and at least half recorded (choose_baseline), else the one just before.
result<period> baseline_of(sqlite3 *db, const explain_scope &s, std::int64_t first);

// --- Stage 2: the victims, ranked ------------------------------------------------------------

// Converts a baseline amount to the window's recorded time (whole ns); 0 without a baseline.
struct rate {
  long double scale = 0.0L;
  [[nodiscard]] std::int64_t operator()(std::int64_t x) const {
    return static_cast<std::int64_t>(std::llround(static_cast<long double>(x) * scale));
  }
};

// The threads of the window whose lateness (delay, held and blocked sleep) grew beyond their
// baseline rate's, by that extra lateness (most first, then by tid); a thread with nothing in
// the baseline is `fresh` (all of its lateness is extra). They point into `in_window` and
// `in_base`.
std::vector<victim_row>
rank_victims(const std::unordered_map<std::int64_t, thread_stats> &in_window,
             const std::unordered_map<std::int64_t, thread_stats> &in_base,
             const rate &at_baseline_rate);

// Marks the victims whose process is a root culprit of the window: the wait it caused other
// processes' ranked threads (their blame) is at least its own threads' summed excess, and its
// own threads did not wait mostly behind one of those processes (two fair processes that hold
// each other up, a service and the batch job beside it, are each other's culprits: neither is
// the root). Then orders the victims by class (stable: by excess within one).
void classify(std::vector<victim_row> &ranked, const window_causes &blame_w);

// --- Stage 3: the evidence of the window and the baseline ------------------------------------

struct evidence {
  std::vector<window_causes> blame; // [0] the window's, [1] the baseline's
  std::vector<inverted_wait> inverted;
  std::unordered_map<std::int64_t, std::vector<const culprit_sum *>> culprits_w;
  std::map<std::pair<std::int64_t, culprit_key>, std::int64_t> wait_b;
  std::map<std::pair<std::int64_t, culprit_key>, const inverted_wait *> inv;
  std::unordered_map<std::int64_t, std::int64_t> mig_w, mig_b;
  std::map<std::string, std::pair<pressure_sum, pressure_sum>> pressures;
  std::unordered_map<std::int64_t, std::vector<waker_sum>> wake_w, wake_b;
  // The processes whose I/O grew most beyond their baseline rate's, most first (schema 20).
  struct io_extra {
    io_sum w;
    std::int64_t expected = 0;
  };
  std::vector<io_extra> io;
};

// The culprits of the ranked threads only (the others' are never read), from one read of both
// periods; the inversions, migrations, pressure of their cgroups and their wakers.
result<evidence> gather(sqlite3 *db, const victims &vs, const period &window,
                        const period &baseline, const std::vector<victim_row> &victims_ranked,
                        wakers_map wake_w, wakers_map wake_b);

// --- Stage 4: the causes of one victim -------------------------------------------------------

// What every cause of one victim is judged with.
struct judge {
  const evidence &e;
  const period &window;
  rate at_baseline_rate;
  double scale = 0.0; // the same as a double (counts)
};

// Every cause of one victim, shares first (by share), then migrations and pressure. Its cgroup
// (when it has one) must be in the evidence's pressures.
std::vector<cause_row> causes_for(const victim_row &v, const judge &j);

// --- One pass over a set of threads (the victims, and the threads the chains lead to) -------

// One pass of explain over a set of threads: their time in the window and the baseline, those
// later than their baseline rate ranked, and the evidence of the ranked ones. Owned whole: the
// ranked rows and the evidence point into its maps.
struct analysis {
  std::unordered_map<std::int64_t, thread_stats> in_window, in_baseline;
  std::vector<victim_row> ranked;
  evidence e;
  rate at_baseline_rate;
};

result<std::unique_ptr<analysis>> analyze(sqlite3 *db, const victims &vs, const period &window,
                                          const period &baseline);

// --- Stage 6: the chain behind a held sleep --------------------------------------------------

// A hop of a chain: the waker of a held sleep (a process and thread name, as the wakeup group
// records it) judged as a victim itself over the same window and baseline: its thread that did
// worst and that thread's first cause, when it explains at least a tenth of its extra lateness.
struct hop {
  std::int64_t tid = 0, pid = 0;
  std::string comm, cgroup;
  std::optional<cause_row> top; // nullopt: it was not held up (by a tenth or more)
};

// Follows the wakers of held sleeps: each hop's waker is explained as a victim itself, over
// every thread of the window (one more pass over the window and the baseline when explain's
// own was over fewer), up to max_hops, stopping where a hop is not held up by a tenth or more or
// comes back to a thread group of the path.
class chain_follower {
public:
  chain_follower(const period &window, const analysis &every_thread)
      : window_(window), all_(every_thread) {}

  // The wakeup causes of `v` with their path (`via`), the culprit at its end and kind `lock`
  // where the waker was itself held up.
  // Every other cause with a share names its culprit one step from the victim.
  void follow(const victim_row &v, std::vector<cause_row> &causes);

private:
  using key = std::pair<std::int64_t, std::string>; // the waker: its pid and thread name

  void follow_one(const victim_row &v, cause_row &c);

  // The hop of waker `k`: its thread that did worst (by extra lateness; else the latest of its
  // threads in the window) and that one's first cause; nullptr when no thread of it is recorded
  // in the window.
  const hop *hop_of(const key &k, std::int64_t but_tid);

  const period &window_;
  const analysis &all_;
  std::map<std::tuple<std::int64_t, std::string, std::int64_t>, std::optional<hop>> hops_;
};

} // namespace rsched::query::detail
