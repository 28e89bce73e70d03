#include "server/prometheus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "server/metrics_page.h"

namespace trainyard::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<ParsedFamily> MustParse(std::string_view text) {
  auto r = ParseExposition(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString() << "\n" << text;
  return r.ok() ? *r : std::vector<ParsedFamily>{};
}

TEST(PrometheusTest, RendersExactText) {
  Exposition e;
  e.Family("trainyard_nodes", "Nodes by state.", MetricType::kGauge);
  e.Sample({{"state", "Ready"}}, 3);
  e.Sample({{"state", "Down"}}, 0);
  e.Family("trainyard_preemptions_total", "Jobs preempted, by queue.", MetricType::kCounter);
  e.Sample({{"tenant", "vision"}, {"queue", "train"}}, 2);
  e.Family("trainyard_build", "", MetricType::kUntyped);
  e.Sample({}, 1.5);
  EXPECT_EQ(e.Text(),
            "# HELP trainyard_nodes Nodes by state.\n"
            "# TYPE trainyard_nodes gauge\n"
            "trainyard_nodes{state=\"Ready\"} 3\n"
            "trainyard_nodes{state=\"Down\"} 0\n"
            "# HELP trainyard_preemptions_total Jobs preempted, by queue.\n"
            "# TYPE trainyard_preemptions_total counter\n"
            "trainyard_preemptions_total{tenant=\"vision\",queue=\"train\"} 2\n"
            "# HELP trainyard_build\n"
            "# TYPE trainyard_build untyped\n"
            "trainyard_build 1.5\n");

  auto families = MustParse(e.Text());
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].name, "trainyard_nodes");
  EXPECT_EQ(families[0].help, "Nodes by state.");
  EXPECT_EQ(families[0].type, MetricType::kGauge);
  ASSERT_EQ(families[0].samples.size(), 2u);
  EXPECT_EQ(families[0].samples[1].Label("state"), "Down");
  EXPECT_EQ(families[0].samples[1].line, 4);
  EXPECT_EQ(families[1].type, MetricType::kCounter);
  EXPECT_THAT(families[1].samples[0].labels,
              ElementsAre(Pair("tenant", "vision"), Pair("queue", "train")));
  EXPECT_EQ(families[2].help, "");
  EXPECT_EQ(families[2].type, MetricType::kUntyped);
  EXPECT_EQ(families[2].samples[0].value, 1.5);
  EXPECT_EQ(FindFamily(families, "trainyard_build"), &families[2]);
  EXPECT_EQ(FindFamily(families, "nope"), nullptr);
}

TEST(PrometheusTest, EmptyExpositionIsEmptyText) {
  EXPECT_EQ(Exposition().Text(), "");
  EXPECT_TRUE(MustParse("").empty());
}

TEST(PrometheusTest, EscapesHelpAndLabelValues) {
  EXPECT_EQ(EscapeHelp("a\\b\nc \"q\""), "a\\\\b\\nc \"q\"");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc \"q\""), "a\\\\b\\nc \\\"q\\\"");
  Exposition e;
  e.Family("m", "back\\slash\nnew line", MetricType::kGauge);
  e.Sample({{"path", "C:\\tmp\\\"x\"\n"}}, 1);
  EXPECT_EQ(e.Text(),
            "# HELP m back\\\\slash\\nnew line\n"
            "# TYPE m gauge\n"
            "m{path=\"C:\\\\tmp\\\\\\\"x\\\"\\n\"} 1\n");
  auto families = MustParse(e.Text());
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].help, "back\\slash\nnew line");
  EXPECT_EQ(families[0].samples[0].Label("path"), "C:\\tmp\\\"x\"\n");
}

TEST(PrometheusTest, LabelValuesRoundTrip) {
  const std::vector<std::string> values = {
      "",           "plain",        "with space", "quote\"inside", "back\\slash",
      "trailing\\", "new\nline",    "\\n",        "\\\"",          "{a=\"b\"},",
      "#HELP",      "日本語 ü ∑ 😀", "tab\there",  "a,b=c}",        "\"",
  };
  Exposition e;
  e.Family("trainyard_job_loss", "Loss. Ünïcödé help: ∂L/∂θ", MetricType::kGauge);
  for (size_t i = 0; i < values.size(); ++i) {
    e.Sample({{"i", std::to_string(i)}, {"name", values[i]}}, static_cast<double>(i));
  }
  auto families = MustParse(e.Text());
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].help, "Loss. Ünïcödé help: ∂L/∂θ");
  ASSERT_EQ(families[0].samples.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(families[0].samples[i].Label("name"), values[i]) << i;
  }
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

