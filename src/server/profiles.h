// ProfileStore: on-demand profiles of running jobs (docs/runs.md, "Profiling"): each
// request, the state of every rank it asked, and the traces the ranks' agents upload.
//
//   <root>/<job>/<id>/request.json    the request and its ranks' states
//   <root>/<job>/<id>/rank-<r>.part   a trace while its agent uploads it
//   <root>/<job>/<id>/rank-<r>.json   a stored trace (Chrome trace JSON, as the rank wrote it)
//
// A request id is "p-<job>-<seq>", seq counting from 1 per job. A rank's state goes
// requested (a `profile` command is on its way to its agent) -> recording (the job's SDK
// began) -> stored, or to failed with a message that says why: the SDK could not
// record; the trace was refused (over kMaxProfileTraceBytes, or not JSON); the attempt
// ended first; nothing began recording within kProfileStartTimeout (the job does not
// log through the SDK); or a newer request for the rank replaced it before it began
// ("superseded": the SDK answers one request at a time, the latest, so the older one
// would never be answered; should it begin after all, what it uploads is still taken).
//
// Uploads come in chunks with the offset they start at, as logs do: a chunk that does
// not start where the server's copy ends is not written, and the reply's next_offset
// says where to resend from. Every chunk carries the size of the whole trace, so a trace
// over the cap is refused with its first chunk. When the last byte arrives the file is
// checked to be JSON (without building it in memory) and becomes the stored trace.
//
// request.json is rewritten (temporary file, then rename) whenever a rank changes state,
// before the change is visible, so a restarted server knows every request; an upload
// in flight goes on from the size of its .part file.
//
// Time comes from the injected Clock. Thread-safety: every method may be called from
// any thread. One mutex guards the requests and serialises the writes (a chunk is at
// most 1 MiB; the JSON check of a finished upload, up to 64 MiB, also runs under it).
// Stored traces never change, so ReadTrace reads the file without it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "core/units.h"
#include "server/clock.h"

namespace trainyard::server {

inline constexpr int64_t kMaxProfileTraceBytes = int64_t{64} << 20;  // per rank
inline constexpr int32_t kMaxProfileSteps = 10'000;
inline constexpr int32_t kDefaultProfileSteps = 20;
// A rank still "requested" this long after the request has not begun and will not.
inline constexpr Duration kProfileStartTimeout = std::chrono::minutes(5);
// Once its attempt has ended, a rank's upload may still finish for this long.
inline constexpr Duration kProfileUploadGrace = std::chrono::minutes(1);
// The most a merged trace (all ranks in one) may be; past it, ask for ranks one by one.
inline constexpr int64_t kMaxMergedProfileBytes = int64_t{256} << 20;

enum class ProfileState { kRequested, kRecording, kStored, kFailed };
std::string_view ProfileStateName(ProfileState s);  // "requested", "recording", ...
bool IsDone(ProfileState s);                        // stored or failed

struct ProfileRank {
  int32_t rank = 0;
  std::string node;
  ProfileState state = ProfileState::kRequested;
  std::string message;        // why it failed
  std::string superseded_by;  // failed because this newer request replaced it
  int64_t bytes = 0;          // of its trace: received so far, or stored
  Timestamp updated{};        // its last change (or upload progress)
};

struct ProfileRequest {
  std::string id;
  JobId job = 0;
  int32_t attempt = 0;
  int32_t steps = 0;
  Timestamp created{};
  std::string created_by;
  std::vector<ProfileRank> ranks;  // ascending rank

  // Every rank stored or failed.
  bool Done() const;
};

// A rank to ask, and the node its agent runs on.
struct ProfileTarget {
  int32_t rank = 0;
  std::string node;
};

// What an agent reports of one rank's profile (POST /api/v1/agent/profile).
struct ProfileReport {
  enum class Kind { kRecording, kFailed, kChunk };
  Kind kind = Kind::kChunk;
  std::string node;
  JobId job = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  std::string id;
  std::string message;      // kFailed
  int64_t offset = 0;       // kChunk: where `data` starts in the trace
  int64_t total_bytes = 0;  // kChunk: the whole trace's size
  std::string data;         // kChunk
};

struct ProfileReportReply {
  int64_t next_offset = 0;  // where the server's copy of the trace ends
  ProfileState state = ProfileState::kRequested;
  std::string message;  // when failed
};

// The sequence number of `id` when it is a well-formed request id of `job`
// ("p-<job>-<seq>", seq >= 1); nullopt otherwise.
std::optional<int64_t> ProfileSeq(std::string_view id, JobId job);

class ProfileStore {
 public:
  ProfileStore(std::string root, const Clock* clock);

