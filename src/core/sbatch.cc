#include "core/sbatch.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "core/resources.h"
#include "core/units.h"

namespace trainyard {
namespace {

constexpr std::string_view kMagic = "#SBATCH";
// More diagnostics than this of one kind are counted, not listed: a megabyte of
// repeated bad lines should not turn into a megabyte of messages.
constexpr size_t kMaxDiagnostics = 100;
// Slurm's limit on the SECS of --signal=SIG@SECS.
constexpr int64_t kMaxSignalSeconds = 65535;

enum class Arg { kNone, kRequired, kOptional };

// What an sbatch option means here. kUnsupported: a real sbatch option that
// Trainyard warns about and ignores.
enum class Opt {
  kUnsupported,
  kJobName,
  kNodes,
  kNtasks,
  kNtasksPerNode,
  kGres,
  kGpusPerNode,
  kCpusPerTask,
  kMem,
  kTime,
  kPartition,
  kQos,
  kAccount,
  kSignal,
  kRequeue,  // --requeue and --no-requeue share this slot: the last one counts
  kOutput,
  kError,
  kChdir,
  kCount,
};

struct OptionInfo {
  std::string_view name;  // the long name, without "--"
  char short_name;        // 0: none
  Arg arg;
  Opt opt;
  // Supported options: an example for "needs a value". Unsupported ones: what to do
  // instead, appended to the warning (may be empty).
  std::string_view note;
};

// Every sbatch option (Slurm 23.x man page). Aliases sbatch accepts are listed too.
constexpr OptionInfo kOptions[] = {
    {"account", 'A', Arg::kRequired, Opt::kAccount, "--account=team-a"},
    {"acctg-freq", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"array", 'a', Arg::kRequired, Opt::kUnsupported,
     "Trainyard has no job arrays; submit one job per index"},
    {"batch", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"bb", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"bbf", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"begin", 'b', Arg::kRequired, Opt::kUnsupported, ""},
    {"chdir", 'D', Arg::kRequired, Opt::kChdir, "--chdir=/work/project"},
    {"cluster-constraint", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"clusters", 'M', Arg::kRequired, Opt::kUnsupported, ""},
    {"comment", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"constraint", 'C', Arg::kRequired, Opt::kUnsupported,
     "to ask for a GPU model use --gres=gpu:TYPE:COUNT"},
    {"container", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"container-id", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"contiguous", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"core-spec", 'S', Arg::kRequired, Opt::kUnsupported, ""},
    {"cores-per-socket", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"cpu-freq", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"cpus-per-gpu", 0, Arg::kRequired, Opt::kUnsupported, "use --cpus-per-task"},
    {"cpus-per-task", 'c', Arg::kRequired, Opt::kCpusPerTask, "--cpus-per-task=8"},
    {"deadline", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"delay-boot", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"dependency", 'd', Arg::kRequired, Opt::kUnsupported, "the job will not wait for other jobs"},
    {"distribution", 'm', Arg::kRequired, Opt::kUnsupported, ""},
    {"error", 'e', Arg::kRequired, Opt::kError, "--error=%x-%j.err"},
    {"exclude", 'x', Arg::kRequired, Opt::kUnsupported, ""},
    {"exclusive", 0, Arg::kOptional, Opt::kUnsupported, ""},
    {"export", 0, Arg::kRequired, Opt::kUnsupported,
     "the submitting shell's environment is not passed on; set variables in the script"},
    {"export-file", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"extra", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"extra-node-info", 'B', Arg::kRequired, Opt::kUnsupported, ""},
    {"get-user-env", 0, Arg::kOptional, Opt::kUnsupported, ""},
    {"gid", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"gpu-bind", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"gpu-freq", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"gpus", 'G', Arg::kRequired, Opt::kUnsupported,
     "use --gpus-per-node=COUNT or --gres=gpu:COUNT, or the job gets no GPUs"},
    {"gpus-per-node", 0, Arg::kRequired, Opt::kGpusPerNode, "--gpus-per-node=8"},
    {"gpus-per-socket", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"gpus-per-task", 0, Arg::kRequired, Opt::kUnsupported,
     "use --gpus-per-node=COUNT or --gres=gpu:COUNT, or the job gets no GPUs"},
    {"gres", 0, Arg::kRequired, Opt::kGres, "--gres=gpu:8"},
    {"gres-flags", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"help", 'h', Arg::kNone, Opt::kUnsupported, ""},
    {"hint", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"hold", 'H', Arg::kNone, Opt::kUnsupported, ""},
    {"ignore-pbs", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"input", 'i', Arg::kRequired, Opt::kUnsupported, ""},
    {"job-name", 'J', Arg::kRequired, Opt::kJobName, "--job-name=train"},
    {"kill-on-invalid-dep", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"licenses", 'L', Arg::kRequired, Opt::kUnsupported, ""},
    {"mail-type", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"mail-user", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"mcs-label", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"mem", 0, Arg::kRequired, Opt::kMem, "--mem=64G"},
    {"mem-bind", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"mem-per-cpu", 0, Arg::kRequired, Opt::kUnsupported, "use --mem (memory per node)"},
    {"mem-per-gpu", 0, Arg::kRequired, Opt::kUnsupported, "use --mem (memory per node)"},
    {"mincpus", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"network", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"nice", 0, Arg::kOptional, Opt::kUnsupported, ""},
    {"no-kill", 'k', Arg::kOptional, Opt::kUnsupported, ""},
    {"no-requeue", 0, Arg::kNone, Opt::kRequeue, ""},
    {"nodefile", 'F', Arg::kRequired, Opt::kUnsupported, ""},
    {"nodelist", 'w', Arg::kRequired, Opt::kUnsupported, ""},
    {"nodes", 'N', Arg::kRequired, Opt::kNodes, "--nodes=2"},
    {"ntasks", 'n', Arg::kRequired, Opt::kNtasks, "--ntasks=8"},
    {"ntasks-per-core", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"ntasks-per-gpu", 0, Arg::kRequired, Opt::kUnsupported, "use --ntasks-per-node"},
    {"ntasks-per-node", 0, Arg::kRequired, Opt::kNtasksPerNode, "--ntasks-per-node=8"},
    {"ntasks-per-socket", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"open-mode", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"output", 'o', Arg::kRequired, Opt::kOutput, "--output=%x-%j.out"},
    {"overcommit", 'O', Arg::kNone, Opt::kUnsupported, ""},
    {"oversubscribe", 's', Arg::kNone, Opt::kUnsupported, ""},
    {"parsable", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"partition", 'p', Arg::kRequired, Opt::kPartition, "--partition=gpu"},
    {"power", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"prefer", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"priority", 0, Arg::kRequired, Opt::kUnsupported, "use --qos to choose a priority class"},
    {"profile", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"propagate", 0, Arg::kOptional, Opt::kUnsupported, ""},
    {"qos", 'q', Arg::kRequired, Opt::kQos, "--qos=high"},
    {"quiet", 'Q', Arg::kNone, Opt::kUnsupported, ""},
    {"reboot", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"requeue", 0, Arg::kNone, Opt::kRequeue, ""},
    {"reservation", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"resv-ports", 0, Arg::kOptional, Opt::kUnsupported, ""},
    {"share", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"signal", 0, Arg::kRequired, Opt::kSignal, "--signal=USR1@120"},
    {"sockets-per-node", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"spread-job", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"switches", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"tasks-per-node", 0, Arg::kRequired, Opt::kNtasksPerNode, "--tasks-per-node=8"},
    {"test-only", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"thread-spec", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"threads-per-core", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"time", 't', Arg::kRequired, Opt::kTime, "--time=1-00:00:00"},
    {"time-min", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"tmp", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"tres-bind", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"tres-per-task", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"uid", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"usage", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"use-min-nodes", 0, Arg::kNone, Opt::kUnsupported, ""},
    {"verbose", 'v', Arg::kNone, Opt::kUnsupported, ""},
    {"version", 'V', Arg::kNone, Opt::kUnsupported, ""},
    {"wait", 'W', Arg::kNone, Opt::kUnsupported, ""},
    {"wait-all-nodes", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"wckey", 0, Arg::kRequired, Opt::kUnsupported, ""},
    {"wrap", 0, Arg::kRequired, Opt::kUnsupported, "put the command in the script"},
};

constexpr std::string_view kSupportedLong =
    "--job-name, --nodes, --ntasks, --ntasks-per-node, --gres, --gpus-per-node, "
    "--cpus-per-task, --mem, --time, --partition, --qos, --account, --signal, --requeue, "
    "--no-requeue, --output, --error and --chdir";
constexpr std::string_view kSupportedShort = "-J, -N, -n, -c, -t, -p, -q, -A, -o, -e and -D";

const OptionInfo* FindLong(std::string_view name) {
  for (const auto& o : kOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

const OptionInfo* FindShort(char c) {
  for (const auto& o : kOptions) {
    if (c != 0 && o.short_name == c) return &o;
  }
  return nullptr;
}

const std::vector<std::string_view>& LongNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string_view>;
    for (const auto& o : kOptions) v->push_back(o.name);
    return v;
  }();
  return *names;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

char Upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }
char Lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string UpperCase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Upper(c);
  return out;
}

// A number as written, cut short for messages.
std::string ShowNumber(std::string_view digits) {
  constexpr size_t kMax = 40;
  if (digits.size() <= kMax) return std::string(digits);
  return std::string(digits.substr(0, kMax)) + "...";
}

// A whole number in [lo, hi]. `expected` describes a valid value ("a node count
// such as 2"); range errors read like ValidateSpec's ("must be >= 1, got 0").
Result<int64_t> ParseCount(std::string_view text, int64_t lo, int64_t hi,
                           std::string_view expected) {
  if (!IsDigits(text)) {
    return InvalidArgument("expected " + std::string(expected) + ", got " + QuoteForMessage(text));
  }
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr != text.data() + text.size() || n > hi) {
    return InvalidArgument("must be <= " + std::to_string(hi) + ", got " + ShowNumber(text));
  }
  if (n < lo) {
    return InvalidArgument("must be >= " + std::to_string(lo) + ", got " + ShowNumber(text));
  }
  return n;
}

