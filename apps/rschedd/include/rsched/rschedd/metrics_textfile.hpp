#pragma once
// --metrics-textfile: the published text (metrics_board.hpp) written to a file after each
// interval, for node_exporter's textfile collector.
#include "rsched/base/result.hpp"
#include "rsched/rschedd/metrics_board.hpp"

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace rsched::rschedd {

// --metrics-textfile FILE: after each published interval the 0.0.4 text (what node_exporter's
// textfile collector reads) goes to a temporary with an unpredictable name beside FILE, then
// replaces FILE by rename (rsched::safe_file), on its own thread.
class metrics_textfile {
public:
  metrics_textfile(std::string path, metrics_board &board,
                   std::function<void(std::string_view)> note);
  ~metrics_textfile(); // writes nothing more; the board must be stopped first or still alive
  metrics_textfile(const metrics_textfile &) = delete;
  metrics_textfile &operator=(const metrics_textfile &) = delete;
  // Writes the latest text now if it was not written yet (startup, the final interval). An
  // error is also noted once (and "writing again" when it clears).
  result<void> flush();

private:
  void run();
  result<void> write_once();
  std::string path_;
  metrics_board &board_;
  std::function<void(std::string_view)> note_;
  std::mutex write_mu_;
  std::uint64_t written_gen_ = 0;   // the last generation in the file
  std::uint64_t attempted_gen_ = 0; // the last generation tried
  bool reported_ = false;
  std::thread thread_;
};

} // namespace rsched::rschedd
