#include "server/alerting.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "http/tls.h"
#include "monitor/webhook.h"
#include "server/files.h"
#include "track/mfu.h"

namespace trainyard::server {
namespace {

using monitor::Labels;
using nlohmann::json;

constexpr size_t kMaxEvents = 1000;
// A rank's step time older than this is not current: it takes no part in medians.
constexpr Duration kRankFresh = std::chrono::seconds(60);
// How many of a rank's latest step times its straggler ratio is the median of: a real
// straggler is slow step after step, a busy host makes single steps slow.
constexpr size_t kRankStepWindow = 15;
// Pending-time medians need this many admitted jobs, and are at least this long.
constexpr size_t kMinAdmitted = 5;
constexpr double kMinPendingMedianSeconds = 60;
constexpr size_t kAdmittedKept = 50;

// The signals derived from a Running job's attempt: they mean nothing once the attempt
// ends, and an alert on one (a straggler rank on a node the job has left) must resolve
// rather than wait for the series to go stale.
bool DerivedJobSignal(const std::string& signal) {
  return signal == "job.gpu_util" || signal == "job.step_time_s" || signal == "job.mfu" ||
         signal == "job.tokens_per_s" || signal == "job.data_wait_s" ||
         signal == "job.rank_step_time_ratio" || signal == "job.checkpoint_age_ratio" ||
         signal == "job.progress_age_s";
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The GPUs rank `rank` of a job sees: rank r is local rank r % P of replica r / P;
// with P dividing the replica's G GPUs it sees its own G / P of them, else all.
std::vector<int> RankGpus(const Attempt& a, int32_t procs, int32_t rank, std::string* node) {
  const size_t replica = static_cast<size_t>(rank / std::max(procs, 1));
  if (replica >= a.nodes.size()) return {};
  *node = a.nodes[replica];
  const std::vector<int> gpus = replica < a.gpus.size() ? a.gpus[replica] : std::vector<int>{};
  const int32_t p = std::max(procs, 1);
  if (p == 1 || gpus.empty() || gpus.size() % static_cast<size_t>(p) != 0) return gpus;
  const size_t per = gpus.size() / static_cast<size_t>(p);
  const size_t first = static_cast<size_t>(rank % p) * per;
  return std::vector<int>(gpus.begin() + static_cast<std::ptrdiff_t>(first),
                          gpus.begin() + static_cast<std::ptrdiff_t>(first + per));
}

// ---- persisted state --------------------------------------------------------------

json ValueJson(double v) {
  if (std::isfinite(v)) return v;
  return monitor::FormatValue(v);  // "NaN", "+Inf", "-Inf"
}

double ValueOf(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "NaN") return std::nan("");
    if (s == "+Inf") return INFINITY;
    if (s == "-Inf") return -INFINITY;
  }
  throw std::runtime_error("a value must be a number, \"NaN\", \"+Inf\" or \"-Inf\"");
}

int64_t Ms(Timestamp t) { return t.time_since_epoch().count(); }
Timestamp FromMs(const json& j) { return Timestamp(Duration(j.get<int64_t>())); }

json AlertJson(const monitor::Alert& a) {
  json j = {{"rule", a.rule},
            {"fingerprint", a.fingerprint},
            {"labels", a.labels},
            {"annotations", a.annotations},
            {"state", std::string(monitor::AlertStateName(a.state))},
            {"active_at_ms", Ms(a.active_at)},
            {"starts_at_ms", Ms(a.starts_at)},
            {"ends_at_ms", Ms(a.ends_at)},
            {"value", ValueJson(a.value)}};
  if (a.keep_firing_since) j["keep_firing_since_ms"] = Ms(*a.keep_firing_since);
  return j;
}

monitor::Alert AlertOf(const json& j) {
  monitor::Alert a;
  a.rule = j.at("rule").get<std::string>();
  a.fingerprint = j.at("fingerprint").get<std::string>();
  a.labels = j.at("labels").get<Labels>();
  a.annotations = j.at("annotations").get<Labels>();
  const std::string state = j.at("state").get<std::string>();
  a.state = state == "pending"  ? monitor::AlertState::kPending
            : state == "firing" ? monitor::AlertState::kFiring
                                : monitor::AlertState::kResolved;
  a.active_at = FromMs(j.at("active_at_ms"));
  a.starts_at = FromMs(j.at("starts_at_ms"));
  a.ends_at = FromMs(j.at("ends_at_ms"));
  if (j.contains("keep_firing_since_ms")) a.keep_firing_since = FromMs(j["keep_firing_since_ms"]);
  a.value = ValueOf(j.at("value"));
  return a;
}

monitor::ActionKind ActionKindOf(const std::string& name) {
  for (auto k :
       {monitor::ActionKind::kNotify, monitor::ActionKind::kCordonNode,
        monitor::ActionKind::kRequeueExcludingNode, monitor::ActionKind::kRequestCheckpoint}) {
    if (monitor::ActionKindName(k) == name) return k;
  }
  throw std::runtime_error("unknown action kind \"" + name + "\"");
}

}  // namespace

