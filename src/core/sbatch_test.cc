#include "core/sbatch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr std::string_view kShebang = "#!/bin/bash\n";

std::string ReadExample(const std::string& rel) {
  std::ifstream f(std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> Strings(const std::vector<Diagnostic>& ds) {
  std::vector<std::string> out;
  for (const auto& d : ds) out.push_back(d.ToString());
  return out;
}

// A script of "#!/bin/bash", the given directive lines (each prefixed "#SBATCH "),
// "-J t" unless a name is among them, and one command.
std::string Script(const std::vector<std::string>& directives) {
  std::string s(kShebang);
  for (const auto& d : directives) s += "#SBATCH " + d + "\n";
  s += "srun python3 train.py\n";
  return s;
}

SpecParseResult Parse(std::string_view text) { return ParseSbatch(text, "job.sh"); }

// The spec from a script expected to parse without errors.
JobSpec ParseOk(std::string_view text) {
  SpecParseResult r = Parse(text);
  EXPECT_TRUE(r.ok()) << ::testing::PrintToString(Strings(r.errors));
  EXPECT_THAT(r.errors, IsEmpty());
  return r.ok() ? *r.spec : JobSpec{};
}

// The errors of a script expected to fail, as "file:line: field: message".
std::vector<std::string> Errors(std::string_view text) {
  SpecParseResult r = Parse(text);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.spec.has_value());
  return Strings(r.errors);
}

std::vector<std::string> Warnings(std::string_view text) { return Strings(Parse(text).warnings); }

// --- The script as a whole ---------------------------------------------------------

TEST(SbatchTest, MinimalScriptGetsDefaults) {
  const std::string text = "#!/bin/bash\n#SBATCH --job-name=train\npython3 train.py\n";
  SpecParseResult r = Parse(text);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r.warnings, IsEmpty());
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.name, "train");
  EXPECT_EQ(s.replicas, 1);
  EXPECT_EQ(s.min_replicas, 1);
  EXPECT_EQ(s.procs_per_replica, 1);
  EXPECT_EQ(s.resources, Resources{});
  EXPECT_EQ(s.tenant, "default");
  EXPECT_EQ(s.queue, "default");
  EXPECT_EQ(s.priority, "normal");
  EXPECT_TRUE(s.requeue);
  EXPECT_EQ(s.time_limit, Duration(0));
  EXPECT_EQ(s.checkpoint, CheckpointSpec{});
  EXPECT_EQ(s.script, text);
  EXPECT_THAT(s.command, IsEmpty());
  EXPECT_THAT(s.output, IsEmpty());
  EXPECT_THAT(s.error, IsEmpty());
}

TEST(SbatchTest, ScriptWithoutShebangRunsUnderBash) {
  const JobSpec s = ParseOk("#SBATCH -J t\necho hi\n");
  EXPECT_EQ(s.script, "#!/bin/bash\n#SBATCH -J t\necho hi\n");
}

TEST(SbatchTest, KeepsOtherInterpreters) {
  const std::string text = "#!/usr/bin/env python3\n#SBATCH -J t\nprint('hi')\n";
  EXPECT_EQ(ParseOk(text).script, text);
}

TEST(SbatchTest, NameDefaultsToTheFileName) {
  SpecParseResult r = ParseSbatch("#!/bin/bash\nsrun hostname\n", "/home/ml/train-2node.sbatch");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->name, "train-2node.sbatch");
}

TEST(SbatchTest, NameIsRequiredWhenTheFileNameCannotServe) {
  SpecParseResult r = ParseSbatch("#!/bin/bash\nsrun hostname\n", "<stdin>");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Strings(r.errors),
              ElementsAre("<stdin>: --job-name: is required (the file name \"<stdin>\" is not a "
                          "valid job name); add \"#SBATCH --job-name=NAME\""));
}

TEST(SbatchTest, EmptyScriptIsAnError) {
  EXPECT_THAT(Errors(""), ElementsAre("job.sh: the script is empty; sbatch needs at least a "
                                      "\"#!\" line and a command"));
  EXPECT_THAT(Errors(" \n\t\n\n"), ElementsAre(HasSubstr("the script is empty")));
}

TEST(SbatchTest, ScriptWithoutCommandsIsStillAJob) {
  SpecParseResult r = Parse("#!/bin/bash\n#SBATCH --job-name=idle\n\n# nothing to do\n");
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh: the script runs no command after its #SBATCH directives"));
  EXPECT_EQ(r.spec->name, "idle");
}

TEST(SbatchTest, OversizedScriptIsAnError) {
  std::string text = Script({"-J t"});
  text += "# " + std::string(SpecLimits::kMaxSpecBytes, 'x') + "\n";
  EXPECT_THAT(Errors(text), ElementsAre(HasSubstr("bytes; at most 1048576 are allowed")));
}

TEST(SbatchTest, NulByteIsAnErrorAtItsLine) {
  const std::string text = std::string("#!/bin/bash\n#SBATCH -J t\necho a") + '\0' + "b\n";
  EXPECT_THAT(Errors(text),
              ElementsAre("job.sh:3: the script contains a NUL byte; is it a binary file?"));
}

TEST(SbatchTest, DosLineBreaksAreAnError) {
  EXPECT_THAT(Errors("#!/bin/bash\r\n#SBATCH -J t\r\necho hi\r\n"),
              ElementsAre("job.sh:1: the script has DOS line breaks (\\r\\n), which sbatch "
                          "rejects and bash misreads; convert it with dos2unix"));
}

TEST(SbatchTest, LastLineWithoutNewline) {
  const JobSpec s = ParseOk("#!/bin/bash\n#SBATCH -J t\n#SBATCH -N 3");
  EXPECT_EQ(s.replicas, 3);
}

// --- Where directives are read --------------------------------------------------------

TEST(SbatchTest, BlankLinesAndCommentsMayPrecedeDirectives) {
  const JobSpec s = ParseOk(
      "#!/bin/bash\n\n# A job.\n   \n#SBATCH -J t\n\n## SBATCH --nodes=8 (off)\n"
      "##SBATCH --nodes=9\n#SBATCH --nodes=2\nsrun true\n");
  EXPECT_EQ(s.replicas, 2);
}

