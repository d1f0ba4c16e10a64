#include "support/process.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

extern char **environ;

namespace rsched::test {

exec_argv::exec_argv(const std::string &path, const std::vector<std::string> &args) {
  strings_.reserve(args.size() + 1);
  strings_.push_back(path);
  strings_.insert(strings_.end(), args.begin(), args.end());
  for (auto &s : strings_) {
    ptrs_.push_back(s.data());
  }
  ptrs_.push_back(nullptr);
}

child_output run_child(const std::function<void(int fd)> &body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    body(fds[1]);
    _exit(127); // `body` must not return
  }
  close(fds[1]);
  child_output out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) {
    out.text.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  REQUIRE(waitpid(pid, &out.status, 0) == pid);
  return out;
}

namespace {

std::string slurp_file(const std::string &path) {
  std::string data;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return data;
  }
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    data.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return data;
}

} // namespace

program_output run_program(const std::vector<std::string> &argv) {
  REQUIRE(!argv.empty());
  temp_dir io;
  const std::string out = io.file("stdout");
  const std::string err = io.file("stderr");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const exec_argv args(argv[0], {argv.begin() + 1, argv.end()});
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &fa, nullptr, args.get(), environ);
  posix_spawn_file_actions_destroy(&fa);
  INFO("cannot start " << argv[0]);
  REQUIRE(rc == 0);
  int ws = 0;
  REQUIRE(waitpid(pid, &ws, 0) == pid);
  program_output r;
  r.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  r.out = slurp_file(out);
  r.err = slurp_file(err);
  return r;
}

bool in_path(const std::string &name) {
  const char *path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    if (!dir.empty() && access((dir + "/" + name).c_str(), X_OK) == 0) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

} // namespace rsched::test
