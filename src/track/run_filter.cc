#include "track/run_filter.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

namespace trainyard::track {

enum class Field { kAttribute, kParam, kMetric, kLabel };

enum class Op {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLike,
  kNotLike,
  kILike,
  kNotILike,
  kIn,
  kNotIn,
  kIsNull,
  kIsNotNull,
};

struct Literal {
  bool is_number = false;
  double number = 0;
  std::string text;  // a string literal's value, escapes resolved
};

// One element of a compiled LIKE pattern: a literal character (one UTF-8 sequence,
// ASCII-folded for ILIKE), `_` or `%`.
struct LikeElement {
  enum class Kind : uint8_t { kChar, kAnyChar, kAnyRun };
  Kind kind = Kind::kChar;
  uint8_t size = 0;
  std::array<char, 4> bytes{};
};

struct RunFilterNode {
  enum class Kind { kAnd, kOr, kNot, kCompare };
  Kind kind = Kind::kCompare;
  std::vector<RunFilterNode> children;  // kAnd, kOr: two or more; kNot: one

  // kCompare
  Field field = Field::kAttribute;
  std::string key;
  Op op = Op::kEq;
  std::vector<Literal> values;  // one, a LIKE pattern, an IN list, or none for IS
  std::vector<LikeElement> pattern;
};

namespace {

using Node = RunFilterNode;

// ---------------------------------------------------------------- characters

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsNameStart(char c) { return IsAlpha(c) || c == '_'; }
bool IsSegmentStart(char c) { return IsAlpha(c) || IsDigit(c) || c == '_'; }
bool IsNameChar(char c) { return IsSegmentStart(c) || c == '-'; }
char FoldAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (FoldAscii(a[i]) != FoldAscii(b[i])) return false;
  }
  return true;
}

bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }
bool IsControl(char c) {
  const auto b = static_cast<unsigned char>(c);
  return b < 0x20 || b == 0x7F;
}

// Bytes in the character at s[i]: a well-formed UTF-8 sequence, or 1 for a byte that
// does not start one (values in runs need not be valid UTF-8).
size_t CharSize(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  if ((b >> 5) == 0x6) {
    n = 2;
  } else if ((b >> 4) == 0xE) {
    n = 3;
  } else if ((b >> 3) == 0x1E) {
    n = 4;
  }
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if (!IsContinuation(s[i + k])) return 1;
  }
  return n;
}

// Offset of the first byte that is not part of valid UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos.
size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    uint32_t min = 0;
    if ((b >> 5) == 0x6) {
      n = 2, cp = b & 0x1F, min = 0x80;
    } else if ((b >> 4) == 0xE) {
      n = 3, cp = b & 0x0F, min = 0x800;
    } else if ((b >> 3) == 0x1E) {
      n = 4, cp = b & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + n > s.size()) return i;
    for (size_t k = 1; k < n; ++k) {
      if (!IsContinuation(s[i + k])) return i;
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n;
  }
  return std::string_view::npos;
}

// Column of byte `at` in `text`, counting characters from 1.
size_t ColumnAt(std::string_view text, size_t at) {
  size_t column = 1;
  for (size_t i = 0; i < at && i < text.size(); ++i) {
    if (!IsContinuation(text[i])) ++column;
  }
  return column;
}

std::string HexByte(char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto b = static_cast<unsigned char>(c);
  return {kHex[b >> 4], kHex[b & 0xF]};
}

// For error messages: control characters as \xNN, and at most about 40 bytes.
std::string Excerpt(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= kMax) {
      out += "...";
      break;
    }
    if (IsControl(s[i])) {
      out += "\\x" + HexByte(s[i]);
      ++i;
      continue;
    }
    const size_t n = CharSize(s, i);
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

// ---------------------------------------------------------------- numbers

// The whole of `s` as a double, as std::from_chars reads it.
std::optional<double> ParseDouble(std::string_view s) {
  double v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v, std::chars_format::general);
  if (ec != std::errc() || ptr != end || s.empty()) return std::nullopt;
  return v;
}

