#include "agent/data_cache.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dataset.h"
#include "core/units.h"
#include "data/manifest.h"
#include "data/stage.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string HexOf(const std::string& version) { return version.substr(version.find(':') + 1); }

}  // namespace

std::string DataCache::DirOf(const std::string& version) const {
  return opt_.root + "/" + HexOf(version);
}

Result<std::unique_ptr<DataCache>> DataCache::Open(DataCacheOptions options) {
  if (options.budget_bytes <= 0) {
    return InvalidArgument("dataset cache: its size must be > 0, got " +
                           std::to_string(options.budget_bytes));
  }
  std::error_code ec;
  fs::create_directories(options.root, ec);
  if (!fs::is_directory(options.root, ec)) {
    return FailedPrecondition("dataset cache: cannot create " + options.root);
  }
  std::unique_ptr<DataCache> cache(new DataCache(std::move(options)));
  const std::string& root = cache->opt_.root;
  std::vector<fs::path> listed;
  for (const auto& e : fs::directory_iterator(root, ec)) listed.push_back(e.path());
  for (const fs::path& p : listed) {
    const std::string name = p.filename().string();
    if (name.ends_with(".partial")) {
      data::RemoveStaged(p.string());  // an earlier agent's staging, cut short
      continue;
    }
    if (name.ends_with(".json")) continue;
    const std::string version = "sha256:" + name;
    std::ifstream in(root + "/" + name + ".json");
    std::stringstream text;
    text << in.rdbuf();
    const auto meta = nlohmann::json::parse(text.str(), nullptr, false);
    if (!IsContentVersion(version) || !fs::is_directory(p, ec) || !meta.is_object() ||
        !meta.contains("bytes") || !meta["bytes"].is_number_integer()) {
      data::RemoveStaged(p.string());  // not something this cache made whole
      fs::remove(root + "/" + name + ".json", ec);
      continue;
    }
    auto entry = std::make_unique<Entry>();
    entry->status.dataset = meta.value("dataset", "");
    entry->status.version = version;
    entry->status.state = protocol::DatasetState::kReady;
    entry->status.bytes_total = meta["bytes"].get<int64_t>();
    entry->done = entry->status.bytes_total;
    entry->last_used = Clock::now();
    cache->entries_[version] = std::move(entry);
  }
  return cache;
}

DataCache::~DataCache() {
  stopping_ = true;
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void DataCache::Stage(const protocol::TaskData& d, const ManifestSource& manifests) {
  std::lock_guard lk(mu_);
  auto& slot = entries_[d.version];
  if (slot && slot->status.state == protocol::DatasetState::kReady) {
    slot->pinned_until = std::max(slot->pinned_until, Clock::now() + opt_.pin);
    return;
  }
  if (slot && slot->status.state == protocol::DatasetState::kStaging) return;
  slot = std::make_unique<Entry>();
  slot->status.dataset = d.dataset;
  slot->status.version = d.version;
  slot->status.state = protocol::DatasetState::kStaging;
  slot->started = Clock::now();
  threads_.emplace_back(&DataCache::Run, this, d.version, d, manifests);
}

void DataCache::Run(std::string version, protocol::TaskData d, ManifestSource manifests) {
  auto fail = [&](const Status& s) {
    if (opt_.log) opt_.log("datasets: staging failed: " + s.message());
    std::lock_guard lk(mu_);
    Entry& e = *entries_.at(version);
    e.status.state = protocol::DatasetState::kFailed;
    e.status.error = s.message();
  };
  const std::string what = "dataset " + d.dataset + " " + version;
  Result<std::string> text = manifests(version);
  if (!text.ok()) {
    return fail(Status(text.status().code(),
                       what + ": cannot get its manifest: " + text.status().message()));
  }
  Result<data::Manifest> m = data::ParseManifest(*text);
  if (!m.ok()) return fail(InvalidArgument(what + ": its manifest: " + m.status().message()));
  if (m->Version() != version) {
    return fail(DataLoss(what + ": the manifest the server gave is of " + m->Version()));
  }
  Entry* entry = nullptr;
  {
    std::lock_guard lk(mu_);
    entry = entries_.at(version).get();
    entry->status.bytes_total = m->total_bytes;
    if (Status room = MakeRoomLocked(version, m->total_bytes); !room.ok()) {
      entry->status.state = protocol::DatasetState::kFailed;
      entry->status.error = room.message();
      return;
    }
  }
  Result<std::unique_ptr<data::Fetcher>> fetcher = data::OpenFetcher(d.source);
  if (!fetcher.ok()) {
    return fail(Status(fetcher.status().code(),
                       what + " on node " + opt_.node + ": " + fetcher.status().message()));
  }
  data::StageOptions so;
  so.threads = opt_.threads;
  so.cancel = &stopping_;
  so.progress = [entry](int64_t n) { entry->done += n; };
  const std::string dir = DirOf(version);
  data::RemoveStaged(dir);  // a copy whose metadata was lost
  Status s = data::StageVersion(*m, **fetcher, dir, so);
  if (s.ok()) {
    std::ofstream meta(dir + ".json", std::ios::trunc);
    meta << nlohmann::json{{"dataset", d.dataset},
                           {"version", version},
                           {"bytes", m->total_bytes},
                           {"files", m->entries.size()}}
                .dump()
         << "\n";
    meta.close();
    if (!meta) s = FailedPrecondition("cannot write " + dir + ".json");
  }
  if (!s.ok()) {
    data::RemoveStaged(dir);
    return fail(Status(s.code(), what + " on node " + opt_.node + ": " + s.message()));
  }
  if (opt_.log) {
    const double secs = std::chrono::duration<double>(Clock::now() - entry->started).count();
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.1f s, %.0f MB/s", secs,
                  secs > 0 ? static_cast<double>(m->total_bytes) / secs / 1e6 : 0.0);
    opt_.log("datasets: staged " + d.dataset + " " + version + " (" +
             std::to_string(m->entries.size()) + " files, " + FormatSize(m->total_bytes) + ") in " +
             rate);
  }
  std::lock_guard lk(mu_);
  entry->status.state = protocol::DatasetState::kReady;
  entry->status.error.clear();
  entry->done = m->total_bytes;
  entry->last_used = Clock::now();
  entry->pinned_until = entry->last_used + opt_.pin;
}

