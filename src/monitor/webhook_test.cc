#include "monitor/webhook.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "monitor/testing.h"

namespace trainyard::monitor {
namespace {

using std::chrono::milliseconds;
using testing::At;

Alert MakeAlert(const std::string& node, const std::string& gpu, AlertState state) {
  Alert a;
  a.rule = "GpuXidError";
  a.labels = {{"alertname", "GpuXidError"},
              {"gpu", gpu},
              {"layer", "system"},
              {"node", node},
              {"severity", "critical"}};
  a.fingerprint = AlertFingerprint(a.labels);
  a.annotations = {{"summary", "GPU " + gpu + " on " + node + " reported XID errors"},
                   {"description", "see the node's kernel log"}};
  a.state = state;
  a.active_at = At(0);
  a.starts_at = At(0);
  return a;
}

TEST(WebhookTest, RendersTheAlertmanagerPayload) {
  Alert firing = MakeAlert("n1", "0", AlertState::kFiring);
  firing.starts_at = At(60);
  Alert resolved = MakeAlert("n2", "3", AlertState::kResolved);
  resolved.starts_at = At(0) + milliseconds(500);
  resolved.ends_at = At(300) + milliseconds(250);
  WebhookOptions options;
  options.receiver = "ops";
  options.external_url = "https://trainyard.example.com";
  options.generator_url_prefix = "https://trainyard.example.com/alerts?rule=";

  // Given out of order: the payload sorts alerts by their labels.
  const std::string body = RenderWebhook({resolved, firing}, options);
  const auto want = nlohmann::ordered_json::parse(R"({
    "version": "4",
    "groupKey": "{}:{alertname=\"GpuXidError\"}",
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "ops",
    "groupLabels": {"alertname": "GpuXidError"},
    "commonLabels": {"alertname": "GpuXidError", "layer": "system", "severity": "critical"},
    "commonAnnotations": {"description": "see the node's kernel log"},
    "externalURL": "https://trainyard.example.com",
    "alerts": [
      {
        "status": "firing",
        "labels": {"alertname": "GpuXidError", "gpu": "0", "layer": "system", "node": "n1",
                   "severity": "critical"},
        "annotations": {"description": "see the node's kernel log",
                        "summary": "GPU 0 on n1 reported XID errors"},
        "startsAt": "2026-11-29T09:01:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "https://trainyard.example.com/alerts?rule=GpuXidError",
        "fingerprint": "e8d8b38db5c8daa8"
      },
      {
        "status": "resolved",
        "labels": {"alertname": "GpuXidError", "gpu": "3", "layer": "system", "node": "n2",
                   "severity": "critical"},
        "annotations": {"description": "see the node's kernel log",
                        "summary": "GPU 3 on n2 reported XID errors"},
        "startsAt": "2026-11-29T09:00:00.5Z",
        "endsAt": "2026-11-29T09:05:00.25Z",
        "generatorURL": "https://trainyard.example.com/alerts?rule=GpuXidError",
        "fingerprint": "53bd7085c793e246"
      }
    ]
  })");
  // ordered_json compares key order too.
  EXPECT_EQ(nlohmann::ordered_json::parse(body), want) << body;
  EXPECT_EQ(body, want.dump());  // compact, as Alertmanager sends it
}

TEST(WebhookTest, AGroupWithNothingFiringIsResolved) {
  Alert a = MakeAlert("n1", "0", AlertState::kResolved);
  a.ends_at = At(100);
  auto j = nlohmann::json::parse(RenderWebhook({a}, WebhookOptions{}));
  EXPECT_EQ(j["status"], "resolved");
  EXPECT_EQ(j["receiver"], "trainyard");
  EXPECT_EQ(j["alerts"][0]["endsAt"], "2026-11-29T09:01:40Z");
  EXPECT_EQ(j["alerts"][0]["generatorURL"], "");
  // One alert: every label and annotation is common.
  EXPECT_EQ(j["commonLabels"].size(), 5u);
  EXPECT_EQ(j["commonAnnotations"].size(), 2u);
}

TEST(WebhookTest, MaxAlertsCutsAndCounts) {
  WebhookOptions options;
  options.max_alerts = 2;
  auto j = nlohmann::json::parse(RenderWebhook(
      {MakeAlert("n3", "0", AlertState::kFiring), MakeAlert("n1", "0", AlertState::kFiring),
       MakeAlert("n2", "0", AlertState::kFiring)},
      options));
  EXPECT_EQ(j["truncatedAlerts"], 1);
  ASSERT_EQ(j["alerts"].size(), 2u);
  EXPECT_EQ(j["alerts"][0]["labels"]["node"], "n1");
  EXPECT_EQ(j["alerts"][1]["labels"]["node"], "n2");
}

TEST(WebhookTest, GroupKeyQuotesLikeGo) {
  WebhookOptions options;
  options.group_by = {"alertname", "node"};
  Alert a = MakeAlert("rack \"7\"\\n", "0", AlertState::kFiring);
  auto j = nlohmann::json::parse(RenderWebhook({a}, options));
  EXPECT_EQ(j["groupKey"], "{}:{alertname=\"GpuXidError\", node=\"rack \\\"7\\\"\\\\n\"}");
  options.group_by = {};
  options.route_key = "{}/{severity=\"critical\"}";
  j = nlohmann::json::parse(RenderWebhook({a}, options));
  EXPECT_EQ(j["groupKey"], "{}/{severity=\"critical\"}:{}");
  EXPECT_TRUE(j["groupLabels"].empty());
}

TEST(WebhookTest, InvalidUtf8DoesNotThrow) {
  Alert a = MakeAlert("n\xff", "0", AlertState::kFiring);
  const std::string body = RenderWebhook({a}, WebhookOptions{});
  auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["alerts"][0]["labels"]["node"], "n\xEF\xBF\xBD");  // U+FFFD
}

