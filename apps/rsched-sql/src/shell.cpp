#include "rsched/sql_shell/shell.hpp"

#include "rsched/base/text.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/sql_shell/files.hpp"
#include "rsched/sql_shell/input.hpp"
#include "rsched/sql_shell/pictures.hpp"
#include "rsched/sqlite/quote.hpp"

#include "sql_util.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sstream>
#include <streambuf>
#include <string>
#include <unistd.h>

namespace rsched::sql_shell {

namespace {

constexpr const char *help_text =
    R"(.exit                    leave (also .quit or Ctrl-D)
.headers on|off          show or hide the header row
.heatmap [ARGS]          a latency heatmap drawn here (256 colours on a terminal), or with
                         -o FILE.svg an SVG: --view, --where, --from, --to, --step, --by,
                         --top, --max (see rsched-sql --help)
.help                    show this message
.import-incidents FILE [--map FIELD=COLUMN,...]
                         add the annotations of a CSV (header: start,end,text,source,tags) or
                         JSON (array of objects with those keys) timeline; a PagerDuty
                         incidents export is recognised, other columns are ignored, --map
                         names the columns (start=created_on,text=description); a row whose
                         source, times and text are already there is not added again
.mark TEXT [--at T] [--until T] [--tags a,b]
                         add an annotation (T: '2026-11-20 14:03', '2h ago', now, ...)
.mode MODE               table, box, markdown, line (for people: ns with units, times in
                         the .tz zone, percentiles p99_ns as their bucket), csv, json or
                         jsonl (data: raw integers)
.once FILE               write the results of the next statement to FILE
.output [FILE]           write results to FILE from now on; without FILE back to stdout
.pager [on|off|COMMAND]  page results wider or taller than the terminal (interactive default:
                         $PAGER, else less -SFRX); off prints them as they are
.plot -c SQL [--log]     a time-series chart of a query (first column a time in ns), drawn
                         here or with -o FILE.svg an SVG
.report -o FILE.html     the incident report of a window (--from, --to, --where)
.quit                    leave (also .exit or Ctrl-D)
.read FILE               run the statements and dot commands of FILE
.schema [PATTERN]        CREATE statements of the objects whose name is LIKE PATTERN
.tables                  list the tables and views
.tiers on|off|finest|auto
                         on: after each statement, which tiers the data views read and how
                         many rows (on stderr); finest: every view reads the finest tier
                         kept, as main.VIEW does; auto (default): whole minutes and hours
                         of a window from the rollups where they answer exactly
.timer on|off            print the run time of each statement (on stderr)
.tz [UTC|local|ZONE]     the zone times are shown and read in (IANA name: Europe/Berlin)
Statements end with ';' and may span lines; Ctrl-C cancels a running query.
Functions: hist_percentile(hist, p), hist_percentile_error, hist_merge, hist_pct,
hist_count, hist_count_above, hist_fraction_above, hist_mean, hist_max,
ipc(instructions, cycles), rate(n, dur); times: t('...'), ago('2h'), dur('5m'), fmt_time,
bucket(ts, '10s'), ts IN around(T, '5m'), ts IN during(a, b), annotation_margin('2m');
tables of their own: coverage, gaps, spikes, blame, inversions, compare, hist_buckets(hist),
explain(ANNOTATION_ID) or explain(start, end [, victims]), why(victim [, start, end]): the
victim's time running, runnable (blame's culprits) and sleeping (who woke it), and the same for
its top waker (see docs/SQL.md).
Over several hosts (rsched-sql --host NAME=PATH ...) every view and table starts with a host
column, as do spikes, compare, coverage, gaps, blame, inversions, explain and why; "NAME".view is
one host's own view.
)";

constexpr std::string_view interrupted_message = "Interrupted";

// query::reader gained set_zone() and interrupt() in a later change: use them when present.
template <typename R> void apply_zone(R &db, const timefmt::zone &z) {
  if constexpr (requires { db.set_zone(z); }) {
    db.set_zone(z);
  }
}

template <typename R> constexpr bool reader_interruptible() {
  return requires(R & db) {
    db.interrupt();
  };
}

template <typename R> void interrupt_reader(R &db) noexcept {
  if constexpr (reader_interruptible<R>()) {
    db.interrupt();
  }
}

bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

std::string lower_ascii(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return s;
}

// Where the connection's tables and views are listed: its schema, or over several hosts
// (--host) the TEMP views that combine the hosts' objects.
std::string schema_table(const query::reader &db) {
  return db.hosts().empty() ? "sqlite_schema" : "sqlite_temp_schema";
}

using sqlite::sql_ident;

// The whole content of `path`, at most max_input_bytes: regular files, pipes, /dev/stdin and
// the like alike (an endless one such as /dev/zero fails once the limit is passed). Opening never
// waits: a FIFO nobody writes to (one planted at the path) reads as empty instead of hanging.
result<std::string> read_bounded(const std::string &path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    return make_error(fmt::format("cannot read '{}': {}", path, std::strerror(e)), e);
  }
  // Then read as usual: a pipe's writer is waited for while it is connected.
  if (const int fl = fcntl(fd, F_GETFL); fl >= 0) {
    (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  std::string data;
  std::array<char, 65536> chunk{};
  for (;;) {
    const ssize_t n = read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      const int e = errno;
      close(fd);
      return make_error(fmt::format("cannot read '{}': {}", path, std::strerror(e)), e);
    }
    if (n == 0) {
      break;
    }
    if (data.size() + static_cast<std::size_t>(n) > max_input_bytes) {
      close(fd);
      return make_error(fmt::format("'{}' is larger than {} MiB, the most .import-incidents reads",
                                    path, max_input_bytes >> 20));
    }
    data.append(chunk.data(), static_cast<std::size_t>(n));
  }
  close(fd);
  return data;
}

