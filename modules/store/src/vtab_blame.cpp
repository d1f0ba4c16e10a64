#include "vtab_blame.hpp"

#include "rsched/store/blame_pack.hpp"

#include "vtab_packed.hpp"

namespace rsched::store::detail {

namespace {

// The columns, in thread_blame's order.
enum column : int {
  c_interval,
  c_thread,
  c_culprit,
  c_wait,
  c_waits,
  c_preempts,
  c_cpu,
  c_policy,
  c_prio,
  c_waiter_policy,
  c_waiter_prio,
  c_approx,
};

void result_opt(sqlite3_context *ctx, const std::optional<std::int64_t> &v) {
  if (v) {
    sqlite3_result_int64(ctx, *v);
  } else {
    sqlite3_result_null(ctx);
  }
}

// thread_blame's packs (rsched/store/blame_pack.hpp).
struct blame_codec {
  using entries = std::vector<blame_entry>;

  static int spec(int /*argc*/, const char *const * /*argv*/, packed_spec &out,
                  std::string & /*err*/) {
    out.declare = "CREATE TABLE x(interval_id INTEGER, thread_id INTEGER, culprit_id INTEGER, "
                  "wait_ns INTEGER, waits INTEGER, preempts INTEGER, cpu INTEGER, policy "
                  "INTEGER, prio INTEGER, waiter_policy INTEGER, waiter_prio INTEGER, approx_ns "
                  "INTEGER)";
    out.row_table = "thread_blame_row";
    out.pack_table = "thread_blame_pack";
    out.row_columns = "interval_id, thread_id, culprit_id, wait_ns, waits, preempts, cpu, "
                      "policy, prio, waiter_policy, waiter_prio, approx_ns";
    return SQLITE_OK;
  }
  static result<void> unpack(std::span<const std::uint8_t> blob, std::size_t /*width*/,
                             entries &out) {
    return unpack_blame(blob, out);
  }
  static std::size_t size(const entries &e, std::size_t /*width*/) { return e.size(); }
  static std::int64_t thread(const entries &e, std::size_t /*width*/, std::size_t i) {
    return e[i].thread_id;
  }
  static void column(sqlite3_context *ctx, const entries &all, std::size_t /*width*/, std::size_t i,
                     int col) {
    const blame_entry &e = all[i];
    switch (col) {
    case c_thread:
      sqlite3_result_int64(ctx, e.thread_id);
      break;
    case c_culprit:
      sqlite3_result_int64(ctx, e.culprit_id);
      break;
    case c_wait:
      sqlite3_result_int64(ctx, e.wait_ns);
      break;
    case c_waits:
      sqlite3_result_int64(ctx, e.waits);
      break;
    case c_preempts:
      sqlite3_result_int64(ctx, e.preempts);
      break;
    case c_cpu:
    case c_policy:
    case c_prio:
    case c_waiter_policy:
    case c_waiter_prio:
      result_opt(ctx, e.sched[static_cast<std::size_t>(col - c_cpu)]);
      break;
    case c_approx:
      result_opt(ctx, e.approx_ns);
      break;
    default:
      sqlite3_result_null(ctx);
    }
  }
};

} // namespace

result<void> register_blame_module(sqlite3 *db) {
  return sqlite::create_module<packed_vtab<blame_codec>>(db, "rsched_thread_blame");
}

} // namespace rsched::store::detail
