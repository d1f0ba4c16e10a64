#pragma once
// The daemon's side of the database: creates or opens it, writes one interval per transaction.
#include "rsched/base/result.hpp"
#include "rsched/store/records.hpp"

#include <memory>
#include <string>

namespace rsched::store {

class writer {
public:
  // Opens (creating file, parent directory and schema when missing) the database at `path`.
  // A new file gets mode 0640, its directory 0750. WAL mode, synchronous=NORMAL. A database of
  // schema version 1 is upgraded in place to the current version (one transaction; the v1 data
  // stays). A file that is not an rsched database, or one of a newer schema version, is refused
  // and left untouched.
  static result<writer> open(const std::string &path);

  // Writes one interval (intervals row, thread, CPU, perf counter time and schedstat rows) in a
  // single transaction with prepared statements. On error nothing of the interval is written.
  result<void> write(const interval_row &iv);

  writer(writer &&) noexcept;
  writer &operator=(writer &&) noexcept;
  ~writer();

private:
  struct impl;
  explicit writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace rsched::store
