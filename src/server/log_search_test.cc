#include "server/log_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/logs.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<LineMatch> SearchAll(std::string_view log, std::string_view pattern,
                                 bool ignore_case = false, int64_t max = 1000,
                                 size_t chunk = 1 << 20, bool* more = nullptr) {
  LineSearch s(pattern, ignore_case, max);
  for (size_t i = 0; i < log.size(); i += chunk) s.Feed(log.substr(i, chunk));
  s.Finish();
  if (more) *more = s.more();
  return s.TakeMatches();
}

// The same search, the plain way: split into lines, look in each.
std::vector<LineMatch> NaiveSearch(const std::string& log, const std::string& pattern,
                                   bool ignore_case) {
  auto fold = [&](std::string s) {
    if (ignore_case) {
      for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    }
    return s;
  };
  std::vector<LineMatch> out;
  size_t start = 0;
  int64_t line = 1;
  while (start < log.size()) {
    size_t nl = log.find('\n', start);
    size_t end = nl == std::string::npos ? log.size() : nl;
    std::string text = log.substr(start, end - start);
    if (fold(text).find(fold(pattern)) != std::string::npos) {
      out.push_back({line, static_cast<int64_t>(start), CutLine(text, kMaxSearchLineBytes)});
    }
    if (nl == std::string::npos) break;
    start = nl + 1;
    ++line;
  }
  return out;
}

TEST(LineSearchTest, FindsLinesWithLineNumbersAndOffsets) {
  const std::string log = "step 1 loss 2.5\nstep 2 loss nan\nsaving\nstep 3 loss nan";
  auto m = SearchAll(log, "nan");
  ASSERT_THAT(m, SizeIs(2));
  EXPECT_EQ(m[0].line, 2);
  EXPECT_EQ(m[0].offset, 16);
  EXPECT_EQ(m[0].text, "step 2 loss nan");
  EXPECT_EQ(m[1].line, 4);  // the last line has no newline
  EXPECT_EQ(m[1].text, "step 3 loss nan");
  EXPECT_THAT(SearchAll(log, "NaN"), IsEmpty());
  EXPECT_THAT(SearchAll(log, "NaN", /*ignore_case=*/true), SizeIs(2));
}

TEST(LineSearchTest, ALineMatchesOnceAndCarriageReturnsAreDropped) {
  auto m = SearchAll("a a a\r\nb\n", "a");
  ASSERT_THAT(m, SizeIs(1));
  EXPECT_EQ(m[0].text, "a a a");
}

TEST(LineSearchTest, MatchesAcrossChunksAndLinesAcrossChunks) {
  const std::string log = "xxxxNEEDLExxxx\nyyyy\nzzNEEDLE\n";
  for (size_t chunk = 1; chunk <= log.size(); ++chunk) {
    auto m = SearchAll(log, "NEEDLE", false, 1000, chunk);
    ASSERT_THAT(m, SizeIs(2)) << "chunk " << chunk;
    EXPECT_EQ(m[0].text, "xxxxNEEDLExxxx") << "chunk " << chunk;
    EXPECT_EQ(m[1].line, 3) << "chunk " << chunk;
    EXPECT_EQ(m[1].offset, 20) << "chunk " << chunk;
  }
}

TEST(LineSearchTest, StopsAfterMaxMatchesAndSaysThereIsMore) {
  std::string log;
  for (int i = 0; i < 10; ++i) log += "hit " + std::to_string(i) + "\n";
  bool more = false;
  auto m = SearchAll(log, "hit", false, 3, 1 << 20, &more);
  EXPECT_THAT(m, SizeIs(3));
  EXPECT_TRUE(more);
  m = SearchAll(log, "hit", false, 10, 1 << 20, &more);
  EXPECT_THAT(m, SizeIs(10));
  EXPECT_FALSE(more);  // exactly max_matches is complete
}