// An input stream over a descriptor it owns (.read's script).
class fd_inbuf final : public std::streambuf {
public:
  explicit fd_inbuf(int fd) : fd_(fd) {}
  fd_inbuf(const fd_inbuf &) = delete;
  fd_inbuf &operator=(const fd_inbuf &) = delete;
  ~fd_inbuf() override { close(fd_); }

protected:
  int_type underflow() override {
    ssize_t n = 0;
    do {
      n = read(fd_, buf_.data(), buf_.size());
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      return traits_type::eof(); // a read error ends the script as its end would
    }
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(buf_[0]);
  }

private:
  int fd_;
  std::array<char, 65536> buf_{};
};

// N when `path` names one of this process's descriptors (/dev/stdin, /dev/fd/N, /proc/self/fd/N):
// read through a copy, whatever it is (a pipe from the shell).
std::optional<int> own_descriptor(const std::string &path) {
  if (path == "/dev/stdin") {
    return 0;
  }
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0) {
      const std::string_view n = std::string_view(path).substr(prefix.size());
      if (n.size() <= 9 && n.find_first_not_of("0123456789") == std::string_view::npos) {
        return std::stoi(std::string(n));
      }
    }
  }
  return std::nullopt;
}

// The script of `.read FILE`, opened without waiting: a regular file or a character device
// (/dev/null), or this process's own descriptor by name. A FIFO at a path is refused: opening
// one nobody writes to would wait forever, and a FIFO another user planted would feed this shell
// (root's, often) their statements. So are directories and sockets.
result<int> open_script(const std::string &path) {
  if (const auto own = own_descriptor(path)) {
    const int fd = fcntl(*own, F_DUPFD_CLOEXEC, 3);
    if (fd < 0) {
      const int e = errno;
      return make_error(
          fmt::format("cannot read '{}': {}", text::escape_for_terminal(path), std::strerror(e)),
          e);
    }
    return fd;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    return make_error(
        fmt::format("cannot read '{}': {}", text::escape_for_terminal(path), std::strerror(e)), e);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode))) {
    close(fd);
    return make_error(fmt::format("cannot read '{}': not a regular file (a FIFO, socket or "
                                  "directory)",
                                  text::escape_for_terminal(path)),
                      EINVAL);
  }
  if (const int fl = fcntl(fd, F_GETFL); fl >= 0) {
    (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK); // then read as usual (a device may block)
  }
  return fd;
}

} // namespace

bool names_time_window(std::string_view sql) {
  std::size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    if (const std::size_t past = detail::skip_literal_or_comment(sql, i); past != i) {
      i = past;
    } else if (ident_char(c)) {
      const std::size_t start = i;
      while (i < sql.size() && ident_char(sql[i])) {
        ++i;
      }
      if (i < sql.size() && sql[i] == '(') {
        const std::string w = lower_ascii(std::string(sql.substr(start, i - start)));
        if (w == "t" || w == "ago" || w == "around" || w == "during") {
          return true;
        }
      }
    } else {
      ++i;
    }
  }
  return false;
}

result<mark_args> parse_mark_args(const std::vector<std::string> &args) {
  mark_args m;
  std::vector<std::string> words;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--at" || a == "--until" || a == "--tags" || a == "--tag") {
      if (i + 1 == args.size()) {
        return make_error(fmt::format("{} needs a value", a));
      }
      const std::string &val = args[++i];
      if (a == "--at") {
        m.at = val;
      } else if (a == "--until") {
        m.until = val;
      } else if (a == "--tag") { // one more tag
        m.tags += (m.tags.empty() ? "" : ",") + val;
      } else {
        m.tags = val;
      }
    } else if (a.size() > 2 && a.rfind("--", 0) == 0) {
      return make_error(fmt::format("unknown option '{}' for .mark", a));
    } else {
      words.push_back(a);
    }
  }
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i != 0) {
      m.text += ' ';
    }
    m.text += words[i];
  }
  if (m.text.empty()) {
    return make_error("usage: .mark TEXT [--at T] [--until T] [--tags a,b]");
  }
  return m;
}

result<std::int64_t> add_mark(const std::string &db_path, const mark_args &m,
                              const timefmt::zone &z, std::int64_t now_ns) {
  query::annotation a;
  a.start_ns = now_ns;
  if (m.at) {
    auto t = timefmt::parse_time(*m.at, now_ns, z);
    if (!t) {
      return make_error("--at: " + t.err().msg);
    }
    a.start_ns = *t;
  }
  if (m.until) {
    auto t = timefmt::parse_time(*m.until, now_ns, z);
    if (!t) {
      return make_error("--until: " + t.err().msg);
    }
    if (*t < a.start_ns) {
      return make_error("--until is before --at");
    }
    a.end_ns = *t;
  }
  a.text = m.text;
  a.tags = m.tags;
  return query::add_annotation(db_path, a);
}