TEST(WebhookTest, GeneratorUrlEncodesTheRuleName) {
  WebhookOptions options;
  options.generator_url_prefix = "http://h/r/";
  Alert a = MakeAlert("n1", "0", AlertState::kFiring);
  a.rule = "Disk full/ckpt";
  auto j = nlohmann::json::parse(RenderWebhook({a}, options));
  EXPECT_EQ(j["alerts"][0]["generatorURL"], "http://h/r/Disk%20full%2Fckpt");
}

TEST(WebhookTest, GroupAlertsSplitsByLabelsAndSkipsPending) {
  Alert a = MakeAlert("n1", "0", AlertState::kFiring);
  Alert b = MakeAlert("n2", "0", AlertState::kResolved);
  Alert c = MakeAlert("n1", "1", AlertState::kPending);
  Alert d = MakeAlert("n1", "2", AlertState::kFiring);
  d.labels["alertname"] = "GpuTooHot";
  auto groups = GroupAlerts({a, b, c, d}, {"alertname"});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].size(), 1u);  // GpuTooHot sorts first
  EXPECT_EQ(groups[0][0].labels.at("alertname"), "GpuTooHot");
  EXPECT_EQ(groups[1].size(), 2u);
  groups = GroupAlerts({a, b, c, d}, {"node"});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].size(), 2u);  // n1: a and d
  EXPECT_EQ(groups[1].size(), 1u);
}

TEST(WebhookTest, FormatRfc3339) {
  EXPECT_EQ(FormatRfc3339(At(0)), "2026-11-29T09:00:00Z");
  EXPECT_EQ(FormatRfc3339(At(0) + milliseconds(123)), "2026-11-29T09:00:00.123Z");
  EXPECT_EQ(FormatRfc3339(At(0) + milliseconds(120)), "2026-11-29T09:00:00.12Z");
  EXPECT_EQ(FormatRfc3339(At(0) + milliseconds(5)), "2026-11-29T09:00:00.005Z");
  EXPECT_EQ(FormatRfc3339(Timestamp{}), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(Timestamp{} - milliseconds(1)), "1969-12-31T23:59:59.999Z");
}

}  // namespace
}  // namespace trainyard::monitor
