#include "agent/data_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "data/manifest.h"
#include "data/stage.h"
#include "store/testing.h"

namespace trainyard::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using store::test::WriteFile;

class DataCacheTest : public ::testing::Test {
 protected:
  // A dataset directory of `files` files of `size` bytes; its version.
  std::string MakeDataset(const std::string& name, int files, size_t size) {
    const std::string dir = tmp_.path() + "/shared/" + name;
    for (int i = 0; i < files; ++i) {
      // The dataset's name in its bytes: datasets of the same shape differ in content.
      std::string bytes(size, static_cast<char>('a' + i));
      bytes.replace(0, std::min(name.size(), size), name.substr(0, size));
      WriteFile(dir + "/part-" + std::to_string(i), bytes);
    }
    auto m = data::BuildManifest(dir);
    EXPECT_TRUE(m.ok());
    manifests_[m->Version()] = data::ManifestToText(*m);
    return m->Version();
  }
  protocol::TaskData Entry(const std::string& name, const std::string& version) {
    return {name, version, tmp_.path() + "/shared/" + name, "", true};
  }
  std::unique_ptr<DataCache> Open(int64_t budget) {
    DataCacheOptions o;
    o.root = tmp_.path() + "/cache";
    o.budget_bytes = budget;
    o.node = "node-1";
    o.threads = 2;
    o.pin = std::chrono::seconds(0);
    auto c = DataCache::Open(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  ManifestSource Manifests() {
    return [this](const std::string& v) -> Result<std::string> {
      auto it = manifests_.find(v);
      if (it == manifests_.end()) return NotFound("no manifest of " + v);
      return it->second;
    };
  }
  // Waits (bounded) until `version` leaves the staging state; its status.
  protocol::DatasetStatus Settle(DataCache& c, const std::string& version) {
    for (int i = 0; i < 2000; ++i) {
      for (const auto& s : c.Statuses()) {
        if (s.version == version && s.state != protocol::DatasetState::kStaging) return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << version << " still staging after 10 s";
    return {};
  }
  void TearDown() override { data::RemoveStaged(tmp_.path() + "/cache"); }

  store::test::TempDir tmp_;
  std::map<std::string, std::string> manifests_;
};

TEST_F(DataCacheTest, StagesOnceSharesTheCopyAndFindsItAgainAfterARestart) {
  const std::string v = MakeDataset("imagenet", 3, 1000);
  auto cache = Open(1 << 20);
  EXPECT_FALSE(cache->Acquire(v).ok());  // not staged yet
  cache->Stage(Entry("imagenet", v), Manifests());
  cache->Stage(Entry("imagenet", v), Manifests());  // a second ask joins the first
  auto st = Settle(*cache, v);
  ASSERT_EQ(st.state, protocol::DatasetState::kReady) << st.error;
  EXPECT_EQ(st.bytes_total, 3000);
  EXPECT_EQ(st.bytes_done, 3000);
  EXPECT_EQ(st.dataset, "imagenet");
  auto a = cache->Acquire(v);
  auto b = cache->Acquire(v);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);                                    // one copy for both
  EXPECT_EQ(std::ifstream(*a + "/part-1").get(), 'i');  // "imagenet", then 'b's
  EXPECT_EQ(cache->Statuses().front().in_use, 2);
  cache->Release(v);
  cache->Release(v);

  // A new agent on the same directory finds it whole; a partial copy is cleared.
  fs::create_directories(tmp_.path() + "/cache/" + std::string(64, 'e') + ".partial");
  cache.reset();
  cache = Open(1 << 20);
  auto listed = cache->Statuses();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, protocol::DatasetState::kReady);
  EXPECT_EQ(listed[0].bytes_total, 3000);
  EXPECT_TRUE(cache->Acquire(v).ok());
  EXPECT_FALSE(fs::exists(tmp_.path() + "/cache/" + std::string(64, 'e') + ".partial"));
}

TEST_F(DataCacheTest, EvictsTheLeastRecentlyUsedVersionNobodyReads) {
  const std::string a = MakeDataset("a", 1, 4000);
  const std::string b = MakeDataset("b", 1, 4000);
  const std::string c = MakeDataset("c", 1, 4000);
  auto cache = Open(9000);  // room for two
  cache->Stage(Entry("a", a), Manifests());
  ASSERT_EQ(Settle(*cache, a).state, protocol::DatasetState::kReady);
  cache->Stage(Entry("b", b), Manifests());
  ASSERT_EQ(Settle(*cache, b).state, protocol::DatasetState::kReady);
  // b is read now; a was used least recently and is read by nobody: a goes.
  ASSERT_TRUE(cache->Acquire(b).ok());
  cache->Stage(Entry("c", c), Manifests());
  ASSERT_EQ(Settle(*cache, c).state, protocol::DatasetState::kReady);
  std::set<std::string> held;
  for (const auto& s : cache->Statuses()) held.insert(s.dataset);
  EXPECT_EQ(held, (std::set<std::string>{"b", "c"}));
  EXPECT_FALSE(fs::exists(tmp_.path() + "/cache/" + a.substr(7)));

  // With b and c both read, a cannot fit: it fails saying why, and nothing is evicted.
  ASSERT_TRUE(cache->Acquire(c).ok());
  cache->Stage(Entry("a", a), Manifests());
  auto st = Settle(*cache, a);
  ASSERT_EQ(st.state, protocol::DatasetState::kFailed);
  EXPECT_THAT(st.error,
              HasSubstr("dataset a " + a + " needs 3.9 KiB in node node-1's dataset cache"));
  EXPECT_THAT(st.error, HasSubstr("in use by ranks"));
  EXPECT_TRUE(cache->Acquire(b).ok());
  // Once released, a retry makes room.
  cache->Release(b);
  cache->Release(b);
  cache->Stage(Entry("a", a), Manifests());
  EXPECT_EQ(Settle(*cache, a).state, protocol::DatasetState::kReady);
}

TEST_F(DataCacheTest, AVersionLargerThanTheCacheOrUnreadableFailsNamingIt) {
  const std::string big = MakeDataset("big", 2, 5000);
  auto cache = Open(8000);
  cache->Stage(Entry("big", big), Manifests());
  auto st = Settle(*cache, big);
  ASSERT_EQ(st.state, protocol::DatasetState::kFailed);
  EXPECT_THAT(st.error, HasSubstr("dataset big " + big +
                                  " is 9.8 KiB, more than node node-1's "
                                  "dataset cache holds (7.8 KiB"));
  auto acquired = cache->Acquire(big);
  ASSERT_FALSE(acquired.ok());
  EXPECT_THAT(acquired.status().message(), HasSubstr("is not ready on node node-1 (failed: "));

  // The server has no manifest of it; or its source changed since.
  const std::string v = MakeDataset("small", 1, 10);
  manifests_.erase(v);
  cache->Stage(Entry("small", v), Manifests());
  EXPECT_THAT(Settle(*cache, v).error, HasSubstr("cannot get its manifest: no manifest of"));
  const std::string w = MakeDataset("changing", 1, 10);
  WriteFile(tmp_.path() + "/shared/changing/part-0", std::string(10, 'z'));
  cache->Stage(Entry("changing", w), Manifests());
  EXPECT_THAT(Settle(*cache, w).error, HasSubstr("part-0: its content at the source"));
}

}  // namespace
}  // namespace trainyard::agent
