#include "track/series_store.h"

#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

namespace trainyard::track {
namespace {

constexpr int kBlockBits = 32;
constexpr int64_t kBlockMask = (int64_t{1} << kBlockBits) - 1;

int64_t BlockId(int64_t series, int64_t block_no) { return (series << kBlockBits) | block_no; }
int64_t FirstId(int64_t series) { return BlockId(series, 0); }
int64_t LastId(int64_t series) { return BlockId(series, kBlockMask); }

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS series (
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  key TEXT NOT NULL,
  rank INTEGER NOT NULL,
  UNIQUE (run, key, rank)
);
-- id = series id << 32 | block number; blocks of a series in step order by id.
-- min, max and last are NULL where the value is NaN (SQLite stores NaN as NULL).
-- The encoded points are in block_data under the same id, so that scanning
-- summaries reads a few dense pages rather than one page per block.
CREATE TABLE IF NOT EXISTS blocks (
  id INTEGER PRIMARY KEY,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  first_time INTEGER NOT NULL,
  last_time INTEGER NOT NULL,
  count INTEGER NOT NULL,
  nan_count INTEGER NOT NULL,
  min REAL,
  max REAL,
  last REAL
);
CREATE TABLE IF NOT EXISTS block_data (
  id INTEGER PRIMARY KEY,
  data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS params (
  run INTEGER NOT NULL,
  name TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (run, name)
) WITHOUT ROWID;
PRAGMA user_version = 1;
)sql";

Status SqlError(sqlite3* db, int rc, std::string_view doing) {
  std::string m = "series store: " + std::string(doing) + ": " + sqlite3_errstr(rc);
  if (db != nullptr && sqlite3_errmsg(db) != nullptr)
    m += std::string(" (") + sqlite3_errmsg(db) + ")";
  if (rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB) return DataLoss(m);
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED || rc == SQLITE_FULL || rc == SQLITE_IOERR) {
    return Unavailable(m);
  }
  return Internal(m);
}

double ReadReal(sqlite3_stmt* st, int col) {
  if (sqlite3_column_type(st, col) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(st, col);
}

void BindReal(sqlite3_stmt* st, int index, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(st, index);
  } else {
    sqlite3_bind_double(st, index, v);
  }
}

// The summary columns first_step .. last, starting at column `col`.
BlockSummary ReadSummary(sqlite3_stmt* st, int col) {
  BlockSummary s;
  s.first_step = sqlite3_column_int64(st, col);
  s.last_step = sqlite3_column_int64(st, col + 1);
  s.first_time_ms = sqlite3_column_int64(st, col + 2);
  s.last_time_ms = sqlite3_column_int64(st, col + 3);
  s.count = static_cast<int32_t>(sqlite3_column_int64(st, col + 4));
  s.nan_count = static_cast<int32_t>(sqlite3_column_int64(st, col + 5));
  s.min = ReadReal(st, col + 6);
  s.max = ReadReal(st, col + 7);
  s.last = ReadReal(st, col + 8);
  return s;
}

constexpr const char* kSummaryColumns =
    "first_step, last_step, first_time, last_time, count, nan_count, min, max, last";

Status DecodeRow(sqlite3_stmt* st, int data_col, const BlockSummary& s, std::vector<Point>& out) {
  const void* blob = sqlite3_column_blob(st, data_col);
  int n = sqlite3_column_bytes(st, data_col);
  return DecodeBlock(std::string_view(static_cast<const char*>(blob), static_cast<size_t>(n)), s,
                     out);
}

}  // namespace

// One SQLite connection and its cached statements. Statements are reset when a
// Stmt goes away.
struct SeriesStore::Connection {
  sqlite3* db = nullptr;
  std::map<std::string, sqlite3_stmt*, std::less<>> cache;

  ~Connection() {
    for (auto& [_, st] : cache) sqlite3_finalize(st);
    if (db != nullptr) sqlite3_close_v2(db);
  }

