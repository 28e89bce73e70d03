#include "core/spec_paths.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/spec_codec.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

JobSpec Spec(const std::string& extra) {
  SpecParseResult r = ParseSpec("name: j\ntenant: vision\ncommand: [train]\n" + extra, "j.yaml");
  EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
  return r.spec.value_or(JobSpec{});
}

std::vector<Diagnostic> Errors(const std::string& extra) {
  return ParseSpec("name: j\ncommand: [train]\n" + extra, "j.yaml").errors;
}

TEST(PathTextProblemTest, RefusesDotDotComponentsAndControlCharacters) {
  EXPECT_EQ(PathTextProblem("/data/run-1"), "");
  EXPECT_EQ(PathTextProblem("relative/dir"), "");
  EXPECT_EQ(PathTextProblem("/data/..hidden/x.."), "");  // ".." inside a name is fine
  EXPECT_EQ(PathTextProblem("slurm-%j.out"), "");
  EXPECT_THAT(PathTextProblem("/data/../etc"), HasSubstr("\"..\" component"));
  EXPECT_THAT(PathTextProblem(".."), HasSubstr("\"..\""));
  EXPECT_THAT(PathTextProblem("../x"), HasSubstr("\"..\""));
  EXPECT_THAT(PathTextProblem("x/.."), HasSubstr("\"..\""));
  EXPECT_THAT(PathTextProblem("/data/a\nb"), HasSubstr("control characters (found byte 0x0a)"));
  EXPECT_THAT(PathTextProblem("/data/\x7f"), HasSubstr("0x7f"));
  EXPECT_THAT(PathTextProblem("/data/\xc2\x85"), HasSubstr("U+0085"));
  EXPECT_THAT(PathTextProblem(std::string("/a\0b", 4)), HasSubstr("0x00"));
}

TEST(NormalizePathTest, CollapsesSlashesAndDots) {
  EXPECT_EQ(NormalizePath("/"), "/");
  EXPECT_EQ(NormalizePath("//data//./run/"), "/data/run");
  EXPECT_EQ(NormalizePath("./x/./y"), "x/y");
  EXPECT_EQ(NormalizePath("."), ".");
  EXPECT_EQ(NormalizePath("/./"), "/");
}

TEST(PathWithinTest, ComparesWholeComponents) {
  EXPECT_TRUE(PathWithin("/data", "/data"));
  EXPECT_TRUE(PathWithin("/data/x/y", "/data"));
  EXPECT_FALSE(PathWithin("/data2", "/data"));
  EXPECT_FALSE(PathWithin("/dat", "/data"));
  EXPECT_TRUE(PathWithin("/anything", "/"));
  EXPECT_FALSE(PathWithin("relative", "/"));
}

TEST(ParseAllowedDirsTest, NormalisesAndNamesTheFlagOnError) {
  auto dirs = ParseAllowedDirs("--allowed-dirs", "/data/,/scratch//x,/data");
  ASSERT_TRUE(dirs.ok()) << dirs.status().ToString();
  EXPECT_THAT(*dirs, ElementsAre("/data", "/scratch/x"));
  EXPECT_THAT(*ParseAllowedDirs("--allowed-dirs", ""), IsEmpty());

  auto relative = ParseAllowedDirs("--allowed-dirs", "/data,scratch");
  ASSERT_FALSE(relative.ok());
  EXPECT_EQ(relative.status().message(),
            "--allowed-dirs: must be absolute paths (DIR[,DIR...], absolute paths), got "
            "\"scratch\"");
  auto dotdot = ParseAllowedDirs("--allowed-dirs", "/data/../etc");
  ASSERT_FALSE(dotdot.ok());
  EXPECT_THAT(dotdot.status().message(), HasSubstr("--allowed-dirs: must not have a \"..\""));
  EXPECT_THAT(dotdot.status().message(), HasSubstr("\"/data/../etc\""));
  auto empty = ParseAllowedDirs("--allowed-dirs", "/data,,/x");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("empty directory"));
}