TEST(SbatchTest, DirectivesAfterTheFirstCommandAreIgnoredWithAWarning) {
  const std::string text =
      "#!/bin/bash\n#SBATCH -J t\n#SBATCH --nodes=2\nmodule load cuda\n#SBATCH --nodes=4\n"
      "srun true\n#SBATCH --gres=gpu:8\n";
  SpecParseResult r = Parse(text);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 2);
  EXPECT_EQ(r.spec->resources.gpus, 0);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:5: \"#SBATCH --nodes=4\" comes after the first command (line "
                          "4), so sbatch ignores it and so does Trainyard; move it above that "
                          "line",
                          "job.sh:7: \"#SBATCH --gres=gpu:8\" comes after the first command "
                          "(line 4), so sbatch ignores it and so does Trainyard; move it above "
                          "that line"));
}

TEST(SbatchTest, IndentedCommandEndsTheDirectives) {
  SpecParseResult r = Parse("#!/bin/bash\n#SBATCH -J t\n  echo hi\n#SBATCH -N 2\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 1);
  EXPECT_THAT(Strings(r.warnings), ElementsAre(HasSubstr("job.sh:4: ")));
}

TEST(SbatchTest, CommentsThatLookLikeDirectivesGetAWarning) {
  const std::string text =
      "#!/bin/bash\n#SBATCH -J t\n# SBATCH --nodes=2\n#sbatch --nodes=3\n  #SBATCH -N 4\n"
      "# sbatch submits this script\n##SBATCH --nodes=5\nsrun true\n";
  SpecParseResult r = Parse(text);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 1);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:3: \"# SBATCH --nodes=2\" is a comment, not a directive: "
                          "sbatch reads only lines that start with \"#SBATCH\" exactly",
                          HasSubstr("job.sh:4: \"#sbatch --nodes=3\" is a comment"),
                          HasSubstr("job.sh:5: \"  #SBATCH -N 4\" is a comment")));
}

// --- Option forms ---------------------------------------------------------------------

class NodeFormTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeFormTest, EveryFormSetsReplicas) {
  const JobSpec s = ParseOk(Script({"-J t", GetParam()}));
  EXPECT_EQ(s.replicas, 3);
  EXPECT_EQ(s.min_replicas, 3);
}

INSTANTIATE_TEST_SUITE_P(Forms, NodeFormTest,
                         ::testing::Values("--nodes=3", "--nodes 3", "-N 3", "-N3", "--nodes='3'",
                                           "--nodes=\"3\"", "--nodes=3   # three nodes",
                                           "--nodes=3# three", "\t--nodes\t3"));

TEST(SbatchTest, ShortOptions) {
  const JobSpec s =
      ParseOk(Script({"-J short", "-N 2", "-n 8", "-c 4", "-t 90", "-p gpu", "-A team-a", "-q high",
                      "-o out-%j.log", "-e err-%j.log", "-D /work/dir"}));
  EXPECT_EQ(s.name, "short");
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 4);
  EXPECT_EQ(s.resources.milli_cpus, 16'000);
  EXPECT_EQ(s.time_limit, std::chrono::minutes(90));
  EXPECT_EQ(s.queue, "gpu");
  EXPECT_EQ(s.tenant, "team-a");
  EXPECT_EQ(s.priority, "high");
  EXPECT_EQ(s.output, "out-%j.log");
  EXPECT_EQ(s.error, "err-%j.log");
  EXPECT_EQ(s.working_dir, "/work/dir");
}

TEST(SbatchTest, AttachedShortValues) {
  const JobSpec s = ParseOk(Script({"-Jattached", "-N2", "-n16", "-c2", "-t1:00:00"}));
  EXPECT_EQ(s.name, "attached");
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 8);
  EXPECT_EQ(s.resources.milli_cpus, 16'000);
  EXPECT_EQ(s.time_limit, std::chrono::hours(1));
}

TEST(SbatchTest, LongOptionsWithSpaceSeparatedValues) {
  const JobSpec s = ParseOk(
      Script({"--job-name spaced", "--partition research", "--account nlp", "--qos low",
              "--mem 64G", "--time 2:00:00", "--output logs/%x-%j.out", "--chdir /home/ml"}));
  EXPECT_EQ(s.name, "spaced");
  EXPECT_EQ(s.queue, "research");
  EXPECT_EQ(s.tenant, "nlp");
  EXPECT_EQ(s.priority, "low");
  EXPECT_EQ(s.resources.memory_bytes, 64 * kGiB);
  EXPECT_EQ(s.time_limit, std::chrono::hours(2));
  EXPECT_EQ(s.output, "logs/%x-%j.out");
  EXPECT_EQ(s.working_dir, "/home/ml");
}

TEST(SbatchTest, SeveralOptionsOnOneLine) {
  const JobSpec s = ParseOk(Script({"-J t -N 2 --ntasks-per-node=4 --gres=gpu:4  # the shape"}));
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 4);
  EXPECT_EQ(s.resources.gpus, 4);
}

TEST(SbatchTest, QuotedAndEscapedValues) {
  const JobSpec s = ParseOk(Script({"-J t", "--output=\"/data/my runs/%x-%j.out\"",
                                    "--error='/data/#errs/%j.err'", "--chdir=/data/a\\ b"}));
  EXPECT_EQ(s.output, "/data/my runs/%x-%j.out");
  EXPECT_EQ(s.error, "/data/#errs/%j.err");
  EXPECT_EQ(s.working_dir, "/data/a b");
}

TEST(SbatchTest, UnquotedHashStartsAComment) {
  EXPECT_EQ(ParseOk(Script({"--job-name=run#2"})).name, "run");
}

TEST(SbatchTest, UnterminatedQuoteIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "--output=\"/data/x.out"})),
              ElementsAre("job.sh:3: unterminated quote in \"#SBATCH --output=\\\"/data/x.out\""));
}