  class Stmt {
   public:
    explicit Stmt(sqlite3_stmt* st) : st_(st) {}
    Stmt(const Stmt&) = delete;
    ~Stmt() {
      sqlite3_reset(st_);
      sqlite3_clear_bindings(st_);
    }
    sqlite3_stmt* get() const { return st_; }
    Stmt& Bind(int i, int64_t v) {
      sqlite3_bind_int64(st_, i, v);
      return *this;
    }
    Stmt& Bind(int i, std::string_view v) {
      sqlite3_bind_text64(st_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
      return *this;
    }
    Stmt& BindBlob(int i, std::string_view v) {
      sqlite3_bind_blob64(st_, i, v.data(), v.size(), SQLITE_TRANSIENT);
      return *this;
    }
    // True for a row, false when done.
    Result<bool> Step(std::string_view doing) {
      int rc = sqlite3_step(st_);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      return SqlError(sqlite3_db_handle(st_), rc, doing);
    }
    Status Run(std::string_view doing) {
      while (true) {
        TY_ASSIGN_OR_RETURN(bool row, Step(doing));
        if (!row) return Status::Ok();
      }
    }

   private:
    sqlite3_stmt* st_;
  };

  Result<std::unique_ptr<Stmt>> Prepare(std::string_view sql) {
    auto it = cache.find(sql);
    if (it == cache.end()) {
      sqlite3_stmt* st = nullptr;
      int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                  SQLITE_PREPARE_PERSISTENT, &st, nullptr);
      if (rc != SQLITE_OK) return SqlError(db, rc, "preparing " + std::string(sql));
      it = cache.emplace(std::string(sql), st).first;
    }
    return std::make_unique<Stmt>(it->second);
  }

  Status Exec(const char* sql, std::string_view doing) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) return SqlError(db, rc, doing);
    return Status::Ok();
  }

  static Result<std::unique_ptr<Connection>> Open(const std::string& path) {
    auto c = std::make_unique<Connection>();
    int rc =
        sqlite3_open_v2(path.c_str(), &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) return SqlError(c->db, rc, "opening " + path);
    sqlite3_busy_timeout(c->db, 10'000);
    TY_RETURN_IF_ERROR(c->Exec("PRAGMA journal_mode = WAL", "enabling WAL on " + path));
    TY_RETURN_IF_ERROR(c->Exec("PRAGMA synchronous = NORMAL", "setting synchronous on " + path));
    // Reads of long series touch many blocks: map the file rather than copy each page
    // through read(2), and keep more pages than SQLite's default 2 MiB.
    TY_RETURN_IF_ERROR(c->Exec("PRAGMA mmap_size = 1073741824", "setting mmap_size on " + path));
    TY_RETURN_IF_ERROR(c->Exec("PRAGMA cache_size = -32768", "setting cache_size on " + path));
    return c;
  }
};

// What the writer knows of a series: its id, where its next block goes and the
// points of the small blocks at its end (those not yet merged into full ones).
struct SeriesStore::SeriesState {
  int64_t id = 0;
  int64_t next_block = 0;
  bool has_points = false;
  int64_t last_step = 0;
  std::vector<Point> tail;
  std::vector<int64_t> tail_blocks;  // block numbers holding `tail`, in order
};

SeriesStore::SeriesStore(std::string path) : path_(std::move(path)) {}
SeriesStore::~SeriesStore() = default;

Result<std::unique_ptr<SeriesStore>> SeriesStore::Open(const std::string& path) {
  std::unique_ptr<SeriesStore> s(new SeriesStore(path));
  TY_ASSIGN_OR_RETURN(s->writer_, Connection::Open(path));
  TY_RETURN_IF_ERROR(s->writer_->Exec(kSchema, "creating the schema of " + path));
  TY_ASSIGN_OR_RETURN(s->reader_, Connection::Open(path));
  return s;
}

Result<int64_t> SeriesStore::FindSeries(Connection& c, int64_t run, const std::string& key,
                                        int32_t rank) {
  TY_ASSIGN_OR_RETURN(auto st, c.Prepare("SELECT id FROM series WHERE run = ?1 AND key = ?2 AND "
                                         "rank = ?3"));
  st->Bind(1, run).Bind(2, key).Bind(3, int64_t{rank});
  TY_ASSIGN_OR_RETURN(bool row, st->Step("finding a series"));
  if (!row) {
    return NotFound("run " + std::to_string(run) + " has no series \"" + key + "\" for rank " +
                    std::to_string(rank));
  }
  return static_cast<int64_t>(sqlite3_column_int64(st->get(), 0));
}

