#include "cli/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/app.h"
#include "cli/client.h"
#include "cli/daemon.h"
#include "http/testing.h"
#include "store/sqlite_store.h"
#include "store/testing.h"

namespace trainyard::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Example(const std::string& rel) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/examples/" + rel;
}

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

CliRun Cli(std::vector<std::string> args) {
  args.insert(args.begin(), "trainyard");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = RunCli(static_cast<int>(argv.size()), argv.data(), out, err, &AddDaemonCommands);
  return {code, out.str(), err.str()};
}

TEST(ValidateCommandTest, GoodSpecPrintsNormalisedYaml) {
  CliRun r = Cli({"validate", Example("finetune-1gpu.yaml")});
  EXPECT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("name: bert-finetune-sst2\n"));
  EXPECT_THAT(r.out, HasSubstr("tenant: default\n"));
  EXPECT_THAT(r.out, HasSubstr("min_replicas: 1"));
  EXPECT_EQ(r.err, "");
}

TEST(ValidateCommandTest, JsonOutputIsAListWithTheSpec) {
  CliRun r = Cli({"validate", "-o", "json", Example("train-2replica.yaml"),
                  Example("bad/zero-replicas.yaml")});
  EXPECT_EQ(r.code, kExitUsage);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[0]["valid"].get<bool>());
  EXPECT_EQ(j[0]["spec"]["resources"]["memory"], "512Gi");
  EXPECT_EQ(j[0]["spec"]["checkpoint"]["interval"], "30m");
  EXPECT_FALSE(j[1]["valid"].get<bool>());
  EXPECT_EQ(j[1]["errors"][0]["line"], 2);
  EXPECT_EQ(j[1]["errors"][0]["field"], "replicas");
  EXPECT_EQ(j[1]["errors"][0]["message"], "must be >= 1, got 0");
}