TEST(SpecValidationTest, PathFieldsRefuseDotDotAndControlCharactersNamingFieldAndValue) {
  auto errors = Errors(
      "working_dir: /data/../etc\n"
      "checkpoint: {dir: \"/ckpt/a\\tb\"}\n"
      "output: ../out-%j.log\n"
      "error: /logs/err\n");
  ASSERT_THAT(errors, SizeIs(3));
  EXPECT_EQ(errors[0].ToString(),
            "j.yaml:3: working_dir: must not have a \"..\" component; name the directory "
            "itself, got \"/data/../etc\"");
  EXPECT_EQ(errors[1].field, "output");
  EXPECT_THAT(errors[1].message, HasSubstr("\"../out-%j.log\""));
  EXPECT_EQ(errors[2].field, "checkpoint.dir");
  EXPECT_THAT(errors[2].message, HasSubstr("control characters (found byte 0x09)"));
  EXPECT_THAT(errors[2].message, HasSubstr("a\\x09b"));  // the value, escaped
}

TEST(SpecPathsTest, ListsEveryPathTheSpecNames) {
  JobSpec s = Spec("working_dir: /w\ncheckpoint: {dir: ck}\noutput: o\nerror: e\n");
  auto paths = SpecPaths(s);
  ASSERT_THAT(paths, SizeIs(4));
  EXPECT_EQ(paths[0].first, "working_dir");
  EXPECT_EQ(paths[1].first, "checkpoint.dir");
  EXPECT_EQ(paths[2].first, "output");
  EXPECT_EQ(paths[3].first, "error");
  EXPECT_THAT(SpecPaths(Spec("")), IsEmpty());
}

TEST(CheckSpecPathsTest, HostPathsMountedIntoContainersAreConfinedButVolumesAreNot) {
  PathPolicy p;
  p.allowed_dirs = {"/data"};
  auto errors = CheckSpecPaths(
      Spec("image: t\nmounts: [\"/data/imagenet:/in:ro\", \"/etc:/host-etc\", \"cache:/c\"]\n"), p);
  ASSERT_THAT(errors, SizeIs(1));
  EXPECT_EQ(errors[0].field, "mounts[1].source");
  EXPECT_THAT(errors[0].message, HasSubstr("must lie in one of the directories the admin allows"));
}

TEST(CheckSpecPathsTest, NoPolicyAcceptsAnyCleanPath) {
  PathPolicy none;
  EXPECT_THAT(CheckSpecPaths(Spec("working_dir: rel\ncheckpoint: {dir: /anywhere}\n"), none),
              IsEmpty());
}

TEST(CheckSpecPathsTest, AllowedDirsAreCheckedAfterNormalising) {
  PathPolicy p;
  p.allowed_dirs = {"/data", "/scratch"};
  EXPECT_THAT(CheckSpecPaths(Spec("working_dir: /data/run\ncheckpoint: {dir: //scratch/./c}\n"
                                  "output: out-%j.log\n"),
                             p),
              IsEmpty());
  // Relative paths are relative to working_dir.
  EXPECT_THAT(CheckSpecPaths(Spec("working_dir: /data/run\ncheckpoint: {dir: ckpt}\n"), p),
              IsEmpty());

  auto outside = CheckSpecPaths(Spec("working_dir: /data2/run\ncheckpoint: {dir: /etc}\n"), p);
  ASSERT_THAT(outside, SizeIs(2));
  EXPECT_EQ(outside[0].field, "working_dir");
  EXPECT_EQ(outside[0].message,
            "must lie in one of the directories the admin allows (/data, /scratch), got "
            "\"/data2/run\"");
  EXPECT_EQ(outside[1].field, "checkpoint.dir");

  // Relative to working_dir, which is outside: shown resolved.
  auto rel = CheckSpecPaths(Spec("working_dir: /home/me\noutput: out.log\n"), p);
  ASSERT_THAT(rel, SizeIs(2));
  EXPECT_THAT(rel[1].message, HasSubstr("got \"out.log\" (/home/me/out.log)"));

  // Relative to the agent's working directory: the server cannot tell where that is.
  auto agent_relative = CheckSpecPaths(Spec("checkpoint: {dir: ckpt}\n"), p);
  ASSERT_THAT(agent_relative, SizeIs(1));
  EXPECT_EQ(agent_relative[0].field, "checkpoint.dir");
  EXPECT_THAT(agent_relative[0].message, HasSubstr("relative to the agent's working directory"));
  EXPECT_THAT(agent_relative[0].message, HasSubstr("or set working_dir to one"));
}

