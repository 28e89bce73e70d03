#include "track/run_filter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace trainyard::track {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A run with a few of everything; tests add or remove what they need.
FilterableRun SampleRun() {
  FilterableRun run;
  run.attributes = {{"id", "run-7"}, {"state", "Running"}, {"user", "ada"}};
  run.params = {{"lr", "3e-4"},       {"optim.name", "adamw"}, {"model", "gpt2"},
                {"eval/loss", "1.5"}, {"batch", "32"},         {"note", "it's \"fine\"\n"}};
  run.metrics = {{"loss", 1.25}, {"acc", 0.9}, {"eval/loss", 2.0}};
  run.labels = {{"team", "nlp"}};
  return run;
}

// Whether `filter` parses and matches `run`; a parse failure fails the test.
bool Matches(std::string_view filter, const FilterableRun& run) {
  Result<RunFilter> f = RunFilter::Parse(filter);
  EXPECT_TRUE(f.ok()) << filter << ": " << f.status().ToString();
  return f.ok() && f->Matches(run);
}

// The error message for `filter`, or "parsed: <canonical form>".
std::string ErrorOf(std::string_view filter, const RunFilterOptions& options = {}) {
  Result<RunFilter> f = RunFilter::Parse(filter, options);
  if (f.ok()) return "parsed: " + f->ToString();
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  return f.status().message();
}

std::string Canonical(std::string_view filter) {
  Result<RunFilter> f = RunFilter::Parse(filter);
  EXPECT_TRUE(f.ok()) << filter << ": " << f.status().ToString();
  return f.ok() ? f->ToString() : "";
}

// Dynamic-programming LIKE over whole characters, the slow and obvious way. `text`
// and `pattern` are sequences of characters; a pattern character is "%", "_", or a
// literal (a backslash-escaped character arrives here as its literal).
struct PatternChar {
  enum Kind { kLiteral, kAnyChar, kAnyRun } kind;
  std::string literal;
};
std::string FoldAscii(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}
bool ReferenceLike(const std::vector<std::string>& text, const std::vector<PatternChar>& pattern,
                   bool fold) {
  // matched[i][j]: pattern[0, i) matches text[0, j).
  std::vector<std::vector<char>> matched(pattern.size() + 1, std::vector<char>(text.size() + 1, 0));
  matched[0][0] = 1;
  for (size_t i = 1; i <= pattern.size(); ++i) {
    const PatternChar& p = pattern[i - 1];
    for (size_t j = 0; j <= text.size(); ++j) {
      switch (p.kind) {
        case PatternChar::kAnyRun:
          matched[i][j] = matched[i - 1][j] || (j > 0 && matched[i][j - 1]);
          break;
        case PatternChar::kAnyChar:
          matched[i][j] = j > 0 && matched[i - 1][j - 1];
          break;
        case PatternChar::kLiteral:
          matched[i][j] =
              j > 0 && matched[i - 1][j - 1] &&
              (fold ? FoldAscii(p.literal) == FoldAscii(text[j - 1]) : p.literal == text[j - 1]);
          break;
      }
    }
  }
  return matched[pattern.size()][text.size()];
}

