#include "sim/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sim/plot.h"

namespace trainyard::sim {
namespace {

std::string Fixed(double v, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << v;
  return out.str();
}

// Seconds in a short human unit: "42s", "3.5m", "2.1h", "1.3d".
std::string Span(double s) {
  if (s < 120) return Fixed(s, 0) + "s";
  if (s < 7200) return Fixed(s / 60, 1) + "m";
  if (s < 172800) return Fixed(s / 3600, 1) + "h";
  return Fixed(s / 86400, 1) + "d";
}

double Ms(Duration d) { return static_cast<double>(d.count()) / 1000.0; }

// Rows of cells as aligned columns: the first left-aligned (names), the others right.
std::string AlignColumns(const std::vector<std::vector<std::string>>& cells) {
  std::vector<size_t> width;
  for (const auto& row : cells) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) {
      std::string pad(width[c] - row[c].size(), ' ');
      out += c == 0 ? row[c] + pad : "  " + pad + row[c];
    }
    out += "\n";
  }
  return out;
}

Status MakeReportDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return InvalidArgument("--report: cannot create directory " + dir + ": " +
                           std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

std::string RenderTable(const std::vector<SimSummary>& rows) {
  const std::vector<std::string> header = {
      "policy",  "jobs",       "done",      "avg JCT",       "p50 JCT",  "p95 JCT",
      "p99 JCT", "avg queue",  "p99 queue", "makespan",      "GPU util", "idle GPU-h waiting",
      "preempt", "lost GPU-h", "ETTR",      "never started", "Jain"};
  std::vector<std::vector<std::string>> cells = {header};
  for (const SimSummary& s : rows) {
    cells.push_back({s.policy, std::to_string(s.jobs), std::to_string(s.completed),
                     Span(s.avg_jct_s), Span(s.p50_jct_s), Span(s.p95_jct_s), Span(s.p99_jct_s),
                     Span(s.avg_queue_s), Span(s.p99_queue_s), Span(s.makespan_s),
                     Fixed(100 * s.gpu_util, 1) + "%", Fixed(s.unallocated_gpu_hours_waiting, 0),
                     std::to_string(s.preemptions), Fixed(s.lost_gpu_hours, 1), Fixed(s.ettr, 3),
                     std::to_string(s.never_started), Fixed(s.jain_fairness, 3)});
  }
  return AlignColumns(cells);
}

nlohmann::ordered_json SummaryJson(const SimSummary& s) {
  nlohmann::ordered_json j;
  j["policy"] = s.policy;
  j["jobs"] = s.jobs;
  j["completed"] = s.completed;
  j["avg_jct_s"] = s.avg_jct_s;
  j["p50_jct_s"] = s.p50_jct_s;
  j["p95_jct_s"] = s.p95_jct_s;
  j["p99_jct_s"] = s.p99_jct_s;
  j["avg_queue_s"] = s.avg_queue_s;
  j["p99_queue_s"] = s.p99_queue_s;
  j["makespan_s"] = s.makespan_s;
  j["gpu_util"] = s.gpu_util;
  j["unallocated_gpu_hours_waiting"] = s.unallocated_gpu_hours_waiting;
  j["preemptions"] = s.preemptions;
  j["lost_gpu_hours"] = s.lost_gpu_hours;
  j["ettr"] = s.ettr;
  j["never_started"] = s.never_started;
  j["jain_fairness"] = s.jain_fairness;
  auto& tenants = j["tenants"] = nlohmann::ordered_json::array();
  for (const auto& t : s.tenants) {
    tenants.push_back({{"tenant", t.tenant}, {"share", t.share}, {"guarantee", t.guarantee}});
  }
  j["events"] = s.events;
  j["passes"] = s.passes;
  return j;
}

Status WriteReport(const std::string& dir, const std::vector<SimResult>& results) {
  TY_RETURN_IF_ERROR(MakeReportDir(dir));
  for (const SimResult& r : results) {
    const std::string path = dir + "/jobs-" + r.summary.policy + ".csv";
    std::ofstream f(path);
    if (!f) return InvalidArgument("--report: cannot write " + path + ": " + std::strerror(errno));
    f << "id,tenant,gpus,submit_s,first_start_s,end_s,queue_s,jct_s,starts,preemptions,failures,"
         "lost_gpu_s,run_gpu_s,useful_gpu_s,held_idle_gpu_s\n";
    for (const JobRecord& j : r.jobs) {
      const bool started = j.first_start.count() >= 0, ended = j.end.count() >= 0;
      f << j.id << ',' << j.tenant << ',' << j.gpus << ',' << Ms(j.submit) << ','
        << (started ? Fixed(Ms(j.first_start), 3) : "") << ',' << (ended ? Fixed(Ms(j.end), 3) : "")
        << ',' << (started ? Fixed(Ms(j.first_start - j.submit), 3) : "") << ','
        << (ended ? Fixed(Ms(j.end - j.submit), 3) : "") << ',' << j.starts << ',' << j.preemptions
        << ',' << j.failures << ',' << Ms(j.lost_work) << ',' << Ms(j.run_gpu_time) << ','
        << Ms(j.useful_gpu_time) << ',' << Ms(j.held_idle_gpu_time) << '\n';
    }
    if (!f) return Internal("--report: writing " + path + " failed");
  }
  std::vector<Series> util, queue, cdf;
  for (const SimResult& r : results) {
    Series u{r.summary.policy, {}, {}}, q{r.summary.policy, {}, {}}, c{r.summary.policy, {}, {}};
    for (const SeriesPoint& p : r.series) {
      const double hours = static_cast<double>(p.t.count()) / 3'600'000.0;
      u.x.push_back(hours);
      u.y.push_back(100 * p.gpu_util);
      q.x.push_back(hours);
      q.y.push_back(static_cast<double>(p.pending));
    }
    std::vector<double> jct;
    for (const JobRecord& j : r.jobs) {
      if (j.end.count() >= 0) jct.push_back(Ms(j.end - j.submit) / 3600.0);
    }
    std::sort(jct.begin(), jct.end());
    for (size_t i = 0; i < jct.size(); ++i) {
      c.x.push_back(std::max(jct[i], 1e-3));
      c.y.push_back(static_cast<double>(i + 1) / static_cast<double>(jct.size()));
    }
    util.push_back(std::move(u));
    queue.push_back(std::move(q));
    cdf.push_back(std::move(c));
  }
  ChartOptions uo;
  uo.title = "GPU utilisation";
  uo.x_label = "time (hours)";
  uo.y_label = "allocated GPUs (%)";
  uo.y_max = 100;
  TY_RETURN_IF_ERROR(WriteLineChartPng(dir + "/utilisation.png", util, uo));
  ChartOptions qo;
  qo.title = "Jobs waiting";
  qo.x_label = "time (hours)";
  qo.y_label = "pending jobs";
  TY_RETURN_IF_ERROR(WriteLineChartPng(dir + "/queue-length.png", queue, qo));
  ChartOptions co;
  co.title = "Job completion time (CDF)";
  co.x_label = "JCT (hours, log scale)";
  co.y_label = "fraction of completed jobs";
  co.x_log = true;
  co.y_max = 1;
  co.step = true;
  return WriteLineChartPng(dir + "/jct-cdf.png", cdf, co);
}

std::string RenderFillTable(const std::vector<FillSummary>& rows) {
  std::vector<std::vector<std::string>> cells = {{"policy", "jobs", "placed", "failed",
                                                  "first failure at", "free GPUs at 100%",
                                                  "free GPUs at end", "allocated at end"}};
  for (const FillSummary& s : rows) {
    const double cap = s.capacity_gpus > 0 ? s.capacity_gpus : 1;
    auto gpus = [&](double v) {
      return v < 0 ? std::string("-") : Fixed(v, 1) + " (" + Fixed(100 * v / cap, 2) + "%)";
    };
    cells.push_back(
        {s.policy, std::to_string(s.jobs), std::to_string(s.placed), std::to_string(s.failed),
         s.first_failure_arrived < 0 ? "-" : Fixed(100 * s.first_failure_arrived, 1) + "%",
         gpus(s.unallocated_gpus_at_capacity), gpus(s.unallocated_gpus_end),
         Fixed(100 * s.gpu_alloc_ratio_end, 2) + "%"});
  }
  return AlignColumns(cells);
}

nlohmann::ordered_json FillSummaryJson(const FillSummary& s) {
  nlohmann::ordered_json j;
  j["policy"] = s.policy;
  j["jobs"] = s.jobs;
  j["placed"] = s.placed;
  j["failed"] = s.failed;
  j["capacity_gpus"] = s.capacity_gpus;
  j["arrived_gpus"] = s.arrived_gpus;
  j["first_failure_arrived"] = s.first_failure_arrived;
  j["unallocated_gpus_at_capacity"] = s.unallocated_gpus_at_capacity;
  j["unallocated_gpus_end"] = s.unallocated_gpus_end;
  j["gpu_alloc_ratio_end"] = s.gpu_alloc_ratio_end;
  j["passes"] = s.passes;
  return j;
}

Status WriteFillReport(const std::string& dir, const std::vector<FillResult>& results) {
  TY_RETURN_IF_ERROR(MakeReportDir(dir));
  std::vector<Series> free;
  for (const FillResult& r : results) {
    const std::string path = dir + "/fill-" + r.summary.policy + ".csv";
    std::ofstream f(path);
    if (!f) return InvalidArgument("--report: cannot write " + path + ": " + std::strerror(errno));
    f << "arrival,job,placed,arrived_gpus,allocated_gpus\n";
    const double cap = r.summary.capacity_gpus > 0 ? r.summary.capacity_gpus : 1;
    Series s{r.summary.policy, {}, {}};
    for (size_t i = 0; i < r.curve.size(); ++i) {
      const FillPoint& p = r.curve[i];
      f << i + 1 << ',' << p.job << ',' << (p.placed ? 1 : 0) << ',' << Fixed(p.arrived_gpus, 3)
        << ',' << Fixed(p.allocated_gpus, 3) << '\n';
      s.x.push_back(100 * p.arrived_gpus / cap);
      s.y.push_back(100 * (cap - p.allocated_gpus) / cap);
    }
    if (!f) return Internal("--report: writing " + path + " failed");
    free.push_back(std::move(s));
  }
  ChartOptions o;
  o.title = "Free GPUs as demand arrives (fill experiment)";
  o.x_label = "demand arrived (% of the cluster's GPUs)";
  o.y_label = "free GPUs (% of the cluster's)";
  o.y_max = 100;
  return WriteLineChartPng(dir + "/fill.png", free, o);
}

}  // namespace trainyard::sim
