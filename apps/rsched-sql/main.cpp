// rsched-sql: SQL over the history recorded by rschedd (see `rsched-sql --help`).
#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/files.hpp"
#include "rsched/sql_shell/interactive.hpp"
#include "rsched/sql_shell/options.hpp"
#include "rsched/sql_shell/pictures.hpp"
#include "rsched/sql_shell/shell.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>
#include <pwd.h>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace sq = rsched::sql_shell;

namespace {

void print_error(std::string_view msg) {
  std::cerr << sq::program_name << ": " << rsched::text::escape_for_terminal(msg) << '\n';
}

const char *home_dir() {
  if (const char *h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    return h;
  }
  const passwd *pw = getpwuid(getuid());
  return pw != nullptr ? pw->pw_dir : nullptr;
}

// Rows of one result shown on a terminal in the human modes (the rest are counted).
constexpr std::size_t max_terminal_rows = 1000;

// --host NAME=PATH...: one read-only connection over every host's database; a remark about the
// files (schema versions that differ) goes to stderr as a note.
rsched::result<rsched::query::reader> open_hosts(const sq::options &opt) {
  std::vector<rsched::query::host_file> files;
  for (const auto &h : opt.hosts) {
    files.push_back({h.name, h.path});
  }
  std::string note;
  auto db = rsched::query::reader::open_hosts(files, &note);
  if (db && !note.empty()) {
    print_error("note: " + note);
  }
  return db;
}

// What the session reads, for the banner: the database, or the hosts.
std::string source_text(const sq::options &opt) {
  if (opt.hosts.empty()) {
    return opt.db_path;
  }
  std::string names;
  for (const auto &h : opt.hosts) {
    names += (names.empty() ? "" : ", ") + h.name;
  }
  return fmt::format("{} host{} ({})", opt.hosts.size(), opt.hosts.size() == 1 ? "" : "s", names);
}

int run(int argc, char **argv) {
  auto parsed = sq::parse_args(argc, argv);
  if (!parsed) {
    print_error(parsed.err().msg + " (see --help)");
    return sq::exit_usage;
  }
  const sq::options &opt = *parsed;
  if (opt.help) {
    std::cout << sq::usage_text();
    return sq::exit_ok;
  }
  if (opt.version) {
    std::cout << sq::program_name << ' ' << sq::program_version << '\n';
    return sq::exit_ok;
  }

  if (opt.mark) {
    auto id = sq::add_mark(opt.db_path, *opt.mark, rsched::timefmt::zone::local(),
                           rsched::timefmt::realtime_now_ns());
    if (!id) {
      print_error(id.err().msg);
      return sq::exit_failure;
    }
    std::cout << *id << '\n';
    return sq::exit_ok;
  }

  if (opt.service) {
    auto kept = rsched::query::set_service(opt.db_path, opt.service->name, opt.service->patterns);
    if (!kept) {
      print_error(kept.err().msg);
      return sq::exit_failure;
    }
    const std::string name = rsched::text::escape_for_terminal(opt.service->name);
    if (kept->empty()) {
      std::cout << fmt::format("service {}: no patterns (explain() matches its name against "
                               "comms and cgroup path components)\n",
                               name);
    } else {
      std::string list;
      for (const auto &p : *kept) {
        list += (list.empty() ? "" : ", ") + rsched::text::escape_for_terminal(p);
      }
      std::cout << fmt::format("service {}: {}\n", name, list);
    }
    return sq::exit_ok;
  }

  if (opt.hosts.size() > static_cast<std::size_t>(rsched::query::reader::max_hosts())) {
    print_error(fmt::format("{} hosts given; at most {} can be read together (see --help)",
                            opt.hosts.size(), rsched::query::reader::max_hosts()));
    return sq::exit_usage;
  }
  auto db = opt.hosts.empty() ? rsched::query::reader::open(opt.db_path, true) : open_hosts(opt);
  if (!db) {
    print_error(db.err().msg);
    // A name or file given twice is bad usage; a file that cannot be read is a failure.
    return !opt.hosts.empty() && db.err().errnum == EINVAL ? sq::exit_usage : sq::exit_failure;
  }
  // RSCHED_SQL_NOW pins what `now` means (any time t() accepts): reproducible scripts, and the
  // golden outputs of docs/SQL.md.
  if (const char *now = std::getenv("RSCHED_SQL_NOW"); now != nullptr && *now != '\0') {
    auto t = rsched::timefmt::parse_time(now, rsched::timefmt::realtime_now_ns(), db->zone());
    if (!t) {
      print_error("RSCHED_SQL_NOW: " + t.err().msg);
      return sq::exit_usage;
    }
    db->set_now(*t);
  }

  if (opt.picture) {
    sq::picture_target target;
    target.out = &std::cout;
    target.terminal = isatty(STDOUT_FILENO) != 0;
    target.color = target.terminal;
    winsize ws{};
    if (target.terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
      target.rows = ws.ws_row;
      target.cols = ws.ws_col;
    }
    std::string note;
    auto r = sq::run_picture(*db, opt.picture->first, opt.picture->second, target, note);
    if (!r) {
      print_error(r.err().msg);
      return r.err().errnum == EINVAL ? sq::exit_usage : sq::exit_failure;
    }
    if (!note.empty()) {
      std::cerr << sq::program_name << ": " << rsched::text::escape_for_terminal(note) << '\n';
    }
    std::cout.flush();
    return std::cout ? sq::exit_ok : sq::exit_failure;
  }

  std::optional<rsched::safe_file> file_out;
  if (opt.output_file) {
    auto f = rsched::safe_file::create(*opt.output_file, sq::stream_file());
    if (!f) {
      print_error(f.err().msg);
      return sq::exit_failure;
    }
    file_out.emplace(std::move(*f));
  }
  std::ostream &out = file_out ? file_out->stream() : std::cout;
  const bool out_is_terminal = !opt.output_file && isatty(STDOUT_FILENO) != 0;

  sq::output_config cfg;
  cfg.mode = opt.mode;
  cfg.escape_csv_text = out_is_terminal; // "never raw on a terminal", even in CSV
  cfg.max_rows = out_is_terminal ? max_terminal_rows : 0;
  sq::shell sh(*db, out, std::cerr, cfg);
  sh.set_db_path(opt.db_path);
  sh.set_bail(opt.bail);

  int rc = sq::exit_ok;
  bool interactive = false;
  if (!opt.commands.empty()) {
    for (const auto &c : opt.commands) {
      const auto st = sh.run_command(c);
      if (st == sq::shell::status::failed) {
        rc = sq::exit_failure;
        break;
      }
      if (st == sq::shell::status::quit) {
        break;
      }
    }
  } else if (isatty(STDIN_FILENO) == 0) {
    rc = sh.run_script(std::cin);
  } else {
    interactive = true;
    sq::interactive_options io;
    io.history_file = sq::history_path(std::getenv("RSCHED_SQL_HISTORY"), home_dir());
    io.banner = rsched::text::escape_for_terminal(
        std::string(sq::program_name) + ' ' + std::string(sq::program_version) + " on " +
        source_text(opt) + " (read-only). Enter .help for help, Ctrl-D to leave.");
    rc = sq::run_interactive(sh, io);
  }
  if (rc == sq::exit_ok && !interactive && sh.no_data()) {
    rc = sq::exit_no_data;
  }

  if (file_out) {
    if (auto c = file_out->commit(); !c) {
      print_error(c.err().msg);
      return sq::exit_failure;
    }
  }
  std::cout.flush();
  if (!std::cout) {
    print_error("error writing to standard output");
    return sq::exit_failure;
  }
  return rc;
}

} // namespace

int main(int argc, char **argv) {
  // Inputs are bounded (input.hpp), so this is a last resort: one line, never an abort.
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    print_error("out of memory");
  } catch (const std::exception &e) {
    print_error(e.what());
  }
  return sq::exit_failure;
}
