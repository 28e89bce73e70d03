#include "core/yaml_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string> Messages(YamlFieldReader& r) {
  std::vector<std::string> out;
  for (const Diagnostic& d : r.errors()) out.push_back(d.ToString());
  return out;
}

// The value of `key` in a one-line document "key: text" (line 1).
YAML::Node Value(const std::string& text) { return YAML::Load("v: " + text)["v"]; }

TEST(KindNameTest, NamesEachKindOfNode) {
  EXPECT_EQ(KindName(YAML::Load("{a: 1}")), "a map");
  EXPECT_EQ(KindName(YAML::Load("[1, 2]")), "a list");
  EXPECT_EQ(KindName(YAML::Load("~")), "nothing");
  EXPECT_EQ(KindName(YAML::Load("two")), "\"two\"");
}

TEST(JoinNamesTest, JoinsWithCommasAndAnOptionalLastSeparator) {
  EXPECT_EQ(JoinNames({}), "");
  EXPECT_EQ(JoinNames({"a"}), "a");
  EXPECT_EQ(JoinNames({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(JoinNames({"a", "b", "c"}, " or "), "a, b or c");
}

TEST(YamlFieldReaderTest, ForEachFieldPassesKnownFieldsInOrder) {
  YamlFieldReader r("f.yaml");
  std::vector<std::string> seen;
  r.ForEachField(
      YAML::Load("b: 1\na: 2\nc:\n"), "top", {"a", "b", "c"},
      [&](const std::string& key, const YAML::Node& v) { seen.push_back(key + "=" + v.Scalar()); });
  // c has no value: as if not given.
  EXPECT_THAT(seen, ElementsAre("b=1", "a=2"));
  EXPECT_THAT(r.errors(), IsEmpty());
}

TEST(YamlFieldReaderTest, UnknownFieldGetsTheClosestNameOrTheValidOnes) {
  YamlFieldReader r("f.yaml");
  auto none = [](const std::string&, const YAML::Node&) {};
  r.ForEachField(YAML::Load("replicsa: 2\nzzzzzz: 1\n"), "", {"replicas", "name"}, none);
  r.ForEachField(YAML::Load("zzzzzz: 1\n"), "retry", {"max", "backoff"}, none);
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:1: replicsa: unknown field; did you mean replicas?",
                                       "f.yaml:2: zzzzzz: unknown field; valid fields are "
                                       "replicas, name",
                                       "f.yaml:1: retry.zzzzzz: unknown field; valid fields of "
                                       "retry are max, backoff"));
}

TEST(YamlFieldReaderTest, RepeatedAndNonWordKeysAreErrors) {
  YamlFieldReader r("f.yaml");
  int calls = 0;
  r.ForEachField(YAML::Load("a: 1\na: 2\n[x]: 3\n"), "", {"a"},
                 [&](const std::string&, const YAML::Node&) { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:2: a: appears more than once; give each field once",
                                       "f.yaml:3: field names must be plain words, got a list"));
}

TEST(YamlFieldReaderTest, IgnoredKeysAreSkippedSilently) {
  YamlFieldReader r("f.yaml");
  int calls = 0;
  r.ForEachField(YAML::Load("a: 1\njobs: 2\n"), "", {"a"},
                 [&](const std::string&, const YAML::Node&) { ++calls; }, {"jobs"});
  EXPECT_EQ(calls, 1);
  EXPECT_THAT(r.errors(), IsEmpty());
}

TEST(YamlFieldReaderTest, LineOfFindsAFieldOrItsClosestEnclosingOne) {
  YamlFieldReader r("f.yaml");
  auto none = [](const std::string&, const YAML::Node&) {};
  r.ForEachField(YAML::Load("a: 1\nenv: {X: y}\n"), "", {"a", "env"}, none);
  std::map<std::string, std::string> env;
  r.StringMap(YAML::Load("a: 1\nenv: {X: y}\n")["env"], "env", env);
  EXPECT_EQ(r.LineOf("a"), 1);
  EXPECT_EQ(r.LineOf("env.X"), 2);
  EXPECT_EQ(r.LineOf("a.b[3]"), 1);
  EXPECT_EQ(r.LineOf("missing"), 0);
}

TEST(YamlFieldReaderTest, ScalarReadersWordTheirErrorsUniformly) {
  YamlFieldReader r("f.yaml");
  std::string s;
  bool b = false;
  Duration d{0};
  int64_t n = 0;
  EXPECT_FALSE(r.String(Value("[a]"), "s", s));
  EXPECT_FALSE(r.Bool(Value("maybe"), "b", b));
  EXPECT_FALSE(r.DurationField(Value("{}"), "d", d));
  EXPECT_FALSE(r.MemoryField(Value("[]"), "m", n));
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:1: s: must be a string, got a list",
                                       "f.yaml:1: b: must be true or false, got \"maybe\"",
                                       "f.yaml:1: d: must be a duration such as \"30m\", got a map",
                                       "f.yaml:1: m: must be a memory size such as \"256Gi\", "
                                       "got a list"));
  EXPECT_TRUE(r.String(Value("x"), "s", s));
  EXPECT_EQ(s, "x");
  EXPECT_TRUE(r.Bool(Value("yes"), "b", b));
  EXPECT_TRUE(b);
  EXPECT_TRUE(r.DurationField(Value("90s"), "d", d));
  EXPECT_EQ(d, std::chrono::seconds(90));
  EXPECT_TRUE(r.MemoryField(Value("1Gi"), "m", n));
  EXPECT_EQ(n, kGiB);
}