TEST(ValidateCommandTest, BadSpecsExitTwoWithPreciseMessages) {
  CliRun r = Cli({"validate", Example("bad/misspelled-field.yaml")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.err,
              HasSubstr("misspelled-field.yaml:2: replica: unknown field; did you mean replicas?"));
  EXPECT_EQ(r.out, "");
}

TEST(ValidateCommandTest, OneBadFileFailsTheRunButGoodOnesStillPrint) {
  CliRun r = Cli({"validate", Example("finetune-1gpu.yaml"), Example("bad/absurd-gpus.yaml")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_THAT(r.out, HasSubstr("bert-finetune-sst2"));
  EXPECT_THAT(r.err, HasSubstr("resources.gpus: must be <= 64, got 1000000000000"));
}

TEST(ValidateCommandTest, MissingFileAndDirectoryAreClearErrors) {
  CliRun missing = Cli({"validate", "/nonexistent/job.yaml"});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err,
              HasSubstr("/nonexistent/job.yaml: cannot read: No such file or directory"));
  CliRun dir = Cli({"validate", std::string(TRAINYARD_SOURCE_DIR) + "/examples"});
  EXPECT_EQ(dir.code, kExitUsage);
  EXPECT_THAT(dir.err, HasSubstr("is a directory"));
}

TEST(ValidateCommandTest, ReadsStandardInput) {
  std::istringstream in("name: piped\ncommand: [\"true\"]\n");
  std::ostringstream out, err;
  ValidateOptions opts;
  opts.files = {"-"};
  EXPECT_EQ(RunValidate(opts, in, out, err), kExitOk) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("piped"));
  std::istringstream bad("name: piped\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(RunValidate(opts, bad, out2, err2), kExitUsage);
  EXPECT_THAT(err2.str(), HasSubstr("<stdin>: command: one of command"));
}

TEST(ValidateCommandTest, SbatchScriptsAreRecognised) {
  CliRun r = Cli({"validate", "-o", "json", Example("train-2node.sbatch")});
  EXPECT_EQ(r.code, kExitOk) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["spec"]["replicas"], 2);
  EXPECT_TRUE(j[0]["spec"].contains("script"));
}

TEST(CliTest, VersionHelpAndUsageErrors) {
  CliRun v = Cli({"version"});
  EXPECT_EQ(v.code, kExitOk);
  EXPECT_THAT(v.out, HasSubstr("trainyard 0."));
  CliRun vj = Cli({"version", "-o", "json"});
  EXPECT_EQ(nlohmann::json::parse(vj.out)["version"].get<std::string>().substr(0, 2), "0.");
  CliRun help = Cli({"--help"});
  EXPECT_EQ(help.code, kExitOk);
  EXPECT_THAT(help.out, HasSubstr("validate"));
  CliRun sub_help = Cli({"validate", "--help"});
  EXPECT_EQ(sub_help.code, kExitOk);
  EXPECT_THAT(sub_help.out, HasSubstr("FILE:LINE"));
  CliRun none = Cli({});
  EXPECT_EQ(none.code, kExitUsage);
  CliRun unknown = Cli({"frobnicate"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_THAT(unknown.err, HasSubstr("frobnicate"));
  CliRun bad_format = Cli({"validate", "-o", "xml", Example("finetune-1gpu.yaml")});
  EXPECT_EQ(bad_format.code, kExitUsage);
  EXPECT_THAT(bad_format.err, HasSubstr("xml"));
  EXPECT_THAT(bad_format.out, Not(HasSubstr("bert")));
}

// A call builds only the command it names (start-up time); help, a misspelt command
// and a bare `trainyard` still see every command, and each command's own help and
// options work whichever group adds it.
TEST(CliTest, OnlyTheCommandTypedIsBuiltYetHelpAndErrorsSeeAll) {
  CliRun help = Cli({"--help"});
  ASSERT_EQ(help.code, kExitOk);
  for (const char* c :
       {"validate", "sched", "sim",    "agent",    "server", "store",    "up",
        "submit",   "jobs",  "cancel", "cordon",   "queues", "tokens",   "audit",
        "runs",     "trace", "alerts", "diagnose", "fault",  "datasets", "version"}) {
    EXPECT_THAT(help.out, HasSubstr(std::string("\n  ") + c + " ")) << c;
  }
  CliRun typo = Cli({"submt"});
  EXPECT_EQ(typo.code, kExitUsage);
  EXPECT_THAT(typo.err, HasSubstr("unknown command \"submt\"; did you mean submit?"));
  EXPECT_THAT(typo.err, HasSubstr("Commands: validate sched sim"));
  EXPECT_THAT(typo.err, HasSubstr(" diagnose fault version"));
  for (const char* c : {"jobs", "drain", "runs", "fault", "server", "sim"}) {
    CliRun r = Cli({c, "--help"});
    EXPECT_EQ(r.code, kExitOk) << c << ": " << r.err;
    EXPECT_THAT(r.out, HasSubstr(std::string("Usage: trainyard ") + c)) << c;
  }
  CliRun bad_option = Cli({"jobs", "--no-such-option"});
  EXPECT_EQ(bad_option.code, kExitUsage);
  EXPECT_THAT(bad_option.err, HasSubstr("--no-such-option"));
}

// Bad flags of the store, leadership and server addresses are refused before anything
// starts, naming the flag and the value (a value that may hold a password is not shown).
TEST(CliTest, BadStoreLeaderAndServerFlagsAreUsageErrors) {
  const std::string dir = ::testing::TempDir() + "/trainyard-cli-flags";
  auto server = [&](std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"server", "--data-dir", dir, "--port", "0"});
    return Cli(flags);
  };
  CliRun bogus = server({"--store", "bogus"});
  EXPECT_EQ(bogus.code, kExitUsage);
  EXPECT_THAT(bogus.err, HasSubstr("--store: expected sqlite:PATH or postgres://"));
  EXPECT_THAT(bogus.err, HasSubstr("\"bogus\""));
  CliRun secret = server({"--store", "mysql://ann:hunter2@db/x"});
  EXPECT_EQ(secret.code, kExitUsage);
  EXPECT_THAT(secret.err, HasSubstr("--store"));
  EXPECT_THAT(secret.err, Not(HasSubstr("hunter2")));
  CliRun empty_sqlite = server({"--store", "sqlite:"});
  EXPECT_EQ(empty_sqlite.code, kExitUsage);
  EXPECT_THAT(empty_sqlite.err, HasSubstr("sqlite: needs a file"));
  CliRun short_lease = server({"--leader-timeout", "10ms"});
  EXPECT_EQ(short_lease.code, kExitUsage);
  EXPECT_THAT(short_lease.err,
              HasSubstr("--leader-timeout: expected a duration from 500ms to 10m, got \"10ms\""));
  for (const char* grace : {"soon", "-1s", "8d"}) {
    CliRun bad_grace = server({"--node-lost-grace", grace});
    EXPECT_EQ(bad_grace.code, kExitUsage) << grace;
    EXPECT_THAT(bad_grace.err, HasSubstr("--node-lost-grace: expected a duration from 0s"));
    EXPECT_THAT(bad_grace.err, HasSubstr(std::string("got \"") + grace + "\""));
  }
  CliRun advertise = server({"--advertise-url", "ftp://cp1:8470"});
  EXPECT_EQ(advertise.code, kExitUsage);
  EXPECT_THAT(advertise.err, HasSubstr("--advertise-url: expected http://HOST:PORT"));
  EXPECT_THAT(advertise.err, HasSubstr("ftp://cp1:8470"));
  CliRun agent = Cli({"agent", "--server", "http://127.0.0.1:1,ftp://b", "--join-token", "t",
                      "--name", "n", "--data-dir", dir, "--simulated-gpus", "1"});
  EXPECT_NE(agent.code, kExitOk);
  EXPECT_THAT(agent.err, HasSubstr("--server: expected http://HOST:PORT or https://HOST:PORT "
                                   "(several separated by commas), got \"ftp://b\""));
  std::filesystem::remove_all(dir);
}

TEST(CliTest, DatasetsHashPrintsTheVersionAndReusesItsManifest) {
  store::test::TempDir dir;
  std::filesystem::create_directories(dir.File("d/sub"));
  std::ofstream(dir.File("d/a.txt")) << "alpha";
  std::ofstream(dir.File("d/sub/b.bin")) << "beta";
  CliRun first =
      Cli({"datasets", "hash", dir.File("d"), "--manifest", dir.File("m"), "-o", "json"});
  ASSERT_EQ(first.code, kExitOk) << first.err;
  auto j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["files"], 2);
  EXPECT_EQ(j["bytes"], 9);
  EXPECT_EQ(j["files_read"], 2);
  EXPECT_THAT(j["version"].get<std::string>(), ::testing::StartsWith("sha256:"));
  // Again with the manifest it kept: nothing read, the same version.
  CliRun again = Cli({"datasets", "hash", dir.File("d"), "--manifest", dir.File("m")});
  ASSERT_EQ(again.code, kExitOk) << again.err;
  EXPECT_THAT(again.out, HasSubstr(j["version"].get<std::string>() + "\n2 files, 9 B; read 0"));
  EXPECT_THAT(again.out, HasSubstr("reused 2 from the manifest"));
  // Bad input: not a directory, a manifest that is not one.
  CliRun missing = Cli({"datasets", "hash", dir.File("nope")});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("nope: not a directory"));
  std::ofstream(dir.File("m")) << "not a manifest\n";
  CliRun bad = Cli({"datasets", "hash", dir.File("d"), "--manifest", dir.File("m")});
  EXPECT_EQ(bad.code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("--manifest " + dir.File("m") + ": manifest line 1: expected"));
}

