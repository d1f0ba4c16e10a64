#include "vtab_rows.hpp"

#include "rsched/store/row_pack.hpp"

#include "vtab_packed.hpp"

#include <algorithm>
#include <string_view>

namespace rsched::store::detail {

namespace {

bool is_ident(std::string_view s) {
  return !s.empty() && s.size() <= 64 && (s[0] < '0' || s[0] > '9') &&
         std::all_of(s.begin(), s.end(), [](char ch) {
           return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
         });
}

std::string trimmed(std::string_view a) {
  const auto b = a.find_first_not_of(" \t\n");
  const auto e = a.find_last_not_of(" \t\n");
  return b == std::string_view::npos ? std::string() : std::string(a.substr(b, e - b + 1));
}

// Packs of rows of integers (rsched/store/row_pack.hpp): entry i is values[i * width, (i + 1)
// * width), thread_id first.
struct rows_codec {
  using entries = std::vector<std::int64_t>;

  // USING rsched_packed_rows(<row table>, <pack table>, thread_id, <more columns>...)
  static int spec(int argc, const char *const *argv, packed_spec &out, std::string &err) {
    if (argc < 6) {
      err = "rsched_packed_rows: usage: rsched_packed_rows(row_table, pack_table, thread_id, "
            "column...)";
      return SQLITE_ERROR;
    }
    std::vector<std::string> args;
    for (int i = 3; i < argc; ++i) {
      std::string a = trimmed(argv[i]);
      if (!is_ident(a)) {
        err = fmt::format("rsched_packed_rows: bad argument {}", sqlite::sql_literal(a));
        return SQLITE_ERROR;
      }
      args.push_back(std::move(a));
    }
    if (args[2] != "thread_id") {
      err = "rsched_packed_rows: the first column must be thread_id";
      return SQLITE_ERROR;
    }
    out.declare = "CREATE TABLE x(interval_id INTEGER";
    out.row_columns = "interval_id";
    for (std::size_t k = 2; k < args.size(); ++k) {
      out.declare += ", " + args[k] + " INTEGER";
      out.row_columns += ", " + args[k];
    }
    out.declare += ")";
    out.row_table = args[0];
    out.pack_table = args[1];
    out.width = args.size() - 2;
    return SQLITE_OK;
  }
  static result<void> unpack(std::span<const std::uint8_t> blob, std::size_t width, entries &out) {
    return unpack_rows(blob, width, out);
  }
  static std::size_t size(const entries &e, std::size_t width) { return e.size() / width; }
  static std::int64_t thread(const entries &e, std::size_t width, std::size_t i) {
    return e[i * width];
  }
  static void column(sqlite3_context *ctx, const entries &e, std::size_t width, std::size_t i,
                     int col) {
    if (col > 0 && static_cast<std::size_t>(col) <= width) {
      sqlite3_result_int64(ctx, e[i * width + static_cast<std::size_t>(col - 1)]);
    } else {
      sqlite3_result_null(ctx);
    }
  }
};

} // namespace

result<void> register_packed_rows_module(sqlite3 *db) {
  return sqlite::create_module<packed_vtab<rows_codec>>(db, "rsched_packed_rows");
}

} // namespace rsched::store::detail