// Slurm's --time forms: "MINUTES", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS"; "UNLIMITED", "INFINITE", "-1" and "0" mean no limit.
Result<Duration> ParseSlurmTime(std::string_view text) {
  const std::string upper = UpperCase(text);
  if (upper == "UNLIMITED" || upper == "INFINITE" || upper == "-1") return Duration(0);
  const Status invalid = InvalidArgument(
      "expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED, got " +
      QuoteForMessage(text));
  const bool has_colon = text.find(':') != std::string_view::npos;
  if (!IsDigits(text) && !has_colon && text.find('-') == std::string_view::npos) return invalid;
  // ParseDuration reads the colon forms; "MINUTES" and "D-HH" become "MM:SS" and
  // "D-HH:MM".
  Result<Duration> d = ParseDuration(has_colon ? std::string(text) : std::string(text) + ":00");
  if (!d.ok()) return invalid;
  return d;
}

// Slurm's --mem: a whole number with an optional K, M, G or T suffix (binary
// multiples, any case, optionally followed by B); a plain number is megabytes.
Result<int64_t> ParseSlurmMemory(std::string_view text) {
  const std::string expected =
      "expected a size per node such as 64G, 512M or 4096 (a plain number is megabytes), got " +
      QuoteForMessage(text);
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0) return InvalidArgument(expected);
  std::string_view unit = text.substr(i);
  int64_t mult = kMiB;
  if (!unit.empty()) {
    static constexpr std::pair<char, int64_t> kUnits[] = {
        {'K', kKiB}, {'M', kMiB}, {'G', kGiB}, {'T', kTiB}};
    const auto* u = std::find_if(std::begin(kUnits), std::end(kUnits),
                                 [&](const auto& p) { return p.first == Upper(unit[0]); });
    if (u == std::end(kUnits)) return InvalidArgument(expected);
    mult = u->second;
    unit.remove_prefix(1);
    if (!unit.empty() && Upper(unit[0]) == 'B') unit.remove_prefix(1);
    if (!unit.empty()) return InvalidArgument(expected);
  }
  const std::string too_large =
      "must be at most 64T per node, got " + QuoteForMessage(text.substr(0, 60));
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, n);
  if (ec != std::errc() || ptr != text.data() + i) return InvalidArgument(too_large);
  int64_t bytes = SaturatingMul(n, mult);
  if (bytes > SpecLimits::kMaxMemoryPerReplica) return InvalidArgument(too_large);
  return bytes;
}

