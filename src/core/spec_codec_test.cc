#include "core/spec_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <csignal>
#include <fstream>
#include <sstream>

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ReadExample(const std::string& rel) {
  std::ifstream f(std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + rel);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> Messages(const SpecParseResult& r) {
  std::vector<std::string> out;
  for (const auto& d : r.errors) out.push_back(d.ToString());
  return out;
}

SpecParseResult Parse(const std::string& text) { return ParseSpec(text, "job.yaml"); }

TEST(SpecCodecTest, ParsesTheTwoReplicaExample) {
  auto r = ParseSpec(ReadExample("train-2replica.yaml"), "train-2replica.yaml");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.name, "llama-7b-pretrain");
  EXPECT_EQ(s.tenant, "nlp");
  EXPECT_EQ(s.replicas, 2);
  EXPECT_EQ(s.min_replicas, 2);
  EXPECT_EQ(s.procs_per_replica, 8);
  EXPECT_EQ(s.resources.gpus, 8);
  EXPECT_EQ(s.resources.gpu_type, "H100");
  EXPECT_EQ(s.resources.milli_cpus, 64000);
  EXPECT_EQ(s.resources.memory_bytes, 512 * kGiB);
  EXPECT_EQ(s.topology.constraint, TopologyConstraint::kSameLeaf);
  EXPECT_FALSE(s.topology.hard);
  EXPECT_THAT(s.command, ElementsAre("python3", "-u", "train.py"));
  EXPECT_EQ(s.env.at("OMP_NUM_THREADS"), "8");
  EXPECT_EQ(s.time_limit, std::chrono::hours(48));
  EXPECT_EQ(s.checkpoint.interval, std::chrono::minutes(30));
  EXPECT_EQ(s.checkpoint.preempt_grace, std::chrono::minutes(2));
  EXPECT_EQ(s.retry.max, 3);
  EXPECT_TRUE(s.retry.exclude_failed_nodes);
  EXPECT_EQ(s.experiment.params.at("lr"), "3e-4");
  EXPECT_EQ(s.experiment.data_version, "redpajama-v2@2026-10");
}