TEST(SbatchTest, RepeatedOptionLastOneCountsWithAWarning) {
  SpecParseResult r = Parse(Script({"-J t", "--nodes=2", "-N 4"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 4);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:4: -N: overrides \"--nodes=2\" at line 3; the last one "
                          "counts, as in sbatch"));
}

// --- Nodes and tasks ------------------------------------------------------------------

TEST(SbatchTest, NodeRangeSetsMinAndMaxReplicas) {
  const JobSpec s = ParseOk(Script({"-J t", "--nodes=2-4"}));
  EXPECT_EQ(s.replicas, 4);
  EXPECT_EQ(s.min_replicas, 2);
  const JobSpec same = ParseOk(Script({"-J t", "-N 3-3"}));
  EXPECT_EQ(same.replicas, 3);
  EXPECT_EQ(same.min_replicas, 3);
}

TEST(SbatchTest, NodeRangeMinAboveMaxIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=4-2"})),
              ElementsAre("job.sh:3: --nodes: the minimum 4 is larger than the maximum 2, got "
                          "\"4-2\""));
}

TEST(SbatchTest, BadNodeCounts) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=0"})),
              ElementsAre("job.sh:3: --nodes: must be >= 1, got 0"));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=abc"})),
              ElementsAre("job.sh:3: --nodes: expected a node count such as 2 or a range "
                          "MIN-MAX such as 2-4, got \"abc\""));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=1000000000000"})),
              ElementsAre("job.sh:3: --nodes: must be <= 65536, got 1000000000000"));
  EXPECT_THAT(Errors(Script({"-J t", "-N 99999999999999999999999999"})),
              ElementsAre("job.sh:3: -N: must be <= 65536, got 99999999999999999999999999"));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=-3"})), ElementsAre(HasSubstr("got \"-3\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=2-"})), ElementsAre(HasSubstr("got \"2-\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=0-2"})),
              ElementsAre("job.sh:3: --nodes: must be >= 1, got 0"));
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=2,4"})), ElementsAre(HasSubstr("got \"2,4\"")));
}

TEST(SbatchTest, NtasksPerNodeSetsProcsPerReplica) {
  const JobSpec s = ParseOk(Script({"-J t", "--nodes=2", "--ntasks-per-node=8"}));
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 8);
  EXPECT_EQ(ParseOk(Script({"-J t", "--tasks-per-node=4"})).procs_per_replica, 4);
}

TEST(SbatchTest, NtasksAloneIsOneReplica) {
  const JobSpec s = ParseOk(Script({"-J t", "--ntasks=4"}));
  EXPECT_EQ(s.replicas, 1);
  EXPECT_EQ(s.procs_per_replica, 4);
}

TEST(SbatchTest, NtasksIsSpreadEvenlyOverNodes) {
  const JobSpec s = ParseOk(Script({"-J t", "--ntasks=16", "--nodes=2"}));
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 8);
  // Agreeing with --ntasks-per-node is fine.
  const JobSpec agree = ParseOk(Script({"-J t", "-N 2", "-n 16", "--ntasks-per-node=8"}));
  EXPECT_EQ(agree.procs_per_replica, 8);
}

TEST(SbatchTest, NtasksWithPerNodeAndNoNodesGivesTheNodeCount) {
  const JobSpec s = ParseOk(Script({"-J t", "--ntasks=16", "--ntasks-per-node=8"}));
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 8);
}

TEST(SbatchTest, NtasksThatDoNotDivideAreAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=4", "--ntasks=6"})),
              ElementsAre("job.sh:4: --ntasks: 6 tasks do not divide evenly over 4 nodes, "
                          "\"--nodes=4\" (line 3); Trainyard runs the same number of tasks on "
                          "every node: give a multiple of 4 or --ntasks-per-node"));
  EXPECT_THAT(Errors(Script({"-J t", "-n 2", "-N 4"})),
              ElementsAre(HasSubstr("job.sh:3: -n: 2 tasks do not divide evenly over 4 nodes")));
  EXPECT_THAT(Errors(Script({"-J t", "--ntasks=12", "--ntasks-per-node=8"})),
              ElementsAre("job.sh:3: --ntasks: 12 tasks do not fill whole nodes of "
                          "\"--ntasks-per-node=8\" (line 4); give a multiple of 8 or --nodes"));
}

TEST(SbatchTest, NtasksConflictingWithPerNodeIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "-N 2", "-n 8", "--ntasks-per-node=8"})),
              ElementsAre("job.sh:4: -n: 8 tasks over 2 nodes is 4 per node, but "
                          "\"--ntasks-per-node=8\" (line 5) asks for 8; give one of them"));
}

TEST(SbatchTest, NtasksWithANodeRangeIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=2-4", "--ntasks=8"})),
              ElementsAre("job.sh:4: --ntasks: 8 tasks cannot be spread evenly over a range of "
                          "nodes, \"--nodes=2-4\" (line 3); give --ntasks-per-node instead"));
}

TEST(SbatchTest, TooManyTasksPerNode) {
  EXPECT_THAT(Errors(Script({"-J t", "--ntasks=2048"})),
              ElementsAre("job.sh:3: --ntasks: 2048 tasks on one node is more than the 1024 "
                          "allowed; add --nodes to spread them over several nodes"));
  EXPECT_THAT(Errors(Script({"-J t", "--ntasks-per-node=2000"})),
              ElementsAre("job.sh:3: --ntasks-per-node: must be <= 1024, got 2000"));
  EXPECT_THAT(Errors(Script({"-J t", "--ntasks=0"})),
              ElementsAre("job.sh:3: --ntasks: must be >= 1, got 0"));
}

// --- CPUs -----------------------------------------------------------------------------

