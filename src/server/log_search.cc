#include "server/log_search.h"

#include <algorithm>
#include <array>
#include <deque>
#include <tuple>

namespace trainyard::server {
namespace {

constexpr std::string_view kTracebackHeader = "Traceback (most recent call last):";
constexpr std::array<std::string_view, 10> kErrorMarkers = {
    "Error:",     "ERROR",      "FATAL",        "Fatal", "panic:", "Segmentation fault",
    "CUDA error", "NCCL error", "RuntimeError", "Killed"};

char Fold(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string FoldAll(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Fold(c);
  return out;
}

// The bytes of a well-formed UTF-8 sequence starting at s[i], or 0.
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// `s` as valid UTF-8: each byte that starts no well-formed sequence becomes U+FFFD
// (answers are JSON, which must be UTF-8; logs are whatever programs print).
std::string ValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// The lines of `text`, one at a time, without their newlines.
class Lines {
 public:
  explicit Lines(std::string_view text, size_t from = 0) : text_(text), pos_(from) {}
  bool Next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const size_t nl = text_.find('\n', pos_);
    const size_t end = nl == std::string_view::npos ? text_.size() : nl;
    line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_;
};

size_t LineStart(std::string_view text, size_t at) {
  if (at == 0) return 0;
  const size_t nl = text.rfind('\n', at - 1);
  return nl == std::string_view::npos ? 0 : nl + 1;
}

std::vector<std::string> Traceback(std::string_view log, size_t header_at) {
  const size_t start = LineStart(log, header_at);
  const std::string_view prefix = log.substr(start, header_at - start);
  Lines lines(log, start);
  std::string_view line;
  (void)lines.Next(line);
  std::string header = CutLine(line, kMaxErrorLineBytes);
  // The header, then the last kMaxErrorLines - 1 lines after it.
  std::deque<std::string> body;
  size_t body_lines = 0;
  while (lines.Next(line)) {
    std::string_view rest = line;
    if (!prefix.empty() && rest.starts_with(prefix)) rest.remove_prefix(prefix.size());
    while (!rest.empty() && rest.back() == '\r') rest.remove_suffix(1);
    if (rest.empty()) continue;
    body.push_back(CutLine(line, kMaxErrorLineBytes));
    ++body_lines;
    if (body.size() > kMaxErrorLines - 1) body.pop_front();
    if (rest.front() != ' ' && rest.front() != '\t') break;  // the exception line
  }
  std::vector<std::string> out = {std::move(header)};
  if (body_lines > kMaxErrorLines - 1) {
    out.emplace_back("  ...");
    while (body.size() > kMaxErrorLines - 2) body.pop_front();
  }
  for (std::string& l : body) out.push_back(std::move(l));
  return out;
}

}  // namespace

std::string CutLine(std::string_view line, size_t max_bytes) {
  while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() <= max_bytes) return ValidUtf8(line);
  size_t cut = max_bytes;
  // Back off to the start of a UTF-8 sequence (at most 3 continuation bytes).
  for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80; ++k) {
    --cut;
  }
  return ValidUtf8(line.substr(0, cut)) + "...";
}

// --- LineSearch ---

LineSearch::LineSearch(std::string_view pattern, bool ignore_case, int64_t max_matches)
    : pattern_(ignore_case ? FoldAll(pattern) : std::string(pattern)),
      ignore_case_(ignore_case),
      max_matches_(max_matches) {
  TY_CHECK(!pattern_.empty());
}

void LineSearch::EndLine(int64_t next_start) {
  if (line_matched_) {
    if (static_cast<int64_t>(matches_.size()) < max_matches_) {
      matches_.push_back({line_, line_start_, CutLine(head_, kMaxSearchLineBytes)});
    } else {
      more_ = true;
    }
  }
  ++line_;
  line_start_ = next_start;
  head_.clear();
  tail_.clear();
  line_matched_ = false;
}

void LineSearch::ExtendLine(std::string_view data, std::string_view searchable) {
  if (head_.size() <= kMaxSearchLineBytes) {
    head_.append(data.substr(0, kMaxSearchLineBytes + 1 - head_.size()));
  }
  const size_t keep = pattern_.size() - 1;
  if (searchable.size() >= keep) {
    tail_.assign(searchable.substr(searchable.size() - keep));
  } else {
    tail_.append(searchable);
    if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
  }
}