RC_GTEST_PROP(PrometheusTest, AnyLabelValueAndHelpRoundTrip, ()) {
  const auto code_points = *rc::gen::container<std::vector<uint32_t>>(rc::gen::oneOf(
      rc::gen::elementOf(
          std::vector<uint32_t>{'\\', '"', '\n', '\t', ' ', '{', '}', ',', '=', '#', 'n'}),
      rc::gen::inRange<uint32_t>(0x20, 0x7F), rc::gen::inRange<uint32_t>(0xA0, 0xD7FF),
      rc::gen::inRange<uint32_t>(0x10000, 0x10FFFF)));
  std::string text;
  for (uint32_t cp : code_points) text += Utf8(cp);
  Exposition e;
  e.Family("m", text, MetricType::kGauge);
  e.Sample({{"v", text}}, 1);
  auto r = ParseExposition(e.Text());
  RC_ASSERT(r.ok());
  RC_ASSERT(r->size() == 1u);
  RC_ASSERT((*r)[0].help == text);
  RC_ASSERT((*r)[0].samples[0].Label("v") == text);
}

TEST(PrometheusTest, FormatsValuesAsPrometheusSpellsThem) {
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatMetricValue(kInf), "+Inf");
  EXPECT_EQ(FormatMetricValue(-kInf), "-Inf");
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
}

TEST(PrometheusTest, SpecialValuesRoundTrip) {
  Exposition e;
  e.Family("m", "h", MetricType::kGauge);
  const std::vector<double> values = {std::nan(""),
                                      kInf,
                                      -kInf,
                                      -0.0,
                                      0.1,
                                      1.0 / 3,
                                      std::numeric_limits<double>::max(),
                                      std::numeric_limits<double>::denorm_min(),
                                      std::numeric_limits<double>::lowest(),
                                      9007199254740993.0};
  for (size_t i = 0; i < values.size(); ++i) e.Sample({{"i", std::to_string(i)}}, values[i]);
  EXPECT_THAT(e.Text(), HasSubstr("m{i=\"0\"} NaN\nm{i=\"1\"} +Inf\nm{i=\"2\"} -Inf\n"));
  auto families = MustParse(e.Text());
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].samples.size(), values.size());
  EXPECT_TRUE(std::isnan(families[0].samples[0].value));
  for (size_t i = 1; i < values.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(families[0].samples[i].value),
              std::bit_cast<uint64_t>(values[i]))
        << FormatMetricValue(values[i]);
  }
}

RC_GTEST_PROP(PrometheusTest, AnyDoubleRoundTripsExactly, (uint64_t bits)) {
  const double v = std::bit_cast<double>(bits);
  Exposition e;
  e.Family("m", "h", MetricType::kUntyped);
  e.Sample({}, v);
  auto r = ParseExposition(e.Text());
  RC_ASSERT(r.ok());
  const double back = (*r)[0].samples[0].value;
  if (std::isnan(v)) {
    RC_ASSERT(std::isnan(back));
  } else {
    RC_ASSERT(std::bit_cast<uint64_t>(back) == bits);
  }
}

TEST(PrometheusTest, ParsesOtherSpellingsOfValues) {
  auto families = MustParse(
      "m{i=\"1\"} Inf\nm{i=\"2\"} -infinity\nm{i=\"3\"} nan\nm{i=\"4\"} +1.5E3\nm{i=\"5\"} .5\n"
      "m{i=\"6\"} -0\n");
  ASSERT_EQ(families.size(), 1u);
  const auto& s = families[0].samples;
  EXPECT_EQ(s[0].value, kInf);
  EXPECT_EQ(s[1].value, -kInf);
  EXPECT_TRUE(std::isnan(s[2].value));
  EXPECT_EQ(s[3].value, 1500);
  EXPECT_EQ(s[4].value, 0.5);
  EXPECT_TRUE(std::signbit(s[5].value));
}

TEST(PrometheusTest, HistogramObserveUsesLessOrEqualBuckets) {
  HistogramValue h = HistogramValue::WithBounds({0.25, 1, 2});
  EXPECT_THAT(h.counts, ElementsAre(0, 0, 0, 0));
  h.Observe(0.25);  // on a bound: that bound's bucket
  h.Observe(0.5);
  h.Observe(1);
  h.Observe(4);  // above every bound: +Inf
  h.Observe(-3);
  EXPECT_THAT(h.counts, ElementsAre(2, 2, 0, 1));
  EXPECT_EQ(h.sum, 2.75);
  EXPECT_EQ(h.Count(), 5u);
  h.Observe(std::nan(""));
  EXPECT_THAT(h.counts, ElementsAre(2, 2, 0, 2));
  EXPECT_TRUE(std::isnan(h.sum));
}