std::string locate(const std::string &msg, std::size_t first_line) {
  constexpr std::string_view prefix = "line ";
  if (msg.rfind(prefix, 0) == 0) {
    std::size_t i = prefix.size();
    std::size_t n = 0;
    while (i < msg.size() && msg[i] >= '0' && msg[i] <= '9' && n < 1'000'000'000) {
      n = n * 10 + static_cast<std::size_t>(msg[i] - '0');
      ++i;
    }
    if (i > prefix.size() && n > 0) {
      return fmt::format("line {}{}", n + first_line - 1, msg.substr(i));
    }
  }
  return fmt::format("{} (input line {})", msg, first_line);
}

shell::shell(query::reader &db, std::ostream &out, std::ostream &err, const output_config &cfg)
    : db_(db), out_(out), err_(err), printer_(out, cfg), terminal_escape_(cfg.escape_csv_text),
      terminal_max_rows_(cfg.max_rows) {
  apply_zone(db_, cfg.zone);
  // A scan that reads millions of raw rows says so, and why no rollup could answer it.
  db_.on_notice([this](const std::string &s) {
    err_ << program_name << ": note: " << text::escape_for_terminal(s) << '\n';
    err_.flush();
  });
}

const std::vector<std::string> &shell::dot_commands() {
  static const std::vector<std::string> names = {
      ".exit",   ".headers", ".heatmap", ".help", ".import-incidents",
      ".pager",  ".mark",    ".mode",    ".once", ".plot",
      ".report", ".output",  ".quit",    ".read", ".schema",
      ".tables", ".tiers",   ".timer",   ".tz"};
  return names;
}

void shell::report_error(std::string_view msg) {
  printer_.finish();
  err_ << program_name << ": " << text::escape_for_terminal(msg) << '\n';
  err_.flush();
}

void shell::interrupt() noexcept {
  interrupted_ = 1;
  interrupt_reader(db_);
}

bool shell::can_interrupt() {
  return reader_interruptible<query::reader>();
}

std::optional<std::string> shell::default_pager() {
  if (const char *p = std::getenv("PAGER"); p != nullptr) {
    return *p != '\0' ? std::optional<std::string>(p) : std::nullopt;
  }
  const char *path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    if (!dir.empty() && access((dir + "/less").c_str(), X_OK) == 0) {
      return "less -SFRX"; // chop long lines, quit when it fits, keep colours, no screen clear
    }
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return std::nullopt;
}

void shell::emit_paged(const std::string &text) {
  winsize ws{};
  std::size_t lines = 0;
  std::size_t widest = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto nl = std::min(text.find('\n', i), text.size());
    widest = std::max(widest, text::display_width(std::string_view(text).substr(i, nl - i)));
    ++lines;
    i = nl + 1;
  }
  const bool fits = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 ||
                    (widest <= ws.ws_col && lines + 2 <= ws.ws_row);
  if (fits || !pager_) {
    out_ << text;
    out_.flush();
    return;
  }
  out_.flush();
  // The pager may quit before reading everything: a closed pipe is not an error here.
  struct sigaction ignore {};
  struct sigaction old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  FILE *p = popen(pager_->c_str(), "w");
  if (p == nullptr) {
    sigaction(SIGPIPE, &old, nullptr);
    out_ << text;
    out_.flush();
    return;
  }
  (void)fwrite(text.data(), 1, text.size(), p);
  const int st = pclose(p);
  sigaction(SIGPIPE, &old, nullptr);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127) { // no such command
    report_error(fmt::format("pager '{}' failed; .pager off to go without", *pager_));
    out_ << text;
    out_.flush();
  }
}

void shell::route_output() {
  auto &cfg = printer_.config();
  std::ostream *dest = &out_;
  if (once_file_) {
    dest = &once_file_->stream();
  } else if (output_file_) {
    dest = &output_file_->stream();
  }
  printer_.set_stream(*dest);
  const bool to_out = dest == &out_;
  cfg.escape_csv_text = to_out && terminal_escape_;
  cfg.max_rows = to_out ? terminal_max_rows_ : 0;
}

shell::status shell::run_sql(std::string_view sql, std::size_t first_line) {
  return run_statements(sql, first_line, nullptr);
}

shell::status shell::run_bound(std::string_view sql, const std::vector<query::value> &params) {
  return run_statements(sql, 0, &params);
}

