#include "rsched/topology/topology.hpp"

#include "rsched/base/text.hpp"
#include "rsched/topology/cpulist.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <unistd.h>
#include <utility>
#include <variant>

namespace rsched::topology {

namespace fs = std::filesystem;

namespace {

int count_distinct(const std::vector<cpu_info> &cpus, int cpu_info::*field) {
  std::set<int> ids;
  for (const auto &c : cpus) {
    if (c.*field >= 0) {
      ids.insert(c.*field);
    }
  }
  return static_cast<int>(ids.size());
}

std::string quote(const fs::path &p) {
  return text::escape_for_terminal(p.string());
}

error io_error(std::string_view what, const fs::path &p, int err) {
  return make_error(
      "topology: cannot " + std::string(what) + " " + quote(p) + ": " + std::strerror(err), err);
}

// Reads a sysfs attribute. nullopt when it does not exist: the attribute is optional on this
// kernel/arch, or the CPU went offline while we scanned. Any other failure is an error.
result<std::optional<std::string>> read_attr(const fs::path &p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return std::optional<std::string>{};
    }
    return io_error("open", p, err);
  }
  // sysfs attributes are at most a page; the cap only guards against a fake tree with a huge file.
  constexpr std::size_t max_size = 1 << 20;
  std::string out;
  std::array<char, 4096> buf{};
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      const int err = errno;
      ::close(fd);
      return io_error("read", p, err);
    }
    if (n == 0) {
      break;
    }
    out.append(buf.data(), static_cast<std::size_t>(n));
    if (out.size() > max_size) {
      ::close(fd);
      return make_error("topology: " + quote(p) + " is larger than 1 MiB");
    }
  }
  ::close(fd);
  return std::optional<std::string>{std::move(out)};
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view space = " \t\n\r\v\f";
  const auto b = s.find_first_not_of(space);
  if (b == std::string_view::npos) {
    return {};
  }
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

// An integer attribute (physical_package_id may be -1 on some arm64 kernels); `dflt` if absent.
result<int> read_int_attr(const fs::path &p, int dflt) {
  auto text = read_attr(p);
  if (!text) {
    return text.err();
  }
  if (!text.value()) {
    return dflt;
  }
  const std::string_view s = trim(**text);
  int v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) {
    return make_error("topology: " + quote(p) + " does not hold an integer");
  }
  return v;
}

// A cpulist attribute, trimmed and checked (so that a corrupt file is reported, not silently
// turned into a group of its own); nullopt if absent.
result<std::optional<std::string>> read_cpulist_attr(const fs::path &p) {
  auto text = read_attr(p);
  if (!text || !text.value()) {
    return text;
  }
  std::string s(trim(**text));
  if (auto parsed = parse_cpulist(s); !parsed) {
    return make_error("topology: " + quote(p) + ": " + parsed.err().msg);
  }
  return std::optional<std::string>{std::move(s)};
}

// "<prefix><N>" with N in canonical decimal (no sign, no leading zero) and below `limit`.
std::optional<unsigned> numbered_entry(std::string_view name, std::string_view prefix,
                                       unsigned limit) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const std::string_view digits = name.substr(prefix.size());
  if (digits.size() > 1 && digits.front() == '0') {
    return std::nullopt;
  }
  if (digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc{} || end != digits.data() + digits.size() || v >= limit) {
    return std::nullopt;
  }
  return v;
}

// Numbered subdirectories of `dir` ("cpu3", "node1"), sorted by number. nullopt if `dir` does
// not exist.
result<std::optional<std::vector<std::pair<unsigned, fs::path>>>>
list_numbered(const fs::path &dir, std::string_view prefix, unsigned limit) {
  using entries = std::vector<std::pair<unsigned, fs::path>>;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return std::optional<entries>{};
    }
    return io_error("read", dir, ec.value());
  }
  entries out;
  for (; it != fs::directory_iterator{}; it.increment(ec)) {
    if (ec) {
      return io_error("read", dir, ec.value());
    }
    const auto n = numbered_entry(it->path().filename().string(), prefix, limit);
    if (!n) {
      continue; // cpufreq, cpuidle, cpu1024, node "possible" masks ...
    }
    std::error_code dec;
    if (!it->is_directory(dec)) {
      return make_error("topology: " + quote(it->path()) + " is not a directory");
    }
    out.emplace_back(*n, it->path());
  }
  if (ec) {
    return io_error("read", dir, ec.value());
  }
  std::sort(out.begin(), out.end());
  return std::optional<entries>{std::move(out)};
}

// What sysfs says about one online CPU, before ids are made dense.
struct raw_cpu {
  unsigned cpu = 0;
  int package = -1;
  int core = -1;
  int die_id = -1;
  std::optional<std::string> die_cpus; // topology/die_cpus_list
  std::string llc_cpus;                // shared_cpu_list of the LLC; "" when no cache info
};

