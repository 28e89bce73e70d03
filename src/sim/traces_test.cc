#include "sim/traces.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

namespace trainyard::sim {
namespace {

using std::chrono::hours;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// The real traces live in shared/traces beside the repository (CI copies shared/
// there too). A missing folder is a failure, never a skip: these tests are the only
// check that the readers still accept the real files.
std::string RealTrace(const std::string& name) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/../shared/traces/" + name;
}

std::string ReadReal(const std::string& name) {
  Result<std::string> text = ReadTextFile(RealTrace(name));
  EXPECT_TRUE(text.ok()) << text.status().message() << "\nThe real traces must be at "
                         << RealTrace("")
                         << " (shared/ beside the repository root); see docs/traces.md.";
  return text.ok() ? *text : std::string();
}

template <typename T>
T Ok(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : T{};
}

template <typename T>
std::string Error(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string("(no error)") : r.status().message();
}

int64_t TotalGpus(const TraceJob& j) { return int64_t{j.replicas} * j.gpus_per_replica; }

bool SortedBySubmit(const Trace& t) {
  return std::is_sorted(t.jobs.begin(), t.jobs.end(),
                        [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
}

// ---- Gang shape ---------------------------------------------------------------------

TEST(GangShapeTest, PrefersWholeNodesThenPowersOfTwo) {
  using P = std::pair<int32_t, int32_t>;
  EXPECT_EQ(GangShape(0, 8), P(1, 0));
  EXPECT_EQ(GangShape(1, 8), P(1, 1));
  EXPECT_EQ(GangShape(7, 8), P(1, 7));
  EXPECT_EQ(GangShape(8, 8), P(1, 8));
  EXPECT_EQ(GangShape(12, 8), P(3, 4));
  EXPECT_EQ(GangShape(16, 8), P(2, 8));
  EXPECT_EQ(GangShape(20, 8), P(5, 4));
  EXPECT_EQ(GangShape(24, 8), P(3, 8));
  EXPECT_EQ(GangShape(9, 8), P(3, 3));
  EXPECT_EQ(GangShape(11, 8), P(11, 1));
  EXPECT_EQ(GangShape(512, 8), P(64, 8));
  EXPECT_EQ(GangShape(16, 4), P(4, 4));
  EXPECT_EQ(GangShape(15, 4), P(5, 3));
}

// ---- Philly -------------------------------------------------------------------------

TEST(PhillyTest, ReadsTheRealSubset) {
  Trace t = Ok(ParsePhillyJobs(ReadReal("philly_jobs_sep_oct.json"), "philly.json"));
  ASSERT_EQ(t.jobs.size(), 1455u);
  EXPECT_EQ(t.source, "philly:philly.json");
  EXPECT_THAT(t.warnings, ElementsAre());  // the subset has only complete, passed jobs
  EXPECT_TRUE(SortedBySubmit(t));

  // The first row: four attempts; duration is their sum (2,240,194 s), not `runtime`
  // (2,240,224 s from first start to last end, counting the gaps between attempts).
  const TraceJob& first = t.jobs.front();
  EXPECT_EQ(first.id, "application_1504131676014_2141");
  EXPECT_EQ(first.submit, Duration(0));
  EXPECT_EQ(first.duration, seconds(2'240'194));
  EXPECT_EQ(first.trace_wait, seconds(12));
  EXPECT_EQ(first.trace_attempts, 4);
  EXPECT_EQ(first.replicas, 1);
  EXPECT_EQ(first.gpus_per_replica, 8);
  EXPECT_EQ(first.tenant, "default");
  EXPECT_EQ(first.queue, "default");
  EXPECT_EQ(first.priority_class, "normal");
  EXPECT_EQ(first.gpu_type, "");

  const TraceJob& last = t.jobs.back();
  EXPECT_EQ(last.id, "application_1508364558011_23504");
  EXPECT_EQ(last.submit, seconds(4'971'169));  // 2017-10-31 23:23:30 - 2017-09-04 10:30:41
  EXPECT_EQ(last.duration, seconds(59'341));
  EXPECT_EQ(TotalGpus(last), 4);

  std::map<int64_t, int> by_gpus;
  int64_t gpu_seconds = 0;
  for (const TraceJob& j : t.jobs) {
    ++by_gpus[TotalGpus(j)];
    gpu_seconds += TotalGpus(j) * (j.duration.count() / 1000);
    EXPECT_GT(j.duration.count(), 0);
    EXPECT_GE(j.trace_wait.count(), 0);
  }
  EXPECT_THAT(by_gpus, ElementsAre(Pair(4, 738), Pair(7, 1), Pair(8, 639), Pair(12, 4),
                                   Pair(16, 50), Pair(20, 1), Pair(24, 2), Pair(32, 20)));
  EXPECT_EQ(gpu_seconds, 1'806'627'398);

  // Gang shapes of the odd sizes.
  for (const TraceJob& j : t.jobs) {
    if (j.id == "application_1508364558011_2624") {
      EXPECT_EQ(std::make_pair(j.replicas, j.gpus_per_replica), std::make_pair(1, 7));
      EXPECT_EQ(j.submit, seconds(3'948'945));
    } else if (j.id == "application_1508364558011_12261") {
      EXPECT_EQ(std::make_pair(j.replicas, j.gpus_per_replica), std::make_pair(5, 4));
      EXPECT_EQ(j.duration, seconds(113'973));
    } else if (j.id == "application_1508364558011_20365") {
      EXPECT_EQ(std::make_pair(j.replicas, j.gpus_per_replica), std::make_pair(3, 8));
    }
  }
}

// The full cluster_job_log: `jobid`, vc/user/status, GPUs only in attempts' detail,
// rows out of order, and the quirks the msr-fiddle README lists.
const char* kFullLog = R"([
  {"status": "Pass", "vc": "ee9e8c", "jobid": "application_2",
   "attempts": [{"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
                 "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3",
                                                  "gpu4", "gpu5", "gpu6", "gpu7"]},
                            {"ip": "m48", "gpus": ["gpu0", "gpu1", "gpu2", "gpu3",
                                                  "gpu4", "gpu5", "gpu6", "gpu7"]}]},
                {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 02:13:30",
                 "detail": []}],
   "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c"},
  {"status": "Killed", "vc": "6214e9", "jobid": "application_1", "user": "u1",
   "attempts": [{"start_time": "2017-10-07 00:00:10", "end_time": "2017-10-07 00:01:10",
                 "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}],
   "submitted_time": "2017-10-07 00:00:00"},
  {"status": "Failed", "vc": "6214e9", "jobid": "application_3", "user": "u1",
   "attempts": [], "submitted_time": "2017-10-07 00:30:00"},
  {"status": "Pass", "vc": "6214e9", "jobid": "application_4", "user": "u2",
   "attempts": [{"start_time": null, "end_time": "2017-10-07 00:40:00",
                 "detail": [{"ip": "m2", "gpus": ["gpu0", "gpu1"]}]},
                {"start_time": "2017-10-07 00:50:00", "end_time": "None",
                 "detail": [{"ip": "m2", "gpus": ["gpu0", "gpu1"]}]}],
   "submitted_time": "2017-10-07 00:35:00"},
  {"status": "Pass", "vc": "6214e9", "jobid": "application_5", "user": "u2",
   "attempts": [{"start_time": "2017-10-07 00:05:00", "end_time": "2017-10-07 00:06:00",
                 "detail": [{"ip": "m3", "gpus": []}]}],
   "submitted_time": "2017-10-07 00:05:00"}
])";

TEST(PhillyTest, ReadsTheFullLogFormatOutOfOrderWithQuirks) {
  Trace t = Ok(ParsePhillyJobs(kFullLog, "log.json"));
  ASSERT_EQ(t.jobs.size(), 3u);
  // Sorted by submit, counted from the earliest submit in the file.
  EXPECT_EQ(t.jobs[0].id, "application_1");
  EXPECT_EQ(t.jobs[0].submit, Duration(0));
  EXPECT_EQ(t.jobs[0].tenant, "6214e9");
  EXPECT_EQ(t.jobs[0].queue, "6214e9");
  EXPECT_EQ(t.jobs[0].duration, seconds(60));
  EXPECT_EQ(t.jobs[0].trace_wait, seconds(10));
  EXPECT_EQ(TotalGpus(t.jobs[0]), 1);

  // The attempt without a start is left out; the last one, still running, counts
  // until the log's last time (02:13:30).
  EXPECT_EQ(t.jobs[1].id, "application_4");
  EXPECT_EQ(t.jobs[1].submit, seconds(35 * 60));
  EXPECT_EQ(t.jobs[1].duration, seconds(83 * 60 + 30));
  EXPECT_EQ(t.jobs[1].trace_wait, seconds(15 * 60));
  EXPECT_EQ(t.jobs[1].trace_attempts, 1);
  EXPECT_EQ(TotalGpus(t.jobs[1]), 2);

  // GPUs counted from the first attempt's detail: 16 on two machines.
  EXPECT_EQ(t.jobs[2].id, "application_2");
  EXPECT_EQ(t.jobs[2].tenant, "ee9e8c");
  EXPECT_EQ(t.jobs[2].replicas, 2);
  EXPECT_EQ(t.jobs[2].gpus_per_replica, 8);
  EXPECT_EQ(t.jobs[2].duration, seconds(74 + 3600));
  EXPECT_EQ(t.jobs[2].trace_wait, seconds(30));
  EXPECT_EQ(t.jobs[2].trace_attempts, 2);

  EXPECT_THAT(
      t.warnings,
      ElementsAre("log.json:15: attempts: job application_3 has no attempts: it never started; "
                  "job skipped",
                  "log.json:18: attempts[0].start_time: job application_4 attempts[0] has no "
                  "start time (a logging error); attempt left out",
                  "log.json:20: attempts[1].end_time: job application_4 attempts[1] has no end "
                  "time: still running when the log ended; counted as running until the log's "
                  "last time",
                  "log.json:23: num_gpus: job application_5 holds no GPU; left out "
                  "(keep_cpu_jobs)"));
}

TEST(PhillyTest, StrictTurnsQuirksIntoErrors) {
  PhillyReadOptions strict;
  strict.strict = true;
  EXPECT_EQ(Error(ParsePhillyJobs(kFullLog, "log.json", strict)),
            "log.json:15: attempts: job application_3 has no attempts: it never started (not "
            "accepted when reading strictly)");
}

TEST(PhillyTest, KeepsCpuJobsWhenAsked) {
  PhillyReadOptions keep;
  keep.keep_cpu_jobs = true;
  Trace t = Ok(ParsePhillyJobs(kFullLog, "log.json", keep));
  ASSERT_EQ(t.jobs.size(), 4u);
  EXPECT_EQ(t.jobs[1].id, "application_5");
  EXPECT_EQ(t.jobs[1].gpus_per_replica, 0);
}

TEST(PhillyTest, WarningsAreCappedPerKindWithASummary) {
  std::string text = "[";
  for (int i = 0; i < 5; ++i) {
    text += std::string(i ? "," : "") + "\n{\"id\": \"j" + std::to_string(i) +
            "\", \"submitted_time\": \"2017-10-07 00:00:00\", \"attempts\": []}";
  }
  text += R"(,
{"id": "ok", "num_gpus": 1, "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-07 00:00:00", "end_time": "2017-10-07 00:00:01"}]}])";
  PhillyReadOptions options;
  options.max_warnings_per_kind = 2;
  Trace t = Ok(ParsePhillyJobs(text, "log.json", options));
  ASSERT_EQ(t.jobs.size(), 1u);
  EXPECT_THAT(t.warnings,
              ElementsAre(HasSubstr("job j0 has no attempts"), HasSubstr("job j1 has no attempts"),
                          "log.json: 5 rows in all: jobs that never started (only the first 2 "
                          "are listed)"));
}

TEST(PhillyTest, BadInputNamesLineFieldAndValue) {
  auto error = [](const std::string& text) { return Error(ParsePhillyJobs(text, "t.json")); };
  // Truncated: the real file cut in the middle of a job.
  std::string real = ReadReal("philly_jobs_sep_oct.json");
  EXPECT_EQ(
      error(real.substr(0, 200)),
      "t.json:10: not valid JSON: syntax error while parsing object - unexpected end of input; "
      "expected '}'");
  EXPECT_EQ(error(""),
            "t.json:1: not valid JSON: syntax error while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
  EXPECT_EQ(error("{\"id\": \"a\"}"),
            "t.json:1: a Philly job log is a JSON list of jobs, got an object");
  EXPECT_EQ(error("[1]"), "t.json:1: jobs[0]: must be a job object, got 1");

  const std::string head = "[\n {\"id\": \"a\",\n  \"submitted_time\": ";
  const std::string good_attempts =
      ",\n  \"attempts\": [{\"start_time\": \"2017-10-07 00:00:00\", \"end_time\": \"2017-10-07 "
      "01:00:00\"}]";
  EXPECT_EQ(error(head + "\"2017-13-01 00:00:00\"" + good_attempts + "}]"),
            "t.json:3: submitted_time: must be a time \"YYYY-MM-DD HH:MM:SS\" such as "
            "\"2017-10-07 01:11:39\", got \"2017-13-01 00:00:00\"");
  EXPECT_EQ(error(head + "\"2017-02-29 00:00:00\"" + good_attempts + "}]"),
            "t.json:3: submitted_time: must be a time \"YYYY-MM-DD HH:MM:SS\" such as "
            "\"2017-10-07 01:11:39\", got \"2017-02-29 00:00:00\"");
  EXPECT_EQ(error(head + "1507334400" + good_attempts + "}]"),
            "t.json:3: submitted_time: must be a time such as \"2017-10-07 01:11:39\", got "
            "1507334400");
  EXPECT_EQ(error(head + "null" + good_attempts + "}]"),
            "t.json:3: submitted_time: must be a time such as \"2017-10-07 01:11:39\", got null");
  const std::string submitted = head + "\"2017-10-07 00:00:00\"";
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"num_gpus\": -4}]"),
            "t.json:5: num_gpus: must be >= 0, got -4");
  // A number ends where the parser reads past it: here at the newline.
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"num_gpus\": -4\n}]"),
            "t.json:5: num_gpus: must be >= 0, got -4");
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"num_gpus\": \"8\"}]"),
            "t.json:5: num_gpus: must be a whole number, got \"8\"");
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"num_gpus\": 2.5}]"),
            "t.json:5: num_gpus: must be a whole number, got 2.5");
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"num_gpus\": 5000000}]"),
            "t.json:5: num_gpus: must be <= 1048576, got 5000000");
  EXPECT_EQ(error(submitted + ",\n  \"attempts\": {}}]"),
            "t.json:4: attempts: must be a list of {start_time, end_time} objects, got an object");
  EXPECT_EQ(error(submitted + "}]"),
            "t.json:2: attempts: required: the list of the job's attempts (it may be empty)");
  EXPECT_EQ(error("[\n {\"submitted_time\": \"2017-10-07 00:00:00\", \"attempts\": []}]"),
            "t.json:2: id: required: the job's id (field id or jobid)");
  EXPECT_EQ(error("[\n {\"id\": \"a\", \"attempts\": []}]"),
            "t.json:2: submitted_time: required: when the job was submitted");
  EXPECT_EQ(error(submitted +
                  ",\n  \"attempts\": [{\"start_time\": \"2017-10-07T00:00:00Z\", \"end_time\": "
                  "null}]}]"),
            "t.json:4: attempts[0].start_time: must be a time \"YYYY-MM-DD HH:MM:SS\" such as "
            "\"2017-10-07 01:11:39\", got \"2017-10-07T00:00:00Z\"");
  EXPECT_EQ(error(submitted + good_attempts + ",\n  \"vc\": \"a b\"}]"),
            "t.json:5: vc: may hold only letters, digits, '-', '_' and '.', got \"a b\"");
}