TEST(LineSearchTest, LongLinesAreCutButStillSearchedToTheirEnd) {
  const std::string long_line = std::string(100'000, 'a') + "TAIL";
  auto m = SearchAll(long_line + "\nshort TAIL\n", "TAIL", false, 1000, 4096);
  ASSERT_THAT(m, SizeIs(2));
  EXPECT_EQ(m[0].text, std::string(kMaxSearchLineBytes, 'a') + "...");
  EXPECT_EQ(m[1].line, 2);
  EXPECT_EQ(m[1].offset, 100'005);
}

TEST(LineSearchTest, CatastrophicLookingPatternsAreJustText) {
  const std::string log = std::string(50'000, 'a') + "\n(a+)+$\n";
  auto m = SearchAll(log, "(a+)+$");
  ASSERT_THAT(m, SizeIs(1));
  EXPECT_EQ(m[0].line, 2);
}

TEST(LineSearchTest, AgreesWithASplitIntoLinesOnRandomLogs) {
  rc::check([](const std::vector<char>& picks, uint8_t chunk_pick, bool ignore_case) {
    // A small alphabet, so that matches and newlines are common.
    const std::string alphabet = "abAB\n";
    std::string log;
    for (char c : picks) log += alphabet[static_cast<unsigned char>(c) % alphabet.size()];
    const std::string pattern = picks.size() % 2 ? "ab" : "aBa";
    const size_t chunk = chunk_pick % 7 + 1;
    RC_ASSERT(SearchAll(log, pattern, ignore_case, 1'000'000, chunk) ==
              NaiveSearch(log, pattern, ignore_case));
  });
}

TEST(CutLineTest, CutsAtAUtf8BoundaryAndReplacesInvalidBytes) {
  EXPECT_EQ(CutLine("short", 10), "short");
  EXPECT_EQ(CutLine("0123456789ab", 10), "0123456789...");
  // "é" is two bytes: a cut inside it backs off before it.
  EXPECT_EQ(CutLine("123456789\xC3\xA9xyz", 10), "123456789...");
  EXPECT_EQ(CutLine("bad \xFF byte", 100), "bad \xEF\xBF\xBD byte");
  EXPECT_EQ(CutLine("ok\r", 100), "ok");
}

// --- FirstErrorLines ---

constexpr std::string_view kPythonFailure =
    "epoch 0 step 10 loss 2.31\n"
    "epoch 0 step 20 loss 2.05\n"
    "Traceback (most recent call last):\n"
    "  File \"/work/train.py\", line 88, in <module>\n"
    "    main()\n"
    "  File \"/work/train.py\", line 61, in main\n"
    "    loss = model(batch).loss\n"
    "           ^^^^^^^^^^^^\n"
    "  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line 1511, in "
    "_wrapped_call_impl\n"
    "    return self._call_impl(*args, **kwargs)\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.2 GiB is free.\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    "  File \"/work/train.py\", line 90, in <module>\n"
    "ValueError: second\n";

TEST(FirstErrorLinesTest, ThePythonTracebackUpToItsExceptionLine) {
  auto lines = FirstErrorLines(kPythonFailure);
  ASSERT_THAT(lines, SizeIs(9));
  EXPECT_EQ(lines.front(), "Traceback (most recent call last):");
  EXPECT_EQ(lines[1], "  File \"/work/train.py\", line 88, in <module>");
  EXPECT_THAT(lines.back(), ::testing::StartsWith("torch.OutOfMemoryError: CUDA out of memory."));
}

TEST(FirstErrorLinesTest, TorchrunPrefixesAreLookedPast) {
  auto lines = FirstErrorLines(
      "[rank1]: starting\n"
      "[rank1]: Traceback (most recent call last):\n"
      "[rank1]:   File \"/w/ddp.py\", line 12, in <module>\n"
      "[rank1]:     dist.all_reduce(t)\n"
      "[rank1]: RuntimeError: NCCL communicator was aborted on rank 1.\n"
      "[rank1]: more output\n");
  EXPECT_THAT(lines,
              ElementsAre("[rank1]: Traceback (most recent call last):",
                          "[rank1]:   File \"/w/ddp.py\", line 12, in <module>",
                          "[rank1]:     dist.all_reduce(t)",
                          "[rank1]: RuntimeError: NCCL communicator was aborted on rank 1."));
}

TEST(FirstErrorLinesTest, ADeepTracebackKeepsItsHeadAndItsEnd) {
  std::string log = "Traceback (most recent call last):\n";
  for (int i = 0; i < 1000; ++i) {
    log += "  File \"r.py\", line " + std::to_string(i) + ", in f\n    f()\n";
  }
  log += "RecursionError: maximum recursion depth exceeded\n";
  auto lines = FirstErrorLines(log);
  ASSERT_THAT(lines, SizeIs(kMaxErrorLines));
  EXPECT_EQ(lines[0], "Traceback (most recent call last):");
  EXPECT_EQ(lines[1], "  ...");
  EXPECT_EQ(lines.back(), "RecursionError: maximum recursion depth exceeded");
  // One line short of the cap: nothing is left out.
  std::string fits = "Traceback (most recent call last):\n";
  for (size_t i = 0; i < kMaxErrorLines - 2; ++i) fits += "  frame\n";
  fits += "KeyError: 'x'\n";
  auto all = FirstErrorLines(fits);
  ASSERT_THAT(all, SizeIs(kMaxErrorLines));
  EXPECT_EQ(all[1], "  frame");
}

TEST(FirstErrorLinesTest, NcclAndCudaErrorsWithTheLinesAfterThem) {
  auto lines = FirstErrorLines(
      "node-3:1234:1300 [0] NCCL INFO Channel 00/02 : 0 1\n"
      "step 100\n"
      "node-3:1234:1300 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion with "
      "error 12\n"
      "NCCL error in: /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
      "unhandled system error, NCCL version 2.19.3\n"
      "ncclSystemError: System call (e.g. socket, malloc) or external library call failed\n"
      "Last error:\n"
      "a\nb\nc\nd\ne\nf\n");
  ASSERT_THAT(lines, SizeIs(kErrorContextLines + 1));
  EXPECT_THAT(lines[0], ::testing::StartsWith("NCCL error in:"));
  EXPECT_EQ(lines[1],
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed");
  EXPECT_EQ(FirstErrorLines("ok\nCUDA error: an illegal memory access was encountered\n"),
            std::vector<std::string>{"CUDA error: an illegal memory access was encountered"});
  EXPECT_EQ(FirstErrorLines("x\n/bin/sh: line 1:  4242 Killed  python train.py\n"),
            std::vector<std::string>{"/bin/sh: line 1:  4242 Killed  python train.py"});
  EXPECT_EQ(FirstErrorLines("fine\nSegmentation fault (core dumped)"),
            std::vector<std::string>{"Segmentation fault (core dumped)"});
  EXPECT_EQ(FirstErrorLines("goroutine\npanic: runtime error: index out of range\n")[0],
            "panic: runtime error: index out of range");
}

TEST(FirstErrorLinesTest, TheEarliestMarkerWins) {
  auto lines = FirstErrorLines("a\n[E] FATAL: disk full\nValueError: x\n");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "[E] FATAL: disk full");
}

TEST(FirstErrorLinesTest, NothingFound) {
  EXPECT_THAT(FirstErrorLines(""), IsEmpty());
  EXPECT_THAT(FirstErrorLines("epoch 1 loss 0.3\nerror rate 0.1 (lower case is not a marker)\n"),
              IsEmpty());
}

TEST(FirstErrorLinesTest, AHugeLogIsScannedInLinearTime) {
  // 16 MiB of progress lines, then the traceback.
  std::string log;
  log.reserve(kMaxErrorScanBytes + 200);
  const std::string line = "step 12345 loss 1.2345 lr 3e-4 tokens/s 123456\n";
  while (log.size() + line.size() < static_cast<size_t>(kMaxErrorScanBytes) - 200) log += line;
  log += "Traceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'a'\n";
  auto lines = FirstErrorLines(log);
  EXPECT_THAT(lines, SizeIs(3));
  std::string huge_line(kMaxErrorScanBytes, 'x');
  huge_line += " ERROR something\n";
  lines = FirstErrorLines(huge_line);
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0], std::string(kMaxErrorLineBytes, 'x') + "...");
}

TEST(AttemptFailedTest, FailuresOnly) {
  EXPECT_TRUE(AttemptFailed(ExitReason::kFailed));
  EXPECT_TRUE(AttemptFailed(ExitReason::kStartFailed));
  EXPECT_TRUE(AttemptFailed(ExitReason::kNodeLost));
  EXPECT_TRUE(AttemptFailed(ExitReason::kTimeLimit));
  EXPECT_FALSE(AttemptFailed(ExitReason::kSucceeded));
  EXPECT_FALSE(AttemptFailed(ExitReason::kPreempted));
  EXPECT_FALSE(AttemptFailed(ExitReason::kCancelled));
  EXPECT_FALSE(AttemptFailed(ExitReason::kNone));
}

// --- PlanLogPruning ---

constexpr Timestamp kNow{Duration{int64_t{1'800'000'000'000}}};
constexpr Duration kDay{86'400'000};

StoredLogFile Log(JobId job, int32_t attempt, int32_t rank, int64_t size) {
  return {"logs/" + std::to_string(job) + "/" + std::to_string(attempt) + "/rank-" +
              std::to_string(rank) + ".log",
          job,
          attempt,
          rank,
          true,
          size};
}
StoredLogFile Metrics(JobId job, int32_t attempt, int32_t rank, int64_t size) {
  StoredLogFile f = Log(job, attempt, rank, size);
  f.path = "metrics/" + std::to_string(job) + "/" + std::to_string(attempt) + "/rank-" +
           std::to_string(rank) + ".jsonl";
  f.is_log = false;
  return f;
}

TEST(PlanLogPruningTest, JobsFinishedLongerAgoThanTheRetentionGoWhole) {
  const std::vector<StoredLogFile> files = {Log(1, 0, 0, 10), Metrics(1, 0, 0, 5), Log(2, 0, 0, 10),
                                            Log(3, 0, 0, 10), Log(4, 0, 0, 10)};
  const std::map<JobId, JobLogFacts> jobs = {
      {1, {kNow - 31 * kDay, 0}},  // past 30 days
      {2, {kNow - 29 * kDay, 0}},  // not yet
      {3, {std::nullopt, 0}},      // running
                                   // 4: not known to the cluster: kept
  };
  const LogPrunePlan plan = PlanLogPruning(files, jobs, kNow, {30 * kDay, 0});
  EXPECT_THAT(plan.expired_jobs, ElementsAre(1));
  EXPECT_THAT(plan.files, IsEmpty());
  // Retention 0 keeps everything.
  EXPECT_TRUE(PlanLogPruning(files, jobs, kNow, {Duration{0}, 0}).empty());
  // Exactly the retention ago is not "longer ago".
  EXPECT_TRUE(PlanLogPruning({Log(1, 0, 0, 1)}, {{1, {kNow - 30 * kDay, 0}}}, kNow, {30 * kDay, 0})
                  .empty());
}

TEST(PlanLogPruningTest, OverTheCapOldestAttemptsGoFirstNeverTheCurrentOne) {
  const std::vector<StoredLogFile> files = {
      Log(7, 2, 0, 40), Log(7, 0, 1, 30), Log(7, 0, 0, 30),
      Log(7, 1, 0, 30), Log(7, 1, 1, 30), Metrics(7, 0, 0, 1000),  // metrics copies do not count
  };
  // 160 bytes of logs, cap 100: attempt 0 (60 bytes) goes, and that is enough.
  LogPrunePlan plan = PlanLogPruning(files, {{7, {std::nullopt, 2}}}, kNow, {Duration{0}, 100});
  EXPECT_THAT(plan.expired_jobs, IsEmpty());
  EXPECT_THAT(plan.files, ElementsAre(Log(7, 0, 0, 30), Log(7, 0, 1, 30)));
  // Cap 50: attempt 1 goes too, rank by rank, but never attempt 2, even over the cap.
  plan = PlanLogPruning(files, {{7, {std::nullopt, 2}}}, kNow, {Duration{0}, 10});
  EXPECT_THAT(plan.files,
              ElementsAre(Log(7, 0, 0, 30), Log(7, 0, 1, 30), Log(7, 1, 0, 30), Log(7, 1, 1, 30)));
  // Unknown to the cluster: the latest attempt with a log counts as current.
  plan = PlanLogPruning(files, {}, kNow, {Duration{0}, 10});
  EXPECT_THAT(plan.files, SizeIs(4));
  // A current attempt without logs yet: every earlier one may go.
  plan = PlanLogPruning(files, {{7, {std::nullopt, 3}}}, kNow, {Duration{0}, 10});
  EXPECT_THAT(plan.files, SizeIs(5));
  // Under the cap: nothing.
  EXPECT_TRUE(PlanLogPruning(files, {}, kNow, {Duration{0}, 160}).empty());
}

TEST(PlanLogPruningTest, AnExpiredJobIsNotAlsoCapped) {
  const std::vector<StoredLogFile> files = {Log(1, 0, 0, 100), Log(1, 1, 0, 100)};
  const LogPrunePlan plan = PlanLogPruning(files, {{1, {kNow - 2 * kDay, 1}}}, kNow, {kDay, 10});
  EXPECT_THAT(plan.expired_jobs, ElementsAre(1));
  EXPECT_THAT(plan.files, IsEmpty());
}

// --- LogStore: search, error lines and pruning over real files ---

LogSearchRequest Find(std::string pattern) {
  LogSearchRequest r;
  r.pattern = std::move(pattern);
  return r;
}

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/log_search_test_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    store_ = std::make_unique<LogStore>(root_);
  }
  void Write(JobId job, int32_t attempt, int32_t rank, const std::string& text) {
    auto size = store_->AppendLog(job, attempt, rank, 0, text);
    ASSERT_TRUE(size.ok());
  }
  std::string root_;
  std::unique_ptr<LogStore> store_;
};

