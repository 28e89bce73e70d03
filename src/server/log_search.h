// Pure functions over the rank logs the LogStore keeps (server/logs.h): a fixed-string
// search of a log, the first error lines of a failed attempt, and which files log
// retention deletes. No I/O and no clock: callers read the files, pass the time in,
// and carry out what these decide.
//
// Why a fixed string and not a regular expression: a pattern from any API caller runs
// over up to a gigabyte of output on a server thread, and a backtracking regex can take
// exponential time on a crafted pattern; a substring search is linear in the log.
//
// Thread-safety: plain functions; a LineSearch is a value used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/units.h"

namespace trainyard::server {

// Longer lines are cut to this many bytes and end in "..." in search answers.
inline constexpr size_t kMaxSearchLineBytes = 4 * kKiB;
// Each error line is cut to this many bytes (they are shown in every GET /jobs/{id}).
inline constexpr size_t kMaxErrorLineBytes = 1 * kKiB;
inline constexpr size_t kMaxErrorLines = 20;
// Error lines are looked for in this much of the start of each rank's log.
inline constexpr int64_t kMaxErrorScanBytes = 16 * kMiB;
// A search: the pattern's size, the matches in one answer, the bytes read for one.
inline constexpr size_t kMaxSearchPatternBytes = 1024;
inline constexpr int64_t kDefaultSearchMatches = 1000;
inline constexpr int64_t kMaxSearchMatches = 10'000;
inline constexpr int64_t kMaxSearchScanBytes = 1 * kGiB;

// `line` cut to `max_bytes` (never inside a UTF-8 sequence) with "..." appended when
// it was longer; without a trailing '\r'.
std::string CutLine(std::string_view line, size_t max_bytes);

struct LineMatch {
  int64_t line = 0;    // 1-based
  int64_t offset = 0;  // byte offset of the line's start in the log
  std::string text;    // the line without its newline, cut as CutLine does

  bool operator==(const LineMatch&) const = default;
};

// Finds the lines of one log that contain `pattern`, fed as consecutive chunks of any
// size: a line (or a match) may span chunks, and a line of any length takes at most
// kMaxSearchLineBytes + pattern size of memory. Case-insensitive search folds ASCII
// letters only.
class LineSearch {
 public:
  // REQUIRES: `pattern` is not empty.
  LineSearch(std::string_view pattern, bool ignore_case, int64_t max_matches);

  // Scans the next bytes of the log. Matches go to matches() until there are
  // `max_matches`; a match past that sets more() and the rest is ignored.
  void Feed(std::string_view data);
  // The end of the log: a last line without a newline counts too.
  void Finish();

  const std::vector<LineMatch>& matches() const { return matches_; }
  std::vector<LineMatch> TakeMatches() { return std::move(matches_); }
  // A line matched after max_matches were found: the answer is incomplete, and
  // further Feed calls do nothing.
  bool more() const { return more_; }
  // Bytes fed so far.
  int64_t offset() const { return offset_; }

 private:
  // Ends the current line (adding it to matches_ when it matched); the next starts at
  // `next_start`.
  void EndLine(int64_t next_start);
  // Adds the next bytes of the current line, as fed and as searched (folded).
  void ExtendLine(std::string_view data, std::string_view searchable);

  std::string pattern_;  // folded when ignore_case_
  bool ignore_case_;
  int64_t max_matches_;
  std::vector<LineMatch> matches_;
  bool more_ = false;
  int64_t offset_ = 0;      // of the next byte fed
  int64_t line_ = 1;        // number of the current line
  int64_t line_start_ = 0;  // offset of the current line
  std::string head_;        // the current line's first bytes (up to kMaxSearchLineBytes + 1)
  std::string tail_;        // its last pattern-size - 1 bytes, folded, for matches across chunks
  bool line_matched_ = false;
  std::string folded_;  // the chunk being fed, folded (ignore_case_)
};

// The lines that say why a run failed, from the start of a rank's log:
//  - the first Python traceback, from "Traceback (most recent call last):" up to and
//    including its exception line (the first line after it that is not indented;
//    a prefix before "Traceback" such as torchrun's "[rank1]: " is taken off the
//    lines after it before looking at their indentation). A traceback of more than
//    kMaxErrorLines lines keeps its first line, a "  ..." line and its last lines;
//  - else the first line with an error marker (Error:, ERROR, FATAL, Fatal, panic:,
//    Segmentation fault, CUDA error, NCCL error, RuntimeError, Killed) and up to
//    kErrorContextLines lines after it;
//  - else nothing.
// Each line is cut to kMaxErrorLineBytes.
inline constexpr size_t kErrorContextLines = 5;
std::vector<std::string> FirstErrorLines(std::string_view log);

// Whether an attempt that ended this way failed, so that its logs are worth reading
// for error lines: failed, start-failed, node-lost, time-limit.
bool AttemptFailed(ExitReason reason);

// --- retention ---

// A file of the log store: a rank log or a rank's metrics-line copy.
struct StoredLogFile {
  std::string path;
  JobId job = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  bool is_log = true;  // false: a metrics-line copy (<root>/metrics/...)
  int64_t size = 0;
  Timestamp modified{};  // last written

  bool operator==(const StoredLogFile&) const = default;
};

// What the cluster knows of a job that has files.
struct JobLogFacts {
  std::optional<Timestamp> end_time;  // when it finished; nullopt while unfinished
  int32_t current_attempt = -1;       // its latest attempt; -1 when not known
};

struct LogRetentionPolicy {
  Duration retention{0};      // delete every file of jobs finished longer ago; 0: never
  int64_t max_job_bytes = 0;  // rank logs one job may keep; 0: no cap
};

struct LogPrunePlan {
  // Jobs finished longer ago than the retention: all their files go (ascending).
  std::vector<JobId> expired_jobs;
  // Rank logs of jobs over the byte cap, oldest attempt first, then by rank: deleted
  // until the job's logs fit, never one of its current attempt (the job's latest, or
  // when not known the latest that has a log). Metrics copies do not count.
  std::vector<StoredLogFile> files;

  bool empty() const { return expired_jobs.empty() && files.empty(); }
};

// Which files to delete at `now`. Jobs missing from `jobs` count as unfinished with an
// unknown current attempt.
LogPrunePlan PlanLogPruning(const std::vector<StoredLogFile>& files,
                            const std::map<JobId, JobLogFacts>& jobs, Timestamp now,
                            const LogRetentionPolicy& policy);

}  // namespace trainyard::server
