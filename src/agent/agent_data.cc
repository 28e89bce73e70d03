// The datasets a task reads (docs/datasets.md): where each is on this node, and the
// node's cache of staged versions.
#include <httplib.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "core/job_spec.h"
#include "core/names.h"
#include "core/units.h"
#include "http/tls.h"

namespace trainyard::agent {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

void Agent::OpenDataCache() {
  DataCacheOptions o;
  o.root = options_.data_cache_dir.empty() ? (fs::absolute(options_.data_dir) / "datasets").string()
                                           : options_.data_cache_dir;
  o.node = options_.node_name;
  o.budget_bytes = options_.data_cache_bytes;
  o.log = options_.log;
  if (o.budget_bytes <= 0) {
    std::error_code ec;
    fs::create_directories(o.root, ec);
    struct statvfs vfs {};
    if (statvfs(o.root.c_str(), &vfs) == 0) {
      o.budget_bytes = static_cast<int64_t>(static_cast<double>(vfs.f_bavail) *
                                            static_cast<double>(vfs.f_frsize) * 0.9);
    }
  }
  auto cache = DataCache::Open(o);
  if (!cache.ok()) {
    data_cache_problem_ = cache.status().message();
    Log("datasets: no cache, jobs' stage: local data fails on this node (" + data_cache_problem_ +
        ")");
    return;
  }
  data_cache_ = std::move(*cache);
  Log("datasets: cache in " + o.root + ", at most " + FormatSize(o.budget_bytes) +
      " (--data-cache-size)");
}

void Agent::StageData(const std::vector<protocol::TaskData>& data) {
  for (const protocol::TaskData& d : data) {
    if (!d.stage_local) continue;
    if (!data_cache_) {
      Log("datasets: cannot stage " + d.dataset + " " + d.version + ": " + data_cache_problem_);
      continue;
    }
    data_cache_->Stage(d, [this](const std::string& v) { return FetchManifest(v); });
  }
}

Result<std::string> Agent::FetchManifest(const std::string& version) {
  auto client = MakeClient(servers_[server_.load()], false);
  client->set_read_timeout(std::chrono::seconds(60));  // a manifest may be megabytes
  httplib::Headers headers = {{"Authorization", "Bearer " + options_.join_token}};
  const std::string body = ordered_json{{"version", version}}.dump();
  auto res = client->Post("/api/v1/agent/manifest", headers, body, "application/json");
  if (!res)
    return Unavailable("no answer from the server (" + http::DescribeError(res, *client) + ")");
  const json reply = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !reply.is_object() || !reply.contains("manifest") ||
      !reply["manifest"].is_string()) {
    const std::string why =
        reply.is_object() && reply.contains("error") && reply["error"].is_string()
            ? reply["error"].get<std::string>()
            : "HTTP " + std::to_string(res->status);
    return Unavailable("the server did not give the manifest: " + why);
  }
  return reply["manifest"].get<std::string>();
}

void Agent::ReleaseData(Task& t) {
  if (data_cache_) {
    for (const std::string& v : t.data_held) data_cache_->Release(v);
  }
  t.data_held.clear();
}

Status Agent::PrepareData(const TaskStart& spec, Task& t, LaunchSpec& launch) {
  const std::string& node = options_.node_name;
  t.data_paths.clear();
  for (const protocol::TaskData& d : spec.data) {
    const std::string what = "dataset " + d.dataset + " " + d.version;
    std::string path;
    if (d.stage_local) {
      if (!data_cache_) {
        return FailedPrecondition(what + ": stage: local, and node " + node +
                                  " has no dataset cache: " + data_cache_problem_);
      }
      TY_ASSIGN_OR_RETURN(path, data_cache_->Acquire(d.version));
      t.data_held.push_back(d.version);
    } else {
      TY_ASSIGN_OR_RETURN(path, ResolvePath(d.source, fs::current_path().string()));
      if (!options_.allowed_dirs.empty()) {
        TY_RETURN_IF_ERROR(
            CheckAllowedPath(what + " source", d.source, path, options_.allowed_dirs));
      }
      std::error_code ec;
      if (!fs::is_directory(path, ec)) {
        return FailedPrecondition(what + ": its source " + QuoteForMessage(d.source) +
                                  " is not a directory on node " + node +
                                  " (is the shared file system mounted there?)");
      }
    }
    t.data_paths.push_back(path);
    launch.env[DataEnvName(d.dataset)] = path;
  }
  return Status::Ok();
}

}  // namespace trainyard::agent
