#include "server/profiles.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace trainyard::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class ProfileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            ("profiles_test_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    store_ = std::make_unique<ProfileStore>(root_.string(), &clock_);
  }
  void TearDown() override { fs::remove_all(root_); }

  ProfileRequest Create(int32_t attempt = 0,
                        std::vector<ProfileTarget> ranks = {{0, "node-0"}, {1, "node-1"}}) {
    auto r = store_->Create(7, attempt, 5, ranks, "user:alice");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProfileRequest{};
  }
  static ProfileReport Chunk(const ProfileRequest& r, int32_t rank, int64_t offset,
                             std::string data, int64_t total) {
    ProfileReport p;
    p.kind = ProfileReport::Kind::kChunk;
    p.node = "node-" + std::to_string(rank);
    p.job = r.job;
    p.attempt = r.attempt;
    p.rank = rank;
    p.id = r.id;
    p.offset = offset;
    p.data = std::move(data);
    p.total_bytes = total;
    return p;
  }
  static ProfileReport Say(const ProfileRequest& r, int32_t rank, ProfileReport::Kind kind,
                           std::string message = "") {
    ProfileReport p = Chunk(r, rank, 0, "", 0);
    p.kind = kind;
    p.message = std::move(message);
    return p;
  }
  ProfileState StateOf(const std::string& id, int32_t rank, std::optional<int32_t> open = 0) {
    auto r = store_->Get(7, id, open);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->ranks.at(static_cast<size_t>(rank)).state : ProfileState::kFailed;
  }

  fs::path root_;
  FakeClock clock_;
  std::unique_ptr<ProfileStore> store_;
};

constexpr const char* kTrace =
    R"({"traceEvents":[{"name":"step 1","ph":"X","ts":1000,"dur":5,"pid":0,"tid":1}]})";

TEST_F(ProfileStoreTest, IdsCountPerJobAndSurviveARestart) {
  EXPECT_EQ(Create().id, "p-7-1");
  EXPECT_EQ(Create().id, "p-7-2");
  EXPECT_EQ(store_->Create(8, 0, 5, {{0, "n"}}, "x")->id, "p-8-1");
  store_ = std::make_unique<ProfileStore>(root_.string(), &clock_);
  EXPECT_EQ(Create().id, "p-7-3");
  auto list = store_->List(7, 0);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].created_by, "user:alice");
  EXPECT_EQ((*list)[0].steps, 5);
}

TEST_F(ProfileStoreTest, ProfileSeqAcceptsOnlyTheJobsOwnIds) {
  EXPECT_EQ(ProfileSeq("p-7-12", 7), 12);
  EXPECT_FALSE(ProfileSeq("p-7-12", 70));
  EXPECT_FALSE(ProfileSeq("p-7-0", 7));
  EXPECT_FALSE(ProfileSeq("p-7-01", 7));
  EXPECT_FALSE(ProfileSeq("p-7-../x", 7));
  EXPECT_FALSE(ProfileSeq("p-7-", 7));
}

TEST_F(ProfileStoreTest, ChunksBecomeAStoredTrace) {
  ProfileRequest r = Create();
  const std::string trace = kTrace;
  const auto half = trace.size() / 2;
  EXPECT_EQ(store_->Report(Say(r, 0, ProfileReport::Kind::kRecording))->state,
            ProfileState::kRecording);
  auto a = store_->Report(Chunk(r, 0, 0, trace.substr(0, half), trace.size()));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->next_offset, static_cast<int64_t>(half));
  EXPECT_EQ(a->state, ProfileState::kRecording);
  // A chunk that does not start where the copy ends is not written.
  auto skew = store_->Report(Chunk(r, 0, 3, trace.substr(3), trace.size()));
  ASSERT_TRUE(skew.ok());
  EXPECT_EQ(skew->next_offset, static_cast<int64_t>(half));
  auto b = store_->Report(Chunk(r, 0, half, trace.substr(half), trace.size()));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->state, ProfileState::kStored);
  EXPECT_EQ(*store_->ReadTrace(7, r.id, 0), trace);
  EXPECT_TRUE(fs::exists(root_ / "7" / r.id / "rank-0.json"));
  EXPECT_FALSE(fs::exists(root_ / "7" / r.id / "rank-0.part"));
  // A resent last chunk changes nothing.
  EXPECT_EQ(store_->Report(Chunk(r, 0, half, trace.substr(half), trace.size()))->state,
            ProfileState::kStored);
  // Rank 1 has not stored anything yet.
  EXPECT_EQ(store_->ReadTrace(7, r.id, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(store_->ReadTrace(7, r.id, 1).status().message(), HasSubstr("requested"));
  // A restarted server knows the state.
  store_ = std::make_unique<ProfileStore>(root_.string(), &clock_);
  EXPECT_EQ(StateOf(r.id, 0), ProfileState::kStored);
  EXPECT_EQ(StateOf(r.id, 1), ProfileState::kRequested);
}

TEST_F(ProfileStoreTest, TracesOverTheCapAreRefusedWithTheirFirstChunk) {
  ProfileRequest r = Create();
  auto big = store_->Report(Chunk(r, 1, 0, "{", kMaxProfileTraceBytes + 1));
  ASSERT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("64.0 MiB"));
  EXPECT_THAT(big.status().message(), HasSubstr("--steps"));
  EXPECT_EQ(StateOf(r.id, 1), ProfileState::kFailed);
  EXPECT_FALSE(fs::exists(root_ / "7" / r.id / "rank-1.part"));
  // Exactly the cap is allowed.
  EXPECT_TRUE(store_->Report(Chunk(r, 0, 0, "{", kMaxProfileTraceBytes)).ok());
  EXPECT_EQ(StateOf(r.id, 0), ProfileState::kRecording);
}