Result<SeriesStore::SeriesState*> SeriesStore::StateFor(int64_t run, const std::string& key,
                                                        int32_t rank) {
  auto k = std::make_tuple(run, key, rank);
  if (auto it = states_.find(k); it != states_.end()) return it->second.get();
  {
    TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare("INSERT OR IGNORE INTO series (run, key, rank) "
                                                  "VALUES (?1, ?2, ?3)"));
    st->Bind(1, run).Bind(2, key).Bind(3, int64_t{rank});
    TY_RETURN_IF_ERROR(st->Run("creating a series"));
  }
  auto state = std::make_unique<SeriesState>();
  TY_ASSIGN_OR_RETURN(state->id, FindSeries(*writer_, run, key, rank));
  TY_RETURN_IF_ERROR(LoadTail(*state));
  SeriesState* out = state.get();
  states_.emplace(std::move(k), std::move(state));
  return out;
}

Status SeriesStore::LoadTail(SeriesState& s) {
  s.has_points = false;
  s.tail.clear();
  s.tail_blocks.clear();
  TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare(std::string("SELECT id, ") + kSummaryColumns +
                                                ", data FROM blocks JOIN block_data USING (id) "
                                                "WHERE id BETWEEN ?1 AND ?2 ORDER BY id DESC "
                                                "LIMIT 1025"));
  st->Bind(1, FirstId(s.id)).Bind(2, LastId(s.id));
  std::vector<std::pair<int64_t, std::vector<Point>>> small;  // newest first
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st->Step("reading the end of a series"));
    if (!row) break;
    int64_t id = sqlite3_column_int64(st->get(), 0);
    BlockSummary sum = ReadSummary(st->get(), 1);
    if (!s.has_points) {
      s.has_points = true;
      s.last_step = sum.last_step;
      s.next_block = std::max(s.next_block, (id & kBlockMask) + 1);
    }
    if (sum.count >= kMaxBlockPoints) break;
    std::vector<Point> points;
    TY_RETURN_IF_ERROR(DecodeRow(st->get(), 10, sum, points));
    small.emplace_back(id & kBlockMask, std::move(points));
  }
  for (auto it = small.rbegin(); it != small.rend(); ++it) {
    s.tail_blocks.push_back(it->first);
    s.tail.insert(s.tail.end(), it->second.begin(), it->second.end());
  }
  return Status::Ok();
}

Status SeriesStore::WriteBlock(SeriesState& s, int64_t block_no, std::span<const Point> points) {
  BlockSummary sum = BlockSummary::Of(points);
  std::string data = EncodeBlock(points, sum);
  TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare("INSERT OR REPLACE INTO blocks (id, first_step, "
                                                "last_step, first_time, last_time, count, "
                                                "nan_count, min, max, last) VALUES (?1, ?2, ?3, "
                                                "?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  st->Bind(1, BlockId(s.id, block_no))
      .Bind(2, sum.first_step)
      .Bind(3, sum.last_step)
      .Bind(4, sum.first_time_ms)
      .Bind(5, sum.last_time_ms)
      .Bind(6, int64_t{sum.count})
      .Bind(7, int64_t{sum.nan_count});
  BindReal(st->get(), 8, sum.min);
  BindReal(st->get(), 9, sum.max);
  BindReal(st->get(), 10, sum.last);
  TY_RETURN_IF_ERROR(st->Run("writing a block"));
  TY_ASSIGN_OR_RETURN(auto put, writer_->Prepare("INSERT OR REPLACE INTO block_data (id, data) "
                                                 "VALUES (?1, ?2)"));
  put->Bind(1, BlockId(s.id, block_no)).BindBlob(2, data);
  return put->Run("writing a block");
}

Status SeriesStore::DeleteBlocks(int64_t first_id, int64_t last_id) {
  for (const char* sql : {"DELETE FROM blocks WHERE id BETWEEN ?1 AND ?2",
                          "DELETE FROM block_data WHERE id BETWEEN ?1 AND ?2"}) {
    TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare(sql));
    st->Bind(1, first_id).Bind(2, last_id);
    TY_RETURN_IF_ERROR(st->Run("deleting blocks"));
  }
  return Status::Ok();
}

