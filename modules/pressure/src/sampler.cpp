// The sampler of pressure.hpp: reads the system's and every cgroup's files.
#include "rsched/base/mountinfo.hpp"
#include "rsched/pressure/pressure.hpp"

#include <fmt/format.h>

#include <deque>
#include <exception>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace rsched::pressure {

namespace {

// A small kernel text file, whole; nullopt when it cannot be read.
std::optional<std::string> slurp(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return std::nullopt;
  }
  std::string out;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0 || out.size() > 65536) {
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void add_psi(cgroup_cpu &c, const std::string &file) {
  if (auto t = slurp(file)) {
    if (auto p = parse_psi(*t)) {
      c.some_ns = p->some_us ? std::optional<std::uint64_t>(*p->some_us * 1000) : std::nullopt;
      c.full_ns = p->full_us ? std::optional<std::uint64_t>(*p->full_us * 1000) : std::nullopt;
    }
  }
}

void add_stat(cgroup_cpu &c, const std::string &file, bool usage) {
  auto t = slurp(file);
  if (!t) {
    return;
  }
  auto s = parse_cpu_stat(*t);
  if (!s) {
    return;
  }
  if (usage && s->usage_ns) {
    c.usage_ns = s->usage_ns;
  }
  if (s->periods) {
    c.periods = s->periods;
    c.throttled = s->throttled;
    c.throttled_ns = s->throttled_ns;
  }
}

} // namespace

sources find_sources(std::string_view mi) {
  sources s;
  s.cgroup2 = mountinfo::cgroup2(mi).value_or("");
  s.cpu_v1 = mountinfo::cgroup1(mi, "cpu").value_or("");
  return s;
}

readings sampler::read() {
  namespace fs = std::filesystem;
  readings out;
  truncated_ = false;
  cgroup_cpu &sys = out["/"];
  add_psi(sys, src_.system_psi);
  if (src_.cgroup2.empty()) {
    return out;
  }
  // Breadth first from the root: a cap keeps the shallow cgroups (slices, services).
  std::deque<std::string> todo{"/"};
  std::size_t n = 0;
  std::error_code ec;
  while (!todo.empty()) {
    const std::string rel = std::move(todo.front());
    todo.pop_front();
    if (n++ >= src_.max_cgroups) {
      truncated_ = true;
      break;
    }
    const std::string dir = rel == "/" ? src_.cgroup2 : src_.cgroup2 + rel;
    cgroup_cpu &c = out[rel];
    if (rel != "/") {
      add_psi(c, dir + "/cpu.pressure");
    }
    add_stat(c, dir + "/cpu.stat", true);
    if (!c.periods && !src_.cpu_v1.empty() && rel != "/") {
      add_stat(c, (src_.cpu_v1 + rel) + "/cpu.stat", false); // hybrid: v1 cpu controller
    }
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) {
        todo.push_back((rel == "/" ? std::string() : rel) + "/" + it->path().filename().string());
      }
    }
  }
  return out;
}

std::vector<std::string> sampler::unseen_v1_quotas(std::size_t max_lines) const {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (src_.cpu_v1.empty() || src_.cgroup2.empty()) {
    return out;
  }
  const auto number = [](const std::string &path) -> std::optional<long long> {
    auto t = slurp(path);
    if (!t) {
      return std::nullopt;
    }
    try {
      return std::stoll(*t);
    } catch (const std::exception &) {
      return std::nullopt;
    }
  };
  std::deque<std::string> todo{"/"};
  std::size_t n = 0, more = 0;
  std::error_code ec;
  while (!todo.empty() && n++ < src_.max_cgroups) {
    const std::string rel = std::move(todo.front());
    todo.pop_front();
    const std::string dir = rel == "/" ? src_.cpu_v1 : src_.cpu_v1 + rel;
    if (rel != "/" && !fs::is_directory(src_.cgroup2 + rel, ec)) {
      const auto quota = number(dir + "/cpu.cfs_quota_us");
      if (quota && *quota > 0) {
        if (out.size() < max_lines) {
          out.push_back(fmt::format(
              "cgroup {} has a CFS quota in the v1 cpu hierarchy ({} us every {} us) but no "
              "cgroup v2 counterpart: its threads are recorded under their v2 cgroup and its "
              "throttling is not read",
              rel, *quota, number(dir + "/cpu.cfs_period_us").value_or(0)));
        } else {
          ++more;
        }
      }
    }
    for (fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) {
        todo.push_back((rel == "/" ? std::string() : rel) + "/" + it->path().filename().string());
      }
    }
  }
  if (more > 0) {
    out.push_back(fmt::format("... and {} more v1-only cgroups with a CFS quota", more));
  }
  return out;
}

std::vector<std::string> sampler::missing() const {
  std::vector<std::string> out;
  if (access(src_.system_psi.c_str(), R_OK) != 0) {
    out.push_back("CPU pressure unavailable: " + src_.system_psi +
                  " is missing (kernel without CONFIG_PSI, or booted with psi=0)");
  }
  if (src_.cgroup2.empty()) {
    out.emplace_back("per-cgroup pressure and throttling unavailable: no cgroup v2 mount");
    return out;
  }
  const bool v2_cpu = access((src_.cgroup2 + "/cgroup.controllers").c_str(), R_OK) == 0 && [&] {
    auto t = slurp(src_.cgroup2 + "/cgroup.controllers");
    if (!t) {
      return false;
    }
    const std::string padded = " " + *t;
    return padded.find(" cpu ") != std::string::npos || padded.find(" cpu\n") != std::string::npos;
  }();
  if (!v2_cpu && src_.cpu_v1.empty()) {
    out.emplace_back("CFS throttling unavailable: no cpu controller (neither on cgroup v2 nor "
                     "mounted as cgroup v1)");
  }
  return out;
}

} // namespace rsched::pressure
