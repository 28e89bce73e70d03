#include "cli/runs_cmd.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "cli/client.h"
#include "core/image_ref.h"
#include "track/tensorboard.h"

namespace trainyard::cli {
namespace {

std::string Enc(const std::string& s) { return http::EncodeComponent(s); }

// A metric value as JSON carries it: a number, or "NaN" / "Infinity" / "-Infinity".
std::string Num(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  std::ostringstream s;
  s.precision(6);
  s << v.get<double>();
  return s.str();
}

double ToDouble(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "Infinity") return INFINITY;
    if (s == "-Infinity") return -INFINITY;
  }
  return NAN;
}

std::string Short(const std::string& code) {
  if (code.size() <= 12) return code;
  return code.substr(0, 10) + (code.ends_with("-dirty") ? "+" : "");
}

}  // namespace

void AddRunsCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  if (CommandWanted("runs")) {
    CLI::App* runs = app.add_subcommand(
        "runs",
        "List runs (every job is one): params, metrics, code and data versions [any role; "
        "your tenant's]");
    // --- runs (list) ---
    {
      struct F {
        Common c;
        std::string experiment, filter, state;
        bool all = true;
        int limit = 100;
      };
      auto f = std::make_shared<F>();
      AddCommon(runs, f->c, true);
      runs->add_option("--experiment", f->experiment, "Only runs of this experiment");
      runs->add_option("--filter", f->filter,
                       "Search expression, e.g. \"params.lr > 1e-4 and metrics.loss < 2\" "
                       "(docs/runs.md)");
      runs->add_option("--state", f->state, "Only these job states, comma-separated");
      runs->add_option("--limit", f->limit, "At most this many")->capture_default_str();
      runs->callback([runs, f, &exit_code, &out, &err] {
        if (runs->get_subcommands().size() > 0) return;  // a subcommand ran instead
        exit_code = WithApi(f->c, err, "runs", [&](Api& api) -> std::optional<Failure> {
          std::string q = "limit=" + std::to_string(f->limit);
          if (!f->experiment.empty()) q += "&experiment=" + Enc(f->experiment);
          if (!f->filter.empty()) q += "&filter=" + Enc(f->filter);
          if (!f->state.empty()) q += "&state=" + Enc(f->state);
          TY_CALL(res, api.Call("GET", "/api/v1/runs?" + q));
          if (f->c.output == "json") {
            out << res.dump() << "\n";
            return std::nullopt;
          }
          // Metric columns: loss first when present, then the keys the filter names.
          std::vector<std::string> keys;
          std::set<std::string> have;
          for (const auto& r : res["runs"]) {
            for (const auto& [k, _] : r["metrics"].items()) have.insert(k);
          }
          if (have.contains("loss")) keys.push_back("loss");
          for (const std::string& k : have) {
            if (k != "loss" && f->filter.find("metrics." + k) != std::string::npos)
              keys.push_back(k);
          }
          std::vector<std::vector<std::string>> rows;
          std::vector<std::string> head = {"RUN", "EXPERIMENT", "NAME", "STATE", "CODE", "AGE"};
          for (const auto& k : keys) head.push_back(k);
          rows.push_back(head);
          for (const auto& r : res["runs"]) {
            std::vector<std::string> row = {
                Str(r, "id"),    Str(r, "experiment"),  Str(r, "name"),
                Str(r, "state"), Short(Str(r, "code")), Age(r.value("submit_time_ms", int64_t{0}))};
            for (const auto& k : keys) {
              row.push_back(r["metrics"].contains(k) ? Num(r["metrics"][k]) : "-");
            }
            rows.push_back(row);
          }
          Table(out, rows);
          return std::nullopt;
        });
      });
    }
    // --- runs show ---
    {
      struct F {
        Common c;
        std::string id;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = runs->add_subcommand(
          "show", "A run's code, data, environment, params and metrics [any role of its tenant]");
      AddCommon(cmd, f->c, true);
      cmd->add_option("run", f->id, "Run (job) id")->required();
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "runs show", [&](Api& api) -> std::optional<Failure> {
          TY_CALL(r, api.Call("GET", "/api/v1/runs/" + Enc(f->id)));
          if (f->c.output == "json") {
            out << r.dump() << "\n";
            return std::nullopt;
          }
          out << "run " << Str(r, "id") << " " << Str(r, "name") << " (experiment "
              << Str(r, "experiment") << "): " << Str(r, "state") << "\n";
          out << "  code:        " << Str(r, "code")
              << (r.value("code_dirty", false) ? " (uncommitted changes)" : "") << "\n";
          out << "  data:        "
              << (Str(r, "data_version").empty() ? "-" : Str(r, "data_version")) << "\n";
          out << "  environment: " << Str(r, "environment") << "\n";
          std::string cmdline;
          for (const auto& a : r["command"])
            cmdline += (cmdline.empty() ? "" : " ") + a.get<std::string>();
          out << "  command:     " << (cmdline.empty() ? "(script)" : cmdline) << "\n";
          const auto& res = r["resources"];
          out << "  resources:   " << Str(res, "replicas") << " x " << Str(res, "gpus_per_replica")
              << " " << (Str(res, "gpu_type").empty() ? "GPU" : Str(res, "gpu_type")) << "\n";
          std::string nodes;
          for (const auto& n : r["nodes"])
            nodes += (nodes.empty() ? "" : ",") + n.get<std::string>();
          out << "  nodes:       " << (nodes.empty() ? "-" : nodes)
              << "  attempts: " << Str(r, "attempts") << "\n";
          if (!r["checkpoint"].is_null() && r.contains("checkpoint")) {
            out << "  checkpoint:  " << Str(r["checkpoint"], "path") << " (step "
                << Str(r["checkpoint"], "step") << ")\n";
          }
          out << "params:\n";
          if (r["params"].empty()) out << "  (none)\n";
          for (const auto& [k, v] : r["params"].items())
            out << "  " << Pad(k, 24) << v.get<std::string>() << "\n";
          out << "metrics:\n";
          if (r["metrics"].empty()) {
            out << "  (none yet)\n";
          } else {
            std::vector<std::vector<std::string>> rows = {
                {"  KEY", "LAST", "STEP", "MIN", "MAX", "POINTS", "NAN", "RANKS"}};
            for (const auto& [k, m] : r["metrics"].items()) {
              rows.push_back({"  " + k, Num(m["last"]), Str(m, "step"), Num(m["min"]),
                              Num(m["max"]), Str(m, "count"), Str(m, "nan_count"),
                              Str(m, "ranks")});
            }
            Table(out, rows);
          }
          return std::nullopt;
        });
      });
    }
    // --- runs compare ---
    {
      struct F {
        Common c;
        std::vector<std::string> ids;
        bool all = false;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = runs->add_subcommand(
          "compare", "Runs side by side: the params that differ, last and best metrics [any role]");
      AddCommon(cmd, f->c, true);
      cmd->add_option("runs", f->ids, "Two or more run ids")->required()->expected(2, 20);
      cmd->add_flag("--all", f->all, "Show params that are the same in every run too");
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "runs compare", [&](Api& api) -> std::optional<Failure> {
          std::string ids;
          for (const auto& i : f->ids) ids += (ids.empty() ? "" : ",") + i;
          TY_CALL(c, api.Call("GET", "/api/v1/runs/compare?ids=" + Enc(ids)));
          if (f->c.output == "json") {
            out << c.dump() << "\n";
            return std::nullopt;
          }
          std::vector<std::vector<std::string>> rows;
          std::vector<std::string> head = {""};
          for (const auto& id : c["runs"]) head.push_back("run " + id.dump());
          rows.push_back(head);
          auto add = [&](const json& entry, const std::string& prefix, const json& values) {
            const bool differs = entry.value("differs", false);
            if (!differs && !f->all && prefix == "params.") return;
            std::vector<std::string> row = {(differs ? "* " : "  ") + prefix + Str(entry, "key")};
            for (const auto& v : values)
              row.push_back(v.is_null() ? "-" : v.is_string() ? v.get<std::string>() : Num(v));
            rows.push_back(row);
          };
          for (const auto& a : c["attributes"]) add(a, "", a["values"]);
          for (const auto& p : c["params"]) add(p, "params.", p["values"]);
          for (const auto& m : c["metrics"]) {
            std::vector<std::string> last = {"  metrics." + Str(m, "key") + " (last)"};
            std::vector<std::string> best = {"  metrics." + Str(m, "key") + " (best, " +
                                             Str(m, "best_is") + ")"};
            for (const auto& v : m["last"]) last.push_back(Num(v));
            for (const auto& v : m["best"]) best.push_back(Num(v));
            rows.push_back(last);
            rows.push_back(best);
          }
          Table(out, rows);
          out << "(* differs between runs" << (f->all ? "" : "; --all shows equal params too")
              << ")\n";
          return std::nullopt;
        });
      });
    }
    // --- runs rerun ---
    {
      struct F {
        Common c;
        std::string id;
        std::vector<std::string> env;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = runs->add_subcommand(
          "rerun",
          "Submit a new job pinned to a run's code, data, params and environment "
          "[member of its tenant]");
      AddCommon(cmd, f->c, true);
      cmd->add_option("run", f->id, "Run (job) id")->required();
      cmd->add_option("--env", f->env,
                      "KEY=VALUE for each secret environment variable of the run (secrets are "
                      "never shown, so they must be given again)");
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "runs rerun", [&](Api& api) -> std::optional<Failure> {
          TY_CALL(j, api.Call("GET", "/api/v1/jobs/" + Enc(f->id)));
          json spec = j["spec"];
          std::map<std::string, std::string> given;
          for (const std::string& kv : f->env) {
            size_t eq = kv.find('=');
            if (eq == std::string::npos || eq == 0) {
              return Failure{"--env: expected KEY=VALUE, got \"" + kv + "\"", kExitUsage};
            }
            given[kv.substr(0, eq)] = kv.substr(eq + 1);
          }
          std::string missing;
          for (const auto& k : spec.value("secret_env", json::array())) {
            const std::string key = k.get<std::string>();
            if (auto it = given.find(key); it != given.end()) {
              spec["env"][key] = it->second;
            } else {
              missing += (missing.empty() ? "" : ", ") + key;
            }
          }
          if (!missing.empty()) {
            return Failure{"run " + f->id + " has secret environment variables (" + missing +
                               "); pass --env KEY=VALUE for each",
                           kExitUsage};
          }
          const std::string code = spec["experiment"].value("code", "auto");
          if (code == "auto") {
            return Failure{"run " + f->id +
                           " has no recorded code version (experiment.code: auto)"};
          }
          // The image as the run's nodes resolved it: a tag may have moved since.
          if (const std::string image = spec.value("image", ""); !image.empty()) {
            TY_CALL(run, api.Call("GET", "/api/v1/runs/" + Enc(f->id)));
            const std::string digest = run.value("image_digest", json()).is_string()
                                           ? run["image_digest"].get<std::string>()
                                           : "";
            if (digest.empty()) {
              return Failure{"run " + f->id + " runs image " + image +
                             ", but no node has resolved it to a digest yet (no rank has "
                             "started); rerun it once one has, or submit its spec again"};
            }
            auto ref = ParseImageRef(image);
            if (!ref.ok()) return Failure{"run " + f->id + ": " + ref.status().message()};
            spec["image"] = PinnedImageRef(*ref, digest);
          }
          spec["labels"]["trainyard.dev/rerun-of"] = f->id;
          spec["labels"].erase("trainyard.dev/array-index");
          TY_CALL(res, api.Call("POST", "/api/v1/jobs", spec.dump()));
          if (f->c.output == "json") {
            out << res.dump() << "\n";
          } else {
            out << "submitted job " << Str(res, "id") << " (rerun of " << f->id << " at code "
                << code;
            if (spec.contains("image")) out << ", image " << spec["image"].get<std::string>();
            // Its data: the stored spec names each dataset's exact version.
            for (const auto& d : spec.value("data", json::array())) {
              out << ", data " << d.value("dataset", "") << "@" << d.value("version", "");
            }
            out << ")\n";
          }
          return std::nullopt;
        });
      });
    }
    // --- runs metrics ---
    {
      struct F {
        Common c;
        std::string id, key;
        int rank = -1;
        int buckets = 50;
        std::string from, to;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = runs->add_subcommand(
          "metrics",
          "A run's series, or one metric downsampled (min/max/last per bucket) [any role]");
      AddCommon(cmd, f->c, true);
      cmd->add_option("run", f->id, "Run (job) id")->required();
      cmd->add_option("key", f->key, "Metric key; without it, list the run's series");
      cmd->add_option("--rank", f->rank, "Rank (default: the lowest that logged it)");
      cmd->add_option("--buckets", f->buckets, "Buckets (0: raw points)")->capture_default_str();
      cmd->add_option("--from", f->from, "First step");
      cmd->add_option("--to", f->to, "Last step");
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "runs metrics", [&](Api& api) -> std::optional<Failure> {
          if (f->key.empty()) {
            TY_CALL(s, api.Call("GET", "/api/v1/runs/" + Enc(f->id) + "/metrics"));
            if (f->c.output == "json") {
              out << s.dump() << "\n";
              return std::nullopt;
            }
            std::vector<std::vector<std::string>> rows = {
                {"KEY", "RANK", "POINTS", "FIRST", "LAST STEP", "LAST", "MIN", "MAX"}};
            for (const auto& i : s["series"]) {
              rows.push_back({Str(i, "key"), Str(i, "rank"), Str(i, "count"), Str(i, "first_step"),
                              Str(i, "last_step"), Num(i["last"]), Num(i["min"]), Num(i["max"])});
            }
            Table(out, rows);
            return std::nullopt;
          }
          std::string q = "buckets=" + std::to_string(f->buckets);
          if (f->rank >= 0) q += "&rank=" + std::to_string(f->rank);
          if (!f->from.empty()) q += "&from=" + Enc(f->from);
          if (!f->to.empty()) q += "&to=" + Enc(f->to);
          TY_CALL(s,
                  api.Call("GET", "/api/v1/runs/" + Enc(f->id) + "/metrics/" + f->key + "?" + q));
          if (f->c.output == "json") {
            out << s.dump() << "\n";
            return std::nullopt;
          }
          const json& p = s["points"];
          std::vector<std::vector<std::string>> rows = {{"STEPS", "POINTS", "MIN", "MAX", "LAST"}};
          for (size_t i = 0; i < p["count"].size(); ++i) {
            rows.push_back({p["first_step"][i].dump() + "-" + p["last_step"][i].dump(),
                            p["count"][i].dump(), Num(p["min"][i]), Num(p["max"][i]),
                            Num(p["last"][i])});
          }
          Table(out, rows);
          return std::nullopt;
        });
      });
    }
    // --- runs export --tensorboard DIR ---
    {
      struct F {
        Common c;
        std::vector<std::string> ids;
        std::string dir;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = runs->add_subcommand(
          "export",
          "Write runs' metrics as TensorBoard event files, one directory per run "
          "[any role]");
      AddCommon(cmd, f->c, false);
      cmd->add_option("runs", f->ids, "Run ids")->required();
      cmd->add_option("--tensorboard", f->dir,
                      "Directory to write DIR/run-<id>/events.out.tfevents.*")
          ->required();
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "runs export", [&](Api& api) -> std::optional<Failure> {
          char host[256] = "localhost";
          gethostname(host, sizeof host - 1);
          for (const std::string& id : f->ids) {
            TY_CALL(s, api.Call("GET", "/api/v1/runs/" + Enc(id) + "/metrics"));
            std::vector<track::ScalarPoint> points;
            for (const auto& i : s["series"]) {
              const std::string key = Str(i, "key");
              const std::string rank = Str(i, "rank");
              const std::string tag = rank == "0" ? key : key + "/rank-" + rank;
              // Raw points, a step range at a time (a raw read returns at most 1,000,000).
              int64_t from = i.value("first_step", int64_t{0});
              const int64_t last = i.value("last_step", int64_t{0});
              while (from <= last) {
                const int64_t to = std::min(last, from + 499'999);
                TY_CALL(p, api.Call("GET", "/api/v1/runs/" + Enc(id) + "/metrics/" + key +
                                               "?buckets=0&rank=" + rank + "&from=" +
                                               std::to_string(from) + "&to=" + std::to_string(to)));
                const json& c = p["points"];
                for (size_t n = 0; n < c["last_step"].size(); ++n) {
                  points.push_back({tag, c["last_step"][n].get<int64_t>(),
                                    c["time_ms"][n].get<int64_t>(), ToDouble(c["last"][n])});
                }
                if (to == last) break;
                from = to + 1;
              }
            }
            const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
            std::filesystem::path dir = std::filesystem::path(f->dir) / ("run-" + id);
            std::error_code ec;
            std::filesystem::create_directories(dir, ec);
            if (ec)
              return Failure{"--tensorboard: cannot create " + dir.string() + ": " + ec.message()};
            const std::filesystem::path file = dir / track::EventFileName(now, host);
            std::ofstream o(file, std::ios::binary | std::ios::trunc);
            o << track::WriteEventFile(points, now);
            if (!o.flush()) return Failure{"--tensorboard: cannot write " + file.string()};
            out << "run " << id << ": " << points.size() << " points -> " << file.string() << "\n";
          }
          return std::nullopt;
        });
      });
    }
  }
  // --- trace ---
  if (CommandWanted("trace")) {
    struct F {
      Common c;
      std::string id;
      std::string format = "chrome";
      int steps = 10'000;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "trace",
        "A job's timeline as Chrome trace JSON for Perfetto (ui.perfetto.dev) or OTLP "
        "JSON [any role of its tenant]");
    AddCommon(cmd, f->c, false);
    cmd->add_option("job", f->id, "Job id")->required();
    cmd->add_option("--format", f->format, "chrome or otlp")
        ->check(CLI::IsMember({"chrome", "otlp"}))
        ->capture_default_str();
    cmd->add_option("--steps", f->steps, "At most this many step spans per rank")
        ->capture_default_str();
    cmd->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "trace", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(t, api.Call("GET", "/api/v1/jobs/" + Enc(f->id) + "/trace?format=" + f->format +
                                       "&steps=" + std::to_string(f->steps)));
        out << t.dump() << "\n";
        return std::nullopt;
      });
    });
  }
}

}  // namespace trainyard::cli