TEST(PrometheusTest, RendersAndParsesHistograms) {
  HistogramValue h = HistogramValue::WithBounds({0.25, 1, 2});
  for (double v : {0.25, 0.5, 1.0, 4.0}) h.Observe(v);
  Exposition e;
  e.Family("trainyard_scheduling_pass_duration_seconds", "Time of one scheduling pass.",
           MetricType::kHistogram);
  e.Histogram({}, h);
  e.Histogram({{"policy", "binpack"}}, HistogramValue::WithBounds({0.25, 1, 2}));
  const std::string text = e.Text();
  EXPECT_EQ(text,
            "# HELP trainyard_scheduling_pass_duration_seconds Time of one scheduling pass.\n"
            "# TYPE trainyard_scheduling_pass_duration_seconds histogram\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{le=\"0.25\"} 1\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{le=\"1\"} 3\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{le=\"2\"} 3\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{le=\"+Inf\"} 4\n"
            "trainyard_scheduling_pass_duration_seconds_sum 5.75\n"
            "trainyard_scheduling_pass_duration_seconds_count 4\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{policy=\"binpack\",le=\"0.25\"} 0\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{policy=\"binpack\",le=\"1\"} 0\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{policy=\"binpack\",le=\"2\"} 0\n"
            "trainyard_scheduling_pass_duration_seconds_bucket{policy=\"binpack\",le=\"+Inf\"} 0\n"
            "trainyard_scheduling_pass_duration_seconds_sum{policy=\"binpack\"} 0\n"
            "trainyard_scheduling_pass_duration_seconds_count{policy=\"binpack\"} 0\n");
  auto families = MustParse(text);
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].type, MetricType::kHistogram);
  ASSERT_EQ(families[0].samples.size(), 12u);
  EXPECT_EQ(families[0].samples[3].name, "trainyard_scheduling_pass_duration_seconds_bucket");
  EXPECT_EQ(families[0].samples[3].Label("le"), "+Inf");
  EXPECT_EQ(families[0].samples[3].value, 4);
  EXPECT_EQ(families[0].samples[4].name, "trainyard_scheduling_pass_duration_seconds_sum");
  EXPECT_EQ(families[0].samples[4].value, 5.75);
}

TEST(PrometheusTest, HistogramWithoutBoundsHasOnlyTheInfBucket) {
  HistogramValue h = HistogramValue::WithBounds({});
  h.Observe(7);
  Exposition e;
  e.Family("h", "x", MetricType::kHistogram);
  e.Histogram({}, h);
  EXPECT_EQ(e.Text(),
            "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 7\nh_count 1\n");
  MustParse(e.Text());
}

TEST(PrometheusTest, ParserAcceptsCommentsBlankLinesTimestampsAndUntypedSamples) {
  auto families = MustParse(
      "# a comment\n"
      "\n"
      "# HELP g A gauge.\n"
      "#   another comment, between HELP and TYPE\n"
      "# TYPE g gauge\n"
      "g{a=\"1\",} 5 1700000000000\n"
      "g { a = \"2\" , b=\"x\" }\t6\t-12\n"
      "loose_metric 1\n"
      "# HELP only_help has no TYPE\n"
      "only_help 2\n");
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].samples[0].timestamp_ms, 1700000000000);
  EXPECT_EQ(families[0].samples[1].timestamp_ms, -12);
  EXPECT_THAT(families[0].samples[1].labels, ElementsAre(Pair("a", "2"), Pair("b", "x")));
  EXPECT_EQ(families[1].name, "loose_metric");
  EXPECT_EQ(families[1].type, MetricType::kUntyped);
  EXPECT_EQ(families[2].help, "has no TYPE");
  EXPECT_EQ(families[2].type, MetricType::kUntyped);
}

TEST(PrometheusTest, ParserAcceptsGaugeNamesEndingLikeHistogramSamples) {
  // Without a histogram `x`, a family may well be called x_count.
  auto families = MustParse("# TYPE jobs_count gauge\njobs_count 3\n");
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "jobs_count");
}

struct Invalid {
  std::string what;
  std::string text;
  int line;
  std::string message;  // a part of the message after "line N: "
};

void PrintTo(const Invalid& c, std::ostream* os) { *os << c.what; }

class ParserRejectsTest : public ::testing::TestWithParam<Invalid> {};

TEST_P(ParserRejectsTest, NamesLineAndProblem) {
  const Invalid& c = GetParam();
  auto r = ParseExposition(c.text);
  ASSERT_FALSE(r.ok()) << c.what;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), StartsWith("line " + std::to_string(c.line) + ": "))
      << r.status().message();
  EXPECT_THAT(r.status().message(), HasSubstr(c.message));
}

const std::string kHistHead = "# HELP h d\n# TYPE h histogram\n";