TEST(PhillyTest, RepeatedIdsAndReversedAttemptsAreQuirks) {
  const char* text = R"([
{"id": "a", "num_gpus": 1, "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-07 00:00:00", "end_time": "2017-10-07 00:01:00"},
              {"start_time": "2017-10-07 00:05:00", "end_time": "2017-10-07 00:04:00"}]},
{"id": "a", "num_gpus": 1, "submitted_time": "2017-10-07 00:00:00",
 "attempts": [{"start_time": "2017-10-06 23:59:00", "end_time": "2017-10-07 00:01:00"}]}
])";
  Trace t = Ok(ParsePhillyJobs(text, "t.json"));
  ASSERT_EQ(t.jobs.size(), 1u);
  EXPECT_EQ(t.jobs[0].duration, seconds(60));
  EXPECT_THAT(t.warnings,
              ElementsAre("t.json:4: attempts[1].end_time: job a attempts[1] ends 1m before it "
                          "starts; attempt left out",
                          "t.json:5: id: job a is already listed at line 2; the repeat skipped"));
}

// ---- Alibaba ------------------------------------------------------------------------

TEST(AlibabaTest, ReadsTheRealPodList) {
  Trace t = Ok(ParseAlibabaPods(ReadReal("openb_pod_list_default.csv"), "pods.csv"));
  // 8,152 pods less one that lived for 0 s.
  ASSERT_EQ(t.jobs.size(), 8151u);
  EXPECT_TRUE(SortedBySubmit(t));
  ASSERT_EQ(t.warnings.size(), 22u);
  EXPECT_EQ(t.warnings[0],
            "pods.csv:63: scheduled_time: pod openb-pod-0061 was never scheduled (Pending); it "
            "runs for deletion_time - creation_time = 2m5s");
  EXPECT_EQ(t.warnings[20],
            "pods.csv:7287: deletion_time: pod openb-pod-7285 lived for 0 s; pod skipped");
  EXPECT_EQ(t.warnings[21],
            "pods.csv: 896 rows in all: pods never scheduled (only the first 20 are listed)");

  const TraceJob& p0 = t.jobs[0];
  EXPECT_EQ(p0.id, "openb-pod-0000");
  EXPECT_EQ(p0.submit, Duration(0));
  EXPECT_EQ(p0.duration, seconds(12'537'496));
  EXPECT_EQ(p0.trace_wait, Duration(0));
  EXPECT_EQ(p0.trace_attempts, 1);
  EXPECT_EQ(p0.milli_cpus, 12'000);
  EXPECT_EQ(p0.memory_bytes, 16 * kGiB);
  EXPECT_EQ(p0.gpus_per_replica, 1);
  EXPECT_EQ(p0.gpu_milli, 0);
  EXPECT_EQ(p0.replicas, 1);
  EXPECT_EQ(p0.priority_class, "production");

  std::map<std::string, const TraceJob*> by_id;
  for (const TraceJob& j : t.jobs) by_id[j.id] = &j;
  const TraceJob& p1 = *by_id.at("openb-pod-0001");
  EXPECT_EQ(p1.gpu_milli, 460);
  EXPECT_EQ(p1.submit, seconds(427'061));
  const TraceJob& pending = *by_id.at("openb-pod-0061");
  EXPECT_EQ(pending.duration, seconds(125));
  EXPECT_EQ(pending.trace_wait, Duration(-1));
  EXPECT_EQ(pending.trace_attempts, 0);
  EXPECT_EQ(pending.priority_class, "best-effort");
  const TraceJob& last = *by_id.at("openb-pod-8151");
  EXPECT_EQ(last.duration, seconds(30));
  EXPECT_EQ(last.trace_wait, seconds(1));
  EXPECT_EQ(last.milli_cpus, 3152);
  EXPECT_EQ(last.memory_bytes, 5600 * kMiB);
  EXPECT_EQ(by_id.count("openb-pod-7285"), 0u);

  std::map<std::string, int> by_class;
  int64_t gpus = 0, cpu_only = 0, run = 0;
  for (const TraceJob& j : t.jobs) {
    ++by_class[j.priority_class];
    gpus += TotalGpus(j);
    cpu_only += j.gpus_per_replica == 0;
    run += j.duration.count() / 1000;
  }
  EXPECT_THAT(by_class, ElementsAre(Pair("best-effort", 3397), Pair("normal", 100),
                                    Pair("production", 4654)));
  EXPECT_EQ(gpus, 7432);
  EXPECT_EQ(cpu_only, 1088);
  EXPECT_EQ(run, 210'197'755);
}

TEST(AlibabaTest, CpuPodsCanBeLeftOut) {
  AlibabaReadOptions options;
  options.keep_cpu_pods = false;
  Trace t = Ok(ParseAlibabaPods(ReadReal("openb_pod_list_default.csv"), "pods.csv", options));
  EXPECT_EQ(t.jobs.size(), 8151u - 1088u);
}

const char* kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(AlibabaTest, QuirksAndStrict) {
  std::string text = std::string(kPodHeader) +
                     "b,1000,1024,1,500,V100M32|A100,BE,Running,20,100,30\n"
                     "a,1000,1024,8,1000,,Burstable,Succeeded,10,50,5\n"
                     "c,1000,1024,1,1000,,LS,Pending,40,,\n"
                     "d,1000,1024,1,1000,,Guaranteed,Failed,40,30,45\n";
  Trace t = Ok(ParseAlibabaPods(text, "p.csv"));
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].id, "a");  // sorted by creation_time
  EXPECT_EQ(t.jobs[0].trace_wait, Duration(0));
  EXPECT_EQ(t.jobs[0].duration, seconds(45));
  EXPECT_EQ(t.jobs[0].priority_class, "normal");
  EXPECT_EQ(t.jobs[0].gpus_per_replica, 8);
  EXPECT_EQ(t.jobs[1].gpu_type, "V100M32");
  EXPECT_EQ(t.jobs[1].gpu_milli, 500);
  EXPECT_THAT(
      t.warnings,
      ElementsAre("p.csv:2: gpu_spec: pod b accepts any of \"V100M32|A100\"; it asks for "
                  "the first, V100M32",
                  "p.csv:3: scheduled_time: pod a is scheduled 5s before its "
                  "creation_time; its trace wait counted as 0",
                  "p.csv:4: deletion_time: pod c has no deletion time, so no run time; pod "
                  "skipped",
                  "p.csv:5: deletion_time: pod d is deleted before it starts; pod skipped"));
  AlibabaReadOptions strict;
  strict.strict = true;
  EXPECT_EQ(Error(ParseAlibabaPods(text, "p.csv", strict)),
            "p.csv:2: gpu_spec: pod b accepts any of \"V100M32|A100\" (not accepted when reading "
            "strictly)");
}

TEST(AlibabaTest, BadInputNamesLineColumnAndValue) {
  auto error = [](const std::string& text) { return Error(ParseAlibabaPods(text, "p.csv")); };
  const std::string good = "a,1000,1024,1,1000,,LS,Running,0,10,0\n";
  EXPECT_EQ(error(""),
            "p.csv: empty; a pod list starts with a header line naming its columns: name, "
            "cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, "
            "deletion_time, scheduled_time");
  EXPECT_EQ(error("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,pod_phase,creation_time,"
                  "deletion_time,scheduled_time\n"),
            "p.csv:1: qos: missing column; a pod list needs columns name, cpu_milli, memory_mib, "
            "num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, "
            "scheduled_time");
  EXPECT_EQ(error("name,cpu_milli,memory_mib,num_gpus,gpu_milli,gpu_spec,qos,pod_phase,"
                  "creation_time,deletion_time,scheduled_time,user\n"),
            "p.csv:1: num_gpus: unknown column; did you mean num_gpu?\n"
            "p.csv:1: user: unknown column; a pod list has columns name, cpu_milli, memory_mib, "
            "num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, deletion_time, "
            "scheduled_time\n"
            "p.csv:1: num_gpu: missing column; a pod list needs columns name, cpu_milli, "
            "memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time, "
            "deletion_time, scheduled_time");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,one,1000,,LS,Running,0,10,0\n"),
            "p.csv:3: num_gpu: must be an integer, got \"one\"");
  EXPECT_EQ(error(kPodHeader + good + "b,-5,1024,1,1000,,LS,Running,0,10,0\n"),
            "p.csv:3: cpu_milli: must be >= 0, got -5");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,1,1000,,LX,Running,0,10,0\n"),
            "p.csv:3: qos: must be one of LS, Guaranteed, Burstable, BE, got \"LX\"; did you mean "
            "LS?");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,1,1000,,LS,Runing,0,10,0\n"),
            "p.csv:3: pod_phase: must be one of Succeeded, Running, Pending, Failed, got "
            "\"Runing\"");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,1,1000,,LS,Running,0,10\n"),
            "p.csv:3: row has 10 cells, the header has 11");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,1,1000,,LS,Running,,10,0\n"),
            "p.csv:3: creation_time: required: an integer between 0 and 1099511627776");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,2,500,,LS,Running,0,10,0\n"),
            "p.csv:3: gpu_milli: must be 1000 when num_gpu > 1 (only a single GPU is shared), "
            "got 500");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,0,500,,LS,Running,0,10,0\n"),
            "p.csv:3: gpu_milli: must be 0 when num_gpu is 0, got 500");
  EXPECT_EQ(error(kPodHeader + good + "b,1000,1024,1,1001,,LS,Running,0,10,0\n"),
            "p.csv:3: gpu_milli: must be <= 1000, got 1001");
  EXPECT_EQ(error(kPodHeader + good + "a,1000,1024,1,1000,,LS,Running,0,10,0\n"),
            "p.csv:3: name: pod \"a\" is already listed at line 2");
  EXPECT_EQ(error(kPodHeader + good + "\"b,1000,1024,1,1000,,LS,Running,0,10,0\n"),
            "p.csv:3: cell 1 opens a quote that the line never closes");
}

