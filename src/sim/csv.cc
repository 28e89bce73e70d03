#include "sim/csv.h"

#include <algorithm>
#include <charconv>

#include "core/names.h"
#include "core/units.h"

namespace trainyard::sim {
namespace {

std::string Join(const std::vector<std::string_view>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += v[i];
  }
  return out;
}

// Messages from core validators start with "FIELD: "; the diagnostic names the field.
std::string StripField(const std::string& message, std::string_view field) {
  std::string prefix = std::string(field) + ": ";
  if (message.rfind(prefix, 0) == 0) return message.substr(prefix.size());
  return message;
}

}  // namespace

Result<CsvFile> CsvFile::Open(std::string_view text, std::string_view file,
                              const CsvColumns& columns) {
  CsvFile csv;
  csv.text_ = text;
  csv.file_ = std::string(file);
  csv.comments_ = columns.comments;
  if (text.substr(0, 3) == "\xEF\xBB\xBF") csv.pos_ = 3;
  std::vector<std::string_view> all = columns.required;
  all.insert(all.end(), columns.optional.begin(), columns.optional.end());
  auto found = csv.Next();
  if (!found.ok()) return found.status();
  if (!*found) {
    return InvalidArgument(
        csv.file_ + ": empty; " + std::string(columns.what) +
        " starts with a header line naming its columns: " + Join(columns.required));
  }
  csv.header_ = csv.cells_;
  std::vector<std::string> errors;
  auto at = [&](const std::string& column, const std::string& message) {
    errors.push_back(Diagnostic{csv.file_, csv.line_, column, message}.ToString());
  };
  for (size_t i = 0; i < csv.header_.size(); ++i) {
    const std::string& name = csv.header_[i];
    if (name.empty()) {
      at("", "column " + std::to_string(i + 1) + " of the header has no name");
      continue;
    }
    if (std::find(all.begin(), all.end(), name) == all.end()) {
      std::string msg = "unknown column";
      if (std::string hint = ClosestMatch(name, all); !hint.empty()) {
        msg += "; did you mean " + hint + "?";
      } else {
        msg += "; " + std::string(columns.what) + " has columns " + Join(all);
      }
      at(name, msg);
      continue;
    }
    if (std::find(csv.header_.begin(), csv.header_.begin() + static_cast<ptrdiff_t>(i), name) !=
        csv.header_.begin() + static_cast<ptrdiff_t>(i)) {
      at(name, "column appears twice in the header");
    }
  }
  for (std::string_view req : columns.required) {
    if (csv.Index(req) < 0) {
      at(std::string(req), "missing column; " + std::string(columns.what) + " needs columns " +
                               Join(columns.required));
    }
  }
  if (!errors.empty()) {
    std::string msg;
    for (const std::string& e : errors) msg += (msg.empty() ? "" : "\n") + e;
    return InvalidArgument(msg);
  }
  return csv;
}

bool CsvFile::SplitLine(std::string_view line, std::vector<std::string>& cells,
                        std::string& error) {
  size_t n = 0;
  size_t i = 0;
  while (true) {
    if (cells.size() <= n) cells.emplace_back();
    std::string& cell = cells[n++];
    cell.clear();
    // Blanks before an opening quote do not count.
    size_t j = i;
    while (j < line.size() && (line[j] == ' ' || line[j] == '\t')) ++j;
    if (j < line.size() && line[j] == '"') {
      i = j + 1;
      bool closed = false;
      while (i < line.size()) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            cell += '"';
            i += 2;
            continue;
          }
          closed = true;
          ++i;
          break;
        }
        cell += line[i++];
      }
      if (!closed) {
        error = "cell " + std::to_string(n) + " opens a quote that the line never closes";
        return false;
      }
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      if (i < line.size() && line[i] != ',') {
        error = "cell " + std::to_string(n) + " has text after its closing quote";
        return false;
      }
    } else {
      size_t comma = line.find(',', i);
      std::string_view raw = line.substr(i, comma == std::string_view::npos ? comma : comma - i);
      cell.assign(TrimBlanks(raw));
      i = comma == std::string_view::npos ? line.size() : comma;
    }
    if (i >= line.size()) break;
    ++i;  // past the comma
  }
  cells.resize(n);
  return true;
}

Result<bool> CsvFile::Next() {
  while (pos_ < text_.size()) {
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view line = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    line_ = next_line_++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view trimmed = TrimBlanks(line);
    if (trimmed.empty()) continue;
    if (comments_ && trimmed.front() == '#') continue;
    std::string error;
    if (!SplitLine(line, cells_, error)) return Error(-1, error);
    if (!header_.empty() && cells_.size() != header_.size()) {
      return Error(-1, "row has " + std::to_string(cells_.size()) + " cells, the header has " +
                           std::to_string(header_.size()));
    }
    return true;
  }
  cells_.clear();
  return false;
}

int CsvFile::Index(std::string_view column) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == column) return static_cast<int>(i);
  }
  return -1;
}

std::string_view CsvFile::Cell(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= cells_.size()) return {};
  return cells_[static_cast<size_t>(index)];
}

Diagnostic CsvFile::At(int index, std::string message) const {
  std::string column;
  if (index >= 0 && static_cast<size_t>(index) < header_.size()) {
    column = header_[static_cast<size_t>(index)];
  }
  return Diagnostic{file_, line_, std::move(column), std::move(message)};
}

Status CsvFile::Error(int index, std::string message) const {
  return InvalidArgument(At(index, std::move(message)).ToString());
}

Result<int64_t> CsvFile::Int(int index, int64_t lo, int64_t hi) const {
  std::string_view s = Cell(index);
  if (s.empty())
    return Error(
        index, "required: an integer between " + std::to_string(lo) + " and " + std::to_string(hi));
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec == std::errc::result_out_of_range) {
    return Error(index, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                            ", got " + QuoteForMessage(s));
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return Error(index, "must be an integer, got " + QuoteForMessage(s));
  }
  if (n < lo) return Error(index, "must be >= " + std::to_string(lo) + ", got " + std::string(s));
  if (n > hi) return Error(index, "must be <= " + std::to_string(hi) + ", got " + std::string(s));
  return n;
}

Result<std::optional<int64_t>> CsvFile::OptionalInt(int index, int64_t lo, int64_t hi) const {
  if (Cell(index).empty()) return std::optional<int64_t>();
  auto n = Int(index, lo, hi);
  if (!n.ok()) return n.status();
  return std::optional<int64_t>(*n);
}

Result<Duration> CsvFile::DurationCell(int index) const {
  std::string_view s = Cell(index);
  if (!s.empty() && s.front() == '-') {
    return Error(index, "must be >= 0, got " + QuoteForMessage(s));
  }
  auto d = ParseDuration(s);
  if (!d.ok()) return Error(index, d.status().message());
  return *d;
}

Result<std::string> CsvFile::NameCell(int index) const {
  std::string_view s = Cell(index);
  std::string column = index >= 0 ? header_[static_cast<size_t>(index)] : "";
  if (Status st = ValidateName(column, s); !st.ok()) {
    return Error(index, StripField(st.message(), column));
  }
  return std::string(s);
}

std::string CsvQuote(std::string_view text) {
  bool quote = !text.empty() && (text.front() == ' ' || text.front() == '\t' ||
                                 text.back() == ' ' || text.back() == '\t' || text.front() == '#');
  quote = quote || text.find_first_of(",\"\r\n") != std::string_view::npos;
  if (!quote) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace trainyard::sim