std::string FormatDouble(double v) {
  std::array<char, 64> buf{};
  auto [ptr, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  TY_CHECK(ec == std::errc());
  return std::string(buf.data(), ptr);
}

// ---------------------------------------------------------------- LIKE

// Compiles a LIKE pattern (escapes already resolved at the string level). Returns
// false when it ends in a lone backslash.
bool CompileLike(std::string_view pattern, bool fold, std::vector<LikeElement>* out) {
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '%') {
      if (out->empty() || out->back().kind != LikeElement::Kind::kAnyRun) {
        out->push_back({LikeElement::Kind::kAnyRun, 0, {}});
      }
      ++i;
      continue;
    }
    if (c == '_') {
      out->push_back({LikeElement::Kind::kAnyChar, 0, {}});
      ++i;
      continue;
    }
    if (c == '\\') {
      if (i + 1 == pattern.size()) return false;
      ++i;
    }
    const size_t n = CharSize(pattern, i);
    LikeElement e;
    e.size = static_cast<uint8_t>(n);
    for (size_t k = 0; k < n; ++k) e.bytes[k] = fold ? FoldAscii(pattern[i + k]) : pattern[i + k];
    out->push_back(e);
    i += n;
  }
  return true;
}

bool SameChar(const LikeElement& e, std::string_view text, size_t at, size_t n, bool fold) {
  if (e.size != n) return false;
  for (size_t k = 0; k < n; ++k) {
    const char c = fold ? FoldAscii(text[at + k]) : text[at + k];
    if (c != e.bytes[k]) return false;
  }
  return true;
}

// Wildcard matching that remembers only the latest %: when a later element fails, the
// text that % swallows grows by one character and matching resumes after it. Trying
// earlier %s again is never needed (whatever they could take, the latest can), so each
// text position is tried against each pattern element at most once: O(|text| *
// |pattern|), whatever the pattern ('%a%a%a%a%b' included).
bool LikeMatches(std::string_view text, const std::vector<LikeElement>& pattern, bool fold) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t t = 0;
  size_t p = 0;
  size_t star_p = kNone;
  size_t star_t = 0;
  while (t < text.size()) {
    const size_t n = CharSize(text, t);
    if (p < pattern.size()) {
      const LikeElement& e = pattern[p];
      if (e.kind == LikeElement::Kind::kAnyRun) {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (e.kind == LikeElement::Kind::kAnyChar || SameChar(e, text, t, n, fold)) {
        t += n;
        ++p;
        continue;
      }
    }
    if (star_p == kNone) return false;
    p = star_p + 1;
    star_t += CharSize(text, star_t);
    t = star_t;
  }
  while (p < pattern.size() && pattern[p].kind == LikeElement::Kind::kAnyRun) ++p;
  return p == pattern.size();
}

// ---------------------------------------------------------------- matching

bool NumberHolds(double v, Op op, double x) {
  if (std::isnan(v) || std::isnan(x)) return op == Op::kNe;
  switch (op) {
    case Op::kEq:
      return v == x;
    case Op::kNe:
      return v != x;
    case Op::kLt:
      return v < x;
    case Op::kLe:
      return v <= x;
    case Op::kGt:
      return v > x;
    case Op::kGe:
      return v >= x;
    default:
      return false;
  }
}

// `number` is the string as a number, when it is one.
bool StringHolds(std::string_view s, const std::optional<double>& number, Op op,
                 const Literal& lit) {
  if (lit.is_number) return number.has_value() && NumberHolds(*number, op, lit.number);
  const int c = s.compare(lit.text);
  switch (op) {
    case Op::kEq:
      return c == 0;
    case Op::kNe:
      return c != 0;
    case Op::kLt:
      return c < 0;
    case Op::kLe:
      return c <= 0;
    case Op::kGt:
      return c > 0;
    case Op::kGe:
      return c >= 0;
    default:
      return false;
  }
}

template <typename Holds>
bool CompareWith(const Node& n, Holds holds) {
  switch (n.op) {
    case Op::kIn:
      for (const Literal& lit : n.values) {
        if (holds(Op::kEq, lit)) return true;
      }
      return false;
    case Op::kNotIn:
      for (const Literal& lit : n.values) {
        if (!holds(Op::kNe, lit)) return false;
      }
      return true;
    default:
      return holds(n.op, n.values.front());
  }
}

const std::map<std::string, std::string, std::less<>>& StringFields(const FilterableRun& run,
                                                                    Field field) {
  switch (field) {
    case Field::kParam:
      return run.params;
    case Field::kLabel:
      return run.labels;
    default:
      return run.attributes;
  }
}

