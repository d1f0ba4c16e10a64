// rschedd's /metrics endpoint: one epoll loop (http_server.hpp).
#include "rsched/rschedd/http_server.hpp"

#include "rsched/rschedd/http_request.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <optional>
#include <string_view>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace rsched::rschedd {

namespace {

using clk = std::chrono::steady_clock;

// After a final response the server shuts its side and reads (and drops) what the client still
// sends, until it closes, for at most this long and this much: closing with unread bytes would
// reset the connection and could lose the response before the client read it.
constexpr auto linger_time = std::chrono::seconds(1);
constexpr std::size_t linger_bytes = 65536;
// A failing accept (out of file descriptors) pauses accepting for this long.
constexpr auto accept_pause = std::chrono::milliseconds(100);
// The epoll keys of the two fds that are not connections.
constexpr std::uint64_t stop_key = 0;
constexpr std::uint64_t listen_key = 1;

std::string_view reason_phrase(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "Error";
  }
}

struct response {
  int status = 200;
  std::string_view content_type = "text/plain; charset=utf-8";
  std::shared_ptr<const std::string> body;
  std::string_view extra_headers; // each ending in CRLF
};

std::shared_ptr<const std::string> text_body(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

response route(const http::request &r, metrics_board &board) {
  if (r.method != "GET" && r.method != "HEAD") {
    return {405, "text/plain; charset=utf-8", text_body("405 Method Not Allowed\n"),
            "Allow: GET, HEAD\r\n"};
  }
  if (r.path == "/metrics") {
    const openmetrics::format f = negotiate(r.accept);
    return {200, content_type(f), board.render(f).body, {}};
  }
  if (r.path == "/") {
    return {200,
            "text/plain; charset=utf-8",
            text_body("rschedd: scheduler history metrics at /metrics\n"),
            {}};
  }
  return {404, "text/plain; charset=utf-8", text_body("404 Not Found\n"), {}};
}

struct connection {
  enum class state { reading, writing, lingering };
  int fd = -1;
  state st = state::reading;
  std::uint32_t events = 0; // what epoll watches for it
  std::string in;           // received, not yet answered (at most max_head bytes)
  std::string head;         // the response being written: head, then body
  std::shared_ptr<const std::string> body;
  std::size_t sent = 0;          // bytes of head + body written
  std::size_t served = 0;        // requests answered
  std::size_t lingered = 0;      // bytes dropped while lingering
  bool close_after = false;      // the response being written is the last
  bool peer_done = false;        // the client shut its side (EOF)
  clk::time_point deadline;      // closed when it passes
  clk::time_point waiting_since; // when it started waiting for its current request
  clk::time_point progress;      // writing: when the response started or bytes last went out
  // How far `in` has been looked at for the end of a head (worth_parsing()), so that a head
  // trickled in small pieces costs linear time, not a parse of all of it per piece.
  std::size_t scanned = 0;
  std::size_t skip = 0;   // leading empty lines of `in` (the parser skips them too)
  bool started = false;   // `skip` is final: a request line starts there
  bool line_done = false; // the request line is complete (it was parsed once)
  void rescan() {
    scanned = 0;
    skip = 0;
    started = false;
    line_done = false;
  }
};

} // namespace

struct metrics_server::impl {
  metrics_board &board;
  server_limits lim;
  int listen_fd = -1;
  int epoll_fd = -1;
  int stop_fd = -1;
  std::unordered_map<std::uint64_t, connection> conns;
  std::uint64_t next_key = 2;
  std::optional<clk::time_point> accept_paused_until;
  bool accept_full = false; // accepting paused because no connection may be displaced

  impl(metrics_board &b, const server_limits &l) : board(b), lim(l) {}
  ~impl() {
    for (auto &[key, c] : conns) {
      ::close(c.fd);
    }
    for (const int fd : {listen_fd, epoll_fd, stop_fd}) {
      if (fd >= 0) {
        ::close(fd);
      }
    }
  }
  impl(const impl &) = delete;
  impl &operator=(const impl &) = delete;