// `value` as a single-quoted filter string.
std::string Quote(std::string_view value) {
  std::string out = "'";
  for (const char c : value) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

TEST(RunFilterTest, EmptyFilterMatchesEverything) {
  for (const std::string_view text : {"", "   ", "\t\n "}) {
    Result<RunFilter> f = RunFilter::Parse(text);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_TRUE(f->MatchesAll());
    EXPECT_TRUE(f->Matches(SampleRun()));
    EXPECT_TRUE(f->Matches(FilterableRun{}));
    EXPECT_EQ(f->ToString(), "");
    EXPECT_TRUE(f->MetricKeys().empty());
  }
  EXPECT_TRUE(RunFilter().MatchesAll());
  EXPECT_TRUE(RunFilter().Matches(SampleRun()));
  EXPECT_FALSE(RunFilter::Parse("state = 'Running'")->MatchesAll());
}

TEST(RunFilterTest, ComparesMetricsAsNumbers) {
  const FilterableRun run = SampleRun();  // loss = 1.25
  EXPECT_TRUE(Matches("metrics.loss = 1.25", run));
  EXPECT_FALSE(Matches("metrics.loss = 1.5", run));
  EXPECT_TRUE(Matches("metrics.loss == 1.25", run));
  EXPECT_TRUE(Matches("metrics.loss != 2", run));
  EXPECT_TRUE(Matches("metrics.loss <> 2", run));
  EXPECT_FALSE(Matches("metrics.loss <> 1.25", run));
  EXPECT_TRUE(Matches("metrics.loss < 2", run));
  EXPECT_FALSE(Matches("metrics.loss < 1.25", run));
  EXPECT_TRUE(Matches("metrics.loss <= 1.25", run));
  EXPECT_FALSE(Matches("metrics.loss <= 1", run));
  EXPECT_TRUE(Matches("metrics.loss > 1", run));
  EXPECT_FALSE(Matches("metrics.loss > 1.25", run));
  EXPECT_TRUE(Matches("metrics.loss >= 1.25", run));
  EXPECT_FALSE(Matches("metrics.loss >= 1.3", run));
  EXPECT_TRUE(Matches("metrics.loss>1", run));  // no blanks needed around operators
  EXPECT_TRUE(Matches("metrics.loss=1.25", run));
}

TEST(RunFilterTest, ReadsNumberLiterals) {
  FilterableRun run;
  const std::pair<std::string_view, double> cases[] = {
      {"0", 0},  {"42", 42},     {"-7", -7},     {"3.25", 3.25},   {".5", 0.5}, {"-.5", -0.5},
      {"5.", 5}, {"1e-4", 1e-4}, {"2E+3", 2000}, {"-1.5e2", -150}, {"007", 7},  {"1e308", 1e308},
  };
  for (const auto& [literal, value] : cases) {
    run.metrics["m"] = value;
    EXPECT_TRUE(Matches("metrics.m = " + std::string(literal), run)) << literal;
    run.metrics["m"] = value * 1.5 + 1;
    EXPECT_FALSE(Matches("metrics.m = " + std::string(literal), run)) << literal;
  }
}

TEST(RunFilterTest, ComparesStringsLexicographically) {
  const FilterableRun run = SampleRun();  // state = Running
  EXPECT_TRUE(Matches("attributes.state = 'Running'", run));
  EXPECT_FALSE(Matches("attributes.state = 'running'", run));  // case matters
  EXPECT_TRUE(Matches("attributes.state != 'Failed'", run));
  EXPECT_FALSE(Matches("attributes.state != 'Running'", run));
  EXPECT_TRUE(Matches("attributes.state > 'Queued'", run));
  EXPECT_TRUE(Matches("attributes.state >= 'Running'", run));
  EXPECT_TRUE(Matches("attributes.state < 'Runs'", run));
  EXPECT_TRUE(Matches("attributes.state <= 'Running'", run));
  EXPECT_FALSE(Matches("attributes.state < 'Run'", run));
  // Strings compare as strings even when both look like numbers: "32" < "4".
  EXPECT_TRUE(Matches("params.batch < '4'", run));
  EXPECT_FALSE(Matches("params.batch < 4", run));
}

TEST(RunFilterTest, ComparesStringFieldsWithNumbersNumerically) {
  FilterableRun run = SampleRun();  // lr = "3e-4", batch = "32", model = "gpt2"
  EXPECT_TRUE(Matches("params.lr > 1e-4", run));
  EXPECT_TRUE(Matches("params.lr = 0.0003", run));
  EXPECT_FALSE(Matches("params.lr = '0.0003'", run));  // as strings they differ
  EXPECT_TRUE(Matches("params.batch >= 32", run));
  EXPECT_TRUE(Matches("params.batch = 32.0", run));
  EXPECT_TRUE(Matches("params.batch != 31", run));
  // A value that does not parse as a number: every comparison with a number is false.
  for (const std::string_view op : {"=", "!=", "<", "<=", ">", ">="}) {
    EXPECT_FALSE(Matches("params.model " + std::string(op) + " 2", run)) << op;
  }
  EXPECT_FALSE(Matches("params.model IN (1, 2)", run));
  EXPECT_FALSE(Matches("params.model NOT IN (1, 2)", run));
  EXPECT_TRUE(Matches("NOT params.model = 2", run));
  // Only the whole string counts: no blanks, no trailing text, no leading +.
  for (const std::string_view value : {" 32", "32 ", "32px", "+32", "", "0x20"}) {
    run.params["batch"] = value;
    EXPECT_FALSE(Matches("params.batch = 32", run)) << '"' << value << '"';
    EXPECT_FALSE(Matches("params.batch != 32", run)) << '"' << value << '"';
  }
  run.params["batch"] = "inf";
  EXPECT_TRUE(Matches("params.batch > 1e300", run));
  run.attributes["started_ms"] = "1700000000000";
  EXPECT_TRUE(Matches("attributes.started_ms >= 1.7e12", run));
  run.labels["priority"] = "-3";
  EXPECT_TRUE(Matches("labels.priority < 0", run));
}

TEST(RunFilterTest, MissingKeyMakesEveryComparisonFalseButIsNull) {
  const FilterableRun run = SampleRun();
  for (const std::string_view tail :
       {"= 1", "!= 1", "< 1", "<= 1", "> 1", ">= 1", "= 'x'", "!= 'x'", "LIKE '%'", "NOT LIKE 'x'",
        "ILIKE '%'", "NOT ILIKE 'x'", "IN (1, 'x')", "NOT IN (1, 'x')", "IS NOT NULL"}) {
    for (const std::string_view column :
         {"params.absent", "attributes.absent", "labels.absent", "absent"}) {
      EXPECT_FALSE(Matches(std::string(column) + " " + std::string(tail), run))
          << column << " " << tail;
    }
    if (std::string_view(tail).find_first_of("'L") == std::string_view::npos) {
      EXPECT_FALSE(Matches("metrics.absent " + std::string(tail), run)) << tail;
    }
  }
  EXPECT_TRUE(Matches("metrics.absent IS NULL", run));
  EXPECT_TRUE(Matches("params.absent IS NULL", run));
  EXPECT_TRUE(Matches("labels.absent is null", run));
  EXPECT_TRUE(Matches("absent IS NULL", run));
  EXPECT_FALSE(Matches("metrics.loss IS NULL", run));
  EXPECT_TRUE(Matches("metrics.loss IS NOT NULL", run));
  // NOT negates the whole comparison, so it is true for a run without the key.
  EXPECT_TRUE(Matches("NOT metrics.absent = 1", run));
  EXPECT_FALSE(Matches("metrics.absent != 1", run));
  // An empty value is present.
  FilterableRun empty;
  empty.params["p"] = "";
  EXPECT_TRUE(Matches("params.p IS NOT NULL", empty));
  EXPECT_TRUE(Matches("params.p = ''", empty));
}

TEST(RunFilterTest, NanIsUnequalToEverythingAndComparesWithNothing) {
  FilterableRun run;
  run.metrics["loss"] = kNaN;
  run.params["lr"] = "nan";
  for (const std::string_view column : {"metrics.loss", "params.lr"}) {
    const std::string c(column);
    EXPECT_FALSE(Matches(c + " = 1", run)) << c;
    EXPECT_FALSE(Matches(c + " < 1", run)) << c;
    EXPECT_FALSE(Matches(c + " <= 1", run)) << c;
    EXPECT_FALSE(Matches(c + " > 1", run)) << c;
    EXPECT_FALSE(Matches(c + " >= 1", run)) << c;
    EXPECT_TRUE(Matches(c + " != 1", run)) << c;
    EXPECT_FALSE(Matches(c + " IN (1, 2)", run)) << c;
    EXPECT_TRUE(Matches(c + " NOT IN (1, 2)", run)) << c;
    EXPECT_TRUE(Matches(c + " IS NOT NULL", run)) << c;
    EXPECT_FALSE(Matches(c + " IS NULL", run)) << c;
  }
  EXPECT_TRUE(Matches("params.lr = 'nan'", run));  // as a string it is just text
  run.metrics["loss"] = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(Matches("metrics.loss > 1e308", run));
  EXPECT_TRUE(Matches("metrics.loss != 1e308", run));
}

TEST(RunFilterTest, NotBindsTighterThanAndWhichBindsTighterThanOr) {
  // Every combination of three flags a, b, c (attributes "1" or "0").
  for (int bits = 0; bits < 8; ++bits) {
    const bool a = bits & 1, b = bits & 2, c = bits & 4;
    FilterableRun run;
    run.attributes = {{"a", a ? "1" : "0"}, {"b", b ? "1" : "0"}, {"c", c ? "1" : "0"}};
    SCOPED_TRACE(bits);
    EXPECT_EQ(Matches("a = '1' OR b = '1' AND c = '1'", run), a || (b && c));
    EXPECT_EQ(Matches("a = '1' AND b = '1' OR c = '1'", run), (a && b) || c);
    EXPECT_EQ(Matches("(a = '1' OR b = '1') AND c = '1'", run), (a || b) && c);
    EXPECT_EQ(Matches("NOT a = '1' AND b = '1'", run), !a && b);
    EXPECT_EQ(Matches("NOT (a = '1' AND b = '1')", run), !(a && b));
    EXPECT_EQ(Matches("NOT a = '1' OR NOT b = '1' AND c = '1'", run), !a || (!b && c));
    EXPECT_EQ(Matches("NOT NOT a = '1'", run), a);
    EXPECT_EQ(Matches("NOT (NOT (a = '1' OR b = '1') OR c = '1')", run), (a || b) && !c);
    EXPECT_EQ(Matches("((a = '1'))", run), a);
    EXPECT_EQ(Matches("a = '1' AND (b = '1' OR (c = '1' AND a = '1'))", run), a && (b || c));
  }
}

TEST(RunFilterTest, KeywordsAndPrefixesAreCaseInsensitive) {
  const FilterableRun run = SampleRun();
  EXPECT_TRUE(Matches("metrics.loss < 2 and state = 'Running'", run));
  EXPECT_TRUE(Matches("metrics.loss < 2 AnD state = 'Running'", run));
  EXPECT_TRUE(Matches("metrics.loss > 2 oR state = 'Running'", run));
  EXPECT_TRUE(Matches("not metrics.loss > 2", run));
  EXPECT_TRUE(Matches("params.model like 'GPT%' or params.model Ilike 'GPT%'", run));
  EXPECT_TRUE(Matches("params.model not in ('a') and params.model In ('gpt2')", run));
  EXPECT_TRUE(Matches("metrics.absent is null and metrics.loss Is Not Null", run));
  EXPECT_TRUE(Matches("PARAMS.model = 'gpt2' AND Metrics.loss < 2", run));
  EXPECT_EQ(Canonical("a = 1 and not b = 2 or c like 'x'"),
            "attributes.a = 1 AND NOT attributes.b = 2 OR attributes.c LIKE 'x'");
}

TEST(RunFilterTest, AcceptsMlflowPrefixesAndBareAttributes) {
  const FilterableRun run = SampleRun();
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"param.model = 'gpt2'", "params.model = 'gpt2'"},
      {"metric.loss < 2", "metrics.loss < 2"},
      {"attribute.state = 'Running'", "attributes.state = 'Running'"},
      {"attr.state = 'Running'", "attributes.state = 'Running'"},
      {"run.state = 'Running'", "attributes.state = 'Running'"},
      {"state = 'Running'", "attributes.state = 'Running'"},
      {"label.team = 'nlp'", "labels.team = 'nlp'"},
      {"tags.team = 'nlp'", "labels.team = 'nlp'"},
      {"tag.team = 'nlp'", "labels.team = 'nlp'"},
  };
  for (const auto& [text, canonical] : cases) {
    EXPECT_TRUE(Matches(text, run)) << text;
    EXPECT_EQ(Canonical(text), canonical);
  }
}