// Splits the rest of a directive line into words the way sbatch does: blanks
// separate words, quotes group, a backslash escapes the next character, and an
// unquoted '#' starts a comment. Returns false on an unterminated quote. Linear in
// the length of the line.
bool SplitWords(std::string_view s, std::vector<std::string>* words) {
  size_t i = 0;
  while (true) {
    while (i < s.size() && IsBlank(s[i])) ++i;
    if (i == s.size() || s[i] == '#') return true;
    std::string word;
    char quote = 0;
    while (i < s.size()) {
      char c = s[i];
      if (quote != 0) {
        if (c == quote) {
          quote = 0;
        } else {
          word += c;
        }
        ++i;
        continue;
      }
      if (IsBlank(c) || c == '#') break;
      if (c == '\\' && i + 1 < s.size()) {
        word += s[i + 1];
        i += 2;
        continue;
      }
      if (c == '"' || c == '\'') {
        quote = c;
      } else {
        word += c;
      }
      ++i;
    }
    if (quote != 0) return false;
    words->push_back(std::move(word));
  }
}

// A comment that was probably meant as a directive: "# SBATCH -N 2", "#sbatch -N 2"
// or an indented "#SBATCH". "##SBATCH", the usual way to turn one off, is not.
bool LooksLikeDirective(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && IsBlank(line[i])) ++i;
  if (i == line.size() || line[i] != '#') return false;
  ++i;
  while (i < line.size() && IsBlank(line[i])) ++i;
  std::string_view rest = line.substr(i);
  if (rest.size() < 6 || UpperCase(rest.substr(0, 6)) != "SBATCH") return false;
  rest.remove_prefix(6);
  size_t j = 0;
  while (j < rest.size() && IsBlank(rest[j])) ++j;
  return j < rest.size() && rest[j] == '-';
}

struct GpuAsk {
  int64_t count = 0;
  std::string type;  // normalised; empty = any

  bool operator==(const GpuAsk&) const = default;
  std::string Describe() const {
    return std::to_string(count) + (type.empty() ? "" : " " + type) +
           (count == 1 ? " GPU" : " GPUs");
  }
};

