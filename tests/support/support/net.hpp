#pragma once
// Loopback TCP for the tests of rschedd's /metrics endpoint and of Prometheus.

namespace rsched::test {

// A TCP connection to 127.0.0.1:`port` (close it yourself), or -1 when nothing listens there.
int connect_loopback(int port);

} // namespace rsched::test
