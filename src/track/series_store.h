// SeriesStore: the durable home of every run's metric series and logged params, in a
// SQLite database of its own beside the state store (`<data-dir>/series.db`), so that
// metric ingestion never queues behind control-plane commits.
//
// A series is identified by (run, key, rank) and holds points in blocks (series.h).
// Appends are durable when Append returns (one transaction per call: callers batch).
// Each call writes the new points of a series as one small block; once a series' small
// blocks at its end hold kMaxBlockPoints points they are merged into full blocks, so
// a point is written at most twice and a series costs ~11 bytes a point on disk.
//
// Steps never decrease within a series: a point whose step is below the series' last
// step first removes every stored point from that step on (a run resumed from an
// earlier checkpoint re-logs those steps; the newest attempt's values win), so reads
// see one continuous history keyed by step.
//
// Thread-safety: every method may be called from any thread. Appends are serialised
// on the writer connection; reads use a connection of their own (WAL), so a long read
// does not hold up ingestion.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "track/series.h"

struct sqlite3;
struct sqlite3_stmt;

namespace trainyard::track {

struct SeriesAppend {
  int64_t run = 0;
  int32_t rank = 0;
  std::string key;
  std::vector<Point> points;  // in the order logged
};

// What a run's series holds, per (key, rank).
struct SeriesInfo {
  std::string key;
  int32_t rank = 0;
  int64_t count = 0;
  int64_t nan_count = 0;
  int64_t first_step = 0;
  Point last;      // the newest point
  double min = 0;  // over non-NaN values; NaN when there are none
  double max = 0;
};

struct SeriesStoreStats {
  int64_t bytes = 0;   // the database file and its WAL
  int64_t points = 0;  // stored points, all series
  int64_t blocks = 0;
  int64_t series = 0;
};

class SeriesStore {
 public:
  // Opens (creating if needed) the database at `path`.
  static Result<std::unique_ptr<SeriesStore>> Open(const std::string& path);
  ~SeriesStore();
  SeriesStore(const SeriesStore&) = delete;
  SeriesStore& operator=(const SeriesStore&) = delete;

  // Stores every append in one transaction: all or nothing.
  Status Append(const std::vector<SeriesAppend>& appends);
  // Sets params of a run (inserting or replacing by name), in one transaction.
  Status PutParams(int64_t run, const std::map<std::string, std::string>& params);

  // The run's params logged so far.
  Result<std::map<std::string, std::string>> Params(int64_t run);
  // Every series of the run, sorted by key then rank.
  Result<std::vector<SeriesInfo>> ListSeries(int64_t run);
  // The lowest rank that has a series of `key` in the run; nullopt when none has.
  Result<std::optional<int32_t>> LowestRank(int64_t run, const std::string& key);
  // The series downsampled (or raw points, with range.buckets == 0 and at most
  // kMaxRawPoints of them). NotFound when the run has no such series.
  Result<std::vector<Bucket>> Read(int64_t run, const std::string& key, int32_t rank,
                                   const SeriesRange& range);
  // Every point of a series in step order (exports).
  Result<std::vector<Point>> ReadAll(int64_t run, const std::string& key, int32_t rank);
  // Removes every series and param of the run.
  Status DeleteRun(int64_t run);

  Result<SeriesStoreStats> Stats();

  static constexpr int64_t kMaxRawPoints = 1'000'000;

 private:
  struct Connection;
  struct SeriesState;
  explicit SeriesStore(std::string path);

  Status AppendOne(const SeriesAppend& a);
  Result<SeriesState*> StateFor(int64_t run, const std::string& key, int32_t rank);
  Status LoadTail(SeriesState& s);
  Status Truncate(SeriesState& s, int64_t from_step);
  Status WriteBlock(SeriesState& s, int64_t block_no, std::span<const Point> points);
  Status FlushTail(SeriesState& s, std::span<const Point> fresh);
  Status DeleteBlocks(int64_t first_id, int64_t last_id);  // ids in [first, last]
  Result<int64_t> FindSeries(Connection& c, int64_t run, const std::string& key, int32_t rank);

  const std::string path_;
  std::unique_ptr<Connection> writer_;
  std::unique_ptr<Connection> reader_;
  std::mutex write_mu_;  // serialises appends; guards states_
  std::map<std::tuple<int64_t, std::string, int32_t>, std::unique_ptr<SeriesState>>
      states_;  // GUARDED_BY(write_mu_)
  std::mutex read_mu_;
};

}  // namespace trainyard::track
