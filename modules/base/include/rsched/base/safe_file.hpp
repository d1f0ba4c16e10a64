#pragma once
// rsched::safe_file: the one way rsched creates a file (docs/ARCHITECTURE.md, "Files rsched
// creates"). rschedd and often rsched-sql run as root and write into directories other users may
// own (node_exporter's textfile directory, /tmp, a shared export directory), where a planted
// symlink or a pre-created file at a predictable name would otherwise make root write through it.
//
// A file is written as a temporary with an unpredictable name in the target's directory, opened
// O_CREAT|O_EXCL|O_NOFOLLOW (it never opens anything that already exists), and renamed over the
// target: a rename replaces a symlink or a file at the target name, it never writes through it.
// Two ways to publish:
//   - at_commit: the target appears, whole, at commit() (exports, pictures, reports, the textfile);
//     a safe_file destroyed before commit() removes its temporary and leaves the target as it was.
//   - at_open: the new (empty) file replaces the target at once and is then written as it goes
//     (.output and -o, which stream like the sqlite3 shell's).
// This process's own descriptors by name (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N)
// are written through a copy of the descriptor. Where the target is a character device, or a
// FIFO that root or the caller owns, reached directly or through a symlink that root or the
// caller owns (/dev/null, a named pipe), it is opened for writing as it is (non-blocking open,
// then checked to be what was seen: a swap in between is refused unwritten); no file is created
// or replaced there. A symlink or FIFO owned by anyone else is never followed or opened (it is
// replaced). Any other special file (a block device, a socket) is refused.
#include "rsched/base/result.hpp"

#include <sys/types.h>

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace rsched {

class safe_file {
public:
  enum class publish { at_commit, at_open };
  struct options {
    mode_t mode = 0640;      // the file's permission bits
    bool apply_umask = true; // false: exactly `mode` whatever the umask (the textfile: 0644)
    publish when = publish::at_commit;
    bool sync = true; // fsync the file before the rename and the directory after it
    // Write a character device or FIFO standing at the target (or reached through a link that
    // root or the caller owns) as it is. false (the textfile, in a directory another user may
    // own): a FIFO or device node there is replaced like any file, never opened.
    bool devices = true;
  };

  // Creates the temporary (or, at_open, the published file). Errors: one line naming the path.
  static result<safe_file> create(const std::string &target, const options &o);
  static result<safe_file> create(const std::string &target) { return create(target, options{}); }

  safe_file(safe_file &&) noexcept;
  safe_file &operator=(safe_file &&) noexcept;
  safe_file(const safe_file &) = delete;
  safe_file &operator=(const safe_file &) = delete;
  ~safe_file(); // not committed (at_commit): the temporary is removed, the target untouched

  // A buffered stream over the file. Check it (or write()'s result) before commit().
  std::ostream &stream();
  result<void> write(std::string_view bytes);
  // Flushes, fsyncs and (at_commit) renames over the target. After it the object is spent.
  result<void> commit();

  [[nodiscard]] const std::string &target() const;
  [[nodiscard]] const std::string &temp_path() const; // empty once published, or for a device

private:
  struct state;
  explicit safe_file(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

// Why a file root writes in place as it goes (not through a temporary: rsched-sql's history, to
// which each statement is appended) must not be written at `path`, or nullopt when it may. Its
// directory must belong to root or the caller and be writable by no one else (another user's
// HOME, as under sudo without -H, would let them swap in a link at any time); the file, when it
// exists, must be a regular file (not a link, FIFO or device) of root's or the caller's.
std::optional<std::string> in_place_refusal(const std::string &path);

// Where a database that root (or the caller) writes in place may be opened, StrictModes-like
// (docs/ARCHITECTURE.md, "Databases in shared places"): the path to open (links resolved), or one
// line saying why not. rschedd's database and rsched-sql's writes (annotations) use it; readers do
// not. The rules:
//   - the directory holding the database and each of its ancestors belong to root or the caller
//     and are writable by nobody else, unless sticky like /tmp (others may then create names
//     there, never replace or remove ours); a missing directory is checked at its nearest existing
//     ancestor (the caller creates it, then asks again);
//   - the database and its "-wal", "-shm" and "-journal" files, those that exist, are regular
//     files (lstat: never a link, FIFO or device) owned by root or the caller, not writable by
//     others, and not writable by their group unless it is `group` (rschedd's readers' group,
//     whose write bit rschedd then removes);
//   - a link at the database's own name is followed only when root or the caller owns it (as
//     safe_file does), and what it points to is checked by the same rules; a link anyone else made
//     is refused. Links in the directories above are resolved: the path returned has none, so
//     nobody can redirect it after the check.
// The check is by name: the caller opens what it creates O_CREAT|O_EXCL|O_NOFOLLOW and asks again
// after SQLite has opened its files.
result<std::string> database_place(const std::string &path, std::optional<gid_t> group);

// Writes `bytes` to `target` through a safe_file in one call.
result<void> write_file_safely(const std::string &target, std::string_view bytes,
                               const safe_file::options &o);

} // namespace rsched
