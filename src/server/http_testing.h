// For tests: serves an httplib::Server on 127.0.0.1, on a port the kernel picks, from
// a thread of its own.
//
// Thread-safety: Start and Stop from the test's thread.
#pragma once

#include <httplib.h>

#include <chrono>
#include <thread>

namespace trainyard::server {

class LoopbackServer {
 public:
  // Binds and starts serving; returns the port (<= 0 when binding failed).
  int Start(httplib::Server& http) {
    http_ = &http;
    const int port = http.bind_to_any_port("127.0.0.1");
    if (port <= 0) return port;
    thread_ = std::thread([&http] { http.listen_after_bind(); });
    // A stop() before the thread starts listening would be lost and join would hang.
    while (!http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return port;
  }
  void Stop() {
    if (http_ != nullptr) http_->stop();
    if (thread_.joinable()) thread_.join();
  }
  ~LoopbackServer() { Stop(); }

 private:
  httplib::Server* http_ = nullptr;
  std::thread thread_;
};

}  // namespace trainyard::server
