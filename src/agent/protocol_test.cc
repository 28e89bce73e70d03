#include "agent/protocol.h"

#include <gtest/gtest.h>

namespace trainyard::agent {
namespace {

using nlohmann::json;

std::string Error(const json& command) {
  auto c = ParseCommand(command);
  return c.ok() ? "ok" : c.status().message();
}

TEST(ParseCommandTest, FaultsCarryTheWholeSet) {
  auto c = ParseCommand(json::parse(R"({"kind": "faults", "faults": [
      {"id": "f-3", "kind": "slow", "gpu": 1, "until_ms": 0, "job_id": 0},
      {"id": "f-4", "kind": "comm-slow", "gpu": -1, "until_ms": 1790000000000, "job_id": 17},
      {"id": "f-5", "kind": "link-down"}]})"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->kind, Command::Kind::kFaults);
  ASSERT_EQ(c->faults.size(), 3u);
  EXPECT_EQ(c->faults[0], (Fault{"f-3", FaultKind::kSlow, 1, 0, 0}));
  EXPECT_EQ(c->faults[1], (Fault{"f-4", FaultKind::kCommSlow, -1, 1790000000000, 17}));
  EXPECT_EQ(c->faults[2], (Fault{"f-5", FaultKind::kLinkDown, -1, 0, 0}));
  EXPECT_TRUE(c->faults[2].node_wide());

  auto empty = ParseCommand({{"kind", "faults"}, {"faults", json::array()}});
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->faults.empty()) << "an empty list clears every fault";
}

TEST(ParseCommandTest, EveryFaultKindParses) {
  for (const char* kind : {"xid", "ecc", "thermal", "link-down", "slow", "hang", "data-stall",
                           "loss-nan", "grad-spike"}) {
    auto c = ParseCommand({{"kind", "faults"}, {"faults", {{{"id", "f"}, {"kind", kind}}}}});
    ASSERT_TRUE(c.ok()) << kind << ": " << c.status().ToString();
    EXPECT_EQ(FaultKindName(c->faults[0].kind), kind);
  }
}

TEST(ParseCommandTest, BadFaultsNameTheField) {
  EXPECT_EQ(Error({{"kind", "faults"}}), "faults: faults: missing");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", "slow"}}),
            "faults: faults: must be a list of faults, got \"\\\"slow\\\"\"");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {{{"id", "f-1"}, {"kind", "melt"}}}}}),
            "faults: faults[0].kind: unknown fault kind \"melt\"; valid kinds: xid, ecc, "
            "thermal, link-down, slow, hang, data-stall, loss-nan, grad-spike, comm-slow");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {{{"kind", "slow"}}}}}),
            "faults: faults[0].id: missing");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {{{"id", ""}, {"kind", "slow"}}}}}),
            "faults: faults[0].id: must be a non-empty string, got \"\\\"\\\"\"");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {{{"id", "f-1"}}}}}),
            "faults: faults[0].kind: missing");
  EXPECT_EQ(
      Error({{"kind", "faults"}, {"faults", {{{"id", "f-1"}, {"kind", "slow"}, {"gpu", -2}}}}}),
      "faults: faults[0].gpu: must be a GPU index or -1 (every GPU), got \"-2\"");
  EXPECT_EQ(
      Error({{"kind", "faults"}, {"faults", {{{"id", "f-1"}, {"kind", "slow"}, {"gpu", 64}}}}}),
      "faults: faults[0].gpu: must be a GPU index below 64 or -1 (every GPU), got \"64\"");
  EXPECT_EQ(Error({{"kind", "faults"},
                   {"faults", {{{"id", "f-1"}, {"kind", "slow"}, {"until_ms", "soon"}}}}}),
            "faults: faults[0].until_ms: must be an integer >= 0, got \"\\\"soon\\\"\"");
  EXPECT_EQ(
      Error({{"kind", "faults"},
             {"faults", {{{"id", "f-1"}, {"kind", "slow"}}, {{"id", "f-1"}, {"kind", "hang"}}}}}),
      "faults: faults[1].id: \"f-1\" appears twice; fault ids must be unique");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {{{"id", "f-1"}, {"kind", "comm-slow"}}}}}),
            "faults: faults[0].job_id: a comm-slow fault must name the job it slows (> 0)");
  EXPECT_EQ(Error({{"kind", "faults"}, {"faults", {7}}}),
            "faults: faults[0]: must be an object, got \"7\"");
}

TEST(ParseCommandTest, CheckpointNamesATask) {
  auto c = ParseCommand({{"kind", "checkpoint"}, {"task_id", "17.0.1"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, Command::Kind::kCheckpoint);
  EXPECT_EQ(c->task_id, "17.0.1");
  EXPECT_EQ(Error({{"kind", "checkpoint"}}), "checkpoint: task_id: missing");
  EXPECT_EQ(Error({{"kind", "checkpoint"}, {"task_id", 17}}),
            "checkpoint: task_id: must be a string, got \"17\"");
  EXPECT_EQ(Error({{"kind", "checkpoint"}, {"task_id", ""}}),
            "checkpoint: task_id: must not be empty");
}

TEST(ParseCommandTest, UnknownKindListsTheKnownOnes) {
  EXPECT_EQ(Error({{"kind", "reboot"}}),
            "kind: must be start, stop, preempt, profile, faults or checkpoint, got \"reboot\"");
}

TEST(ToJsonTest, LinksAndFaultEffects) {
  EXPECT_EQ(ToJson(LinkSample{"ib0", "ib", false, 3}),
            json({{"name", "ib0"}, {"kind", "ib"}, {"up", false}, {"errors", 3}}));
  EXPECT_EQ(ToJson(FaultEffects{}), json::parse(R"({"slow_factor": 1.0, "hang": false,
            "data_stall_s": 0.0, "loss_nan": false, "grad_spike": false})"));
}

}  // namespace
}  // namespace trainyard::agent
