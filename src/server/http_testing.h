// For tests: serves an http::Server on 127.0.0.1, on a port the kernel picks, from a
// thread of its own.
//
// Thread-safety: Start and Stop from the test's thread.
#pragma once

#include <chrono>
#include <thread>

#include "http/server.h"

namespace trainyard::server {

class LoopbackServer {
 public:
  // Binds and starts serving; returns the port (<= 0 when binding failed).
  int Start(http::Server& http) {
    http_ = &http;
    const int port = http.BindToAnyPort("127.0.0.1");
    if (port <= 0) return port;
    thread_ = std::thread([&http] { http.Serve(); });
    while (!http.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return port;
  }
  void Stop() {
    if (http_ != nullptr) http_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  ~LoopbackServer() { Stop(); }

 private:
  http::Server* http_ = nullptr;
  std::thread thread_;
};

}  // namespace trainyard::server
