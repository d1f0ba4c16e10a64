// rsched-sql: SQL over the history recorded by rschedd (see `rsched-sql --help`).
#include "rsched/base/text.hpp"
#include "rsched/sql_shell/interactive.hpp"
#include "rsched/sql_shell/options.hpp"
#include "rsched/sql_shell/shell.hpp"
#include "rsched/store/reader.hpp"

#include <cstdlib>
#include <iostream>
#include <pwd.h>
#include <string>
#include <string_view>
#include <unistd.h>

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

  auto db = rsched::store::reader::open(opt.db_path, true);
  if (!db) {
    print_error(db.err().msg);
    return sq::exit_failure;
  }

  sq::output_config cfg;
  cfg.mode = opt.mode;
  cfg.escape_csv_text = isatty(STDOUT_FILENO) != 0; // "never raw on a terminal", even in CSV
  sq::shell sh(*db, std::cout, std::cerr, cfg);

  int rc = sq::exit_ok;
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
    sq::interactive_options io;
    io.history_file = sq::history_path(std::getenv("RSCHED_SQL_HISTORY"), home_dir());
    io.banner = rsched::text::escape_for_terminal(
        std::string(sq::program_name) + ' ' + std::string(sq::program_version) + " on " +
        opt.db_path + " (read-only). Enter .help for help, Ctrl-D to leave.");
    rc = sq::run_interactive(sh, io);
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
  return run(argc, argv);
}
