#include "cli/client_cmd.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/app.h"
#include "cli/client.h"
#include "core/units.h"

namespace trainyard::cli {

void AddClientCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  // --- submit ---
  if (CommandWanted("submit")) {
    struct F {
      Common c;
      std::string file;
      std::string array;
      bool wait = false;
      bool no_code = false;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "submit", "Submit a job (YAML, JSON or #SBATCH script) [member of its tenant]");
    AddCommon(cmd, f->c, true);
    cmd->add_option("file", f->file, "Job spec file; - reads standard input")->required();
    cmd->add_option("--array", f->array, "Job array: one job per index, e.g. 1-1000, 0-9:2, 1,3,5");
    cmd->add_flag("--wait", f->wait, "Wait until the job finishes; exit 0 only if it succeeded");
    cmd->add_flag("--no-code", f->no_code,
                  "Do not record the git commit of the spec's directory as the run's code "
                  "version (experiment.code: auto)");
    cmd->callback([f, &exit_code, &out, &err] {
      std::string text;
      if (f->file == "-") {
        std::stringstream ss;
        ss << std::cin.rdbuf();
        text = ss.str();
      } else {
        std::ifstream in(f->file, std::ios::binary);
        if (!in) {
          err << "trainyard submit: cannot read " << f->file << "\n";
          exit_code = kExitUsage;
          return;
        }
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
      }
      // The code version of the run: the commit of the git tree the spec lives in (the
      // working directory for standard input), "-dirty" when it has uncommitted changes.
      const std::string code = f->no_code ? "" : GitCodeVersion(f->file == "-" ? "." : f->file);
      exit_code = WithApi(f->c, err, "submit", [&](Api& api) -> std::optional<Failure> {
        std::string path = "/api/v1/jobs";
        std::string query;
        if (!f->array.empty()) query += "&array=" + http::EncodeComponent(f->array);
        if (!code.empty()) query += "&code=" + code;
        if (!query.empty()) path += "?" + query.substr(1);
        TY_CALL(res, api.Call("POST", path, text));
        const int64_t id = res.value("id", int64_t{0});
        if (f->c.output == "json") {
          if (!f->wait) out << res.dump() << "\n";
        } else {
          for (const auto& w : res["warnings"]) err << "warning: " << w.get<std::string>() << "\n";
          if (res["ids"].size() > 1) {
            out << "submitted " << res["ids"].size() << " jobs " << res["ids"].front() << ".."
                << res["ids"].back() << "\n";
          } else {
            out << "submitted job " << id << "\n";
          }
        }
        if (!f->wait) return std::nullopt;
        std::string state;
        json last;
        for (const auto& jid : res["ids"]) {
          while (true) {
            TY_CALL(job, api.Call("GET", "/api/v1/jobs/" + jid.dump()));
            state = Str(job, "state");
            if (Terminal(state)) {
              last = job;
              break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
          }
          if (f->c.output == "json") {
            out << json{{"id", jid}, {"state", state}, {"reason", last["reason"]}}.dump() << "\n";
          } else {
            out << "job " << jid << " " << state << ": " << Str(last, "reason") << "\n";
          }
          if (state != "Succeeded") return Failure{"job " + jid.dump() + " " + state};
        }
        return std::nullopt;
      });
    });
  }
  // --- jobs ---
  if (CommandWanted("jobs")) {
    struct F {
      Common c;
      std::string state, tenant, queue, name;
      bool all = false;
      int limit = 1000;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "jobs", "List jobs (like squeue); unfinished ones unless --all [any role; your tenant's]");
    AddCommon(cmd, f->c, true);
    cmd->add_option("--state", f->state,
                    "Only these states, comma-separated (e.g. Pending,Running)");
    cmd->add_option("--tenant", f->tenant, "Only this tenant");
    cmd->add_option("--queue", f->queue, "Only this queue");
    cmd->add_option("--name", f->name, "Only names starting with this");
    cmd->add_flag("--all", f->all, "Include finished jobs");
    cmd->add_option("--limit", f->limit, "At most this many")->capture_default_str();
    cmd->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "jobs", [&](Api& api) -> std::optional<Failure> {
        std::string q;
        auto add = [&](const char* k, const std::string& v) {
          if (!v.empty())
            q += std::string(q.empty() ? "?" : "&") + k + "=" + http::EncodeComponent(v);
        };
        std::string states = f->state;
        if (states.empty() && !f->all) states = "Pending,Admitted,Starting,Running,Preempting,Lost";
        add("state", states);
        add("tenant", f->tenant);
        add("queue", f->queue);
        add("name", f->name);
        json jobs = json::array();
        std::string after;
        while (static_cast<int>(jobs.size()) < f->limit) {
          const int page = std::min(f->limit - static_cast<int>(jobs.size()), 1000);
          std::string path = "/api/v1/jobs" + q + (q.empty() ? "?" : "&") +
                             "limit=" + std::to_string(page) +
                             (after.empty() ? "" : "&after=" + after);
          TY_CALL(res, api.Call("GET", path));
          for (auto& j : res["jobs"]) jobs.push_back(std::move(j));
          if (res["next_after"].is_null()) break;
          after = res["next_after"].dump();
        }
        if (f->c.output == "json") {
          out << jobs.dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {{"ID", "NAME", "TENANT", "QUEUE", "PRIORITY",
                                                       "STATE", "SIZE", "NODES", "AGE", "REASON"}};
        for (const auto& j : jobs) {
          std::string nodes;
          for (const auto& n : j["nodes"])
            nodes += (nodes.empty() ? "" : ",") + n.get<std::string>();
          rows.push_back({Str(j, "id"), Str(j, "name"), Str(j, "tenant"), Str(j, "queue"),
                          Str(j, "priority"),
                          Str(j, "state") + (j.value("held", false) ? "(held)" : ""),
                          Str(j, "replicas") + "x" + Str(j, "gpus_per_replica") + "GPU",
                          nodes.empty() ? "-" : nodes, Age(j.value("submit_time_ms", int64_t{0})),
                          Str(j, "reason")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
  }
  // --- job show ---
  if (CommandWanted("job")) {
    struct F {
      Common c;
      std::string id;
    };
    auto f = std::make_shared<F>();
    CLI::App* job = app.add_subcommand("job", "Inspect one job");
    job->require_subcommand(1);
    CLI::App* cmd = job->add_subcommand(
        "show", "Spec, state, attempts, checkpoint and events of a job [any role of its tenant]");
    AddCommon(cmd, f->c, true);
    cmd->add_option("id", f->id, "Job id")->required();
    cmd->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "job show", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(j, api.Call("GET", "/api/v1/jobs/" + http::EncodeComponent(f->id)));
        TY_CALL(ev, api.Call("GET", "/api/v1/jobs/" + http::EncodeComponent(f->id) + "/events"));
        j["events"] = ev["events"];
        if (f->c.output == "json") {
          out << j.dump() << "\n";
          return std::nullopt;
        }
        out << "job " << Str(j, "id") << " " << Str(j, "name") << ": " << Str(j, "state")
            << (Str(j, "reason").empty() ? "" : " (" + Str(j, "reason") + ")") << "\n";
        out << "  tenant/queue: " << Str(j["spec"], "tenant") << "/" << Str(j["spec"], "queue")
            << "  priority: " << Str(j["spec"], "priority") << "  retries: " << Str(j, "retries")
            << "\n";
        if (const std::string image = Str(j["spec"], "image"); !image.empty()) {
          std::string digest;
          for (const auto& a : j["attempts"]) {
            if (a.contains("image_digest")) digest = Str(a, "image_digest");
          }
          out << "  image: " << image << (digest.empty() ? "" : " (" + digest + ")") << "\n";
        }
        if (!j["checkpoint"].is_null()) {
          out << "  checkpoint: " << Str(j["checkpoint"], "path") << " (step "
              << Str(j["checkpoint"], "step") << ", "
              << Age(j["checkpoint"].value("completed_at_ms", int64_t{0})) << " ago)\n";
        }
        for (const auto& a : j["attempts"]) {
          std::string nodes;
          for (const auto& n : a["nodes"])
            nodes += (nodes.empty() ? "" : ",") + n.get<std::string>();
          out << "  attempt " << Str(a, "index") << " on " << nodes << ": "
              << (a["end_time_ms"].is_null() ? "open" : Str(a, "exit_reason")) << " "
              << Str(a, "message") << " lost "
              << FormatDuration(Duration(a.value("lost_work_ms", int64_t{0}))) << "\n";
          if (a.contains("error_lines") && a["error_lines"].is_array() &&
              !a["error_lines"].empty()) {
            out << "  error (rank " << Str(a, "error_rank") << "):\n";
            for (const auto& l : a["error_lines"]) {
              out << "      " << (l.is_string() ? l.get<std::string>() : l.dump()) << "\n";
            }
          }
        }
        for (const auto& r : j["ranks"]) {
          out << "  rank " << Str(r, "rank") << " on " << Str(r, "node") << " gpus "
              << r["gpus"].dump() << ": " << Str(r, "state") << "\n";
        }
        out << "events:\n";
        for (const auto& e : j["events"]) {
          out << "  " << FormatTimestamp(Timestamp(Duration(e.value("time_ms", int64_t{0})))) << " "
              << Pad(Str(e, "kind"), 16) << Str(e, "message") << "\n";
        }
        out << "spec:\n" << j["spec"].dump(2) << "\n";
        return std::nullopt;
      });
    });
  }
  // --- cancel / hold / release ---
  for (const std::string verb : {"cancel", "hold", "release"}) {
    if (!CommandWanted(verb)) continue;
    struct F {
      Common c;
      std::vector<std::string> ids;
    };
    auto f = std::make_shared<F>();
    const std::string help =
        verb == "cancel" ? "Cancel jobs (stops their ranks) [its submitter, tenant-admin]"
        : verb == "hold"
            ? "Hold pending jobs (not scheduled until released) [its submitter, tenant-admin]"
            : "Release held jobs [its submitter, tenant-admin]";
    CLI::App* cmd = app.add_subcommand(verb, help);
    AddCommon(cmd, f->c, true);
    cmd->add_option("ids", f->ids, "Job ids")->required();
    cmd->callback([f, verb, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, verb, [&](Api& api) -> std::optional<Failure> {
        json all = json::array();
        for (const auto& id : f->ids) {
          TY_CALL(res, api.Call("POST", "/api/v1/jobs/" + http::EncodeComponent(id) + "/" + verb));
          if (f->c.output == "json") {
            all.push_back(res);
          } else {
            out << "job " << id << ": " << Str(res, "state") << " (" << Str(res, "reason") << ")\n";
          }
        }
        if (f->c.output == "json") out << all.dump() << "\n";
        return std::nullopt;
      });
    });
  }
  // --- logs ---
  if (CommandWanted("logs")) {
    struct F {
      Common c;
      std::string id;
      int rank = -1;  // 0 when reading, every rank when searching
      int attempt = -1;
      bool follow = false;
      std::string grep;
      bool ignore_case = false;
      int max = 1000;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "logs",
        "Print a rank's output (stdout and stderr), or search a job's logs with --grep [any role "
        "of its tenant]");
    AddCommon(cmd, f->c, false);
    cmd->add_option("job", f->id, "Job id")->required();
    cmd->add_option("--rank", f->rank, "Rank (default 0; with --grep every rank)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--attempt", f->attempt,
                    "Attempt (default: the latest; with --grep every attempt)");
    auto* follow =
        cmd->add_flag("-f,--follow", f->follow, "Keep printing new output until the job finishes");
    auto* grep = cmd->add_option("--grep", f->grep,
                                 "Print the lines that contain this text (a fixed string, not a "
                                 "regex) as \"attempt A rank R line L: text\"")
                     ->excludes(follow);
    cmd->add_flag("-i,--ignore-case", f->ignore_case, "--grep ignores the case of ASCII letters")
        ->needs(grep);
    cmd->add_option("--max", f->max, "--grep prints at most this many lines")
        ->check(CLI::Range(1, 10'000))
        ->needs(grep)
        ->capture_default_str();
    cmd->callback([f, grep, &exit_code, &out, &err] {
      const std::string job_path = "/api/v1/jobs/" + http::EncodeComponent(f->id);
      if (grep->count() > 0) {
        exit_code = WithApi(f->c, err, "logs", [&](Api& api) -> std::optional<Failure> {
          std::string path = job_path + "/logs/search?pattern=" + http::EncodeComponent(f->grep) +
                             "&max_matches=" + std::to_string(f->max) +
                             (f->ignore_case ? "&ignore_case=true" : "");
          if (f->rank >= 0) path += "&rank=" + std::to_string(f->rank);
          if (f->attempt >= 0) path += "&attempt=" + std::to_string(f->attempt);
          TY_CALL(res, api.Call("GET", path));
          for (const auto& m : res["matches"]) {
            out << "attempt " << Str(m, "attempt") << " rank " << Str(m, "rank") << " line "
                << Str(m, "line") << ": " << Str(m, "text") << "\n";
          }
          out << std::flush;
          if (res.value("pruned", false)) {
            err << "trainyard logs: some of job " << f->id
                << "'s logs were deleted by the server's log retention and not searched\n";
          }
          if (res.value("truncated", false)) {
            err << "trainyard logs: stopped early (more than " << f->max
                << " matching lines, or the first 1 GiB of logs searched); narrow the search "
                   "with --attempt, --rank or a longer pattern, or raise --max\n";
          }
          return std::nullopt;
        });
        return;
      }
      exit_code = WithApi(f->c, err, "logs", [&](Api& api) -> std::optional<Failure> {
        int64_t offset = 0;
        while (true) {
          std::string path = job_path + "/logs?rank=" + std::to_string(std::max(f->rank, 0)) +
                             "&offset=" + std::to_string(offset) +
                             (f->follow ? "&wait_ms=20000" : "");
          if (f->attempt >= 0) path += "&attempt=" + std::to_string(f->attempt);
          auto sent = api.Send("GET", path, "", "");
          if (auto* failure = std::get_if<Failure>(&sent)) return *failure;
          const http::Response& res = std::get<http::Response>(sent);
          if (res.Header("X-Trainyard-Log-Pruned") == "true") {
            err << "trainyard logs: this log was deleted by the server's log retention "
                   "(--log-retention, --log-max-bytes)\n";
            break;
          }
          out << res.body << std::flush;
          const int64_t next = std::stoll("0" + res.Header("X-Trainyard-Next-Offset"));
          const std::string state = res.Header("X-Trainyard-Job-State");
          const bool more = next > offset;
          offset = next;
          if (!f->follow) {
            if (!more) break;
            continue;
          }
          if (!more && Terminal(state)) break;
        }
        return std::nullopt;
      });
    });
  }
  // --- profile ---
  if (CommandWanted("profile")) {
    struct F {
      Common c;
      std::string id;
      int steps = 20;
      int rank = -1;
      bool wait = false;
      bool list = false;
      bool json = false;
      std::string get;
      std::string file;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "profile",
        "Record a profile of a running job's next steps (torch.profiler when the job uses "
        "torch, else the SDK's step spans), kept with the run, for Perfetto [its submitter, "
        "tenant-admin; --list and --get: any role of its tenant]");
    AddCommon(cmd, f->c, false);
    cmd->add_option("job", f->id, "Job id")->required();
    auto* steps = cmd->add_option("--steps", f->steps, "Steps to record")
                      ->check(CLI::Range(1, 10'000))
                      ->capture_default_str();
    cmd->add_option("--rank", f->rank,
                    "Only this rank (default: every rank); with --get, only its trace, as "
                    "recorded")
        ->check(CLI::NonNegativeNumber);
    auto* wait = cmd->add_flag(
        "--wait", f->wait,
        "Wait (at most 10 minutes) until every asked rank has stored its trace or failed");
    cmd->add_option("-o,--output", f->file,
                    "Write the trace, every stored rank merged (pid = rank), to this file; "
                    "implies --wait");
    auto* list =
        cmd->add_flag("--list", f->list, "List the job's profiles with the state of each rank")
            ->excludes(steps)
            ->excludes(wait);
    cmd->add_option("--get", f->get, "Fetch stored profile PID (to -o FILE, else to stdout)")
        ->excludes(steps)
        ->excludes(wait)
        ->excludes(list);
    cmd->add_flag("--json", f->json, "Print the request (or --list) as JSON");
    cmd->callback([f, &exit_code, &out, &err] {
      const std::string job = "/api/v1/jobs/" + http::EncodeComponent(f->id);
      auto size = [](const json& r) {
        const int64_t b = r.value("bytes", int64_t{0});
        char text[32];
        if (b < 1024) {
          std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(b));
        } else if (b < 1024 * 1024) {
          std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(b) / 1024);
        } else {
          std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(b) / (1024 * 1024));
        }
        return std::string(text);
      };
      // "-" for stdout; else the file, written whole or not at all.
      auto save = [&](const std::string& text) -> std::optional<Failure> {
        if (f->file.empty() || f->file == "-") {
          out << text << std::flush;
          return std::nullopt;
        }
        const std::string tmp = f->file + ".tmp";
        {
          std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
          file << text;
          if (!file.flush()) return Failure{"-o " + f->file + ": cannot write " + tmp};
        }
        if (std::rename(tmp.c_str(), f->file.c_str()) != 0) {
          return Failure{"-o " + f->file + ": cannot rename " + tmp + " to it"};
        }
        return std::nullopt;
      };
      exit_code = WithApi(f->c, err, "profile", [&](Api& api) -> std::optional<Failure> {
        if (f->list) {
          TY_CALL(res, api.Call("GET", job + "/profiles"));
          if (f->json) {
            out << res["profiles"].dump() << "\n";
            return std::nullopt;
          }
          std::vector<std::vector<std::string>> rows = {
              {"ID", "STEPS", "ATTEMPT", "AGE", "BY", "RANK", "STATE", "SIZE", "MESSAGE"}};
          for (const auto& p : res["profiles"]) {
            bool first = true;
            for (const auto& r : p["ranks"]) {
              rows.push_back({first ? Str(p, "id") : "", first ? Str(p, "steps") : "",
                              first ? Str(p, "attempt") : "",
                              first ? Age(p.value("created_ms", int64_t{0})) : "",
                              first ? Str(p, "created_by") : "", Str(r, "rank"), Str(r, "state"),
                              size(r), Str(r, "message")});
              first = false;
            }
          }
          Table(out, rows);
          return std::nullopt;
        }
        if (!f->get.empty()) {
          std::string path = job + "/profiles/" + http::EncodeComponent(f->get);
          if (f->rank >= 0) path += "?rank=" + std::to_string(f->rank);
          auto trace = api.Fetch(path);
          if (auto* failure = std::get_if<Failure>(&trace)) return *failure;
          if (auto failure = save(std::get<std::string>(trace))) return failure;
          if (!f->file.empty() && f->file != "-") {
            err << "wrote " << f->file << "; open it in https://ui.perfetto.dev\n";
          }
          return std::nullopt;
        }
        json body = {{"steps", f->steps}};
        if (f->rank >= 0) body["rank"] = f->rank;
        TY_CALL(request, api.Call("POST", job + "/profile", body.dump()));
        const std::string pid = Str(request, "id");
        std::string ranks;
        for (const auto& r : request["ranks"]) ranks += (ranks.empty() ? "" : ",") + Str(r, "rank");
        if (f->json) {
          out << request.dump() << "\n";
        } else {
          err << "profile " << pid << ": " << f->steps << " steps of rank"
              << (request["ranks"].size() == 1 ? " " : "s ") << ranks << " of job " << f->id
              << " requested\n";
        }
        if (!f->wait && f->file.empty()) {
          if (!f->json) {
            out << pid << "\n";
            err << "when it is stored: trainyard profile " << f->id << " --get " << pid
                << " -o trace.json   (progress: trainyard profile " << f->id << " --list)\n";
          }
          return std::nullopt;
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
        json last;
        while (true) {
          TY_CALL(list, api.Call("GET", job + "/profiles"));
          for (const auto& p : list["profiles"]) {
            if (Str(p, "id") == pid) last = p;
          }
          if (last.is_null()) return Failure{"profile " + pid + " is not listed any more"};
          if (last.value("done", false)) break;
          if (std::chrono::steady_clock::now() > deadline) {
            std::string states;
            for (const auto& r : last["ranks"]) {
              states += (states.empty() ? "" : ", ") + std::string("rank ") + Str(r, "rank") + " " +
                        Str(r, "state");
            }
            return Failure{"gave up after 10m waiting for profile " + pid + " (" + states +
                           "); a rank records only while the job calls trainyard.log(step=...) "
                           "of the Trainyard Python SDK; see trainyard profile " +
                           f->id + " --list"};
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
        int stored = 0, failed = 0;
        for (const auto& r : last["ranks"]) {
          const bool ok = Str(r, "state") == "stored";
          (ok ? stored : failed) += 1;
          err << "rank " << Str(r, "rank") << ": " << Str(r, "state")
              << (ok ? " (" + size(r) + ")" : ": " + Str(r, "message")) << "\n";
        }
        if (stored > 0 && !f->file.empty()) {
          auto trace = api.Fetch(job + "/profiles/" + http::EncodeComponent(pid));
          if (auto* failure = std::get_if<Failure>(&trace)) return *failure;
          if (auto failure = save(std::get<std::string>(trace))) return failure;
          if (f->file != "-") {
            err << "wrote " << f->file << " (" << stored << " rank" << (stored == 1 ? "" : "s")
                << "); open it in https://ui.perfetto.dev\n";
          }
        } else if (stored > 0 && !f->json) {
          out << pid << "\n";
          err << "fetch it: trainyard profile " << f->id << " --get " << pid << " -o trace.json\n";
        }
        if (failed > 0) {
          return Failure{std::to_string(failed) + " of " + std::to_string(stored + failed) +
                         " ranks of profile " + pid + " failed"};
        }
        return std::nullopt;
      });
    });
  }
  // --- nodes ---
  if (CommandWanted("nodes")) {
    auto c = std::make_shared<Common>();
    CLI::App* cmd =
        app.add_subcommand("nodes", "List nodes (like sinfo): state, GPUs used/total [any role]");
    AddCommon(cmd, *c, true);
    cmd->callback([cmd, c, &exit_code, &out, &err] {
      if (!cmd->get_subcommands().empty()) return;
      exit_code = WithApi(*c, err, "nodes", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("GET", "/api/v1/nodes"));
        if (c->output == "json") {
          out << res["nodes"].dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {
            {"NAME", "STATE", "GPU", "USED", "FREE", "TOTAL", "ADDRESS", "JOBS", "REASON"}};
        for (const auto& n : res["nodes"]) {
          const int64_t total = n.value("gpus_total", int64_t{0}),
                        used = n.value("gpus_used", int64_t{0});
          std::string jobs;
          for (const auto& j : n["jobs"]) jobs += (jobs.empty() ? "" : ",") + j.dump();
          rows.push_back({Str(n, "name"), Str(n, "state"), Str(n, "gpu_type"), std::to_string(used),
                          std::to_string(total - used), std::to_string(total), Str(n, "address"),
                          jobs.empty() ? "-" : jobs, Str(n, "state_reason")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
    struct F {
      Common c;
      std::string node;
    };
    auto f = std::make_shared<F>();
    CLI::App* show = cmd->add_subcommand(
        "show",
        "A node: state, GPUs with their telemetry, links, disks, health check, faults "
        "[any role]");
    AddCommon(show, f->c, true);
    show->add_option("node", f->node, "Node name")->required();
    show->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "nodes show", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(n, api.Call("GET", "/api/v1/nodes/" + http::EncodeComponent(f->node)));
        if (f->c.output == "json") {
          out << n.dump() << "\n";
          return std::nullopt;
        }
        out << "node " << Str(n, "name") << ": " << Str(n, "state");
        if (!Str(n, "state_reason").empty()) out << " (" << Str(n, "state_reason") << ")";
        out << "\n  address " << Str(n, "address") << ", " << Str(n, "gpus_used") << "/"
            << Str(n, "gpus_total") << " " << Str(n, "gpu_type") << " GPUs in use"
            << (n.value("simulated", false) ? " (simulated)" : "") << "\n";
        if (n.contains("telemetry")) {
          std::vector<std::vector<std::string>> rows = {
              {"  GPU", "UTIL%", "TEMP C", "POWER W", "THROTTLED", "XIDS", "ECC"}};
          for (const auto& g : n["telemetry"]) {
            rows.push_back({"  " + Str(g, "index"), Str(g, "util_pct"), Str(g, "temp_c"),
                            Str(g, "power_w"), Str(g, "throttled"), Str(g, "xid_count"),
                            Str(g, "ecc_uncorrectable")});
          }
          Table(out, rows);
        }
        for (const auto& l : n.value("links", json::array())) {
          out << "  link " << Str(l, "name") << " (" << Str(l, "kind")
              << "): " << (l.value("up", true) ? "up" : "DOWN") << ", " << Str(l, "errors")
              << " errors\n";
        }
        for (const auto& d : n.value("disks", json::array())) {
          const double total = d.value("total_bytes", 0.0), free = d.value("free_bytes", 0.0);
          out << "  disk " << Str(d, "path") << ": "
              << (total > 0 ? std::to_string(static_cast<int>(100 * free / total)) + "% free"
                            : std::string("size unknown"))
              << "\n";
        }
        if (n.contains("health_check")) {
          const json& h = n["health_check"];
          out << "  health check (" << Str(h, "trigger") << ", "
              << Age(h.value("at_ms", int64_t{0}))
              << " ago): " << (h.value("ok", true) ? "passed" : "FAILED");
          const std::string output = Str(h, "output");
          if (!output.empty()) out << ": " << output.substr(0, output.find('\n'));
          out << "\n";
        }
        for (const auto& x : n.value("faults", json::array())) {
          out << "  fault " << Str(x, "id") << ": " << Str(x, "kind")
              << (x.value("gpu", -1) >= 0 ? " on GPU " + Str(x, "gpu") : std::string(" (node)"))
              << "\n";
        }
        return std::nullopt;
      });
    });
  }
  for (const std::string verb : {"cordon", "drain", "uncordon"}) {
    if (!CommandWanted(verb)) continue;
    struct F {
      Common c;
      std::string node;
    };
    auto f = std::make_shared<F>();
    const std::string help = verb == "cordon" ? "Stop placing new work on a node [cluster-admin]"
                             : verb == "drain"
                                 ? "Cordon a node and move its jobs off (requeued) [cluster-admin]"
                                 : "Let a node receive work again [cluster-admin]";
    CLI::App* cmd = app.add_subcommand(verb, help);
    AddCommon(cmd, f->c, true);
    cmd->add_option("node", f->node, "Node name")->required();
    cmd->callback([f, verb, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, verb, [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res,
                api.Call("POST", "/api/v1/nodes/" + http::EncodeComponent(f->node) + "/" + verb));
        if (f->c.output == "json") {
          out << res.dump() << "\n";
        } else {
          out << "node " << f->node << ": " << Str(res, "state") << "\n";
        }
        return std::nullopt;
      });
    });
  }
  // --- queues ---
  if (CommandWanted("queues")) {
    auto c = std::make_shared<Common>();
    CLI::App* cmd = app.add_subcommand(
        "queues", "List queues: guaranteed, limit, in use, borrowed, pending [any role]");
    AddCommon(cmd, *c, true);
    cmd->callback([cmd, c, &exit_code, &out, &err] {
      if (!cmd->get_subcommands().empty()) return;
      exit_code = WithApi(*c, err, "queues", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("GET", "/api/v1/queues"));
        if (c->output == "json") {
          out << res["queues"].dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {
            {"TENANT", "QUEUE", "GUARANTEED", "LIMIT", "IN-USE", "BORROWED", "RUNNING", "PENDING"}};
        for (const auto& q : res["queues"]) {
          rows.push_back({Str(q, "tenant"), Str(q, "name"), Str(q, "guaranteed_gpus"),
                          Str(q, "limit_gpus"), Str(q, "gpus_in_use"), Str(q, "gpus_borrowed"),
                          Str(q, "running_jobs"), Str(q, "pending_jobs")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
    // "TENANT/QUEUE" -> the API path of that queue.
    auto queue_path = [](const std::string& text) -> std::variant<std::string, Failure> {
      const size_t slash = text.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == text.size() ||
          text.find('/', slash + 1) != std::string::npos) {
        return Failure{"expected TENANT/QUEUE (e.g. vision/train), got \"" + text + "\"",
                       kExitUsage};
      }
      return "/api/v1/queues/" + http::EncodeComponent(text.substr(0, slash)) + "/" +
             http::EncodeComponent(text.substr(slash + 1));
    };
    struct F {
      Common c;
      std::string queue, parent;
      int64_t guaranteed = 0, limit = 0;
      double weight = 1.0;
    };
    auto sf = std::make_shared<F>();
    CLI::App* set = cmd->add_subcommand(
        "set",
        "Create or change a queue within its tenant's quota (tenant-admin of the tenant, "
        "cluster-admin); options not given take their defaults");
    AddCommon(set, sf->c, true);
    set->add_option("queue", sf->queue, "TENANT/QUEUE")->required();
    set->add_option("--guaranteed", sf->guaranteed, "GPUs guaranteed to the queue")->required();
    set->add_option("--limit", sf->limit, "The most GPUs the queue may use, borrowing included")
        ->required();
    set->add_option("--weight", sf->weight, "Share of contested capacity (default 1)");
    set->add_option("--parent", sf->parent, "Parent queue in the same tenant (default: none)");
    set->callback([sf, queue_path, &exit_code, &out, &err] {
      exit_code = WithApi(sf->c, err, "queues set", [&](Api& api) -> std::optional<Failure> {
        auto path = queue_path(sf->queue);
        if (auto* f = std::get_if<Failure>(&path)) return *f;
        json body = {
            {"guaranteed_gpus", sf->guaranteed}, {"limit_gpus", sf->limit}, {"weight", sf->weight}};
        if (!sf->parent.empty()) body["parent"] = sf->parent;
        TY_CALL(res, api.Call("PUT", std::get<std::string>(path), body.dump()));
        if (sf->c.output == "json") {
          out << res.dump() << "\n";
        } else {
          out << "queue " << Str(res, "tenant") << "/" << Str(res, "name") << ": guaranteed "
              << Str(res, "guaranteed_gpus") << ", limit " << Str(res, "limit_gpus") << ", weight "
              << Str(res, "weight")
              << (Str(res, "parent").empty() ? "" : ", parent " + Str(res, "parent")) << "\n";
        }
        return std::nullopt;
      });
    });
    auto df = std::make_shared<F>();
    CLI::App* del =
        cmd->add_subcommand("delete", "Delete a queue with no unfinished jobs and no child queues");
    AddCommon(del, df->c, false);
    del->add_option("queue", df->queue, "TENANT/QUEUE")->required();
    del->callback([df, queue_path, &exit_code, &out, &err] {
      exit_code = WithApi(df->c, err, "queues delete", [&](Api& api) -> std::optional<Failure> {
        auto path = queue_path(df->queue);
        if (auto* f = std::get_if<Failure>(&path)) return *f;
        TY_CALL(res, api.Call("DELETE", std::get<std::string>(path)));
        out << "deleted queue " << df->queue << "\n";
        return std::nullopt;
      });
    });
  }
  // --- tenants ---
  if (CommandWanted("tenants")) {
    struct F {
      Common c;
      std::string name;
      int64_t guaranteed = 0, limit = 0;
      std::string run_as, allow_root;
    };
    auto lf = std::make_shared<F>();
    CLI::App* tenants =
        app.add_subcommand("tenants", "List tenants and their quotas; set a quota (cluster-admin)");
    AddCommon(tenants, lf->c, true);
    auto print_tenants = [&out](const Common& c, const json& list) {
      if (c.output == "json") {
        out << list.dump() << "\n";
        return;
      }
      std::vector<std::vector<std::string>> rows = {
          {"TENANT", "GUARANTEED", "LIMIT-PER-QUEUE", "RUN-AS", "DESCRIPTION"}};
      for (const auto& t : list) {
        std::string run_as = t.contains("run_as_uid")
                                 ? Str(t, "run_as_uid") + ":" + Str(t, "run_as_gid")
                                 : std::string("agent's");
        if (t.value("allow_root", false)) run_as += " (root allowed)";
        rows.push_back({Str(t, "name"), Str(t, "guaranteed_gpus"), Str(t, "limit_gpus"), run_as,
                        Str(t, "description")});
      }
      Table(out, rows);
    };
    tenants->callback([tenants, lf, print_tenants, &exit_code, &err] {
      if (!tenants->get_subcommands().empty()) return;
      exit_code = WithApi(lf->c, err, "tenants", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("GET", "/api/v1/tenants"));
        print_tenants(lf->c, res["tenants"]);
        return std::nullopt;
      });
    });
    auto qf = std::make_shared<F>();
    CLI::App* quota = tenants->add_subcommand(
        "quota",
        "Set a tenant's quota, creating the tenant if new (cluster-admin); its queues' "
        "limits above --limit are lowered to it");
    AddCommon(quota, qf->c, true);
    quota->add_option("tenant", qf->name, "Tenant name")->required();
    quota
        ->add_option("--guaranteed", qf->guaranteed,
                     "The most GPUs its queues' guarantees may add up to")
        ->required();
    quota->add_option("--limit", qf->limit, "The most GPUs any one of its queues' limit may be")
        ->required();
    quota->callback([qf, print_tenants, &exit_code, &err] {
      exit_code = WithApi(qf->c, err, "tenants quota", [&](Api& api) -> std::optional<Failure> {
        json body = {{"guaranteed_gpus", qf->guaranteed}, {"limit_gpus", qf->limit}};
        TY_CALL(res,
                api.Call("PUT", "/api/v1/tenants/" + http::EncodeComponent(qf->name) + "/quota",
                         body.dump()));
        print_tenants(qf->c, json::array({res}));
        return std::nullopt;
      });
    });
    auto uf = std::make_shared<F>();
    CLI::App* update = tenants->add_subcommand(
        "update",
        "Set the Unix identity a tenant's ranks run as on the nodes (cluster-admin; "
        "docs/execution.md)");
    AddCommon(update, uf->c, true);
    update->add_option("tenant", uf->name, "Tenant name")->required();
    update
        ->add_option("--run-as", uf->run_as,
                     "UID:GID its ranks run as, or \"\" for none (the agents' --unmapped-run-as, "
                     "nobody on a root agent)")
        ->required();
    update->add_option("--allow-root", uf->allow_root,
                       "true: root's ids (0) may be used; false: not (the default)");
    update->callback([uf, print_tenants, &exit_code, &err] {
      exit_code = WithApi(uf->c, err, "tenants update", [&](Api& api) -> std::optional<Failure> {
        json body = {{"run_as", uf->run_as}};
        if (uf->allow_root == "true" || uf->allow_root == "false") {
          body["allow_root"] = uf->allow_root == "true";
        } else if (!uf->allow_root.empty()) {
          body["allow_root"] = uf->allow_root;  // the server names the value and what is valid
        }
        TY_CALL(res,
                api.Call("PUT", "/api/v1/tenants/" + http::EncodeComponent(uf->name) + "/run-as",
                         body.dump()));
        print_tenants(uf->c, json::array({res}));
        return std::nullopt;
      });
    });
  }
  // --- identity: whoami, users, tokens, audit ---
  if (CommandWanted("whoami")) {
    auto c = std::make_shared<Common>();
    CLI::App* cmd =
        app.add_subcommand("whoami", "Show the user, tenant and role of your token [any role]");
    AddCommon(cmd, *c, true);
    cmd->callback([c, &exit_code, &out, &err] {
      exit_code = WithApi(*c, err, "whoami", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("GET", "/api/v1/whoami"));
        if (c->output == "json") {
          out << res.dump() << "\n";
        } else {
          out << Str(res, "user") << " (" << Str(res, "role")
              << (Str(res, "tenant").empty() ? "" : " of tenant " + Str(res, "tenant"))
              << (Str(res, "token_id").empty() ? "" : "; token " + Str(res, "token_id")) << ")\n";
        }
        return std::nullopt;
      });
    });
  }
  if (CommandWanted("users")) {
    CLI::App* users =
        app.add_subcommand("users", "List and manage users (tenant-admin or cluster-admin)");
    auto lc = std::make_shared<Common>();
    AddCommon(users, *lc, true);
    auto print_users = [&out](const Common& c, const json& list) {
      if (c.output == "json") {
        out << list.dump() << "\n";
        return;
      }
      std::vector<std::vector<std::string>> rows = {
          {"NAME", "TENANT", "ROLE", "PRIORITY-CLASSES", "RUN-AS", "CREATED-BY"}};
      for (const auto& u : list) {
        std::string classes;
        for (const auto& pc : u["priority_classes"]) {
          classes += (classes.empty() ? "" : ",") + pc.get<std::string>();
        }
        // A user without its own identity runs as its tenant's.
        const std::string run_as = u.contains("run_as") && u["run_as"].is_string()
                                       ? u["run_as"].get<std::string>()
                                       : std::string("tenant's");
        rows.push_back({Str(u, "name"), Str(u, "tenant"), Str(u, "role"), classes, run_as,
                        Str(u, "created_by")});
      }
      Table(out, rows);
    };
    users->callback([users, lc, print_users, &exit_code, &err] {
      if (!users->get_subcommands().empty()) return;
      exit_code = WithApi(*lc, err, "users", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("GET", "/api/v1/users"));
        print_users(*lc, res["users"]);
        return std::nullopt;
      });
    });
    struct F {
      Common c;
      std::string name, tenant, role, run_as;
      std::vector<std::string> classes;
    };
    auto cf = std::make_shared<F>();
    CLI::App* create =
        users->add_subcommand("create", "Create a user in a tenant [tenant-admin, cluster-admin]");
    AddCommon(create, cf->c, true);
    create->add_option("name", cf->name, "User name (a-z 0-9 . _ -)")->required();
    create->add_option("--tenant", cf->tenant,
                       "Tenant (created with a default queue if new; default: yours)");
    create->add_option("--role", cf->role,
                       "viewer, member (default), tenant-admin or cluster-admin");
    create->add_option("--priority-class", cf->classes,
                       "Grant a priority class above the default (repeatable; cluster-admin)");
    create->callback([cf, print_users, &exit_code, &err] {
      exit_code = WithApi(cf->c, err, "users create", [&](Api& api) -> std::optional<Failure> {
        json body = {{"name", cf->name}};
        if (!cf->tenant.empty()) body["tenant"] = cf->tenant;
        if (!cf->role.empty()) body["role"] = cf->role;
        if (!cf->classes.empty()) body["priority_classes"] = cf->classes;
        TY_CALL(res, api.Call("POST", "/api/v1/users", body.dump()));
        print_users(cf->c, json::array({res}));
        return std::nullopt;
      });
    });
    auto uf = std::make_shared<F>();
    CLI::App* update = users->add_subcommand(
        "update",
        "Change a user's role, granted priority classes or Unix identity [tenant-admin; grants "
        "and identities: cluster-admin]");
    AddCommon(update, uf->c, true);
    update->add_option("name", uf->name, "User name")->required();
    update->add_option("--role", uf->role, "viewer, member, tenant-admin or cluster-admin");
    auto* grant = update->add_option("--priority-class", uf->classes,
                                     "The priority classes granted, replacing the list "
                                     "(repeatable; pass \"\" for none; cluster-admin)");
    auto* run_as = update->add_option(
        "--run-as", uf->run_as,
        "The Unix identity UID:GID this user's jobs run as from now on, in place of its "
        "tenant's (\"\": the tenant's again; never root; cluster-admin)");
    update->callback([uf, grant, run_as, print_users, &exit_code, &err] {
      exit_code = WithApi(uf->c, err, "users update", [&](Api& api) -> std::optional<Failure> {
        json body = json::object();
        if (!uf->role.empty()) body["role"] = uf->role;
        if (grant->count() > 0) {
          json classes = json::array();
          for (const auto& pc : uf->classes) {
            if (!pc.empty()) classes.push_back(pc);
          }
          body["priority_classes"] = classes;
        }
        if (run_as->count() > 0) body["run_as"] = uf->run_as;
        TY_CALL(res,
                api.Call("PATCH", "/api/v1/users/" + http::EncodeComponent(uf->name), body.dump()));
        print_users(uf->c, json::array({res}));
        return std::nullopt;
      });
    });
    auto df = std::make_shared<F>();
    CLI::App* del = users->add_subcommand(
        "delete", "Delete a user and its tokens [tenant-admin, cluster-admin]");
    AddCommon(del, df->c, false);
    del->add_option("name", df->name, "User name")->required();
    del->callback([df, &exit_code, &out, &err] {
      exit_code = WithApi(df->c, err, "users delete", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("DELETE", "/api/v1/users/" + http::EncodeComponent(df->name)));
        out << "deleted user " << df->name << "\n";
        return std::nullopt;
      });
    });
  }
  if (CommandWanted("tokens")) {
    struct F {
      Common c;
      std::string user, description, expires, id;
    };
    CLI::App* tokens = app.add_subcommand(
        "tokens", "List, create and revoke API tokens (your own; a tenant-admin's for its users)");
    auto lf = std::make_shared<F>();
    AddCommon(tokens, lf->c, true);
    tokens->add_option("--user", lf->user, "Whose tokens (default: yours)");
    auto age = [](const json& t, const char* key) {
      auto it = t.find(key);
      if (it == t.end() || it->is_null()) return std::string("-");
      return FormatTimestamp(Timestamp(Duration(it->get<int64_t>())));
    };
    tokens->callback([tokens, lf, age, &exit_code, &out, &err] {
      if (!tokens->get_subcommands().empty()) return;
      exit_code = WithApi(lf->c, err, "tokens", [&](Api& api) -> std::optional<Failure> {
        std::string path = "/api/v1/tokens";
        if (!lf->user.empty()) path += "?user=" + http::EncodeComponent(lf->user);
        TY_CALL(res, api.Call("GET", path));
        if (lf->c.output == "json") {
          out << res["tokens"].dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {
            {"ID", "USER", "CREATED", "EXPIRES", "REVOKED", "DESCRIPTION"}};
        for (const auto& t : res["tokens"]) {
          rows.push_back({Str(t, "id"), Str(t, "user"), age(t, "created_ms"), age(t, "expires_ms"),
                          age(t, "revoked_ms"), Str(t, "description")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
    auto cf = std::make_shared<F>();
    CLI::App* create = tokens->add_subcommand(
        "create", "Create a token; it is printed once, on stdout, and kept nowhere");
    AddCommon(create, cf->c, true);
    create->add_option("--user", cf->user, "For this user (default: you)");
    create->add_option("--description", cf->description, "What it is for (at most 200 bytes)");
    create->add_option("--expires", cf->expires, "Lifetime: 90d, 12h (default: never expires)");
    create->callback([cf, &exit_code, &out, &err] {
      exit_code = WithApi(cf->c, err, "tokens create", [&](Api& api) -> std::optional<Failure> {
        json body = json::object();
        if (!cf->user.empty()) body["user"] = cf->user;
        if (!cf->description.empty()) body["description"] = cf->description;
        if (!cf->expires.empty()) body["expires_in"] = cf->expires;
        TY_CALL(res, api.Call("POST", "/api/v1/tokens", body.dump()));
        if (cf->c.output == "json") {
          out << res.dump() << "\n";
        } else {
          out << Str(res, "token") << "\n";
          err << "token " << Str(res, "id") << " for user " << Str(res, "user")
              << ": shown once; keep it in a file of mode 0600 and point TRAINYARD_TOKEN or "
                 "--token-file at it\n";
        }
        return std::nullopt;
      });
    });
    auto rf = std::make_shared<F>();
    CLI::App* revoke =
        tokens->add_subcommand("revoke", "Revoke a token at once [its owner, tenant-admin]");
    AddCommon(revoke, rf->c, false);
    revoke->add_option("id", rf->id, "Token id (the 12 hex digits after tyt_)")->required();
    revoke->callback([rf, &exit_code, &out, &err] {
      exit_code = WithApi(rf->c, err, "tokens revoke", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(res, api.Call("DELETE", "/api/v1/tokens/" + http::EncodeComponent(rf->id)));
        out << "revoked token " << Str(res, "id") << " of user " << Str(res, "user") << "\n";
        return std::nullopt;
      });
    });
  }
  if (CommandWanted("audit")) {
    struct F {
      Common c;
      std::string actor, tenant, object;
      int64_t limit = 50;
      int64_t after = 0;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "audit", "Who did what to which object, when and from where (tenant-admin or above)");
    AddCommon(cmd, f->c, true);
    cmd->add_option("--actor", f->actor, "Only this actor (user:alice)");
    cmd->add_option("--tenant", f->tenant, "Only objects of this tenant");
    cmd->add_option("--object", f->object, "Only this object (job/42, user/bob, node/gpu-1)");
    cmd->add_option("--after", f->after, "Entries after this sequence number");
    cmd->add_option("--limit", f->limit, "At most this many entries")->capture_default_str();
    cmd->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "audit", [&](Api& api) -> std::optional<Failure> {
        std::string q = "limit=" + std::to_string(f->limit) + "&after=" + std::to_string(f->after);
        for (const auto& [k, v] : {std::pair<const char*, const std::string*>{"actor", &f->actor},
                                   {"tenant", &f->tenant},
                                   {"object", &f->object}}) {
          if (!v->empty()) q += std::string("&") + k + "=" + http::EncodeComponent(*v);
        }
        TY_CALL(res, api.Call("GET", "/api/v1/audit?" + q));
        if (f->c.output == "json") {
          out << res["entries"].dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {
            {"SEQ", "TIME", "ACTOR", "ACTION", "OBJECT", "STATUS", "FROM", "MESSAGE"}};
        for (const auto& e : res["entries"]) {
          rows.push_back({Str(e, "seq"),
                          FormatTimestamp(Timestamp(Duration(e.value("time_ms", int64_t{0})))),
                          Str(e, "actor"), Str(e, "action"), Str(e, "object"), Str(e, "status"),
                          Str(e, "source"), Str(e, "message")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
  }
}

}  // namespace trainyard::cli