TEST(CliTest, AgentUnmappedRunAsIsNeverRootAndItsProblemsNamed) {
  store::test::TempDir dir;
  auto agent = [&](const std::string& value) {
    return Cli({"agent", "--server", "http://127.0.0.1:1", "--join-token", "t", "--name", "n",
                "--data-dir", dir.File("data"), "--simulated-gpus", "1", "--unmapped-run-as",
                value});
  };
  CliRun root = agent("0:0");
  EXPECT_EQ(root.code, kExitUsage);
  EXPECT_THAT(root.err, HasSubstr("--unmapped-run-as 0:0: root is never the default identity"));
  CliRun name = agent("nobody");
  EXPECT_EQ(name.code, kExitUsage);
  EXPECT_THAT(name.err, HasSubstr("--unmapped-run-as: must be UID:GID (decimal, 0..2147483646) "
                                  "or agent, got \"nobody\""));
  CliRun half = agent("2001:");
  EXPECT_EQ(half.code, kExitUsage);
  EXPECT_THAT(half.err, HasSubstr("got \"2001:\""));
}

TEST(CliTest, AgentJoinTokenFileIsReadAndItsProblemsNamed) {
  store::test::TempDir dir;
  auto agent = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {
        "agent",      "--server",       "http://127.0.0.1:1", "--name", "n",
        "--data-dir", dir.File("data"), "--simulated-gpus",   "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    return Cli(args);
  };
  CliRun none = agent({});
  EXPECT_EQ(none.code, kExitUsage);
  EXPECT_THAT(none.err, HasSubstr("--join-token or --join-token-file: one is required"));
  std::ofstream(dir.File("token")) << "sesame\n";
  CliRun both = agent({"--join-token", "x", "--join-token-file", dir.File("token")});
  EXPECT_EQ(both.code, kExitUsage);
  EXPECT_THAT(both.err, HasSubstr("give one of them, not both"));
  CliRun missing = agent({"--join-token-file", dir.File("nope")});
  EXPECT_EQ(missing.code, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("--join-token-file: cannot read \"" + dir.File("nope")));
  std::ofstream(dir.File("blank")) << "\n";
  CliRun blank = agent({"--join-token-file", dir.File("blank")});
  EXPECT_EQ(blank.code, kExitUsage);
  EXPECT_THAT(blank.err, HasSubstr("starts with an empty line"));
}