bool CompareMatches(const Node& n, const FilterableRun& run) {
  if (n.field == Field::kMetric) {
    const auto it = run.metrics.find(n.key);
    const bool present = it != run.metrics.end();
    if (n.op == Op::kIsNull) return !present;
    if (n.op == Op::kIsNotNull) return present;
    if (!present) return false;
    const double v = it->second;
    return CompareWith(n,
                       [v](Op op, const Literal& lit) { return NumberHolds(v, op, lit.number); });
  }
  const auto& fields = StringFields(run, n.field);
  const auto it = fields.find(n.key);
  const bool present = it != fields.end();
  if (n.op == Op::kIsNull) return !present;
  if (n.op == Op::kIsNotNull) return present;
  if (!present) return false;
  const std::string_view s = it->second;
  switch (n.op) {
    case Op::kLike:
    case Op::kILike:
      return LikeMatches(s, n.pattern, n.op == Op::kILike);
    case Op::kNotLike:
    case Op::kNotILike:
      return !LikeMatches(s, n.pattern, n.op == Op::kNotILike);
    default:
      break;
  }
  std::optional<double> number;
  for (const Literal& lit : n.values) {
    if (lit.is_number) {
      number = ParseDouble(s);
      break;
    }
  }
  return CompareWith(n, [&](Op op, const Literal& lit) { return StringHolds(s, number, op, lit); });
}

bool NodeMatches(const Node& n, const FilterableRun& run) {
  switch (n.kind) {
    case Node::Kind::kAnd:
      for (const Node& c : n.children) {
        if (!NodeMatches(c, run)) return false;
      }
      return true;
    case Node::Kind::kOr:
      for (const Node& c : n.children) {
        if (NodeMatches(c, run)) return true;
      }
      return false;
    case Node::Kind::kNot:
      return !NodeMatches(n.children.front(), run);
    case Node::Kind::kCompare:
      return CompareMatches(n, run);
  }
  return false;
}

// ---------------------------------------------------------------- printing

std::string_view PrefixName(Field field) {
  switch (field) {
    case Field::kParam:
      return "params";
    case Field::kMetric:
      return "metrics";
    case Field::kLabel:
      return "labels";
    case Field::kAttribute:
      return "attributes";
  }
  return "attributes";
}

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kEq:
      return "=";
    case Op::kNe:
      return "!=";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kLike:
      return "LIKE";
    case Op::kNotLike:
      return "NOT LIKE";
    case Op::kILike:
      return "ILIKE";
    case Op::kNotILike:
      return "NOT ILIKE";
    case Op::kIn:
      return "IN";
    case Op::kNotIn:
      return "NOT IN";
    case Op::kIsNull:
      return "IS NULL";
    case Op::kIsNotNull:
      return "IS NOT NULL";
  }
  return "=";
}

void AppendQuoted(std::string_view s, char quote, std::string* out) {
  *out += quote;
  for (const char c : s) {
    if (c == '\\' || c == quote) {
      *out += '\\';
      *out += c;
    } else if (c == '\n') {
      *out += "\\n";
    } else if (c == '\t') {
      *out += "\\t";
    } else if (c == '\r') {
      *out += "\\r";
    } else {
      *out += c;
    }
  }
  *out += quote;
}

// True when the key reads back unquoted after a prefix: segments joined by dots.
bool IsBareKey(std::string_view key) {
  bool segment_start = true;
  for (const char c : key) {
    if (c == '.') {
      if (segment_start) return false;
      segment_start = true;
    } else if (segment_start ? IsSegmentStart(c) : IsNameChar(c)) {
      segment_start = false;
    } else {
      return false;
    }
  }
  return !segment_start;
}

void AppendColumn(Field field, std::string_view key, std::string* out) {
  *out += PrefixName(field);
  *out += '.';
  if (IsBareKey(key)) {
    *out += key;
  } else {
    AppendQuoted(key, '`', out);
  }
}

std::string ColumnText(Field field, std::string_view key) {
  std::string out;
  AppendColumn(field, key, &out);
  return out;
}

void AppendLiteral(const Literal& lit, std::string* out) {
  if (lit.is_number) {
    *out += FormatDouble(lit.number);
  } else {
    AppendQuoted(lit.text, '\'', out);
  }
}