// ---- Trainyard CSV ------------------------------------------------------------------

const char* kCsvHeader =
    "submit,tenant,queue,priority,replicas,gpus_per_replica,gpu_type,duration,time_limit,"
    "checkpoint_interval\n";

TEST(TrainyardCsvTest, ReadsRequiredAndOptionalColumnsInAnyOrder) {
  Trace t = Ok(ParseTrainyardCsv(
      "# a comment\n"
      "duration,submit,tenant,queue,priority,replicas,gpus_per_replica,gpu_type,time_limit,"
      "checkpoint_interval,id,cpus,memory,topology,gpu_milli\n"
      "2h,90s,nlp,research,production,4,8,h100,3h,30m,train-1,8,64Gi,same-leaf:soft,\n"
      "\n"
      "600,0,default,default,normal,1,1,,,,serve,500m,,,250\r\n",
      "t.csv"));
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.source, "trainyard:t.csv");
  const TraceJob& a = t.jobs[1];
  EXPECT_EQ(a.id, "train-1");
  EXPECT_EQ(a.submit, seconds(90));
  EXPECT_EQ(a.tenant, "nlp");
  EXPECT_EQ(a.queue, "research");
  EXPECT_EQ(a.priority_class, "production");
  EXPECT_EQ(a.replicas, 4);
  EXPECT_EQ(a.gpus_per_replica, 8);
  EXPECT_EQ(a.gpu_type, "H100");
  EXPECT_EQ(a.duration, hours(2));
  EXPECT_EQ(a.time_limit, hours(3));
  EXPECT_EQ(a.checkpoint_interval, std::chrono::minutes(30));
  EXPECT_EQ(a.milli_cpus, 8000);
  EXPECT_EQ(a.memory_bytes, 64 * kGiB);
  EXPECT_EQ(a.topology.constraint, TopologyConstraint::kSameLeaf);
  EXPECT_FALSE(a.topology.hard);
  EXPECT_EQ(a.trace_wait, Duration(-1));
  const TraceJob& b = t.jobs[0];
  EXPECT_EQ(b.id, "serve");
  EXPECT_EQ(b.duration, seconds(600));
  EXPECT_EQ(b.time_limit, Duration(0));
  EXPECT_EQ(b.milli_cpus, 500);
  EXPECT_EQ(b.gpu_milli, 250);
  EXPECT_EQ(b.gpu_type, "");
}