TEST(SpecCodecTest, FillsDefaults) {
  auto r = Parse("name: t\ncommand: [\"true\"]\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.spec->tenant, "default");
  EXPECT_EQ(r.spec->queue, "default");
  EXPECT_EQ(r.spec->priority, "normal");
  EXPECT_EQ(r.spec->replicas, 1);
  EXPECT_EQ(r.spec->min_replicas, 1);
  EXPECT_EQ(r.spec->checkpoint.notice_signal, "SIGUSR1");
  EXPECT_EQ(r.spec->checkpoint.preempt_grace, std::chrono::seconds(60));
  EXPECT_EQ(r.spec->experiment.code, "auto");
  EXPECT_TRUE(r.spec->requeue);
}

TEST(SpecCodecTest, AcceptsJson) {
  auto r = ParseSpec(ReadExample("finetune-1gpu.json"), "finetune-1gpu.json");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  EXPECT_EQ(r.spec->resources.memory_bytes, 32 * kGiB);
  EXPECT_EQ(r.spec->retry.max, 2);
}

TEST(SpecCodecTest, ScriptJobAndShorthands) {
  auto r = ParseSpec(ReadExample("script-job.yaml"), "script-job.yaml");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  EXPECT_EQ(r.spec->resources.gpu_type, "A100");
  EXPECT_THAT(r.spec->script, HasSubstr("for ckpt in"));
  EXPECT_EQ(r.spec->time_limit, std::chrono::hours(4));
  auto t = Parse("name: t\ncommand: [x]\ntopology: same-node\nresources: {cpus: 500m}\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t.spec->topology.constraint, TopologyConstraint::kSameNode);
  EXPECT_TRUE(t.spec->topology.hard);
  EXPECT_EQ(t.spec->resources.milli_cpus, 500);
  auto half = Parse("name: t\ncommand: [x]\nresources: {cpus: 0.5}\n");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half.spec->resources.milli_cpus, 500);
}

TEST(SpecCodecTest, ZeroReplicasNamesLineFieldAndValue) {
  auto r = ParseSpec(ReadExample("bad/zero-replicas.yaml"), "zero-replicas.yaml");
  EXPECT_THAT(Messages(r), ElementsAre("zero-replicas.yaml:2: replicas: must be >= 1, got 0"));
}

TEST(SpecCodecTest, MisspelledFieldsGetHints) {
  auto r = ParseSpec(ReadExample("bad/misspelled-field.yaml"), "m.yaml");
  EXPECT_THAT(Messages(r),
              ElementsAre("m.yaml:2: replica: unknown field; did you mean replicas?",
                          "m.yaml:5: resources.gpu_typ: unknown field; did you mean gpu_type?"));
}

TEST(SpecCodecTest, UnknownFieldWithoutNeighbourListsValidOnes) {
  auto r = Parse("name: t\ncommand: [x]\nzzzzzzzz: 1\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].ToString(),
              HasSubstr("job.yaml:3: zzzzzzzz: unknown field; valid fields are name, tenant"));
}

TEST(SpecCodecTest, AbsurdGpuCountsAreRejected) {
  auto r = ParseSpec(ReadExample("bad/absurd-gpus.yaml"), "a.yaml");
  EXPECT_THAT(Messages(r),
              ElementsAre("a.yaml:4: resources.gpus: must be <= 64, got 1000000000000"));
  auto overflow = Parse("name: t\ncommand: [x]\nresources: {gpus: 99999999999999999999999}\n");
  ASSERT_FALSE(overflow.ok());
  EXPECT_THAT(overflow.errors[0].ToString(), HasSubstr("resources.gpus: must be <="));
  auto total = Parse("name: t\ncommand: [x]\nreplicas: 65536\nresources: {gpus: 64}\n");
  ASSERT_FALSE(total.ok());
  EXPECT_THAT(
      total.errors[0].ToString(),
      HasSubstr("the gang asks for 4194304 GPUs in all (replicas x gpus); at most 1048576"));
}

TEST(SpecCodecTest, ReportsEveryWrongTypeAtOnce) {
  auto r = ParseSpec(ReadExample("bad/wrong-types.yaml"), "w.yaml");
  EXPECT_THAT(
      Messages(r),
      ElementsAre(
          "w.yaml:2: replicas: must be an integer, got \"two\"",
          "w.yaml:4: resources.memory: expected a memory size such as \"512Mi\", \"256Gi\", "
          "\"1Ti\", \"64G\" or a number of bytes, got \"lots\"",
          "w.yaml:5: time_limit: expected a duration such as \"90s\", \"30m\", \"1h30m\", \"2d\" "
          "or \"HH:MM:SS\", got \"banana\"",
          "w.yaml:6: topology: must be one of none, same-node, same-nvlink, same-leaf, got "
          "\"same-rack\"",
          "w.yaml:7: command: must be a list of strings (an argv, e.g. [\"python3\", "
          "\"train.py\"]), got \"python3 train.py\"; to run a shell command line use script:"));
}

TEST(SpecCodecTest, SemanticErrorsComeAfterStructuralOnes) {
  // The bad name is only reported once the structure is right.
  auto r = Parse("name: \"has spaces\"\ncommand: [x]\n");
  EXPECT_THAT(Messages(r),
              ElementsAre("job.yaml:1: name: may hold only letters, digits, '-', '_' and '.', got "
                          "\"has spaces\""));
}

TEST(SpecCodecTest, InvalidYamlPointsAtTheLine) {
  auto r = ParseSpec(ReadExample("bad/not-yaml.yaml"), "n.yaml");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].ToString(), HasSubstr("n.yaml:"));
  EXPECT_THAT(r.errors[0].ToString(), HasSubstr("not valid YAML"));
}

