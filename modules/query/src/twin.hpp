#pragma once
// A second connection to a connection's database file, to read independent parts of one answer
// at once (explain's window and its baseline), and the one way they are run: at_once().
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"

#include "sql_functions.hpp"

#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <system_error>

struct sqlite3;

namespace rsched::query::detail {

// A read-only connection to the file of `db`'s main database (or `path`), set up as
// reader::open sets up its own, with `from`'s settings (zone, now, tier routing, annotation
// margin) and registered in `from.twins`, so that interrupting the original interrupts it.
// An error for an in-memory database.
class twin_connection {
public:
  static result<twin_connection> open(sqlite3 *db, const fn_context &from);
  static result<twin_connection> open(const std::string &path, const fn_context &from);
  [[nodiscard]] sqlite3 *get() const;
  [[nodiscard]] const fn_context &context() const;
  void interrupt() const noexcept;

  twin_connection(twin_connection &&) noexcept;
  twin_connection &operator=(twin_connection &&) noexcept;
  ~twin_connection();

private:
  friend class rsched::query::reader;
  twin_connection();
  std::unique_ptr<reader> r_;
};

// Runs here(db) and aside(twin) at once: `aside` in a thread of its own on a twin connection of
// `db`, or after `here` on `db` itself when there is none (an in-memory database, parallel
// reads off, no thread to be had). Returns when both are done: here's error first, then aside's;
// `aside` is interrupted when `here` fails, so that a failed (or interrupted) answer does not wait
// for it.
inline result<void> at_once(sqlite3 *db, const fn_context &ctx,
                            const std::function<result<void>(sqlite3 *)> &here,
                            const std::function<result<void>(sqlite3 *)> &aside) {
  auto twin = ctx.parallel ? twin_connection::open(db, ctx)
                           : result<twin_connection>(make_error("parallel reads are off"));
  std::future<result<void>> other;
  if (twin) {
    try {
      other = std::async(std::launch::async, [&] { return aside(twin->get()); });
    } catch (const std::system_error &) {
      // no thread: in turn below
    }
  }
  result<void> mine = [&]() -> result<void> {
    try {
      return here(db);
    } catch (...) {
      if (other.valid()) {
        twin->interrupt();
        other.wait();
      }
      throw;
    }
  }();
  if (!other.valid()) {
    return mine ? aside(db) : mine;
  }
  if (!mine) {
    twin->interrupt();
    other.wait();
    return mine;
  }
  return other.get();
}

} // namespace rsched::query::detail
