#include "track/ingest.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trainyard::track {
namespace {

using json = nlohmann::json;

TEST(IngestTest, MetricsFileRecordsBecomePointsAndParams) {
  json records = json::parse(R"([
    {"kind":"params","time_ms":1,"params":{"lr":0.0003,"optim.name":"adamw","amp":true,"x":null}},
    {"kind":"metrics","step":1,"time_ms":10,"metrics":{"loss":2.5,"lr":0.0003}},
    {"kind":"metrics","step":2,"time_ms":20,"metrics":{"loss":"NaN"}},
    {"kind":"checkpoint","time_ms":30,"path":"/c/1","step":2,"duration_ms":1500,"bytes":100},
    {"kind":"metrics","step":3,"time_ms":30,"metrics":{"bad key":1}},
    {"kind":"metrics","step":-1,"time_ms":30,"metrics":{"loss":1}},
    {"kind":"profile"}, 7, {"no":"kind"}
  ])");
  IngestBatch b = DecodeRecords(9, 2, records);
  EXPECT_EQ(b.params.at("lr"), "0.0003");
  EXPECT_EQ(b.params.at("optim.name"), "adamw");
  EXPECT_EQ(b.params.at("amp"), "true");
  EXPECT_EQ(b.params.at("x"), "null");
  EXPECT_EQ(b.skipped, 4);  // bad key, negative step, a number, no kind
  ASSERT_EQ(b.appends.size(), 4u);
  EXPECT_EQ(b.appends[0].key, "loss");
  EXPECT_EQ(b.appends[0].rank, 2);
  EXPECT_EQ(b.appends[0].run, 9);
  ASSERT_EQ(b.appends[0].points.size(), 2u);
  EXPECT_TRUE(std::isnan(b.appends[0].points[1].value));
  EXPECT_EQ(b.appends[2].key, "checkpoint/write_s");
  EXPECT_EQ(b.appends[2].points[0].value, 1.5);
  EXPECT_EQ(b.appends[3].key, "checkpoint/bytes");
  EXPECT_EQ(b.points, 5);
}

TEST(IngestTest, JsonBatchIsColumnar) {
  auto b = ParseBatchJson(3, R"({"rank":1,"series":[
      {"key":"loss","steps":[1,2,3],"values":[3,2.5,"Infinity"],"times_ms":[5,6,7]},
      {"key":"lr","steps":[1],"values":[0.1]}],"params":{"seed":7}})",
                          1000);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->appends.size(), 2u);
  EXPECT_EQ(b->appends[0].points[2].value, INFINITY);
  EXPECT_EQ(b->appends[0].points[2].time_ms, 7);
  EXPECT_EQ(b->appends[1].points[0].time_ms, 1000);  // time of arrival
  EXPECT_EQ(b->appends[1].rank, 1);
  EXPECT_EQ(b->params.at("seed"), "7");
}

TEST(IngestTest, JsonBatchErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* want;
  } cases[] = {
      {"[]", "must be a JSON object"},
      {"{\"rank\":-1}", "metrics.rank: must be an integer 0..1000000, got -1"},
      {"{\"series\":{}}", "metrics.series: must be a list"},
      {"{\"series\":[{\"key\":\"a b\",\"steps\":[],\"values\":[]}]}", "metrics.series[0].key"},
      {"{\"series\":[{\"key\":\"a\",\"steps\":[1],\"values\":[]}]}", "lists of the same length"},
      {"{\"series\":[{\"key\":\"a\",\"steps\":[1.5],\"values\":[1]}]}",
       "metrics.series[0].steps[0]: must be an integer >= 0, got \"1.5\""},
      {"{\"series\":[{\"key\":\"a\",\"steps\":[1],\"values\":[\"x\"]}]}",
       "metrics.series[0].values[0]: must be a number"},
      {"{\"series\":[{\"key\":\"a\",\"steps\":[1],\"values\":[1],\"times_ms\":[\"t\"]}]}",
       "metrics.series[0].times_ms[0]"},
      {"{\"params\":{\"a\":[1]}}", "metrics.params.a: must be a string, number, boolean or null"},
  };
  for (const Case& c : cases) {
    auto b = ParseBatchJson(1, c.body, 0);
    ASSERT_FALSE(b.ok()) << c.body;
    EXPECT_NE(b.status().message().find(c.want), std::string::npos) << b.status().message();
  }
}

TEST(IngestTest, TextBatchIsOnePointALine) {
  auto b =
      ParseBatchText(1, 0, "# comment\nloss 1 2.5 100\n\n  loss 2 nan\r\ngrad_norm 2 1e3 5\n", 77);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->appends.size(), 2u);
  EXPECT_EQ(b->appends[0].points[0].time_ms, 100);
  EXPECT_TRUE(std::isnan(b->appends[0].points[1].value));
  EXPECT_EQ(b->appends[0].points[1].time_ms, 77);
  EXPECT_EQ(b->appends[1].points[0].value, 1000);
  EXPECT_EQ(b->points, 3);
}

TEST(IngestTest, TextBatchErrorsNameTheLine) {
  struct Case {
    const char* body;
    const char* want;
  } cases[] = {
      {"loss 1\n", "metrics line 1: expected \"<key> <step> <value> [<time_ms>]\""},
      {"ok 1 1\nlo$s 1 1\n", "metrics line 2: key \"lo$s\""},
      {"loss -1 1\n", "step must be an integer >= 0, got \"-1\""},
      {"loss 1 abc\n", "value must be a number, nan, inf or -inf, got \"abc\""},
      {"loss 1 1 12:00\n", "time_ms must be integer milliseconds"},
      {"loss 1 1 2 3\n", "expected"},
  };
  for (const Case& c : cases) {
    auto b = ParseBatchText(1, 0, c.body, 0);
    ASSERT_FALSE(b.ok()) << c.body;
    EXPECT_NE(b.status().message().find(c.want), std::string::npos) << b.status().message();
  }
}

TEST(IngestTest, KeysPerBatchAreBounded) {
  std::string body;
  for (size_t i = 0; i <= kMaxKeysPerBatch; ++i) body += "k" + std::to_string(i) + " 1 1\n";
  auto b = ParseBatchText(1, 0, body, 0);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("at most 1000 different keys"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::track