shell::status shell::run_statements(std::string_view sql, std::size_t first_line,
                                    const std::vector<query::value> *params) {
  route_output();
  interrupted_ = 0;
  printer_.reset_counts();
  (void)db_.take_window_named(); // what earlier statements named is theirs
  (void)db_.take_named_window();
  const auto t0 = std::chrono::steady_clock::now();
  // Human-mode results for the terminal are rendered whole, then paged when they do not fit.
  const bool page = pager_ && !once_file_ && !output_file_ && is_human(printer_.config().mode);
  std::ostringstream paged;
  if (page) {
    printer_.set_stream(paged);
  }
  // The user's SQL runs as written (a parameter in it is NULL, as in sqlite3); the shell's own
  // statements bind their values.
  auto r =
      params != nullptr ? db_.exec(sql, *params, printer_.sink()) : db_.exec(sql, printer_.sink());
  printer_.finish(static_cast<bool>(r) && interrupted_ == 0);
  if (page) {
    printer_.set_stream(out_);
    emit_paged(paged.str());
  }
  const auto t1 = std::chrono::steady_clock::now();
  const bool interrupted = interrupted_ != 0;
  interrupted_ = 0;
  if (once_file_) {
    const auto c = once_file_->commit();
    once_file_.reset();
    route_output();
    if (!c && r) {
      report_error(c.err().msg);
      return status::failed;
    }
  }
  if (tiers_) {
    for (const auto &t : db_.take_tier_reads()) {
      const char *name = t.tier == 2 ? "1h" : t.tier == 1 ? "1m" : "finest";
      if (t.from == 0 && t.to == 0) {
        err_ << fmt::format("tiers: {} finest {} rows, the finest tier kept{}\n",
                            text::escape_for_terminal(t.view), t.rows,
                            t.why.empty() ? "" : " (" + t.why + ")");
      } else {
        err_ << fmt::format("tiers: {} {} {} rows, {} to {}{}\n", text::escape_for_terminal(t.view),
                            name, t.rows, timefmt::format_time(t.from, db_.zone()),
                            timefmt::format_time(t.to, db_.zone()),
                            t.why.empty() ? "" : " (" + t.why + ")");
      }
    }
    err_.flush();
  } else {
    (void)db_.take_tier_reads();
  }
  if (timer_) {
    err_ << fmt::format("Run Time: real {:.3f} s\n",
                        std::chrono::duration<double>(t1 - t0).count());
    err_.flush();
  }
  if (!r) {
    if (interrupted) {
      report_error(interrupted_message);
    } else {
      report_error(first_line > 0 ? locate(r.err().msg, first_line) : r.err().msg);
    }
    return status::failed;
  }
  // A window named in the SQL (t(), ago(), around(), during()) or given to a table function
  // (compare('2026-11-20 13:50', ...) as much as compare(t('...'), ...)): same question, same
  // status.
  const bool window_named = db_.take_window_named();
  const auto named = db_.take_named_window();
  if (printer_.empty_results() > 0 && (window_named || names_time_window(sql))) {
    // A table function's window that has recorded intervals: the answer is empty, not missing
    // (no spikes, no inversions in it).
    if (const auto pct = named ? recorded_pct(named->first, named->second) : std::nullopt;
        pct && *pct > 0) {
      err_ << fmt::format("rsched-sql: note: no rows; the window {} .. {} is recorded ({:.1f}% "
                          "covered)\n",
                          timefmt::format_time(named->first, db_.zone()),
                          timefmt::format_time(named->second, db_.zone()), *pct);
      err_.flush();
      return status::ok;
    }
    no_data_ = true;
    report_error("no recorded data in that window");
  } else if (auto w = db_.take_window()) {
    note_coverage(w->first, w->second);
  }
  return status::ok;
}

// How much of [a, b) recorded intervals cover (the most over several hosts), or none when that
// cannot be read.
std::optional<double> shell::recorded_pct(std::int64_t a, std::int64_t b) {
  std::optional<double> pct;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    double p = 0;
    if (const auto *d = row.empty() ? nullptr : std::get_if<double>(&row[0])) {
      p = *d;
    } else if (const auto *i = row.empty() ? nullptr : std::get_if<std::int64_t>(&row[0])) {
      p = static_cast<double>(*i);
    }
    pct = pct ? std::max(*pct, p) : p;
  };
  if (!db_.exec("SELECT coverage_pct FROM coverage(?1, ?2)", {a, b}, sink)) {
    return std::nullopt;
  }
  (void)db_.take_window_named(); // coverage() names its window: not the user's statement
  (void)db_.take_named_window();
  (void)db_.take_window();
  return pct;
}

// A window only partly covered by recorded intervals is reported on stderr (the result itself
// is unchanged): "window ... is 62.0% covered (2 gaps; see gaps(a, b))".
// Over several hosts, one line per host whose recording does not cover the window.
void shell::note_coverage(std::int64_t a, std::int64_t b) {
  struct cover {
    double pct = 100.0;
    std::int64_t gaps = 0;
    std::string host;
  };
  std::vector<cover> covers;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    if (row.size() >= 2) {
      cover c;
      if (const auto *p = std::get_if<double>(&row[0])) {
        c.pct = *p;
      } else if (const auto *i = std::get_if<std::int64_t>(&row[0])) {
        c.pct = static_cast<double>(*i);
      }
      if (const auto *g = std::get_if<std::int64_t>(&row[1])) {
        c.gaps = *g;
      }
      if (const auto *h = row.size() > 2 ? std::get_if<std::string>(&row[2]) : nullptr) {
        c.host = *h;
      }
      covers.push_back(std::move(c));
    }
  };
  const bool hosts = !db_.hosts().empty();
  if (!db_.exec(std::string("SELECT coverage_pct, gaps") + (hosts ? ", host" : "") +
                    " FROM coverage(?1, ?2)",
                {a, b}, sink)) {
    return;
  }
  for (const auto &c : covers) {
    if (c.pct >= 99.95) {
      continue;
    }
    err_ << fmt::format("rsched-sql: note: {}the window {} .. {} is {:.1f}% covered by recorded "
                        "intervals ({} gap{}; see gaps({}, {}))\n",
                        c.host.empty() ? "" : "host " + text::escape_for_terminal(c.host) + ": ",
                        timefmt::format_time(a, db_.zone()), timefmt::format_time(b, db_.zone()),
                        c.pct, c.gaps, c.gaps == 1 ? "" : "s", a, b);
  }
  err_.flush();
}