TEST(RunFilterTest, ReadsDottedAndBacktickedKeys) {
  FilterableRun run = SampleRun();
  run.attributes["odd name"] = "x";
  run.params["a`b\\c"] = "y";
  run.params["1st-try"] = "z";
  EXPECT_TRUE(Matches("params.optim.name = 'adamw'", run));
  EXPECT_TRUE(Matches("params.`optim.name` = 'adamw'", run));
  EXPECT_TRUE(Matches("params.optim.`name` = 'adamw'", run));
  EXPECT_TRUE(Matches("params.`eval/loss` = 1.5", run));
  EXPECT_TRUE(Matches("metrics.`eval/loss` = 2", run));
  EXPECT_TRUE(Matches("`odd name` = 'x'", run));
  EXPECT_TRUE(Matches("attributes.`odd name` = 'x'", run));
  EXPECT_TRUE(Matches("params.`a\\`b\\\\c` = 'y'", run));
  EXPECT_TRUE(Matches("params.1st-try = 'z'", run));
  // Keywords are fine as keys after a prefix, and in backticks.
  run.params["and"] = "k";
  EXPECT_TRUE(Matches("params.and = 'k'", run));
  run.attributes["in"] = "k";
  EXPECT_TRUE(Matches("`in` = 'k'", run));

  EXPECT_EQ(Canonical("params.`optim.name` = 'adamw'"), "params.optim.name = 'adamw'");
  EXPECT_EQ(Canonical("params.`eval/loss` = 1"), "params.`eval/loss` = 1");
  EXPECT_EQ(Canonical("params.`a\\`b\\\\c` = 1"), "params.`a\\`b\\\\c` = 1");
  EXPECT_EQ(Canonical("`odd name` = 1"), "attributes.`odd name` = 1");
  EXPECT_EQ(Canonical("`in` = 1"), "attributes.in = 1");
  EXPECT_EQ(Canonical("params.`.a` = 1"), "params.`.a` = 1");
  EXPECT_EQ(Canonical("params.`-a` = 1"), "params.`-a` = 1");
}

TEST(RunFilterTest, ReadsStringEscapes) {
  FilterableRun run = SampleRun();  // note = it's "fine"\n
  EXPECT_TRUE(Matches("params.note = 'it\\'s \"fine\"\\n'", run));
  EXPECT_TRUE(Matches("params.note = \"it's \\\"fine\\\"\\n\"", run));
  run.params["path"] = "C:\\tmp\tx\r";
  EXPECT_TRUE(Matches("params.path = 'C:\\\\tmp\\tx\\r'", run));
  // A backslash before any other character stays: '\d' is the two characters \d.
  run.params["re"] = "\\d+";
  EXPECT_TRUE(Matches("params.re = '\\d+'", run));
  EXPECT_TRUE(Matches("params.re = '\\\\d+'", run));
  // Raw UTF-8 and raw newlines are plain characters.
  run.params["city"] = "Zürich\nnord";
  EXPECT_TRUE(Matches("params.city = 'Zürich\nnord'", run));
  EXPECT_EQ(Canonical("params.city = 'Zürich\nnord'"), "params.city = 'Zürich\\nnord'");
  EXPECT_EQ(Canonical("params.s = \"it's\""), "params.s = 'it\\'s'");
}

TEST(RunFilterTest, LikeMatchesWholeValuesWithWildcards) {
  FilterableRun run;
  run.params["optim"] = "AdamW";
  EXPECT_TRUE(Matches("params.optim LIKE 'AdamW'", run));
  EXPECT_TRUE(Matches("params.optim LIKE 'Adam%'", run));
  EXPECT_TRUE(Matches("params.optim LIKE '%W'", run));
  EXPECT_TRUE(Matches("params.optim LIKE '%dam%'", run));
  EXPECT_TRUE(Matches("params.optim LIKE '%'", run));
  EXPECT_TRUE(Matches("params.optim LIKE '%%%'", run));
  EXPECT_TRUE(Matches("params.optim LIKE 'A_a_W'", run));
  EXPECT_TRUE(Matches("params.optim LIKE '_____'", run));
  EXPECT_FALSE(Matches("params.optim LIKE '____'", run));
  EXPECT_FALSE(Matches("params.optim LIKE '______'", run));
  EXPECT_FALSE(Matches("params.optim LIKE 'Adam'", run));  // the whole value
  EXPECT_FALSE(Matches("params.optim LIKE 'adam%'", run));
  EXPECT_TRUE(Matches("params.optim ILIKE 'adam%'", run));
  EXPECT_TRUE(Matches("params.optim ILIKE 'ADAMW'", run));
  EXPECT_TRUE(Matches("params.optim NOT LIKE 'adam%'", run));
  EXPECT_FALSE(Matches("params.optim NOT ILIKE 'adam%'", run));
  EXPECT_TRUE(Matches("params.optim LIKE \"Adam%\"", run));
  run.params["empty"] = "";
  EXPECT_TRUE(Matches("params.empty LIKE ''", run));
  EXPECT_TRUE(Matches("params.empty LIKE '%'", run));
  EXPECT_FALSE(Matches("params.empty LIKE '_'", run));
  // `_` is one character, however many bytes it takes in UTF-8.
  run.params["city"] = "Zürich";
  EXPECT_TRUE(Matches("params.city LIKE 'Z_rich'", run));
  EXPECT_TRUE(Matches("params.city LIKE '______'", run));
  EXPECT_TRUE(Matches("params.city LIKE '%ü%'", run));
  EXPECT_FALSE(Matches("params.city ILIKE 'zÜrich'", run));  // ILIKE folds ASCII only
  EXPECT_TRUE(Matches("params.city ILIKE 'zürICH'", run));
  // Labels and attributes take LIKE too.
  run.labels["team"] = "nlp";
  run.attributes["state"] = "Running";
  EXPECT_TRUE(Matches("labels.team LIKE 'n%'", run));
  EXPECT_TRUE(Matches("state ILIKE 'run%'", run));
}

