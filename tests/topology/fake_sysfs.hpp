#pragma once
// A throw-away sysfs tree in a fresh temp dir, removed on destruction. Tests describe a machine
// with cpu()/node() and pass root() to topology::load.
#include "support/temp_dir.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

namespace rsched::topology::testing {

struct fake_cpu {
  std::optional<std::string> online = std::nullopt; // no file when nullopt (like cpu0)
  std::optional<int> package = std::nullopt;
  std::optional<int> core = std::nullopt;
  std::optional<int> die_id = std::nullopt;
  std::optional<std::string> die_cpus_list = std::nullopt;
  std::optional<std::string> l3 = std::nullopt; // cache/index3/shared_cpu_list
  std::optional<std::string> l2 = std::nullopt; // cache/index2/shared_cpu_list
};

class fake_sysfs {
public:
  fake_sysfs() { std::filesystem::create_directories(root_ / "devices/system/cpu"); }
  fake_sysfs(const fake_sysfs &) = delete;
  fake_sysfs &operator=(const fake_sysfs &) = delete;

  [[nodiscard]] const std::filesystem::path &root() const { return root_; }

  // Writes `text` to root/rel, creating parent directories.
  void write(const std::string &rel, const std::string &text) const {
    const auto p = root_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }

  void cpu(unsigned n, const fake_cpu &c) const {
    const std::string d = "devices/system/cpu/cpu" + std::to_string(n) + "/";
    std::filesystem::create_directories(root_ / d);
    if (c.online) {
      write(d + "online", *c.online + "\n");
    }
    if (c.package) {
      write(d + "topology/physical_package_id", std::to_string(*c.package) + "\n");
    }
    if (c.core) {
      write(d + "topology/core_id", std::to_string(*c.core) + "\n");
    }
    if (c.die_id) {
      write(d + "topology/die_id", std::to_string(*c.die_id) + "\n");
    }
    if (c.die_cpus_list) {
      write(d + "topology/die_cpus_list", *c.die_cpus_list + "\n");
    }
    if (c.l3) {
      write(d + "cache/index3/shared_cpu_list", *c.l3 + "\n");
    }
    if (c.l2) {
      write(d + "cache/index2/shared_cpu_list", *c.l2 + "\n");
    }
  }

  void node(unsigned n, const std::string &cpulist) const {
    write("devices/system/node/node" + std::to_string(n) + "/cpulist", cpulist + "\n");
  }

private:
  rsched::test::temp_dir dir_{"rsched-topo"};
  const std::filesystem::path &root_ = dir_.path();
};

} // namespace rsched::topology::testing