TEST(SpecCodecTest, RejectsManyBadInputs) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "job.yaml: spec is empty; a job needs at least name and command"},
      {"- a\n- b\n", "a job spec must be a map of fields"},
      {"name: t\n", "command: one of command (an argv list) or script is required"},
      {"name: t\ncommand: [x]\nscript: echo\n", "script: give either command or script, not both"},
      {"name: t\ncommand: [x]\nname: u\n", "job.yaml:3: name: appears more than once"},
      {"name: t\ncommand: [x]\nreplicas: 2\nmin_replicas: 3\n",
       "min_replicas: must be <= 2, got 3"},
      {"name: t\ncommand: [x]\nreplicas: -1\n", "replicas: must be >= 1, got -1"},
      {"name: t\ncommand: [x]\nreplicas: 2.5\n", "replicas: must be an integer, got \"2.5\""},
      {"name: t\ncommand: [x]\nresources: {gpus: -3}\n", "resources.gpus: must be >= 0, got -3"},
      {"name: t\ncommand: [x]\nresources: {gpu_type: H100}\n",
       "resources.gpu_type: is set to H100 but resources.gpus is 0"},
      {"name: t\ncommand: [x]\nresources: {cpus: lots}\n",
       "resources.cpus: must be a number of CPUs"},
      {"name: t\ncommand: [x]\nresources: [1, 2]\n", "resources: must be a map with fields gpus"},
      {"name: t\ncommand: [x]\nenv: {\"1BAD\": x}\n", "env: variable name must match"},
      {"name: t\ncommand: [x]\nenv: {TRAINYARD_JOB_ID: x}\n",
       "env.TRAINYARD_JOB_ID: names starting with TRAINYARD_"},
      {"name: t\ncommand: [x]\nenv: {A: [1]}\n", "env.A: must be a string, got a list"},
      {"name: t\ncommand: [x]\ncheckpoint: {notice_signal: SIGFOO}\n",
       "checkpoint.notice_signal: must be a signal such as SIGUSR1"},
      {"name: t\ncommand: [x]\ncheckpoint: {notice_signal: KILL}\n", "cannot be caught"},
      {"name: t\ncommand: [x]\nretry: {max: 1000}\n", "retry.max: must be <= 100, got 1000"},
      {"name: t\ncommand: [x]\nrequeue: maybe\n", "requeue: must be true or false, got \"maybe\""},
      {"name: t\ncommand: [x]\ntopology: {constraint: same-leaf, mode: strict}\n",
       "topology.mode: must be hard or soft"},
      {"name: t\ncommand: [x]\nexperiment: {code: main}\n",
       "experiment.code: must be auto, none or a git commit id"},
      {"name: t\ncommand: [\"\"]\n", "command[0]: must name the program to run"},
      {"name: t\ncommand: [x, [y]]\n", "command[1]: must be a string, got a list"},
      {"name: " + std::string(64, 'a') + "\ncommand: [x]\n", "name: must be at most 63 characters"},
      {"name: t\ncommand: [x]\ntime_limit: 400d\n",
       "time_limit: must be between 0 (none) and 366d"},
      {"name: t\ncommand: [x]\n---\nname: u\n", "holds 2 YAML documents; give one job per file"},
      {"name: t\ncommand: [x]\nexperiment: {params: {\"a\\x1cb\": 1}}\n",
       "parameter names must be 1 to 250 characters, none of them control characters"},
      // yaml-cpp's LoadAll never returns on these (found by fuzz_job_spec).
      {",", "not valid YAML: unexpected text after the end of a document"},
      {"name: t\ncommand: [x]\n]\n", "not valid YAML"},
      {"{name: t, command: [x]}\n}\n", "not valid YAML"},
      {"name: " + std::string(5000, '[') + std::string(5000, ']') + "\n", "levels deep"},
      {"{name: t, command: [x], labels: {\"a b\": c}}", "labels: label keys may hold only"},
  };
  for (const auto& c : cases) {
    auto r = Parse(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    std::string all;
    for (const auto& m : Messages(r)) all += m + "\n";
    EXPECT_THAT(all, HasSubstr(c.message)) << c.yaml;
  }
}