class SbatchParser {
 public:
  SbatchParser(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  SpecParseResult Parse();

 private:
  // One option as given: where, how it was spelled ("-N" or "--nodes") and its value.
  struct Setting {
    int line = 0;
    std::string spelled;
    std::string value;

    std::string Written() const { return value.empty() ? spelled : spelled + "=" + value; }
  };

  void Add(std::vector<Diagnostic>& list, size_t& dropped, int line, std::string field,
           std::string message);
  void Error(int line, std::string field, std::string message) {
    Add(errors_, dropped_errors_, line, std::move(field), std::move(message));
  }
  void Warn(int line, std::string field, std::string message) {
    Add(warnings_, dropped_warnings_, line, std::move(field), std::move(message));
  }
  void Error(const Setting& s, std::string message) {
    Error(s.line, s.spelled, std::move(message));
  }
  void Warn(const Setting& s, std::string message) { Warn(s.line, s.spelled, std::move(message)); }

  bool CheckWholeText();
  void ScanLines();
  void ParseDirective(int line, std::string_view rest);
  void UnknownLong(int line, std::string_view name);
  void UnknownShort(int line, char c);
  void Record(const OptionInfo& info, int line, std::string spelled, std::string value);

  void ApplyName();
  void ApplyShape();
  void ApplyGpus();
  std::optional<GpuAsk> ParseGres(const Setting& s);
  std::optional<GpuAsk> ParseGpusPerNode(const Setting& s);
  void ApplyMemory();
  void ApplyTime();
  void ApplyQueueing();
  void ApplySignal();
  void ApplyPaths();
  void Validate();

  const std::optional<Setting>& Get(Opt o) const { return settings_[static_cast<size_t>(o)]; }
  void SetOrigin(const std::string& field, const Setting& s) { origins_[field] = s; }

  std::string_view text_;
  std::string file_;
  std::array<std::optional<Setting>, static_cast<size_t>(Opt::kCount)> settings_;
  // Spec field (as ValidateSpec names it) -> the directive that set it.
  std::map<std::string, Setting> origins_;
  int first_command_line_ = 0;  // 0: the script runs no command
  bool name_reported_ = false;  // a missing job name was already reported
  JobSpec spec_;
  std::vector<Diagnostic> errors_;
  std::vector<Diagnostic> warnings_;
  size_t dropped_errors_ = 0;
  size_t dropped_warnings_ = 0;
};

void SbatchParser::Add(std::vector<Diagnostic>& list, size_t& dropped, int line, std::string field,
                       std::string message) {
  if (list.size() >= kMaxDiagnostics) {
    ++dropped;
    return;
  }
  list.push_back(Diagnostic{file_, line, std::move(field), std::move(message)});
}

// Problems with the text as a whole; false when there is no point reading further.
bool SbatchParser::CheckWholeText() {
  if (text_.size() > SpecLimits::kMaxSpecBytes) {
    Error(0, "",
          "the script is " + std::to_string(text_.size()) + " bytes; at most " +
              std::to_string(SpecLimits::kMaxSpecBytes) + " are allowed");
    return false;
  }
  if (size_t nul = text_.find('\0'); nul != std::string_view::npos) {
    int line = 1 + static_cast<int>(std::count(text_.begin(), text_.begin() + nul, '\n'));
    Error(line, "", "the script contains a NUL byte; is it a binary file?");
    return false;
  }
  if (std::all_of(text_.begin(), text_.end(), [](char c) { return IsBlank(c) || c == '\n'; })) {
    Error(0, "", "the script is empty; sbatch needs at least a \"#!\" line and a command");
    return false;
  }
  return true;
}

void SbatchParser::ScanLines() {
  bool in_header = true;
  bool reported_dos = false;
  int line_no = 0;
  size_t pos = 0;
  while (pos < text_.size()) {
    size_t end = text_.find('\n', pos);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view line = text_.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r' && end < text_.size()) {
      if (!reported_dos) {
        Error(line_no, "",
              "the script has DOS line breaks (\\r\\n), which sbatch rejects and bash "
              "misreads; convert it with dos2unix");
        reported_dos = true;
      }
      line.remove_suffix(1);
    }
    const bool directive = line.starts_with(kMagic);
    if (!in_header) {
      if (directive) {
        Warn(line_no, "",
             QuoteForMessage(line) + " comes after the first command (line " +
                 std::to_string(first_command_line_) +
                 "), so sbatch ignores it and so does Trainyard; move it above that line");
      }
      continue;
    }
    if (directive) {
      ParseDirective(line_no, line.substr(kMagic.size()));
      continue;
    }
    size_t first = 0;
    while (first < line.size() && IsBlank(line[first])) ++first;
    if (first == line.size()) continue;
    if (line[first] == '#') {
      if (LooksLikeDirective(line)) {
        Warn(line_no, "",
             QuoteForMessage(line) +
                 " is a comment, not a directive: sbatch reads only lines "
                 "that start with \"#SBATCH\" exactly");
      }
      continue;
    }
    in_header = false;
    first_command_line_ = line_no;
  }
}

void SbatchParser::ParseDirective(int line, std::string_view rest) {
  std::vector<std::string> words;
  if (!SplitWords(rest, &words)) {
    Error(line, "", "unterminated quote in " + QuoteForMessage(std::string(kMagic) += rest));
    return;
  }
  for (size_t i = 0; i < words.size();) {
    const std::string& word = words[i++];
    const size_t eq = word.find('=');
    if (word.size() > 2 && word.starts_with("--")) {
      std::string_view name =
          std::string_view(word).substr(2, eq == std::string::npos ? eq : eq - 2);
      if (name.empty()) {
        Error(line, "", "expected an option name after \"--\", got " + QuoteForMessage(word));
        return;
      }
      const OptionInfo* info = FindLong(name);
      if (info == nullptr) {
        UnknownLong(line, name);
        return;  // without knowing the option, the rest of the line cannot be read
      }
      std::string spelled = "--" + std::string(name);
      std::optional<std::string> value;
      if (eq != std::string::npos) value = word.substr(eq + 1);
      if (info->arg == Arg::kNone && value.has_value()) {
        Error(line, spelled, "takes no value, got " + QuoteForMessage(*value));
        continue;
      }
      if (info->arg == Arg::kRequired && !value.has_value() && i < words.size()) {
        value = words[i++];
      }
      if (info->arg == Arg::kRequired && value.value_or("").empty()) {
        std::string msg = "needs a value";
        if (info->opt != Opt::kUnsupported) msg += ", such as " + std::string(info->note);
        Error(line, spelled, msg);
        continue;
      }
      Record(*info, line, std::move(spelled), value.value_or(""));
    } else if (word.size() >= 2 && word[0] == '-' && word != "--") {
      // "-nodes=2": a long option with one dash would read as "-n odes=2".
      std::string_view body =
          std::string_view(word).substr(1, eq == std::string::npos ? eq : eq - 1);
      if (body.size() > 1 && FindLong(body) != nullptr) {
        Error(line, "-" + std::string(body),
              "long options take two dashes; did you mean --" + std::string(body) + "?");
        return;
      }
      for (size_t j = 1; j < word.size(); ++j) {
        const OptionInfo* info = FindShort(word[j]);
        if (info == nullptr) {
          UnknownShort(line, word[j]);
          return;
        }
        std::string spelled = {'-', word[j]};
        if (info->arg == Arg::kNone) {
          Record(*info, line, std::move(spelled), "");
          continue;  // flags group, as in "-Hv"
        }
        std::string value = word.substr(j + 1);
        if (info->arg == Arg::kRequired && value.empty() && i < words.size()) value = words[i++];
        if (info->arg == Arg::kRequired && value.empty()) {
          std::string msg = "needs a value";
          if (info->opt != Opt::kUnsupported) msg += ", such as " + std::string(info->note);
          Error(line, spelled, msg);
        } else {
          Record(*info, line, std::move(spelled), std::move(value));
        }
        break;
      }
    } else if (word == "hetjob" || word == "packjob") {
      Error(line, word, "heterogeneous jobs are not supported by Trainyard; submit one job");
      return;
    } else {
      Error(line, "",
            "expected an option such as --nodes=2 after #SBATCH, got " + QuoteForMessage(word));
      return;
    }
  }
}