shell::status shell::query_lines(std::string_view sql, std::vector<std::string> &lines,
                                 const std::vector<query::value> &params) {
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    if (!row.empty()) {
      if (const auto *s = std::get_if<std::string>(&row.front())) {
        lines.push_back(*s);
      }
    }
  };
  auto r = db_.exec(sql, params, sink);
  if (!r) {
    report_error(r.err().msg);
    return status::failed;
  }
  return status::ok;
}

shell::status shell::open_output(const std::string &file, std::unique_ptr<safe_file> &slot) {
  if (slot) {
    (void)slot->commit(); // the previous file is closed first (its errors were the statements')
    slot.reset();
  }
  auto f = safe_file::create(file, stream_file());
  if (!f) {
    report_error(f.err().msg);
    return status::failed;
  }
  slot = std::make_unique<safe_file>(std::move(*f));
  return status::ok;
}

shell::status shell::dot_picture(const std::string &kind, const std::vector<std::string> &args) {
  if (kind != "plot" && !db_.hosts().empty()) {
    report_error(fmt::format(".{} reads one database: run rsched-sql PATH {} on that host's file "
                             "(SQL, .plot and the table functions read several hosts)",
                             kind, kind));
    return status::failed;
  }
  // Drawn as text where results go: in 256 colours on the terminal, escape-free into a file
  // (.output, .once) or a pipe; with -o FILE an SVG (HTML for .report) there.
  std::ostream *dest = &out_;
  if (once_file_) {
    dest = &once_file_->stream();
  } else if (output_file_) {
    dest = &output_file_->stream();
  }
  picture_target t;
  t.out = dest;
  t.terminal = true; // the shell always draws text (the subcommand writes SVG to a pipe)
  t.color = dest == &out_ && terminal_escape_;
  winsize ws{};
  if (t.color && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    t.rows = ws.ws_row;
    t.cols = ws.ws_col;
  } else {
    t.rows = 30;
    t.cols = 100;
  }
  std::string note;
  auto r = run_picture(db_, kind, args, t, note);
  once_file_.reset();
  if (!r) {
    report_error(r.err().msg);
    return status::failed;
  }
  if (!note.empty()) {
    err_ << text::escape_for_terminal(note) << '\n';
    err_.flush();
  }
  return status::ok;
}

shell::status shell::dot_mark(const std::vector<std::string> &args) {
  auto m = parse_mark_args(args);
  if (!m) {
    report_error(m.err().msg);
    return status::failed;
  }
  if (!db_.hosts().empty()) {
    report_error(".mark writes one database: run rsched-sql PATH mark TEXT on that host's file");
    return status::failed;
  }
  if (db_path_.empty()) {
    report_error(".mark needs a database file");
    return status::failed;
  }
  auto id = add_mark(db_path_, *m, printer_.config().zone, timefmt::realtime_now_ns());
  if (!id) {
    report_error(id.err().msg);
    return status::failed;
  }
  err_ << fmt::format("annotation {} added\n", *id);
  err_.flush();
  return status::ok;
}

shell::status shell::dot_import(const std::vector<std::string> &args) {
  constexpr const char *usage_text = "usage: .import-incidents FILE [--map FIELD=COLUMN,...]";
  std::string file;
  query::incident_import opts;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--map") {
      if (i + 1 == args.size()) {
        report_error(usage_text);
        return status::failed;
      }
      auto m = query::parse_import_map(args[++i]);
      if (!m) {
        report_error(m.err().msg);
        return status::failed;
      }
      opts.map.insert(opts.map.end(), m->begin(), m->end());
    } else if (file.empty()) {
      file = args[i];
    } else {
      report_error(usage_text);
      return status::failed;
    }
  }
  if (file.empty()) {
    report_error(usage_text);
    return status::failed;
  }
  if (!db_.hosts().empty()) {
    report_error(".import-incidents writes one database: give that host's file as DB, without "
                 "--host");
    return status::failed;
  }
  if (db_path_.empty()) {
    report_error(".import-incidents needs a database file");
    return status::failed;
  }
  auto content = read_bounded(file);
  if (!content) {
    report_error(content.err().msg);
    return status::failed;
  }
  opts.source = "import:" + file;
  opts.now_ns = timefmt::realtime_now_ns();
  auto rep = query::import_incidents(db_path_, *content, opts);
  if (!rep) {
    report_error(rep.err().msg);
    return status::failed;
  }
  // What was understood, on stderr; what was added, as a result (so it follows .mode).
  std::string how;
  for (const auto &[f, c] : rep->mapping) {
    how += fmt::format("{}{}={}", how.empty() ? "" : ", ", f, text::escape_for_terminal(c));
  }
  std::string ignored;
  for (const auto &c : rep->ignored) {
    ignored += (ignored.empty() ? "" : ", ") + text::escape_for_terminal(c);
  }
  err_ << fmt::format("{} annotations imported{} from {}{}: {}{}\n", rep->ids.size(),
                      rep->already == 0 ? "" : fmt::format(" ({} already there)", rep->already),
                      text::escape_for_terminal(file),
                      rep->recognised.empty() ? "" : " (" + rep->recognised + ")", how,
                      ignored.empty() ? "" : "; ignored columns: " + ignored);
  err_.flush();
  if (rep->ids.empty()) {
    return status::ok;
  }
  // The human modes show times, under names that say so; the data modes the stored UTC ns under
  // the column names.
  const auto &cfg = printer_.config();
  const char *times = is_human(cfg.mode) && cfg.units
                          ? "fmt_time(start_ns) AS start, fmt_time(end_ns) AS \"end\""
                          : "start_ns, end_ns";
  return run_bound(std::string("SELECT id, ") + times +
                       ", text, source, tags FROM annotations WHERE id BETWEEN ?1 AND ?2 "
                       "ORDER BY id",
                   {rep->ids.front(), rep->ids.back()});
}

