#include "rsched/sql_shell/options.hpp"

#include "rsched/query/reader.hpp"
#include "rsched/store/records.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace rsched::sql_shell {

namespace {

constexpr std::array<std::pair<output_mode, std::string_view>, 7> mode_names = {{
    {output_mode::table, "table"},
    {output_mode::box, "box"},
    {output_mode::markdown, "markdown"},
    {output_mode::line, "line"},
    {output_mode::csv, "csv"},
    {output_mode::json, "json"},
    {output_mode::jsonl, "jsonl"},
}};

// ASCII case-insensitive equality: host names are SQLite schema names, which ignore case.
bool same_name_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto low = [](char c) {
             return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
           };
           return low(x) == low(y);
         });
}

} // namespace

std::optional<output_mode> parse_mode(std::string_view name) {
  for (const auto &[m, n] : mode_names) {
    if (n == name) {
      return m;
    }
  }
  return std::nullopt;
}

std::string_view mode_name(output_mode m) {
  for (const auto &[mm, n] : mode_names) {
    if (mm == m) {
      return n;
    }
  }
  return "table";
}

// Hand-written on purpose (CLI11 was evaluated, see the commit that added this comment): the
// grammar has rules a generic parser would need overriding for, each pinned by
// tests/rsched-sql/options_test.cpp:
//  - no bundling or attached values: "-csv" (sqlite3's spelling) is refused, not "-c sv";
//  - "-c" takes the next argument verbatim, even "--csv" or "-- comment\nSELECT 1";
//  - "DB mark TEXT [--at T] [--until T] [--tags a,b]" is a second form after the positional DB,
//    which cannot be combined with -c, -o, --csv/--json/--jsonl or --bail;
//  - every error is one line in this program's words ("unknown option '--bogus'", "option '-c'
//    needs an SQL argument"), which main prints escaped and exits 2 with.
namespace {
// The service subcommand's arguments: NAME, then its patterns, as given ("--" once allowed:
// after it, arguments starting with '-' are data too).
result<service_args> parse_service(std::span<const std::string_view> args, bool options_ended) {
  service_args sv;
  bool have_name = false;
  for (const std::string_view b : args) {
    if (!options_ended && b == "--") {
      options_ended = true;
    } else if (!options_ended && b.size() > 1 && b.front() == '-') {
      return make_error(fmt::format("unknown option '{}' for service", b));
    } else if (!have_name) {
      sv.name = std::string(b);
      have_name = true;
    } else {
      sv.patterns.emplace_back(b);
    }
  }
  if (!have_name || sv.name.empty()) {
    return make_error("service needs a name: service NAME [comm|comm:GLOB|cgroup:PATH]...");
  }
  return sv;
}
} // namespace

