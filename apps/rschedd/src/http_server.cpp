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
  void make_room();
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
  void drop(std::uint64_t key);
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

void metrics_server::impl::drop(std::uint64_t key) {
  const auto it = conns.find(key);
  if (it != conns.end()) {
    ::close(it->second.fd); // also removes it from the epoll set
    conns.erase(it);
  }
}

void metrics_server::impl::make_room() {
  // The connection that has waited longest for a request (lingering ones first: they are done);
  // never one being answered.
  const auto rank = [](const connection &c) {
    return c.st == connection::state::lingering ? clk::time_point::min() : c.waiting_since;
  };
  auto victim = conns.end();
  for (auto it = conns.begin(); it != conns.end(); ++it) {
    if (it->second.st != connection::state::writing &&
        (victim == conns.end() || rank(it->second) < rank(victim->second))) {
      victim = it;
    }
  }
  if (victim != conns.end()) {
    drop(victim->first);
  }
}

void metrics_server::impl::accept_all(clk::time_point now) {
  for (int i = 0; i < 64; ++i) { // the rest on the next turn of the loop
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
        return;
      }
      continue; // ECONNABORTED, EINTR, EPROTO...: that one is gone, the next may be fine
    }
    if (conns.size() >= lim.max_connections) {
      make_room();
      if (conns.size() >= lim.max_connections) { // every one is being answered
        ::close(fd);
        continue;
      }
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
}

bool metrics_server::impl::advance(std::uint64_t key, connection &c, clk::time_point now) {
  for (;;) {
    switch (c.st) {
    case connection::state::reading: {
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
      break;
    }
    case connection::state::writing: {
      const int w = write_some(c);
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
      drop(key);
    }
    if (accept_paused_until && *accept_paused_until <= now) {
      accept_paused_until.reset();
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