INSTANTIATE_TEST_SUITE_P(
    PrometheusTest, ParserRejectsTest,
    ::testing::Values(
        // Line syntax.
        Invalid{"NoFinalLineFeed", "a 1\nb 2", 2, "does not end with a line feed"},
        Invalid{"CarriageReturn", "a 1\r\n", 1, "carriage return"},
        Invalid{"NameStartsWithDigit", "a 1\n1abc 2\n", 2, "invalid metric name \"1abc\""},
        Invalid{"NotAName", "-x 1\n", 1, "expected a metric name or '#', got '-'"},
        Invalid{"BadCharacterInName", "a-b 1\n", 1, "unexpected '-' before the value of a"},
        Invalid{"MissingValue", "a\n", 1, "sample a has no value"},
        Invalid{"MissingValueAfterLabels", "a{x=\"1\"}\n", 1, "sample a has no value"},
        Invalid{"BadValue", "a 1.2.3\n", 1, "value \"1.2.3\" of a is not a number"},
        Invalid{"HexValue", "a 0x10\n", 1, "is not a number"},
        Invalid{"SignedNaN", "a -NaN\n", 1, "is not a number"},
        Invalid{"OutOfRangeValue", "a 1e999\n", 1, "is not a number"},
        Invalid{"BadTimestamp", "a 1 12.5\n", 1, "timestamp \"12.5\" of a is not an integer"},
        Invalid{"TextAfterTimestamp", "a 1 2 3\n", 1, "unexpected text after the timestamp"},
        // Labels.
        Invalid{"UnclosedLabelValue", "a{x=\"1} 2\n", 1, "the value of label x is not closed"},
        Invalid{"UnclosedLabels", "a{x=\"1\" 2\n", 1, "expected ',' or '}'"},
        Invalid{"UnquotedLabelValue", "a{x=1} 2\n", 1, "expected '\"' to open the value"},
        Invalid{"MissingEquals", "a{x\"1\"} 2\n", 1, "expected '=' after label name x"},
        Invalid{"BadLabelEscape", "a{x=\"\\t\"} 2\n", 1, "invalid escape \\t in the value"},
        Invalid{"ReservedLabelName", "a{__name__=\"b\"} 2\n", 1, "__name__ starts with __"},
        Invalid{"LabelNameStartsWithDigit", "a{1x=\"b\"} 2\n", 1, "invalid label name \"1x\""},
        Invalid{"LabelNameWithColon", "a{x:y=\"b\"} 2\n", 1, "expected '=' after label name x"},
        Invalid{"EmptyLabelName", "a{=\"b\"} 2\n", 1, "expected a label name or '}'"},
        Invalid{"DuplicateLabel", "a{x=\"1\",x=\"2\"} 2\n", 1, "label x given twice"},
        Invalid{"LabelValueNotUtf8", "a{x=\"\xff\"} 2\n", 1, "not valid UTF-8"},
        Invalid{"LabelValueSurrogate", "a{x=\"\xed\xa0\x80\"} 2\n", 1, "not valid UTF-8"},
        // HELP and TYPE.
        Invalid{"BadHelpEscape", "# HELP a x\\y\n", 1, "invalid escape \\y in the HELP text"},
        Invalid{"HelpLoneBackslash", "# HELP a x\\\n", 1, "ends in a lone \\"},
        Invalid{"HelpNotUtf8", "# HELP a \xc3\n", 1, "not valid UTF-8"},
        Invalid{"HelpWithoutName", "# HELP\n", 1, "HELP line without a metric name"},
        Invalid{"TypeBadName", "# TYPE 9a gauge\n", 1, "invalid metric name \"9a\""},
        Invalid{"UnknownType", "# TYPE a gauges\n", 1, "unknown type \"gauges\" for a"},
        Invalid{"MissingType", "# TYPE a\n", 1, "unknown type \"\" for a"},
        Invalid{"TextAfterType", "# TYPE a gauge x\n", 1, "unexpected text after the type of a"},
        Invalid{"Summary", "# TYPE a summary\n", 1, "type summary of a is not supported"},
        Invalid{"SecondHelp", "# HELP a x\n# TYPE a gauge\n# HELP a y\n", 3,
                "second HELP line for a (the first is line 1)"},
        Invalid{"SecondType", "# TYPE a gauge\n# TYPE a counter\n", 2,
                "second TYPE line for a (the first is line 1)"},
        Invalid{"TypeAfterSamples", "# HELP a x\na 1\n# TYPE a gauge\n", 3,
                "TYPE line for a after its samples (the first is line 2)"},
        Invalid{"HelpAfterSamples", "a 1\n# HELP a x\n", 2,
                "HELP line for a after its samples (the first is line 1)"},
        Invalid{"FamilyNotContiguous", "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x=\"y\"} 2\n",
                5, "family a (begun at line 1) resumes after family b"},
        Invalid{"HelpOfEarlierFamily", "a 1\nb 1\n# HELP a late\n", 3, "resumes after family b"},
        Invalid{"DuplicateSeries", "a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 2\n", 2,
                "duplicate series a{x=\"1\",y=\"2\"} (first at line 1)"},
        Invalid{"DuplicateSeriesNoLabels", "# TYPE a counter\na 1\na 1\n", 3,
                "duplicate series a{}"},
        // Histograms.
        Invalid{"HistogramWithoutInfBucket",
                kHistHead + "h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", 3,
                "histogram h{} has no le=\"+Inf\" bucket"},
        Invalid{"HistogramOnlySumAndCount", kHistHead + "h_sum 1\nh_count 1\n", 3,
                "has no le=\"+Inf\" bucket"},
        Invalid{"HistogramNotCumulative",
                kHistHead + "h_bucket{le=\"1\"} 5\nh_bucket{le=\"2\"} 3\nh_bucket{le=\"+Inf\"} 5\n"
                            "h_sum 1\nh_count 5\n",
                4, "bucket le=\"2\" of h{} has count 3, less than the 5"},
        Invalid{"HistogramLeNotSorted",
                kHistHead + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                            "h_sum 1\nh_count 1\n",
                4, "le=\"1\" after le=\"2\""},
        Invalid{"HistogramLeRepeatedAsInf",
                kHistHead + "h_bucket{le=\"+Inf\"} 1\nh_bucket{le=\"Inf\"} 1\nh_sum 1\nh_count 1\n",
                4, "must be in increasing order of le"},
        Invalid{"HistogramLeNotANumber",
                kHistHead + "h_bucket{le=\"big\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                3, "le=\"big\" of h_bucket is not a number"},
        Invalid{"HistogramNegativeBucket",
                kHistHead + "h_bucket{le=\"+Inf\"} -1\nh_sum 1\nh_count -1\n", 3,
                "has count -1; counts are non-negative"},
        Invalid{"HistogramCountDiffers",
                kHistHead + "h_bucket{le=\"+Inf\"} 4\nh_sum 1\nh_count 5\n", 5,
                "h_count of h{} is 5 but its le=\"+Inf\" bucket is 4"},
        Invalid{"HistogramWithoutSum", kHistHead + "h_bucket{le=\"+Inf\"} 4\nh_count 4\n", 3,
                "histogram h{} has no h_sum"},
        Invalid{"HistogramWithoutCount", kHistHead + "h_bucket{le=\"+Inf\"} 4\nh_sum 4\n", 3,
                "histogram h{} has no h_count"},
        Invalid{"HistogramOneSeriesIncomplete",
                kHistHead +
                    "h_bucket{q=\"a\",le=\"+Inf\"} 1\nh_sum{q=\"a\"} 1\nh_count{q=\"a\"} 1\n"
                    "h_bucket{q=\"b\",le=\"+Inf\"} 1\nh_count{q=\"b\"} 1\n",
                6, "histogram h{q=\"b\"} has no h_sum"},
        Invalid{"HistogramIncompleteBeforeNextFamily",
                kHistHead + "h_bucket{le=\"+Inf\"} 1\nh_count 1\n# TYPE g gauge\ng 1\n", 3,
                "has no h_sum"},
        Invalid{"BucketWithoutLe", kHistHead + "h_bucket 1\n", 3, "h_bucket has no le label"},
        Invalid{"LeOnSum", kHistHead + "h_sum{le=\"1\"} 1\n", 3,
                "h_sum has an le label; only h_bucket samples do"},
        Invalid{"HistogramSampleWithoutSuffix", kHistHead + "h 1\n", 3,
                "must be h_bucket, h_sum or h_count"},
        Invalid{"FamilyCollidesWithHistogram", kHistHead + "# TYPE h_sum gauge\n", 3,
                "family h_sum collides with the samples of histogram h (line 1)"},
        Invalid{"HistogramCollidesWithFamily", "# TYPE h_count gauge\n# TYPE h histogram\n", 2,
                "histogram h would own the samples of family h_count (line 1)"}),
    [](const ::testing::TestParamInfo<Invalid>& info) { return info.param.what; });