void AppendNode(const Node& n, std::string* out) {
  const auto append_child = [out](const Node& child, bool parenthesize) {
    if (parenthesize) *out += '(';
    AppendNode(child, out);
    if (parenthesize) *out += ')';
  };
  switch (n.kind) {
    case Node::Kind::kOr:
    case Node::Kind::kAnd: {
      const bool is_and = n.kind == Node::Kind::kAnd;
      for (size_t i = 0; i < n.children.size(); ++i) {
        if (i > 0) *out += is_and ? " AND " : " OR ";
        const Node& c = n.children[i];
        append_child(c, c.kind == Node::Kind::kOr || (is_and && c.kind == Node::Kind::kAnd));
      }
      return;
    }
    case Node::Kind::kNot: {
      const Node& c = n.children.front();
      *out += "NOT ";
      append_child(c, c.kind == Node::Kind::kAnd || c.kind == Node::Kind::kOr);
      return;
    }
    case Node::Kind::kCompare:
      AppendColumn(n.field, n.key, out);
      *out += ' ';
      *out += OpName(n.op);
      if (n.op == Op::kIn || n.op == Op::kNotIn) {
        *out += " (";
        for (size_t i = 0; i < n.values.size(); ++i) {
          if (i > 0) *out += ", ";
          AppendLiteral(n.values[i], out);
        }
        *out += ')';
      } else if (!n.values.empty()) {
        *out += ' ';
        AppendLiteral(n.values.front(), out);
      }
      return;
  }
}

void CollectKeys(const Node& n, Field field, std::set<std::string>* keys) {
  if (n.kind == Node::Kind::kCompare) {
    if (n.field == field) keys->insert(n.key);
    return;
  }
  for (const Node& c : n.children) CollectKeys(c, field, keys);
}

// ---------------------------------------------------------------- parsing

constexpr std::string_view kExpectedColumn =
    "expected a column such as params.lr, metrics.loss or state, got ";
constexpr std::string_view kExpectedOperator =
    "expected a comparison operator (=, !=, <, <=, >, >=, LIKE, ILIKE, IN, IS), got ";
constexpr std::string_view kExpectedValue = "expected a number or a quoted string, got ";

std::optional<Field> PrefixField(std::string_view word) {
  static constexpr std::pair<std::string_view, Field> kPrefixes[] = {
      {"params", Field::kParam},         {"param", Field::kParam},
      {"metrics", Field::kMetric},       {"metric", Field::kMetric},
      {"attributes", Field::kAttribute}, {"attribute", Field::kAttribute},
      {"attr", Field::kAttribute},       {"run", Field::kAttribute},
      {"labels", Field::kLabel},         {"label", Field::kLabel},
      {"tags", Field::kLabel},           {"tag", Field::kLabel},
  };
  for (const auto& [name, field] : kPrefixes) {
    if (EqualsIgnoringCase(word, name)) return field;
  }
  return std::nullopt;
}

bool IsKeyword(std::string_view word) {
  for (const std::string_view kw : {"AND", "OR", "NOT", "LIKE", "ILIKE", "IN", "IS", "NULL"}) {
    if (EqualsIgnoringCase(word, kw)) return true;
  }
  return false;
}

struct Column {
  Field field = Field::kAttribute;
  std::string key;
};

class Parser {
 public:
  Parser(std::string_view text, const RunFilterOptions& options) : text_(text), options_(options) {}

  // The root, or nullopt for a filter that matches everything.
  Result<std::optional<Node>> Parse() {
    SkipSpace();
    if (AtEnd()) return std::optional<Node>();
    TY_ASSIGN_OR_RETURN(Node root, ParseOr(0));
    SkipSpace();
    if (!AtEnd()) {
      return Error(pos_, "expected AND, OR or the end of the filter, got " + Got(pos_));
    }
    return std::optional<Node>(std::move(root));
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t at) const { return at < text_.size() ? text_[at] : '\0'; }

  void SkipSpace() {
    while (!AtEnd() && IsSpace(text_[pos_])) ++pos_;
  }

  Status Error(size_t at, std::string_view what) const {
    return InvalidArgument("filter: column " + std::to_string(ColumnAt(text_, at)) + ": " +
                           std::string(what));
  }