void SbatchParser::UnknownLong(int line, std::string_view name) {
  // No option is this long; skip the hint (edit distance is quadratic) and cut the name.
  constexpr size_t kMaxHintable = 64;
  if (name.size() > kMaxHintable) {
    Error(line, "--" + std::string(name.substr(0, kMaxHintable)) + "...",
          "unknown sbatch option; Trainyard reads " + std::string(kSupportedLong));
    return;
  }
  // sbatch accepts an unambiguous prefix of a long option; say which one it meant.
  std::string match;
  int prefix_of = 0;
  for (std::string_view candidate : LongNames()) {
    if (candidate.starts_with(name)) {
      match = std::string(candidate);
      ++prefix_of;
    }
  }
  std::string msg = "unknown sbatch option";
  if (prefix_of == 1) {
    msg += " (write options in full)";
  } else {
    match = ClosestMatch(name, LongNames());
  }
  if (match.empty()) {
    msg += "; Trainyard reads " + std::string(kSupportedLong);
  } else {
    msg += "; did you mean --" + match + "?";
  }
  Error(line, "--" + std::string(name), msg);
}

void SbatchParser::UnknownShort(int line, char c) {
  std::string msg = "unknown sbatch option";
  const OptionInfo* other = FindShort(Upper(c) == c ? Lower(c) : Upper(c));
  if (other != nullptr) {
    msg += "; did you mean -" + std::string(1, other->short_name) + " (--" +
           std::string(other->name) + ")?";
  } else {
    msg += "; Trainyard reads " + std::string(kSupportedShort);
  }
  const bool printable = c > ' ' && c < 0x7f;
  Error(line, printable ? std::string{'-', c} : "-" + QuoteForMessage(std::string_view(&c, 1)),
        msg);
}

void SbatchParser::Record(const OptionInfo& info, int line, std::string spelled,
                          std::string value) {
  if (info.opt == Opt::kUnsupported) {
    std::string msg = "not supported by Trainyard, ignored";
    if (!info.note.empty()) msg += "; " + std::string(info.note);
    Warn(line, std::move(spelled), std::move(msg));
    return;
  }
  std::optional<Setting>& slot = settings_[static_cast<size_t>(info.opt)];
  Setting now{line, std::move(spelled), std::move(value)};
  if (slot.has_value()) {
    Warn(now, "overrides " + QuoteForMessage(slot->Written()) + " at line " +
                  std::to_string(slot->line) + "; the last one counts, as in sbatch");
  }
  slot = std::move(now);
}

void SbatchParser::ApplyName() {
  if (const auto& s = Get(Opt::kJobName)) {
    spec_.name = s->value;
    SetOrigin("name", *s);
    return;
  }
  // sbatch names a job after its script file.
  std::string_view base = file_;
  if (size_t slash = base.rfind('/'); slash != std::string_view::npos)
    base.remove_prefix(slash + 1);
  if (!base.empty() && ValidateName("name", base).ok()) {
    spec_.name = std::string(base);
    return;
  }
  std::string msg = "is required";
  if (!base.empty())
    msg += " (the file name " + QuoteForMessage(base) + " is not a valid job name)";
  Error(0, "--job-name", msg + "; add \"#SBATCH --job-name=NAME\"");
  name_reported_ = true;
}

