#pragma once
// rschedd's command line, parsed into a plain struct (pure, unit-tested).
#include "rsched/base/result.hpp"
#include "rsched/bpf/program.hpp"
#include "rsched/store/records.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rsched::rschedd {

struct options {
  std::uint64_t interval_s = 1;
  std::optional<std::uint64_t> run_time_s;
  std::string db_path = store::default_db_path;
  bool no_db = false;
  bpf::attach_mode mode = bpf::attach_mode::automatic;
  std::uint32_t graveyard_entries = 16384;
  bool verbose = false;
  bool help = false;
  bool version = false;
};

inline constexpr const char *usage_text =
    "Usage: rschedd [-i SECONDS] [-r SECONDS] [--db PATH | --no-db]\n"
    "\n"
    "Records per-thread and per-CPU scheduling delay and runqueue depth every interval into a\n"
    "SQLite database (query it with rsched-sql); with a terminal on stdout it also shows the\n"
    "live Scheduling Delays table.\n"
    "\n"
    "  -i, --interval SECONDS   interval length (default 1)\n"
    "  -r, --run-time SECONDS   stop after this long (the last partial interval is recorded)\n"
    "      --db PATH            database (default /var/lib/rsched/rsched.db)\n"
    "      --no-db              live display only, record nothing\n"
    "      --bpf-mode MODE      auto (default), tp_btf or raw_tp\n"
    "      --graveyard-entries N  exited threads held between two reads (default 16384)\n"
    "  -v, --verbose            show libbpf messages (verifier log on load failures)\n"
    "  -h, --help               this text\n"
    "  -V, --version            print the version\n";

namespace detail {
inline result<std::uint64_t> parse_u64(const std::string &flag, const std::string &v,
                                       std::uint64_t min, std::uint64_t max) {
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12) {
    return make_error(flag + " needs a whole number, got '" + v + "'");
  }
  const std::uint64_t n = std::stoull(v);
  if (n < min || n > max) {
    return make_error(flag + " must be between " + std::to_string(min) + " and " +
                      std::to_string(max) + ", got " + v);
  }
  return n;
}
} // namespace detail

inline result<options> parse_options(const std::vector<std::string> &args) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    std::string flag = a;
    std::optional<std::string> inline_value;
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        flag = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    }
    auto value = [&]() -> result<std::string> {
      if (inline_value) {
        return *inline_value;
      }
      if (i + 1 >= args.size()) {
        return make_error(flag + " needs a value");
      }
      return args[++i];
    };
    if (flag == "-i" || flag == "--interval") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 86400);
      if (!n) {
        return n.err();
      }
      o.interval_s = *n;
    } else if (flag == "-r" || flag == "--run-time") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 1, 100ULL * 365 * 86400);
      if (!n) {
        return n.err();
      }
      o.run_time_s = *n;
    } else if (flag == "--db") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (v->empty()) {
        return make_error("--db needs a path");
      }
      o.db_path = *v;
    } else if (flag == "--no-db") {
      o.no_db = true;
    } else if (flag == "--bpf-mode") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      if (*v == "auto") {
        o.mode = bpf::attach_mode::automatic;
      } else if (*v == "tp_btf") {
        o.mode = bpf::attach_mode::tp_btf;
      } else if (*v == "raw_tp") {
        o.mode = bpf::attach_mode::raw_tp;
      } else {
        return make_error("--bpf-mode must be auto, tp_btf or raw_tp, got '" + *v + "'");
      }
    } else if (flag == "--graveyard-entries") {
      auto v = value();
      if (!v) {
        return v.err();
      }
      auto n = detail::parse_u64(flag, *v, 16, 1U << 22);
      if (!n) {
        return n.err();
      }
      o.graveyard_entries = static_cast<std::uint32_t>(*n);
    } else if (flag == "-v" || flag == "--verbose") {
      o.verbose = true;
    } else if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "-V" || flag == "--version") {
      o.version = true;
    } else {
      return make_error("unknown option '" + a + "' (see rschedd --help)");
    }
  }
  if (o.no_db && o.db_path != store::default_db_path) {
    return make_error("--db and --no-db exclude each other");
  }
  return o;
}

} // namespace rsched::rschedd
