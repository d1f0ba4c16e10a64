#include "rsched/collect/kallsyms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace rsched::collect {

kallsyms kallsyms::parse(std::string_view text) {
  kallsyms k;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    // "<hex address> <type> <name>[\t[module]]"
    const auto sp1 = line.find(' ');
    if (sp1 == std::string_view::npos || sp1 + 3 > line.size() || line[sp1 + 2] != ' ') {
      continue;
    }
    const char type = line[sp1 + 1];
    if (type != 't' && type != 'T' && type != 'w' && type != 'W') {
      continue;
    }
    std::uint64_t addr = 0;
    const auto [p, ec] = std::from_chars(line.data(), line.data() + sp1, addr, 16);
    if (ec != std::errc{} || p != line.data() + sp1 || addr == 0) {
      continue;
    }
    std::string_view name = line.substr(sp1 + 3);
    if (const auto tab = name.find_first_of("\t "); tab != std::string_view::npos) {
      name = name.substr(0, tab);
    }
    if (!name.empty() && k.names_.size() + name.size() <= UINT32_MAX) {
      k.syms_.push_back({addr, static_cast<std::uint32_t>(k.names_.size()),
                         static_cast<std::uint32_t>(name.size())});
      k.names_.append(name);
    }
  }
  std::stable_sort(k.syms_.begin(), k.syms_.end(),
                   [](const sym &a, const sym &b) { return a.addr < b.addr; });
  k.syms_.shrink_to_fit();
  k.names_.shrink_to_fit();
  return k;
}

kallsyms kallsyms::load(const char *path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str());
}

std::string kallsyms::name_of(std::uint64_t ip) const {
  auto it = std::upper_bound(syms_.begin(), syms_.end(), ip,
                             [](std::uint64_t v, const sym &s) { return v < s.addr; });
  if (it == syms_.begin()) {
    return fmt::format("0x{:x}", ip);
  }
  const sym &s = *std::prev(it);
  return names_.substr(s.off, s.len);
}

std::size_t kallsyms::tracing_frames(const std::vector<std::string> &names) {
  const auto tracing = [](std::string_view n) {
    for (std::string_view p :
         {"bpf_prog_", "bpf_trampoline_", "bpf_trace_run", "__bpf_trace_", "__traceiter_", "0x"}) {
      if (n.starts_with(p)) {
        return true;
      }
    }
    return false;
  };
  std::size_t n = 0;
  while (n < names.size() && tracing(names[n])) {
    ++n;
  }
  // A stack that is nothing but those (or addresses no symbol holds) is kept whole.
  return n == names.size() ? 0 : n;
}

} // namespace rsched::collect