TEST(SbatchTest, CpusPerTaskTimesTasksPerNode) {
  EXPECT_EQ(ParseOk(Script({"-J t", "--cpus-per-task=4"})).resources.milli_cpus, 4000);
  // Computed after every directive is read, whatever the order.
  EXPECT_EQ(ParseOk(Script({"-J t", "-c 4", "--ntasks-per-node=8"})).resources.milli_cpus, 32'000);
  EXPECT_EQ(ParseOk(Script({"-J t", "--ntasks-per-node=8", "-c 4"})).resources.milli_cpus, 32'000);
  EXPECT_EQ(ParseOk(Script({"-J t", "-c 4", "-N 2", "-n 16"})).resources.milli_cpus, 32'000);
}

TEST(SbatchTest, TooManyCpusIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "--ntasks-per-node=128", "--cpus-per-task=64"})),
              ElementsAre("job.sh:4: --cpus-per-task: 64 CPUs per task x 128 tasks per node = "
                          "8192 CPUs per node; at most 4096 are allowed"));
  EXPECT_THAT(Errors(Script({"-J t", "-c 0"})), ElementsAre("job.sh:3: -c: must be >= 1, got 0"));
  EXPECT_THAT(Errors(Script({"-J t", "-c four"})),
              ElementsAre("job.sh:3: -c: expected a number of CPUs per task such as 8, got "
                          "\"four\""));
}

// --- GPUs -----------------------------------------------------------------------------

struct GresCase {
  std::string directive;
  int64_t gpus;
  std::string type;
};

class GresTest : public ::testing::TestWithParam<GresCase> {};

TEST_P(GresTest, SetsGpus) {
  const JobSpec s = ParseOk(Script({"-J t", GetParam().directive}));
  EXPECT_EQ(s.resources.gpus, GetParam().gpus);
  EXPECT_EQ(s.resources.gpu_type, GetParam().type);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, GresTest,
    ::testing::Values(GresCase{"--gres=gpu", 1, ""}, GresCase{"--gres=gpu:4", 4, ""},
                      GresCase{"--gres=gpu:a100:4", 4, "A100"},
                      GresCase{"--gres=gpu:H100:8", 8, "H100"},
                      GresCase{"--gres gpu:a100_80gb:2", 2, "A100_80GB"},
                      GresCase{"--gres=none", 0, ""}, GresCase{"--gpus-per-node=8", 8, ""},
                      GresCase{"--gpus-per-node=l40s:2", 2, "L40S"},
                      GresCase{"--gres=gpu:h100:8 --gpus-per-node=h100:8", 8, "H100"}));

TEST(SbatchTest, NonGpuGresIsIgnoredWithAWarning) {
  SpecParseResult r = Parse(Script({"-J t", "--gres=gpu:h100:8,shard:2"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->resources.gpus, 8);
  EXPECT_EQ(r.spec->resources.gpu_type, "H100");
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:3: --gres: ignoring \"shard:2\": Trainyard schedules only gpu"));
  r = Parse(Script({"-J t", "--gres=nic:1,gpu:2"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->resources.gpus, 2);
}

TEST(SbatchTest, GresNameCloseToGpuGetsAHint) {
  SpecParseResult r = Parse(Script({"-J t", "--gres=gpus:4"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->resources.gpus, 0);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:3: --gres: ignoring \"gpus:4\": Trainyard schedules only gpu; "
                          "did you mean gpu?"));
  EXPECT_THAT(Warnings(Script({"-J t", "--gres=GPU:4"})),
              ElementsAre(HasSubstr("did you mean gpu?")));
}

TEST(SbatchTest, BadGres) {
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:x"})),
              ElementsAre("job.sh:3: --gres: expected gpu[:TYPE]:COUNT such as gpu:8 or "
                          "gpu:a100:8, got \"gpu:x\""));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:a100:x"})),
              ElementsAre(HasSubstr("got \"gpu:a100:x\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu::4"})), ElementsAre(HasSubstr("got \"gpu::4\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:a:b:4"})), ElementsAre(HasSubstr("gpu:a:b:4")));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:-1"})), ElementsAre(HasSubstr("got \"gpu:-1\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:100"})),
              ElementsAre("job.sh:3: --gres: GPU count must be <= 64, got 100 per node"));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:1,gpu:2"})),
              ElementsAre("job.sh:3: --gres: asks for gpu twice, got \"gpu:1,gpu:2\""));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:1,"})), ElementsAre(HasSubstr("got")));
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:a+b:1"})),
              ElementsAre("job.sh:3: --gres: must be a GPU model such as H100, A100 or L40S, got "
                          "\"A+B\""));
}

TEST(SbatchTest, BadGpusPerNode) {
  EXPECT_THAT(Errors(Script({"-J t", "--gpus-per-node=many"})),
              ElementsAre("job.sh:3: --gpus-per-node: expected [TYPE:]COUNT such as 8 or a100:8, "
                          "got \"many\""));
  EXPECT_THAT(Errors(Script({"-J t", "--gpus-per-node=:8"})), ElementsAre(HasSubstr("\":8\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--gpus-per-node=65"})),
              ElementsAre("job.sh:3: --gpus-per-node: GPU count must be <= 64, got 65 per node"));
}

TEST(SbatchTest, GresAndGpusPerNodeMustAgree) {
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:8", "--gpus-per-node=a100:4"})),
              ElementsAre("job.sh:4: --gpus-per-node: asks for 4 A100 GPUs per node but "
                          "\"--gres=gpu:8\" (line 3) asks for 8 GPUs; give one of them"));
}

TEST(SbatchTest, GpuTypeWithZeroGpusIsReportedAgainstTheDirective) {
  EXPECT_THAT(Errors(Script({"-J t", "--gres=gpu:a100:0"})),
              ElementsAre("job.sh:3: --gres: is set to A100 but resources.gpus is 0"));
}

TEST(SbatchTest, TotalGpusOfTheGangIsCheckedAgainstTheDirective) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes=65536", "--gres=gpu:64"})),
              ElementsAre("job.sh:4: --gres: the gang asks for 4194304 GPUs in all (replicas x "
                          "gpus); at most 1048576 are allowed"));
}

// --- Memory ---------------------------------------------------------------------------

struct MemCase {
  std::string value;
  int64_t bytes;
};

