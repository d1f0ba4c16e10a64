#include "rsched/base/safe_file.hpp"

#include "rsched/base/text.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <streambuf>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace rsched {

namespace {

std::string shown(const std::string &path) {
  return text::escape_for_terminal(path);
}

error sys_error(const char *what, const std::string &path, int e) {
  return make_error(std::string(what) + " '" + shown(path) + "': " + std::strerror(e), e);
}

// A buffered streambuf over a file descriptor that remembers the first write error.
class fd_buf final : public std::streambuf {
public:
  explicit fd_buf(int fd) : fd_(fd), buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  [[nodiscard]] int error() const { return err_; }
  void set_fd(int fd) { fd_ = fd; }

protected:
  int_type overflow(int_type ch) override {
    if (drain() != 0) {
      return traits_type::eof();
    }
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return drain(); }
  std::streamsize xsputn(const char *s, std::streamsize n) override {
    const auto room = static_cast<std::streamsize>(epptr() - pptr());
    if (n <= room) {
      traits_type::copy(pptr(), s, static_cast<std::size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    if (drain() != 0) {
      return 0;
    }
    if (n < static_cast<std::streamsize>(buf_.size())) {
      traits_type::copy(pptr(), s, static_cast<std::size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    return put_all(s, static_cast<std::size_t>(n)) ? n : 0;
  }

private:
  bool put_all(const char *p, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) {
        continue;
      }
      if (w <= 0) {
        err_ = w < 0 ? errno : EIO;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }
  int drain() {
    if (err_ != 0) {
      return -1;
    }
    const auto n = static_cast<std::size_t>(pptr() - pbase());
    const bool ok = n == 0 || put_all(pbase(), n);
    setp(buf_.data(), buf_.data() + buf_.size());
    return ok ? 0 : -1;
  }

  int fd_;
  std::vector<char> buf_;
  int err_ = 0;
};

// N when `path` names one of this process's descriptors: /dev/stdin|stdout|stderr, /dev/fd/N,
// /proc/self/fd/N.
std::optional<int> own_descriptor(const std::string &path) {
  if (path == "/dev/stdout") {
    return 1;
  }
  if (path == "/dev/stderr") {
    return 2;
  }
  for (const char *prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string_view p(prefix);
    if (path.size() > p.size() && path.compare(0, p.size(), p) == 0) {
      int n = 0;
      const char *b = path.data() + p.size();
      const char *e = path.data() + path.size();
      const auto [end, ec] = std::from_chars(b, e, n);
      if (ec == std::errc() && end == e && n >= 0) {
        return n;
      }
    }
  }
  return std::nullopt;
}

std::string dir_of(const std::string &path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string base_of(const std::string &path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// 16 hex digits from the kernel's CSPRNG: a name nobody can plant ahead of us.
std::string random_suffix() {
  std::array<unsigned char, 8> b{};
  std::size_t got = 0;
  while (got < b.size()) {
    const ssize_t n = getrandom(b.data() + got, b.size() - got, 0);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break; // the O_EXCL open still refuses any planted name; the name is then less random
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char hex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : b) {
    s += hex[c >> 4U];
    s += hex[c & 15U];
  }
  return s;
}

} // namespace

struct safe_file::state {
  std::string target;
  std::string temp; // not yet renamed over the target
  int fd = -1;
  options opt;
  bool device = false;
  bool done = false;
  fd_buf buf{-1};
  std::ostream os{&buf};

  ~state() {
    if (fd >= 0) {
      if (temp.empty()) {
        os.flush(); // published already (at_open, a device): what was written stays written
      }
      ::close(fd);
    }
    if (!temp.empty()) {
      ::unlink(temp.c_str());
    }
  }
};

safe_file::safe_file(std::unique_ptr<state> s) : s_(std::move(s)) {}
safe_file::safe_file(safe_file &&) noexcept = default;
safe_file &safe_file::operator=(safe_file &&) noexcept = default;
safe_file::~safe_file() = default;

const std::string &safe_file::target() const {
  return s_->target;
}
const std::string &safe_file::temp_path() const {
  return s_->temp;
}
std::ostream &safe_file::stream() {
  return s_->os;
}

result<safe_file> safe_file::create(const std::string &target, const options &o) {
  if (target.empty()) {
    return make_error("no file name given", EINVAL);
  }
  auto s = std::make_unique<state>();
  s->target = target;
  s->opt = o;

  // The process's own descriptors by name (/dev/stdout, /dev/fd/1, /proc/self/fd/1): written
  // through a copy of the descriptor, whatever it is (a terminal, a pipe, a file the shell
  // opened), never reopened and never replaced (a rename over /dev/stdout would replace the
  // system's link).
  if (const auto fdn = own_descriptor(target)) {
    const int fd = ::fcntl(*fdn, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
      return sys_error("cannot write", target, errno);
    }
    s->fd = fd;
    s->device = true;
    s->buf.set_fd(fd);
    return safe_file(std::move(s));
  }
  struct stat lst {};
  if (::lstat(target.c_str(), &lst) == 0) {
    // What a link root or we made points at decides; anyone else's link is never followed (it
    // is replaced). `real` is what would be opened.
    std::string real = target;
    struct stat st = lst;
    bool trusted = !S_ISLNK(lst.st_mode);
    if (S_ISLNK(lst.st_mode) && (lst.st_uid == 0 || lst.st_uid == ::geteuid())) {
      if (char *r = ::realpath(target.c_str(), nullptr)) {
        real = r;
        std::free(r);
        trusted = ::lstat(real.c_str(), &st) == 0;
      }
    }
    if (trusted && S_ISDIR(st.st_mode)) {
      return make_error("cannot write '" + shown(target) + "': it is a directory", EISDIR);
    }
    // A FIFO is written as it is only when root or we made it, as a link is followed only
    // then: anyone may mkfifo in /tmp and read what root writes into it. Another user's FIFO
    // is replaced like any file. (A device node only root can make.)
    const bool ours = st.st_uid == 0 || st.st_uid == ::geteuid();
    if (trusted && o.devices && (S_ISCHR(st.st_mode) || (S_ISFIFO(st.st_mode) && ours))) {
      // Opened without O_CREAT or O_TRUNC, never through a link (O_NOFOLLOW on the resolved
      // path), non-blocking (a FIFO nobody reads is an error, not a hang), then checked to be
      // the very file that was looked at: anything swapped in between is closed unwritten.
      const int fd =
          ::open(real.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
      if (fd < 0) {
        return errno == ENXIO
                   ? make_error("cannot write '" + shown(target) + "': no process reads that FIFO",
                                ENXIO)
                   : sys_error("cannot open", target, errno);
      }
      struct stat fst {};
      if (::fstat(fd, &fst) != 0 || fst.st_dev != st.st_dev || fst.st_ino != st.st_ino ||
          !(S_ISCHR(fst.st_mode) || S_ISFIFO(fst.st_mode))) {
        ::close(fd);
        return make_error("cannot write '" + shown(target) + "': it changed while being opened",
                          EAGAIN);
      }
      const int fl = ::fcntl(fd, F_GETFL);
      if (fl >= 0) {
        (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); // then written like any file
      }
      s->fd = fd;
      s->device = true;
      s->buf.set_fd(fd);
      return safe_file(std::move(s));
    }
    // Everything else at the name is replaced by the rename: a file, a link (never what it
    // points at), or, where devices are not written (the textfile), a FIFO or device node
    // another user put there. A special file of root's or ours standing at the name itself (a
    // device node in /dev, a socket) is refused: renaming over it would remove it.
    if (!S_ISLNK(lst.st_mode) && !S_ISREG(lst.st_mode) &&
        (lst.st_uid == 0 || lst.st_uid == ::geteuid())) {
      return make_error("cannot write '" + shown(target) + "': not a regular file", EINVAL);
    }
  } else if (errno != ENOENT) {
    return sys_error("cannot write", target, errno);
  }

  const std::string dir = dir_of(target);
  std::string base = base_of(target);
  if (base.empty()) {
    return make_error("cannot write '" + shown(target) + "': no file name", EINVAL);
  }
  if (base.size() > 200) {
    base.resize(200); // the temporary's name stays under NAME_MAX
  }
  const std::string prefix = (dir == "/" ? std::string() : dir) + "/." + base + ".";
  int fd = -1;
  std::string temp;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    temp = prefix + random_suffix() + ".tmp";
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                o.mode);
    if (fd < 0 && errno != EEXIST) {
      return sys_error("cannot create a file in", dir, errno);
    }
  }
  if (fd < 0) {
    return make_error("cannot create a file in '" + shown(dir) + "': every name taken", EEXIST);
  }
  s->fd = fd;
  s->temp = temp;
  s->buf.set_fd(fd);
  if (!o.apply_umask && ::fchmod(fd, o.mode) != 0) {
    return sys_error("cannot chmod", temp, errno);
  }
  if (o.when == publish::at_open) {
    if (::rename(temp.c_str(), target.c_str()) != 0) {
      return sys_error("cannot create", target, errno);
    }
    s->temp.clear();
  }
  return safe_file(std::move(s));
}

result<void> safe_file::write(std::string_view bytes) {
  s_->os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!s_->os) {
    const int e = s_->buf.error() != 0 ? s_->buf.error() : EIO;
    return sys_error("cannot write", s_->target, e);
  }
  return {};
}

result<void> safe_file::commit() {
  state &s = *s_;
  if (s.done) {
    return make_error("'" + shown(s.target) + "' was already written", EINVAL);
  }
  s.done = true;
  s.os.flush();
  if (!s.os) {
    const int e = s.buf.error() != 0 ? s.buf.error() : EIO;
    return sys_error("cannot write", s.target, e);
  }
  if (s.opt.sync && !s.device && ::fsync(s.fd) != 0) {
    return sys_error("cannot write", s.target, errno);
  }
  const int fd = std::exchange(s.fd, -1);
  if (::close(fd) != 0 && !s.device) {
    return sys_error("cannot write", s.target, errno);
  }
  if (s.device || s.temp.empty()) {
    return {};
  }
  if (::rename(s.temp.c_str(), s.target.c_str()) != 0) {
    return sys_error("cannot write", s.target, errno);
  }
  s.temp.clear();
  if (s.opt.sync) {
    const int dfd = ::open(dir_of(s.target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd); // the rename is durable; a failure here loses nothing written
      ::close(dfd);
    }
  }
  return {};
}

result<void> write_file_safely(const std::string &target, std::string_view bytes,
                               const safe_file::options &o) {
  auto f = safe_file::create(target, o);
  if (!f) {
    return f.err();
  }
  if (auto w = f->write(bytes); !w) {
    return w;
  }
  return f->commit();
}

namespace {

bool trusted_owner(const struct stat &st) {
  return st.st_uid == 0 || st.st_uid == ::geteuid();
}

std::string not_ours(const std::string &path, const struct stat &st) {
  return "'" + shown(path) + "' belongs to uid " + std::to_string(st.st_uid) +
         ", not root or this user";
}

// `dir` (which exists) resolved, after checking it and every directory above it: root's or the
// caller's, and writable by nobody else unless sticky.
result<std::string> trusted_dir(const std::string &dir) {
  char *r = ::realpath(dir.c_str(), nullptr);
  if (r == nullptr) {
    return sys_error("cannot resolve", dir, errno);
  }
  const std::string real = r;
  std::free(r);
  for (std::string d = real;; d = dir_of(d)) {
    struct stat st {};
    if (::lstat(d.c_str(), &st) != 0) {
      return sys_error("cannot check", d, errno);
    }
    if (!S_ISDIR(st.st_mode)) {
      return make_error("'" + shown(d) + "' is not a directory", ENOTDIR);
    }
    if (!trusted_owner(st)) {
      return make_error("directory " + not_ours(d, st), EPERM);
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
      return make_error("directory '" + shown(d) + "' is writable by " +
                            ((st.st_mode & S_IWOTH) != 0 ? "others" : "its group") +
                            " and not sticky",
                        EPERM);
    }
    if (d == "/") {
      return real;
    }
  }
}

// Why the existing file `f` (a database or one of its companions) must not be written in place,
// or nullopt (also when it does not exist).
std::optional<std::string> companion_refusal(const std::string &f, std::optional<gid_t> group) {
  struct stat st {};
  if (::lstat(f.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    return "cannot check '" + shown(f) + "': " + std::strerror(errno);
  }
  if (!S_ISREG(st.st_mode)) {
    return "'" + shown(f) + "' is not a regular file (" +
           (S_ISLNK(st.st_mode)   ? "a link"
            : S_ISDIR(st.st_mode) ? "a directory"
                                  : "a FIFO, socket or device") +
           ")";
  }
  if (!trusted_owner(st)) {
    return not_ours(f, st);
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return "'" + shown(f) + "' is writable by others";
  }
  if ((st.st_mode & S_IWGRP) != 0 && !(group && st.st_gid == *group)) {
    return "'" + shown(f) + "' is writable by its group (gid " + std::to_string(st.st_gid) + ")";
  }
  return std::nullopt;
}

} // namespace

result<std::string> database_place(const std::string &path, std::optional<gid_t> group) {
  if (path.empty() || path.back() == '/') {
    return make_error("'" + shown(path) + "': no file name", EINVAL);
  }
  std::string target = path;
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) == 0) {
    if (S_ISLNK(lst.st_mode)) {
      if (!trusted_owner(lst)) {
        return make_error("link " + not_ours(path, lst), EPERM);
      }
      char *r = ::realpath(path.c_str(), nullptr);
      if (r == nullptr) {
        return sys_error("cannot follow the link", path, errno);
      }
      target = r;
      std::free(r);
    }
  } else if (errno != ENOENT) {
    return sys_error("cannot check", path, errno);
  }
  // The nearest directory that exists: a missing one is created by the caller, in it.
  const std::string dir = dir_of(target);
  std::string probe = dir;
  struct stat dst {};
  while (::stat(probe.c_str(), &dst) != 0 && errno == ENOENT && probe != "/" && probe != ".") {
    probe = dir_of(probe);
  }
  auto real_dir = trusted_dir(probe);
  if (!real_dir) {
    return real_dir.err();
  }
  if (probe != dir) {
    return target;
  }
  const std::string real = (*real_dir == "/" ? "" : *real_dir) + "/" + base_of(target);
  for (const char *suffix : {"", "-wal", "-shm", "-journal"}) {
    if (auto why = companion_refusal(real + suffix, group)) {
      return make_error(*why, EPERM);
    }
  }
  return real;
}

std::optional<std::string> in_place_refusal(const std::string &path) {
  const auto owner_ok = [](const struct stat &st) {
    return st.st_uid == 0 || st.st_uid == ::geteuid();
  };
  const std::string dir = dir_of(path);
  struct stat d {};
  if (::stat(dir.c_str(), &d) != 0) {
    return shown(dir) + ": " + std::strerror(errno);
  }
  if (!owner_ok(d) || (d.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return shown(dir) + " belongs to another user or others may write in it";
  }
  struct stat f {};
  if (::lstat(path.c_str(), &f) != 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    return shown(path) + ": " + std::strerror(errno);
  }
  if (!S_ISREG(f.st_mode)) {
    return shown(path) + " is not a regular file (a link, FIFO or device)";
  }
  if (!owner_ok(f)) {
    return shown(path) + " belongs to another user";
  }
  return std::nullopt;
}

} // namespace rsched