result<options> parse_args(std::span<const std::string_view> args) {
  options o;
  std::optional<std::string> db;
  bool options_ended = false;
  bool mode_set = false;
  auto need_value = [&](std::size_t i, std::string_view what) -> result<std::string_view> {
    if (i + 1 == args.size()) {
      return make_error(fmt::format("option '{}' needs {}", args[i], what));
    }
    return args[i + 1];
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const bool is_option = !options_ended && a.size() > 1 && a.front() == '-';
    if (!is_option && !o.mark &&
        (a == "heatmap" || a == "plot" || a == "report" || a == "export")) {
      o.picture.emplace(
          std::string(a),
          std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end()));
      if (!o.commands.empty() || o.output_file || mode_set || o.bail) {
        return make_error(
            fmt::format("{} cannot be combined with -c, -o, --csv, --json or --bail before it "
                        "(give its own -o after it)",
                        a));
      }
      break;
    }
    if (!is_option) {
      if (!db) {
        if (a.empty()) {
          return make_error("the database path is empty");
        }
        db = std::string(a);
      } else if (!o.mark && !o.service && a == "service") {
        auto sv = parse_service(args.subspan(i + 1), options_ended);
        if (!sv) {
          return sv.err();
        }
        o.service = std::move(*sv);
        if (!o.commands.empty() || o.output_file || mode_set || o.bail) {
          return make_error("service cannot be combined with -c, -o, --csv, --json or --bail");
        }
        break;
      } else if (!o.mark && a == "mark") {
        o.mark = mark_args{};
        // The text: the next positional argument (it may start with '-' after "--").
        bool have_text = false;
        for (std::size_t j = i + 1; j < args.size(); ++j) {
          const std::string_view b = args[j];
          if (!options_ended && b == "--") {
            options_ended = true;
            continue;
          }
          if (!options_ended && b.size() > 1 && b.front() == '-') {
            if (b == "--at" || b == "--until" || b == "--tags" || b == "--tag") {
              auto v = need_value(j, "a value");
              if (!v) {
                return v.err();
              }
              if (b == "--at") {
                o.mark->at = std::string(*v);
              } else if (b == "--until") {
                o.mark->until = std::string(*v);
              } else if (b == "--tag") { // one more tag
                o.mark->tags += (o.mark->tags.empty() ? "" : ",") + std::string(*v);
              } else {
                o.mark->tags = std::string(*v);
              }
              ++j;
              continue;
            }
            return make_error(fmt::format("unknown option '{}' for mark", b));
          }
          if (have_text) {
            return make_error(
                fmt::format("too many arguments: '{}' (quote the text of the mark)", b));
          }
          o.mark->text = std::string(b);
          have_text = true;
        }
        if (!have_text || o.mark->text.empty()) {
          return make_error("mark needs a text: mark \"deploy v42\" [--at T] [--until T]");
        }
        if (!o.commands.empty() || o.output_file || mode_set || o.bail) {
          return make_error("mark cannot be combined with -c, -o, --csv, --json or --bail");
        }
        break;
      } else {
        return make_error(
            fmt::format("too many arguments: '{}' (only one database is allowed)", a));
      }
    } else if (a == "--") {
      options_ended = true;
    } else if (a == "-c") {
      auto v = need_value(i, "an SQL argument");
      if (!v) {
        return v.err();
      }
      o.commands.emplace_back(*v);
      ++i;
    } else if (a == "-o") {
      auto v = need_value(i, "a file name");
      if (!v) {
        return v.err();
      }
      if (v->empty()) {
        return make_error("option '-o' needs a file name");
      }
      o.output_file = std::string(*v);
      ++i;
    } else if (a == "--csv" || a == "--json" || a == "--jsonl") {
      o.mode = *parse_mode(a.substr(2));
      mode_set = true;
    } else if (a == "--host") {
      auto v = need_value(i, "NAME=PATH");
      if (!v) {
        return v.err();
      }
      auto h = parse_host_arg(*v);
      if (!h) {
        return h.err();
      }
      for (const auto &other : o.hosts) {
        if (same_name_nocase(other.name, h->name)) {
          return make_error(fmt::format("host name '{}' is given twice (--host)", h->name));
        }
      }
      o.hosts.push_back(std::move(*h));
      ++i;
    } else if (a == "--bail") {
      o.bail = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else {
      return make_error(fmt::format("unknown option '{}'", a));
    }
  }
  if (!o.hosts.empty()) {
    // The hosts' files are the databases: nothing that names or writes one database.
    if (o.mark || o.service) {
      return make_error(fmt::format("{} writes one database: give its path as DB, without --host",
                                    o.mark ? "mark" : "service"));
    }
    if (db) {
      return make_error(fmt::format("--host cannot be combined with a database path ('{}'): the "
                                    "hosts' files are the databases",
                                    *db));
    }
    if (o.picture && o.picture->first != "plot") {
      return make_error(fmt::format("{} reads one database: give that host's file as DB, without "
                                    "--host (SQL, plot and the table functions read several hosts)",
                                    o.picture->first));
    }
  }
  o.db_path = db ? *db : o.hosts.empty() ? std::string(store::default_db_path) : std::string();
  return o;
}

result<host_arg> parse_host_arg(std::string_view value) {
  const auto eq = value.find('=');
  if (eq == std::string_view::npos) {
    return make_error(fmt::format("--host needs NAME=PATH, got '{}'", value));
  }
  host_arg h{std::string(value.substr(0, eq)), std::string(value.substr(eq + 1))};
  const auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (h.name.empty()) {
    return make_error(fmt::format("--host '{}': the host name is empty (NAME=PATH)", value));
  }
  if (h.name.size() > max_host_name) {
    return make_error(fmt::format("--host '{}': the host name is longer than {} characters", value,
                                  max_host_name));
  }
  const bool charset =
      alnum(h.name.front()) && std::all_of(h.name.begin(), h.name.end(), [&](char c) {
        return alnum(c) || c == '.' || c == '_' || c == '-';
      });
  if (!charset) {
    return make_error(fmt::format("--host '{}': a host name holds letters, digits, '.', '_' and "
                                  "'-', starting with a letter or digit",
                                  value));
  }
  if (same_name_nocase(h.name, "main") || same_name_nocase(h.name, "temp")) {
    return make_error(fmt::format(
        "--host '{}': the host name '{}' is reserved (SQLite's own schemas)", value, h.name));
  }
  if (h.path.empty()) {
    return make_error(fmt::format("--host '{}': the path is empty (NAME=PATH)", value));
  }
  return h;
}