class MemTest : public ::testing::TestWithParam<MemCase> {};

TEST_P(MemTest, SlurmUnits) {
  EXPECT_EQ(ParseOk(Script({"-J t", "--mem=" + GetParam().value})).resources.memory_bytes,
            GetParam().bytes);
}

INSTANTIATE_TEST_SUITE_P(Units, MemTest,
                         ::testing::Values(MemCase{"4096", 4096 * kMiB},
                                           MemCase{"512M", 512 * kMiB}, MemCase{"512m", 512 * kMiB},
                                           MemCase{"64G", 64 * kGiB}, MemCase{"64g", 64 * kGiB},
                                           MemCase{"16GB", 16 * kGiB}, MemCase{"2T", 2 * kTiB},
                                           MemCase{"1024K", kMiB}, MemCase{"64T", 64 * kTiB}));

TEST(SbatchTest, MemZeroMeansAllOfTheNodeInSlurmAndWarns) {
  SpecParseResult r = Parse(Script({"-J t", "--mem=0"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->resources.memory_bytes, 0);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre(HasSubstr("job.sh:3: --mem: 0 asks sbatch for all")));
}

TEST(SbatchTest, BadMemory) {
  EXPECT_THAT(Errors(Script({"-J t", "--mem=-5"})),
              ElementsAre("job.sh:3: --mem: expected a size per node such as 64G, 512M or 4096 "
                          "(a plain number is megabytes), got \"-5\""));
  EXPECT_THAT(Errors(Script({"-J t", "--mem=64Gi"})), ElementsAre(HasSubstr("got \"64Gi\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--mem=lots"})), ElementsAre(HasSubstr("got \"lots\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--mem=1.5G"})), ElementsAre(HasSubstr("got \"1.5G\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--mem=65T"})),
              ElementsAre("job.sh:3: --mem: must be at most 64T per node, got \"65T\""));
  EXPECT_THAT(Errors(Script({"-J t", "--mem=99999999999999999999G"})),
              ElementsAre(HasSubstr("must be at most 64T per node")));
}

// --- Time -----------------------------------------------------------------------------

struct TimeCase {
  std::string value;
  Duration limit;
};

class TimeTest : public ::testing::TestWithParam<TimeCase> {};

TEST_P(TimeTest, SlurmForms) {
  EXPECT_EQ(ParseOk(Script({"-J t", "--time=" + GetParam().value})).time_limit, GetParam().limit);
}

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

INSTANTIATE_TEST_SUITE_P(
    Forms, TimeTest,
    ::testing::Values(TimeCase{"30", minutes(30)}, TimeCase{"30:15", minutes(30) + seconds(15)},
                      TimeCase{"1:00:00", hours(1)}, TimeCase{"48:00:00", hours(48)},
                      TimeCase{"2-12", hours(60)}, TimeCase{"2-12:30", hours(60) + minutes(30)},
                      TimeCase{"1-00:00:05", hours(24) + seconds(5)}, TimeCase{"0", Duration(0)},
                      TimeCase{"UNLIMITED", Duration(0)}, TimeCase{"infinite", Duration(0)},
                      TimeCase{"-1", Duration(0)}));

TEST(SbatchTest, BadTime) {
  EXPECT_THAT(Errors(Script({"-J t", "--time=banana"})),
              ElementsAre("job.sh:3: --time: expected MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, "
                          "D-HH:MM:SS or UNLIMITED, got \"banana\""));
  // Trainyard's own duration forms are not Slurm's.
  EXPECT_THAT(Errors(Script({"-J t", "-t 2h"})), ElementsAre(HasSubstr("job.sh:3: -t: expected")));
  EXPECT_THAT(Errors(Script({"-J t", "-t 1:2:3:4"})), ElementsAre(HasSubstr("\"1:2:3:4\"")));
  EXPECT_THAT(Errors(Script({"-J t", "-t -5"})), ElementsAre(HasSubstr("\"-5\"")));
  EXPECT_THAT(Errors(Script({"-J t", "-t 1-"})), ElementsAre(HasSubstr("\"1-\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--time=400-00:00:00"})),
              ElementsAre("job.sh:3: --time: must be between 0 (none) and 366d, got 400d"));
}

// --- Signal and requeue ---------------------------------------------------------------

TEST(SbatchTest, SignalForms) {
  JobSpec s = ParseOk(Script({"-J t", "--signal=USR1@120"}));
  EXPECT_EQ(s.checkpoint.notice_signal, "SIGUSR1");
  EXPECT_EQ(s.checkpoint.preempt_grace, seconds(120));
  s = ParseOk(Script({"-J t", "--signal=SIGUSR2"}));
  EXPECT_EQ(s.checkpoint.notice_signal, "SIGUSR2");
  EXPECT_EQ(s.checkpoint.preempt_grace, seconds(60));  // sbatch's default
  s = ParseOk(Script({"-J t", "--signal=10@5"}));
  EXPECT_EQ(s.checkpoint.notice_signal, "SIGUSR1");
  EXPECT_EQ(s.checkpoint.preempt_grace, seconds(5));
  s = ParseOk(Script({"-J t", "--signal=term@0"}));
  EXPECT_EQ(s.checkpoint.notice_signal, "SIGTERM");
  EXPECT_EQ(s.checkpoint.preempt_grace, seconds(0));
}

TEST(SbatchTest, SignalFlagsWarn) {
  SpecParseResult r = Parse(Script({"-J t", "--signal=B:USR1@300"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->checkpoint.notice_signal, "SIGUSR1");
  EXPECT_EQ(r.spec->checkpoint.preempt_grace, seconds(300));
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:3: --signal: B: makes sbatch signal only the batch shell; "
                          "Trainyard signals every rank"));
  EXPECT_THAT(Warnings(Script({"-J t", "--signal=R:USR2@60"})),
              ElementsAre(HasSubstr("R: (overlap with reservations) has no meaning")));
}

