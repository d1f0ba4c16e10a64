#include "rsched/sql_shell/interactive.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/base/text.hpp"
#include "rsched/sql_shell/input.hpp"

#include <fmt/format.h>
#include <readline/history.h>
#include <readline/readline.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <signal.h>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace rsched::sql_shell {

namespace {

// readline's callbacks are plain C functions: they reach the session through these.
std::vector<std::string> g_names;     // schema names for completion
std::vector<std::string> g_functions; // SQL and table function names, lower case, sorted
std::vector<std::string> g_matches;   // candidates of the completion in progress
bool g_statement_start = true;        // the line being read starts a statement
volatile std::sig_atomic_t g_interrupted = 0;
shell *g_shell = nullptr; // the session, for SIGINT during a query

char *next_match(const char *, int state) {
  static std::size_t index = 0;
  if (state == 0) {
    index = 0;
  }
  if (index >= g_matches.size()) {
    return nullptr;
  }
  return strdup(g_matches[index++].c_str()); // readline frees it
}

char **attempt_completion(const char *word, int start, int) {
  const std::string_view before(rl_line_buffer, static_cast<std::size_t>(start));
  if (completes_file_name(before, g_statement_start)) {
    rl_attempted_completion_over = 0; // readline's file name completion
    return nullptr;
  }
  rl_attempted_completion_over = 1; // never fall back to file names
  g_matches = completions(before, word, g_statement_start, g_names);
  // A function completes without the space readline adds: its parenthesis follows directly.
  if (g_matches.size() == 1) {
    std::string lc = g_matches.front();
    for (auto &c : lc) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (std::binary_search(g_functions.begin(), g_functions.end(), lc)) {
      rl_completion_append_character = '\0';
    }
  }
  return rl_completion_matches(word, &next_match);
}

// SIGINT while readline() waits for input (readline restores this handler and re-raises the
// signal after cleaning up): drop the line and the statement being typed, start a fresh prompt.
extern "C" void on_sigint(int) {
  g_interrupted = 1;
  rl_replace_line("", 0);
  rl_crlf();
  rl_set_prompt(primary_prompt);
  rl_on_new_line();
  rl_redisplay();
}

class history_file {
public:
  explicit history_file(std::optional<std::string> path) : path_(std::move(path)) {}

  // Loads the file (a missing one is fine) and trims it to history_max_entries.
  void load() {
    history_comment_char = '#';    // timestamps are "#<time>" (the default '\0' writes none)
    history_write_timestamps = 1;  // timestamp lines delimit entries...
    history_multiline_entries = 1; // ...so entries may span lines (multi-line statements)
    if (!path_) {
      return;
    }
    if (const auto why = in_place_refusal(*path_)) {
      std::cerr << program_name << ": "
                << text::escape_for_terminal(fmt::format("no history file: {}", *why)) << '\n';
      path_.reset();
      return;
    }
    const int rc = read_history(path_->c_str());
    if (rc != 0 && rc != ENOENT) {
      warn(rc, "cannot read history from");
      return;
    }
    if (history_length > history_max_entries) {
      stifle_history(history_max_entries);
      if (const int wc = write_history(path_->c_str()); wc != 0) {
        warn(wc, "cannot save history to");
      }
    }
    stifle_history(history_max_entries);
  }

  // Adds an entry (unless it repeats the previous one) and appends it to the file.
  void add(const std::string &entry) {
    if (const HIST_ENTRY *prev = history_get(history_base + history_length - 1);
        prev != nullptr && entry == prev->line) {
      return;
    }
    add_history(entry.c_str());
    if (!path_ || failed_) {
      return;
    }
    // append_history does not create the file; write_history does (mode 0600).
    const int rc = access(path_->c_str(), F_OK) == 0 ? append_history(1, path_->c_str())
                                                     : write_history(path_->c_str());
    if (rc != 0) {
      warn(rc, "cannot save history to");
    }
  }

private:
  void warn(int err, std::string_view what) {
    failed_ = true;
    std::cerr << program_name << ": "
              << text::escape_for_terminal(
                     fmt::format("{} {}: {}", what, *path_, std::strerror(err)))
              << '\n';
  }

  std::optional<std::string> path_;
  bool failed_ = false;
};

// SIGINT while a statement runs: interrupt it (sqlite3_interrupt through the reader, which is
// safe from a signal handler); the statement fails with "Interrupted" and the prompt comes back.
extern "C" void on_query_sigint(int) {
  if (g_shell != nullptr) {
    g_shell->interrupt();
  }
}

// Runs `fn` (a statement or dot command) with Ctrl-C interrupting it. Without
// query::reader::interrupt() Ctrl-C keeps its default action (it ends the process).
template <typename F> auto with_query_sigint(F &&fn) {
  struct sigaction sa {};
  sa.sa_handler = shell::can_interrupt() ? &on_query_sigint : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  auto r = fn();
  std::signal(SIGINT, on_sigint);
  return r;
}

} // namespace

int run_interactive(shell &sh, const interactive_options &opts) {
  rl_readline_name = "rsched-sql"; // for $if rsched-sql in ~/.inputrc
  // Prompts and echo belong on the terminal: with stdout redirected they go to stderr, and the
  // results alone to stdout.
  FILE *ui = isatty(STDOUT_FILENO) != 0 ? stdout : stderr;
  rl_outstream = ui;
  rl_attempted_completion_function = &attempt_completion;
  g_names = sh.completion_names();
  g_functions = sh.function_names();
  g_shell = &sh;
  if (isatty(STDOUT_FILENO) != 0) {
    sh.set_pager(shell::default_pager()); // results wider or taller than the terminal
  }

  history_file history(opts.history_file);
  history.load();

  if (!opts.banner.empty()) {
    std::fprintf(ui, "%s\n", opts.banner.c_str());
    std::fflush(ui);
  }

  statement_buffer buf;
  std::signal(SIGINT, on_sigint);
  for (;;) {
    g_statement_start = buf.empty();
    g_interrupted = 0;
    char *raw = readline(buf.empty() ? primary_prompt : continuation_prompt);
    if (raw == nullptr) { // Ctrl-D; an unfinished statement is dropped
      std::fputc('\n', ui);
      break;
    }
    std::string line(raw);
    std::free(raw);
    if (g_interrupted != 0) {
      buf.clear();
    }
    if (buf.empty() && is_dot_command(line)) {
      buf.clear();
      history.add(line);
      if (with_query_sigint([&] { return sh.run_dot(line); }) == shell::status::quit) {
        break;
      }
      continue;
    }
    if (buf.add_line(line)) {
      std::string stmt = buf.take();
      history.add(stmt);
      (void)with_query_sigint([&] { return sh.run_sql(stmt); });
    } else if (buf.empty()) {
      buf.clear(); // blank or comment only: nothing pending
    }
  }
  std::signal(SIGINT, SIG_DFL);
  g_shell = nullptr;
  std::cout.flush();
  return exit_ok;
}

} // namespace rsched::sql_shell
