// What the client commands share: the connection to the server (Api), the common
// flags, and the small printing helpers.
//
// Thread-safety: an Api is used by one thread at a time.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cli/app.h"
#include "core/units.h"
#include "http/client.h"

namespace trainyard::cli {

using nlohmann::json;

struct Common {
  std::string server;
  std::string data_dir;
  std::string output = "text";
  std::string ca_cert;     // https: verify the server against it; empty: the system's store
  std::string token_file;  // the API token; see Api::Connect
};

// A failed call: the message to print and the exit status.
struct Failure {
  std::string message;
  int exit_code = kExitFailure;
};

class Api {
 public:
  static std::variant<Api, Failure> Connect(const Common& c) {
    std::string url = c.server;
    if (url.empty()) {
      if (const char* env = std::getenv("TRAINYARD_SERVER"); env != nullptr && *env) url = env;
    }
    if (url.empty()) {
      const std::string dir = c.data_dir.empty() ? DefaultDataDir() : c.data_dir;
      std::ifstream in(dir + "/server.url");
      std::getline(in, url);
      if (url.empty()) {
        return Failure{
            "no server: pass --server URL, set TRAINYARD_SERVER, or start one with "
            "`trainyard up` (looked for " +
            dir + "/server.url)"};
      }
    }
    // Several URLs, comma-separated: a leader and its standbys (docs/ha.md).
    std::vector<std::string> urls;
    for (size_t pos = 0; pos <= url.size();) {
      size_t comma = url.find(',', pos);
      if (comma == std::string::npos) comma = url.size();
      std::string one = url.substr(pos, comma - pos);
      pos = comma + 1;
      while (!one.empty() && one.back() == '/') one.pop_back();
      if (!one.empty()) urls.push_back(std::move(one));
    }
    if (urls.empty()) return Failure{"no server: the server URL is empty"};
    Api api(std::move(urls), c.ca_cert);
    // The API token: TRAINYARD_TOKEN, else the file --token-file names, else the one
    // `trainyard up` / the server's first start wrote to DATA_DIR/token. Never a flag
    // value (it would show in `ps`).
    if (const char* env = std::getenv("TRAINYARD_TOKEN"); env != nullptr && *env) {
      api.token_ = env;
    } else {
      const std::string file =
          !c.token_file.empty() ? c.token_file
                                : (c.data_dir.empty() ? DefaultDataDir() : c.data_dir) + "/token";
      std::ifstream in(file);
      std::getline(in, api.token_);
      if (!in && !c.token_file.empty()) {
        return Failure{"--token-file: cannot read " + c.token_file};
      }
    }
    while (!api.token_.empty() && std::isspace(static_cast<unsigned char>(api.token_.back()))) {
      api.token_.pop_back();
    }
    api.Connect(0);
    return api;
  }

  // The JSON body of a 2xx answer, or a Failure naming the problem.
  std::variant<json, Failure> Call(const std::string& method, const std::string& path,
                                   const std::string& body = "") {
    const std::string type = method == "GET" || method == "DELETE" ? ""
                             : method == "POST"                    ? "application/yaml"
                                                                   : "application/json";
    auto res = Send(method, path, body, type);
    if (auto* f = std::get_if<Failure>(&res)) return *f;
    json j = json::parse(std::get<http::Response>(res).body, nullptr, false);
    if (j.is_discarded()) return Failure{"the server's answer is not JSON"};
    return j;
  }

  // The body of a 2xx answer to GET `path` as it came (a trace, a file), or a Failure
  // as Call gives.
  std::variant<std::string, Failure> Fetch(const std::string& path) {
    auto res = Send("GET", path, "", "");
    if (auto* f = std::get_if<Failure>(&res)) return *f;
    return std::move(std::get<http::Response>(res).body);
  }