Status DataCache::MakeRoomLocked(const std::string& version, int64_t bytes) {
  const std::string what = "dataset " + entries_.at(version)->status.dataset + " " + version;
  if (bytes > opt_.budget_bytes) {
    return ResourceExhausted(
        what + " is " + FormatSize(bytes) + ", more than node " + opt_.node +
        "'s dataset cache holds (" + FormatSize(opt_.budget_bytes) +
        ", the agent's --data-cache-size); use stage: none, or a larger cache");
  }
  const auto now = Clock::now();
  for (;;) {
    int64_t used = 0;
    Entry* victim = nullptr;
    for (auto& [v, e] : entries_) {
      if (v == version || e->status.state == protocol::DatasetState::kFailed) continue;
      used += e->status.bytes_total;
      const bool evictable = e->status.state == protocol::DatasetState::kReady &&
                             e->status.in_use == 0 && e->pinned_until <= now;
      if (evictable && (victim == nullptr || e->last_used < victim->last_used)) victim = e.get();
    }
    if (used + bytes <= opt_.budget_bytes) return Status::Ok();
    if (victim == nullptr) {
      return ResourceExhausted(what + " needs " + FormatSize(bytes) + " in node " + opt_.node +
                               "'s dataset cache (" + FormatSize(opt_.budget_bytes) + "), and " +
                               FormatSize(used) +
                               " of it are versions in use by ranks, being staged, or staged "
                               "for starts to come; it is staged once they are done");
    }
    const std::string evicted = victim->status.version;
    if (opt_.log) {
      opt_.log("datasets: evicted " + victim->status.dataset + " " + evicted + " (" +
               FormatSize(victim->status.bytes_total) + ", least recently used) to make room");
    }
    data::RemoveStaged(DirOf(evicted));
    std::error_code ec;
    fs::remove(DirOf(evicted) + ".json", ec);
    entries_.erase(evicted);
  }
}

Result<std::string> DataCache::Acquire(const std::string& version) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(version);
  if (it == entries_.end() || it->second->status.state != protocol::DatasetState::kReady) {
    const std::string state =
        it == entries_.end()
            ? "not staged"
            : std::string(protocol::DatasetStateName(it->second->status.state)) +
                  (it->second->status.error.empty() ? "" : ": " + it->second->status.error);
    return FailedPrecondition("dataset version " + version + " is not ready on node " + opt_.node +
                              " (" + state + ")");
  }
  ++it->second->status.in_use;
  it->second->last_used = Clock::now();
  return DirOf(version);
}

void DataCache::Release(const std::string& version) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(version);
  if (it == entries_.end()) return;
  it->second->status.in_use = std::max(0, it->second->status.in_use - 1);
  it->second->last_used = Clock::now();
}

std::vector<protocol::DatasetStatus> DataCache::Statuses() const {
  std::lock_guard lk(mu_);
  std::vector<protocol::DatasetStatus> out;
  const auto now = Clock::now();
  for (const auto& [v, e] : entries_) {
    protocol::DatasetStatus s = e->status;
    s.bytes_done = std::min(e->done.load(), std::max<int64_t>(s.bytes_total, 0));
    if (s.state == protocol::DatasetState::kStaging) {
      const double secs = std::chrono::duration<double>(now - e->started).count();
      s.bytes_per_s = secs > 0 ? static_cast<double>(s.bytes_done) / secs : 0;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trainyard::agent
