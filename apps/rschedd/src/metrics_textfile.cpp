// --metrics-textfile (metrics_textfile.hpp).
#include "rsched/rschedd/metrics_textfile.hpp"

#include "rsched/base/safe_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace rsched::rschedd {

namespace om = openmetrics;

metrics_textfile::metrics_textfile(std::string path, metrics_board &board,
                                   std::function<void(std::string_view)> note)
    : path_(std::move(path)), board_(board), note_(std::move(note)) {
  thread_ = std::thread([this] { run(); });
}

metrics_textfile::~metrics_textfile() {
  board_.stop();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void metrics_textfile::run() {
  std::uint64_t seen = 0;
  while (board_.wait_newer(seen)) {
    (void)flush(); // noted there
    std::lock_guard lock(write_mu_);
    seen = attempted_gen_; // a failed write is tried again with the next interval
  }
}

result<void> metrics_textfile::flush() {
  std::lock_guard lock(write_mu_);
  auto w = write_once();
  if (!w && !reported_) {
    if (note_) {
      note_(fmt::format("rschedd: --metrics-textfile: {}\n", w.err().msg));
    }
    reported_ = true;
  } else if (w && reported_) {
    if (note_) {
      note_("rschedd: --metrics-textfile: writing again\n");
    }
    reported_ = false;
  }
  return w;
}

result<void> metrics_textfile::write_once() {
  const metrics_board::text t = board_.render(om::format::prometheus);
  attempted_gen_ = std::max(attempted_gen_, t.generation);
  if (t.generation == 0 || t.generation <= written_gen_) {
    return {};
  }
  // A temporary with an unpredictable name opened O_EXCL|O_NOFOLLOW in FILE's directory, renamed
  // over FILE (rsched::safe_file): the directory may belong to node_exporter's user, who could
  // otherwise plant a link at a predictable name and make root write through it. 0644 whatever
  // the umask (the service's is 0027): node_exporter reads it as another user. No fsync: the
  // file is rewritten every interval and a crash loses at most that interval's text.
  safe_file::options o;
  o.mode = 0644;
  o.apply_umask = false;
  o.sync = false;
  o.devices = false; // a FIFO planted there would block or be swapped: replaced, never opened
  if (auto w = write_file_safely(path_, *t.body, o); !w) {
    return w.err();
  }
  written_gen_ = t.generation;
  return {};
}

} // namespace rsched::rschedd