TEST(SpecCodecTest, LimitsAbuse) {
  std::string big =
      "name: t\ncommand: [x]\nscript: \"" + std::string(SpecLimits::kMaxSpecBytes, 'a') + "\"\n";
  auto r = Parse(big);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.errors[0].message, HasSubstr("at most 1048576 are accepted"));

  std::string env = "name: t\ncommand: [x]\nenv:\n";
  for (int i = 0; i < 1001; ++i) env += "  V" + std::to_string(i) + ": x\n";
  auto e = Parse(env);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.errors[0].ToString(), HasSubstr("env: at most 1000 variables, got 1001"));

  std::string nul = "name: t\ncommand: [x]\n";
  nul += '\0';
  EXPECT_THAT(Parse(nul).errors[0].ToString(), HasSubstr("NUL byte"));

  auto utf8 = Parse("name: t\ncommand: [\"\xff\xfe\"]\n");
  ASSERT_FALSE(utf8.ok());
  EXPECT_THAT(utf8.errors[0].ToString(), HasSubstr("UTF-8"));

  std::string deep(5000, '[');
  auto d = Parse("name: t\ncommand: [x]\nargs: " + deep + "\n");
  EXPECT_FALSE(d.ok());
}

TEST(SpecCodecTest, YamlAndJsonOutputParseBackToTheSameSpec) {
  for (const char* file :
       {"train-2replica.yaml", "finetune-1gpu.yaml", "script-job.yaml", "finetune-1gpu.json"}) {
    auto r = ParseSpec(ReadExample(file), file);
    ASSERT_TRUE(r.ok()) << file;
    auto from_yaml = Parse(SpecToYaml(*r.spec));
    ASSERT_TRUE(from_yaml.ok()) << SpecToYaml(*r.spec)
                                << ::testing::PrintToString(Messages(from_yaml));
    EXPECT_EQ(*from_yaml.spec, *r.spec) << file;
    auto from_json = Parse(SpecToJson(*r.spec).dump());
    ASSERT_TRUE(from_json.ok()) << file;
    EXPECT_EQ(*from_json.spec, *r.spec) << file;
  }
}

TEST(ContainerSpecTest, ImageMountsAndShmSizeParseAndRoundTrip) {
  auto r = Parse(
      "name: t\ncommand: [python3, train.py]\nimage: team/trainer:v2\nshm_size: 8Gi\n"
      "resources: {memory: 64Gi}\n"
      "mounts:\n  - {source: /datasets/imagenet, target: /data, read_only: true}\n"
      "  - scratch:/scratch\n  - /models:/models:ro\n");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  EXPECT_EQ(r.spec->image, "team/trainer:v2");
  EXPECT_EQ(r.spec->shm_bytes, int64_t{8} << 30);
  EXPECT_THAT(r.spec->mounts, ElementsAre(MountSpec{"/datasets/imagenet", "/data", true},
                                          MountSpec{"scratch", "/scratch", false},
                                          MountSpec{"/models", "/models", true}));
  auto from_yaml = Parse(SpecToYaml(*r.spec));
  ASSERT_TRUE(from_yaml.ok()) << SpecToYaml(*r.spec);
  EXPECT_EQ(*from_yaml.spec, *r.spec);
  auto from_json = Parse(SpecToJson(*r.spec).dump());
  ASSERT_TRUE(from_json.ok());
  EXPECT_EQ(*from_json.spec, *r.spec);
}