// --nodes, --ntasks, --ntasks-per-node and --cpus-per-task together decide replicas,
// procs_per_replica and the CPUs of a replica.
void SbatchParser::ApplyShape() {
  bool ok = true;
  std::optional<std::pair<int64_t, int64_t>> nodes;  // min, max
  const auto& nodes_set = Get(Opt::kNodes);
  if (nodes_set.has_value()) {
    const std::string_view v = nodes_set->value;
    const std::string expected = "a node count such as 2 or a range MIN-MAX such as 2-4";
    const size_t dash = v.find('-');
    Result<int64_t> lo = ParseCount(v.substr(0, dash), 1, SpecLimits::kMaxReplicas, expected);
    Result<int64_t> hi =
        dash == std::string_view::npos
            ? lo
            : ParseCount(v.substr(dash + 1), 1, SpecLimits::kMaxReplicas, expected);
    if (dash != std::string_view::npos &&
        (!IsDigits(v.substr(0, dash)) || !IsDigits(v.substr(dash + 1)))) {
      Error(*nodes_set, "expected " + expected + ", got " + QuoteForMessage(v));
      ok = false;
    } else if (!lo.ok() || !hi.ok()) {
      Error(*nodes_set, (lo.ok() ? hi : lo).status().message());
      ok = false;
    } else if (*lo > *hi) {
      Error(*nodes_set, "the minimum " + std::to_string(*lo) + " is larger than the maximum " +
                            std::to_string(*hi) + ", got " + QuoteForMessage(v));
      ok = false;
    } else {
      nodes = {*lo, *hi};
    }
  }
  auto count = [&](Opt o, int64_t hi, std::string_view expected) -> std::optional<int64_t> {
    const auto& s = Get(o);
    if (!s.has_value()) return std::nullopt;
    Result<int64_t> r = ParseCount(s->value, 1, hi, expected);
    if (!r.ok()) {
      Error(*s, r.status().message());
      ok = false;
      return std::nullopt;
    }
    return *r;
  };
  const int64_t max_tasks = int64_t{SpecLimits::kMaxReplicas} * SpecLimits::kMaxProcsPerReplica;
  std::optional<int64_t> per_node = count(Opt::kNtasksPerNode, SpecLimits::kMaxProcsPerReplica,
                                          "a number of tasks per node such as 8");
  std::optional<int64_t> ntasks = count(Opt::kNtasks, max_tasks, "a number of tasks such as 16");
  std::optional<int64_t> cpus_per_task =
      count(Opt::kCpusPerTask, SpecLimits::kMaxMilliCpusPerReplica / 1000,
            "a number of CPUs per task such as 8");
  if (!ok) return;  // the combinations below would only repeat the errors above

  int64_t replicas = 1;
  int64_t min_replicas = 0;
  int64_t procs = 1;
  if (nodes.has_value()) {
    replicas = nodes->second;
    min_replicas = nodes->first;
    SetOrigin("replicas", *nodes_set);
    SetOrigin("min_replicas", *nodes_set);
  }
  if (per_node.has_value()) {
    procs = *per_node;
    SetOrigin("procs_per_replica", *Get(Opt::kNtasksPerNode));
  }
  if (ntasks.has_value()) {
    const Setting& nt = *Get(Opt::kNtasks);
    const std::string n = std::to_string(*ntasks);
    if (nodes.has_value()) {
      const std::string nodes_text =
          QuoteForMessage(nodes_set->Written()) + " (line " + std::to_string(nodes_set->line) + ")";
      if (nodes->first != nodes->second) {
        Error(nt, n + " tasks cannot be spread evenly over a range of nodes, " + nodes_text +
                      "; give --ntasks-per-node instead");
        return;
      }
      if (*ntasks % nodes->second != 0) {
        Error(nt, n + " tasks do not divide evenly over " + std::to_string(nodes->second) +
                      " nodes, " + nodes_text +
                      "; Trainyard runs the same number of tasks on every node: give a "
                      "multiple of " +
                      std::to_string(nodes->second) + " or --ntasks-per-node");
        return;
      }
      const int64_t each = *ntasks / nodes->second;
      if (per_node.has_value() && *per_node != each) {
        const Setting& pn = *Get(Opt::kNtasksPerNode);
        Error(nt, n + " tasks over " + std::to_string(nodes->second) + " nodes is " +
                      std::to_string(each) + " per node, but " + QuoteForMessage(pn.Written()) +
                      " (line " + std::to_string(pn.line) + ") asks for " +
                      std::to_string(*per_node) + "; give one of them");
        return;
      }
      if (each > SpecLimits::kMaxProcsPerReplica) {
        Error(nt, n + " tasks over " + std::to_string(nodes->second) + " nodes is " +
                      std::to_string(each) + " per node; at most " +
                      std::to_string(SpecLimits::kMaxProcsPerReplica) + " are allowed");
        return;
      }
      procs = each;
      if (!per_node.has_value()) SetOrigin("procs_per_replica", nt);
    } else if (per_node.has_value()) {
      const Setting& pn = *Get(Opt::kNtasksPerNode);
      if (*ntasks % *per_node != 0) {
        Error(nt, n + " tasks do not fill whole nodes of " + QuoteForMessage(pn.Written()) +
                      " (line " + std::to_string(pn.line) + "); give a multiple of " +
                      std::to_string(*per_node) + " or --nodes");
        return;
      }
      replicas = *ntasks / *per_node;
      SetOrigin("replicas", nt);
      if (replicas > SpecLimits::kMaxReplicas) {
        Error(nt, n + " tasks at " + std::to_string(*per_node) + " per node need " +
                      std::to_string(replicas) + " nodes; at most " +
                      std::to_string(SpecLimits::kMaxReplicas) + " are allowed");
        return;
      }
    } else {
      if (*ntasks > SpecLimits::kMaxProcsPerReplica) {
        Error(nt, n + " tasks on one node is more than the " +
                      std::to_string(SpecLimits::kMaxProcsPerReplica) +
                      " allowed; add --nodes to spread them over several nodes");
        return;
      }
      procs = *ntasks;
      SetOrigin("procs_per_replica", nt);
    }
  }
  spec_.replicas = static_cast<int32_t>(replicas);
  spec_.min_replicas = static_cast<int32_t>(min_replicas);
  spec_.procs_per_replica = static_cast<int32_t>(procs);

  if (cpus_per_task.has_value()) {
    const Setting& c = *Get(Opt::kCpusPerTask);
    const int64_t cpus = SaturatingMul(*cpus_per_task, procs);
    if (cpus > SpecLimits::kMaxMilliCpusPerReplica / 1000) {
      Error(c, std::to_string(*cpus_per_task) + " CPUs per task x " + std::to_string(procs) +
                   " tasks per node = " + std::to_string(cpus) + " CPUs per node; at most " +
                   std::to_string(SpecLimits::kMaxMilliCpusPerReplica / 1000) + " are allowed");
      return;
    }
    spec_.resources.milli_cpus = cpus * 1000;
    SetOrigin("resources.cpus", c);
  }
}