TEST(SbatchTest, BadSignals) {
  EXPECT_THAT(Errors(Script({"-J t", "--signal=FOO@10"})),
              ElementsAre("job.sh:3: --signal: expected [R:|B:]SIGNAL[@SECONDS] such as USR1@120 "
                          "or B:TERM@60, got \"FOO@10\""));
  EXPECT_THAT(Errors(Script({"-J t", "--signal=X:USR1"})), ElementsAre(HasSubstr("\"X:USR1\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--signal=@10"})), ElementsAre(HasSubstr("\"@10\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--signal=USR1@soon"})),
              ElementsAre("job.sh:3: --signal: expected a whole number of seconds from 0 to "
                          "65535 after '@', got \"soon\""));
  EXPECT_THAT(Errors(Script({"-J t", "--signal=USR1@70000"})),
              ElementsAre(HasSubstr("from 0 to 65535 after '@', got \"70000\"")));
  EXPECT_THAT(Errors(Script({"-J t", "--signal=KILL@10"})),
              ElementsAre("job.sh:3: --signal: SIGKILL cannot be caught, so the job could never "
                          "checkpoint; use SIGUSR1"));
}

TEST(SbatchTest, RequeueAndNoRequeue) {
  EXPECT_TRUE(ParseOk(Script({"-J t", "--requeue"})).requeue);
  EXPECT_FALSE(ParseOk(Script({"-J t", "--no-requeue"})).requeue);
  SpecParseResult r = Parse(Script({"-J t", "--no-requeue", "--requeue"}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.spec->requeue);
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("job.sh:4: --requeue: overrides \"--no-requeue\" at line 3; the last "
                          "one counts, as in sbatch"));
  EXPECT_THAT(Errors(Script({"-J t", "--requeue=yes"})),
              ElementsAre("job.sh:3: --requeue: takes no value, got \"yes\""));
}

// --- Names and paths ------------------------------------------------------------------

TEST(SbatchTest, QueueingNames) {
  const JobSpec s =
      ParseOk(Script({"-J t", "--partition=research", "--qos=high", "--account=nlp"}));
  EXPECT_EQ(s.queue, "research");
  EXPECT_EQ(s.priority, "high");
  EXPECT_EQ(s.tenant, "nlp");
}

TEST(SbatchTest, PartitionListIsAnError) {
  EXPECT_THAT(Errors(Script({"-J t", "-p gpu,debug"})),
              ElementsAre("job.sh:3: -p: Trainyard takes one queue, got a list \"gpu,debug\""));
}

TEST(SbatchTest, InvalidNamesAreReportedAgainstTheDirective) {
  EXPECT_THAT(Errors(Script({"-J 'my job'"})),
              ElementsAre("job.sh:2: -J: may hold only letters, digits, '-', '_' and '.', got "
                          "\"my job\""));
  EXPECT_THAT(Errors(Script({"-J t", "--account=_team"})),
              ElementsAre("job.sh:3: --account: must start with a letter or digit, got "
                          "\"_team\""));
}

TEST(SbatchTest, OutputPatternsAreKeptAsWritten) {
  const JobSpec s =
      ParseOk(Script({"-J t", "--output=slurm-%x.%j.out", "-e slurm-%A_%a.err", "--chdir=runs"}));
  EXPECT_EQ(s.output, "slurm-%x.%j.out");
  EXPECT_EQ(s.error, "slurm-%A_%a.err");
  EXPECT_EQ(s.working_dir, "runs");
}

TEST(SbatchTest, PathsThatClimbOutAreReportedAgainstTheDirective) {
  EXPECT_THAT(Errors(Script({"-J t", "--chdir=../runs"})),
              ElementsAre("job.sh:3: --chdir: must not have a \"..\" component; name the "
                          "directory itself, got \"../runs\""));
  EXPECT_THAT(Errors(Script({"-J t", "-o /logs/../x.out"})),
              ElementsAre("job.sh:3: -o: must not have a \"..\" component; name the "
                          "directory itself, got \"/logs/../x.out\""));
}

TEST(SbatchTest, OverlongPathIsReportedAgainstTheDirective) {
  EXPECT_THAT(Errors(Script({"-J t", "--output=" + std::string(5000, 'a')})),
              ElementsAre("job.sh:3: --output: must be at most 4096 bytes, got 5000"));
}

// --- Unsupported, unknown and malformed options ---------------------------------------

