#include "data/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/sha256.h"
#include "store/testing.h"

namespace trainyard::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using store::test::WriteFile;

std::string Sha(const std::string& s) {
  Sha256 h;
  h.Update(s.data(), s.size());
  return h.Hex();
}

// A small tree: nested directories, an empty file, an empty directory, a space in a name.
void MakeTree(const std::string& root) {
  WriteFile(root + "/train/shard-0.bin", "abc");
  WriteFile(root + "/train/shard-1.bin", std::string(3 << 20, 'x'));  // several read chunks
  WriteFile(root + "/val/part 0.txt", "");
  WriteFile(root + "/README", "hello\n");
  fs::create_directories(root + "/empty/dir");
}

TEST(ManifestTest, ListsEveryRegularFileWithItsSizeAndHash) {
  store::test::TempDir dir;
  MakeTree(dir.path());
  ManifestStats stats;
  auto m = BuildManifest(dir.path(), {}, &stats);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->entries.size(), 4u);
  EXPECT_EQ(m->entries[0].path, "README");
  EXPECT_EQ(m->entries[1].path, "train/shard-0.bin");
  EXPECT_EQ(m->entries[2].path, "train/shard-1.bin");
  EXPECT_EQ(m->entries[3].path, "val/part 0.txt");
  EXPECT_EQ(m->entries[1].sha256, Sha("abc"));
  EXPECT_EQ(m->entries[2].sha256, Sha(std::string(3 << 20, 'x')));
  EXPECT_EQ(m->entries[3].sha256, Sha(""));
  EXPECT_EQ(m->entries[2].size, 3 << 20);
  EXPECT_EQ(m->total_bytes, 3 + (3 << 20) + 0 + 6);
  EXPECT_EQ(stats.files_read, 4);
  EXPECT_EQ(stats.bytes_read, m->total_bytes);
  // The version is the hash of the canonical lines, which a user can recompute.
  const std::string text = m->entries[0].sha256 + " 6 README\n" + Sha("abc") +
                           " 3 train/shard-0.bin\n" + m->entries[2].sha256 + " " +
                           std::to_string(3 << 20) + " train/shard-1.bin\n" + Sha("") +
                           " 0 val/part 0.txt\n";
  EXPECT_EQ(m->Version(), "sha256:" + Sha(text));
}

TEST(ManifestTest, TheVersionIsTheContentsWhateverTheThreadsTimesOrOrderOfWriting) {
  store::test::TempDir a, b;
  MakeTree(a.path());
  // The same content written in another order, later, with other modes.
  WriteFile(b.path() + "/val/part 0.txt", "");
  WriteFile(b.path() + "/README", "hello\n");
  WriteFile(b.path() + "/train/shard-1.bin", std::string(3 << 20, 'x'));
  WriteFile(b.path() + "/train/shard-0.bin", "abc");
  chmod((b.path() + "/README").c_str(), 0600);
  auto one = BuildManifest(a.path(), {.threads = 1});
  auto many = BuildManifest(b.path(), {.threads = 8});
  ASSERT_TRUE(one.ok() && many.ok());
  EXPECT_EQ(one->Version(), many->Version());
  // One byte more, a renamed file: another version.
  WriteFile(b.path() + "/train/shard-0.bin", "abcd");
  EXPECT_NE(BuildManifest(b.path())->Version(), one->Version());
  WriteFile(b.path() + "/train/shard-0.bin", "abc");
  EXPECT_EQ(BuildManifest(b.path())->Version(), one->Version());
  fs::rename(b.path() + "/README", b.path() + "/README.md");
  EXPECT_NE(BuildManifest(b.path())->Version(), one->Version());
}

