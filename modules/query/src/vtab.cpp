#include "vtab.hpp"

#include "rsched/sqlite/module.hpp"

#include "tvf_window.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <new>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <variant>

namespace rsched::query::detail {

namespace {

struct vtab : sqlite3_vtab {
  const tvf *def = nullptr;
  sqlite3 *db = nullptr;
  int lead = 0; // 1 when the rows start with the host column (a connection over several hosts)
};

// Whether `def`'s table on this connection starts with a host column.
bool has_host_column(const tvf &def) {
  return def.host_column && def.merge && def.ctx != nullptr && !def.ctx->hosts.empty();
}

struct cursor : sqlite3_vtab_cursor {
  rows data;
  std::size_t pos = 0;
};

// One copy of the definitions per connection, carrying that connection's context.
struct conn_defs {
  std::vector<tvf> defs;
};

const tvf *find_def(const conn_defs *defs, const char *name) {
  for (const auto &d : defs->defs) {
    if (sqlite3_stricmp(d.name, name) == 0) {
      return &d;
    }
  }
  return nullptr;
}

int x_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, vtab **out,
              std::string & /*err*/) {
  // argv[0] is the module name: one module object per function, all sharing `aux`.
  const tvf *def = argc > 0 ? find_def(static_cast<const conn_defs *>(aux), argv[0]) : nullptr;
  if (def == nullptr) {
    return SQLITE_ERROR;
  }
  std::string ddl = "CREATE TABLE x(";
  bool first = true;
  const bool host = has_host_column(*def);
  if (host) {
    ddl += "host";
    first = false;
  }
  for (const char *c : def->columns) {
    ddl += fmt::format("{}{}", first ? "" : ", ", c);
    first = false;
  }
  for (const char *a : def->args) {
    ddl += fmt::format(", {} HIDDEN", a);
  }
  for (const column_alias &a : def->aliases) {
    ddl += fmt::format(", {} HIDDEN", a.name);
  }
  ddl += ")";
  const int rc = sqlite3_declare_vtab(db, ddl.c_str());
  if (rc != SQLITE_OK) {
    return rc;
  }
  auto *v = new (std::nothrow) vtab();
  if (v == nullptr) {
    return SQLITE_NOMEM;
  }
  v->def = def;
  v->db = db;
  v->lead = host ? 1 : 0;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *out = v;
  return SQLITE_OK;
}

int x_best_index(vtab &table, sqlite3_index_info &index_info) {
  const auto *v = &table;
  sqlite3_index_info *info = &index_info;
  const auto ncol = v->lead + static_cast<int>(v->def->columns.size());
  const auto nargs = static_cast<int>(v->def->args.size());
  std::vector<int> cons(static_cast<std::size_t>(nargs), -1);
  for (int i = 0; i < info->nConstraint; ++i) {
    const auto &c = info->aConstraint[i];
    if (c.iColumn < ncol) {
      continue;
    }
    const int a = c.iColumn - ncol;
    if (a >= nargs || c.op != SQLITE_INDEX_CONSTRAINT_EQ) { // an alias: SQLite filters
      continue;
    }
    if (c.usable == 0) {
      // An argument bound to a column of a table not yet available: ask for another order.
      return SQLITE_CONSTRAINT;
    }
    cons[static_cast<std::size_t>(a)] = i;
  }
  int next = 1;
  int mask = 0;
  for (int a = 0; a < nargs; ++a) {
    const int i = cons[static_cast<std::size_t>(a)];
    if (i < 0) {
      continue;
    }
    info->aConstraintUsage[i].argvIndex = next++;
    info->aConstraintUsage[i].omit = 1;
    mask |= 1 << a;
  }
  info->idxNum = mask;
  // The definition's columns the statement reads (an alias reads its column), for the body
  // (fn_context::cols_used), as hex in idxStr. colUsed's bit 63 stands for every column past
  // 62: all of those count as read.
  const auto ncols = v->def->columns.size();
  const auto first_alias = static_cast<std::size_t>(ncol) + static_cast<std::size_t>(nargs);
  const auto read = [&](std::size_t col) {
    return (info->colUsed >> (col >= 63 ? 63 : col) & 1U) != 0;
  };
  std::uint64_t used = ~std::uint64_t{0};
  if (ncols <= 63) {
    used = 0;
    for (std::size_t i = 0; i < ncols; ++i) {
      if (read(static_cast<std::size_t>(v->lead) + i)) {
        used |= std::uint64_t{1} << i;
      }
    }
    for (std::size_t a = 0; a < v->def->aliases.size(); ++a) {
      if (read(first_alias + a)) {
        used |= std::uint64_t{1} << v->def->aliases[a].column;
      }
    }
  }
  info->idxStr = sqlite3_mprintf("%llx", static_cast<unsigned long long>(used));
  info->needToFreeIdxStr = 1;
  const int need = (1 << v->def->required) - 1;
  // Missing required arguments: allowed (xFilter reports them) but made the worst plan.
  info->estimatedCost = (mask & need) == need ? 10.0 : 1e12;
  info->estimatedRows = 100;
  return SQLITE_OK;
}

// The body on each host's own connection (fn_context::hosts), in the order the hosts were given,
// then `def.merge` over the answers. Each host's context takes the connection's settings (zone,
// `now`) and hands back what the shell asks of a statement (the window it named).
result<rows> run_on_hosts(const tvf &def, const args_t &args) {
  fn_context &ctx = *def.ctx;
  std::vector<host_rows> runs;
  runs.reserve(ctx.hosts.size());
  for (const host_source &h : ctx.hosts) {
    fn_context &hc = *h.ctx;
    hc.zone = ctx.zone;
    hc.cols_used = ctx.cols_used;
    hc.fixed_now = ctx.fixed_now;
    hc.annotation_margin_ns = ctx.annotation_margin_ns;
    hc.last_window.reset();
    hc.window_named = false;
    hc.named_window.reset();
    result<rows> r = rows{};
    {
      const table_function_scope scope(hc);
      r = def.body(h.db, hc, args);
    }
    ctx.window_named = ctx.window_named || hc.window_named;
    if (hc.named_window) {
      ctx.name_window(hc.named_window->first, hc.named_window->second);
    }
    if (hc.last_window) {
      ctx.last_window = hc.last_window;
    }
    if (!r) {
      return make_error(fmt::format("host {}: {}", h.name, r.err().msg));
    }
    runs.push_back({&h, std::move(*r), hc.last_window});
  }
  return def.merge(runs);
}

int x_filter(cursor &cur, int mask, const char *idx, int argc, sqlite3_value **argv) {
  auto *c = &cur;
  auto *v = static_cast<vtab *>(cur.pVtab);
  const tvf &def = *v->def;
  def.ctx->cols_used = idx != nullptr ? std::strtoull(idx, nullptr, 16) : ~std::uint64_t{0};
  args_t args(def.args.size(), nullptr);
  int k = 0;
  for (std::size_t a = 0; a < def.args.size() && k < argc; ++a) {
    if ((mask & (1 << a)) != 0) {
      args[a] = argv[k++];
    }
  }
  auto set_error = [&](const std::string &msg) {
    sqlite3_free(v->zErrMsg);
    v->zErrMsg = sqlite3_mprintf("%s", msg.c_str());
    return SQLITE_ERROR;
  };
  for (std::size_t a = 0; a < def.required; ++a) {
    if (args[a] == nullptr) {
      std::string sig;
      for (std::size_t i = 0; i < def.args.size(); ++i) {
        sig += fmt::format("{}{}{}{}", i == 0 ? "" : ", ", i == def.required ? "[" : "",
                           def.args[i], i + 1 == def.args.size() && i >= def.required ? "]" : "");
      }
      return set_error(fmt::format("{}: missing argument {} (usage: {}({}))", def.name, def.args[a],
                                   def.name, sig));
    }
  }
  c->data.clear();
  c->pos = 0;
  try {
    if (def.merge && !def.ctx->hosts.empty()) {
      auto r = run_on_hosts(def, args);
      if (!r) {
        return set_error(r.err().msg);
      }
      c->data = std::move(*r);
      return SQLITE_OK;
    }
    const table_function_scope scope(*def.ctx);
    auto r = def.body(v->db, *def.ctx, args);
    if (!r) {
      return set_error(r.err().msg);
    }
    c->data = std::move(*r);
  } catch (const std::exception &e) {
    return set_error(fmt::format("{}: {}", def.name, e.what()));
  }
  return SQLITE_OK;
}

int x_next(cursor &c) {
  ++c.pos;
  return SQLITE_OK;
}

bool x_eof(const cursor &c) {
  return c.pos >= c.data.size();
}

int x_column(cursor &cur, sqlite3_context *ctx, int col) {
  const auto *c = &cur;
  const row &r = c->data[c->pos];
  const tvf &def = *static_cast<const vtab *>(cur.pVtab)->def;
  const auto lead = static_cast<std::size_t>(static_cast<const vtab *>(cur.pVtab)->lead);
  const auto first_alias = lead + def.columns.size() + def.args.size();
  if (col >= 0 && static_cast<std::size_t>(col) >= first_alias &&
      static_cast<std::size_t>(col) - first_alias < def.aliases.size()) {
    col = static_cast<int>(lead + def.aliases[static_cast<std::size_t>(col) - first_alias].column);
  }
  if (col < 0 || static_cast<std::size_t>(col) >= r.size()) {
    sqlite3_result_null(ctx);
    return SQLITE_OK;
  }
  const value &val = r[static_cast<std::size_t>(col)];
  if (const auto *i = std::get_if<std::int64_t>(&val)) {
    sqlite3_result_int64(ctx, *i);
  } else if (const auto *d = std::get_if<double>(&val)) {
    sqlite3_result_double(ctx, *d);
  } else if (const auto *s = std::get_if<std::string>(&val)) {
    sqlite3_result_text64(ctx, s->data(), s->size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  } else if (const auto *b = std::get_if<std::vector<std::uint8_t>>(&val)) {
    sqlite3_result_blob64(ctx, b->data(), b->size(), SQLITE_TRANSIENT);
  } else {
    sqlite3_result_null(ctx);
  }
  return SQLITE_OK;
}

sqlite3_int64 x_rowid(const cursor &c) {
  return static_cast<sqlite3_int64>(c.pos);
}

// The module, eponymous only (a table function has no CREATE VIRTUAL TABLE): sqlite::module
// makes its sqlite3_module (rsched/sqlite/module.hpp).
struct tvf_vtab {
  using table = vtab;
  using cursor = struct cursor;
  static constexpr bool eponymous_only = true;
  static constexpr auto connect = x_connect;
  static constexpr auto best_index = x_best_index;
  static constexpr auto filter = x_filter;
  static constexpr auto next = x_next;
  static constexpr auto eof = x_eof;
  static constexpr auto column = x_column;
  static constexpr auto rowid = x_rowid;
};

} // namespace

result<void> register_vtabs(sqlite3 *db, fn_context *ctx, std::vector<tvf> defs) {
  auto *owned = new conn_defs{std::move(defs)};
  for (auto &d : owned->defs) {
    d.ctx = ctx;
  }
  // The definitions live as long as the connection: the first module's destructor, which
  // SQLite calls when the connection closes (or on failure here), frees them.
  bool first = true;
  for (auto &d : owned->defs) {
    const int rc = sqlite3_create_module_v2(
        db, d.name, &sqlite::module<tvf_vtab>::get(), owned,
        first ? +[](void *p) { delete static_cast<conn_defs *>(p); } : nullptr);
    first = false;
    if (rc != SQLITE_OK) {
      return make_error(fmt::format("registering {}: {}", d.name, sqlite3_errmsg(db)));
    }
  }
  return {};
}

} // namespace rsched::query::detail