TEST(RunFilterTest, LikeEscapesWildcardsWithBackslash) {
  FilterableRun run;
  run.params["p"] = "50%_off";
  EXPECT_TRUE(Matches("params.p LIKE '50\\%\\_off'", run));
  EXPECT_TRUE(Matches("params.p LIKE '50\\\\%\\\\_off'", run));  // the same pattern
  EXPECT_TRUE(Matches("params.p LIKE '%\\%%'", run));
  run.params["p"] = "50x_off";
  EXPECT_FALSE(Matches("params.p LIKE '50\\%\\_off'", run));
  EXPECT_TRUE(Matches("params.p LIKE '50%\\_off'", run));
  run.params["p"] = "50%yoff";
  EXPECT_FALSE(Matches("params.p LIKE '50\\%\\_off'", run));
  // A literal backslash: \\ at the LIKE level, \\\\ in the quotes.
  run.params["p"] = "a\\b";
  EXPECT_TRUE(Matches("params.p LIKE 'a\\\\\\\\b'", run));
  EXPECT_TRUE(Matches("params.p LIKE 'a_b'", run));
  // An escaped ordinary character is itself.
  EXPECT_TRUE(Matches("params.p LIKE '\\a%'", run));
  EXPECT_EQ(Canonical("params.p LIKE '50\\%'"), "params.p LIKE '50\\\\%'");
}

TEST(RunFilterTest, LikeStaysFastOnPathologicalPatterns) {
  FilterableRun run;
  run.params["a"] = std::string(20000, 'a');
  run.params["ab"] = std::string(20000, 'a') + "b";
  std::string many;
  for (int i = 0; i < 40; ++i) many += "%a";
  // Each of these would take exponential time in a naive backtracking matcher.
  EXPECT_FALSE(Matches("params.a LIKE '%a%a%a%a%a%a%a%a%a%a%a%b'", run));
  EXPECT_TRUE(Matches("params.ab LIKE '%a%a%a%a%a%a%a%a%a%a%a%b'", run));
  EXPECT_FALSE(Matches("params.a LIKE '" + many + "%b'", run));
  EXPECT_TRUE(Matches("params.ab LIKE '" + many + "%b'", run));
  EXPECT_FALSE(Matches("params.a LIKE '%" + std::string(200, 'a') + "b'", run));
  EXPECT_FALSE(Matches("params.a LIKE '%_%_%_%_%_%_%_%_%_%_%_%b'", run));
  EXPECT_FALSE(Matches("params.a ILIKE '%A%A%A%A%A%A%A%A%A%B%'", run));
  EXPECT_TRUE(Matches("params.a ILIKE '%A%A%A%A%A%A%A%A%A%A'", run));
}

TEST(RunFilterTest, LikeAgreesWithReferenceMatcher) {
  std::mt19937 rng(20240611);
  const std::vector<std::string> text_chars = {"a", "b", "A", "%", "_", "\\", "é"};
  const std::vector<std::string> pattern_atoms = {"a", "b",   "A",   "é",    "%",  "_",
                                                  "%", "\\%", "\\_", "\\\\", "\\a"};
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<std::string> text;
    std::string value;
    const int text_size = static_cast<int>(rng() % 9);
    for (int i = 0; i < text_size; ++i) {
      text.push_back(text_chars[rng() % text_chars.size()]);
      value += text.back();
    }
    std::vector<PatternChar> pattern;
    std::string like;
    const int pattern_size = static_cast<int>(rng() % 7);
    for (int i = 0; i < pattern_size; ++i) {
      const std::string& atom = pattern_atoms[rng() % pattern_atoms.size()];
      like += atom;
      if (atom == "%") {
        pattern.push_back({PatternChar::kAnyRun, ""});
      } else if (atom == "_") {
        pattern.push_back({PatternChar::kAnyChar, ""});
      } else if (atom[0] == '\\') {
        pattern.push_back({PatternChar::kLiteral, atom.substr(1)});
      } else {
        pattern.push_back({PatternChar::kLiteral, atom});
      }
    }
    FilterableRun run;
    run.params["v"] = value;
    for (const bool fold : {false, true}) {
      const std::string filter = "params.v " + std::string(fold ? "ILIKE " : "LIKE ") + Quote(like);
      ASSERT_EQ(Matches(filter, run), ReferenceLike(text, pattern, fold))
          << filter << " on '" << value << "'";
      const std::string negated =
          "params.v " + std::string(fold ? "NOT ILIKE " : "NOT LIKE ") + Quote(like);
      ASSERT_EQ(Matches(negated, run), !ReferenceLike(text, pattern, fold)) << negated;
    }
  }
}

TEST(RunFilterTest, InListsMatchAnyValue) {
  const FilterableRun run = SampleRun();
  EXPECT_TRUE(Matches("params.model IN ('a', 'gpt2')", run));
  EXPECT_TRUE(Matches("params.model IN ('gpt2')", run));
  EXPECT_FALSE(Matches("params.model IN ('a', 'b')", run));
  EXPECT_TRUE(Matches("params.model NOT IN ('a', 'b')", run));
  EXPECT_FALSE(Matches("params.model NOT IN ('a', 'gpt2')", run));
  EXPECT_TRUE(Matches("params.batch IN (16, 32, 64)", run));
  EXPECT_TRUE(Matches("params.batch IN ('x', 32)", run));  // mixed: each by its own rule
  EXPECT_TRUE(Matches("params.batch IN ('32')", run));
  EXPECT_TRUE(Matches("metrics.loss IN (1, 1.25)", run));
  EXPECT_TRUE(Matches("metrics.loss NOT IN (1, 2)", run));
  EXPECT_TRUE(Matches("metrics.loss in(1,1.25)", run));
  EXPECT_TRUE(Matches("state IN (\"Running\", 'Queued')", run));
  EXPECT_EQ(Canonical("params.model in ( 'a' ,\"b\",3 )"), "params.model IN ('a', 'b', 3)");
}

TEST(RunFilterTest, ListsTheKeysItNames) {
  Result<RunFilter> f = RunFilter::Parse(
      "metrics.loss < 2 and (metric.acc > 0.5 or params.lr > 1e-4) and not metrics.loss = 0 "
      "and params.`optim.name` like 'adam%' and state = 'Running' and tags.team = 'nlp' and "
      "labels.prio in (1, 2)");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->MetricKeys(), (std::vector<std::string>{"acc", "loss"}));
  EXPECT_EQ(f->ParamKeys(), (std::vector<std::string>{"lr", "optim.name"}));
  EXPECT_EQ(f->AttributeKeys(), (std::vector<std::string>{"state"}));
  EXPECT_EQ(f->LabelKeys(), (std::vector<std::string>{"prio", "team"}));
}