shell::status shell::dot_read(const std::vector<std::string> &args) {
  if (args.size() != 1) {
    report_error("usage: .read FILE");
    return status::failed;
  }
  if (read_depth_ >= 16) {
    report_error(".read nested too deeply");
    return status::failed;
  }
  auto fd = open_script(args[0]);
  if (!fd) {
    report_error(fd.err().msg);
    return status::failed;
  }
  fd_inbuf buf(*fd);
  std::istream in(&buf);
  ++read_depth_;
  const int rc = run_script(in, args[0]);
  --read_depth_;
  return rc == exit_ok ? status::ok : status::failed;
}

shell::status shell::run_dot(std::string_view line) {
  const dot_command cmd = parse_dot_command(line);
  const auto &args = cmd.args;
  auto usage = [&](std::string_view u) {
    report_error(fmt::format("usage: {}", u));
    return status::failed;
  };
  auto on_off = [&](bool &flag, std::string_view u) {
    if (args.size() != 1 || (args[0] != "on" && args[0] != "off")) {
      return usage(u);
    }
    flag = args[0] == "on";
    return status::ok;
  };
  if (cmd.name == ".quit" || cmd.name == ".exit") {
    return status::quit;
  }
  if (cmd.name == ".pager") {
    if (args.size() == 1 && args[0] == "off") {
      pager_.reset();
    } else if (args.size() == 1 && args[0] == "on") {
      pager_ = default_pager();
      if (!pager_) {
        report_error("no pager: PAGER is empty and less is not installed (.pager COMMAND)");
        return status::failed;
      }
    } else if (!args.empty()) {
      std::string c;
      for (const auto &a : args) {
        c += (c.empty() ? "" : " ") + a;
      }
      pager_ = c;
    } else {
      out_ << (pager_ ? text::escape_for_terminal(*pager_) : std::string("off")) << '\n';
      out_.flush();
    }
    return status::ok;
  }
  if (cmd.name == ".help") {
    out_ << help_text << views_help();
    out_.flush();
    return status::ok;
  }
  if (cmd.name == ".mode") {
    const auto m = args.size() == 1 ? parse_mode(args[0]) : std::nullopt;
    if (!m) {
      return usage(".mode table|box|markdown|line|csv|json|jsonl");
    }
    printer_.config().mode = *m;
    return status::ok;
  }
  if (cmd.name == ".headers") {
    return on_off(printer_.config().headers, ".headers on|off");
  }
  if (cmd.name == ".tiers") {
    if (args.size() == 1 && (args[0] == "finest" || args[0] == "auto")) {
      db_.set_tier_routing(args[0] == "auto");
      return status::ok;
    }
    return on_off(tiers_, ".tiers on|off|finest|auto");
  }
  if (cmd.name == ".timer") {
    return on_off(timer_, ".timer on|off");
  }
  if (cmd.name == ".output") {
    if (args.size() > 1) {
      return usage(".output [FILE]");
    }
    if (args.empty() || args[0] == "stdout") {
      if (output_file_) {
        const auto c = output_file_->commit();
        output_file_.reset();
        if (!c) {
          report_error(c.err().msg);
          return status::failed;
        }
      }
      return status::ok;
    }
    return open_output(args[0], output_file_);
  }
  if (cmd.name == ".once") {
    if (args.size() != 1) {
      return usage(".once FILE");
    }
    return open_output(args[0], once_file_);
  }
  if (cmd.name == ".tz") {
    if (args.empty()) {
      out_ << printer_.config().zone.label() << '\n';
      out_.flush();
      return status::ok;
    }
    if (args.size() != 1) {
      return usage(".tz [UTC|local|ZONE]");
    }
    auto z = timefmt::zone::parse(args[0]);
    if (!z) {
      report_error(z.err().msg);
      return status::failed;
    }
    printer_.config().zone = *z;
    apply_zone(db_, *z);
    return status::ok;
  }
  if (cmd.name == ".heatmap" || cmd.name == ".plot" || cmd.name == ".report") {
    return dot_picture(cmd.name.substr(1), args);
  }
  if (cmd.name == ".mark") {
    return dot_mark(args);
  }
  if (cmd.name == ".import-incidents") {
    return dot_import(args);
  }
  if (cmd.name == ".read") {
    return dot_read(args);
  }
  if (cmd.name == ".tables") {
    if (!args.empty()) {
      return usage(".tables");
    }
    std::vector<std::string> names;
    const auto st = query_lines("SELECT name FROM " + schema_table(db_) +
                                    " WHERE type IN ('table', 'view') AND name NOT LIKE "
                                    "'sqlite\\_%' ESCAPE '\\' ORDER BY name",
                                names);
    for (const auto &n : names) {
      out_ << text::escape_for_terminal(n) << '\n';
    }
    out_.flush();
    return st;
  }
  if (cmd.name == ".schema") {
    if (args.size() > 1) {
      return usage(".schema [PATTERN]");
    }
    std::string sql = "SELECT sql FROM " + schema_table(db_) + " WHERE sql IS NOT NULL";
    std::vector<query::value> params;
    if (!args.empty()) {
      sql += " AND name LIKE ?1";
      params.emplace_back(args[0]);
    }
    sql += " ORDER BY type = 'view', tbl_name, type <> 'table', name";
    std::vector<std::string> stmts;
    const auto st = query_lines(sql, stmts, params);
    for (const auto &s : stmts) {
      // Line by line: the statement keeps its layout, any other control byte is escaped.
      std::size_t start = 0;
      for (std::size_t nl = s.find('\n'); nl != std::string::npos; nl = s.find('\n', start)) {
        out_ << text::escape_for_terminal(std::string_view(s).substr(start, nl - start)) << '\n';
        start = nl + 1;
      }
      out_ << text::escape_for_terminal(std::string_view(s).substr(start)) << ";\n";
    }
    out_.flush();
    return st;
  }
  report_error(fmt::format("unknown command '{}' (see .help)", cmd.name));
  return status::failed;
}