  // Length of the name-like word at `at`: [A-Za-z_][A-Za-z0-9_-]*, or 0.
  size_t WordSize(size_t at) const {
    if (!IsNameStart(Peek(at))) return 0;
    size_t end = at + 1;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    return end - at;
  }

  // Offset just past the quoted text that opens at `at` (or the end of the text).
  size_t QuotedEnd(size_t at) const {
    const char quote = text_[at];
    size_t i = at + 1;
    while (i < text_.size()) {
      if (text_[i] == '\\') {
        i += 2;
      } else if (text_[i] == quote) {
        return i + 1;
      } else {
        ++i;
      }
    }
    return text_.size();
  }

  bool AtNumber(size_t at) const {
    const char c = Peek(at);
    if (IsDigit(c)) return true;
    if (c == '.') return IsDigit(Peek(at + 1));
    if (c == '-') return IsDigit(Peek(at + 1)) || (Peek(at + 1) == '.' && IsDigit(Peek(at + 2)));
    return false;
  }

  // Offset just past the number-like text at `at` (where AtNumber holds).
  size_t NumberEnd(size_t at) const {
    size_t end = at + 1;
    while (end < text_.size() && (IsNameChar(text_[end]) || text_[end] == '.' ||
                                  (text_[end] == '+' && FoldAscii(text_[end - 1]) == 'e'))) {
      ++end;
    }
    return end;
  }

  // What stands at `at`, for "got ...".
  std::string Got(size_t at) const {
    if (at >= text_.size()) return "the end of the filter";
    const char c = text_[at];
    if (IsSpace(c)) return "a blank";
    if (c == '\'' || c == '"') {
      return "the string " + Excerpt(text_.substr(at, QuotedEnd(at) - at));
    }
    if (c == '`') return "the key " + Excerpt(text_.substr(at, QuotedEnd(at) - at));
    if (AtNumber(at)) return "the number " + Excerpt(text_.substr(at, NumberEnd(at) - at));
    size_t end = at;
    if (IsNameStart(c)) {
      while (end < text_.size() && (IsNameChar(text_[end]) || text_[end] == '.')) ++end;
    } else if (std::string_view("=!<>").find(c) != std::string_view::npos) {
      end = at + 1;
      if (Peek(end) == '=' || (c == '<' && Peek(end) == '>')) ++end;
    } else {
      end = at + CharSize(text_, at);
    }
    return "\"" + Excerpt(text_.substr(at, end - at)) + "\"";
  }

  // At a keyword `kw` (whole word, not the prefix of a column such as not.x)?
  bool AtKeyword(std::string_view kw) {
    SkipSpace();
    const size_t n = WordSize(pos_);
    if (n == 0 || !EqualsIgnoringCase(text_.substr(pos_, n), kw)) return false;
    const char next = Peek(pos_ + n);
    return next != '.' && next != '`';
  }

  bool ConsumeKeyword(std::string_view kw) {
    if (!AtKeyword(kw)) return false;
    pos_ += kw.size();
    return true;
  }

  Status DepthError(size_t at) const {
    return Error(at, "nested more than " + std::to_string(kMaxFilterDepth) +
                         " levels deep (each \"(\" and NOT counts); simplify the filter");
  }

  // Appends `child` to an AND/OR node, splicing in a child of the same kind.
  static void Append(Node* parent, Node child) {
    if (child.kind == parent->kind) {
      for (Node& c : child.children) parent->children.push_back(std::move(c));
    } else {
      parent->children.push_back(std::move(child));
    }
  }

  Result<Node> ParseOr(int depth) {
    TY_ASSIGN_OR_RETURN(Node first, ParseAnd(depth));
    if (!AtKeyword("OR")) return first;
    Node node;
    node.kind = Node::Kind::kOr;
    Append(&node, std::move(first));
    while (ConsumeKeyword("OR")) {
      TY_ASSIGN_OR_RETURN(Node next, ParseAnd(depth));
      Append(&node, std::move(next));
    }
    return node;
  }

  Result<Node> ParseAnd(int depth) {
    TY_ASSIGN_OR_RETURN(Node first, ParseNot(depth));
    if (!AtKeyword("AND")) return first;
    Node node;
    node.kind = Node::Kind::kAnd;
    Append(&node, std::move(first));
    while (ConsumeKeyword("AND")) {
      TY_ASSIGN_OR_RETURN(Node next, ParseNot(depth));
      Append(&node, std::move(next));
    }
    return node;
  }

