#include "core/job.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace trainyard {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

constexpr JobState kAll[] = {JobState::kPending,   JobState::kAdmitted,   JobState::kStarting,
                             JobState::kRunning,   JobState::kPreempting, JobState::kLost,
                             JobState::kSucceeded, JobState::kFailed,     JobState::kCancelled};

Timestamp T(int64_t s) { return Timestamp(seconds(s)); }

Job NewJob() {
  Job j;
  j.id = 7;
  j.spec.name = "train";
  j.submit_time = T(0);
  return j;
}

TEST(JobTest, TransitionTableIsExactlyTheDocumentedOne) {
  using S = JobState;
  const std::set<std::pair<S, S>> legal = {
      {S::kPending, S::kAdmitted},     {S::kPending, S::kStarting},   {S::kPending, S::kCancelled},
      {S::kAdmitted, S::kStarting},    {S::kAdmitted, S::kPending},   {S::kAdmitted, S::kCancelled},
      {S::kStarting, S::kRunning},     {S::kStarting, S::kPending},   {S::kStarting, S::kFailed},
      {S::kStarting, S::kLost},        {S::kStarting, S::kCancelled}, {S::kRunning, S::kSucceeded},
      {S::kRunning, S::kFailed},       {S::kRunning, S::kCancelled},  {S::kRunning, S::kPreempting},
      {S::kRunning, S::kLost},         {S::kRunning, S::kPending},    {S::kPreempting, S::kPending},
      {S::kPreempting, S::kSucceeded}, {S::kPreempting, S::kFailed},  {S::kPreempting, S::kLost},
      {S::kPreempting, S::kCancelled}, {S::kLost, S::kPending},       {S::kLost, S::kFailed},
      {S::kLost, S::kCancelled},
  };
  for (S from : kAll) {
    for (S to : kAll) {
      EXPECT_EQ(CanTransition(from, to), legal.count({from, to}) == 1)
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
}

TEST(JobTest, IllegalTransitionIsRejectedAndChangesNothing) {
  Job j = NewJob();
  Job before = j;
  Status s = j.TransitionTo(JobState::kRunning, T(5), "x");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job 7: cannot go from Pending to Running");
  EXPECT_EQ(j, before);

  ASSERT_TRUE(j.TransitionTo(JobState::kCancelled, T(6), "by user").ok());
  Job cancelled = j;
  for (JobState to : kAll) {
    EXPECT_FALSE(j.TransitionTo(to, T(7), "").ok()) << JobStateName(to);
    EXPECT_FALSE(j.StartAttempt(T(7), {"n1"}).ok());
  }
  EXPECT_EQ(j, cancelled);
}

TEST(JobTest, FullLifeWithPreemptionAndResume) {
  Job j = NewJob();
  ASSERT_TRUE(j.TransitionTo(JobState::kAdmitted, T(1), "bound").ok());
  ASSERT_TRUE(j.StartAttempt(T(2), {"n1", "n2"}).ok());
  ASSERT_EQ(j.state, JobState::kStarting);
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, T(3), "").ok());
  j.checkpoint = CheckpointInfo{"/ckpt/step-100", 100, T(600), seconds(4)};
  ASSERT_TRUE(j.TransitionTo(JobState::kPreempting, T(900), "preempted by job 9").ok());
  EXPECT_EQ(j.LostWorkAt(T(900)), seconds(300));
  // Going back to Pending must close the attempt.
  EXPECT_FALSE(j.TransitionTo(JobState::kPending, T(910), "").ok());
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, T(910), ExitReason::kPreempted, 0, "preempted").ok());
  EXPECT_EQ(j.state, JobState::kPending);
  ASSERT_EQ(j.attempts.size(), 1u);
  EXPECT_EQ(j.attempts[0].lost_work, seconds(310));
  EXPECT_EQ(j.attempts[0].exit_reason, ExitReason::kPreempted);
  EXPECT_EQ(j.retries, 0);  // preemption is not a failure

  ASSERT_TRUE(j.StartAttempt(T(1000), {"n3", "n4"}).ok());
  EXPECT_EQ(j.attempts.size(), 2u);
  EXPECT_EQ(j.attempts[1].index, 1);
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, T(1001), "").ok());
  EXPECT_EQ(j.LostWorkAt(T(1100)), seconds(100));  // checkpoint predates this attempt
  ASSERT_TRUE(j.EndAttempt(JobState::kSucceeded, T(2000), ExitReason::kSucceeded, 0, "").ok());
  EXPECT_TRUE(IsTerminal(j.state));
  EXPECT_EQ(j.attempts[1].lost_work, Duration(0));
  EXPECT_EQ(j.CurrentAttempt(), nullptr);
}

TEST(JobTest, NodeLossAndRetryCountFailures) {
  Job j = NewJob();
  ASSERT_TRUE(j.StartAttempt(T(0), {"n1"}).ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, T(1), "").ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kLost, T(60), "node n1 stopped reporting").ok());
  ASSERT_TRUE(j.EndAttempt(JobState::kPending, T(75), ExitReason::kNodeLost, 0, "n1 lost").ok());
  ASSERT_TRUE(j.StartAttempt(T(80), {"n2"}).ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, T(81), "").ok());
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, T(90), ExitReason::kFailed, 1, "rank 0 exit 1").ok());
  EXPECT_EQ(j.retries, 1);
  EXPECT_EQ(j.reason, "rank 0 exit 1");
}

TEST(JobTest, EndAttemptNeedsAnOpenAttemptAndAReason) {
  Job j = NewJob();
  EXPECT_FALSE(j.EndAttempt(JobState::kFailed, T(1), ExitReason::kFailed, 1, "").ok());
  ASSERT_TRUE(j.StartAttempt(T(0), {"n1"}).ok());
  EXPECT_EQ(j.EndAttempt(JobState::kFailed, T(1), ExitReason::kNone, 1, "").code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(j.EndAttempt(JobState::kLost, T(1), ExitReason::kNodeLost, 0, "").ok());
  EXPECT_FALSE(j.TransitionTo(JobState::kStarting, T(1), "").ok());
}

TEST(JobTest, HeldJobDoesNotStart) {
  Job j = NewJob();
  j.held = true;
  EXPECT_FALSE(j.StartAttempt(T(0), {"n1"}).ok());
  EXPECT_EQ(j.state, JobState::kPending);
}

TEST(JobTest, NamesRoundTrip) {
  for (JobState s : kAll) EXPECT_EQ(ParseJobState(JobStateName(s)), s);
  EXPECT_FALSE(ParseJobState("running").has_value());
  for (auto r : {ExitReason::kNone, ExitReason::kSucceeded, ExitReason::kFailed,
                 ExitReason::kStartFailed, ExitReason::kPreempted, ExitReason::kNodeLost,
                 ExitReason::kCancelled, ExitReason::kTimeLimit}) {
    EXPECT_EQ(ParseExitReason(ExitReasonName(r)), r);
  }
}

}  // namespace
}  // namespace trainyard