  void run();
  void accept_all(clk::time_point now);
  // The connection a new one may displace, or conns.end() when none may be.
  std::unordered_map<std::uint64_t, connection>::iterator victim(clk::time_point now);
  bool make_room(clk::time_point now);
  bool worth_parsing(connection &c) const;
  void on_event(std::uint64_t key, std::uint32_t ev, clk::time_point now);
  // Moves the connection as far as it can go without blocking; false when it was closed.
  bool advance(std::uint64_t key, connection &c, clk::time_point now);
  bool read_some(connection &c);
  // 1: all written, 0: the client must take some first, -1: failed.
  static int write_some(connection &c);
  void start_response(connection &c, int status, std::string_view ctype,
                      std::shared_ptr<const std::string> body, std::string_view extra,
                      bool head_only, bool keep_alive, clk::time_point now);
  void watch(std::uint64_t key, connection &c, std::uint32_t events);
  // `abort`: with a reset, dropping what is still unsent (a client that stopped reading would
  // otherwise keep it in the kernel's memory, and would never see the close).
  void drop(std::uint64_t key, bool abort = false);
};

void metrics_server::impl::watch(std::uint64_t key, connection &c, std::uint32_t events) {
  if (c.events == events) {
    return;
  }
  epoll_event e{};
  e.events = events;
  e.data.u64 = key;
  (void)epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &e);
  c.events = events;
}

void metrics_server::impl::drop(std::uint64_t key, bool abort) {
  const auto it = conns.find(key);
  if (it != conns.end()) {
    if (abort) {
      const linger l{1, 0};
      (void)setsockopt(it->second.fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    ::close(it->second.fd); // also removes it from the epoll set
    conns.erase(it);
  }
}

std::unordered_map<std::uint64_t, connection>::iterator
metrics_server::impl::victim(clk::time_point now) {
  // Lingering ones first (they are done), then the one that has gone longest without progress:
  // waiting for a request, or being answered but taking none of it for write_stall_ms (a client
  // that pipelines requests and never reads must not hold its slot until the write deadline).
  // Never one whose answer is going out.
  const auto stall = std::chrono::milliseconds(lim.write_stall_ms);
  const auto rank = [&](const connection &c) -> std::optional<clk::time_point> {
    switch (c.st) {
    case connection::state::lingering:
      return clk::time_point::min();
    case connection::state::reading:
      return c.waiting_since;
    case connection::state::writing:
      break;
    }
    return now - c.progress >= stall ? std::optional(c.progress) : std::nullopt;
  };
  auto found = conns.end();
  std::optional<clk::time_point> best;
  for (auto it = conns.begin(); it != conns.end(); ++it) {
    const auto r = rank(it->second);
    if (r && (!best || *r < *best)) {
      found = it;
      best = r;
    }
  }
  return found;
}

bool metrics_server::impl::make_room(clk::time_point now) {
  const auto it = victim(now);
  if (it == conns.end()) {
    return false;
  }
  drop(it->first, it->second.st == connection::state::writing);
  return true;
}

void metrics_server::impl::accept_all(clk::time_point now) {
  for (int i = 0; i < 64; ++i) { // the rest on the next turn of the loop
    if (conns.size() >= lim.max_connections && !make_room(now)) {
      // Every connection is being answered and taking it: the new ones wait in the kernel's
      // accept queue (rather than be refused) until one closes or stalls (run()).
      epoll_event e{};
      e.data.u64 = listen_key;
      (void)epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
      accept_full = true;
      clk::time_point wake = clk::time_point::max();
      for (const auto &[key, c] : conns) {
        if (c.st == connection::state::writing) {
          wake = std::min(wake, c.progress + std::chrono::milliseconds(lim.write_stall_ms));
        }
      }
      accept_paused_until = wake == clk::time_point::max()
                                ? now + accept_pause // max_connections 0: nothing to wait for
                                : std::max(wake, now + std::chrono::milliseconds(1));
      return;
    }
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return;
      }
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays in the backlog: stop watching the listener for a while
        // rather than spin on it.
        epoll_event e{};
        e.data.u64 = listen_key;
        (void)epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
        accept_paused_until = now + accept_pause;
        accept_full = false;
        return;
      }
      continue; // ECONNABORTED, EINTR, EPROTO...: that one is gone, the next may be fine
    }
    const std::uint64_t key = next_key++;
    connection c;
    c.fd = fd;
    c.events = EPOLLIN;
    c.deadline = now + std::chrono::milliseconds(lim.header_timeout_ms);
    c.waiting_since = now;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = key;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      continue;
    }
    conns.emplace(key, std::move(c));
    // Its request is usually here already (a scraper sends it as soon as it is connected):
    // answered now, before another new connection can displace this one as idle.
    on_event(key, EPOLLIN, now);
  }
}