// Misuse of the writer is a programming error.
TEST(PrometheusDeathTest, WriterRefusesMisuse) {
  EXPECT_DEATH(Exposition().Family("1bad", "h", MetricType::kGauge), "invalid metric name");
  EXPECT_DEATH(Exposition().Family("bad-name", "h", MetricType::kGauge), "invalid metric name");
  EXPECT_DEATH(Exposition().Sample({}, 1), "before any Family");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kGauge);
        e.Sample({{"__x", "1"}}, 1);
      },
      "invalid label name");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kGauge);
        e.Sample({{"x", "1"}, {"x", "2"}}, 1);
      },
      "given twice");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kGauge);
        e.Sample({{"x", "1"}, {"y", "2"}}, 1);
        e.Sample({{"y", "2"}, {"x", "1"}}, 1);
      },
      "added twice");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kGauge);
        e.Family("a", "h", MetricType::kGauge);
      },
      "used by two families");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kHistogram);
        e.Family("a_bucket", "h", MetricType::kGauge);
      },
      "used by two families");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kHistogram);
        e.Sample({}, 1);
      },
      "use Histogram");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kGauge);
        e.Histogram({}, HistogramValue::WithBounds({1}));
      },
      "not a histogram");
  EXPECT_DEATH(
      {
        Exposition e;
        e.Family("a", "h", MetricType::kHistogram);
        e.Histogram({{"le", "1"}}, HistogramValue::WithBounds({1}));
      },
      "bucket label");
  EXPECT_DEATH(HistogramValue::WithBounds({2, 1}), "must increase");
  EXPECT_DEATH(HistogramValue::WithBounds({1, kInf}), "must be finite");
}