Status SeriesStore::FlushTail(SeriesState& s, std::span<const Point> fresh) {
  if (fresh.empty()) return Status::Ok();
  if (s.tail.size() + fresh.size() < static_cast<size_t>(kMaxBlockPoints)) {
    int64_t no = s.next_block++;
    TY_RETURN_IF_ERROR(WriteBlock(s, no, fresh));
    s.tail.insert(s.tail.end(), fresh.begin(), fresh.end());
    s.tail_blocks.push_back(no);
    return Status::Ok();
  }
  // Merge: the small blocks at the end and the fresh points become full blocks and at
  // most one small one.
  for (int64_t no : s.tail_blocks) {
    TY_RETURN_IF_ERROR(DeleteBlocks(BlockId(s.id, no), BlockId(s.id, no)));
  }
  std::vector<Point> all = std::move(s.tail);
  all.insert(all.end(), fresh.begin(), fresh.end());
  s.tail.clear();
  s.tail_blocks.clear();
  std::span<const Point> rest(all);
  while (!rest.empty()) {
    size_t n = std::min<size_t>(rest.size(), kMaxBlockPoints);
    int64_t no = s.next_block++;
    TY_RETURN_IF_ERROR(WriteBlock(s, no, rest.first(n)));
    if (n < static_cast<size_t>(kMaxBlockPoints)) {
      s.tail.assign(rest.begin(), rest.end());
      s.tail_blocks.push_back(no);
    }
    rest = rest.subspan(n);
  }
  return Status::Ok();
}

Status SeriesStore::Truncate(SeriesState& s, int64_t from_step) {
  struct Row {
    int64_t id;
    BlockSummary sum;
    std::vector<Point> keep;
  };
  std::vector<Row> rows;
  {
    TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare(std::string("SELECT id, ") + kSummaryColumns +
                                                  ", data FROM blocks JOIN block_data USING (id) "
                                                  "WHERE id BETWEEN ?1 AND ?2 AND last_step >= "
                                                  "?3 ORDER BY id"));
    st->Bind(1, FirstId(s.id)).Bind(2, LastId(s.id)).Bind(3, from_step);
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, st->Step("finding points to replace"));
      if (!row) break;
      Row r{sqlite3_column_int64(st->get(), 0), ReadSummary(st->get(), 1), {}};
      if (r.sum.first_step < from_step) {
        std::vector<Point> points;
        TY_RETURN_IF_ERROR(DecodeRow(st->get(), 10, r.sum, points));
        for (const Point& p : points) {
          if (p.step < from_step) r.keep.push_back(p);
        }
      }
      rows.push_back(std::move(r));
    }
  }
  for (const Row& r : rows) {
    if (r.keep.empty()) {
      TY_RETURN_IF_ERROR(DeleteBlocks(r.id, r.id));
    } else {
      TY_RETURN_IF_ERROR(WriteBlock(s, r.id & kBlockMask, r.keep));
    }
  }
  return LoadTail(s);
}

Status SeriesStore::AppendOne(const SeriesAppend& a) {
  if (a.points.empty()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(SeriesState * s, StateFor(a.run, a.key, a.rank));
  std::span<const Point> points(a.points);
  size_t start = 0;  // points[start, i) are not written yet
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    if (s->has_points && p.step < s->last_step) {
      TY_RETURN_IF_ERROR(FlushTail(*s, points.subspan(start, i - start)));
      start = i;
      TY_RETURN_IF_ERROR(Truncate(*s, p.step));
    }
    s->has_points = true;
    s->last_step = p.step;
  }
  return FlushTail(*s, points.subspan(start));
}

Status SeriesStore::Append(const std::vector<SeriesAppend>& appends) {
  std::lock_guard lock(write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE", "starting an append"));
  Status status = Status::Ok();
  for (const SeriesAppend& a : appends) {
    status = AppendOne(a);
    if (!status.ok()) break;
  }
  if (status.ok()) status = writer_->Exec("COMMIT", "committing an append");
  if (!status.ok()) {
    writer_->Exec("ROLLBACK", "rolling back an append").IgnoreError();  // may have ended
    states_.clear();  // what the writer knew may not be what was stored
  }
  return status;
}

Status SeriesStore::PutParams(int64_t run, const std::map<std::string, std::string>& params) {
  if (params.empty()) return Status::Ok();
  std::lock_guard lock(write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE", "starting to write params"));
  Status status = Status::Ok();
  for (const auto& [name, value] : params) {
    auto st =
        writer_->Prepare("INSERT OR REPLACE INTO params (run, name, value) VALUES (?1, ?2, ?3)");
    if (!st.ok()) {
      status = st.status();
      break;
    }
    (*st)->Bind(1, run).Bind(2, name).Bind(3, value);
    status = (*st)->Run("writing a param");
    if (!status.ok()) break;
  }
  if (status.ok()) status = writer_->Exec("COMMIT", "committing params");
  if (!status.ok()) writer_->Exec("ROLLBACK", "rolling back params").IgnoreError();
  return status;
}

Result<std::map<std::string, std::string>> SeriesStore::Params(int64_t run) {
  std::lock_guard lock(read_mu_);
  TY_ASSIGN_OR_RETURN(auto st, reader_->Prepare("SELECT name, value FROM params WHERE run = ?1"));
  st->Bind(1, run);
  std::map<std::string, std::string> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st->Step("reading params"));
    if (!row) break;
    auto text = [&](int col) {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st->get(), col));
      return std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(st->get(), col)));
    };
    out.emplace(text(0), text(1));
  }
  return out;
}

