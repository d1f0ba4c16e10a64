#pragma once
// Loopback TCP for the tests of rschedd's /metrics endpoint and of Prometheus.

namespace rsched::test {

// A TCP connection to 127.0.0.1:`port` (close it yourself), or -1 when nothing listens there.
// `nonblocking`: a non-blocking socket whose connection may still be under way (-1 only when the
// connect fails at once).
int connect_loopback(int port, bool nonblocking = false);

} // namespace rsched::test