void LineSearch::Feed(std::string_view data) {
  if (more_ || data.empty()) return;
  std::string_view s = data;
  if (ignore_case_) {
    folded_.assign(data);
    for (char& c : folded_) c = Fold(c);
    s = folded_;
  }
  const size_t m = pattern_.size();
  const int64_t base = offset_;
  offset_ += static_cast<int64_t>(data.size());

  // 1. The rest of the line the previous chunk ended in, up to the first newline.
  const size_t nl = s.find('\n');
  const size_t first_end = nl == std::string_view::npos ? s.size() : nl;
  if (!line_matched_) {
    if (!tail_.empty()) {
      std::string across = tail_;
      across.append(s.substr(0, std::min(first_end, m - 1)));
      line_matched_ = across.find(pattern_) != std::string::npos;
    }
    line_matched_ = line_matched_ || s.substr(0, first_end).find(pattern_) != s.npos;
  }
  ExtendLine(data.substr(0, first_end), s.substr(0, first_end));
  if (nl == std::string_view::npos) return;
  EndLine(base + static_cast<int64_t>(nl) + 1);
  size_t pos = nl + 1;

  // 2. Whole lines, from match to match. `pos` is always the start of a line.
  while (!more_) {
    const size_t k = s.find(pattern_, pos);
    if (k == std::string_view::npos) break;
    const size_t before = s.rfind('\n', k);  // the pattern holds no newline
    const size_t ls = before == std::string_view::npos || before < pos ? pos : before + 1;
    line_ += std::count(s.begin() + static_cast<ptrdiff_t>(pos),
                        s.begin() + static_cast<ptrdiff_t>(ls), '\n');
    line_start_ = base + static_cast<int64_t>(ls);
    line_matched_ = true;
    const size_t le = s.find('\n', k + m);
    if (le == std::string_view::npos) {  // the line goes on in the next chunk
      ExtendLine(data.substr(ls), s.substr(ls));
      return;
    }
    head_.assign(data.substr(ls, std::min(le - ls, kMaxSearchLineBytes + 1)));
    EndLine(base + static_cast<int64_t>(le) + 1);
    pos = le + 1;
  }
  if (more_) return;

  // 3. No match from `pos` on: count the lines; the last one goes on in the next chunk.
  const size_t last_nl = s.rfind('\n');
  if (last_nl != std::string_view::npos && last_nl >= pos) {
    line_ += std::count(s.begin() + static_cast<ptrdiff_t>(pos),
                        s.begin() + static_cast<ptrdiff_t>(last_nl) + 1, '\n');
    pos = last_nl + 1;
  }
  line_start_ = base + static_cast<int64_t>(pos);
  head_.clear();
  tail_.clear();
  line_matched_ = false;
  ExtendLine(data.substr(pos), s.substr(pos));
}

void LineSearch::Finish() {
  if (!more_ && offset_ > line_start_) EndLine(offset_);
}

// --- error lines ---

std::vector<std::string> FirstErrorLines(std::string_view log) {
  if (size_t at = log.find(kTracebackHeader); at != std::string_view::npos) {
    return Traceback(log, at);
  }
  size_t first = std::string_view::npos;
  for (std::string_view marker : kErrorMarkers) {
    // Only the text before the earliest marker so far can hold an earlier one.
    const std::string_view within =
        first == std::string_view::npos ? log : log.substr(0, first + marker.size());
    first = std::min(first, within.find(marker));
  }
  if (first == std::string_view::npos) return {};
  std::vector<std::string> out;
  Lines lines(log, LineStart(log, first));
  std::string_view line;
  while (out.size() < std::min(kErrorContextLines + 1, kMaxErrorLines) && lines.Next(line)) {
    out.push_back(CutLine(line, kMaxErrorLineBytes));
  }
  return out;
}

bool AttemptFailed(ExitReason reason) {
  switch (reason) {
    case ExitReason::kFailed:
    case ExitReason::kStartFailed:
    case ExitReason::kNodeLost:
    case ExitReason::kTimeLimit:
      return true;
    default:
      return false;
  }
}

// --- retention ---

LogPrunePlan PlanLogPruning(const std::vector<StoredLogFile>& files,
                            const std::map<JobId, JobLogFacts>& jobs, Timestamp now,
                            const LogRetentionPolicy& policy) {
  std::map<JobId, std::vector<const StoredLogFile*>> by_job;
  for (const StoredLogFile& f : files) by_job[f.job].push_back(&f);
  LogPrunePlan plan;
  for (auto& [job, mine] : by_job) {
    const auto facts = jobs.find(job);
    const bool known = facts != jobs.end();
    if (policy.retention.count() > 0 && known && facts->second.end_time &&
        now - *facts->second.end_time > policy.retention) {
      plan.expired_jobs.push_back(job);
      continue;
    }
    if (policy.max_job_bytes <= 0) continue;
    int64_t total = 0;
    int32_t latest = -1;
    std::vector<const StoredLogFile*> logs;
    for (const StoredLogFile* f : mine) {
      if (!f->is_log) continue;
      total = SaturatingAdd(total, std::max<int64_t>(f->size, 0));
      latest = std::max(latest, f->attempt);
      logs.push_back(f);
    }
    if (total <= policy.max_job_bytes) continue;
    const int32_t current =
        known && facts->second.current_attempt >= 0 ? facts->second.current_attempt : latest;
    std::sort(logs.begin(), logs.end(), [](const StoredLogFile* a, const StoredLogFile* b) {
      return std::tie(a->attempt, a->rank, a->path) < std::tie(b->attempt, b->rank, b->path);
    });
    for (const StoredLogFile* f : logs) {
      if (total <= policy.max_job_bytes || f->attempt >= current) break;
      plan.files.push_back(*f);
      total -= std::max<int64_t>(f->size, 0);
    }
  }
  return plan;
}

}  // namespace trainyard::server