Result<std::vector<SeriesInfo>> SeriesStore::ListSeries(int64_t run) {
  std::lock_guard lock(read_mu_);
  // One query: each series' aggregates over its blocks, and its newest block's last
  // point (a series with no blocks left is not listed).
  TY_ASSIGN_OR_RETURN(
      auto st,
      reader_->Prepare("WITH agg AS (SELECT s.key AS key, s.rank AS rank, SUM(b.count) AS n, "
                       "SUM(b.nan_count) AS nans, MIN(b.first_step) AS first, MIN(b.min) AS lo, "
                       "MAX(b.max) AS hi, MAX(b.id) AS last_id FROM series s JOIN blocks b ON "
                       "b.id BETWEEN (s.id << 32) AND ((s.id << 32) | 4294967295) WHERE s.run = "
                       "?1 GROUP BY s.id) SELECT agg.key, agg.rank, agg.n, agg.nans, agg.first, "
                       "agg.lo, agg.hi, l.last_step, l.last_time, l.last FROM agg JOIN blocks l "
                       "ON l.id = agg.last_id ORDER BY agg.key, agg.rank"));
  st->Bind(1, run);
  std::vector<SeriesInfo> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st->Step("listing series"));
    if (!row) break;
    sqlite3_stmt* q = st->get();
    SeriesInfo info;
    const auto* k = reinterpret_cast<const char*>(sqlite3_column_text(q, 0));
    info.key = k ? k : "";
    info.rank = static_cast<int32_t>(sqlite3_column_int64(q, 1));
    info.count = sqlite3_column_int64(q, 2);
    info.nan_count = sqlite3_column_int64(q, 3);
    info.first_step = sqlite3_column_int64(q, 4);
    info.min = ReadReal(q, 5);
    info.max = ReadReal(q, 6);
    info.last = {sqlite3_column_int64(q, 7), sqlite3_column_int64(q, 8), ReadReal(q, 9)};
    if (info.count > 0) out.push_back(std::move(info));
  }
  return out;
}

Result<std::optional<int32_t>> SeriesStore::LowestRank(int64_t run, const std::string& key) {
  std::lock_guard lock(read_mu_);
  TY_ASSIGN_OR_RETURN(auto st, reader_->Prepare("SELECT MIN(rank) FROM series WHERE run = ?1 "
                                                "AND key = ?2"));
  st->Bind(1, run).Bind(2, key);
  TY_ASSIGN_OR_RETURN(bool row, st->Step("finding a series' ranks"));
  if (!row || sqlite3_column_type(st->get(), 0) == SQLITE_NULL) return std::optional<int32_t>();
  return std::optional<int32_t>(static_cast<int32_t>(sqlite3_column_int64(st->get(), 0)));
}