TEST(RunFilterTest, PrintsCanonicalForm) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"params.lr > 1e-4 and metrics.loss < 2", "params.lr > 1e-04 AND metrics.loss < 2"},
      {"metrics.loss<2", "metrics.loss < 2"},
      {"metrics.loss == 2.50", "metrics.loss = 2.5"},
      {"metrics.loss <> -0.0", "metrics.loss != -0"},
      {"metrics.x > 1e20", "metrics.x > 1e+20"},
      {"metrics.x > 123456789012", "metrics.x > 123456789012"},
      {"(a = 1 or b = 2) and c = 3", "(attributes.a = 1 OR attributes.b = 2) AND attributes.c = 3"},
      {"a = 1 or (b = 2 and c = 3)", "attributes.a = 1 OR attributes.b = 2 AND attributes.c = 3"},
      {"a = 1 and (b = 2 and (c = 3))",
       "attributes.a = 1 AND attributes.b = 2 AND attributes.c = 3"},
      {"(a = 1 or b = 2) or c = 3", "attributes.a = 1 OR attributes.b = 2 OR attributes.c = 3"},
      {"not (a = 1)", "NOT attributes.a = 1"},
      {"not (a = 1 or b = 2)", "NOT (attributes.a = 1 OR attributes.b = 2)"},
      {"a not like 'x%' and b not ilike 'y' and c not in (1)",
       "attributes.a NOT LIKE 'x%' AND attributes.b NOT ILIKE 'y' AND attributes.c NOT IN (1)"},
      {"metrics.m is not null or metrics.n is null", "metrics.m IS NOT NULL OR metrics.n IS NULL"},
  };
  for (const auto& [text, canonical] : cases) EXPECT_EQ(Canonical(text), canonical) << text;
}

// Runs with a bit of everything the round-trip filters look at, missing keys included.
std::vector<FilterableRun> RunTable() {
  std::vector<FilterableRun> runs;
  runs.push_back(SampleRun());
  runs.push_back(FilterableRun{});
  FilterableRun failed;
  failed.attributes = {{"state", "Failed"}, {"user", "bob"}};
  failed.params = {{"lr", "0.01"}, {"optim.name", "sgd"}, {"model", "bert"}, {"batch", "abc"}};
  failed.metrics = {{"loss", kNaN}, {"acc", 0.2}};
  failed.labels = {{"team", "vision"}};
  runs.push_back(failed);
  FilterableRun done;
  done.attributes = {{"state", "Finished"}};
  done.params = {{"lr", "1e-5"}, {"model", "a%b"}, {"eval/loss", "x"}};
  done.metrics = {{"loss", 0.5}, {"eval/loss", 0.75}};
  done.labels = {{"team", "NLP"}};
  runs.push_back(done);
  return runs;
}

TEST(RunFilterTest, CanonicalFormParsesToAnEquivalentFilter) {
  const std::vector<std::string_view> filters = {
      "params.lr > 1e-4 and metrics.loss < 2",
      "state = 'Running' or state = \"Failed\"",
      "not (state = 'Running' or metrics.acc >= 0.5) and labels.team ilike 'nlp'",
      "params.optim.name LIKE 'adam%' or params.model like 'a\\%b'",
      "metrics.loss is null or metrics.loss != 0.5",
      "params.model in ('gpt2', 'bert') and params.batch not in (16, 'x')",
      "params.`eval/loss` = 'x' or metrics.`eval/loss` <= .75",
      "((((a = 1))))",
      "not not not metrics.loss > 1",
      "params.lr >= 1e-5 and params.lr <= 0.01 and not params.lr = 3e-4",
      "labels.team = 'nlp' or tags.team = 'NLP' and metric.acc > 0.1",
      "params.note = 'it\\'s \"fine\"\\n' or params.note like '%\\\\%'",
      "metrics.loss != 1.25 and metrics.loss <> 0.5",
      "user not like '_o_' and attr.user is not null",
  };
  const std::vector<FilterableRun> runs = RunTable();
  for (const std::string_view text : filters) {
    Result<RunFilter> first = RunFilter::Parse(text);
    ASSERT_TRUE(first.ok()) << text << ": " << first.status().ToString();
    const std::string canonical = first->ToString();
    Result<RunFilter> second = RunFilter::Parse(canonical);
    ASSERT_TRUE(second.ok()) << canonical << ": " << second.status().ToString();
    EXPECT_EQ(second->ToString(), canonical);
    EXPECT_EQ(second->MetricKeys(), first->MetricKeys());
    EXPECT_EQ(second->ParamKeys(), first->ParamKeys());
    for (size_t i = 0; i < runs.size(); ++i) {
      EXPECT_EQ(second->Matches(runs[i]), first->Matches(runs[i])) << text << " on run " << i;
    }
  }
}

// ---- A seeded property test: random filters against an evaluator written apart.

using Oracle = std::function<bool(const FilterableRun&)>;

struct Generated {
  std::string text;
  Oracle matches;
  bool comparison = false;  // needs no parentheses as an operand
};

class FilterGenerator {
 public:
  explicit FilterGenerator(uint32_t seed) : rng_(seed) {}

  Generated Filter(int depth) {
    switch (depth >= 3 ? 0 : Pick(6)) {
      case 1:
      case 2: {  // AND / OR
        const bool is_and = Pick(2) == 0;
        Generated a = Filter(depth + 1);
        Generated b = Filter(depth + 1);
        Oracle fa = a.matches, fb = b.matches;
        return {Operand(a) + Blank() + Keyword(is_and ? "and" : "or") + Blank() + Operand(b),
                is_and ? Oracle([fa, fb](const FilterableRun& r) { return fa(r) && fb(r); })
                       : Oracle([fa, fb](const FilterableRun& r) { return fa(r) || fb(r); })};
      }
      case 3: {
        Generated a = Filter(depth + 1);
        Oracle fa = a.matches;
        return {Keyword("not") + " " + Operand(a), [fa](const FilterableRun& r) { return !fa(r); }};
      }
      default: {
        Generated g = Comparison();
        g.comparison = true;
        return g;
      }
    }
  }

  FilterableRun Run() {
    FilterableRun run;
    static const char* const kStrings[] = {"3e-4", "0.001", "abc", "",     "1",     "-2.5",
                                           "nan",  "10",    "Run", "adam", "adamw", "a%b"};
    static const double kNumbers[] = {0, 1e-4, 0.5, 1, 2, -1, 10, kNaN};
    for (const char* key : {"lr", "model", "optim.name"}) {
      if (Pick(4) != 0) run.params[key] = kStrings[Pick(12)];
    }
    for (const char* key : {"state", "user"}) {
      if (Pick(4) != 0) run.attributes[key] = kStrings[Pick(12)];
    }
    if (Pick(4) != 0) run.labels["team"] = kStrings[Pick(12)];
    for (const char* key : {"loss", "acc"}) {
      if (Pick(4) != 0) run.metrics[key] = kNumbers[Pick(8)];
    }
    return run;
  }

