// rsched::safe_file: the one way rsched creates a file. Planted links are replaced, never written
// through; nothing half-written is ever published; modes are as asked; devices and FIFOs are
// written as they are. The [root] case plants the links as an unprivileged user (uid 65534), in a
// directory that user owns and in a sticky one, and checks that root's files are untouched.
#include "rsched/base/safe_file.hpp"

#include "root_guard.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <grp.h>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using rsched::safe_file;
using rsched::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void put(const std::string &path, const std::string &text, mode_t mode = 0600) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  REQUIRE(::chmod(path.c_str(), mode) == 0);
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> out;
  for (const auto &e : fs::directory_iterator(dir)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

mode_t mode_of(const std::string &path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Runs `fn` in a child process with the credentials of uid/gid 65534 (what `setpriv --reuid=65534
// --regid=65534 --clear-groups` gives). Returns whether it exited 0.
bool as_nobody(const std::function<bool()> &fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool ok = ::setgroups(0, nullptr) == 0 && ::setresgid(65534, 65534, 65534) == 0 &&
                    ::setresuid(65534, 65534, 65534) == 0 && fn();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct umask_guard {
  explicit umask_guard(mode_t m) : old(::umask(m)) {}
  ~umask_guard() { ::umask(old); }
  umask_guard(const umask_guard &) = delete;
  umask_guard &operator=(const umask_guard &) = delete;
  mode_t old;
};

} // namespace

TEST_CASE("safe_file: the target appears whole at commit, an uncommitted file leaves the target "
          "as it was and no temporary behind",
          "[safe_file]") {
  temp_dir dir;
  const std::string target = dir.file("out.csv");
  put(target, "old\n");
  {
    auto f = safe_file::create(target);
    REQUIRE(f);
    f->stream() << "half of a new";
    CHECK(slurp(target) == "old\n"); // nothing published yet
    CHECK(entries(dir.str()).size() == 2);
  } // destroyed before commit(): an error path
  CHECK(slurp(target) == "old\n");
  CHECK(entries(dir.str()) == std::vector<std::string>{"out.csv"});

  auto f = safe_file::create(target);
  REQUIRE(f);
  // The temporary is hidden, unpredictable and in the target's directory.
  CHECK(fs::path(f->temp_path()).parent_path() == dir.path());
  CHECK(fs::path(f->temp_path()).filename().string().rfind(".out.csv.", 0) == 0);
  CHECK(f->temp_path() != target + ".tmp");
  std::string big(300'000, 'x'); // more than the stream's buffer
  f->stream() << "new\n" << big;
  REQUIRE(f->write("\nend\n"));
  REQUIRE(f->commit());
  CHECK(slurp(target) == "new\n" + big + "\nend\n");
  CHECK(entries(dir.str()) == std::vector<std::string>{"out.csv"});
  CHECK_FALSE(f->commit()); // spent
}

TEST_CASE("safe_file: a link at the target name or at the old predictable temporary name is "
          "replaced, never written through",
          "[safe_file]") {
  temp_dir dir;
  temp_dir elsewhere;
  const std::string victim = elsewhere.file("precious");
  const std::string victim2 = elsewhere.file("precious2");
  put(victim, "precious\n", 0600);
  put(victim2, "precious2\n", 0600);
  const std::string target = dir.file("metrics.prom");
  REQUIRE(::symlink(victim.c_str(), target.c_str()) == 0);
  REQUIRE(::symlink(victim2.c_str(), (target + ".tmp").c_str()) == 0);
  // A dangling link too: O_CREAT through it would create the file it names.
  const std::string dangling_target = dir.file("new.svg");
  const std::string would_create = elsewhere.file("created-by-root");
  REQUIRE(::symlink(would_create.c_str(), dangling_target.c_str()) == 0);

  for (const auto when : {safe_file::publish::at_commit, safe_file::publish::at_open}) {
    safe_file::options o;
    o.when = when;
    REQUIRE(rsched::write_file_safely(target, "text\n", o));
    REQUIRE(rsched::write_file_safely(dangling_target, "svg\n", o));
    CHECK(slurp(victim) == "precious\n");
    CHECK(slurp(victim2) == "precious2\n");
    CHECK(mode_of(victim) == 0600);
    CHECK_FALSE(fs::exists(would_create));
    CHECK(fs::is_regular_file(fs::symlink_status(target)));
    CHECK(slurp(target) == "text\n");
    CHECK(slurp(dangling_target) == "svg\n");
  }
}

TEST_CASE("safe_file: modes: 0640 narrowed by the umask, or exactly as asked", "[safe_file]") {
  temp_dir dir;
  {
    umask_guard u(022);
    REQUIRE(rsched::write_file_safely(dir.file("a"), "a", safe_file::options{}));
    CHECK(mode_of(dir.file("a")) == 0640);
  }
  {
    umask_guard u(077);
    REQUIRE(rsched::write_file_safely(dir.file("b"), "b", safe_file::options{}));
    CHECK(mode_of(dir.file("b")) == 0600);
    safe_file::options o;
    o.mode = 0644;
    o.apply_umask = false; // the textfile: node_exporter reads it as another user
    REQUIRE(rsched::write_file_safely(dir.file("c"), "c", o));
    CHECK(mode_of(dir.file("c")) == 0644);
  }
  // Replacing a wider file gives the new file's mode, not the old one's.
  put(dir.file("d"), "old", 0666);
  REQUIRE(::chmod(dir.file("d").c_str(), 0666) == 0);
  {
    umask_guard u(022);
    REQUIRE(rsched::write_file_safely(dir.file("d"), "d", safe_file::options{}));
  }
  CHECK(mode_of(dir.file("d")) == 0640);
}

TEST_CASE("safe_file: at_open publishes at once and keeps what was written without a commit",
          "[safe_file]") {
  temp_dir dir;
  const std::string target = dir.file("stream.txt");
  put(target, "old contents\n");
  {
    safe_file::options o;
    o.when = safe_file::publish::at_open;
    auto f = safe_file::create(target, o);
    REQUIRE(f);
    CHECK(slurp(target).empty());
    CHECK(f->temp_path().empty());
    f->stream() << "row 1\n";
  }
  CHECK(slurp(target) == "row 1\n");
  CHECK(entries(dir.str()) == std::vector<std::string>{"stream.txt"});
}

TEST_CASE("safe_file: devices and FIFOs are written as they are, a directory or a missing "
          "directory is one line",
          "[safe_file]") {
  REQUIRE(rsched::write_file_safely("/dev/null", "discarded", safe_file::options{}));
  struct stat st {};
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));

  temp_dir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(rd >= 0);
  REQUIRE(rsched::write_file_safely(fifo, "through the pipe", safe_file::options{}));
  char buf[64] = {};
  const ssize_t n = ::read(rd, buf, sizeof buf);
  ::close(rd);
  CHECK(std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0U) == "through the pipe");
  CHECK(fs::is_fifo(fifo));

  auto d = safe_file::create(dir.str());
  REQUIRE_FALSE(d);
  CHECK(d.err().msg.find("is a directory") != std::string::npos);
  auto m = safe_file::create(dir.file("no/such/dir/\x1b[2Jx.csv"));
  REQUIRE_FALSE(m);
  CHECK(m.err().msg.find("No such file or directory") != std::string::npos);
  CHECK(m.err().msg.find('\x1b') == std::string::npos);
  CHECK(m.err().msg.find('\n') == std::string::npos);
  CHECK_FALSE(safe_file::create(""));
}

