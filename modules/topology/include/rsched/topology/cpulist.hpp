#pragma once
// The kernel's cpulist text format ("0-3,8,10-11"), as found in sysfs files such as
// devices/system/node/node0/cpulist or cache/index3/shared_cpu_list.
#include "rsched/base/result.hpp"

#include <string_view>
#include <vector>

namespace rsched::topology {

// Every CPU number parse_cpulist accepts is below this. The kernel's largest NR_CPUS is 8192;
// the bound keeps a hostile or corrupt file ("0-4000000000") from allocating gigabytes.
inline constexpr unsigned max_cpulist_cpu = 65536;

// Parses a cpulist: comma-separated items, each a decimal CPU number or an inclusive range
// "lo-hi" with lo <= hi. Whitespace (including the trailing newline of a sysfs file) is allowed
// around items and numbers; a blank string is the empty list. Returns the CPUs sorted and without
// duplicates. Errors (never exceptions) for anything else: empty items ("1,,2", "1,"), signs,
// hex, reversed ranges, numbers >= max_cpulist_cpu. The kernel's stride syntax ("0-15:2/4") is
// not accepted: sysfs never prints it.
result<std::vector<unsigned>> parse_cpulist(std::string_view text);

} // namespace rsched::topology