Alerting::Alerting(Cluster* cluster, const Clock* clock, AlertingOptions options)
    : cluster_(cluster),
      clock_(clock),
      opt_(std::move(options)),
      rules_(opt_.rules),
      signals_(opt_.signals),
      engine_(opt_.rules, opt_.engine) {}

Result<std::unique_ptr<Alerting>> Alerting::Open(Cluster* cluster, const Clock* clock,
                                                 AlertingOptions options) {
  for (const std::string& url : options.webhooks) {
    if (!url.starts_with("http://") && !url.starts_with("https://")) {
      return InvalidArgument("--alert-webhook: expected an http:// or https:// URL, got " + url);
    }
  }
  std::unique_ptr<Alerting> a(new Alerting(cluster, clock, std::move(options)));
  TY_RETURN_IF_ERROR(a->Load());
  if (!a->opt_.webhooks.empty()) a->hook_thread_ = std::thread([p = a.get()] { p->WebhookLoop(); });
  return a;
}

Alerting::~Alerting() {
  {
    std::lock_guard lk(hook_mu_);
    stopping_ = true;
  }
  hook_cv_.notify_all();
  if (hook_thread_.joinable()) hook_thread_.join();
}

Status Alerting::Load() {
  if (opt_.state_path.empty()) return Status::Ok();
  std::ifstream in(opt_.state_path);
  if (!in) return Status::Ok();  // first start
  std::stringstream text;
  text << in.rdbuf();
  try {
    const json j = json::parse(text.str());
    monitor::EngineState st;
    for (const json& a : j.at("alerts")) st.alerts.push_back(AlertOf(a));
    for (const json& s : j.at("seen")) {
      st.seen.push_back({s.at("rule").get<std::string>(), s.at("labels").get<Labels>(),
                         FromMs(s.at("last_sample_ms"))});
    }
    for (const json& r : j.at("recent_actions")) {
      st.recent_actions.push_back(
          {ActionKindOf(r.at("kind").get<std::string>()), FromMs(r.at("at_ms"))});
    }
    st.cordoned_nodes = j.at("cordoned_nodes").get<std::vector<std::string>>();
    engine_.ImportState(st);
    std::lock_guard lk(mu_);
    alerts_ = st.alerts;
    for (const json& e : j.value("events", json::array())) {
      events_.push_back({FromMs(e.at("at_ms")), e.at("kind").get<std::string>(),
                         e.at("rule").get<std::string>(), e.at("fingerprint").get<std::string>(),
                         e.at("labels").get<Labels>(), e.at("detail").get<std::string>()});
    }
  } catch (const std::exception& e) {
    return InvalidArgument(opt_.state_path + ": not a Trainyard alert state file (" + e.what() +
                           "); move it away to start with no alerts");
  }
  return Status::Ok();
}