  // A 2xx answer with its headers, or a Failure as Call gives.
  std::variant<http::Response, Failure> Send(const std::string& method, const std::string& path,
                                             const std::string& body, const std::string& type) {
    auto res = client_->Send(method, path, body, type);
    // With several servers, go round them while the answers say "not here" (no
    // connection, or a standby): once round at least, and during a fail-over, when
    // the old leader is gone and the new one is not serving yet, for up to
    // kFailoverWait, pausing between rounds. Nothing reached a server in those cases, so
    // even a submission is safe to send again.
    const auto start = std::chrono::steady_clock::now();
    for (size_t hops = 1; urls_.size() > 1; ++hops) {
      if (hops >= urls_.size() && std::chrono::steady_clock::now() - start > kFailoverWait) break;
      if (!FollowLeader(res)) break;
      if (hops % urls_.size() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      res = client_->Send(method, path, body, type);
    }
    if (auto* e = std::get_if<http::Error>(&res)) {
      return Failure{"cannot reach the server at " + url_ + ": " + e->message};
    }
    auto& r = std::get<http::Response>(res);
    if (r.status / 100 != 2) return FailureOf(r);
    return std::move(r);
  }

  // How long a call keeps going round several servers none of which leads: longer
  // than a fail-over (the default --leader-timeout is 10 s; docs/ha.md).
  static constexpr std::chrono::seconds kFailoverWait{20};

 private:
  Api(std::vector<std::string> urls, std::string ca_cert)
      : urls_(std::move(urls)), ca_cert_(std::move(ca_cert)) {}

  // Talks to urls_[at] from now on.
  void Connect(size_t at) {
    at_ = at;
    url_ = urls_[at];
    http::ClientOptions options;
    options.ca_file = ca_cert_;
    options.connect_timeout_ms = 5000;
    options.read_timeout_ms = 60000;
    if (!token_.empty()) options.headers.emplace_back("Authorization", "Bearer " + token_);
    client_ = std::make_unique<http::Client>(url_, std::move(options));
  }

  // After an answer that says to try elsewhere, moves to the server to try next and
  // returns true: no connection at all (nothing was sent, so even a submission is safe
  // to send again), or a standby's 503, which names the leader (else the next URL).
  bool FollowLeader(const std::variant<http::Response, http::Error>& res) {
    if (urls_.size() < 2) return false;
    size_t next = (at_ + 1) % urls_.size();
    if (auto* e = std::get_if<http::Error>(&res)) {
      if (e->kind != http::ErrorKind::kConnection) return false;
    } else {
      const auto& r = std::get<http::Response>(res);
      if (r.status != 503) return false;
      json j = json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.value("standby", false)) return false;
      if (auto it = j.find("leader"); it != j.end() && it->is_string()) {
        std::string leader = it->get<std::string>();
        while (!leader.empty() && leader.back() == '/') leader.pop_back();
        auto named = std::find(urls_.begin(), urls_.end(), leader);
        if (named != urls_.end()) next = static_cast<size_t>(named - urls_.begin());
      }
    }
    Connect(next);
    return true;
  }
  Failure FailureOf(const http::Response& res) const {
    json j = json::parse(res.body, nullptr, false);
    std::string msg = j.is_object() && j.contains("error") && j["error"].is_string()
                          ? j["error"].get<std::string>()
                          : "HTTP " + std::to_string(res.status);
    if (res.status == 401) {
      msg += token_.empty() ? " (no token found: set TRAINYARD_TOKEN or pass --token-file)" : "";
    }
    return Failure{msg, res.status == 400 || res.status == 413 ? kExitUsage : kExitFailure};
  }

  std::vector<std::string> urls_;  // the servers to try, in order
  std::string ca_cert_;
  size_t at_ = 0;
  std::string url_;  // urls_[at_]
  std::unique_ptr<http::Client> client_;
  std::string token_;
};

inline std::string Pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

// Prints rows as aligned columns.
inline void Table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += i + 1 < r.size() ? Pad(r[i], width[i] + 2) : r[i];
    out << line << "\n";
  }
}