TEST_CASE("safe_file: this process's descriptors by name are written through a copy, never "
          "reopened or replaced, a FIFO nobody reads is an error, not a hang",
          "[safe_file]") {
  temp_dir dir;
  const std::string file = dir.file("redirected");
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "head ", 5) == 5); // a descriptor's position is kept, not reset to 0
  for (const std::string prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    REQUIRE(rsched::write_file_safely(prefix + std::to_string(fd), prefix, safe_file::options{}));
  }
  ::close(fd);
  CHECK(slurp(file) == "head /dev/fd//proc/self/fd/");
  struct stat st {};
  REQUIRE(::lstat("/dev/stdout", &st) == 0);
  CHECK(S_ISLNK(st.st_mode)); // the system's link was never replaced
  CHECK(entries(dir.str()) == std::vector<std::string>{"redirected"});

  const std::string fifo = dir.file("unread");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto r = rsched::write_file_safely(fifo, "x", safe_file::options{});
  REQUIRE_FALSE(r);
  CHECK(r.err().msg.find("no process reads that FIFO") != std::string::npos);
}

TEST_CASE("safe_file as root: another user's FIFO at the textfile's name is replaced, never "
          "opened, root's own special files are never replaced",
          "[root][safe_file]") {
  if (!rsched::test::root_available("root test of safe_file")) {
    return;
  }
  temp_dir dir;
  const std::string target = dir.file("rsched.prom");
  REQUIRE(::mkfifo(target.c_str(), 0666) == 0);
  REQUIRE(::lchown(target.c_str(), 65534, 65534) == 0);
  safe_file::options text;
  text.mode = 0644;
  text.apply_umask = false;
  text.devices = false;                                          // the textfile's options
  REQUIRE(rsched::write_file_safely(target, "metrics\n", text)); // no reader: it would hang
  CHECK(fs::is_regular_file(fs::symlink_status(target)));
  CHECK(slurp(target) == "metrics\n");

  // The same with the options of a report, an export or -o (FIFOs and devices written as they
  // are): another user's FIFO at the output name is replaced, never opened (before: it received
  // root's report; here nobody reads it, so the write would have failed "no process reads").
  const std::string report = dir.file("report.html");
  REQUIRE(::mkfifo(report.c_str(), 0666) == 0);
  REQUIRE(::lchown(report.c_str(), 65534, 65534) == 0);
  REQUIRE(rsched::write_file_safely(report, "<html>\n", safe_file::options{}));
  CHECK(fs::is_regular_file(fs::symlink_status(report)));
  CHECK(slurp(report) == "<html>\n");
  // Through root's link to another user's FIFO: the same.
  const std::string far = dir.file("far-fifo");
  REQUIRE(::mkfifo(far.c_str(), 0666) == 0);
  REQUIRE(::lchown(far.c_str(), 65534, 65534) == 0);
  const std::string via = dir.file("via-link");
  REQUIRE(::symlink(far.c_str(), via.c_str()) == 0);
  REQUIRE(rsched::write_file_safely(via, "csv\n", safe_file::options{}));
  CHECK(fs::is_regular_file(fs::symlink_status(via)));
  CHECK(fs::is_fifo(far));

  // Root's own FIFO, and a block device node: neither opened nor removed.
  const std::string own = dir.file("own-fifo");
  REQUIRE(::mkfifo(own.c_str(), 0600) == 0);
  CHECK_FALSE(rsched::write_file_safely(own, "x", text));
  CHECK(fs::is_fifo(own));
  const std::string blk = dir.file("blockdev");
  REQUIRE(::mknod(blk.c_str(), S_IFBLK | 0600, makedev(7, 200)) == 0);
  auto b = rsched::write_file_safely(blk, "x", safe_file::options{});
  REQUIRE_FALSE(b);
  CHECK(b.err().msg.find("not a regular file") != std::string::npos);
  CHECK(fs::is_block_file(blk));
}

