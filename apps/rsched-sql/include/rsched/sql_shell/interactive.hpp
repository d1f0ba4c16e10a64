#pragma once
// The interactive shell: GNU readline line editing, prompts, history and tab completion around a
// shell. Uses readline's global state: one interactive session per process.
#include "rsched/sql_shell/shell.hpp"

#include <optional>
#include <string>

namespace rsched::sql_shell {

inline constexpr const char *primary_prompt = "rsched> ";
inline constexpr const char *continuation_prompt = "   ...> ";

// Most history entries kept in the file (older ones are dropped at start).
inline constexpr int history_max_entries = 2000;

struct interactive_options {
  std::optional<std::string> history_file; // nullopt: no history file
  std::string banner;                      // printed first (already escaped), may be empty
};

// Reads statements and dot commands until Ctrl-D (an unfinished statement is dropped) or .quit.
// Statements may span lines (until query::reader::complete); a failed statement prints its error
// and the session goes on. Each statement (all its lines) and each dot command is one history
// entry, appended to the history file as soon as it is entered. Ctrl-C at the prompt drops the
// statement being typed; during a query it cancels the query ("rsched-sql: Interrupted") and the
// prompt comes back (when query::reader can be interrupted, see shell::can_interrupt; otherwise
// it ends the process). Prompts go to stderr when stdout is not a terminal. Returns exit_ok.
int run_interactive(shell &sh, const interactive_options &opts);

} // namespace rsched::sql_shell