bool metrics_server::impl::read_some(connection &c) {
  std::array<char, 16384> buf{};
  for (;;) {
    const std::size_t room = lim.max_head > c.in.size() ? lim.max_head - c.in.size() : 0;
    if (room == 0) {
      return true; // the parser says 431 from here
    }
    const ssize_t n = ::recv(c.fd, buf.data(), std::min(room, buf.size()), 0);
    if (n > 0) {
      c.in.append(buf.data(), static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {
      c.peer_done = true;
      return true;
    }
    if (errno == EINTR) {
      continue;
    }
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

int metrics_server::impl::write_some(connection &c) {
  const std::size_t body_size = c.body ? c.body->size() : 0;
  const std::size_t total = c.head.size() + body_size;
  while (c.sent < total) {
    std::array<iovec, 2> iov{};
    std::size_t n_iov = 0;
    if (c.sent < c.head.size()) {
      iov[n_iov++] = {c.head.data() + c.sent, c.head.size() - c.sent};
    }
    if (body_size > 0) {
      const std::size_t off = c.sent > c.head.size() ? c.sent - c.head.size() : 0;
      // iovec's base is not const; sendmsg only reads it.
      iov[n_iov++] = {const_cast<char *>(c.body->data()) + off, body_size - off};
    }
    msghdr m{};
    m.msg_iov = iov.data();
    m.msg_iovlen = n_iov;
    const ssize_t n = ::sendmsg(c.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    }
    return -1;
  }
  return 1;
}

void metrics_server::impl::start_response(connection &c, int status, std::string_view ctype,
                                          std::shared_ptr<const std::string> body,
                                          std::string_view extra, bool head_only, bool keep_alive,
                                          clk::time_point now) {
  const std::size_t length = body ? body->size() : 0;
  c.head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}"
                       "Connection: {}\r\n\r\n",
                       status, reason_phrase(status), ctype, length, extra,
                       keep_alive ? "keep-alive" : "close");
  c.body = head_only ? nullptr : std::move(body);
  c.sent = 0;
  c.close_after = !keep_alive;
  c.st = connection::state::writing;
  c.deadline = now + std::chrono::milliseconds(lim.write_timeout_ms);
  c.progress = now;
}

bool metrics_server::impl::worth_parsing(connection &c) const {
  const std::string_view in = c.in;
  const std::size_t old = c.scanned;
  c.scanned = in.size();
  if (in.size() >= lim.max_head || c.peer_done) {
    return true; // 414 or 431; or the last word before the connection is dropped
  }
  while (!c.started && c.skip < in.size()) { // empty lines before the request line
    if (in[c.skip] == '\n') {
      ++c.skip;
    } else if (in[c.skip] == '\r' && c.skip + 1 < in.size() && in[c.skip + 1] == '\n') {
      c.skip += 2;
    } else if (in[c.skip] == '\r' && c.skip + 1 == in.size()) {
      return false; // a CR whose LF is still to come
    } else {
      c.started = true;
    }
  }
  if (!c.started) {
    return false;
  }
  // Only what arrived since the last look, and the two bytes before it: an empty line may end
  // in the new bytes and start in the old ("\n" + "\n", "\n" + "\r\n", "\n\r" + "\n").
  for (std::size_t i = in.find('\n', std::max(c.skip, old >= 2 ? old - 2 : 0));
       i != std::string_view::npos; i = in.find('\n', i + 1)) {
    if (!c.line_done) {
      c.line_done = true; // the request line: parsed once, so its errors are answered at once
      return true;
    }
    if ((i + 1 < in.size() && in[i + 1] == '\n' && i + 1 >= old) ||
        (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n' && i + 2 >= old)) {
      return true; // the empty line ending the head
    }
  }
  return false;
}

bool metrics_server::impl::advance(std::uint64_t key, connection &c, clk::time_point now) {
  for (;;) {
    switch (c.st) {
    case connection::state::reading: {
      if (!worth_parsing(c)) {
        watch(key, c, EPOLLIN);
        return true;
      }
      const http::parse_result p = http::parse_request(c.in, lim.max_head);
      if (std::holds_alternative<http::incomplete>(p)) {
        if (c.peer_done) { // it will never be complete
          drop(key);
          return false;
        }
        watch(key, c, EPOLLIN);
        return true;
      }
      if (const auto *e = std::get_if<http::error>(&p)) {
        start_response(
            c, e->status, "text/plain; charset=utf-8",
            text_body(fmt::format("{} {}: {}\n", e->status, reason_phrase(e->status), e->reason)),
            {}, false, false, now);
        c.in.clear();
        c.rescan();
        break;
      }
      const auto &r = std::get<http::request>(p);
      ++c.served;
      const bool keep_alive =
          r.keep_alive && !r.has_body && !c.peer_done && c.served < lim.keep_alive_max;
      response res = route(r, board);
      start_response(c, res.status, res.content_type, std::move(res.body), res.extra_headers,
                     r.method == "HEAD", keep_alive, now);
      c.in.erase(0, r.consumed); // the views in `r` are not used past here
      c.rescan();                // a pipelined head may be complete already
      break;
    }
    case connection::state::writing: {
      const std::size_t before = c.sent;
      const int w = write_some(c);
      if (c.sent != before) {
        c.progress = now;
      }
      if (w < 0) {
        drop(key);
        return false;
      }
      if (w == 0) {
        watch(key, c, EPOLLOUT);
        return true;
      }
      c.head.clear();
      c.body.reset();
      if (c.close_after) {
        if (c.peer_done) {
          drop(key);
          return false;
        }
        (void)::shutdown(c.fd, SHUT_WR);
        c.st = connection::state::lingering;
        c.in.clear();
        c.rescan();
        c.deadline = now + linger_time;
        watch(key, c, EPOLLIN);
        return true;
      }
      // Kept alive: the next request (maybe already here, pipelined).
      c.st = connection::state::reading;
      c.deadline = now + std::chrono::milliseconds(lim.keep_alive_ms);
      c.waiting_since = now;
      break;
    }
    case connection::state::lingering:
      watch(key, c, EPOLLIN);
      return true;
    }
  }
}

void metrics_server::impl::on_event(std::uint64_t key, std::uint32_t ev, clk::time_point now) {
  const auto it = conns.find(key);
  if (it == conns.end()) {
    return;
  }
  connection &c = it->second;
  switch (c.st) {
  case connection::state::reading:
    if (!read_some(c)) {
      drop(key);
      return;
    }
    (void)advance(key, c, now);
    return;
  case connection::state::writing:
    if ((ev & EPOLLERR) != 0) {
      drop(key);
      return;
    }
    if ((ev & (EPOLLOUT | EPOLLHUP)) != 0) {
      (void)advance(key, c, now); // a hang-up shows as a failed write
    }
    return;
  case connection::state::lingering: {
    std::array<char, 16384> buf{};
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), 0);
      if (n > 0) {
        c.lingered += static_cast<std::size_t>(n);
        if (c.lingered > linger_bytes) {
          drop(key);
          return;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      }
      drop(key); // EOF or an error: done
      return;
    }
  }
  }
}

void metrics_server::impl::run() {
  std::array<epoll_event, 64> events{};
  std::vector<std::uint64_t> expired;
  for (;;) {
    auto now = clk::now();
    std::optional<clk::time_point> next = accept_paused_until;
    for (const auto &[key, c] : conns) {
      if (!next || c.deadline < *next) {
        next = c.deadline;
      }
    }
    int timeout_ms = -1;
    if (next) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(wait, 0, 60'000));
    }
    const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      return; // cannot happen with valid fds; the destructor still joins
    }
    now = clk::now();
    for (int i = 0; i < n; ++i) {
      const auto &e = events[static_cast<std::size_t>(i)];
      if (e.data.u64 == stop_key) {
        return;
      }
      if (e.data.u64 == listen_key) {
        accept_all(now);
      } else {
        on_event(e.data.u64, e.events, now);
      }
    }
    now = clk::now();
    expired.clear();
    for (const auto &[key, c] : conns) {
      if (c.deadline <= now) {
        expired.push_back(key);
      }
    }
    for (const auto key : expired) {
      const auto it = conns.find(key);
      drop(key, it != conns.end() && it->second.st == connection::state::writing);
    }
    if (accept_full && accept_paused_until && *accept_paused_until > now &&
        (conns.size() < lim.max_connections || victim(now) != conns.end())) {
      accept_paused_until = now; // a connection closed, or one became displaceable
    }
    if (accept_paused_until && *accept_paused_until <= now) {
      accept_paused_until.reset();
      accept_full = false;
      epoll_event e{};
      e.events = EPOLLIN;
      e.data.u64 = listen_key;
      (void)epoll_ctl(epoll_fd, EPOLL_CTL_MOD, listen_fd, &e);
    }
  }
}