TEST(TrainyardCsvTest, IdsDefaultToTheRowNumber) {
  Trace t = Ok(ParseTrainyardCsv(std::string(kCsvHeader) + "10,a,default,normal,1,1,,60,,\n"
                                                           "5,a,default,normal,1,1,,60,,\n",
                                 "t.csv"));
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].id, "2");
  EXPECT_EQ(t.jobs[1].id, "1");
}

TEST(TrainyardCsvTest, BadCellsNameLineColumnAndValue) {
  auto error = [](const std::string& rows) {
    return Error(ParseTrainyardCsv(std::string(kCsvHeader) + rows, "t.csv"));
  };
  const std::string good = "0,a,default,normal,1,8,H100,1h,,\n";
  EXPECT_EQ(error(good + "0,a,default,normal,1,8,H100,0s,,\n"),
            "t.csv:3: duration: must be > 0, got \"0s\"");
  EXPECT_EQ(error(good + "0,a,default,normal,1,8,H100,,,\n"),
            "t.csv:3: duration: expected a duration such as \"90s\", \"30m\", \"1h30m\", \"2d\" or "
            "\"HH:MM:SS\", got \"\"");
  EXPECT_EQ(error(good + "-5,a,default,normal,1,8,H100,1h,,\n"),
            "t.csv:3: submit: must be >= 0, got \"-5\"");
  EXPECT_EQ(error(good + "0,a,default,normal,0,8,H100,1h,,\n"),
            "t.csv:3: replicas: must be >= 1, got 0");
  EXPECT_EQ(error(good + "0,a,default,normal,1,65,H100,1h,,\n"),
            "t.csv:3: gpus_per_replica: must be <= 64, got 65");
  EXPECT_EQ(error(good + "0,a,default,normal,1,eight,H100,1h,,\n"),
            "t.csv:3: gpus_per_replica: must be an integer, got \"eight\"");
  EXPECT_EQ(error(good + "0,bad name,default,normal,1,8,H100,1h,,\n"),
            "t.csv:3: tenant: may hold only letters, digits, '-', '_' and '.', got \"bad name\"");
  EXPECT_EQ(error(good + "0,a,,normal,1,8,H100,1h,,\n"), "t.csv:3: queue: must not be empty");
  EXPECT_EQ(error(good + "0,a,default,normal,1,8,H100,1h,2 hours,\n"),
            "t.csv:3: time_limit: expected a duration such as \"90s\", \"30m\", \"1h30m\", \"2d\" "
            "or \"HH:MM:SS\", got \"2 hours\"");
  EXPECT_EQ(error(good + "0,a,default,normal,65536,64,H100,1h,,\n"),
            "t.csv:3: gpus_per_replica: the gang asks for 4194304 GPUs; at most 1048576");
  EXPECT_EQ(Error(ParseTrainyardCsv("submit,tenant,queue,priority,replicas,gpus,gpu_type,duration,"
                                    "time_limit,checkpoint_interval,node\n",
                                    "t.csv")),
            "t.csv:1: gpus: unknown column; did you mean cpus?\n"
            "t.csv:1: node: unknown column; a Trainyard trace has columns submit, tenant, queue, "
            "priority, replicas, gpus_per_replica, gpu_type, duration, time_limit, "
            "checkpoint_interval, id, gpu_milli, cpus, memory, topology, trace_wait, "
            "trace_attempts\n"
            "t.csv:1: gpus_per_replica: missing column; a Trainyard trace needs columns submit, "
            "tenant, queue, priority, replicas, gpus_per_replica, gpu_type, duration, time_limit, "
            "checkpoint_interval");
  EXPECT_EQ(Error(ParseTrainyardCsv("submit,submit\n", "t.csv")).substr(0, 52),
            "t.csv:1: submit: column appears twice in the header\n");

  const std::string with_optional =
      std::string(kCsvHeader)
          .insert(std::string(kCsvHeader).size() - 1, ",id,cpus,memory,topology,gpu_milli");
  auto error_opt = [&](const std::string& row) {
    return Error(ParseTrainyardCsv(with_optional + row, "t.csv"));
  };
  EXPECT_EQ(error_opt("0,a,default,normal,1,8,H100,1h,,,x,8,64Gi,,\n"
                      "0,a,default,normal,1,8,H100,1h,,,x,8,64Gi,,\n"),
            "t.csv:3: id: job \"x\" is already defined at line 2");
  EXPECT_EQ(error_opt("0,a,default,normal,1,8,H100,1h,,,x,8 cores,64Gi,,\n"),
            "t.csv:2: cpus: must be a number of CPUs such as 8, 0.5 or \"500m\" (at most 4096), "
            "got \"8 cores\"");
  EXPECT_EQ(
      error_opt("0,a,default,normal,1,8,H100,1h,,,x,8,64GB,,\n"),
      "t.csv:2: memory: expected a memory size such as \"512Mi\", \"256Gi\", \"1Ti\", \"64G\" "
      "or a number of bytes, got \"64GB\"");
  EXPECT_EQ(error_opt("0,a,default,normal,1,8,H100,1h,,,x,8,64Gi,same-rack,\n"),
            "t.csv:2: topology: must be none, same-node, same-nvlink or same-leaf, optionally "
            "followed by :soft or :hard (the default), got \"same-rack\"");
  EXPECT_EQ(error_opt("0,a,default,normal,1,8,H100,1h,,,x,8,64Gi,,500\n"),
            "t.csv:2: gpu_milli: a share of a GPU needs gpus_per_replica 1, got 8");
}

