// Test helpers for code that talks TCP on loopback.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace trainyard::http::testing {

// A TCP socket bound to a free loopback port (not listening); sets `port`. -1 on
// failure.
inline int BindLoopback(int& port) {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (s >= 0) ::close(s);
    return -1;
  }
  port = ntohs(a.sin_port);
  return s;
}

// A loopback port nothing listens on (bound, then closed).
inline int ClosedLoopbackPort() {
  int port = 0;
  if (int s = BindLoopback(port); s >= 0) ::close(s);
  return port;
}

}  // namespace trainyard::http::testing