TEST(ContainerSpecTest, BadImagesMountsAndShmSizesAreNamed) {
  const std::string base = "name: t\ncommand: [x]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"image: Team/Trainer\n", "image: "},
      {"image: \"trainer@sha256:abc\"\n", "image: "},
      {"mounts: [/a:/b]\n",
       "mounts: needs image: mounts are made inside a container, and without an image"},
      {"shm_size: 1Gi\n", "shm_size: needs image"},
      {"image: t\nshm_size: lots\n", "shm_size: expected a memory size"},
      {"image: t\nshm_size: 2Gi\nresources: {memory: 1Gi}\n",
       "shm_size: 2Gi is more than resources.memory (1Gi)"},
      {"image: t\nmounts: /a:/b\n", "mounts: must be a list of mounts"},
      {"image: t\nmounts: [/a]\n",
       "mounts[0]: must be SOURCE:TARGET, SOURCE:TARGET:ro or SOURCE:TARGET:rw, got \"/a\""},
      {"image: t\nmounts: [\"/a:/b:rx\"]\n", "mounts[0]: must be SOURCE:TARGET"},
      {"image: t\nmounts: [{source: /a, target: /b, mode: ro}]\n", "mounts[0].mode"},
      {"image: t\nmounts: [{target: /b}]\n", "mounts[0].source: is required"},
      {"image: t\nmounts: [\"Big Volume:/b\"]\n",
       "mounts[0].source: must be an absolute host path or a volume name"},
      {"image: t\nmounts: [\"/a:data\"]\n",
       "mounts[0].target: must be an absolute path inside the container, got \"data\""},
      {"image: t\nmounts: [\"/a:/\"]\n", "mounts[0].target: cannot be /"},
      {"image: t\nmounts: [\"/a:/proc/x\"]\n", "mounts[0].target: \"/proc/x\" is under /proc"},
      {"image: t\nmounts: [\"/a:/run/trainyard\"]\n", "is under /run/trainyard"},
      {"image: t\nmounts: [\"/a:/d\", \"/b:/d/\"]\n",
       "mounts[1].target: \"/d/\" is the target of an earlier mount"},
      {"image: t\nmounts: [\"/a/../etc:/d\"]\n", "mounts[0].source: must not have a \"..\""},
  };
  for (const auto& [yaml, message] : cases) {
    auto r = Parse(base + yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    std::string all;
    for (const auto& m : Messages(r)) all += m + "\n";
    EXPECT_THAT(all, HasSubstr(message)) << yaml;
  }
}

TEST(DataSpecTest, DatasetsParseNormaliseAndRoundTrip) {
  const std::string v = "sha256:" + std::string(64, 'a');
  auto r = Parse(
      "name: t\ncommand: [x]\ndata:\n  - imagenet\n"
      "  - {dataset: coco.2017, version: " +
      v + ", mount: /mnt/coco, stage: local}\n");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  ASSERT_EQ(r.spec->data.size(), 2u);
  EXPECT_EQ(r.spec->data[0],
            (DataSpec{"imagenet", "latest", "/data/imagenet", DataStage::kNone, ""}));
  EXPECT_EQ(r.spec->data[1], (DataSpec{"coco.2017", v, "/mnt/coco", DataStage::kLocal, ""}));
  EXPECT_EQ(DataEnvName("coco.2017"), "TRAINYARD_DATA_COCO_2017");
  EXPECT_EQ(DataEnvName("imagenet-1k"), "TRAINYARD_DATA_IMAGENET_1K");
  auto from_yaml = Parse(SpecToYaml(*r.spec));
  ASSERT_TRUE(from_yaml.ok()) << SpecToYaml(*r.spec);
  EXPECT_EQ(*from_yaml.spec, *r.spec);
  auto from_json = Parse(SpecToJson(*r.spec).dump());
  ASSERT_TRUE(from_json.ok());
  EXPECT_EQ(*from_json.spec, *r.spec);

  // A stored spec names exact versions and their sources (the server resolved them).
  EXPECT_FALSE(ParseSpec(SpecToJson(*r.spec).dump(), "<store>", SpecOrigin::kStored).ok());
  JobSpec resolved = *r.spec;
  for (DataSpec& d : resolved.data) {
    d.version = v;
    d.source = "/shared/" + d.dataset;
  }
  auto stored = ParseSpec(SpecToJson(resolved).dump(), "<store>", SpecOrigin::kStored);
  ASSERT_TRUE(stored.ok()) << ::testing::PrintToString(Messages(stored));
  EXPECT_EQ(*stored.spec, resolved);
}