TEST(TrainyardCsvTest, RoundTripsEveryField) {
  SyntheticOptions o;
  o.seed = 11;
  o.jobs = 3000;
  o.tenants = {{"nlp", 2}, {"vision", 1}};
  o.priorities = {{"production", 1}, {"best-effort", 3}};
  o.time_limit_factor = 1.5;
  o.checkpoint_interval = std::chrono::minutes(20);
  o.gpu_type = "h100";
  o.gang_topology = {TopologyConstraint::kSameLeaf, true};
  Trace t = Synthesize(o);
  TraceJob extra;
  extra.id = "odd, \"quoted\" id";
  extra.submit = Duration(1'234'567'891);
  extra.gpus_per_replica = 1;
  extra.gpu_milli = 470;
  extra.milli_cpus = 1500;
  extra.memory_bytes = 1536 * kMiB;
  extra.duration = Duration(1500);
  extra.topology = {TopologyConstraint::kSameNvlink, false};
  extra.trace_wait = seconds(3);
  extra.trace_attempts = 2;
  t.jobs.push_back(extra);

  std::ostringstream out;
  WriteTrainyardCsv(t, out);
  Trace back = Ok(ParseTrainyardCsv(out.str(), "t.csv"));
  ASSERT_EQ(back.jobs.size(), t.jobs.size());
  for (size_t i = 0; i < t.jobs.size(); ++i) {
    ASSERT_EQ(back.jobs[i], t.jobs[i]) << "job " << i << " " << t.jobs[i].id;
  }
}

TEST(TrainyardCsvTest, RoundTripsTheRealTraces) {
  for (const Trace& t : {Ok(ParsePhillyJobs(ReadReal("philly_jobs_sep_oct.json"), "p.json")),
                         Ok(ParseAlibabaPods(ReadReal("openb_pod_list_default.csv"), "a.csv"))}) {
    std::ostringstream out;
    WriteTrainyardCsv(t, out);
    Trace back = Ok(ParseTrainyardCsv(out.str(), "t.csv"));
    EXPECT_TRUE(back.jobs == t.jobs) << t.source;
  }
}

TEST(TrainyardCsvTest, ReadsTheExample) {
  Trace t = Ok(ReadTrainyardCsv(std::string(TRAINYARD_SOURCE_DIR) + "/examples/sim/trace.csv"));
  EXPECT_GE(t.jobs.size(), 5u);
  EXPECT_TRUE(SortedBySubmit(t));
}

TEST(TrainyardCsvTest, FileErrorsNameThePath) {
  EXPECT_THAT(Error(ReadTrainyardCsv("/nonexistent/t.csv")),
              HasSubstr("/nonexistent/t.csv: cannot open"));
  EXPECT_EQ(Error(ReadTrainyardCsv(TRAINYARD_SOURCE_DIR)),
            std::string(TRAINYARD_SOURCE_DIR) + ": is a directory; give the trace file itself");
}

// ---- Synthetic ----------------------------------------------------------------------

TEST(SynthesizeTest, IsDeterministicForASeed) {
  SyntheticOptions o;
  o.seed = 42;
  o.jobs = 5000;
  o.tenants = {{"a", 1}, {"b", 1}};
  Trace t1 = Synthesize(o), t2 = Synthesize(o);
  EXPECT_TRUE(t1.jobs == t2.jobs);
  EXPECT_EQ(t1.source, "synthetic:seed=42");
  o.seed = 43;
  EXPECT_FALSE(Synthesize(o).jobs == t1.jobs);
}

constexpr int64_t kPinnedSecondSubmitMs = 3400;
constexpr int64_t kPinnedGpus = 6467;
constexpr int64_t kPinnedDurationS = 11832798;
constexpr int64_t kPinnedLastSubmitMs = 62069577;

// Pins the draws: a change here changes every synthetic trace anyone has saved a
// seed for. Only change it on purpose, and say so in docs/traces.md.
TEST(SynthesizeTest, DrawsArePinned) {
  SyntheticOptions o;
  o.seed = 7;
  o.jobs = 1000;
  Trace t = Synthesize(o);
  int64_t gpus = 0, duration_s = 0;
  for (const TraceJob& j : t.jobs) {
    gpus += TotalGpus(j);
    duration_s += j.duration.count() / 1000;
  }
  EXPECT_EQ(t.jobs[0].submit, Duration(0));
  EXPECT_EQ(t.jobs[1].submit, Duration(kPinnedSecondSubmitMs));
  EXPECT_EQ(gpus, kPinnedGpus);
  EXPECT_EQ(duration_s, kPinnedDurationS);
  EXPECT_EQ(t.jobs.back().submit, Duration(kPinnedLastSubmitMs));
}

TEST(SynthesizeTest, FollowsTheSizeMixArrivalRateAndDurations) {
  SyntheticOptions o;
  o.seed = 2026;
  o.jobs = 200'000;
  o.arrivals_per_hour = 120;
  o.duration_median = std::chrono::minutes(30);
  o.duration_sigma = 1.0;
  o.min_duration = seconds(1);
  Trace t = Synthesize(o);
  ASSERT_EQ(t.jobs.size(), 200'000u);
  EXPECT_TRUE(SortedBySubmit(t));
  std::map<int64_t, int64_t> by_size;
  std::vector<int64_t> durations;
  for (const TraceJob& j : t.jobs) {
    ++by_size[TotalGpus(j)];
    durations.push_back(j.duration.count());
    if (TotalGpus(j) > 8) {
      EXPECT_EQ(j.gpus_per_replica, 8);
    } else {
      EXPECT_EQ(j.replicas, 1);
    }
  }
  double total_weight = 0;
  for (const auto& [gpus, w] : o.size_mix) total_weight += w;
  for (const auto& [gpus, w] : o.size_mix) {
    double p = w / total_weight;
    double got = static_cast<double>(by_size[gpus]) / static_cast<double>(t.jobs.size());
    double sigma = std::sqrt(p * (1 - p) / static_cast<double>(t.jobs.size()));
    EXPECT_NEAR(got, p, 5 * sigma + 1e-4) << gpus << " GPUs";
  }
  // Poisson arrivals: the mean gap is 30 s.
  double mean_gap = static_cast<double>(t.jobs.back().submit.count()) / 1000.0 /
                    static_cast<double>(t.jobs.size() - 1);
  EXPECT_NEAR(mean_gap, 30.0, 0.3);
  std::nth_element(durations.begin(), durations.begin() + durations.size() / 2, durations.end());
  EXPECT_NEAR(static_cast<double>(durations[durations.size() / 2]) / 1000.0, 1800.0, 30.0);
}

TEST(SynthesizeTest, ExponentialDurationsLimitsAndCheckpoints) {
  SyntheticOptions o;
  o.seed = 5;
  o.jobs = 100'000;
  o.duration_shape = DurationShape::kExponential;
  o.duration_mean = hours(1);
  o.min_duration = seconds(1);
  o.time_limit_factor = 2;
  o.checkpoint_interval = std::chrono::minutes(10);
  o.priorities = {{"production", 1}, {"normal", 0}, {"best-effort", 1}};
  o.gang_topology = {TopologyConstraint::kSameLeaf, false};
  Trace t = Synthesize(o);
  double sum = 0;
  std::map<std::string, int> by_class;
  for (const TraceJob& j : t.jobs) {
    sum += static_cast<double>(j.duration.count()) / 1000.0;
    EXPECT_EQ(j.time_limit, 2 * j.duration);
    EXPECT_EQ(j.checkpoint_interval, std::chrono::minutes(10));
    EXPECT_EQ(j.topology.constraint,
              j.replicas > 1 ? TopologyConstraint::kSameLeaf : TopologyConstraint::kNone);
    ++by_class[j.priority_class];
  }
  EXPECT_NEAR(sum / static_cast<double>(t.jobs.size()), 3600.0, 40.0);
  EXPECT_EQ(by_class.count("normal"), 0u);  // weight 0: never drawn
  EXPECT_NEAR(by_class["production"], 50'000, 800);
}

TEST(SynthesizeTest, ValidationNamesTheKnob) {
  auto error = [](auto change) {
    SyntheticOptions o;
    change(o);
    Status s = ValidateSyntheticOptions(o);
    EXPECT_FALSE(s.ok());
    return s.message();
  };
  EXPECT_TRUE(ValidateSyntheticOptions(SyntheticOptions{}).ok());
  EXPECT_EQ(error([](SyntheticOptions& o) { o.jobs = -1; }),
            "jobs: must be between 0 and 100000000, got -1");
  EXPECT_EQ(error([](SyntheticOptions& o) { o.arrivals_per_hour = 0; }),
            "arrivals_per_hour: must be a number > 0, got 0");
  EXPECT_EQ(error([](SyntheticOptions& o) {
              o.size_mix = {{8, 1}, {0, 1}};
            }),
            "size_mix[1]: GPUs must be between 1 and 1048576, got 0");
  EXPECT_EQ(error([](SyntheticOptions& o) {
              o.size_mix = {{8, -1}};
            }),
            "size_mix[0]: weight must be a finite number >= 0, got -1");
  EXPECT_EQ(error([](SyntheticOptions& o) {
              o.size_mix = {{8, 0}};
            }),
            "size_mix: the weights must not all be 0");
  EXPECT_EQ(error([](SyntheticOptions& o) { o.size_mix = {}; }),
            "size_mix: must list at least one entry");
  EXPECT_EQ(error([](SyntheticOptions& o) {
              o.tenants = {{"no way", 1}};
            }),
            "tenants[0]: may hold only letters, digits, '-', '_' and '.', got \"no way\"");
  EXPECT_EQ(error([](SyntheticOptions& o) { o.time_limit_factor = 0.5; }),
            "time_limit_factor: must be 0 (no limit) or between 1 and 1000, got 0.5");
  EXPECT_EQ(error([](SyntheticOptions& o) { o.duration_sigma = -1; }),
            "duration_sigma: must be between 0 and 10, got -1");
  EXPECT_EQ(error([](SyntheticOptions& o) { o.max_duration = seconds(30); }),
            "max_duration: must be >= min_duration (1m), got 30s");
}

}  // namespace
}  // namespace trainyard::sim
