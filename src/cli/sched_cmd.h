// `trainyard sched replay SCENARIO [-o text|json]`: runs a scenario file (a tiny
// cluster and a script of events, sim/scenario.h) through the scheduling policy one
// step at a time, with no daemon, and prints what happened before each pass and what
// the pass decided, then a summary per job. Golden files of this output pin the
// scheduler's behaviour down (tests/sched/).
//
// Exit statuses: 0 when the replay ran and every pass kept the scheduler's
// contracts; 1 when some pass broke one (printed as `!! violation` lines); 2 when
// the scenario is invalid (each problem as FILE:LINE: FIELD: message).
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/replay.h"
#include "sim/scenario.h"

namespace trainyard::cli {

struct SchedReplayOptions {
  std::string file;             // "-" reads standard input
  std::string output = "text";  // text | json
};

int RunSchedReplay(const SchedReplayOptions& options, std::istream& in, std::ostream& out,
                   std::ostream& err);

// The two output forms. Text: one block per step ("== step N at T"), event lines
// starting with "+", one line per decision, then "== summary". JSON: {"steps": [...],
// "jobs": [...]} with stable keys; times as durations from time 0 ("1h30m") and as
// integer milliseconds under keys ending in "_ms".
std::string RenderReplayText(const sim::ReplayResult& result);
nlohmann::ordered_json RenderReplayJson(const sim::ReplayResult& result);

void AddSchedCommand(CLI::App& app, int& exit_code, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
