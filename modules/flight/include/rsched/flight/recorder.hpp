#pragma once
// The flight recorder's thread (rschedd --flight-recorder): reads the BPF rings every 50 ms into
// a window of the last seconds (window.hpp), watches every thread's wait when a threshold is
// set, and saves the window as a Perfetto trace when asked (a signal, an annotation) or when a
// wait crosses the threshold. Requests are coalesced, one capture per window (coalesce.hpp);
// a window without events is not written. Each file starts with a clock snapshot (boot time to
// wall time, for Perfetto). It never writes the database: each capture's outcome is taken by
// the recorder's thread (take_results), which lists it in the `captures` table and applies the
// retention.
#include "rsched/flight/coalesce.hpp"
#include "rsched/flight/program.hpp"
#include "rsched/flight/window.hpp"

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rsched::flight {

struct recorder_config {
  std::int64_t span_ns = 10'000'000'000;     // --flight-recorder SECONDS
  std::size_t max_events_per_cpu = 1U << 20; // 64 MiB a CPU
  std::optional<std::uint64_t> threshold_ns; // --flight-trigger: a thread's wait above it
  std::int64_t min_gap_ns = 60'000'000'000;  // --flight-trigger-gap: between two threshold captures
  std::int64_t rearm_ns = 1'000'000'000;     // a crossing again only after this long below
  std::int64_t read_every_ns = 50'000'000;   // reads of the BPF rings
  std::string dir;                           // where the trace files go
  mode_t file_mode = 0640;                   // as the database's
  std::optional<gid_t> group;                // as the database's
  std::function<void(std::string_view)> note; // one-line notes (stderr)
};

// What became of one capture.
struct capture_result {
  std::string trigger; // "signal", "threshold", "annotation"
  std::string reason;  // e.g. "tid 1234 (victim) waited 152.3 ms", "SIGUSR1", the annotation text
  std::optional<std::int64_t> annotation_id;
  std::int64_t start_ns = 0; // the window, UTC ns
  std::int64_t end_ns = 0;
  std::string file; // absolute path ("" when it failed)
  std::uint64_t bytes = 0;
  std::uint64_t events = 0;
  std::vector<std::uint32_t> lossy_cpus;
  std::uint32_t coalesced = 0; // further requests this capture answers (coalesce.hpp)
  std::string error;           // why it failed ("" when written or skipped)
  // Why nothing was written, not a failure ("" otherwise): the window held no events, or the
  // request's moment is inside a capture already saved.
  std::string skipped;
};

class recorder {
public:
  recorder(program prog, recorder_config cfg);
  ~recorder(); // stops the thread
  recorder(const recorder &) = delete;
  recorder &operator=(const recorder &) = delete;

  // Saves the window that ends now (or at `at_real_ns`, UTC, when within the window): taken
  // within one read period. Thread-safe.
  void request(std::string trigger, std::string reason,
               std::optional<std::int64_t> annotation_id = std::nullopt,
               std::optional<std::int64_t> at_real_ns = std::nullopt);
  // Whether a request is still to be taken. Thread-safe.
  [[nodiscard]] bool pending() const;
  // The run ends: a request waiting for the end of its window (coalesce.hpp) is saved at the
  // next read, its window ending then. Thread-safe.
  void flush();
  // The captures finished since the last call. Thread-safe.
  std::vector<capture_result> take_results();

  struct counters {
    std::uint64_t events = 0;       // read from the rings
    std::uint64_t lost = 0;         // overwritten before they were read
    std::uint64_t held = 0;         // in the window now
    std::uint64_t crossings = 0;    // waits above the threshold that began an episode
    std::uint64_t rate_limited = 0; // of them, not captured (--flight-trigger-gap)
    std::uint64_t captures = 0;     // files written
    std::uint64_t coalesced = 0;    // requests answered by another request's capture
    std::uint64_t empty = 0;        // windows without events: not written
  };
  [[nodiscard]] counters stats() const;
  [[nodiscard]] const program &bpf() const { return prog_; }

private:
  struct request_t {
    std::string trigger, reason;
    std::optional<std::int64_t> annotation_id;
    std::optional<std::int64_t> at_real_ns; // a mark's time; nullopt: when asked
    std::uint64_t asked_boot_ns;
  };
  // A request due, with its moment in boot ns.
  struct due_request {
    std::uint64_t at;
    request_t q;
  };
  // The requests that wait for the end of the next window (coalesce.hpp).
  struct follow_up {
    std::uint64_t end; // boot ns
    request_t first;
    std::uint32_t more = 0;
  };

  void run();
  void round(const trace::clock_snapshot &now);
  void serve(std::vector<due_request> due, const trace::clock_snapshot &now, bool flush);
  void take_follow_up(const trace::clock_snapshot &now);
  // Saves the window ending at `to_boot` unless it is empty; a request's saved window is told
  // to the coalescer.
  void capture(std::uint64_t to_boot, const trace::clock_snapshot &now, capture_result r,
               bool request);
  void write(const trace::trace_input &in, capture_result &r);
  void finish(capture_result r, std::size_t requests);

  program prog_;
  recorder_config cfg_;
  window win_;
  std::optional<wait_watch> watch_;
  struct pending_event {
    std::uint32_t cpu;
    rsched_flight_event e;
  };
  std::vector<pending_event> pending_;
  std::vector<std::uint64_t> lost_seen_;
  // The threshold trigger: armed until a crossing, re-armed after rearm_ns without one.
  bool armed_ = true;
  std::uint64_t last_crossing_ = 0;
  std::optional<std::uint64_t> last_fire_;

  request_coalescer coalescer_;
  std::optional<follow_up> next_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool flush_ = false;
  std::vector<request_t> requests_;
  std::size_t unfinished_ = 0; // requests not yet in results_
  std::vector<capture_result> results_;
  counters counters_;
  std::thread thread_;
};

// The captures directory of a database: "<dir>/<file name>.captures" (rsched.db ->
// rsched.db.captures), one for each database, a.db and a.sqlite beside each other too.
std::string captures_dir(const std::string &db_path);
// Where an rschedd before issue 51 wrote them: "<dir>/<stem>.captures" (rsched.db ->
// rsched.captures), which a.db and a.sqlite shared. Its files stay listed in `captures` and are
// pruned from there; nothing new is written into it.
std::string legacy_captures_dir(const std::string &db_path);

// Removes a pruned capture's file: only a plain name directly inside one of `dirs`, each
// reached without following a link and this user's private directory (as ensure_capture_dir
// requires), so that a directory planted or swapped in since never has a file removed through
// it. A file already gone is no error. One line on refusal.
result<void> remove_capture(const std::string &file, const std::vector<std::string> &dirs);

// Makes `dir` (mode 0700, or 0750 with `group`) unless it is there, and refuses one rschedd
// must not write into: a symlink, not a directory, not owned by this user, or writable by
// others (root writes the traces: a captures directory another user planted beside a
// database in a shared directory would receive them). One line on refusal.
result<void> ensure_capture_dir(const std::string &dir, std::optional<gid_t> group);

} // namespace rsched::flight