  Result<Node> ParseNot(int depth) {
    if (AtKeyword("NOT")) {
      if (depth >= kMaxFilterDepth) return DepthError(pos_);
      pos_ += 3;
      TY_ASSIGN_OR_RETURN(Node child, ParseNot(depth + 1));
      Node node;
      node.kind = Node::Kind::kNot;
      node.children.push_back(std::move(child));
      return node;
    }
    SkipSpace();
    if (Peek(pos_) == '(') {
      const size_t open = pos_;
      if (depth >= kMaxFilterDepth) return DepthError(open);
      ++pos_;
      TY_ASSIGN_OR_RETURN(Node inner, ParseOr(depth + 1));
      SkipSpace();
      if (Peek(pos_) != ')') {
        return Error(pos_, "expected AND, OR or \")\" to close the \"(\" at column " +
                               std::to_string(ColumnAt(text_, open)) + ", got " + Got(pos_));
      }
      ++pos_;
      return inner;
    }
    return ParseComparison();
  }

  // Text in quotes (', " or `) opening at pos_, escapes resolved.
  Result<std::string> ParseQuoted() {
    const size_t open = pos_;
    const char quote = text_[pos_++];
    std::string out;
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == quote) {
        ++pos_;
        return out;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= text_.size()) break;
      const char e = text_[pos_ + 1];
      switch (e) {
        case '\\':
        case '\'':
        case '"':
        case '`':
          out += e;
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        default:
          out += '\\';
          out += e;
      }
      pos_ += 2;
    }
    const std::string what = quote == '`' ? "key" : "string";
    return Error(
        open, "unterminated " + what + ": the " + std::string(1, quote) + " here is never closed");
  }

  Result<Column> ParseColumn() {
    SkipSpace();
    const size_t start = pos_;
    const char c = Peek(pos_);
    if (!IsNameStart(c) && c != '`') return Error(pos_, std::string(kExpectedColumn) + Got(pos_));
    std::string first;
    const bool bare = c != '`';
    if (bare) {
      const size_t n = WordSize(pos_);
      first = std::string(text_.substr(pos_, n));
      pos_ += n;
    } else {
      TY_ASSIGN_OR_RETURN(first, ParseQuoted());
    }
    Column column;
    size_t key_at = start;
    if (Peek(pos_) != '.') {
      if (bare && IsKeyword(first)) return Error(start, std::string(kExpectedColumn) + Got(start));
      column.key = std::move(first);
    } else {
      const std::optional<Field> field = bare ? PrefixField(first) : std::nullopt;
      if (!field) {
        return Error(start, "unknown prefix \"" + Excerpt(first) +
                                "\"; use params., metrics., attributes. or labels.");
      }
      column.field = *field;
      bool first_segment = true;
      while (!AtEnd() && text_[pos_] == '.') {
        ++pos_;
        if (first_segment) key_at = pos_;
        if (!first_segment) column.key += '.';
        first_segment = false;
        const char s = Peek(pos_);
        if (s == '`') {
          TY_ASSIGN_OR_RETURN(std::string segment, ParseQuoted());
          column.key += segment;
        } else if (IsSegmentStart(s)) {
          const size_t from = pos_;
          while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
          column.key += text_.substr(from, pos_ - from);
        } else {
          return Error(pos_, "expected a key after \"" +
                                 Excerpt(text_.substr(start, pos_ - start)) +
                                 "\" (a name, or any text in backticks), got " + Got(pos_));
        }
      }
    }
    if (column.key.empty()) return Error(key_at, "empty key in backticks");
    if (column.field == Field::kAttribute && !options_.known_attributes.empty()) {
      bool known = false;
      std::string list;
      for (const std::string& name : options_.known_attributes) {
        known = known || name == column.key;
        if (!list.empty()) list += ", ";
        list += name;
      }
      if (!known) {
        return Error(start, "unknown attribute \"" + Excerpt(column.key) + "\"; known: " + list);
      }
    }
    return column;
  }

  Result<Literal> ParseNumber() {
    const size_t start = pos_;
    size_t p = pos_;
    if (text_[p] == '-') ++p;
    while (IsDigit(Peek(p))) ++p;
    if (Peek(p) == '.') {
      ++p;
      while (IsDigit(Peek(p))) ++p;
    }
    if (FoldAscii(Peek(p)) == 'e') {
      size_t q = p + 1;
      if (Peek(q) == '+' || Peek(q) == '-') ++q;
      if (IsDigit(Peek(q))) {
        while (IsDigit(Peek(q))) ++q;
        p = q;
      }
    }
    if (p < text_.size() && (IsNameChar(text_[p]) || text_[p] == '.')) {
      return Error(start,
                   "malformed number " + Excerpt(text_.substr(start, NumberEnd(start) - start)));
    }
    std::string_view digits = text_.substr(start, p - start);
    double v = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v,
                                     std::chars_format::general);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || !std::isfinite(v)) {
      return Error(start, "the number " + Excerpt(digits) + " is out of range");
    }
    pos_ = p;
    Literal lit;
    lit.is_number = true;
    lit.number = v;
    return lit;
  }

  // A value compared with `column`: metrics take numbers only.
  Result<Literal> ParseValue(const Column& column) {
    SkipSpace();
    const size_t at = pos_;
    const char c = Peek(pos_);
    if (c == '\'' || c == '"') {
      if (column.field == Field::kMetric) {
        return Error(at, Excerpt(ColumnText(column.field, column.key)) +
                             " is a number; compare it with a number, got " + Got(at));
      }
      TY_ASSIGN_OR_RETURN(std::string text, ParseQuoted());
      Literal lit;
      lit.text = std::move(text);
      return lit;
    }
    if (AtNumber(pos_)) return ParseNumber();
    const std::string expected =
        column.field == Field::kMetric ? "expected a number, got " : std::string(kExpectedValue);
    const size_t n = WordSize(at);
    if (n > 0 && EqualsIgnoringCase(text_.substr(at, n), "NULL")) {
      return Error(at, expected + Got(at) + "; to find runs without the key, write IS NULL");
    }
    if (n > 0 && column.field != Field::kMetric) {
      return Error(at, std::string(kExpectedValue) + Got(at) + "; quote text: '" +
                           Excerpt(text_.substr(at, n)) + "'");
    }
    return Error(at, expected + Got(at));
  }

  Result<Node> ParseComparison() {
    TY_ASSIGN_OR_RETURN(Column column, ParseColumn());
    Node node;
    node.kind = Node::Kind::kCompare;
    node.field = column.field;
    node.key = column.key;
    SkipSpace();
    const size_t op_at = pos_;
    static constexpr std::pair<std::string_view, Op> kSymbols[] = {
        {"==", Op::kEq}, {"!=", Op::kNe}, {"<>", Op::kNe}, {"<=", Op::kLe},
        {">=", Op::kGe}, {"=", Op::kEq},  {"<", Op::kLt},  {">", Op::kGt},
    };
    for (const auto& [symbol, op] : kSymbols) {
      if (text_.substr(pos_).starts_with(symbol)) {
        pos_ += symbol.size();
        node.op = op;
        TY_ASSIGN_OR_RETURN(Literal value, ParseValue(column));
        node.values.push_back(std::move(value));
        return node;
      }
    }
    const bool negated = ConsumeKeyword("NOT");
    if (ConsumeKeyword("LIKE")) {
      node.op = negated ? Op::kNotLike : Op::kLike;
    } else if (ConsumeKeyword("ILIKE")) {
      node.op = negated ? Op::kNotILike : Op::kILike;
    } else if (ConsumeKeyword("IN")) {
      node.op = negated ? Op::kNotIn : Op::kIn;
      TY_RETURN_IF_ERROR(ParseInList(column, &node));
      return node;
    } else if (negated) {
      SkipSpace();
      return Error(pos_, "expected LIKE, ILIKE or IN after NOT, got " + Got(pos_));
    } else if (ConsumeKeyword("IS")) {
      node.op = ConsumeKeyword("NOT") ? Op::kIsNotNull : Op::kIsNull;
      if (!ConsumeKeyword("NULL")) {
        SkipSpace();
        return Error(pos_, std::string(node.op == Op::kIsNull ? "expected NULL or NOT NULL after IS"
                                                              : "expected NULL after IS NOT") +
                               ", got " + Got(pos_));
      }
      return node;
    } else {
      return Error(op_at, std::string(kExpectedOperator) + Got(op_at));
    }
    // LIKE or ILIKE
    const std::string_view op_name = OpName(node.op);
    if (column.field == Field::kMetric) {
      return Error(op_at, std::string(op_name) + " does not apply to " +
                              Excerpt(ColumnText(column.field, column.key)) +
                              ", a number; use =, !=, <, <=, >, >=, IN or IS");
    }
    SkipSpace();
    const size_t pattern_at = pos_;
    if (Peek(pos_) != '\'' && Peek(pos_) != '"') {
      return Error(
          pos_, "expected a quoted pattern after " + std::string(op_name) + ", got " + Got(pos_));
    }
    TY_ASSIGN_OR_RETURN(std::string pattern, ParseQuoted());
    const bool fold = node.op == Op::kILike || node.op == Op::kNotILike;
    if (!CompileLike(pattern, fold, &node.pattern)) {
      return Error(pattern_at,
                   "the pattern ends in a lone backslash, which escapes nothing; to match a "
                   "backslash, write \\\\\\\\ in the quotes");
    }
    Literal lit;
    lit.text = std::move(pattern);
    node.values.push_back(std::move(lit));
    return node;
  }

  Status ParseInList(const Column& column, Node* node) {
    SkipSpace();
    if (Peek(pos_) != '(') {
      return Error(pos_, "expected \"(\" after IN, got " + Got(pos_));
    }
    ++pos_;
    while (true) {
      TY_ASSIGN_OR_RETURN(Literal value, ParseValue(column));
      node->values.push_back(std::move(value));
      SkipSpace();
      const char c = Peek(pos_);
      if (c != ',' && c != ')') {
        return Error(pos_, "expected \",\" or \")\" in the IN list, got " + Got(pos_));
      }
      ++pos_;
      if (c == ')') return Status::Ok();
    }
  }

  std::string_view text_;
  const RunFilterOptions& options_;
  size_t pos_ = 0;
};

}  // namespace