TEST_F(LogStoreTest, SearchesEveryAttemptAndRankInOrder) {
  Write(5, 0, 1, "r1 a0 hit\n");
  Write(5, 0, 0, "r0 a0\nr0 a0 hit\n");
  Write(5, 1, 0, "r0 a1 hit\n");
  LogSearchRequest req;
  req.pattern = "hit";
  auto r = store_->Search(5, req);
  ASSERT_TRUE(r.ok());
  ASSERT_THAT(r->matches, SizeIs(3));
  EXPECT_EQ(r->matches[0].attempt, 0);
  EXPECT_EQ(r->matches[0].rank, 0);
  EXPECT_EQ(r->matches[0].match.line, 2);
  EXPECT_EQ(r->matches[1].rank, 1);
  EXPECT_EQ(r->matches[2].attempt, 1);
  EXPECT_FALSE(r->truncated);
  req.attempt = 0;
  req.rank = 1;
  r = store_->Search(5, req);
  ASSERT_TRUE(r.ok());
  ASSERT_THAT(r->matches, SizeIs(1));
  EXPECT_EQ(r->matches[0].match.text, "r1 a0 hit");
  // The match limit across files, and the byte budget.
  req = {};
  req.pattern = "hit";
  req.max_matches = 2;
  r = store_->Search(5, req);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->matches, SizeIs(2));
  EXPECT_TRUE(r->truncated);
  req.max_matches = 100;
  req.max_scan_bytes = 8;
  r = store_->Search(5, req);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->matches, IsEmpty());
  EXPECT_TRUE(r->truncated);
  // No logs at all: nothing, and not an error.
  r = store_->Search(99, Find("x"));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->matches, IsEmpty());
}