 private:
  uint32_t Pick(uint32_t n) { return rng_() % n; }

  // A comparison bare or in parentheses, anything else in parentheses.
  std::string Operand(const Generated& g) {
    return g.comparison && Pick(2) ? g.text : "(" + Blank() + g.text + Blank() + ")";
  }

  std::string Blank() {
    static const char* const kBlanks[] = {" ", "  ", "\t", "\n "};
    return kBlanks[Pick(4)];
  }

  // `word` in random letter case.
  std::string Keyword(std::string word) {
    for (char& c : word) {
      if (Pick(2)) c = static_cast<char>(c - 'a' + 'A');
    }
    return word;
  }

  static std::optional<double> AsNumber(const std::string& s) {
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return std::nullopt;
    return v;
  }

  static bool Holds(int op, double v, double x) {
    if (std::isnan(v)) return op == 1;
    const bool results[] = {v == x, v != x, v<x, v <= x, v> x, v >= x};
    return results[op];
  }

  static bool Holds(int op, const std::string& v, const std::string& x) {
    const int c = v.compare(x);
    const bool results[] = {c == 0, c != 0, c<0, c <= 0, c> 0, c >= 0};
    return results[op];
  }

  Generated Comparison() {
    static const char* const kOps[] = {"=", "!=", "<", "<=", ">", ">="};
    static const char* const kOpSpellings[] = {"==", "<>"};
    struct ColumnChoice {
      const char* text;
      int field;  // 0 params, 1 attributes, 2 labels, 3 metrics
      const char* key;
    };
    static const ColumnChoice kColumns[] = {
        {"params.lr", 0, "lr"},
        {"param.lr", 0, "lr"},
        {"params.model", 0, "model"},
        {"params.optim.name", 0, "optim.name"},
        {"params.`optim.name`", 0, "optim.name"},
        {"state", 1, "state"},
        {"attributes.user", 1, "user"},
        {"labels.team", 2, "team"},
        {"tags.team", 2, "team"},
        {"metrics.loss", 3, "loss"},
        {"metric.`acc`", 3, "acc"},
        {"params.absent", 0, "absent"},
    };
    const ColumnChoice& column = kColumns[Pick(12)];
    const int field = column.field;
    const std::string key = column.key;
    const auto lookup = [field, key](const FilterableRun& r) -> const std::string* {
      const auto& m = field == 0 ? r.params : field == 1 ? r.attributes : r.labels;
      const auto it = m.find(key);
      return it == m.end() ? nullptr : &it->second;
    };
    const auto present = [field, key, lookup](const FilterableRun& r) {
      return field == 3 ? r.metrics.count(key) > 0 : lookup(r) != nullptr;
    };
    std::string text = column.text;
    const uint32_t kind = Pick(10);
    if (kind == 0) {  // IS [NOT] NULL
      const bool negated = Pick(2);
      text +=
          Blank() + Keyword("is") + (negated ? " " + Keyword("not") : "") + " " + Keyword("null");
      return {text, [present, negated](const FilterableRun& r) { return present(r) == negated; }};
    }
    if (kind == 1 && field != 3) {  // [NOT] LIKE / ILIKE
      static const char* const kPatterns[] = {"adam%", "%b",   "a\\%b", "_",    "%",
                                              "ADAM_", "%e-%", "1%",    "a_c%", ""};
      const uint32_t p = Pick(10);
      const bool fold = Pick(2);
      const bool negated = Pick(2);
      text += Blank() + (negated ? Keyword("not") + " " : "") + Keyword(fold ? "ilike" : "like") +
              " " + Quote(kPatterns[p]);
      std::vector<PatternChar> pattern;
      const std::string meaning = kPatterns[p];
      for (size_t i = 0; i < meaning.size(); ++i) {
        if (meaning[i] == '%') {
          pattern.push_back({PatternChar::kAnyRun, ""});
        } else if (meaning[i] == '_') {
          pattern.push_back({PatternChar::kAnyChar, ""});
        } else if (meaning[i] == '\\') {
          pattern.push_back({PatternChar::kLiteral, std::string(1, meaning[++i])});
        } else {
          pattern.push_back({PatternChar::kLiteral, std::string(1, meaning[i])});
        }
      }
      return {text, [lookup, pattern, fold, negated](const FilterableRun& r) {
                const std::string* v = lookup(r);
                if (v == nullptr) return false;
                std::vector<std::string> chars;
                for (const char c : *v) chars.emplace_back(1, c);
                return ReferenceLike(chars, pattern, fold) != negated;
              }};
    }
    // A comparison or an IN list, with number literals (and strings off metrics).
    static const char* const kNumberTexts[] = {"0", "1e-4", "0.5", "1", "2", "-1", "10", ".001"};
    static const double kNumberValues[] = {0, 1e-4, 0.5, 1, 2, -1, 10, 0.001};
    static const char* const kStringValues[] = {"abc", "adam", "Run", "1", "10", ""};
    struct Value {
      bool is_number;
      double number;
      std::string text;
    };
    const auto value = [&]() {
      if (field == 3 || Pick(2)) {
        const uint32_t i = Pick(8);
        return Value{true, kNumberValues[i], kNumberTexts[i]};
      }
      const std::string s = kStringValues[Pick(6)];
      return Value{false, 0, s};
    };
    const auto holds = [field, key, lookup](const FilterableRun& r, int op, const Value& x) {
      if (field == 3) {
        const auto it = r.metrics.find(key);
        return it != r.metrics.end() && Holds(op, it->second, x.number);
      }
      const std::string* v = lookup(r);
      if (v == nullptr) return false;
      if (!x.is_number) return Holds(op, *v, x.text);
      const std::optional<double> n = AsNumber(*v);
      return n.has_value() && Holds(op, *n, x.number);
    };
    const auto literal = [](const Value& x) { return x.is_number ? x.text : Quote(x.text); };
    if (kind == 2 || kind == 3) {  // [NOT] IN
      const bool negated = kind == 3;
      std::vector<Value> values;
      text += Blank() + (negated ? Keyword("not") + " " : "") + Keyword("in") + " (";
      const uint32_t n = 1 + Pick(3);
      for (uint32_t i = 0; i < n; ++i) {
        values.push_back(value());
        text += (i > 0 ? "," + Blank() : "") + literal(values.back());
      }
      text += ")";
      return {text, [holds, values, negated](const FilterableRun& r) {
                for (const Value& x : values) {
                  if (!negated && holds(r, 0, x)) return true;
                  if (negated && !holds(r, 1, x)) return false;
                }
                return negated;
              }};
    }
    const int op = static_cast<int>(Pick(6));
    std::string op_text = kOps[op];
    if (op <= 1 && Pick(3) == 0) op_text = kOpSpellings[op];
    const Value x = value();
    text += Blank() + op_text + Blank() + literal(x);
    return {text, [holds, op, x](const FilterableRun& r) { return holds(r, op, x); }};
  }

  std::mt19937 rng_;
};

