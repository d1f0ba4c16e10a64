#pragma once
// The published metrics_state (metrics_state.hpp) and its text, shared between the recorder and
// the readers.
//
// The recorder thread only adds each interval to a metrics_state (~1.5 µs per thread
// row) and publishes a copy of it (a few hundred KB at most: the series are bounded); rendering
// the text happens on the reader's thread (the HTTP server's event loop, http_server.hpp; the
// textfile writer), so a slow, hostile or hammering scraper never holds up recording.
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/rschedd/metrics_state.hpp"

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace rsched::rschedd {

// The latest published state, shared between the recorder (one writer) and any number of
// readers; each reader renders the text it needs, once per published interval and format.
class metrics_board {
public:
  void publish(const metrics_state &s);
  // The text of the latest state in `f` (empty before the first interval) and its generation
  // (0 before the first interval).
  struct text {
    std::shared_ptr<const std::string> body;
    std::uint64_t generation = 0;
  };
  text render(openmetrics::format f);
  // Blocks until a state newer than `generation` is published or `stop()` is called; false
  // when stopped.
  bool wait_newer(std::uint64_t generation);
  void stop();

private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const metrics_state> state_;
  std::uint64_t generation_ = 0;
  bool stopped_ = false;
  // Rendered texts, per format, of generation cache_gen_[f].
  std::array<std::shared_ptr<const std::string>, 2> cache_;
  std::array<std::uint64_t, 2> cache_gen_{};
  std::mutex render_mu_; // one render at a time; readers of a cached text do not wait for it
};

} // namespace rsched::rschedd