TEST(DataSpecTest, BadDataEntriesAreNamed) {
  const std::string base = "name: t\ncommand: [x]\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"data: imagenet\n", "data: must be a list of datasets"},
      {"data: [{version: latest}]\n", "data[0].dataset: is required"},
      {"data: [\"image net\"]\n", "data[0].dataset: may hold only letters, digits"},
      {"data: [{dataset: a, version: v2}]\n",
       "data[0].version: must be \"latest\" or a version \"sha256:<64 hex>\""},
      {"data: [{dataset: a, stage: remote}]\n",
       "data[0].stage: must be local (copied to the node's disk before the ranks start) or none"},
      {"data: [{dataset: a, mount: data}]\n", "data[0].mount: must be an absolute path"},
      {"data: [{dataset: a, mount: /proc/a}]\n", "data[0].mount: \"/proc/a\" is under /proc"},
      {"data: [a, a]\n", "data[1].dataset: \"a\" is named twice"},
      {"data: [{dataset: a, mount: /d}, {dataset: b, mount: /d/}]\n",
       "data[1].mount: \"/d/\" is the target of another mount"},
      {"image: t\nmounts: [\"/x:/data/a\"]\ndata: [a]\n",
       "data[0].mount: \"/data/a\" is the target of another mount"},
      {"data: [{dataset: a, sorce: /x}]\n", "data[0].sorce"},
      {"data: [{dataset: a, source: relative/x}]\n", "data[0].source: \"relative/x\" is not"},
  };
  for (const auto& [yaml, message] : cases) {
    auto r = Parse(base + yaml);
    ASSERT_FALSE(r.ok()) << yaml;
    std::string all;
    for (const auto& m : Messages(r)) all += m + "\n";
    EXPECT_THAT(all, HasSubstr(message)) << yaml;
  }
  std::string many = base + "data: [";
  for (int i = 0; i < 17; ++i) many += (i ? ", d" : "d") + std::to_string(i);
  auto r = Parse(many + "]\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Messages(r)[0], HasSubstr("data: must have at most 16 entries, got 17"));
}

// Valid UTF-8 text from code points across the planes (no NUL, no surrogates). The
// Unicode noncharacters (U+FDD0..U+FDEF, U+xFFFE/U+xFFFF) are left out: yaml-cpp's
// emitter writes them as U+FFFD, so the YAML view of such a spec is lossy (the JSON
// form that the store keeps is not).
rc::Gen<std::string> Utf8Text() {
  return rc::gen::map(
      rc::gen::container<std::vector<uint32_t>>(rc::gen::oneOf(
          rc::gen::inRange<uint32_t>(1, 0x80), rc::gen::inRange<uint32_t>(0x80, 0x800),
          rc::gen::inRange<uint32_t>(0xE000, 0x10000),
          rc::gen::inRange<uint32_t>(0x10000, 0x110000))),
      [](const std::vector<uint32_t>& cps) {
        std::string s;
        for (uint32_t cp : cps) {
          if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) cp = 'x';
          if (cp < 0x80) {
            s += static_cast<char>(cp);
          } else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            s += static_cast<char>(0xF0 | (cp >> 18));
            s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          }
        }
        return s;
      });
}

RC_GTEST_PROP(SpecCodecTest, ArbitraryStringsRoundTripThroughYaml, ()) {
  JobSpec s;
  s.name = "t";
  s.command = {*rc::gen::nonEmpty(Utf8Text()), *Utf8Text()};
  s.env["X"] = *Utf8Text();
  s.experiment.params[*rc::gen::nonEmpty(Utf8Text())] = *Utf8Text();
  s.script = "";
  NormalizeSpec(s);
  RC_PRE(ValidateSpec(s).empty());
  auto back = ParseSpec(SpecToYaml(s), "rt.yaml");
  RC_ASSERT(back.ok());
  RC_ASSERT(*back.spec == s);
}