TEST_F(LogStoreTest, ErrorLinesComeFromTheFirstRankThatHasThem) {
  Write(3, 0, 0, "fine\n");
  Write(3, 0, 1, "Traceback (most recent call last):\n  File \"x.py\"\nValueError: bad\n");
  Write(3, 0, 2, "FATAL later rank\n");
  auto e = store_->ErrorLines(3, 0);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->rank, 1);
  EXPECT_THAT(e->lines, SizeIs(3));
  EXPECT_FALSE(store_->ErrorLines(3, 1).has_value());
  // Remembered, but not past a change of the logs.
  Write(4, 0, 0, "ok\n");
  EXPECT_FALSE(store_->ErrorLines(4, 0).has_value());
  ASSERT_TRUE(store_->AppendLog(4, 0, 0, 3, "ERROR now\n").ok());
  e = store_->ErrorLines(4, 0);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->lines, std::vector<std::string>{"ERROR now"});
}

TEST_F(LogStoreTest, PrunedLogsReadAsEmptyAndPruned) {
  Write(8, 0, 0, "old attempt\n");
  Write(8, 1, 0, "current attempt\n");
  Write(9, 0, 0, "expired job\n");
  ASSERT_TRUE(store_->AppendMetrics(9, 0, 0, 0, 10, {R"({"loss": 1})"}).ok());
  std::vector<StoredLogFile> files = store_->ListFiles();
  EXPECT_THAT(files, SizeIs(4));
  LogPrunePlan plan =
      PlanLogPruning(files, {{9, {kNow - 2 * kDay, 0}}}, kNow, {kDay, /*max_job_bytes=*/16});
  EXPECT_THAT(plan.expired_jobs, ElementsAre(9));
  ASSERT_THAT(plan.files, SizeIs(1));
  EXPECT_EQ(plan.files[0].attempt, 0);
  ASSERT_TRUE(store_->Prune(plan).ok());

  auto chunk = store_->ReadLog(8, 0, 0, 0, 1000, Duration{0});
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(chunk->pruned);
  EXPECT_EQ(chunk->data, "");
  chunk = store_->ReadLog(8, 1, 0, 0, 1000, Duration{0});
  ASSERT_TRUE(chunk.ok());
  EXPECT_FALSE(chunk->pruned);
  EXPECT_EQ(chunk->data, "current attempt\n");
  chunk = store_->ReadLog(9, 0, 0, 0, 1000, Duration{0});
  ASSERT_TRUE(chunk.ok());
  EXPECT_TRUE(chunk->pruned);
  // A log that was never written is empty, not pruned.
  chunk = store_->ReadLog(8, 0, 5, 0, 1000, Duration{0});
  ASSERT_TRUE(chunk.ok());
  EXPECT_FALSE(chunk->pruned);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/metrics/9"));

  auto r = store_->Search(8, Find("attempt"));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->matches, SizeIs(1));
  EXPECT_TRUE(r->pruned);
  r = store_->Search(9, Find("job"));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->matches, IsEmpty());
  EXPECT_TRUE(r->pruned);
  // What is left is only the current attempt's log: nothing more to prune.
  files = store_->ListFiles();
  ASSERT_THAT(files, SizeIs(1));
  EXPECT_EQ(files[0].attempt, 1);
  EXPECT_TRUE(PlanLogPruning(files, {}, kNow, {kDay, 16}).empty());
}

}  // namespace
}  // namespace trainyard::server