  // Creates request p-<job>-<next seq> to record `steps` steps of `ranks` (at least
  // one, distinct) of attempt `attempt`, all "requested". Ranks among these that an
  // earlier request of the same attempt still has "requested" fail there as
  // superseded by this one. Returns the new request.
  Result<ProfileRequest> Create(JobId job, int32_t attempt, int32_t steps,
                                const std::vector<ProfileTarget>& ranks,
                                const std::string& created_by);
  // Fails every rank of request `id` that is not done, with `message` (e.g. its
  // commands could not be sent). NotFound when there is no such request.
  Status Abandon(JobId job, const std::string& id, const std::string& message);
  // The requests of `job`, oldest first, or one of them (NotFound, naming it). First
  // fails the ranks that can no longer answer: "requested" ones of an attempt that is
  // not `open_attempt` (the job's attempt that has not ended; nullopt when none) or
  // older than kProfileStartTimeout, and "recording" ones of an ended attempt with no
  // upload progress for kProfileUploadGrace.
  Result<std::vector<ProfileRequest>> List(JobId job, std::optional<int32_t> open_attempt);
  Result<ProfileRequest> Get(JobId job, const std::string& id, std::optional<int32_t> open_attempt);
  // Applies what an agent reports. NotFound for a request or rank that does not exist
  // (or a rank asked of another node); FailedPrecondition for another attempt or a
  // rank that failed (not superseded); ResourceExhausted, failing the rank, for a trace
  // over kMaxProfileTraceBytes; InvalidArgument for a chunk past total_bytes. A chunk
  // that does not start where the copy ends, or a report for a stored rank, changes
  // nothing: the reply says where the copy ends and the rank's state.
  Result<ProfileReportReply> Report(const ProfileReport& report);
  // The stored trace of `rank`: NotFound / FailedPrecondition (not stored yet, naming
  // its state) otherwise.
  Result<std::string> ReadTrace(JobId job, const std::string& id, int32_t rank);
  // Deletes every request and trace of `job` (log retention).
  Status DeleteJob(JobId job);

 private:
  struct JobProfiles {
    std::map<int64_t, ProfileRequest> requests;  // by seq
    int64_t last_seq = 0;
  };
  std::string RequestDir(JobId job, const std::string& id) const;
  std::string TracePath(JobId job, const std::string& id, int32_t rank, bool part) const;
  // The job's requests, read from disk on first use. REQUIRES: mu_ held.
  JobProfiles& LoadLocked(JobId job);
  Result<ProfileRequest*> FindLocked(JobId job, const std::string& id);
  // Writes request.json of `r`. REQUIRES: mu_ held.
  Status WriteLocked(const ProfileRequest& r);
  // Writes request.json for `next`, then makes it `current`. REQUIRES: mu_ held.
  Status SaveLocked(ProfileRequest& current, ProfileRequest next);
  // Fails the ranks of `r` that can no longer answer (see List). REQUIRES: mu_ held.
  Status SettleLocked(ProfileRequest& r, std::optional<int32_t> open_attempt);
  // The chunk part of Report. REQUIRES: mu_ held.
  Result<ProfileReportReply> AppendLocked(ProfileRequest& r, size_t index,
                                          const ProfileReport& report);

  const std::string root_;
  const Clock* const clock_;
  std::mutex mu_;
  std::map<JobId, JobProfiles> jobs_;  // GUARDED_BY(mu_)
};

// One trace for Perfetto of the ranks' stored traces, each Chrome trace JSON (an
// object with "traceEvents", or a bare array of events): every event of rank r gets
// pid r, so the ranks show as processes side by side, named "rank r"; the ranks' own
// process names are dropped, everything else is kept as is. `read` returns the text of
// a rank's trace; one is read at a time. DataLoss, naming the rank, for a trace that is
// not trace JSON; ResourceExhausted when the result would pass `max_bytes`.
Result<std::string> MergeProfileTraces(const std::string& id, const std::vector<int32_t>& ranks,
                                       const std::function<Result<std::string>(int32_t)>& read,
                                       int64_t max_bytes = kMaxMergedProfileBytes);

}  // namespace trainyard::server