RunFilter::RunFilter() = default;

RunFilter::RunFilter(std::shared_ptr<const RunFilterNode> root) : root_(std::move(root)) {}

Result<RunFilter> RunFilter::Parse(std::string_view text, const RunFilterOptions& options) {
  if (text.size() > kMaxFilterBytes) {
    return InvalidArgument("filter: is " + std::to_string(text.size()) +
                           " bytes long; the limit is " + std::to_string(kMaxFilterBytes) +
                           " bytes");
  }
  if (const size_t bad = FirstInvalidUtf8(text); bad != std::string_view::npos) {
    return InvalidArgument("filter: column " + std::to_string(ColumnAt(text, bad)) +
                           ": not valid UTF-8 (byte 0x" + HexByte(text[bad]) + ")");
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (IsControl(text[i]) && !IsSpace(text[i])) {
      return InvalidArgument("filter: column " + std::to_string(ColumnAt(text, i)) +
                             ": control character \\x" + HexByte(text[i]) + " is not allowed");
    }
  }
  Parser parser(text, options);
  TY_ASSIGN_OR_RETURN(std::optional<Node> root, parser.Parse());
  if (!root) return RunFilter();
  return RunFilter(std::make_shared<const Node>(std::move(*root)));
}

bool RunFilter::Matches(const FilterableRun& run) const {
  return root_ == nullptr || NodeMatches(*root_, run);
}

bool RunFilter::MatchesAll() const { return root_ == nullptr; }

std::string RunFilter::ToString() const {
  std::string out;
  if (root_ != nullptr) AppendNode(*root_, &out);
  return out;
}

namespace {
std::vector<std::string> KeysOf(const Node* root, Field field) {
  std::set<std::string> keys;
  if (root != nullptr) CollectKeys(*root, field, &keys);
  return {keys.begin(), keys.end()};
}
}  // namespace

std::vector<std::string> RunFilter::MetricKeys() const {
  return KeysOf(root_.get(), Field::kMetric);
}
std::vector<std::string> RunFilter::ParamKeys() const { return KeysOf(root_.get(), Field::kParam); }
std::vector<std::string> RunFilter::AttributeKeys() const {
  return KeysOf(root_.get(), Field::kAttribute);
}
std::vector<std::string> RunFilter::LabelKeys() const { return KeysOf(root_.get(), Field::kLabel); }

}  // namespace trainyard::track