TEST(CheckSpecPathsTest, TenantsStayInTheirOwnPartOfTheCheckpointRoot) {
  PathPolicy p;
  p.checkpoint_root = "/srv/ty/checkpoints";
  // Spec() makes jobs of tenant "vision".
  EXPECT_THAT(CheckSpecPaths(Spec("checkpoint: {dir: /srv/ty/checkpoints/vision/exp-1}\n"), p),
              IsEmpty());
  EXPECT_THAT(CheckSpecPaths(Spec("checkpoint: {dir: /elsewhere}\n"), p), IsEmpty());

  auto other = CheckSpecPaths(Spec("checkpoint: {dir: /srv/ty/checkpoints/nlp/7}\n"), p);
  ASSERT_THAT(other, SizeIs(1));
  EXPECT_EQ(other[0].field, "checkpoint.dir");
  EXPECT_EQ(other[0].message,
            "lies in the checkpoint root /srv/ty/checkpoints outside tenant vision's part of "
            "it; jobs of tenant vision may use only /srv/ty/checkpoints/vision/..., got "
            "\"/srv/ty/checkpoints/nlp/7\"");
  // The root itself holds every tenant's checkpoints.
  EXPECT_THAT(CheckSpecPaths(Spec("checkpoint: {dir: /srv/ty//checkpoints/}\n"), p), SizeIs(1));
  // A tenant whose name extends another's is not inside it.
  EXPECT_THAT(CheckSpecPaths(Spec("checkpoint: {dir: /srv/ty/checkpoints/vision2}\n"), p),
              SizeIs(1));
  // Any field, and relative ones too.
  EXPECT_THAT(CheckSpecPaths(Spec("working_dir: /srv/ty/checkpoints\noutput: nlp/o.log\n"), p),
              SizeIs(2));

  // The tenant's own part is allowed even when the admin's dirs do not hold it.
  p.allowed_dirs = {"/data"};
  EXPECT_THAT(CheckSpecPaths(Spec("checkpoint: {dir: /srv/ty/checkpoints/vision/x}\n"), p),
              IsEmpty());
}

TEST(CheckReportedCheckpointTest, SameRulesAsTheSpecsPaths) {
  PathPolicy p;
  p.checkpoint_root = "/ckpt";
  JobSpec s = Spec("");
  EXPECT_TRUE(CheckReportedCheckpoint("/ckpt/vision/1/step-10", s, p).ok());
  EXPECT_TRUE(CheckReportedCheckpoint("/elsewhere/step-10", s, p).ok());
  Status other = CheckReportedCheckpoint("/ckpt/nlp/3/step-10", s, p);
  EXPECT_FALSE(other.ok());
  EXPECT_THAT(other.message(), HasSubstr("checkpoint path: lies in the checkpoint root /ckpt"));
  EXPECT_FALSE(CheckReportedCheckpoint("/ckpt/vision/../nlp/3", s, p).ok());
}

TEST(DefaultCheckpointDirTest, IsPerTenantThenPerJob) {
  EXPECT_EQ(DefaultCheckpointDir("/srv/ck/", "vision", 42), "/srv/ck/vision/42");
}

}  // namespace
}  // namespace trainyard