TEST(SecretEnvTest, ParsesNormalisesAndRoundTrips) {
  auto r = Parse(
      "name: j\ncommand: [train]\nenv: {HF_TOKEN: hf_abc, WANDB_API_KEY: w123, LR: '1'}\n"
      "secret_env: [WANDB_API_KEY, HF_TOKEN, HF_TOKEN]\n");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  EXPECT_THAT(r.spec->secret_env, ElementsAre("HF_TOKEN", "WANDB_API_KEY"));
  EXPECT_EQ(r.spec->env.at("HF_TOKEN"), "hf_abc");  // the stored spec keeps the value
  auto from_json = Parse(SpecToJson(*r.spec).dump());
  ASSERT_TRUE(from_json.ok());
  EXPECT_EQ(*from_json.spec, *r.spec);
  auto from_yaml = Parse(SpecToYaml(*r.spec));
  ASSERT_TRUE(from_yaml.ok());
  EXPECT_EQ(*from_yaml.spec, *r.spec);
}

TEST(SecretEnvTest, MustNameKeysOfEnvAndErrorsNeverEchoValues) {
  auto r = Parse(
      "name: j\ncommand: [train]\nenv: {HF_TOKEN: hf_supersecret}\n"
      "secret_env: [HF_TOKN]\n");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Messages(r),
              ElementsAre("job.yaml:4: secret_env: names \"HF_TOKN\", which is not a variable "
                          "of env; secret_env lists keys of env; did you mean HF_TOKEN?"));
  auto scalar = Parse("name: j\ncommand: [train]\nsecret_env: HF_TOKEN\n");
  ASSERT_FALSE(scalar.ok());
  EXPECT_THAT(Messages(scalar)[0], HasSubstr("secret_env: must be a list of env variable names"));

  // A secret value that is itself invalid is described, never shown.
  auto bad =
      Parse("name: j\ncommand: [train]\nsecret_env: [TOKEN]\nenv: {TOKEN: \"hf_secret\\0x\"}\n");
  ASSERT_FALSE(bad.ok());
  for (const std::string& m : Messages(bad)) EXPECT_THAT(m, ::testing::Not(HasSubstr("hf_")));
}

TEST(SecretEnvTest, RedactionReplacesSecretValuesOnly) {
  auto r = Parse(
      "name: j\ncommand: [train]\nenv: {HF_TOKEN: hf_abc, PLAIN: visible, EMPTY: ''}\n"
      "secret_env: [HF_TOKEN, EMPTY]\n");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Messages(r));
  JobSpec shown = RedactSecrets(*r.spec);
  EXPECT_EQ(shown.env.at("HF_TOKEN"), "<redacted>");
  EXPECT_EQ(shown.env.at("EMPTY"), "<redacted>");
  EXPECT_EQ(shown.env.at("PLAIN"), "visible");
  EXPECT_EQ(SpecToJson(shown)["env"]["HF_TOKEN"], "<redacted>");
  EXPECT_EQ(RedactSecretValues(*r.spec, "login with hf_abc failed (hf_abchf_abc)"),
            "login with <redacted> failed (<redacted><redacted>)");
  EXPECT_EQ(RedactSecretValues(*r.spec, "nothing here"), "nothing here");
  // Overlapping secrets: the longest is replaced whole.
  JobSpec s = *r.spec;
  s.env["LONG"] = "hf_abc_long";
  s.secret_env = {"HF_TOKEN", "LONG"};
  EXPECT_EQ(RedactSecretValues(s, "x hf_abc_long y"), "x <redacted> y");
  // A replacement is not searched again, even for a secret it happens to hold.
  s.env["TINY"] = "d";
  s.secret_env = {"HF_TOKEN", "TINY"};
  EXPECT_EQ(RedactSecretValues(s, "hf_abc and d"), "<redacted> an<redacted> <redacted>");
}

TEST(SignalTest, NumbersForEveryAcceptedSpelling) {
  EXPECT_EQ(SignalNumber("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(SignalNumber("USR2"), SIGUSR2);
  EXPECT_EQ(SignalNumber(std::to_string(SIGTERM)), SIGTERM);
  EXPECT_EQ(SignalNumber("SIGNOPE"), std::nullopt);
  EXPECT_EQ(SignalNumber(""), std::nullopt);
}

}  // namespace
}  // namespace trainyard