TEST_CASE("safe_file as root: links planted by uid 65534 in a directory it owns and in a sticky "
          "one never make root write through them",
          "[root][safe_file]") {
  if (!rsched::test::root_available("root test of safe_file")) {
    return;
  }
  temp_dir root_side; // 0700 root: where root's precious files live
  const std::string precious = root_side.file("shadow");
  put(precious, "root:secret\n", 0600);
  const std::string precious2 = root_side.file("authorized_keys");
  put(precious2, "ssh-ed25519 AAAA\n", 0600);
  REQUIRE(::chmod(root_side.str().c_str(), 0755) == 0); // reachable, the files are not readable

  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  const std::string owned = base.file("nobody-owned");
  const std::string sticky = base.file("sticky");
  REQUIRE(::mkdir(owned.c_str(), 0755) == 0);
  REQUIRE(::chown(owned.c_str(), 65534, 65534) == 0);
  REQUIRE(::mkdir(sticky.c_str(), 0777) == 0);
  REQUIRE(::chmod(sticky.c_str(), 01777) == 0);

  for (const std::string &dir : {owned, sticky}) {
    const std::string target = dir + "/rsched.prom";
    const bool planted = as_nobody([&] {
      return ::symlink(precious.c_str(), target.c_str()) == 0 &&
             ::symlink(precious2.c_str(), (target + ".tmp").c_str()) == 0 &&
             ::symlink(precious.c_str(), (dir + "/export.csv").c_str()) == 0;
    });
    REQUIRE(planted);
    struct stat lst {};
    REQUIRE(::lstat(target.c_str(), &lst) == 0);
    REQUIRE(lst.st_uid == 65534);

    safe_file::options o;
    o.mode = 0644;
    o.apply_umask = false;
    REQUIRE(rsched::write_file_safely(target, "rsched_intervals_total 1\n", o));
    safe_file::options s;
    s.when = safe_file::publish::at_open;
    auto f = safe_file::create(dir + "/export.csv", s);
    REQUIRE(f);
    f->stream() << "a,b\n";
    REQUIRE(f->commit());

    CHECK(slurp(precious) == "root:secret\n");
    CHECK(slurp(precious2) == "ssh-ed25519 AAAA\n");
    CHECK(mode_of(precious) == 0600);
    CHECK(mode_of(precious2) == 0600);
    REQUIRE(::lstat(target.c_str(), &lst) == 0);
    CHECK(S_ISREG(lst.st_mode));
    CHECK(lst.st_uid == 0);
    CHECK((lst.st_mode & 07777) == 0644);
    CHECK(slurp(dir + "/export.csv") == "a,b\n");
  }
}

