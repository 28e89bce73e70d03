#include "cli/monitor_cmd.h"

#include <ctime>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/client.h"
#include "monitor/rules.h"

namespace trainyard::cli {
namespace {

std::string Enc(const std::string& s) { return http::EncodeComponent(s); }

// "job_id=17 node=node-1 gpu=2": the labels that say what an alert is about.
std::string Subject(const json& labels) {
  std::string out;
  for (const char* k : {"job_id", "node", "gpu", "rank", "link", "path"}) {
    if (labels.contains(k)) out += (out.empty() ? "" : " ") + std::string(k) + "=" + Str(labels, k);
  }
  return out.empty() ? "-" : out;
}

// "3m ago" from an RFC 3339 time the server sent; "-" when absent.
std::string Since(const json& j, const char* key) {
  const std::string t = Str(j, key);
  if (t.empty()) return "-";
  std::tm tm{};
  std::istringstream in(t);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return t;
  const int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  return Age(ms) + " ago";
}

}  // namespace

void AddMonitorCommands(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err) {
  // --- alerts ---
  if (CommandWanted("alerts")) {
    CLI::App* alerts = app.add_subcommand(
        "alerts",
        "Pending, firing and recently resolved alerts [any role; your tenant's and "
        "the nodes']");
    {
      struct F {
        Common c;
        std::string state, rule, job, node;
      };
      auto f = std::make_shared<F>();
      AddCommon(alerts, f->c, true);
      alerts->add_option("--state", f->state,
                         "Only these states: pending, firing, resolved "
                         "(comma-separated)");
      alerts->add_option("--rule", f->rule, "Only alerts of this rule");
      alerts->add_option("--job", f->job, "Only alerts about this job");
      alerts->add_option("--node", f->node, "Only alerts about this node");
      alerts->callback([alerts, f, &exit_code, &out, &err] {
        if (!alerts->get_subcommands().empty()) return;
        exit_code = WithApi(f->c, err, "alerts", [&](Api& api) -> std::optional<Failure> {
          std::string q;
          for (auto [k, v] : {std::pair{"state", &f->state},
                              {"rule", &f->rule},
                              {"job", &f->job},
                              {"node", &f->node}}) {
            if (!v->empty()) q += (q.empty() ? "?" : "&") + std::string(k) + "=" + Enc(*v);
          }
          TY_CALL(res, api.Call("GET", "/api/v1/alerts" + q));
          if (f->c.output == "json") {
            out << res.dump() << "\n";
            return std::nullopt;
          }
          if (res["alerts"].empty()) {
            out << "no alerts\n";
            return std::nullopt;
          }
          std::vector<std::vector<std::string>> rows = {
              {"STATE", "ALERT", "SEVERITY", "ABOUT", "SINCE", "SUMMARY"}};
          for (const json& a : res["alerts"]) {
            const char* since = Str(a, "state") == "resolved" ? "ends_at"
                                : Str(a, "state") == "firing" ? "starts_at"
                                                              : "active_at";
            rows.push_back({Str(a, "state"), Str(a, "rule"), Str(a["labels"], "severity"),
                            Subject(a["labels"]), Since(a, since),
                            Str(a["annotations"], "summary")});
          }
          Table(out, rows);
          return std::nullopt;
        });
      });
    }
    {
      struct F {
        Common c;
        int limit = 50;
      };
      auto f = std::make_shared<F>();
      CLI::App* cmd = alerts->add_subcommand(
          "events", "Recent alert transitions and the actions taken, newest first [any role]");
      AddCommon(cmd, f->c, true);
      cmd->add_option("--limit", f->limit, "At most this many")->capture_default_str();
      cmd->callback([f, &exit_code, &out, &err] {
        exit_code = WithApi(f->c, err, "alerts events", [&](Api& api) -> std::optional<Failure> {
          TY_CALL(res, api.Call("GET", "/api/v1/alerts/events?limit=" + std::to_string(f->limit)));
          if (f->c.output == "json") {
            out << res.dump() << "\n";
            return std::nullopt;
          }
          std::vector<std::vector<std::string>> rows = {
              {"WHEN", "EVENT", "ALERT", "ABOUT", "DETAIL"}};
          for (const json& e : res["events"]) {
            rows.push_back({Since(e, "at"), Str(e, "kind"), Str(e, "rule"), Subject(e["labels"]),
                            Str(e, "detail")});
          }
          Table(out, rows);
          return std::nullopt;
        });
      });
    }
    {
      auto c = std::make_shared<Common>();
      CLI::App* cmd = alerts->add_subcommand("rules", "The rules the server evaluates [any role]");
      AddCommon(cmd, *c, true);
      cmd->callback([c, &exit_code, &out, &err] {
        exit_code = WithApi(*c, err, "alerts rules", [&](Api& api) -> std::optional<Failure> {
          TY_CALL(res, api.Call("GET", "/api/v1/alerts/rules"));
          if (c->output == "json") {
            out << res.dump() << "\n";
            return std::nullopt;
          }
          std::vector<std::vector<std::string>> rows = {
              {"RULE", "SIGNAL", "CONDITION", "FOR", "SEVERITY", "ACTION"}};
          for (const json& r : res["rules"]) {
            rows.push_back({Str(r, "name"), Str(r, "signal"),
                            Str(r, "condition") + " " + Str(r, "threshold"), Str(r, "for"),
                            Str(r, "severity"), Str(r, "action")});
          }
          Table(out, rows);
          return std::nullopt;
        });
      });
    }
    {
      auto file = std::make_shared<std::string>();
      CLI::App* cmd = alerts->add_subcommand(
          "check", "Validate an alert rules file against the built-in rules, offline");
      cmd->add_option("file", *file, "Rules file (YAML)")->required();
      cmd->callback([file, &exit_code, &out, &err] {
        std::ifstream in(*file);
        if (!in) {
          err << "trainyard alerts check: cannot read " << *file << "\n";
          exit_code = kExitFailure;
          return;
        }
        std::stringstream text;
        text << in.rdbuf();
        auto rules = monitor::LoadRules(monitor::DefaultRulesYaml(), text.str(), *file);
        if (!rules.ok()) {
          err << rules.status().message() << "\n";
          exit_code = kExitUsage;
          return;
        }
        out << *file << ": ok, " << rules->rules.size() << " rules (" << rules->disabled.size()
            << " built-in disabled)\n";
        exit_code = kExitOk;
      });
    }
  }

  // --- diagnose ---
  if (CommandWanted("diagnose")) {
    struct F {
      Common c;
      std::string id;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = app.add_subcommand(
        "diagnose",
        "Walk system -> communication -> training over a job's signals and say what is wrong, "
        "with evidence and the next step; exit status 0: nothing found, 3: found [any role of "
        "its tenant]");
    AddCommon(cmd, f->c, true);
    cmd->add_option("job", f->id, "Job id")->required();
    cmd->callback([f, &exit_code, &out, &err] {
      bool found = false;
      exit_code = WithApi(f->c, err, "diagnose", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(d, api.Call("GET", "/api/v1/jobs/" + Enc(f->id) + "/diagnosis"));
        found = d.value("found", false);
        if (f->c.output == "json") {
          d.erase("text");
          out << d.dump(2) << "\n";
        } else {
          out << Str(d, "text");
        }
        return std::nullopt;
      });
      if (exit_code == kExitOk && found) exit_code = kExitFound;
    });
  }

  // --- fault ---
  if (!CommandWanted("fault")) return;
  CLI::App* fault =
      app.add_subcommand("fault",
                         "Inject simulated faults into nodes, for demos and tests (docs/faults.md) "
                         "[cluster-admin]");
  fault->require_subcommand(1);
  {
    struct F {
      Common c;
      std::string node, kind, duration;
      int gpu = -1;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = fault->add_subcommand(
        "inject", "Make a node's GPUs, links or training processes misbehave");
    AddCommon(cmd, f->c, true);
    cmd->add_option("--node", f->node, "Node")->required();
    cmd->add_option("--gpu", f->gpu, "GPU index; default: the whole node");
    cmd->add_option("--kind", f->kind,
                    "xid, ecc, thermal, link-down, slow, hang, data-stall, loss-nan, grad-spike")
        ->required();
    cmd->add_option("--duration", f->duration, "Clear by itself after this long (e.g. 5m)");
    cmd->callback([f, &exit_code, &out, &err] {
      exit_code = WithApi(f->c, err, "fault inject", [&](Api& api) -> std::optional<Failure> {
        json body = {{"kind", f->kind}, {"gpu", f->gpu}};
        if (!f->duration.empty()) body["duration"] = f->duration;
        TY_CALL(r, api.Call("POST", "/api/v1/nodes/" + Enc(f->node) + "/faults", body.dump()));
        if (f->c.output == "json") {
          out << r.dump() << "\n";
        } else {
          out << "fault " << Str(r, "id") << ": " << Str(r, "kind") << " on " << Str(r, "node")
              << (r.value("gpu", -1) >= 0 ? " GPU " + Str(r, "gpu") : std::string(" (whole node)"))
              << "\n";
        }
        return std::nullopt;
      });
    });
  }
  {
    struct F {
      Common c;
      std::string node, id;
      bool all = false;
    };
    auto f = std::make_shared<F>();
    CLI::App* cmd = fault->add_subcommand("clear", "Clear injected faults");
    AddCommon(cmd, f->c, false);
    cmd->add_option("--node", f->node, "Node whose faults to clear");
    cmd->add_option("--id", f->id, "Only this fault (needs --node)");
    cmd->add_flag("--all", f->all, "Every fault of every node");
    cmd->callback([f, &exit_code, &out, &err] {
      if (f->node.empty() == !f->all || (!f->id.empty() && f->node.empty())) {
        err << "trainyard fault clear: give --node NODE [--id F], or --all\n";
        exit_code = kExitUsage;
        return;
      }
      exit_code = WithApi(f->c, err, "fault clear", [&](Api& api) -> std::optional<Failure> {
        const std::string path = f->all ? "/api/v1/faults"
                                        : "/api/v1/nodes/" + Enc(f->node) + "/faults" +
                                              (f->id.empty() ? "" : "/" + Enc(f->id));
        TY_CALL(r, api.Call("DELETE", path));
        out << "cleared " << Str(r, "cleared") << " fault(s)\n";
        return std::nullopt;
      });
    });
  }
  {
    auto c = std::make_shared<Common>();
    CLI::App* cmd = fault->add_subcommand("list", "Faults now injected");
    AddCommon(cmd, *c, true);
    cmd->callback([c, &exit_code, &out, &err] {
      exit_code = WithApi(*c, err, "fault list", [&](Api& api) -> std::optional<Failure> {
        TY_CALL(r, api.Call("GET", "/api/v1/faults"));
        if (c->output == "json") {
          out << r.dump() << "\n";
          return std::nullopt;
        }
        std::vector<std::vector<std::string>> rows = {{"ID", "NODE", "GPU", "KIND", "UNTIL", "BY"}};
        for (const json& x : r["faults"]) {
          const int64_t until = x.value("until_ms", int64_t{0});
          rows.push_back(
              {Str(x, "id"), Str(x, "node"), x.value("gpu", -1) < 0 ? "all" : Str(x, "gpu"),
               Str(x, "kind"),
               until == 0 ? "until cleared" : FormatTimestamp(Timestamp(Duration(until))),
               Str(x, "actor")});
        }
        Table(out, rows);
        return std::nullopt;
      });
    });
  }
}

}  // namespace trainyard::cli
