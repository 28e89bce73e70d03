#include "agent/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

TEST(ParseProfileRecordTest, OnlyWellFormedProfileRecords) {
  auto stored = ParseProfileRecord(json::parse(
      R"({"kind":"profile","id":"p-7-1","rank":0,"status":"stored","path":"/d/p-7-1.json"})"));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->id, "p-7-1");
  EXPECT_EQ(stored->status, "stored");
  EXPECT_EQ(stored->path, "/d/p-7-1.json");
  auto failed = ParseProfileRecord(
      json::parse(R"({"kind":"profile","id":"p-7-1","status":"failed","message":"boom"})"));
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->message, "boom");
  EXPECT_TRUE(
      ParseProfileRecord(json::parse(R"({"kind":"profile","id":"p","status":"recording"})")));
  for (const char* other : {R"({"kind":"metrics","step":1,"metrics":{"loss":1}})",
                            R"({"kind":"profile","id":"p","status":"done"})",
                            R"({"kind":"profile","id":7,"status":"stored","path":"x"})",
                            R"({"kind":"profile","id":"p","status":"stored"})", R"([1])"}) {
    EXPECT_FALSE(ParseProfileRecord(json::parse(other))) << other;
  }
}

class ProfileFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("agent_profile_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ProfileFilesTest, TheRequestIsWrittenWholeWithItsDirectory) {
  const std::string file = (dir_ / "req" / "rank-0.json").string();
  const std::string out = (dir_ / "out" / "rank-0").string();
  ASSERT_TRUE(WriteProfileRequest(file, "p-7-1", 20, out).ok());
  std::ifstream in(file);
  EXPECT_EQ(json::parse(in), json({{"id", "p-7-1"}, {"steps", 20}, {"dir", out}}));
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  // A second request replaces the first.
  ASSERT_TRUE(WriteProfileRequest(file, "p-7-2", 5, out).ok());
  std::ifstream again(file);
  EXPECT_EQ(json::parse(again)["id"], "p-7-2");
}

TEST_F(ProfileFilesTest, OnlyFilesInTheTasksProfileDirAreUploaded) {
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  std::ofstream(out / "p-7-1.json") << "{}";
  std::ofstream(dir_ / "secret") << "x";
  fs::create_symlink(dir_ / "secret", out / "link.json");
  auto ok = ProfileTracePath((out / "p-7-1.json").string(), out.string());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, fs::canonical(out / "p-7-1.json").string());
  EXPECT_TRUE(ProfileTracePath("p-7-1.json", out.string()).ok()) << "relative to the dir";
  auto outside = ProfileTracePath((dir_ / "secret").string(), out.string());
  EXPECT_EQ(outside.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(outside.status().message(), HasSubstr("TRAINYARD_PROFILE_DIR"));
  auto link = ProfileTracePath((out / "link.json").string(), out.string());
  EXPECT_THAT(link.status().message(), HasSubstr("resolves to"));
  EXPECT_FALSE(ProfileTracePath((out / "none.json").string(), out.string()).ok());
  EXPECT_FALSE(ProfileTracePath(out.string(), out.string()).ok());
  EXPECT_FALSE(ProfileTracePath((out / ".." / "secret").string(), out.string()).ok());
}

}  // namespace
}  // namespace trainyard::agent