shell::status shell::run_command(std::string_view text) {
  return is_dot_command(text) ? run_dot(text) : run_sql(text);
}

int shell::run_script(std::istream &in, std::string_view source) {
  statement_buffer buf;
  std::string line;
  std::size_t line_no = 0;
  bool failed = false;
  for (;;) {
    const line_read got = read_line(in, line);
    if (got == line_read::end) {
      break;
    }
    ++line_no;
    if (got == line_read::too_long) {
      report_error(fmt::format("{}: line {} is longer than {} MiB (stopped reading)", source,
                               line_no, max_input_bytes >> 20));
      return exit_failure;
    }
    if (!line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    if (buf.empty() && is_dot_command(line)) {
      buf.clear();
      const auto st = run_dot(line);
      if (st == status::quit) {
        return failed ? exit_failure : exit_ok;
      }
      if (st == status::failed) {
        failed = true;
        if (bail_) {
          return exit_failure;
        }
      }
      continue;
    }
    if (buf.add_line(line, line_no)) {
      const std::size_t first = buf.first_line();
      if (run_sql(buf.take(), first) != status::ok) {
        failed = true;
        if (bail_) {
          return exit_failure;
        }
      }
    } else if (buf.empty()) {
      buf.clear(); // only blanks and comments so far
    } else if (buf.text().size() > max_input_bytes) {
      report_error(fmt::format("{}: the statement starting at line {} is longer than {} MiB "
                               "(stopped reading)",
                               source, buf.first_line(), max_input_bytes >> 20));
      return exit_failure;
    }
  }
  if (!buf.empty()) {
    const std::size_t first = buf.first_line();
    if (run_sql(buf.take(), first) != status::ok) {
      failed = true;
    }
  }
  return failed ? exit_failure : exit_ok;
}

// The views of this database, one line, wrapped at 96 columns: a view with rollups (name_1m,
// name_1h) is listed once with "*" (docs/SCHEMA.md has every column).
std::string shell::views_help() {
  std::vector<std::string> names;
  if (db_.hosts().empty()) {
    (void)query_lines("SELECT name FROM sqlite_schema WHERE type = 'view' ORDER BY name", names);
  } else {
    // Over several hosts every object is a TEMP view: list those that are views in the hosts.
    std::string sql;
    for (const auto &h : db_.hosts()) {
      sql += (sql.empty() ? "" : " UNION ") + std::string("SELECT name FROM ") + sql_ident(h) +
             ".sqlite_master WHERE type = 'view'";
    }
    (void)query_lines(sql + " ORDER BY name", names);
  }
  const auto has = [&](const std::string &n) {
    return std::binary_search(names.begin(), names.end(), n);
  };
  const auto rollup = [](const std::string &n) {
    return n.size() > 3 && (n.ends_with("_1m") || n.ends_with("_1h"));
  };
  std::string out = "Views";
  bool starred = false;
  std::size_t col = out.size();
  bool first = true;
  for (const auto &n : names) {
    if (rollup(n) && has(n.substr(0, n.size() - 3))) {
      continue;
    }
    const bool tiers = has(n + "_1m") || has(n + "_1h");
    starred = starred || tiers;
    std::string item = text::escape_for_terminal(n) + (tiers ? "*" : "");
    const std::string sep = first ? ": " : ", ";
    if (col + sep.size() + item.size() > 95) {
      out += first ? ":\n" : ",\n";
      col = 0;
    } else {
      out += sep;
      col += sep.size();
    }
    out += item;
    col += item.size();
    first = false;
  }
  if (first) {
    return "Views: none (not an rsched database?).\n";
  }
  out += ".\n";
  if (!db_.hosts().empty()) {
    out += "Each starts with a host column (the --host NAME), as do the tables; \"NAME\".view "
           "reads one host.\n";
  }
  if (starred) {
    out +=
        "*: also as NAME_1m and NAME_1h, the 1-minute and 1-hour rollups (docs/SQL.md, Tiers).\n";
  }
  return out;
}

std::vector<std::string> shell::schema_names() {
  std::vector<std::string> names;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    for (const auto &v : row) {
      if (const auto *s = std::get_if<std::string>(&v)) {
        names.push_back(*s);
      }
    }
  };
  (void)db_.exec("SELECT s.name, p.name FROM " + schema_table(db_) +
                     " AS s, pragma_table_info(s.name) AS p WHERE s.type IN ('table', 'view') "
                     "AND s.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                 sink);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<std::string> shell::function_names() {
  std::vector<std::string> names;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    if (!row.empty()) {
      if (const auto *s = std::get_if<std::string>(&row.front())) {
        names.push_back(lower_ascii(*s));
      }
    }
  };
  (void)db_.exec("SELECT name FROM pragma_function_list", sink);
  (void)db_.exec("SELECT name FROM pragma_module_list", sink);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<std::string> shell::completion_names() {
  // Both pragmas behind function_names() may be missing from an SQLite built without
  // introspection: then only the static list in completions() is offered.
  std::vector<std::string> names = schema_names();
  const auto fns = function_names();
  names.insert(names.end(), fns.begin(), fns.end());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

bool completes_file_name(std::string_view before, bool statement_start) {
  if (!statement_start || !is_dot_command(before)) {
    return false;
  }
  const auto cmd = parse_dot_command(before);
  return cmd.args.empty() && (cmd.name == ".output" || cmd.name == ".once" || cmd.name == ".read" ||
                              cmd.name == ".import-incidents");
}

std::vector<std::string> completions(std::string_view before, std::string_view word,
                                     bool statement_start, const std::vector<std::string> &names) {
  static const std::vector<std::string> keywords = {"AND",
                                                    "AS",
                                                    "ASC",
                                                    "AVG",
                                                    "BETWEEN",
                                                    "BY",
                                                    "CASE",
                                                    "COUNT",
                                                    "DESC",
                                                    "DISTINCT",
                                                    "ELSE",
                                                    "END",
                                                    "EXPLAIN",
                                                    "FROM",
                                                    "GROUP",
                                                    "HAVING",
                                                    "IN",
                                                    "IS",
                                                    "JOIN",
                                                    "LEFT",
                                                    "LIKE",
                                                    "LIMIT",
                                                    "MAX",
                                                    "MIN",
                                                    "NOT",
                                                    "NULL",
                                                    "OFFSET",
                                                    "ON",
                                                    "OR",
                                                    "ORDER",
                                                    "SELECT",
                                                    "SUM",
                                                    "THEN",
                                                    "UNION",
                                                    "USING",
                                                    "WHEN",
                                                    "WHERE",
                                                    "WITH",
                                                    "datetime",
                                                    "hist_percentile",
                                                    "ipc",
                                                    "hist_merge",
                                                    "hist_percentile_error",
                                                    "hist_error",
                                                    "hist_count",
                                                    "hist_count_above",
                                                    "hist_fraction_above",
                                                    "hist_mean",
                                                    "hist_max",
                                                    "hist_buckets",
                                                    "rate",
                                                    "t",
                                                    "ago",
                                                    "around",
                                                    "during",
                                                    "spikes",
                                                    "compare",
                                                    "coverage",
                                                    "gaps",
                                                    "blame",
                                                    "inversions",
                                                    "explain",
                                                    "bucket",
                                                    "annotation_margin",
                                                    "fmt_time",
                                                    "dur"};
  std::vector<std::string> out;
  const std::string word_lc = lower_ascii(std::string(word));
  // SQL names are case-insensitive: so is the match; the candidate keeps its spelling.
  auto offer = [&](const std::string &candidate) {
    if (candidate.size() >= word.size() &&
        lower_ascii(candidate.substr(0, word.size())) == word_lc) {
      out.push_back(candidate);
    }
  };
  const bool dot_line = statement_start && is_dot_command(std::string(before) + std::string(word));
  if (dot_line && is_blank(before)) {
    for (const auto &c : shell::dot_commands()) {
      offer(c);
    }
  } else if (dot_line) {
    const auto cmd = parse_dot_command(before);
    if (cmd.args.empty() && cmd.name == ".mode") {
      for (const char *m : {"table", "box", "markdown", "line", "csv", "json", "jsonl"}) {
        offer(m);
      }
    } else if (cmd.args.empty() && (cmd.name == ".headers" || cmd.name == ".timer")) {
      offer("on");
      offer("off");
    } else if (cmd.args.empty() && cmd.name == ".tiers") {
      for (const char *m : {"on", "off", "finest", "auto"}) {
        offer(m);
      }
    } else if (cmd.args.empty() && cmd.name == ".tz") {
      offer("UTC");
      offer("local");
    } else if (cmd.args.empty() && cmd.name == ".schema") {
      for (const auto &n : names) {
        offer(n);
      }
    }
  } else {
    for (const auto &n : names) {
      offer(n);
    }
    const bool lower_case = !word.empty() && word.front() >= 'a' && word.front() <= 'z';
    for (const auto &k : keywords) {
      offer(lower_case ? lower_ascii(k) : k);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

} // namespace rsched::sql_shell