Status Alerting::Save() {
  if (opt_.state_path.empty()) return Status::Ok();
  const monitor::EngineState st = engine_.ExportState();
  json j;
  j["alerts"] = json::array();
  for (const monitor::Alert& a : st.alerts) j["alerts"].push_back(AlertJson(a));
  j["seen"] = json::array();
  for (const monitor::SeenSeries& s : st.seen) {
    j["seen"].push_back(
        {{"rule", s.rule}, {"labels", s.labels}, {"last_sample_ms", Ms(s.last_sample)}});
  }
  j["recent_actions"] = json::array();
  for (const monitor::ActionRecord& r : st.recent_actions) {
    j["recent_actions"].push_back(
        {{"kind", std::string(monitor::ActionKindName(r.kind))}, {"at_ms", Ms(r.at)}});
  }
  j["cordoned_nodes"] = st.cordoned_nodes;
  j["events"] = json::array();
  {
    std::lock_guard lk(mu_);
    for (const AlertEvent& e : events_) {
      j["events"].push_back({{"at_ms", Ms(e.at)},
                             {"kind", e.kind},
                             {"rule", e.rule},
                             {"fingerprint", e.fingerprint},
                             {"labels", e.labels},
                             {"detail", e.detail}});
    }
  }
  return WriteFileAtomically(opt_.state_path, j.dump());
}

// ---- observing ------------------------------------------------------------------------

Alerting::JobStat* Alerting::JobLocked(JobId job) {
  auto it = jobs_.find(job);
  if (it != jobs_.end()) return &it->second;
  return nullptr;
}

void Alerting::ObserveHeartbeat(const Heartbeat& hb) {
  const Timestamp now = clock_->Now();
  for (const GpuTelemetry& g : hb.gpus) {
    const Labels l = {{"node", hb.node}, {"gpu", std::to_string(g.index)}};
    if (g.util_pct) signals_.Add("gpu.util", l, now, *g.util_pct);
    if (g.temp_c) signals_.Add("gpu.temp_c", l, now, *g.temp_c);
    if (g.throttled) signals_.Add("gpu.throttled", l, now, *g.throttled ? 1 : 0);
    if (g.xid_count) signals_.Add("gpu.xid_count", l, now, *g.xid_count);
    if (g.ecc_uncorrectable) signals_.Add("gpu.ecc_uncorrectable", l, now, *g.ecc_uncorrectable);
  }
  for (const LinkTelemetry& k : hb.links) {
    const Labels l = {{"node", hb.node}, {"link", k.name}};
    signals_.Add("link.down", l, now, k.up ? 0 : 1);
    signals_.Add("link.errors", l, now, k.errors);
  }
  for (const DiskTelemetry& d : hb.disks) {
    if (d.total_bytes <= 0) continue;
    signals_.Add("node.disk_free_ratio", {{"node", hb.node}, {"path", d.path}}, now,
                 d.free_bytes / d.total_bytes);
  }
}

void Alerting::ObserveMetrics(JobId job, const std::vector<track::SeriesAppend>& appends,
                              const std::map<std::string, std::string>& params) {
  if (appends.empty() && params.empty()) return;
  const Timestamp now = clock_->Now();
  Labels labels;
  {
    std::lock_guard lk(mu_);
    if (JobStat* s = JobLocked(job)) labels = s->labels;
  }
  if (labels.empty()) {
    // First metrics of a job this process has not evaluated yet.
    auto v = cluster_->GetJob(job);
    if (!v.ok()) return;
    labels = {{"job_id", std::to_string(job)},
              {"tenant", v->job.spec.tenant},
              {"queue", v->job.spec.queue}};
  }
  // A point's own time when it is plausible (the job's clock), else arrival.
  auto time_of = [&](const track::Point& p) {
    const Timestamp t{Duration(p.time_ms)};
    return p.time_ms > 0 && t <= now + std::chrono::minutes(1) && t >= now - std::chrono::hours(1)
               ? t
               : now;
  };
  std::lock_guard lk(mu_);
  JobStat& s = jobs_[job];
  s.labels = labels;
  for (const track::SeriesAppend& a : appends) {
    if (s.lowest_rank < 0 || a.rank < s.lowest_rank) s.lowest_rank = a.rank;
  }
  for (const auto& [key, value] : params) {
    if (key == "precision" || key == "dtype") {
      s.precision = value;
      continue;
    }
    if (key != "model_flops_per_token" && key != "num_params") continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0) continue;
    (key == "num_params" ? s.num_params : s.model_flops_per_token) = v;
  }
  for (const track::SeriesAppend& a : appends) {
    if (a.points.empty()) continue;
    const int32_t rank = a.rank;
    RankStat& r = s.ranks[rank];
    for (const track::Point& p : a.points) {
      if (p.step > s.last_step) {
        s.last_step = p.step;
        s.progress_at = now;
      }
    }
    const track::Point& last = a.points.back();
    if (a.key == "step_time_s") {
      for (const track::Point& p : a.points) {
        if (!std::isfinite(p.value)) continue;
        r.recent.push_back(p.value);
        if (r.recent.size() > kRankStepWindow) r.recent.pop_front();
      }
      if (!r.recent.empty()) {
        r.step_time = Median(std::vector<double>(r.recent.begin(), r.recent.end()));
      }
      r.at = now;
    } else if (a.key == "tokens_per_s") {
      r.tokens = last.value;
    } else if (a.key == "data_wait_s") {
      r.data_wait = last.value;
    } else if ((a.key == "model_flops_per_token" || a.key == "num_params") &&
               std::isfinite(last.value) && last.value > 0) {
      (a.key == "num_params" ? s.num_params : s.model_flops_per_token) = last.value;
    }
    if (rank != s.lowest_rank) continue;
    const char* signal = a.key == "loss"                 ? "job.loss"
                         : a.key == "grad_norm"          ? "job.grad_norm"
                         : a.key == "lr"                 ? "job.lr"
                         : a.key == "checkpoint/write_s" ? "job.checkpoint_write_s"
                                                         : nullptr;
    if (signal == nullptr) continue;
    for (const track::Point& p : a.points) signals_.Add(signal, labels, time_of(p), p.value, true);
  }
}