std::optional<GpuAsk> SbatchParser::ParseGres(const Setting& s) {
  const std::string expected = "expected gpu[:TYPE]:COUNT such as gpu:8 or gpu:a100:8, got ";
  if (s.value == "none") return std::nullopt;
  std::optional<GpuAsk> gpu;
  std::string_view rest = s.value;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    std::vector<std::string_view> parts;
    for (std::string_view e = entry;;) {
      const size_t colon = e.find(':');
      parts.push_back(e.substr(0, colon));
      if (colon == std::string_view::npos) break;
      e.remove_prefix(colon + 1);
    }
    if (parts[0] == "gpu") {
      if (gpu.has_value()) {
        Error(s, "asks for gpu twice, got " + QuoteForMessage(s.value));
        return std::nullopt;
      }
      GpuAsk ask;
      std::string_view count_text = "1";  // sbatch: "gpu" alone is one GPU
      if (parts.size() == 2) {
        count_text = parts[1];
      } else if (parts.size() == 3 && !parts[1].empty()) {
        ask.type = NormalizeGpuType(parts[1]);
        count_text = parts[2];
      } else if (parts.size() != 1) {
        Error(s, expected + QuoteForMessage(entry));
        return std::nullopt;
      }
      if (!IsDigits(count_text)) {
        Error(s, expected + QuoteForMessage(entry));
        return std::nullopt;
      }
      Result<int64_t> n = ParseCount(count_text, 0, SpecLimits::kMaxGpusPerReplica, "");
      if (!n.ok()) {
        Error(s, "GPU count " + n.status().message() + " per node");
        return std::nullopt;
      }
      ask.count = *n;
      gpu = ask;
    } else if (parts[0].empty()) {
      Error(s, expected + QuoteForMessage(s.value));
      return std::nullopt;
    } else {
      std::string msg = "ignoring " + QuoteForMessage(entry) + ": Trainyard schedules only gpu";
      std::string lower(parts[0]);
      for (char& c : lower) c = Lower(c);
      if (EditDistance(lower, "gpu") <= 1) {
        msg += "; did you mean gpu?";
      }
      Warn(s, msg);
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return gpu;
}

std::optional<GpuAsk> SbatchParser::ParseGpusPerNode(const Setting& s) {
  std::string_view v = s.value;
  GpuAsk ask;
  if (size_t colon = v.find(':'); colon != std::string_view::npos) {
    if (colon == 0) {
      Error(s, "expected [TYPE:]COUNT such as 8 or a100:8, got " + QuoteForMessage(v));
      return std::nullopt;
    }
    ask.type = NormalizeGpuType(v.substr(0, colon));
    v.remove_prefix(colon + 1);
  }
  if (!IsDigits(v)) {
    Error(s, "expected [TYPE:]COUNT such as 8 or a100:8, got " + QuoteForMessage(s.value));
    return std::nullopt;
  }
  Result<int64_t> n = ParseCount(v, 0, SpecLimits::kMaxGpusPerReplica, "");
  if (!n.ok()) {
    Error(s, "GPU count " + n.status().message() + " per node");
    return std::nullopt;
  }
  ask.count = *n;
  return ask;
}

void SbatchParser::ApplyGpus() {
  const auto& gres = Get(Opt::kGres);
  const auto& per_node = Get(Opt::kGpusPerNode);
  std::optional<GpuAsk> from_gres = gres ? ParseGres(*gres) : std::nullopt;
  std::optional<GpuAsk> from_per_node = per_node ? ParseGpusPerNode(*per_node) : std::nullopt;
  const Setting* origin = nullptr;
  std::optional<GpuAsk> ask;
  if (from_gres && from_per_node) {
    const bool gres_first = gres->line <= per_node->line;
    const Setting& first = gres_first ? *gres : *per_node;
    const Setting& second = gres_first ? *per_node : *gres;
    const GpuAsk& a = gres_first ? *from_gres : *from_per_node;
    const GpuAsk& b = gres_first ? *from_per_node : *from_gres;
    if (!(a == b)) {
      Error(second, "asks for " + b.Describe() + " per node but " +
                        QuoteForMessage(first.Written()) + " (line " + std::to_string(first.line) +
                        ") asks for " + a.Describe() + "; give one of them");
      return;
    }
    origin = &second;
    ask = b;
  } else if (from_gres) {
    origin = &*gres;
    ask = from_gres;
  } else if (from_per_node) {
    origin = &*per_node;
    ask = from_per_node;
  }
  if (!ask.has_value()) return;
  spec_.resources.gpus = ask->count;
  spec_.resources.gpu_type = ask->type;
  SetOrigin("resources.gpus", *origin);
  SetOrigin("resources.gpu_type", *origin);
}

void SbatchParser::ApplyMemory() {
  const auto& s = Get(Opt::kMem);
  if (!s.has_value()) return;
  Result<int64_t> bytes = ParseSlurmMemory(s->value);
  if (!bytes.ok()) {
    Error(*s, bytes.status().message());
    return;
  }
  if (*bytes == 0) {
    Warn(*s,
         "0 asks sbatch for all the memory of each node; Trainyard has no such request, so "
         "the job asks for no particular amount");
  }
  spec_.resources.memory_bytes = *bytes;
  SetOrigin("resources.memory", *s);
}

void SbatchParser::ApplyTime() {
  const auto& s = Get(Opt::kTime);
  if (!s.has_value()) return;
  Result<Duration> d = ParseSlurmTime(s->value);
  if (!d.ok()) {
    Error(*s, d.status().message());
    return;
  }
  spec_.time_limit = *d;
  SetOrigin("time_limit", *s);
}

void SbatchParser::ApplyQueueing() {
  if (const auto& s = Get(Opt::kPartition)) {
    if (s->value.find(',') != std::string::npos) {
      Error(*s, "Trainyard takes one queue, got a list " + QuoteForMessage(s->value));
    } else {
      spec_.queue = s->value;
      SetOrigin("queue", *s);
    }
  }
  if (const auto& s = Get(Opt::kQos)) {
    spec_.priority = s->value;
    SetOrigin("priority", *s);
  }
  if (const auto& s = Get(Opt::kAccount)) {
    spec_.tenant = s->value;
    SetOrigin("tenant", *s);
  }
}

// --signal=[{R|B}:]SIG[@SECS]
void SbatchParser::ApplySignal() {
  const auto& s = Get(Opt::kSignal);
  if (!s.has_value()) return;
  const std::string expected =
      "expected [R:|B:]SIGNAL[@SECONDS] such as USR1@120 or B:TERM@60, got " +
      QuoteForMessage(s->value);
  std::string_view v = s->value;
  bool batch_only = false;
  if (size_t colon = v.find(':'); colon != std::string_view::npos) {
    std::string flags = UpperCase(v.substr(0, colon));
    if (flags != "R" && flags != "B" && flags != "RB" && flags != "BR") {
      Error(*s, expected);
      return;
    }
    batch_only = flags.find('B') != std::string::npos;
    if (flags.find('R') != std::string::npos) {
      Warn(*s, "R: (overlap with reservations) has no meaning in Trainyard, ignored");
    }
    v.remove_prefix(colon + 1);
  }
  const size_t at = v.find('@');
  std::string_view name = v.substr(0, at);
  std::optional<std::string> signal = CanonicalSignalName(UpperCase(name));
  if (name.empty() || !signal.has_value()) {
    Error(*s, expected);
    return;
  }
  int64_t seconds = 60;  // sbatch's default
  if (at != std::string_view::npos) {
    Result<int64_t> r = ParseCount(v.substr(at + 1), 0, kMaxSignalSeconds, "");
    if (!r.ok()) {
      Error(*s, "expected a whole number of seconds from 0 to " +
                    std::to_string(kMaxSignalSeconds) + " after '@', got " +
                    QuoteForMessage(v.substr(at + 1)));
      return;
    }
    seconds = *r;
  }
  if (batch_only) {
    Warn(*s, "B: makes sbatch signal only the batch shell; Trainyard signals every rank");
  }
  spec_.checkpoint.notice_signal = *signal;
  spec_.checkpoint.preempt_grace = Duration(seconds * 1000);
  SetOrigin("checkpoint.notice_signal", *s);
  SetOrigin("checkpoint.preempt_grace", *s);
}

void SbatchParser::ApplyPaths() {
  if (const auto& s = Get(Opt::kRequeue)) {
    spec_.requeue = s->spelled != "--no-requeue";
    SetOrigin("requeue", *s);
  }
  struct PathOption {
    Opt opt;
    std::string* target;
    const char* field;
  };
  for (const PathOption& p : {PathOption{Opt::kOutput, &spec_.output, "output"},
                              PathOption{Opt::kError, &spec_.error, "error"},
                              PathOption{Opt::kChdir, &spec_.working_dir, "working_dir"}}) {
    if (const auto& s = Get(p.opt)) {
      *p.target = s->value;
      SetOrigin(p.field, *s);
    }
  }
}

void SbatchParser::Validate() {
  NormalizeSpec(spec_);
  for (Diagnostic& d : ValidateSpec(spec_)) {
    if (d.field == "name" && name_reported_) continue;
    int line = 0;
    if (auto it = origins_.find(d.field); it != origins_.end()) {
      line = it->second.line;
      d.field = it->second.spelled;
    }
    Error(line, std::move(d.field), std::move(d.message));
  }
}

SpecParseResult SbatchParser::Parse() {
  SpecParseResult result;
  if (CheckWholeText()) {
    ScanLines();
    ApplyName();
    ApplyShape();
    ApplyGpus();
    ApplyMemory();
    ApplyTime();
    ApplyQueueing();
    ApplySignal();
    ApplyPaths();
    if (first_command_line_ == 0) {
      Warn(0, "", "the script runs no command after its #SBATCH directives");
    }
    spec_.script =
        text_.starts_with("#!") ? std::string(text_) : "#!/bin/bash\n" + std::string(text_);
    Validate();
  }
  auto by_line = [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; };
  std::stable_sort(errors_.begin(), errors_.end(), by_line);
  std::stable_sort(warnings_.begin(), warnings_.end(), by_line);
  if (dropped_errors_ > 0) {
    errors_.push_back({file_, 0, "", std::to_string(dropped_errors_) + " more errors not shown"});
  }
  if (dropped_warnings_ > 0) {
    warnings_.push_back(
        {file_, 0, "", std::to_string(dropped_warnings_) + " more warnings not shown"});
  }
  result.warnings = std::move(warnings_);
  if (errors_.empty()) {
    result.spec = std::move(spec_);
  } else {
    result.errors = std::move(errors_);
  }
  return result;
}

}  // namespace

SpecParseResult ParseSbatch(std::string_view text, std::string_view file) {
  return SbatchParser(text, file).Parse();
}

}  // namespace trainyard