TEST(YamlFieldReaderTest, IntSaysWhichBoundIsCrossed) {
  YamlFieldReader r("f.yaml");
  int64_t n = 7;
  EXPECT_FALSE(r.Int(Value("two"), "n", 1, 10, n));
  EXPECT_FALSE(r.Int(Value("2.5"), "n", 1, 10, n));
  EXPECT_FALSE(r.Int(Value("0"), "n", 1, 10, n));
  EXPECT_FALSE(r.Int(Value("11"), "n", 1, 10, n));
  EXPECT_FALSE(r.Int(Value("99999999999999999999"), "n", 1, 10, n));
  EXPECT_FALSE(r.Int(Value("-99999999999999999999"), "n", 1, 10, n));
  EXPECT_EQ(n, 7);
  EXPECT_THAT(Messages(r),
              ElementsAre("f.yaml:1: n: must be an integer, got \"two\"",
                          "f.yaml:1: n: must be an integer, got \"2.5\"",
                          "f.yaml:1: n: must be >= 1, got 0", "f.yaml:1: n: must be <= 10, got 11",
                          "f.yaml:1: n: must be <= 10, got \"99999999999999999999\"",
                          "f.yaml:1: n: must be >= 1, got \"-99999999999999999999\""));
  EXPECT_TRUE(r.Int(Value("10"), "n", 1, 10, n));
  EXPECT_EQ(n, 10);
}

TEST(YamlFieldReaderTest, IntCanSayBetweenWithItsOwnNoun) {
  YamlFieldReader r("f.yaml");
  const IntWording whole{"a whole number", true};
  int n = 0;
  EXPECT_FALSE(r.IntAs(Value("lots"), "n", 0, 5, n, whole));
  EXPECT_FALSE(r.IntAs(Value("-1"), "n", 0, 5, n, whole));
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:1: n: must be a whole number, got \"lots\"",
                                       "f.yaml:1: n: must be between 0 and 5, got -1"));
  EXPECT_TRUE(r.IntAs(Value("5"), "n", 0, 5, n, whole));
  EXPECT_EQ(n, 5);
}