result<options> parse_args(int argc, const char *const *argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) {
    args.emplace_back(argv[i]);
  }
  return parse_args(std::span<const std::string_view>(args));
}

std::string usage_text() {
  return fmt::format(
      R"(Usage: {0} [DB] [-c SQL]... [--csv|--json|--jsonl] [-o FILE] [--bail]
       {0} --host NAME=PATH [--host NAME=PATH]... [-c SQL]... [--csv|--json|--jsonl]
                  [-o FILE] [--bail]
       {0} --host NAME=PATH [--host NAME=PATH]... plot -c SQL [--log] [-o FILE.svg]
       {0} DB mark TEXT [--at T] [--until T] [--tags a,b]
       {0} DB service NAME [PATTERN]...
       {0} [DB] heatmap [--view VIEW] [--where SQL] [--from T] [--to T] [--step DUR]
                  [--by cpu|comm|cgroup] [--top N] [--max DUR] [--column COL] [-o FILE.svg]
       {0} [DB] plot -c SQL [--log] [--title TEXT] [-o FILE.svg]
       {0} [DB] report [--from T] [--to T] [--where SQL] [-o FILE.html]
       {0} [DB] export openmetrics|perfetto [--from T] [--to T] [--where SQL] [--top N]
                  [-o FILE]
       {0} -h | --help | --version
SQL shell over the history recorded by rschedd. The database is opened read-only; only
annotations (mark, .mark, .import-incidents) and service mappings (service) are ever written,
each in a short transaction.

  DB          the database (default {1})
  --host NAME=PATH
              instead of DB: read several hosts' databases (repeatable, at most {2}) as one.
              Every view and table gains a leading host column (the NAME), so one query
              compares hosts: SELECT host, hist_pct(hist_merge(hist), 99) AS p99_ns FROM
              sched_delay WHERE comm = 'postgres' GROUP BY host ORDER BY p99_ns DESC.
              spikes, compare, gaps, coverage and blame run on each host and start with a
              host column; "NAME".view reads one host's own view. NAME: letters, digits, '.',
              '_', '-'. Nothing is written to any file (no mark, heatmap, report or export).
  -c SQL      run SQL and exit; may be repeated, runs in order, stops at the first error.
              SQL starting with '.' is a dot command (e.g. -c .tables)
  --csv       print CSV instead of a table
  --json      print one JSON array of objects per statement
  --jsonl     print one JSON object per row and line
  -o FILE     write results to FILE instead of standard output
  --bail      stop a script read from standard input at its first error
  -h, --help  print this help and exit
  --version   print the version and exit

  heatmap     a latency heatmap of a histogram view (default sched_delay): time across,
              buckets up a log axis, colour for how many samples, annotations as bands, gaps
              hatched. --where filters the view's rows (values as literals: no ?, :name
              parameters), --from/--to the window (default the last hour recorded), --step
              the column width (default: fits the output), --by small multiples of the top
              --top (6) keys, --max clips into a top row. With -o an SVG file, on a terminal
              drawn in text, else the SVG on standard output.
  plot        a time-series chart of a query whose first column is a time (ns) and the others
              numbers (SELECT bucket(ts, '10s'), hist_percentile(hist, 99) FROM sched_delay
              GROUP BY 1); --log for a log axis. SVG or text, as heatmap.
  report      one self-contained HTML page for a window (default the last hour recorded):
              coverage, percentiles with their error, heatmaps, the p99 timeline, spikes and
              their causes, pressure and throttling.
  export openmetrics
              the window (default the last hour recorded) as timestamped OpenMetrics for
              promtool tsdb create-blocks-from openmetrics: scheduling delay histograms per CPU
              and per cgroup (the --top (10) busiest, the rest as "other"; --where filters the
              sched_delay rows), rschedd's health counters (docs/FLEET.md).
  export perfetto
              the window as a JSON trace for ui.perfetto.dev: p50/p99/max delay tracks per CPU
              and for the --top (10) worst comms, annotations, spikes and gaps as slices.
  mark TEXT   add an annotation and print its id. --at T (default now), --until T (default: a
              point in time), --tags a,b (or --tag a, repeatable). Times as in t(): ISO 8601,
              'YYYY-MM-DD HH:MM[:SS]' (local zone), epoch seconds, now, today, 'yesterday 14:00',
              '2h ago'. The tag capture asks a running rschedd --flight-recorder to save the
              seconds before the mark as a Perfetto trace (table captures: SELECT * FROM
              captures ORDER BY start_ns DESC lists them).
  service NAME [PATTERN]...
              which threads are service NAME (as incident tools name it: PagerDuty's
              service_name): explain(ANNOTATION_ID) of an incident tagged service_name:NAME
              or service:NAME takes them as its victims. PATTERN: a comm, comm:GLOB or
              cgroup:PATH (its descendants too). Replaces the service's patterns; without
              one, forgets them (explain() then matches NAME against comms and cgroup path
              components: NAME, NAME.service, NAME.slice, NAME.scope). Table services lists them.

Without -c, SQL is read from standard input when it is not a terminal, otherwise an interactive
shell starts (line editing, history in $RSCHED_SQL_HISTORY or ~/.rsched_sql_history, Ctrl-C
cancels a running query, Ctrl-D leaves, .help lists the dot commands). A script goes on after a
failed statement and exits 1 at the end, unless --bail.

Output:
  table  (default) aligned columns, numbers right-aligned, NULL shown as NULL, blobs as
         <blob N bytes>. Text is always escaped for the terminal: control bytes, backslash and
         invalid UTF-8 appear as \xNN (backslash as \\). box, markdown ('|' as \|) and line
         (column = value) are the same for people. In these modes, columns named dur or
         ending in _ns are durations shown with a unit (950 ns, 4.10 ms, 1.25 s: three
         significant digits), percentile columns (p99_ns, a_p50_ns, peak_ns) the histogram
         bucket that holds the percentile (8.19–16.4 ms; 5.63–6.14 ms when the
         statement answered every percentile at layout 5's precision), columns ending in _pct (share_pct,
         coverage_pct) reals with one decimal (97.6), and columns named ts, peak_ts, start_ns or end_ns holding UTC ns
         (> 1e17) are times in the display zone with their offset (2026-11-20 14:03:05+01:00;
         .tz switches the zone). On a terminal, at most 1000 rows of a result are shown,
         followed by "... N more rows"; use -o/.output FILE or --csv for all of them.
  csv    RFC 4180: a header row, CRLF line ends, fields with a comma, double quote, CR or LF
         quoted (quotes doubled); NULL is an empty field and the empty string is "";
         integers in decimal (raw ns), reals with enough digits to round-trip, blobs as
         x'<lowercase hex>'. Text is written byte for byte as stored, except when standard
         output is a terminal, where it is escaped as in table mode.
  json   RFC 8259, valid UTF-8 that strict parsers accept: NULL is null, integers raw (ns),
         reals round-trip (non-finite as null), blobs as a string of lowercase hex. Strings
         escape '"', '\', control characters, DEL and C1 controls as \uXXXX. A text that is
         not valid UTF-8 has U+FFFD for each byte that is not part of it, followed by a
         member "<column>_hex" with its exact bytes in lowercase hex ("comm":"web\ufffd",
         "comm_hex":"776562ff"; more "_hex" while the name is taken); without that member the
         string is exact. JSON output never carries a raw control byte. jsonl: the same, one
         object per row and line.

Exit status: 0 success; 1 the database could not be opened or a statement failed; 2 bad
usage; 3 no data: a statement whose SQL calls t(, ago(, around( or during( (written
directly before the parenthesis), or gave a table function a window, returned no rows and
the window holds no recorded interval; "{0}: no recorded data in that window" is printed on
standard error, the remaining statements still run, and an error (1) takes precedence. An
empty answer over a recorded window is 0, with a note.
)",
      program_name, store::default_db_path, query::reader::max_hosts());
}

std::optional<std::string> history_path(const char *env_override, const char *home) {
  if (env_override != nullptr) {
    if (*env_override == '\0') {
      return std::nullopt;
    }
    return std::string(env_override);
  }
  if (home == nullptr || *home == '\0') {
    return std::nullopt;
  }
  std::string p(home);
  if (p.back() != '/') {
    p += '/';
  }
  return p + ".rsched_sql_history";
}

} // namespace rsched::sql_shell
