// CsvFile: a comma-separated table with a header row, read row by row for the trace
// and cluster readers (traces.h, cluster.h), with every problem reported as
// `FILE:LINE: column: message`.
//
// The header names the columns; a format says which it requires and which it also
// accepts, so a missing or an unknown column (with a "did you mean" hint) is found
// before any row is read. Cells are trimmed of surrounding blanks; a cell may be
// double-quoted (RFC 4180: "" inside stands for one quote; quoted cells span no
// lines). Blank lines are skipped, and so are lines starting with '#' when the
// format allows comments. CRLF line ends and a UTF-8 byte-order mark are accepted.
//
// Private to sim/. Thread-safety: none; one reader per thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/job_spec.h"
#include "core/status.h"

namespace trainyard::sim {

struct CsvColumns {
  std::string_view what;  // "a pod list", for messages
  std::vector<std::string_view> required;
  std::vector<std::string_view> optional;
  bool comments = false;  // lines starting with '#' are skipped
};

class CsvFile {
 public:
  // Reads the header. Errors: no header, a repeated, missing or unknown column.
  // `text` must outlive the CsvFile.
  static Result<CsvFile> Open(std::string_view text, std::string_view file,
                              const CsvColumns& columns);

  // Moves to the next data row. Returns false at the end of the text; an error for
  // a row with the wrong number of cells or an unterminated quote.
  Result<bool> Next();

  // The column's index, or -1 when the header does not have it.
  int Index(std::string_view column) const;
  // The current row's cell of column `index` (trimmed, unquoted); "" when index < 0.
  std::string_view Cell(int index) const;
  int line() const { return line_; }
  const std::string& file() const { return file_; }

  // "FILE:LINE: COLUMN: MESSAGE" for the current row, as a Diagnostic and as an
  // InvalidArgument status.
  Diagnostic At(int index, std::string message) const;
  Status Error(int index, std::string message) const;

  // Typed cells; the error names the column, the value and what would be valid.
  // An integer in [lo, hi].
  Result<int64_t> Int(int index, int64_t lo, int64_t hi) const;
  // Like Int, but an empty cell gives nullopt.
  Result<std::optional<int64_t>> OptionalInt(int index, int64_t lo, int64_t hi) const;
  // A duration in ParseDuration's forms ("90s", "2h", "3600"); must be >= 0.
  Result<Duration> DurationCell(int index) const;
  // A name as ValidateName accepts.
  Result<std::string> NameCell(int index) const;

 private:
  CsvFile() = default;
  // Splits the line at `pos_` into cells; false with `error` set when malformed.
  bool SplitLine(std::string_view line, std::vector<std::string>& cells, std::string& error);

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 0;  // of the current row
  int next_line_ = 1;
  bool comments_ = false;
  std::vector<std::string> header_;
  std::vector<std::string> cells_;
};

// The cell form of `text` for writing: as is, or double-quoted when it holds a
// comma, a quote, a leading or trailing blank or a '#' at the start.
std::string CsvQuote(std::string_view text);

}  // namespace trainyard::sim