TEST(PrometheusTest, NameValidation) {
  EXPECT_TRUE(IsValidMetricName("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(IsValidMetricName("job:loss:rate5m"));
  EXPECT_TRUE(IsValidMetricName("_x"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("0x"));
  EXPECT_FALSE(IsValidMetricName("a.b"));
  EXPECT_FALSE(IsValidMetricName("a b"));
  EXPECT_TRUE(IsValidLabelName("UUID"));
  EXPECT_TRUE(IsValidLabelName("_a"));
  EXPECT_FALSE(IsValidLabelName("__a"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("9"));
  EXPECT_FALSE(IsValidLabelName(""));
}

// ---------------------------------------------------------------------------------------
// The server's whole page (metrics_page.h) against Prometheus's own linter.

Gpu MakeGpu(int index) {
  Gpu g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  g.model = "H100";
  g.memory_bytes = int64_t{80} << 30;
  return g;
}

// A page on which every family the server renders has series: nodes in every state,
// GPUs with every telemetry field, queues, jobs with progress, passes, HTTP requests,
// alerts and the alerting counters.
MetricsPage FullPage() {
  MetricsPage page;
  page.now = Timestamp(std::chrono::hours(480'000));
  NodeView ready;
  ready.node.name = "node-0";
  ready.node.gpus = {MakeGpu(0), MakeGpu(1)};
  ready.last_heartbeat = page.now - std::chrono::seconds(3);
  ready.gpus_used = 1;
  ready.limits = "cgroup v1 at /sys/fs/cgroup/cpu/trainyard, /sys/fs/cgroup/memory/trainyard";
  const std::string v = "sha256:" + std::string(64, 'a');
  ready.links = {{"ib0", "ib", true, 3}, {"nvlink0", "nvlink", false, 12}};
  ready.disks = {{"/var/lib/trainyard", 5e11, 2e12}};
  ready.datasets = {{"imagenet", v, protocol::DatasetState::kReady, 1000, 1000, 0, "", 1},
                    {"coco", v, protocol::DatasetState::kStaging, 300, 900, 2.5e8, "", 0},
                    {"big", v, protocol::DatasetState::kFailed, 0, 9000, 0, "too large", 0}};
  for (int i = 0; i < 2; ++i) {
    ready.telemetry.push_back({.index = i,
                               .util_pct = 97,
                               .mem_used_mib = 70'000,
                               .temp_c = 71,
                               .power_w = 612.5,
                               .sm_clock_mhz = 1980,
                               .throttled = false,
                               .ecc_uncorrectable = 0,
                               .xid_last = i == 0 ? 79 : 0,
                               .xid_count = i == 0 ? 2 : 0});
  }
  NodeView down;
  down.node.name = "node-1";
  down.node.state = NodeState::kDown;
  down.node.gpus = {MakeGpu(0)};
  down.limits = "none: no cgroup v2 mount; no cgroup v1 cpu hierarchy";
  page.nodes = {ready, down};
  QueueView queue;
  queue.queue.name = "train";
  queue.queue.tenant = "vision";
  queue.queue.guaranteed_gpus = 8;
  queue.queue.limit_gpus = 16;
  queue.gpus_in_use = 10;
  queue.gpus_borrowed = 2;
  queue.pending_jobs = 3;
  page.queues = {queue};
  page.cluster.jobs[{"vision", "train", "Running"}] = 1;
  page.cluster.submitted[{"vision", "train"}] = 4;
  page.cluster.preemptions[{"vision", "train"}] = 1;
  page.cluster.lost_work_gpu_seconds[{"vision", "train"}] = 360;
  page.cluster.finished[{"vision", "train", "Succeeded"}] = 2;
  page.cluster.pass_bounds = {0.01, 0.1, 1};
  page.cluster.pass_counts = {5, 2, 1, 0};
  page.cluster.pass_seconds_sum = 0.4;
  page.jobs.push_back({.id = 7,
                       .name = "llama",
                       .tenant = "vision",
                       .queue = "train",
                       .attempts = 2,
                       .step = 1200,
                       .latest = {{"loss", 2.1},
                                  {"grad_norm", 0.8},
                                  {"lr", 3e-4},
                                  {"step_time_s", 1.5},
                                  {"tokens_per_s", 52'000},
                                  {"data_wait_s", 0.25}},
                       .mfu = 0.41,
                       .checkpoint_age_seconds = 600,
                       .checkpoint_write_seconds = 12.5});
  monitor::Alert alert;
  alert.rule = "GPUXidError";
  alert.labels = {
      {"alertname", "GPUXidError"}, {"severity", "critical"}, {"node", "node-0"}, {"gpu", "0"}};
  alert.state = monitor::AlertState::kFiring;
  page.alerts = {alert};
  AlertingStats stats;
  stats.evaluations = 10;
  stats.last_evaluation_seconds = 0.002;
  stats.webhook_sent = 1;
  stats.actions_done = 1;
  stats.signal_series = 12;
  stats.signal_samples = 700;
  page.alerting = stats;
  HttpMetrics http;
  http.Observe("GET", "/api/v1/jobs", 0.003);
  http.Observe("POST", "", 0.2);
  page.http = http.Snapshot();
  return page;
}

TEST(MetricsPageTest, AFullPageHasSeriesInEveryFamily) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  ASSERT_GE(families.size(), 30u);
  for (const ParsedFamily& f : families) {
    EXPECT_FALSE(f.samples.empty()) << f.name << " has no series on the full page";
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

TEST(MetricsPageTest, TaskLimitsSayWhichNodesLimitTheirTasks) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  const ParsedFamily* limits = FindFamily(families, "trainyard_node_task_limits");
  ASSERT_NE(limits, nullptr);
  ASSERT_EQ(limits->samples.size(), 2u);
  EXPECT_THAT(limits->samples[0].labels, ElementsAre(Pair("node", "node-0")));
  EXPECT_EQ(limits->samples[0].value, 1);
  EXPECT_THAT(limits->samples[1].labels, ElementsAre(Pair("node", "node-1")));
  EXPECT_EQ(limits->samples[1].value, 0);
}

TEST(MetricsPageTest, DataWaitAndCheckpointWriteTimePerJob) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  const ParsedFamily* wait = FindFamily(families, "trainyard_job_data_wait_seconds");
  ASSERT_NE(wait, nullptr);
  ASSERT_EQ(wait->samples.size(), 1u);
  EXPECT_EQ(wait->samples[0].value, 0.25);
  const ParsedFamily* write = FindFamily(families, "trainyard_job_checkpoint_write_seconds");
  ASSERT_NE(write, nullptr);
  ASSERT_EQ(write->samples.size(), 1u);
  EXPECT_EQ(write->samples[0].value, 12.5);
}

TEST(MetricsPageTest, LinksAndDisksTheAlertsReadAreSeriesToo) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  const ParsedFamily* up = FindFamily(families, "trainyard_node_link_up");
  ASSERT_NE(up, nullptr);
  ASSERT_EQ(up->samples.size(), 2u);
  EXPECT_THAT(up->samples[0].labels,
              ElementsAre(Pair("node", "node-0"), Pair("link", "ib0"), Pair("kind", "ib")));
  EXPECT_EQ(up->samples[0].value, 1);
  EXPECT_EQ(up->samples[1].value, 0);
  const ParsedFamily* errors = FindFamily(families, "trainyard_node_link_errors");
  ASSERT_NE(errors, nullptr);
  EXPECT_EQ(errors->samples[1].value, 12);
  const ParsedFamily* free = FindFamily(families, "trainyard_node_disk_free_bytes");
  ASSERT_NE(free, nullptr);
  ASSERT_EQ(free->samples.size(), 1u);
  EXPECT_THAT(free->samples[0].labels,
              ElementsAre(Pair("node", "node-0"), Pair("path", "/var/lib/trainyard")));
  EXPECT_EQ(free->samples[0].value, 5e11);
  ASSERT_NE(FindFamily(families, "trainyard_node_disk_total_bytes"), nullptr);
}

TEST(MetricsPageTest, DatasetCachesAndStagingAreSeries) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  const ParsedFamily* bytes = FindFamily(families, "trainyard_node_dataset_cache_bytes");
  ASSERT_NE(bytes, nullptr);
  ASSERT_EQ(bytes->samples.size(), 2u);  // a failed version holds nothing
  EXPECT_THAT(bytes->samples[0].labels,
              ElementsAre(Pair("node", "node-0"), Pair("state", "ready")));
  EXPECT_EQ(bytes->samples[0].value, 1000);
  EXPECT_EQ(bytes->samples[1].value, 300);
  const ParsedFamily* versions = FindFamily(families, "trainyard_node_dataset_cache_versions");
  ASSERT_NE(versions, nullptr);
  EXPECT_EQ(versions->samples.size(), 3u);
  const ParsedFamily* rate = FindFamily(families, "trainyard_dataset_staging_bytes_per_second");
  ASSERT_NE(rate, nullptr);
  ASSERT_EQ(rate->samples.size(), 1u);
  EXPECT_THAT(rate->samples[0].labels,
              ElementsAre(Pair("node", "node-0"), Pair("dataset", "coco")));
  EXPECT_EQ(rate->samples[0].value, 2.5e8);
  const ParsedFamily* staged = FindFamily(families, "trainyard_dataset_staging_bytes");
  ASSERT_NE(staged, nullptr);
  EXPECT_EQ(staged->samples[0].value, 300);
}

TEST(MetricsPageTest, OwnGpuSeriesHaveSnakeCaseLabelsAndDcgmSeriesKeepTheirs) {
  const std::vector<ParsedFamily> families = MustParse(RenderMetricsPage(FullPage()));
  const ParsedFamily* xids = FindFamily(families, "trainyard_gpu_xid_errors_total");
  ASSERT_NE(xids, nullptr);
  ASSERT_EQ(xids->samples.size(), 2u);
  EXPECT_THAT(xids->samples[0].labels,
              ElementsAre(Pair("gpu", "0"), Pair("uuid", "GPU-0"), Pair("device", "nvidia0"),
                          Pair("gpu_type", "H100"), Pair("node", "node-0")));
  EXPECT_EQ(xids->samples[0].value, 2);
  const ParsedFamily* last = FindFamily(families, "DCGM_FI_DEV_XID_ERRORS");
  ASSERT_NE(last, nullptr);
  ASSERT_EQ(last->samples.size(), 2u);
  EXPECT_THAT(last->samples[0].labels,
              ElementsAre(Pair("gpu", "0"), Pair("UUID", "GPU-0"), Pair("device", "nvidia0"),
                          Pair("modelName", "H100"), Pair("Hostname", "node-0")));
  EXPECT_EQ(last->samples[0].value, 79);
}

// `promtool check metrics` on `text`: its findings, one a line ("NAME problem"); fails
// the test when promtool cannot be run.
std::vector<std::string> PromtoolFindings(const std::string& text) {
  const std::string dir = ::testing::TempDir();
  const std::string in = dir + "/prometheus_test_" + std::to_string(getpid()) + ".prom";
  const std::string out = in + ".out";
  std::ofstream(in, std::ios::binary) << text;
  const std::string command = "promtool check metrics <" + in + " >" + out + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream read(out);
  std::vector<std::string> findings;
  for (std::string line; std::getline(read, line);) {
    if (!line.empty()) findings.push_back(line);
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
  // 0: no finding; 3: lint findings (printed). Anything else is promtool failing.
  EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3))
      << command << " exited with status " << status << ":\n"
      << ::testing::PrintToString(findings);
  return findings;
}

// Why promtool cannot be used here (empty when it can). In CI (CI set) it must be there:
// scripts/setup installs it.
std::string PromtoolMissing() {
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) return "";
  return "promtool not found; install Debian's prometheus package (scripts/setup does)";
}

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0';
}

TEST(MetricsPageTest, PromtoolFindsNothingInOurOwnSeries) {
  if (const std::string why = PromtoolMissing(); !why.empty()) {
    ASSERT_FALSE(InCi()) << why;
    GTEST_SKIP() << why;
  }
  std::vector<std::string> ours;
  for (const std::string& finding : PromtoolFindings(RenderMetricsPage(FullPage()))) {
    // DCGM's names and labels are dcgm-exporter's (modelName...), kept for its dashboards.
    if (!finding.starts_with("DCGM_FI_")) ours.push_back(finding);
  }
  EXPECT_THAT(ours, ::testing::IsEmpty());
}

TEST(MetricsPageTest, PromtoolFindingsAreReadBack) {
  if (const std::string why = PromtoolMissing(); !why.empty()) {
    ASSERT_FALSE(InCi()) << why;
    GTEST_SKIP() << why;
  }
  // What the test above would catch: a camel-case label, a counter without _total.
  Exposition e;
  e.Family("trainyard_bad_errors", "Errors.", MetricType::kCounter);
  e.Sample({{"modelName", "H100"}}, 1);
  const std::vector<std::string> findings = PromtoolFindings(e.Text());
  EXPECT_THAT(findings, ::testing::Contains(HasSubstr("snake_case")));
  EXPECT_THAT(findings, ::testing::Contains(HasSubstr("_total")));
  EXPECT_THAT(findings, ::testing::Each(StartsWith("trainyard_bad_errors ")));
}

}  // namespace
}  // namespace trainyard::server