TEST_CASE("in_place_refusal (rsched-sql's history): never in another user's directory, never "
          "through a link, FIFO or another user's file",
          "[root][safe_file]") {
  if (!rsched::test::root_available("root test of in_place_refusal")) {
    return;
  }
  using rsched::in_place_refusal;
  const auto touch = [](const std::string &path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
  };
  temp_dir base;
  REQUIRE(::chmod(base.str().c_str(), 0755) == 0);
  // Root's own HOME: a missing file and root's regular file may be written.
  const std::string home = base.file("root-home");
  REQUIRE(::mkdir(home.c_str(), 0700) == 0);
  CHECK_FALSE(in_place_refusal(home + "/.rsched_sql_history"));
  const std::string mine = home + "/mine";
  touch(mine);
  CHECK_FALSE(in_place_refusal(mine));
  // Another user's HOME (sudo without -H): refused whatever is in it, a missing file included.
  const std::string theirs = base.file("their-home");
  REQUIRE(::mkdir(theirs.c_str(), 0755) == 0);
  REQUIRE(::chown(theirs.c_str(), 65534, 65534) == 0);
  const auto why = in_place_refusal(theirs + "/.rsched_sql_history");
  REQUIRE(why);
  CHECK(why->find("another user") != std::string::npos);
  // Their link there, to root's own file (issue 51): refused, and root's file is not touched.
  const std::string planted = theirs + "/.rsched_sql_history";
  REQUIRE(::symlink(mine.c_str(), planted.c_str()) == 0);
  REQUIRE(::lchown(planted.c_str(), 65534, 65534) == 0);
  const auto link_why = in_place_refusal(planted);
  REQUIRE(link_why);
  CHECK(link_why->find("another user") != std::string::npos);
  // Even with their directory closed to others: it is still theirs.
  REQUIRE(::chmod(theirs.c_str(), 0700) == 0);
  CHECK(in_place_refusal(planted));
  // A directory others may write in.
  const std::string open_dir = base.file("open");
  REQUIRE(::mkdir(open_dir.c_str(), 0700) == 0);
  REQUIRE(::chmod(open_dir.c_str(), 0777) == 0);
  CHECK(in_place_refusal(open_dir + "/h"));
  // In root's directory: a link (to root's own file), a FIFO, another user's file.
  const std::string link = home + "/link";
  REQUIRE(::symlink(mine.c_str(), link.c_str()) == 0);
  CHECK(in_place_refusal(link));
  const std::string fifo = home + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(in_place_refusal(fifo));
  const std::string foreign = home + "/foreign";
  touch(foreign);
  REQUIRE(::chown(foreign.c_str(), 65534, 65534) == 0);
  CHECK(in_place_refusal(foreign));
}