Result<std::vector<Bucket>> SeriesStore::Read(int64_t run, const std::string& key, int32_t rank,
                                              const SeriesRange& range) {
  std::lock_guard lock(read_mu_);
  TY_ASSIGN_OR_RETURN(int64_t id, FindSeries(*reader_, run, key, rank));
  std::vector<int64_t> block_ids;
  std::vector<BlockSummary> summaries;
  {
    TY_ASSIGN_OR_RETURN(auto st, reader_->Prepare(std::string("SELECT id, ") + kSummaryColumns +
                                                  " FROM blocks WHERE id BETWEEN ?1 AND ?2 AND "
                                                  "last_step >= ?3 AND first_step <= ?4 ORDER "
                                                  "BY id"));
    st->Bind(1, FirstId(id)).Bind(2, LastId(id)).Bind(3, range.from_step).Bind(4, range.to_step);
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, st->Step("reading block summaries"));
      if (!row) break;
      block_ids.push_back(sqlite3_column_int64(st->get(), 0));
      summaries.push_back(ReadSummary(st->get(), 1));
    }
  }
  if (range.buckets <= 0) {
    int64_t n = 0;
    for (const BlockSummary& s : summaries) n += s.count;
    if (n > kMaxRawPoints) {
      return ResourceExhausted("a raw read returns at most " + std::to_string(kMaxRawPoints) +
                               " points; this range holds about " + std::to_string(n) +
                               ": narrow the steps or ask for buckets");
    }
  }
  TY_ASSIGN_OR_RETURN(auto data, reader_->Prepare("SELECT data FROM block_data WHERE id = ?1"));
  sqlite3_stmt* raw = data->get();
  return Downsample(summaries, range, [&](size_t i, std::vector<Point>& out) -> Status {
    sqlite3_reset(raw);
    sqlite3_bind_int64(raw, 1, block_ids[i]);
    int rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW) return SqlError(reader_->db, rc, "reading a block");
    return DecodeRow(raw, 0, summaries[i], out);
  });
}

Result<std::vector<Point>> SeriesStore::ReadAll(int64_t run, const std::string& key, int32_t rank) {
  std::lock_guard lock(read_mu_);
  TY_ASSIGN_OR_RETURN(int64_t id, FindSeries(*reader_, run, key, rank));
  TY_ASSIGN_OR_RETURN(auto st, reader_->Prepare(std::string("SELECT ") + kSummaryColumns +
                                                ", data FROM blocks JOIN block_data USING (id) "
                                                "WHERE id BETWEEN ?1 AND ?2 ORDER BY id"));
  st->Bind(1, FirstId(id)).Bind(2, LastId(id));
  std::vector<Point> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, st->Step("reading a series"));
    if (!row) break;
    TY_RETURN_IF_ERROR(DecodeRow(st->get(), 9, ReadSummary(st->get(), 0), out));
  }
  return out;
}

Status SeriesStore::DeleteRun(int64_t run) {
  std::lock_guard lock(write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE", "starting to delete a run"));
  auto body = [&]() -> Status {
    std::vector<int64_t> ids;
    {
      TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare("SELECT id FROM series WHERE run = ?1"));
      st->Bind(1, run);
      while (true) {
        TY_ASSIGN_OR_RETURN(bool row, st->Step("listing a run's series"));
        if (!row) break;
        ids.push_back(sqlite3_column_int64(st->get(), 0));
      }
    }
    for (int64_t id : ids) {
      TY_RETURN_IF_ERROR(DeleteBlocks(FirstId(id), LastId(id)));
    }
    for (const char* sql :
         {"DELETE FROM series WHERE run = ?1", "DELETE FROM params WHERE run = ?1"}) {
      TY_ASSIGN_OR_RETURN(auto st, writer_->Prepare(sql));
      st->Bind(1, run);
      TY_RETURN_IF_ERROR(st->Run("deleting a run"));
    }
    return writer_->Exec("COMMIT", "committing a run's deletion");
  };
  Status status = body();
  if (!status.ok()) writer_->Exec("ROLLBACK", "rolling back").IgnoreError();
  std::erase_if(states_, [&](const auto& kv) { return std::get<0>(kv.first) == run; });
  return status;
}

Result<SeriesStoreStats> SeriesStore::Stats() {
  SeriesStoreStats out;
  {
    std::lock_guard lock(read_mu_);
    TY_ASSIGN_OR_RETURN(auto st, reader_->Prepare("SELECT COALESCE(SUM(count), 0), COUNT(*) FROM "
                                                  "blocks"));
    TY_ASSIGN_OR_RETURN(bool row, st->Step("counting points"));
    if (row) {
      out.points = sqlite3_column_int64(st->get(), 0);
      out.blocks = sqlite3_column_int64(st->get(), 1);
    }
    TY_ASSIGN_OR_RETURN(auto st2, reader_->Prepare("SELECT COUNT(*) FROM series"));
    TY_ASSIGN_OR_RETURN(bool row2, st2->Step("counting series"));
    if (row2) out.series = sqlite3_column_int64(st2->get(), 0);
  }
  std::error_code ec;
  for (const std::string& f : {path_, path_ + "-wal"}) {
    auto n = std::filesystem::file_size(f, ec);
    if (!ec) out.bytes += static_cast<int64_t>(n);
  }
  return out;
}

}  // namespace trainyard::track
