#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <unistd.h>

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

} // namespace rsched::test
