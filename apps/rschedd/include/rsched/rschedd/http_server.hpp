#pragma once
// rschedd's /metrics endpoint (--metrics-listen): one event-loop thread (epoll, non-blocking
// sockets) serving GET /metrics from a metrics_board, with a deadline on every connection, so no
// client, slow, idle or hostile, can hold the endpoint for others (docs/FLEET.md, "What the
// endpoint promises"). Requests are parsed by http::parse_request (http_request.hpp).
//
// - A connection must send a complete request head within `header_timeout_ms` of being
//   accepted (however it trickles the bytes), and the next one on a kept-alive connection
//   within `keep_alive_ms` of the end of the previous response; else it is closed.
// - A head is parsed when the bytes received complete its request line or its empty line (or
//   reach `max_head`), not on every read: a head trickled a byte per segment costs linear time.
// - A head over `max_head` bytes is answered 431 (414 for the request line alone) and closed.
// - At most `max_connections` are open; a new one beyond that closes the one that has gone
//   longest without progress: waiting for a request (a fresh scraper displaces an idle or
//   trickling connection), or being answered while taking nothing of it for `write_stall_ms` (a
//   client that pipelines requests and never reads). When every open connection is being
//   answered and taking it, new ones wait in the kernel's accept queue until one closes or stalls.
// - A response is written as the client takes it, within `write_timeout_ms`, else the
//   connection is closed; other connections are served meanwhile.
// - A kept-alive connection serves at most `keep_alive_max` requests; a request with a body is
//   answered and closed (its body is never read: a scrape has none).
// The thread runs at nice 10; started before the recorder sets its own priority, it keeps the
// normal policy, so scrapes yield to recording. Recording never waits for it (the board is only
// read). Rendering a new interval's text (once per interval and format) runs on this thread.
#include "rsched/base/result.hpp"
#include "rsched/rschedd/metrics_board.hpp"
#include "rsched/rschedd/metrics_endpoint.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <thread>

namespace rsched::rschedd {

// How much a client may take of the server (the defaults are rschedd's).
struct server_limits {
  std::size_t max_connections = 256; // open at once (see above for the one beyond)
  std::size_t max_head = 8192;       // bytes of a request line and its header fields
  int header_timeout_ms = 2000;      // from accept to a complete request head
  int keep_alive_ms = 2000;          // from a response's end to the next complete request head
  int write_timeout_ms = 5000;       // to write one response
  int write_stall_ms = 1000;         // a response none of which the client took for this long
                                     // may be displaced by a new connection
  std::size_t keep_alive_max = 100;  // requests per connection
};

// GET /metrics (content negotiation: negotiate()), GET / (one line of text), HEAD of both;
// other paths 404, other methods 405.
class metrics_server {
public:
  // Binds `a` (SO_REUSEADDR, not SO_REUSEPORT: a second rschedd on the port fails here) and
  // starts the thread. A port of 0 takes any free one (port() says which).
  static result<std::unique_ptr<metrics_server>>
  start(const listen_address &a, metrics_board &board, const server_limits &lim = {});
  ~metrics_server(); // stops the thread and closes every connection
  metrics_server(const metrics_server &) = delete;
  metrics_server &operator=(const metrics_server &) = delete;
  [[nodiscard]] int port() const { return port_; }
  [[nodiscard]] const std::string &address() const { return address_; }

  struct impl;

private:
  metrics_server() = default;
  std::unique_ptr<impl> impl_;
  std::thread thread_;
  int port_ = 0;
  std::string address_;
};

} // namespace rsched::rschedd