result<std::unique_ptr<metrics_server>>
metrics_server::start(const listen_address &a, metrics_board &board, const server_limits &lim) {
  std::unique_ptr<metrics_server> s(new metrics_server());
  s->impl_ = std::make_unique<impl>(board, lim);
  impl &m = *s->impl_;
  const auto fail = [&](std::string_view why) {
    return make_error(
        fmt::format("cannot listen on {}:{} for --metrics-listen ({})", a.host, a.port, why));
  };

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo *res = nullptr;
  const std::string port = std::to_string(a.port);
  if (const int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return fail(gai_strerror(rc));
  }
  int err = 0;
  for (const addrinfo *ai = res; ai != nullptr && m.listen_fd < 0; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: with SO_REUSEPORT a second rschedd on the same port would bind too and
    // the kernel would split the scrapes between them.
    const int yes = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    m.listen_fd = fd;
  }
  freeaddrinfo(res);
  if (m.listen_fd < 0) {
    return fail(std::strerror(err != 0 ? err : EADDRNOTAVAIL));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (getsockname(m.listen_fd, reinterpret_cast<sockaddr *>(&bound), &len) != 0) {
    return fail(std::strerror(errno));
  }
  s->port_ = bound.ss_family == AF_INET6
                 ? ntohs(reinterpret_cast<const sockaddr_in6 *>(&bound)->sin6_port)
                 : ntohs(reinterpret_cast<const sockaddr_in *>(&bound)->sin_port);
  s->address_ = a.host.find(':') != std::string::npos ? fmt::format("[{}]:{}", a.host, s->port_)
                                                      : fmt::format("{}:{}", a.host, s->port_);

  m.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  m.stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m.epoll_fd < 0 || m.stop_fd < 0) {
    return fail(std::strerror(errno));
  }
  for (const auto &[fd, key] : {std::pair<int, std::uint64_t>{m.listen_fd, listen_key},
                                std::pair<int, std::uint64_t>{m.stop_fd, stop_key}}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = key;
    if (epoll_ctl(m.epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
      return fail(std::strerror(errno));
    }
  }
  // The thread runs at nice 10 and, created before the recorder sets its own priority
  // (--recorder-nice, --rt-priority), under the normal policy: scrapes yield to recording.
  s->thread_ = std::thread([&m] {
    (void)setpriority(PRIO_PROCESS, 0, 10);
    m.run();
  });
  return s;
}

metrics_server::~metrics_server() {
  if (thread_.joinable()) {
    const std::uint64_t one = 1;
    (void)!::write(impl_->stop_fd, &one, sizeof one);
    thread_.join();
  }
}

} // namespace rsched::rschedd