TEST(CliTest, StoreCopyCopiesIntoAnEmptyStoreAndSaysWhatWhenItCannot) {
  store::test::TempDir dir;
  const std::string a = dir.File("a.db"), b = dir.File("b.db");
  {
    auto s = store::SqliteStore::Open(a);
    ASSERT_TRUE(s.ok());
    auto first = (*s)->ReserveJobIds(3);
    ASSERT_TRUE(first.ok());
    store::WriteBatch batch;
    batch.PutTenant(Tenant{"research", ""});
    batch.PutQueue(Queue{"vision", "research", "", 8, 16, 1.0});
    batch.PutJob(store::test::TestJob(*first, "one"));
    batch.AppendEvent(*first, store::test::At(5), "user:ann", "Submitted", "");
    ASSERT_TRUE((*s)->Commit(batch).ok());
  }
  CliRun ok = Cli({"store", "copy", "--from", "sqlite:" + a, "--to", "sqlite:" + b});
  EXPECT_EQ(ok.code, kExitOk) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("copied sqlite:" + a + " to sqlite:" + b));
  EXPECT_THAT(ok.out, HasSubstr("and checked it: 1 jobs, 1 events, 0 audit entries, 0 nodes, "
                                "1 tenants, 1 queues"));
  EXPECT_THAT(ok.out, HasSubstr("new jobs get ids from 4"));
  CliRun full = Cli({"store", "copy", "--from", "sqlite:" + a, "--to", "sqlite:" + b});
  EXPECT_EQ(full.code, kExitFailure);
  EXPECT_THAT(full.err, HasSubstr("is not empty (jobs, 1 tenant(s), 1 queue(s))"));
  CliRun missing = Cli({"store", "copy", "--from", "sqlite:" + dir.File("nope.db"), "--to",
                        "sqlite:" + dir.File("c.db")});
  EXPECT_EQ(missing.code, kExitFailure);
  EXPECT_THAT(missing.err, HasSubstr("--from " + dir.File("nope.db") + ": no such file"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("c.db"))) << "nothing is created then";
  CliRun bogus = Cli({"store", "copy", "--from", "sqlite:" + a, "--to", "mysql://db/x"});
  EXPECT_EQ(bogus.code, kExitUsage);
  EXPECT_THAT(bogus.err, HasSubstr("--to: expected sqlite:PATH or postgres://"));
  CliRun same = Cli({"store", "copy", "--from", "sqlite:" + a, "--to", "sqlite:" + a});
  EXPECT_EQ(same.code, kExitUsage);
  EXPECT_THAT(same.err, HasSubstr("--from and --to name the same store"));
  CliRun no_to = Cli({"store", "copy", "--from", "sqlite:" + a});
  EXPECT_EQ(no_to.code, kExitUsage);
  EXPECT_THAT(no_to.err, HasSubstr("--to"));
}