TEST_F(ProfileStoreTest, AnUploadThatIsNotJsonFailsTheRank) {
  ProfileRequest r = Create();
  const std::string cut = R"({"traceEvents": [)";
  auto reply = store_->Report(Chunk(r, 0, 0, cut, static_cast<int64_t>(cut.size())));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->state, ProfileState::kFailed);
  EXPECT_THAT(reply->message, HasSubstr("not valid JSON"));
  auto text = store_->Report(Chunk(r, 1, 0, "step 1 took 5ms", 15));
  EXPECT_EQ(text->state, ProfileState::kFailed);
  EXPECT_THAT(text->message, HasSubstr("not Chrome trace JSON"));
  // A failed rank takes nothing more.
  EXPECT_EQ(store_->Report(Chunk(r, 0, 0, kTrace, std::string(kTrace).size())).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(ProfileStoreTest, ReportsAreCheckedAgainstTheRequest) {
  ProfileRequest r = Create(/*attempt=*/2);
  ProfileReport wrong_node = Chunk(r, 0, 0, "{}", 2);
  wrong_node.node = "node-9";
  EXPECT_EQ(store_->Report(wrong_node).status().code(), StatusCode::kNotFound);
  ProfileReport wrong_attempt = Chunk(r, 0, 0, "{}", 2);
  wrong_attempt.attempt = 1;
  EXPECT_EQ(store_->Report(wrong_attempt).status().code(), StatusCode::kFailedPrecondition);
  ProfileReport unasked = Chunk(r, 3, 0, "{}", 2);
  EXPECT_EQ(store_->Report(unasked).status().code(), StatusCode::kNotFound);
  ProfileReport unknown = Chunk(r, 0, 0, "{}", 2);
  unknown.id = "p-7-99";
  EXPECT_EQ(store_->Report(unknown).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Report(Chunk(r, 0, 0, "{}}", 2)).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ProfileStoreTest, TheSdksFailureIsKeptWithItsMessage) {
  ProfileRequest r = Create();
  auto reply = store_->Report(Say(r, 1, ProfileReport::Kind::kFailed, "torch.profiler: boom"));
  ASSERT_TRUE(reply.ok());
  auto got = store_->Get(7, r.id, 0);
  EXPECT_EQ(got->ranks[1].state, ProfileState::kFailed);
  EXPECT_EQ(got->ranks[1].message, "torch.profiler: boom");
  EXPECT_FALSE(got->Done());
  ASSERT_TRUE(store_->Report(Chunk(r, 0, 0, kTrace, std::string(kTrace).size())).ok());
  EXPECT_TRUE(store_->Get(7, r.id, 0)->Done());
}

TEST_F(ProfileStoreTest, RanksThatCanNoLongerAnswerFail) {
  ProfileRequest r = Create();
  ASSERT_TRUE(store_->Report(Say(r, 0, ProfileReport::Kind::kRecording)).ok());
  // Still running: nothing changes until the start timeout.
  clock_.Advance(kProfileStartTimeout);
  EXPECT_EQ(StateOf(r.id, 1), ProfileState::kRequested);
  clock_.Advance(Duration(1));
  auto got = store_->Get(7, r.id, 0);
  EXPECT_EQ(got->ranks[1].state, ProfileState::kFailed);
  EXPECT_THAT(got->ranks[1].message, HasSubstr("trainyard.log(step=...)"));
  EXPECT_EQ(got->ranks[0].state, ProfileState::kRecording);  // a long profile is fine

  // Attempt 0 ended: a requested rank fails at once, an upload gets a grace period.
  ProfileRequest s = Create();
  ASSERT_TRUE(store_->Report(Say(s, 0, ProfileReport::Kind::kRecording)).ok());
  got = store_->Get(7, s.id, std::nullopt);
  EXPECT_EQ(got->ranks[1].state, ProfileState::kFailed);
  EXPECT_THAT(got->ranks[1].message, HasSubstr("attempt 0 ended before rank 1 began"));
  EXPECT_EQ(got->ranks[0].state, ProfileState::kRecording);
  clock_.Advance(kProfileUploadGrace + Duration(1));
  got = store_->Get(7, s.id, /*open_attempt=*/1);
  EXPECT_EQ(got->ranks[0].state, ProfileState::kFailed);
  EXPECT_THAT(got->ranks[0].message, HasSubstr("trace was uploaded"));
}

TEST_F(ProfileStoreTest, ANewRequestSupersedesRanksThatHaveNotBegun) {
  ProfileRequest a = Create();
  ASSERT_TRUE(store_->Report(Say(a, 0, ProfileReport::Kind::kRecording)).ok());
  ProfileRequest b = Create(0, {{1, "node-1"}});
  auto got = store_->Get(7, a.id, 0);
  EXPECT_EQ(got->ranks[0].state, ProfileState::kRecording);
  EXPECT_EQ(got->ranks[1].state, ProfileState::kFailed);
  EXPECT_THAT(got->ranks[1].message, HasSubstr("superseded by " + b.id));
  // The SDK began the old one after all: what it sends is taken.
  auto late = store_->Report(Chunk(a, 1, 0, kTrace, std::string(kTrace).size()));
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->state, ProfileState::kStored);
  EXPECT_EQ(StateOf(b.id, 0), ProfileState::kRequested);
}

TEST_F(ProfileStoreTest, AbandonFailsWhatIsNotDone) {
  ProfileRequest r = Create();
  ASSERT_TRUE(store_->Report(Chunk(r, 0, 0, kTrace, std::string(kTrace).size())).ok());
  ASSERT_TRUE(store_->Abandon(7, r.id, "not sent: job 7 is Preempting").ok());
  auto got = store_->Get(7, r.id, 0);
  EXPECT_EQ(got->ranks[0].state, ProfileState::kStored);
  EXPECT_EQ(got->ranks[1].state, ProfileState::kFailed);
  EXPECT_EQ(got->ranks[1].message, "not sent: job 7 is Preempting");
  EXPECT_EQ(store_->Abandon(7, "p-7-9", "x").code(), StatusCode::kNotFound);
}

TEST_F(ProfileStoreTest, DeleteJobRemovesEverything) {
  ProfileRequest r = Create();
  ASSERT_TRUE(store_->DeleteJob(7).ok());
  EXPECT_FALSE(fs::exists(root_ / "7"));
  EXPECT_EQ(store_->Get(7, r.id, 0).status().code(), StatusCode::kNotFound);
}

TEST(MergeProfileTracesTest, EveryRankBecomesAProcess) {
  std::map<int32_t, std::string> traces = {
      {0, R"({"traceEvents":[{"name":"process_name","ph":"M","pid":4242,"args":{"name":"python"}},
              {"name":"step 1","ph":"X","ts":10,"dur":5,"pid":4242,"tid":1,"args":{"loss":2.5}}],
              "otherData":{"x":1}})"},
      // torch's exporter without Kineto: a bare array, string pids.
      {1, R"([{"name":"aten::mm","ph":"X","ts":11,"dur":2,"pid":"CPU functions","tid":1}])"}};
  auto merged = MergeProfileTraces(
      "p-7-1", {0, 1}, [&](int32_t rank) -> Result<std::string> { return traces.at(rank); });
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  json j = json::parse(*merged);
  std::vector<std::string> names;
  for (const json& e : j["traceEvents"]) {
    names.push_back(e["name"].get<std::string>() + "@" + e["pid"].dump());
  }
  EXPECT_THAT(names, ElementsAre("process_name@0", "process_sort_index@0", "process_name@1",
                                 "process_sort_index@1", "step 1@0", "aten::mm@1"));
  EXPECT_EQ(j["traceEvents"][0]["args"]["name"], "rank 0");
  EXPECT_EQ(j["traceEvents"][4]["args"]["loss"], 2.5);
  EXPECT_EQ(j["otherData"]["profile"], "p-7-1");
  EXPECT_EQ(j["displayTimeUnit"], "ms");
}

TEST(MergeProfileTracesTest, BadOrHugeTracesAreRefused) {
  auto bad = MergeProfileTraces("p-7-1", {3}, [](int32_t) -> Result<std::string> {
    return std::string(R"({"events": []})");
  });
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(bad.status().message(), HasSubstr("rank 3"));
  const std::string many = "[" + std::string(R"({"name":"x","ph":"i","ts":1},)") + R"({"ph":"i"}])";
  auto huge = MergeProfileTraces(
      "p-7-1", {0, 1}, [&](int32_t) -> Result<std::string> { return many; }, /*max_bytes=*/200);
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(huge.status().message(), HasSubstr("--rank"));
  auto unreadable = MergeProfileTraces(
      "p-7-1", {0}, [](int32_t) -> Result<std::string> { return NotFound("gone"); });
  EXPECT_EQ(unreadable.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace trainyard::server