inline std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

inline std::string Age(int64_t since_ms) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return FormatDuration(Duration((std::max<int64_t>(0, now - since_ms) / 1000) * 1000));
}

// Runs `body` with a connected Api; prints failures as one line.
template <typename Body>
inline int WithApi(const Common& c, std::ostream& err, const std::string& cmd, Body body) {
  auto api = Api::Connect(c);
  if (auto* f = std::get_if<Failure>(&api)) {
    err << "trainyard " << cmd << ": " << f->message << "\n";
    return f->exit_code;
  }
  std::optional<Failure> failure = body(std::get<Api>(api));
  if (failure) {
    err << "trainyard " << cmd << ": " << failure->message << "\n";
    return failure->exit_code;
  }
  return kExitOk;
}

#define TY_CALL(var, expr)                                      \
  auto var##_result = (expr);                                   \
  if (auto* f = std::get_if<Failure>(&var##_result)) return *f; \
  json var = std::move(std::get<json>(var##_result))

inline void AddCommon(CLI::App* cmd, Common& c, bool output) {
  cmd->add_option("--server", c.server,
                  "Server URL (else $TRAINYARD_SERVER, else DATA_DIR/server.url)");
  cmd->add_option("--data-dir", c.data_dir, "Local cluster data dir holding server.url and token");
  cmd->add_option("--token-file", c.token_file,
                  "File holding the API token (default: $TRAINYARD_TOKEN, else DATA_DIR/token)");
  cmd->add_option("--ca-cert", c.ca_cert,
                  "PEM file of the CA (or the server certificate) to verify an https:// server "
                  "with (default: the system's CA store); see docs/tls.md")
      ->envname("TRAINYARD_CA_CERT");
  if (output) {
    cmd->add_option("-o,--output", c.output, "Output format")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
  }
}

// The commit id of the git work tree holding `path` (a file or directory), with
// "-dirty" appended when tracked files have uncommitted changes; "" outside a git tree
// or without git. Outside a work tree (no ".git" in the directory or above it, and no
// $GIT_DIR) it starts no process: `trainyard submit` stays a few milliseconds there.
// Inside one, one `git status` gives both the commit and whether it is dirty.
inline std::string GitCodeVersion(const std::string& path) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::is_directory(path, ec)
                                  ? std::filesystem::path(path)
                                  : std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (dir.string().find('\'') != std::string::npos) return "";
  if (const char* git_dir = std::getenv("GIT_DIR"); git_dir == nullptr || *git_dir == 0) {
    bool found = false;
    for (std::filesystem::path p = std::filesystem::absolute(dir, ec); !ec && !p.empty();
         p = p.parent_path()) {
      if (std::filesystem::exists(p / ".git", ec)) {
        found = true;
        break;
      }
      if (p == p.root_path()) break;
    }
    if (!found) return "";
  }
  const std::string cmd = "git -C '" + dir.string() +
                          "' status --porcelain=v2 --branch --untracked-files=no 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0 && out.size() < (1 << 20)) out.append(buf, n);
  if (pclose(p) != 0) return "";
  std::string head;
  bool dirty = false;
  for (size_t pos = 0; pos < out.size();) {
    size_t eol = out.find('\n', pos);
    if (eol == std::string::npos) eol = out.size();
    const std::string_view line(out.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.starts_with("# branch.oid ")) {
      head = std::string(line.substr(13));
    } else if (!line.empty() && line[0] != '#') {
      dirty = true;  // a changed tracked file
    }
  }
  if (head.size() < 7 || head.find_first_not_of("0123456789abcdef") != std::string::npos) return "";
  return dirty ? head + "-dirty" : head;
}

inline bool Terminal(const std::string& state) {
  return state == "Succeeded" || state == "Failed" || state == "Cancelled";
}

}  // namespace trainyard::cli