// ---- evaluating -----------------------------------------------------------------------

void Alerting::DeriveNodeSignals(Timestamp now, const std::vector<NodeView>& nodes) {
  for (const NodeView& n : nodes) {
    if (n.last_heartbeat == Timestamp{}) continue;  // not heard from since this process started
    signals_.Add("node.heartbeat_age_s", {{"node", n.node.name}}, now,
                 std::max(0.0, Seconds(now - n.last_heartbeat)));
  }
}

Status Alerting::DeriveJobSignals(Timestamp now, const std::vector<NodeView>& nodes) {
  std::map<std::string, const NodeView*> by_name;
  for (const NodeView& n : nodes) by_name[n.node.name] = &n;
  ListJobsRequest req;
  req.filter.states = {JobState::kRunning};
  req.limit = 1000;
  std::set<JobId> running;
  std::set<std::string> forget;  // job ids whose derived series end
  while (true) {
    TY_ASSIGN_OR_RETURN(store::JobPage page, cluster_->ListJobs(req));
    for (const Job& job : page.jobs) {
      const Attempt* a = job.CurrentAttempt();
      if (a == nullptr) continue;
      running.insert(job.id);
      const Labels labels = {{"job_id", std::to_string(job.id)},
                             {"tenant", job.spec.tenant},
                             {"queue", job.spec.queue}};
      auto add = [&](const char* signal, double v) { signals_.Add(signal, labels, now, v); };
      // GPUs of the job: utilisation from the nodes' latest telemetry.
      double util_sum = 0;
      int util_n = 0;
      for (size_t r = 0; r < a->nodes.size(); ++r) {
        auto n = by_name.find(a->nodes[r]);
        if (n == by_name.end() || r >= a->gpus.size()) continue;
        for (int g : a->gpus[r]) {
          for (const GpuTelemetry& t : n->second->telemetry) {
            if (t.index == g && t.util_pct) {
              util_sum += *t.util_pct;
              ++util_n;
            }
          }
        }
      }
      if (util_n > 0) add("job.gpu_util", util_sum / util_n);
      if (job.spec.checkpoint.interval.count() > 0) {
        Timestamp since = a->start_time;
        if (job.checkpoint && job.checkpoint->completed_at > since) {
          since = job.checkpoint->completed_at;
        }
        add("job.checkpoint_age_ratio",
            Seconds(now - since) / Seconds(job.spec.checkpoint.interval));
      }
      std::lock_guard lk(mu_);
      JobStat& s = jobs_[job.id];
      s.labels = labels;
      if (s.attempt != a->index) {
        // A new attempt: its ranks report afresh; the wait before it started counts
        // toward its queue's pending-time norm (the first attempt's only).
        if (s.attempt >= 0) {
          // (From -1 the ranks were cleared when the last attempt stopped running, and
          // what they reported since is this attempt's.)
          forget.insert(std::to_string(job.id));
          s.ranks.clear();
        }
        s.attempt = a->index;
        if (s.progress_at != Timestamp{}) s.progress_at = std::max(s.progress_at, a->start_time);
        if (a->index == 0 && !s.admitted_counted) {
          s.admitted_counted = true;
          auto& q = admitted_[{job.spec.tenant, job.spec.queue}];
          q.push_back(std::max(0.0, Seconds(a->start_time - job.submit_time)));
          while (q.size() > kAdmittedKept) q.pop_front();
        }
      }
      if (s.progress_at != Timestamp{}) {
        add("job.progress_age_s", Seconds(now - std::max(s.progress_at, a->start_time)));
      }
      std::vector<double> steps, waits;
      if (forget.contains(std::to_string(job.id))) {
        // Before this attempt's first samples: the last attempt's series end here.
        signals_.Forget([&](const std::string& signal, const Labels& l) {
          auto j = l.find("job_id");
          return DerivedJobSignal(signal) && j != l.end() && j->second == labels.at("job_id") &&
                 signal != "job.gpu_util" && signal != "job.checkpoint_age_ratio";
        });
      }
      double tokens = 0;
      bool has_tokens = false;
      for (const auto& [rank, r] : s.ranks) {
        if (now - r.at > kRankFresh) continue;
        steps.push_back(r.step_time);
        if (r.data_wait) waits.push_back(*r.data_wait);
        if (r.tokens) {
          tokens += *r.tokens;
          has_tokens = true;
        }
      }
      if (!steps.empty()) add("job.step_time_s", Median(steps));
      if (!waits.empty()) add("job.data_wait_s", Median(waits));
      if (has_tokens) add("job.tokens_per_s", tokens);
      if (has_tokens && tokens > 0 && (s.model_flops_per_token || s.num_params)) {
        track::MfuInput in;
        in.tokens_per_s = tokens;
        in.model_flops_per_token = s.model_flops_per_token;
        in.num_params = s.num_params;
        if (!s.precision.empty()) in.precision = s.precision;
        for (size_t r = 0; r < a->nodes.size(); ++r) {
          if (r < a->gpus.size()) in.gpu_count += static_cast<int64_t>(a->gpus[r].size());
          auto n = by_name.find(a->nodes[r]);
          if (in.gpu_type.empty() && n != by_name.end() && !n->second->node.gpus.empty()) {
            in.gpu_type = n->second->node.gpus.front().model;
          }
        }
        if (in.gpu_count > 0) {
          if (auto m = track::ComputeMfu(in); m.ok()) add("job.mfu", m->value);
        }
      }
      if (steps.size() >= 2) {
        const double median = Median(steps);
        if (median > 0) {
          for (const auto& [rank, r] : s.ranks) {
            if (now - r.at > kRankFresh) continue;
            std::string node;
            RankGpus(*a, job.spec.procs_per_replica, rank, &node);
            Labels rl = labels;
            rl["rank"] = std::to_string(rank);
            rl["node"] = node;
            signals_.Add("job.rank_step_time_ratio", rl, now, r.step_time / median);
          }
        }
      }
    }
    if (!page.next_after_id) break;
    req.after_id = *page.next_after_id;
  }
  // Jobs that are no longer Running: their derived series end, and their rank stats.
  std::lock_guard lk(mu_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (running.contains(it->first)) {
      ++it;
      continue;
    }
    if (it->second.attempt >= 0) {
      const std::string id = std::to_string(it->first);
      signals_.Forget([&](const std::string& signal, const Labels& l) {
        auto j = l.find("job_id");
        return DerivedJobSignal(signal) && j != l.end() && j->second == id;
      });
    }
    it->second.ranks.clear();
    it->second.attempt = -1;
    // Keep the entry of a job that may run again (its labels and progress), but not of
    // one that never ran: those are only made by ObserveMetrics.
    it = it->second.progress_at == Timestamp{} && !it->second.admitted_counted ? jobs_.erase(it)
                                                                               : std::next(it);
  }
  return Status::Ok();
}