TEST(ValidateCommandTest, SecretEnvValuesArePrintedRedacted) {
  const std::string path = ::testing::TempDir() + "/trainyard-validate-secret.yaml";
  {
    std::ofstream f(path);
    f << "name: s\ncommand: [train]\nenv: {HF_TOKEN: hf_Sup3rS3cret, LR: '0.1'}\n"
         "secret_env: [HF_TOKEN]\n";
  }
  CliRun yaml = Cli({"validate", path});
  EXPECT_EQ(yaml.code, kExitOk) << yaml.err;
  EXPECT_THAT(yaml.out, HasSubstr("HF_TOKEN: <redacted>"));
  EXPECT_THAT(yaml.out, HasSubstr("secret_env: [HF_TOKEN]"));
  EXPECT_THAT(yaml.out, Not(HasSubstr("Sup3r")));
  CliRun json = Cli({"validate", "-o", "json", path});
  EXPECT_EQ(json.code, kExitOk) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)[0]["spec"]["env"]["HF_TOKEN"], "<redacted>");
  EXPECT_THAT(json.out, Not(HasSubstr("Sup3r")));
  std::remove(path.c_str());
}

TEST(ClientApiTest, KeepsGoingRoundItsServersThroughAFailover) {
  // Neither server answers at first (the old leader is gone, the new one is still
  // loading its state); the second starts serving 600 ms later.
  const int gone = http::testing::ClosedLoopbackPort();
  const int next = http::testing::ClosedLoopbackPort();
  httplib::Server late;
  late.Get("/api/v1/ping", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"ok": true})", "application/json");
  });
  std::thread serving([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    late.listen("127.0.0.1", next);
  });
  Common c;
  c.server =
      "http://127.0.0.1:" + std::to_string(gone) + ",http://127.0.0.1:" + std::to_string(next);
  std::variant<json, Failure> r;
  {
    auto api = Api::Connect(c);
    ASSERT_TRUE(std::holds_alternative<Api>(api));
    r = std::get<Api>(api).Call("GET", "/api/v1/ping");
  }  // closes its kept connection, which would hold the server's stop for 5 s
  late.stop();
  serving.join();
  ASSERT_TRUE(std::holds_alternative<json>(r)) << std::get<Failure>(r).message;
  EXPECT_EQ(std::get<json>(r)["ok"], true);

  // One server that does not answer: the call fails at once, naming it.
  c.server = "http://127.0.0.1:" + std::to_string(gone);
  auto alone = Api::Connect(c);
  const auto start = std::chrono::steady_clock::now();
  auto refused = std::get<Api>(alone).Call("GET", "/api/v1/ping");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ASSERT_TRUE(std::holds_alternative<Failure>(refused));
  EXPECT_THAT(std::get<Failure>(refused).message,
              HasSubstr("cannot reach the server at " + c.server + ": Connection refused"));
}

}  // namespace
}  // namespace trainyard::cli
