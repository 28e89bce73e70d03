#include "sched/retry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::sched {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::ElementsAre;

TEST(RetryTest, BackoffDoublesUpToTheCap) {
  RetrySpec r;
  r.max = 10;
  r.backoff = seconds(10);
  r.max_backoff = seconds(60);
  EXPECT_EQ(RetryBackoff(r, 0), Duration(0));
  EXPECT_EQ(RetryBackoff(r, 1), seconds(10));
  EXPECT_EQ(RetryBackoff(r, 2), seconds(20));
  EXPECT_EQ(RetryBackoff(r, 3), seconds(40));
  EXPECT_EQ(RetryBackoff(r, 4), seconds(60));
  EXPECT_EQ(RetryBackoff(r, 100), seconds(60));
  EXPECT_TRUE(MayRetry(r, 9));
  EXPECT_FALSE(MayRetry(r, 10));
}

TEST(RetryTest, EligibleAfterTheLastFailurePlusBackoff) {
  Job j;
  j.id = 1;
  j.spec.retry.max = 3;
  j.spec.retry.backoff = seconds(30);
  j.spec.retry.exclude_failed_nodes = true;
  j.submit_time = Timestamp(seconds(5));
  EXPECT_EQ(EligibleTime(j), Timestamp(seconds(5)));
  ASSERT_TRUE(j.StartAttempt(Timestamp(seconds(10)), {"n1", "n2"}).ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, Timestamp(seconds(11)), "").ok());
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, Timestamp(seconds(100)), ExitReason::kFailed, 1, "x").ok());
  EXPECT_EQ(EligibleTime(j), Timestamp(seconds(130)));
  EXPECT_THAT(ExcludedNodes(j), ElementsAre("n1", "n2"));
  ASSERT_TRUE(j.StartAttempt(Timestamp(seconds(200)), {"n3"}).ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kRunning, Timestamp(seconds(201)), "").ok());
  ASSERT_TRUE(j.TransitionTo(JobState::kPreempting, Timestamp(seconds(300)), "").ok());
  ASSERT_TRUE(
      j.EndAttempt(JobState::kPending, Timestamp(seconds(310)), ExitReason::kPreempted, 0, "")
          .ok());
  // A preemption is not a failure: no backoff, and n3 is not excluded.
  EXPECT_EQ(EligibleTime(j), Timestamp(seconds(5)));
  EXPECT_THAT(ExcludedNodes(j), ElementsAre("n1", "n2"));
}

}  // namespace
}  // namespace trainyard::sched