TEST(SbatchTest, UnsupportedOptionsWarnAndAreIgnored) {
  SpecParseResult r =
      Parse(Script({"-J t", "--mail-type=ALL", "--mail-user me@example.com", "--exclusive",
                    "-C a100", "--array=0-9", "--export=NONE", "--dependency=afterok:12",
                    "--mem-per-cpu=4G", "--gpus=8", "-H"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->resources, Resources{});
  EXPECT_THAT(
      Strings(r.warnings),
      ElementsAre(
          "job.sh:3: --mail-type: not supported by Trainyard, ignored",
          "job.sh:4: --mail-user: not supported by Trainyard, ignored",
          "job.sh:5: --exclusive: not supported by Trainyard, ignored",
          "job.sh:6: -C: not supported by Trainyard, ignored; to ask for a GPU model use "
          "--gres=gpu:TYPE:COUNT",
          "job.sh:7: --array: not supported by Trainyard, ignored; Trainyard has no job arrays; "
          "submit one job per index",
          "job.sh:8: --export: not supported by Trainyard, ignored; the submitting shell's "
          "environment is not passed on; set variables in the script",
          "job.sh:9: --dependency: not supported by Trainyard, ignored; the job will not wait for "
          "other jobs",
          "job.sh:10: --mem-per-cpu: not supported by Trainyard, ignored; use --mem (memory per "
          "node)",
          "job.sh:11: --gpus: not supported by Trainyard, ignored; use --gpus-per-node=COUNT or "
          "--gres=gpu:COUNT, or the job gets no GPUs",
          "job.sh:12: -H: not supported by Trainyard, ignored"));
}

TEST(SbatchTest, UnsupportedOptionWithSpaceValueDoesNotSwallowTheNextOption) {
  SpecParseResult r = Parse(Script({"-J t --mail-type END -N 2 --exclusive -n 4"}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 2);
  EXPECT_EQ(r.spec->procs_per_replica, 2);
  EXPECT_EQ(r.warnings.size(), 2u);
}

TEST(SbatchTest, MisspelledOptionIsAnErrorWithAHint) {
  EXPECT_THAT(Errors(Script({"--job-nam=train"})),
              ElementsAre("job.sh:2: --job-nam: unknown sbatch option (write options in full); "
                          "did you mean --job-name?"));
  EXPECT_THAT(Errors(Script({"-J t", "--nodez=2"})),
              ElementsAre("job.sh:3: --nodez: unknown sbatch option; did you mean --nodes?"));
  EXPECT_THAT(Errors(Script({"-J t", "--ntask-per-node=8"})),
              ElementsAre(HasSubstr("did you mean --ntasks-per-node?")));
  EXPECT_THAT(Errors(Script({"-J t", "--part=gpu"})),
              ElementsAre(HasSubstr("(write options in full); did you mean --partition?")));
}

TEST(SbatchTest, UnknownOptionListsWhatIsRead) {
  EXPECT_THAT(Errors(Script({"-J t", "--frobnicate=yes"})),
              ElementsAre("job.sh:3: --frobnicate: unknown sbatch option; Trainyard reads "
                          "--job-name, --nodes, --ntasks, --ntasks-per-node, --gres, "
                          "--gpus-per-node, --cpus-per-task, --mem, --time, --partition, --qos, "
                          "--account, --signal, --requeue, --no-requeue, --output, --error and "
                          "--chdir"));
}

TEST(SbatchTest, UnknownShortOptions) {
  EXPECT_THAT(Errors(Script({"-j train"})),
              ElementsAre("job.sh:2: -j: unknown sbatch option; did you mean -J (--job-name)?"));
  EXPECT_THAT(Errors(Script({"-J t", "-Z"})),
              ElementsAre("job.sh:3: -Z: unknown sbatch option; Trainyard reads -J, -N, -n, -c, "
                          "-t, -p, -q, -A, -o, -e and -D"));
}

TEST(SbatchTest, LongOptionWithOneDash) {
  EXPECT_THAT(Errors(Script({"-J t", "-nodes=2"})),
              ElementsAre("job.sh:3: -nodes: long options take two dashes; did you mean "
                          "--nodes?"));
}

TEST(SbatchTest, MissingValues) {
  EXPECT_THAT(Errors(Script({"-J t", "--nodes"})),
              ElementsAre("job.sh:3: --nodes: needs a value, such as --nodes=2"));
  EXPECT_THAT(Errors(Script({"-J t", "--time=  # later"})),
              ElementsAre("job.sh:3: --time: needs a value, such as --time=1-00:00:00"));
  EXPECT_THAT(Errors(Script({"-J t", "-N"})),
              ElementsAre("job.sh:3: -N: needs a value, such as --nodes=2"));
  EXPECT_THAT(Errors(Script({"--job-name="})),
              ElementsAre("job.sh:2: --job-name: needs a value, such as --job-name=train"));
  EXPECT_THAT(Errors(Script({"-J t", "--mail-user"})),
              ElementsAre("job.sh:3: --mail-user: needs a value"));
}

TEST(SbatchTest, StrayWordsAreErrors) {
  EXPECT_THAT(Errors(Script({"-J t", "nodes=2"})),
              ElementsAre("job.sh:3: expected an option such as --nodes=2 after #SBATCH, got "
                          "\"nodes=2\""));
  EXPECT_THAT(Errors(Script({"-J t", "hetjob"})),
              ElementsAre("job.sh:3: hetjob: heterogeneous jobs are not supported by Trainyard; "
                          "submit one job"));
  EXPECT_THAT(Errors(Script({"-J t", "--=2"})), ElementsAre(HasSubstr("expected an option name")));
}

TEST(SbatchTest, EmptyDirectiveIsIgnored) {
  EXPECT_TRUE(Parse(Script({"-J t", "", "# just a comment"})).ok());
}

TEST(SbatchTest, EveryErrorIsReportedInLineOrder) {
  EXPECT_THAT(Errors(Script({"-J t", "--time=banana", "--nodes=0", "--mem=-5", "--gres=gpu:x",
                             "--job-nam=x"})),
              ElementsAre(HasSubstr("job.sh:3: --time"), HasSubstr("job.sh:4: --nodes"),
                          HasSubstr("job.sh:5: --mem"), HasSubstr("job.sh:6: --gres"),
                          HasSubstr("job.sh:7: --job-nam")));
}

TEST(SbatchTest, WarningsAreReturnedWithErrors) {
  SpecParseResult r = Parse(Script({"-J t", "--mail-type=ALL", "--nodes=0"}));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.warnings.size(), 1u);
}

// --- Equivalence, limits and robustness -------------------------------------------------

TEST(SbatchTest, LongAndShortFormsGiveTheSameSpec) {
  JobSpec a = ParseOk(Script({"--job-name=x", "--nodes=2", "--ntasks=16", "--cpus-per-task=2",
                              "--time=60", "--partition=p", "--account=a"}));
  JobSpec b = ParseOk(Script({"-J x -N 2 -n 16 -c 2 -t 1:00:00 -p p -A a"}));
  a.script.clear();
  b.script.clear();
  EXPECT_EQ(a, b);
}

TEST(SbatchTest, VeryLongLinesAreFine) {
  // One directive line and one comment line of nearly a megabyte each read in linear
  // time (a quadratic scan would take minutes here).
  std::string text = "#!/bin/bash\n#SBATCH -J t --comment=" + std::string(400'000, 'c') + "\n# " +
                     std::string(400'000, 'x') + "\n#SBATCH " + std::string(200'000, ' ') +
                     "-N 2\nsrun true\n";
  SpecParseResult r = Parse(text);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->replicas, 2);
}

TEST(SbatchTest, HugeUnknownOptionIsCutShort) {
  EXPECT_THAT(Errors(Script({"-J t", "--" + std::string(500'000, 'z') + "=1"})),
              ElementsAre("job.sh:3: --" + std::string(64, 'z') +
                          "...: unknown sbatch option; Trainyard reads --job-name, --nodes, "
                          "--ntasks, --ntasks-per-node, --gres, --gpus-per-node, --cpus-per-task, "
                          "--mem, --time, --partition, --qos, --account, --signal, --requeue, "
                          "--no-requeue, --output, --error and --chdir"));
  EXPECT_THAT(Errors(Script({"-J t", "-\x01"})),
              ElementsAre(HasSubstr("job.sh:3: -\"\\x01\": unknown sbatch option")));
}

TEST(SbatchTest, ManyDiagnosticsAreCapped) {
  std::string text = "#!/bin/bash\n#SBATCH -J t\n";
  for (int i = 0; i < 20'000; ++i) text += "#SBATCH --mail-type=ALL -H -H\n";
  text += "srun true\n";
  SpecParseResult r = Parse(text);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.warnings.size(), 101u);
  EXPECT_EQ(r.warnings.back().ToString(), "job.sh: 59900 more warnings not shown");
}

TEST(SbatchTest, Examples) {
  SpecParseResult r = ParseSbatch(ReadExample("train-2node.sbatch"), "train-2node.sbatch");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Strings(r.errors));
  EXPECT_THAT(r.warnings, IsEmpty());
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.name, "llama-7b-pretrain");
  EXPECT_EQ(s.tenant, "nlp");
  EXPECT_EQ(s.queue, "research");
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.min_replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 1);
  EXPECT_EQ(s.resources.gpus, 8);
  EXPECT_EQ(s.resources.milli_cpus, 64'000);
  EXPECT_EQ(s.resources.memory_bytes, 512 * kGiB);
  EXPECT_EQ(s.time_limit, hours(48));
  EXPECT_EQ(s.checkpoint.notice_signal, "SIGUSR1");
  EXPECT_EQ(s.checkpoint.preempt_grace, minutes(2));
  EXPECT_TRUE(s.requeue);
  EXPECT_EQ(s.output, "logs/%x-%j.out");
  EXPECT_EQ(s.working_dir, "/home/ml/llama");
  EXPECT_THAT(s.script, HasSubstr("srun torchrun"));

  r = ParseSbatch(ReadExample("finetune-1gpu.sbatch"), "finetune-1gpu.sbatch");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Strings(r.errors));
  EXPECT_THAT(Strings(r.warnings),
              ElementsAre("finetune-1gpu.sbatch:9: --mail-type: not supported by Trainyard, "
                          "ignored"));
  EXPECT_EQ(r.spec->name, "bert-finetune-sst2");
  EXPECT_EQ(r.spec->resources.gpus, 1);
  EXPECT_EQ(r.spec->resources.milli_cpus, 8000);
  EXPECT_EQ(r.spec->resources.memory_bytes, 32 * kGiB);
  EXPECT_EQ(r.spec->time_limit, hours(4));
}

TEST(SbatchTest, BadExamples) {
  SpecParseResult r = ParseSbatch(ReadExample("bad/bad-nodes.sbatch"), "bad-nodes.sbatch");
  EXPECT_THAT(Strings(r.errors), ElementsAre("bad-nodes.sbatch:4: --nodes: must be >= 1, got 0"));
  r = ParseSbatch(ReadExample("bad/bad-option.sbatch"), "bad-option.sbatch");
  EXPECT_THAT(Strings(r.errors),
              ElementsAre("bad-option.sbatch:5: --ntask-per-node: unknown sbatch option; did you "
                          "mean --ntasks-per-node?"));
}

// Whatever the directive text, parsing returns either a spec or errors, never both,
// and every diagnostic names the file.
RC_GTEST_PROP(SbatchTest, AnyDirectiveTextGivesSpecOrErrors, ()) {
  static const std::vector<std::string> kPieces = {"-J",
                                                   "t",
                                                   "-N",
                                                   "2",
                                                   "--nodes=",
                                                   "1-3",
                                                   "--ntasks",
                                                   "8",
                                                   "-n",
                                                   "--gres=gpu:",
                                                   "a100:",
                                                   "4",
                                                   ",shard:1",
                                                   "--mem=",
                                                   "64G",
                                                   "-t",
                                                   "1-00:00",
                                                   "--signal=",
                                                   "B:USR1@",
                                                   "90",
                                                   "'",
                                                   "\"",
                                                   "#",
                                                   "\\",
                                                   " ",
                                                   "=",
                                                   "-",
                                                   "--",
                                                   "--requeue",
                                                   "--no-requeue",
                                                   "-c",
                                                   "--mail-type",
                                                   "x",
                                                   "0",
                                                   "99999999999999999999",
                                                   "--gpus-per-node=",
                                                   "--qos",
                                                   "\t"};
  const auto lines = *rc::gen::container<std::vector<std::string>>(rc::gen::map(
      rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, kPieces.size())),
      [](const std::vector<size_t>& idx) {
        std::string s;
        for (size_t i : idx) s += kPieces[i];
        return s;
      }));
  std::string text(kShebang);
  for (const auto& l : lines) text += "#SBATCH " + l + "\n";
  text += "srun true\n";
  SpecParseResult r = ParseSbatch(text, "p.sh");
  RC_ASSERT(r.ok() == r.errors.empty());
  RC_ASSERT(r.spec.has_value() == r.errors.empty());
  for (const auto& d : r.errors) RC_ASSERT(d.file == "p.sh");
  if (r.ok()) RC_ASSERT(ValidateSpec(*r.spec).empty());
}

RC_GTEST_PROP(SbatchTest, ArbitraryBytesNeverCrash, (const std::string& body)) {
  SpecParseResult r = ParseSbatch("#SBATCH " + body, "p.sh");
  RC_ASSERT(r.ok() == r.errors.empty());
}

}  // namespace
}  // namespace trainyard
