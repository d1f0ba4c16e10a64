#pragma once
// The files rsched-sql writes (export, report, heatmap and plot -o, the shell's -o, .output and
// .once) copy the recorded history, so they are created no wider than the database: 0640, and
// the umask may narrow that further. All go through rsched::safe_file (docs/ARCHITECTURE.md,
// "Files rsched creates"): never through a link planted at the name.
#include "rsched/base/safe_file.hpp"

namespace rsched::sql_shell {

// Documents written whole (export, pictures, report): the target appears complete or not at all.
inline safe_file::options document_file() {
  safe_file::options o;
  o.mode = 0640;
  return o;
}

// Streams (-o, .output, .once): the file replaces the target when it is opened and fills as
// results come, as the sqlite3 shell's do.
inline safe_file::options stream_file() {
  safe_file::options o;
  o.mode = 0640;
  o.when = safe_file::publish::at_open;
  o.sync = false;
  return o;
}

} // namespace rsched::sql_shell
