#include "data/stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "store/testing.h"

namespace trainyard::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using store::test::WriteFile;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class StageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(src() + "/train/shard-0.bin", "abc");
    WriteFile(src() + "/train/deep/shard-1.bin", std::string(3 << 20, 'x'));  // several chunks
    WriteFile(src() + "/README", "hello\n");
    WriteFile(src() + "/empty", "");
    auto m = BuildManifest(src());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
  }
  std::string src() const { return dir_.path() + "/src"; }
  std::string dest() const { return dir_.path() + "/cache/v1"; }

  store::test::TempDir dir_;
  Manifest manifest_;
};

TEST_F(StageTest, CopiesEveryFileReadOnlyAndReportsProgress) {
  fs::create_directories(dir_.path() + "/cache");
  SharedPathFetcher fetcher(src());
  std::atomic<int64_t> landed{0};
  StageOptions o;
  o.threads = 3;
  o.progress = [&](int64_t n) { landed += n; };
  Status s = StageVersion(manifest_, fetcher, dest(), o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(landed.load(), manifest_.total_bytes);
  EXPECT_EQ(Read(dest() + "/train/shard-0.bin"), "abc");
  EXPECT_EQ(Read(dest() + "/train/deep/shard-1.bin"), std::string(3 << 20, 'x'));
  EXPECT_EQ(Read(dest() + "/empty"), "");
  EXPECT_FALSE(fs::exists(dest() + ".partial"));
  // The copy is the version: building its manifest gives the same one.
  auto again = BuildManifest(dest());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->Version(), manifest_.Version());
  struct stat st {};
  ASSERT_EQ(stat((dest() + "/README").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ASSERT_EQ(stat((dest() + "/train").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);
  // Staging over a whole copy is refused; RemoveStaged takes a read-only tree away.
  EXPECT_EQ(StageVersion(manifest_, fetcher, dest(), o).code(), StatusCode::kAlreadyExists);
  RemoveStaged(dest());
  EXPECT_FALSE(fs::exists(dest()));
}

TEST_F(StageTest, ASourceThatChangedSinceTheVersionFailsNamingTheFileAndLeavesNothing) {
  fs::create_directories(dir_.path() + "/cache");
  SharedPathFetcher fetcher(src());
  WriteFile(src() + "/train/shard-0.bin", "abd");  // same size, other bytes
  Status s = StageVersion(manifest_, fetcher, dest());
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("train/shard-0.bin: its content at the source"));
  EXPECT_THAT(s.message(), HasSubstr("changed since the version was registered"));
  EXPECT_FALSE(fs::exists(dest()));
  EXPECT_FALSE(fs::exists(dest() + ".partial"));

  WriteFile(src() + "/train/shard-0.bin", "abcd");  // longer
  s = StageVersion(manifest_, fetcher, dest());
  EXPECT_THAT(s.message(),
              HasSubstr("train/shard-0.bin: 3 bytes in the version, more at the source"));
  fs::remove(src() + "/train/shard-0.bin");
  s = StageVersion(manifest_, fetcher, dest());
  EXPECT_THAT(s.message(), HasSubstr("train/shard-0.bin: cannot open"));
  EXPECT_THAT(s.message(), HasSubstr("removed since the version was registered?"));
  EXPECT_FALSE(fs::exists(dest()));
}

TEST_F(StageTest, APartialCopyLeftByAnEarlierTryIsReplacedAndCancelStops) {
  fs::create_directories(dest() + ".partial/junk");
  SharedPathFetcher fetcher(src());
  std::atomic<bool> cancel{true};
  StageOptions o;
  o.cancel = &cancel;
  Status s = StageVersion(manifest_, fetcher, dest(), o);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_FALSE(fs::exists(dest()));
  EXPECT_FALSE(fs::exists(dest() + ".partial"));
  cancel = false;
  ASSERT_TRUE(StageVersion(manifest_, fetcher, dest(), o).ok());
  EXPECT_FALSE(fs::exists(dest() + "/junk"));
  RemoveStaged(dest());
}

TEST(FetcherTest, OnlyDirectoriesAreReadByThisBuild) {
  auto s3 = OpenFetcher("s3://bucket/imagenet");
  ASSERT_FALSE(s3.ok());
  EXPECT_THAT(s3.status().message(), HasSubstr("\"s3://bucket/imagenet\": this build fetches"));
  auto missing = OpenFetcher("/no/such/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("not a directory here"));
}

}  // namespace
}  // namespace trainyard::data
