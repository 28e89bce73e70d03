#include "agent/tail.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;

class TailTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() /
             ("trainyard-tail-" + std::to_string(getpid()) + "-" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove(path_);
  }
  void TearDown() override { fs::remove(path_); }
  void Append(const std::string& s) {
    std::ofstream f(path_, std::ios::app | std::ios::binary);
    f << s;
  }
  std::string path_;
};

TEST_F(TailTest, LogChunksFromOffsets) {
  EXPECT_EQ(*ReadLogChunk(path_, 0), "") << "a file not created yet reads as empty";
  Append(std::string("ab\0c", 4));
  EXPECT_EQ(*ReadLogChunk(path_, 0), std::string("ab\0c", 4));
  EXPECT_EQ(*ReadLogChunk(path_, 2), std::string("\0c", 2));
  EXPECT_EQ(*ReadLogChunk(path_, 4), "");
  Append("defgh");
  EXPECT_EQ(*ReadLogChunk(path_, 4, 3), "def") << "at most max_bytes per chunk";
  EXPECT_EQ(*ReadLogChunk(path_, 7, 3), "gh");
}

TEST_F(TailTest, MetricsShipsCompleteLinesAndSkipsInvalidOnes) {
  Append("{\"step\":1,\"loss\":2.5}\nnot json\n\n[1,2]\n{\"step\":2}\n{\"step\":");
  auto b = ReadMetricsLines(path_, 0);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->lines.size(), 2u);
  EXPECT_EQ(b->lines[0]["loss"], 2.5);
  EXPECT_EQ(b->lines[1]["step"], 2);
  EXPECT_EQ(b->invalid, 2);
  EXPECT_EQ(b->offset, 0);
  int64_t end = b->end_offset;
  EXPECT_EQ(
      end, static_cast<int64_t>(
               std::string("{\"step\":1,\"loss\":2.5}\nnot json\n\n[1,2]\n{\"step\":2}\n").size()));

  // The partial line waits for its newline.
  auto again = ReadMetricsLines(path_, end);
  EXPECT_TRUE(again->lines.empty());
  EXPECT_EQ(again->end_offset, end);
  Append("3}\n");
  auto rest = ReadMetricsLines(path_, end);
  ASSERT_EQ(rest->lines.size(), 1u);
  EXPECT_EQ(rest->lines[0]["step"], 3);
  EXPECT_EQ(rest->offset, end);
  EXPECT_EQ(rest->end_offset, static_cast<int64_t>(fs::file_size(path_)));
}

TEST_F(TailTest, MetricsLineLongerThanARequestIsSkipped) {
  Append(std::string(100, 'x'));
  auto waiting = ReadMetricsLines(path_, 0, 16);
  EXPECT_EQ(waiting->end_offset, 0);
  Append("\n{\"a\":1}\n");
  auto skipped = ReadMetricsLines(path_, 0, 16);
  EXPECT_EQ(skipped->invalid, 1);
  EXPECT_EQ(skipped->end_offset, 101);
  auto next = ReadMetricsLines(path_, skipped->end_offset, 16);
  ASSERT_EQ(next->lines.size(), 1u);
}

TEST(ParseMetricsLinesTest, CompleteLinesOnlyWithOffsets) {
  const std::string text = "{\"step\": 1}\n\n  \nnot json\n[1,2]\n{\"step\": 2}\n{\"step\"";
  MetricsBatch b = ParseMetricsLines(text, 100);
  EXPECT_EQ(b.offset, 100);
  ASSERT_EQ(b.lines.size(), 2u);
  EXPECT_EQ(b.lines[1]["step"], 2);
  EXPECT_EQ(b.invalid, 2);  // "not json" and the array
  EXPECT_EQ(b.end_offset, 100 + static_cast<int64_t>(text.rfind('\n')) + 1);
}

TEST(ParseMetricsLinesTest, NoNewlineConsumesNothing) {
  MetricsBatch b = ParseMetricsLines("{\"step\": 1}", 7);
  EXPECT_TRUE(b.lines.empty());
  EXPECT_EQ(b.invalid, 0);
  EXPECT_EQ(b.end_offset, 7);
}

}  // namespace
}  // namespace trainyard::agent