TEST(ManifestTest, ARebuildReadsOnlyTheFilesWhoseSizeOrMtimeChanged) {
  store::test::TempDir dir;
  MakeTree(dir.path());
  auto first = BuildManifest(dir.path());
  ASSERT_TRUE(first.ok());
  ManifestStats stats;
  auto same = BuildManifest(dir.path(), {.previous = &*first}, &stats);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(stats.files_read, 0);
  EXPECT_EQ(stats.files_reused, 4);
  EXPECT_EQ(same->Version(), first->Version());
  // A file rewritten with new content and a new mtime is read again; the others are not.
  WriteFile(dir.path() + "/README", "hello again\n");
  struct timeval later[2] = {{2'000'000'000, 0}, {2'000'000'000, 0}};
  utimes((dir.path() + "/README").c_str(), later);
  WriteFile(dir.path() + "/new.txt", "n");
  auto next = BuildManifest(dir.path(), {.previous = &*first}, &stats);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(stats.files_read, 2);
  EXPECT_EQ(stats.files_reused, 3);
  EXPECT_EQ(next->Version(), BuildManifest(dir.path())->Version());
  EXPECT_NE(next->Version(), first->Version());
}

TEST(ManifestTest, LinksAndSpecialFilesAreRefusedNamingThePath) {
  store::test::TempDir dir;
  MakeTree(dir.path());
  fs::create_symlink("README", dir.path() + "/train/link");
  auto link = BuildManifest(dir.path());
  ASSERT_FALSE(link.ok());
  EXPECT_THAT(link.status().message(), HasSubstr("train/link: a symbolic link"));
  fs::remove(dir.path() + "/train/link");
  ASSERT_EQ(mkfifo((dir.path() + "/val/pipe").c_str(), 0600), 0);
  auto fifo = BuildManifest(dir.path());
  ASSERT_FALSE(fifo.ok());
  EXPECT_THAT(fifo.status().message(), HasSubstr("val/pipe: not a regular file"));
  fs::remove(dir.path() + "/val/pipe");
  WriteFile(dir.path() + "/bad\nname", "x");
  auto newline = BuildManifest(dir.path());
  ASSERT_FALSE(newline.ok());
  EXPECT_THAT(newline.status().message(), HasSubstr("a path holds a newline"));
  auto missing = BuildManifest(dir.File("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("nope: not a directory"));
}

TEST(ManifestTest, TheStoredTextRoundTripsAndBadTextIsNamedByLine) {
  store::test::TempDir dir;
  MakeTree(dir.path());
  auto m = BuildManifest(dir.path());
  ASSERT_TRUE(m.ok());
  const std::string text = ManifestToText(*m);
  auto back = ParseManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, *m);
  EXPECT_EQ(back->Version(), m->Version());

  const std::string sha(64, 'a');
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", "manifest: empty"},
      {"manifest 2\n", "manifest line 1: expected \"trainyard-manifest 1\", got \"manifest 2\""},
      {"trainyard-manifest 1\n" + sha + " 1 2 a", "manifest line 2: does not end with a newline"},
      {"trainyard-manifest 1\n" + sha + " 1 a\n", "line 2: expected \"<sha256> <size> <mtime_ns>"},
      {"trainyard-manifest 1\nABC 1 2 a\n", "line 2: sha256: expected 64 lowercase hex digits"},
      {"trainyard-manifest 1\n" + sha + " -1 2 a\n", "line 2: size: expected a byte count"},
      {"trainyard-manifest 1\n" + sha + " 1 x a\n", "line 2: mtime_ns: expected an integer"},
      {"trainyard-manifest 1\n" + sha + " 1 2 ../etc/passwd\n",
       "line 2: path \"../etc/passwd\": expected a relative path"},
      {"trainyard-manifest 1\n" + sha + " 1 2 /abs\n", "path \"/abs\": expected a relative"},
      {"trainyard-manifest 1\n" + sha + " 1 2 b\n" + sha + " 1 2 a\n",
       "line 3: path \"a\": paths must be unique and in ascending order"},
      {"trainyard-manifest 1\n" + sha + " 1 2 a\n" + sha + " 1 2 a\n", "line 3: path \"a\""},
  };
  for (const Case& c : cases) {
    auto r = ParseManifest(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr(c.error)) << c.text;
  }
}

}  // namespace
}  // namespace trainyard::data