TEST(YamlFieldReaderTest, CpusReadsCoresOrMillicores) {
  YamlFieldReader r("f.yaml");
  int64_t milli = 0;
  EXPECT_TRUE(r.CpusField(Value("8"), "c", milli));
  EXPECT_EQ(milli, 8000);
  EXPECT_TRUE(r.CpusField(Value("0.5"), "c", milli));
  EXPECT_EQ(milli, 500);
  EXPECT_TRUE(r.CpusField(Value("250m"), "c", milli));
  EXPECT_EQ(milli, 250);
  EXPECT_THAT(r.errors(), IsEmpty());

  EXPECT_FALSE(r.CpusField(Value("lots"), "c", milli));
  EXPECT_FALSE(r.CpusField(Value("5000000"), "c", milli, 4'096'000));
  EXPECT_TRUE(r.CpusField(Value("5000000"), "c", milli));  // the limit is the caller's
  EXPECT_FALSE(r.CpusField(Value("1e12"), "c", milli));
  EXPECT_THAT(
      Messages(r),
      ElementsAre("f.yaml:1: c: must be a number of CPUs such as 8, 0.5 or \"500m\", got \"lots\"",
                  "f.yaml:1: c: must be a number of CPUs such as 8, 0.5 or \"500m\", got "
                  "\"5000000\"",
                  "f.yaml:1: c: must be <= 4096, got 1e12"));
}

TEST(YamlFieldReaderTest, ChoiceHintsTheClosestValue) {
  YamlFieldReader r("f.yaml");
  std::string out;
  EXPECT_TRUE(r.Choice(Value("soft"), "mode", {"hard", "soft"}, out));
  EXPECT_EQ(out, "soft");
  EXPECT_FALSE(r.Choice(Value("sotf"), "mode", {"hard", "soft"}, out));
  EXPECT_EQ(r.ChoiceIndex(Value("warning"), "s", {"info", "warning", "critical"}, " or "), 1u);
  EXPECT_FALSE(r.ChoiceIndex(Value("[x]"), "s", {"info", "warning", "critical"}, " or "));
  EXPECT_THAT(Messages(r),
              ElementsAre("f.yaml:1: mode: must be one of hard, soft, got \"sotf\"; did you mean "
                          "soft?",
                          "f.yaml:1: s: must be one of info, warning or critical, got a list"));
}

TEST(YamlFieldReaderTest, ListAndMapNameWhatTheyGot) {
  YamlFieldReader r("f.yaml");
  EXPECT_TRUE(r.List(Value("[1]"), "l"));
  EXPECT_FALSE(r.List(Value("x"), "l"));
  EXPECT_TRUE(r.Map(Value("{a: 1}"), "m", {"a", "b"}));
  EXPECT_FALSE(r.Map(Value("[1]"), "m", {"a", "b"}));
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:1: l: must be a list, got \"x\"",
                                       "f.yaml:1: m: must be a map with fields a, b, got a list"));
}

TEST(YamlFieldReaderTest, StringMapReadsNamesToStrings) {
  YamlFieldReader r("f.yaml");
  std::map<std::string, std::string> out;
  r.StringMap(YAML::Load("{A: x, B: , C: [1], D: y, bad: z}"), "env", out, "names",
              [&](const YAML::Node& key, const std::string& path) {
                if (key.Scalar() != "bad") return true;
                r.Error(key, path, "is refused");
                return false;
              });
  r.StringMap(YAML::Load("{A: again, [k]: v}"), "env", out, "names");
  r.StringMap(Value("[x]"), "env", out);
  EXPECT_EQ(out, (std::map<std::string, std::string>{{"A", "x"}, {"B", ""}, {"D", "y"}}));
  EXPECT_THAT(Messages(r), ElementsAre("f.yaml:1: env.C: must be a string, got a list",
                                       "f.yaml:1: env.bad: is refused",
                                       "f.yaml:1: env.A: appears more than once",
                                       "f.yaml:1: env: keys must be names, got a list",
                                       "f.yaml:1: env: must be a map of names to strings, got a "
                                       "list"));
}

TEST(YamlFieldReaderTest, OddKeysAreQuotedInFieldPaths) {
  YAML::Node n = YAML::Load("{\"a\\x01\\nb\": 1, name: x}");
  YamlFieldReader r("t.yaml");
  r.ForEachField(n, "rule", {"name"}, [](const std::string&, const YAML::Node&) {});
  ASSERT_EQ(r.errors().size(), 1u);
  const std::string msg = r.errors()[0].ToString();
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find("rule.\"a\\x01\\x0ab\""), std::string::npos) << msg;
}

}  // namespace
}  // namespace trainyard
