// Loopback TCP (net.hpp).
#include "support/net.hpp"

#include <sys/socket.h>

#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <netinet/in.h>
#include <unistd.h>

namespace rsched::test {

int connect_loopback(int port, bool nonblocking) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) {
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 &&
      !(nonblocking && errno == EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

} // namespace rsched::test