TEST(RunFilterTest, RandomFiltersMatchAsSpecifiedAndSurviveRoundTrips) {
  FilterGenerator gen(7);
  std::vector<FilterableRun> runs;
  for (int i = 0; i < 40; ++i) runs.push_back(gen.Run());
  int matched = 0;
  int checked = 0;
  for (int iteration = 0; iteration < 1500; ++iteration) {
    const Generated g = gen.Filter(0);
    Result<RunFilter> f = RunFilter::Parse(g.text);
    ASSERT_TRUE(f.ok()) << g.text << ": " << f.status().ToString();
    const std::string canonical = f->ToString();
    Result<RunFilter> again = RunFilter::Parse(canonical);
    ASSERT_TRUE(again.ok()) << canonical << ": " << again.status().ToString();
    ASSERT_EQ(again->ToString(), canonical);
    Result<RunFilter> negated = RunFilter::Parse("NOT (" + g.text + ")");
    ASSERT_TRUE(negated.ok()) << negated.status().ToString();
    for (const FilterableRun& run : runs) {
      const bool expected = g.matches(run);
      matched += expected;
      ++checked;
      ASSERT_EQ(f->Matches(run), expected) << g.text;
      ASSERT_EQ(again->Matches(run), expected) << canonical;
      ASSERT_EQ(negated->Matches(run), !expected) << g.text;
    }
  }
  // Both outcomes are common, so the comparison above says something.
  EXPECT_GT(matched, checked / 5);
  EXPECT_LT(matched, checked * 4 / 5);
}

TEST(RunFilterTest, ErrorsNameTheColumnAndWhatWasExpected) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"metrics.loss lr 2",
       "filter: column 14: expected a comparison operator (=, !=, <, <=, >, >=, LIKE, ILIKE, IN, "
       "IS), got \"lr\""},
      {"metrics.loss",
       "filter: column 13: expected a comparison operator (=, !=, <, <=, >, >=, "
       "LIKE, ILIKE, IN, IS), got the end of the filter"},
      {"state ! 'x'",
       "filter: column 7: expected a comparison operator (=, !=, <, <=, >, >=, "
       "LIKE, ILIKE, IN, IS), got \"!\""},
      {"state => 'x'", "filter: column 8: expected a number or a quoted string, got \">\""},
      {"param2.lr = 1",
       "filter: column 1: unknown prefix \"param2\"; use params., metrics., attributes. or "
       "labels."},
      {"a = 1 and foo.bar = 1",
       "filter: column 11: unknown prefix \"foo\"; use params., metrics., attributes. or "
       "labels."},
      {"state.x = 1",
       "filter: column 1: unknown prefix \"state\"; use params., metrics., attributes. or "
       "labels."},
      {"`params`.lr = 1",
       "filter: column 1: unknown prefix \"params\"; use params., metrics., attributes. or "
       "labels."},
      {"state = 'Running", "filter: column 9: unterminated string: the ' here is never closed"},
      {"state = \"Running\\\"",
       "filter: column 9: unterminated string: the \" here is never closed"},
      {"state = 'Running\\", "filter: column 9: unterminated string: the ' here is never closed"},
      {"params.`eval/loss = 1", "filter: column 8: unterminated key: the ` here is never closed"},
      {"params. = 1",
       "filter: column 8: expected a key after \"params.\" (a name, or any text in backticks), "
       "got a blank"},
      {"params.",
       "filter: column 8: expected a key after \"params.\" (a name, or any text in "
       "backticks), got the end of the filter"},
      {"params.a..b = 1",
       "filter: column 10: expected a key after \"params.a.\" (a name, or any "
       "text in backticks), got \".\""},
      {"params.`` = 1", "filter: column 8: empty key in backticks"},
      {"`` = 1", "filter: column 1: empty key in backticks"},
      {"= 1",
       "filter: column 1: expected a column such as params.lr, metrics.loss or state, got "
       "\"=\""},
      {"a = 1 and",
       "filter: column 10: expected a column such as params.lr, metrics.loss or "
       "state, got the end of the filter"},
      {"a = 1 and and b = 1",
       "filter: column 11: expected a column such as params.lr, "
       "metrics.loss or state, got \"and\""},
      {"not",
       "filter: column 4: expected a column such as params.lr, metrics.loss or state, got "
       "the end of the filter"},
      {"()",
       "filter: column 2: expected a column such as params.lr, metrics.loss or state, got "
       "\")\""},
      {"'Running' = state",
       "filter: column 1: expected a column such as params.lr, "
       "metrics.loss or state, got the string 'Running'"},
      {"1 < metrics.loss",
       "filter: column 1: expected a column such as params.lr, metrics.loss "
       "or state, got the number 1"},
      {"a = 1 b = 2", "filter: column 7: expected AND, OR or the end of the filter, got \"b\""},
      {"a = 1)", "filter: column 6: expected AND, OR or the end of the filter, got \")\""},
      {"a = 1 && b = 2", "filter: column 7: expected AND, OR or the end of the filter, got \"&\""},
      {"a = 'it''s'",
       "filter: column 9: expected AND, OR or the end of the filter, got the string 's'"},
      {"(a = 1 or b = 2",
       "filter: column 16: expected AND, OR or \")\" to close the \"(\" at "
       "column 1, got the end of the filter"},
      {"((a = 1) c",
       "filter: column 10: expected AND, OR or \")\" to close the \"(\" at column "
       "1, got \"c\""},
      {"a = ",
       "filter: column 5: expected a number or a quoted string, got the end of the "
       "filter"},
      {"params.optim = adam",
       "filter: column 16: expected a number or a quoted string, got \"adam\"; quote text: "
       "'adam'"},
      {"metrics.loss = low", "filter: column 16: expected a number, got \"low\""},
      {"metrics.loss = null",
       "filter: column 16: expected a number, got \"null\"; to find runs "
       "without the key, write IS NULL"},
      {"metrics.loss = '2'",
       "filter: column 16: metrics.loss is a number; compare it with a "
       "number, got the string '2'"},
      {"metrics.loss in (1, 'x')",
       "filter: column 21: metrics.loss is a number; compare it with "
       "a number, got the string 'x'"},
      {"metrics.loss like '1%'",
       "filter: column 14: LIKE does not apply to metrics.loss, a "
       "number; use =, !=, <, <=, >, >=, IN or IS"},
      {"metrics.loss not ilike '1%'",
       "filter: column 14: NOT ILIKE does not apply to "
       "metrics.loss, a number; use =, !=, <, <=, >, >=, IN or IS"},
      {"params.a like adam%",
       "filter: column 15: expected a quoted pattern after LIKE, got "
       "\"adam\""},
      {"params.a like 'x\\\\'",
       "filter: column 15: the pattern ends in a lone backslash, which "
       "escapes nothing; to match a backslash, write \\\\\\\\ in the "
       "quotes"},
      {"a = 1.2.3", "filter: column 5: malformed number 1.2.3"},
      {"a = 1e", "filter: column 5: malformed number 1e"},
      {"a = 12abc", "filter: column 5: malformed number 12abc"},
      {"a = 1e999", "filter: column 5: the number 1e999 is out of range"},
      {"a = -1e400", "filter: column 5: the number -1e400 is out of range"},
      {"a = - 1", "filter: column 5: expected a number or a quoted string, got \"-\""},
      {"a = +1", "filter: column 5: expected a number or a quoted string, got \"+\""},
      {"a in 1", "filter: column 6: expected \"(\" after IN, got the number 1"},
      {"a in ()", "filter: column 7: expected a number or a quoted string, got \")\""},
      {"a in (1 2)", "filter: column 9: expected \",\" or \")\" in the IN list, got the number 2"},
      {"a in (1,",
       "filter: column 9: expected a number or a quoted string, got the end of the "
       "filter"},
      {"a in (1",
       "filter: column 8: expected \",\" or \")\" in the IN list, got the end of the "
       "filter"},
      {"a is nul", "filter: column 6: expected NULL or NOT NULL after IS, got \"nul\""},
      {"a is not 5", "filter: column 10: expected NULL after IS NOT, got the number 5"},
      {"a not = 1", "filter: column 7: expected LIKE, ILIKE or IN after NOT, got \"=\""},
      {"x = 'a' and y = \x01", "filter: column 17: control character \\x01 is not allowed"},
      {"x = 'a\x7f'", "filter: column 7: control character \\x7f is not allowed"},
      {"x = 'a\fb'", "filter: column 7: control character \\x0c is not allowed"},
      {"a = 1 and\n b = 'x\ny",
       "filter: column 16: unterminated string: the ' here is never "
       "closed"},
      {"a = 'x' and b = 'é",
       "filter: column 17: unterminated string: the ' here is never "
       "closed"},
      {"é = 1",
       "filter: column 1: expected a column such as params.lr, metrics.loss or state, "
       "got \"é\""},
      {"a = 1 and b = 'é' c",
       "filter: column 19: expected AND, OR or the end of the filter, got "
       "\"c\""},
      {"a = 'abc\xff'", "filter: column 9: not valid UTF-8 (byte 0xff)"},
      {"a = '\xc0\x80'", "filter: column 6: not valid UTF-8 (byte 0xc0)"},      // overlong NUL
      {"a = '\xed\xa0\x80'", "filter: column 6: not valid UTF-8 (byte 0xed)"},  // surrogate
  };
  for (const auto& [text, message] : cases) EXPECT_EQ(ErrorOf(text), message) << text;
}

