#pragma once
// Running programs and forked children from tests: the argv that execv and posix_spawn take, and
// a child whose output comes back through a pipe.
#include <functional>
#include <string>
#include <vector>

namespace rsched::test {

// `path` then `args`, as the null-terminated argv of execv and posix_spawn. Build it before fork:
// the child then only reads it.
class exec_argv {
public:
  exec_argv(const std::string &path, const std::vector<std::string> &args);
  exec_argv(const exec_argv &) = delete;
  exec_argv &operator=(const exec_argv &) = delete;

  [[nodiscard]] char *const *get() const { return ptrs_.data(); }

private:
  std::vector<std::string> strings_;
  std::vector<char *> ptrs_; // into strings_, then nullptr
};

// What a forked child wrote to its pipe, and how it ended (the status of waitpid).
struct child_output {
  std::string text;
  int status = 0;
};

// Forks a child that runs `body(fd)`, `fd` the write end of a pipe, and must not return (it execs
// or calls _exit). Reads the pipe until the child and its descendants have closed it, then reaps
// the child; fails the test when the pipe, the fork or the wait fail.
child_output run_child(const std::function<void(int fd)> &body);

// What a program wrote to stdout and stderr, and its exit status (-1: killed by a signal).
struct program_output {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] looked up in PATH when it has no '/'), stdin from /dev/null, stdout and
// stderr captured through files (no pipe to deadlock on), and waits for it. Fails the test when
// it cannot be started.
program_output run_program(const std::vector<std::string> &argv);

// Whether `name` is an executable in PATH.
bool in_path(const std::string &name);

} // namespace rsched::test