result<std::optional<raw_cpu>> read_cpu(unsigned cpu, const fs::path &dir) {
  auto online = read_attr(dir / "online");
  if (!online) {
    return online.err();
  }
  if (online.value() && trim(**online) != "1") {
    return std::optional<raw_cpu>{};
  }
  raw_cpu r;
  r.cpu = cpu;
  const fs::path topo = dir / "topology";
  auto package = read_int_attr(topo / "physical_package_id", -1);
  if (!package) {
    return package.err();
  }
  auto core = read_int_attr(topo / "core_id", -1);
  if (!core) {
    return core.err();
  }
  auto die_id = read_int_attr(topo / "die_id", -1);
  if (!die_id) {
    return die_id.err();
  }
  auto die_cpus = read_cpulist_attr(topo / "die_cpus_list");
  if (!die_cpus) {
    return die_cpus.err();
  }
  r.package = *package;
  r.core = *core;
  r.die_id = *die_id;
  r.die_cpus = std::move(*die_cpus);
  // index3 is the L3 and index2 the L2 on the machines rsched targets; scx_utils uses the same
  // two indexes in this order.
  for (const char *index : {"index3", "index2"}) {
    auto shared = read_cpulist_attr(dir / "cache" / index / "shared_cpu_list");
    if (!shared) {
      return shared.err();
    }
    if (shared.value()) {
      r.llc_cpus = std::move(**shared);
      break;
    }
  }
  return std::optional<raw_cpu>{std::move(r)};
}

// cpu -> NUMA node from node<M>/cpulist; all -1 without devices/system/node.
result<std::array<int, max_cpus>> read_numa(const fs::path &node_root) {
  std::array<int, max_cpus> numa{};
  numa.fill(-1);
  // Node ids are ints in the kernel; the limit only keeps the id representable as int.
  constexpr unsigned max_node = 1u << 30;
  auto nodes = list_numbered(node_root, "node", max_node);
  if (!nodes) {
    return nodes.err();
  }
  if (!nodes.value()) {
    return numa;
  }
  for (const auto &[node, dir] : **nodes) {
    const fs::path p = dir / "cpulist";
    auto text = read_attr(p);
    if (!text) {
      return text.err();
    }
    if (!text.value()) {
      continue; // upstream skips a node without cpulist too
    }
    auto cpus = parse_cpulist(**text);
    if (!cpus) {
      return make_error("topology: " + quote(p) + ": " + cpus.err().msg);
    }
    for (unsigned c : *cpus) {
      if (c >= max_cpus) {
        continue;
      }
      // Nodes partition the CPUs; a CPU in two nodes means the tree is corrupt (the kernel
      // never does this), and silently picking one would make results depend on our order.
      if (numa[c] >= 0) {
        return make_error("topology: cpu" + std::to_string(c) + " is listed in node" +
                          std::to_string(numa[c]) + " and node" + std::to_string(node));
      }
      numa[c] = static_cast<int>(node);
    }
  }
  return numa;
}

// Hands out ids 0, 1, ... in order of first appearance. Callers feed CPUs in ascending order, so
// a group's id follows the lowest CPU in it, as upstream numbers its die groups.
template <typename Key> class dense_ids {
public:
  int id(const Key &k) { return ids_.try_emplace(k, static_cast<int>(ids_.size())).first->second; }

private:
  std::map<Key, int> ids_;
};

} // namespace

int topology::num_dies() const {
  return count_distinct(cpus, &cpu_info::die);
}
int topology::num_numa_nodes() const {
  return count_distinct(cpus, &cpu_info::numa);
}
int topology::num_llcs() const {
  return count_distinct(cpus, &cpu_info::llc);
}

std::optional<cpu_info> topology::find(unsigned cpu) const {
  const auto it = std::lower_bound(cpus.begin(), cpus.end(), cpu,
                                   [](const cpu_info &c, unsigned v) { return c.cpu < v; });
  if (it == cpus.end() || it->cpu != cpu) {
    return std::nullopt;
  }
  return *it;
}

result<topology> load(const fs::path &sysfs_root) {
  const fs::path cpu_root = sysfs_root / "devices" / "system" / "cpu";
  auto entries = list_numbered(cpu_root, "cpu", max_cpus);
  if (!entries) {
    return entries.err();
  }
  if (!entries.value()) {
    return io_error("read", cpu_root, ENOENT);
  }
  auto numa = read_numa(sysfs_root / "devices" / "system" / "node");
  if (!numa) {
    return numa.err();
  }

  // Die groups. With die_cpus_list the key is its text (upstream). Without it, upstream uses the
  // raw die_id, else physical_package_id, as the die number itself; those raw numbers can then
  // collide with the group numbers, and die_id repeats in every socket. We depart from that: the
  // fallback key is (package, die_id) -- or (package, none) -- and it is numbered in the same
  // dense sequence as the groups, so different dies never share an id.
  using fallback_key = std::pair<int, int>;
  dense_ids<std::variant<std::string, fallback_key>> die_ids;
  // LLC groups keyed by (node, package, shared_cpu_list), as scx keys its LLCs; CPUs without
  // cache information share the "" list of their node and package (scx's "LLC 0" fallback).
  dense_ids<std::tuple<int, int, std::string>> llc_ids;

  topology t;
  for (const auto &[cpu, dir] : **entries) {
    auto raw = read_cpu(cpu, dir);
    if (!raw) {
      return raw.err();
    }
    if (!raw.value()) {
      continue; // offline
    }
    const raw_cpu &r = **raw;
    cpu_info c;
    c.cpu = cpu;
    c.package = r.package;
    c.core = r.core;
    c.numa = (*numa)[cpu];
    if (r.die_cpus) {
      c.die = die_ids.id(*r.die_cpus);
    } else if (r.die_id >= 0 || r.package >= 0) {
      c.die = die_ids.id(fallback_key{r.package, r.die_id});
    }
    c.llc = llc_ids.id({c.numa, c.package, r.llc_cpus});
    t.cpus.push_back(c);
  }
  if (t.cpus.empty()) {
    return make_error("topology: no online CPU below " + std::to_string(max_cpus) + " in " +
                      quote(cpu_root));
  }
  return t;
}

} // namespace rsched::topology