TEST(RunFilterTest, RejectsNulBytes) {
  EXPECT_EQ(ErrorOf(std::string("x = 'a\0'", 8)),
            "filter: column 7: control character \\x00 is not allowed");
}

// Found by fuzz_run_filter: the text before a missing key went into the message raw.
TEST(RunFilterTest, ErrorsShowNewlinesInKeysEscaped) {
  EXPECT_EQ(ErrorOf("params.`a\nb`.!= 1"),
            "filter: column 14: expected a key after \"params.`a\\x0ab`.\" (a name, or any text in "
            "backticks), got \"!=\"");
  EXPECT_EQ(ErrorOf("metrics.`a\nb` like 'x'"),
            "filter: column 15: LIKE does not apply to metrics.`a\\nb`, a number; use =, !=, <, "
            "<=, >, >=, IN or IS");
}

TEST(RunFilterTest, ErrorsQuoteLongTextShortly) {
  EXPECT_EQ(ErrorOf("a = 1 " + std::string(100, 'x')),
            "filter: column 7: expected AND, OR or the end of the filter, got \"" +
                std::string(40, 'x') + "...\"");
}

TEST(RunFilterTest, LimitsLengthAndNesting) {
  std::string longest = "state = '" + std::string(kMaxFilterBytes - 10, 'x') + "'";
  ASSERT_EQ(longest.size(), kMaxFilterBytes);
  EXPECT_TRUE(RunFilter::Parse(longest).ok());
  EXPECT_EQ(ErrorOf(longest + " "), "filter: is 4097 bytes long; the limit is 4096 bytes");

  const auto nested = [](int levels, std::string_view open, std::string_view close) {
    std::string text;
    for (int i = 0; i < levels; ++i) text += open;
    text += "a = 1";
    for (int i = 0; i < levels; ++i) text += close;
    return text;
  };
  EXPECT_TRUE(RunFilter::Parse(nested(kMaxFilterDepth, "(", ")")).ok());
  EXPECT_EQ(ErrorOf(nested(kMaxFilterDepth + 1, "(", ")")),
            "filter: column 65: nested more than 64 levels deep (each \"(\" and NOT counts); "
            "simplify the filter");
  EXPECT_TRUE(RunFilter::Parse(nested(kMaxFilterDepth, "not ", "")).ok());
  EXPECT_EQ(ErrorOf(nested(kMaxFilterDepth + 1, "NOT ", "")),
            "filter: column 257: nested more than 64 levels deep (each \"(\" and NOT counts); "
            "simplify the filter");
  EXPECT_EQ(ErrorOf(nested(kMaxFilterDepth / 2 + 1, "not (", ")")),
            "filter: column 161: nested more than 64 levels deep (each \"(\" and NOT counts); "
            "simplify the filter");
  // Huge but flat AND / OR chains need no depth: 450 comparisons.
  std::string chain = "a = 1";
  for (int i = 0; i < 449; ++i) chain += i % 2 ? " or a=1" : " and a=1";
  Result<RunFilter> f = RunFilter::Parse(chain);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  FilterableRun run;
  run.attributes["a"] = "1";
  EXPECT_TRUE(f->Matches(run));
  // Deeply nested filters print to text that parses again.
  Result<RunFilter> deep = RunFilter::Parse(nested(kMaxFilterDepth / 2, "not (", " or b = 2)"));
  ASSERT_TRUE(deep.ok()) << deep.status().ToString();
  EXPECT_TRUE(RunFilter::Parse(deep->ToString()).ok());
}

TEST(RunFilterTest, RejectsUnknownAttributesWhenTold) {
  RunFilterOptions options;
  options.known_attributes = {"id", "state", "user"};
  EXPECT_EQ(ErrorOf("staet = 'Running'", options),
            "filter: column 1: unknown attribute \"staet\"; known: id, state, user");
  EXPECT_EQ(ErrorOf("metrics.loss < 1 and attributes.queue = 'a'", options),
            "filter: column 22: unknown attribute \"queue\"; known: id, state, user");
  EXPECT_EQ(ErrorOf("state = 'Running' and params.anything = 1 and labels.x = 'y'", options),
            "parsed: attributes.state = 'Running' AND params.anything = 1 AND labels.x = 'y'");
  EXPECT_EQ(ErrorOf("staet = 'Running'"), "parsed: attributes.staet = 'Running'");
}

TEST(RunFilterTest, CopiesMatchAlike) {
  Result<RunFilter> f = RunFilter::Parse("metrics.loss < 2");
  ASSERT_TRUE(f.ok());
  const RunFilter copy = *f;
  RunFilter assigned;
  assigned = copy;
  EXPECT_TRUE(copy.Matches(SampleRun()));
  EXPECT_TRUE(assigned.Matches(SampleRun()));
  EXPECT_EQ(assigned.ToString(), f->ToString());
}

}  // namespace
}  // namespace trainyard::track