Status Alerting::DerivePendingSignals(Timestamp now) {
  std::map<std::pair<std::string, std::string>, double> medians;
  {
    std::lock_guard lk(mu_);
    for (const auto& [queue, waits] : admitted_) {
      if (waits.size() < kMinAdmitted) continue;
      medians[queue] = std::max(kMinPendingMedianSeconds,
                                Median(std::vector<double>(waits.begin(), waits.end())));
    }
  }
  if (medians.empty()) return Status::Ok();
  ListJobsRequest req;
  req.filter.states = {JobState::kPending};
  req.limit = 1000;
  while (true) {
    TY_ASSIGN_OR_RETURN(store::JobPage page, cluster_->ListJobs(req));
    for (const Job& job : page.jobs) {
      auto m = medians.find({job.spec.tenant, job.spec.queue});
      if (m == medians.end() || job.held) continue;
      signals_.Add("job.pending_ratio",
                   {{"job_id", std::to_string(job.id)},
                    {"tenant", job.spec.tenant},
                    {"queue", job.spec.queue}},
                   now, Seconds(now - job.state_time) / m->second);
    }
    if (!page.next_after_id) break;
    req.after_id = *page.next_after_id;
  }
  return Status::Ok();
}

void Alerting::Record(AlertEvent event) {
  events_.push_back(std::move(event));
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void Alerting::Act(const monitor::ActionRequest& q, const monitor::Alert* alert, Timestamp now) {
  AlertEvent ev;
  ev.at = now;
  ev.kind = "action";
  ev.rule = q.rule;
  ev.fingerprint = q.fingerprint;
  if (alert) ev.labels = alert->labels;
  const std::string what = std::string(monitor::ActionKindName(q.kind));
  const std::string actor = "alert:" + q.rule;
  std::string summary = q.rule;
  if (alert) {
    if (auto s = alert->annotations.find("summary"); s != alert->annotations.end()) {
      summary += ": " + s->second;
    }
  }
  if (q.suppressed) {
    ev.detail = what + " suppressed: " + q.suppressed_reason;
    std::lock_guard lk(mu_);
    ++stats_.actions_suppressed;
    Record(std::move(ev));
    return;
  }
  Status s = Status::Ok();
  std::string done;
  switch (q.kind) {
    case monitor::ActionKind::kNotify:
      return;
    case monitor::ActionKind::kCordonNode:
      if (q.node.empty()) {
        s = FailedPrecondition("the alert names no node");
        break;
      }
      if (auto n = cluster_->GetNode(q.node); n.ok() && n->node.state == NodeState::kCordoned) {
        done = "node " + q.node + " was already cordoned";
        break;
      }
      s = cluster_->SetNodeAdminState(q.node, NodeState::kCordoned, actor, "alert " + summary);
      done = "cordoned node " + q.node;
      break;
    case monitor::ActionKind::kRequeueExcludingNode: {
      if (q.node.empty()) {
        s = FailedPrecondition("the alert names no node");
        break;
      }
      // The alert's job, or every Running job with a rank on the node (on its GPU).
      std::vector<JobId> jobs;
      if (!q.job_id.empty()) {
        jobs.push_back(std::stoll(q.job_id));
      } else if (auto n = cluster_->GetNode(q.node); n.ok()) {
        for (JobId id : n->jobs) {
          if (q.gpu.empty()) {
            jobs.push_back(id);
            continue;
          }
          auto v = cluster_->GetJob(id);
          if (!v.ok()) continue;
          for (const RankView& r : v->ranks) {
            if (r.node == q.node &&
                std::find(r.gpus.begin(), r.gpus.end(), std::stoi(q.gpu)) != r.gpus.end()) {
              jobs.push_back(id);
              break;
            }
          }
        }
      }
      for (JobId id : jobs) {
        Status one = cluster_->RequeueExcluding(id, q.node, "alert " + summary, actor);
        if (one.ok()) {
          done += (done.empty() ? "requeued job " : ", ") + std::to_string(id);
        } else if (s.ok()) {
          s = one;
        }
      }
      if (!done.empty()) done += " excluding node " + q.node;
      if (jobs.empty()) done = "no job runs on node " + q.node;
      break;
    }
    case monitor::ActionKind::kRequestCheckpoint:
      if (q.job_id.empty()) {
        s = FailedPrecondition("the alert names no job");
        break;
      }
      s = cluster_->RequestCheckpoint(std::stoll(q.job_id), "alert " + summary, actor);
      done = "asked job " + q.job_id + " for a checkpoint";
      break;
  }
  std::lock_guard lk(mu_);
  if (s.ok()) {
    ev.detail = what + ": " + done;
    ++stats_.actions_done;
  } else {
    ev.detail = what + " failed: " + s.message() + (done.empty() ? "" : " (" + done + ")");
    ++stats_.actions_failed;
  }
  std::cerr << "trainyard server: alert " << q.rule << ": " << ev.detail << "\n";
  Record(std::move(ev));
}

void Alerting::Notify(const std::vector<monitor::Transition>& transitions) {
  if (opt_.webhooks.empty()) return;
  std::vector<monitor::Alert> changed;
  for (const monitor::Transition& t : transitions) {
    if (t.kind != monitor::TransitionKind::kPending) changed.push_back(t.alert);
  }
  if (changed.empty()) return;
  std::lock_guard lk(hook_mu_);
  monitor::WebhookOptions wo;
  wo.external_url = external_url_;
  if (!external_url_.empty()) wo.generator_url_prefix = external_url_ + "/api/v1/alerts?rule=";
  for (const auto& group : monitor::GroupAlerts(changed, wo.group_by)) {
    const std::string body = monitor::RenderWebhook(group, wo);
    for (const std::string& url : opt_.webhooks) outbox_.push_back({url, body});
  }
  hook_cv_.notify_all();
}

void Alerting::SetExternalUrl(const std::string& url) {
  std::lock_guard lk(hook_mu_);
  external_url_ = url;
}

void Alerting::WebhookLoop() {
  while (true) {
    Notification n;
    {
      std::unique_lock lk(hook_mu_);
      hook_cv_.wait(lk, [&] { return stopping_ || !outbox_.empty(); });
      if (outbox_.empty()) return;  // stopping
      n = std::move(outbox_.front());
      outbox_.pop_front();
    }
    // "scheme://host:port" and the path.
    const size_t slash = n.url.find('/', n.url.find("//") + 2);
    const std::string base = n.url.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : n.url.substr(slash);
    httplib::Client client(base);
    if (base.starts_with("https://")) http::VerifyServer(client, opt_.webhook_ca);
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(opt_.webhook_timeout);
    client.set_connection_timeout(secs.count(), 0);
    client.set_read_timeout(secs.count(), 0);
    client.set_write_timeout(secs.count(), 0);
    std::string error;
    bool sent = false;
    for (int attempt = 0; attempt < opt_.webhook_attempts && !sent; ++attempt) {
      if (attempt > 0) {
        std::unique_lock lk(hook_mu_);
        if (hook_cv_.wait_for(lk, std::chrono::seconds(1 << std::min(attempt - 1, 5)),
                              [&] { return stopping_; })) {
          break;
        }
      }
      auto res = client.Post(path, n.body, "application/json");
      if (res && res->status >= 200 && res->status < 300) {
        sent = true;
      } else {
        error = res ? "HTTP " + std::to_string(res->status) : http::DescribeError(res, client);
      }
    }
    std::lock_guard lk(mu_);
    if (sent) {
      ++stats_.webhook_sent;
    } else {
      ++stats_.webhook_failed;
      std::cerr << "trainyard server: alert webhook " << base << path << ": gave up: " << error
                << "\n";
    }
  }
}

Status Alerting::Evaluate() {
  std::lock_guard eval(eval_mu_);
  const auto started = std::chrono::steady_clock::now();
  const Timestamp now = clock_->Now();
  const std::vector<NodeView> nodes = cluster_->ListNodes();
  DeriveNodeSignals(now, nodes);
  TY_RETURN_IF_ERROR(DeriveJobSignals(now, nodes));
  if (now - last_pending_ >= opt_.pending_interval) {
    last_pending_ = now;
    TY_RETURN_IF_ERROR(DerivePendingSignals(now));
  }
  signals_.Prune(now);
  // Cordons an alert placed that someone has lifted since.
  for (const std::string& node : engine_.ExportState().cordoned_nodes) {
    auto n = std::find_if(nodes.begin(), nodes.end(),
                          [&](const NodeView& v) { return v.node.name == node; });
    if (n == nodes.end() || n->node.state != NodeState::kCordoned) engine_.ReleaseCordon(node);
  }
  monitor::Evaluation ev = engine_.Evaluate(now, signals_);
  {
    std::lock_guard lk(mu_);
    alerts_ = ev.alerts;
    for (const monitor::Transition& t : ev.transitions) {
      AlertEvent e;
      e.at = now;
      e.kind = t.kind == monitor::TransitionKind::kPending  ? "pending"
               : t.kind == monitor::TransitionKind::kFiring ? "firing"
                                                            : "resolved";
      e.rule = t.alert.rule;
      e.fingerprint = t.alert.fingerprint;
      e.labels = t.alert.labels;
      if (auto s = t.alert.annotations.find("summary"); s != t.alert.annotations.end()) {
        e.detail = s->second;
      }
      if (t.kind != monitor::TransitionKind::kPending) {
        std::cerr << "trainyard server: alert " << e.rule << " " << e.kind << ": " << e.detail
                  << "\n";
      }
      Record(std::move(e));
    }
  }
  for (const monitor::ActionRequest& q : ev.actions) {
    const monitor::Alert* alert = nullptr;
    for (const monitor::Alert& a : ev.alerts) {
      if (a.fingerprint == q.fingerprint) alert = &a;
    }
    Act(q, alert, now);
  }
  Notify(ev.transitions);
  Status saved = Status::Ok();
  if (!ev.transitions.empty() || !ev.actions.empty()) saved = Save();
  std::lock_guard lk(mu_);
  ++stats_.evaluations;
  stats_.last_evaluation_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return saved;
}

// ---- reading --------------------------------------------------------------------------

std::vector<monitor::Alert> Alerting::Alerts() const {
  std::lock_guard lk(mu_);
  return alerts_;
}

std::vector<AlertEvent> Alerting::Events() const {
  std::lock_guard lk(mu_);
  return {events_.begin(), events_.end()};
}

AlertingStats Alerting::Stats() const {
  AlertingStats s;
  {
    std::lock_guard lk(mu_);
    s = stats_;
  }
  s.signal_series = signals_.series_count();
  s.signal_samples = signals_.sample_count();
  return s;
}

Result<monitor::Diagnosis> Alerting::Diagnose(JobId id) {
  TY_ASSIGN_OR_RETURN(JobView v, cluster_->GetJob(id));
  monitor::JobContext ctx;
  ctx.job_id = id;
  ctx.tenant = v.job.spec.tenant;
  ctx.queue = v.job.spec.queue;
  ctx.state = std::string(JobStateName(v.job.state));
  std::transform(ctx.state.begin(), ctx.state.end(), ctx.state.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  ctx.checkpoint_interval = v.job.spec.checkpoint.interval;
  for (const Attempt& a : v.job.attempts) {
    if (a.end_time) ctx.attempt_messages.push_back(a.message);
  }
  std::set<std::string> job_nodes;
  if (const Attempt* a = v.job.CurrentAttempt()) {
    const int32_t procs = std::max(v.job.spec.procs_per_replica, 1);
    const int32_t world = static_cast<int32_t>(a->nodes.size()) * procs;
    for (int32_t r = 0; r < world; ++r) {
      monitor::RankPlacement p;
      p.rank = r;
      p.gpus = RankGpus(*a, procs, r, &p.node);
      job_nodes.insert(p.node);
      ctx.ranks.push_back(std::move(p));
    }
  }
  for (const NodeView& n : cluster_->ListNodes()) {
    if (job_nodes.contains(n.node.name)) ctx.node_leaf[n.node.name] = n.node.topology.leaf;
  }
  const std::string job_label = std::to_string(id);
  for (const monitor::Alert& a : Alerts()) {
    if (a.state != monitor::AlertState::kFiring) continue;
    auto j = a.labels.find("job_id");
    auto n = a.labels.find("node");
    if ((j != a.labels.end() && j->second == job_label) ||
        (j == a.labels.end() && n != a.labels.end() && job_nodes.contains(n->second))) {
      ctx.alerts.push_back(a);
    }
  }
  return monitor::Diagnose(ctx, signals_, clock_->Now(), opt_.diagnose);
}

}  // namespace trainyard::server
