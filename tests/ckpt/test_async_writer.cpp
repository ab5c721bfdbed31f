// The background job under the asynchronous checkpoint writer: it runs concurrently with the
// caller, keeps and rethrows its exception, refuses a second start, joins on destruction, and
// runs with the stop signals blocked (they reach the main thread).
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <stdexcept>
#include <thread>

#include "ckpt/async_writer.h"
#include "core/check.h"

namespace loom {
namespace {

TEST(BackgroundJob, RunsWhileTheCallerGoesOn) {
  BackgroundJob job;
  EXPECT_FALSE(job.started());
  EXPECT_FALSE(job.done());
  job.wait();  // nothing started: returns at once
  std::promise<void> go;
  std::future<void> released = go.get_future();
  std::atomic<int> ran{0};
  job.start([&] {
    released.wait();  // finishes only after the caller, still running, releases it
    ran = 1;
  });
  EXPECT_TRUE(job.started());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(job.done());
  EXPECT_EQ(ran.load(), 0);
  go.set_value();
  job.wait();
  EXPECT_TRUE(job.done());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_FALSE(job.started());
}

TEST(BackgroundJob, DoneTurnsTrueWithoutWaiting) {
  BackgroundJob job;
  job.start([] {});
  for (int i = 0; i < 2000 && !job.done(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(job.done());  // polled, as the trainer does at step boundaries
  job.wait();
}

TEST(BackgroundJob, RethrowsTheJobsExceptionOnce) {
  BackgroundJob job;
  job.start([] { throw UserError("disk full"); });
  try {
    job.wait();
    FAIL() << "no exception";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_TRUE(job.done());
  EXPECT_NO_THROW(job.wait());
  job.start([] {});  // usable again after the failure
  EXPECT_NO_THROW(job.wait());
}

TEST(BackgroundJob, RefusesASecondStartBeforeWait) {
  BackgroundJob job;
  job.start([] {});
  EXPECT_THROW(job.start([] {}), InternalError);
  job.wait();
}

TEST(BackgroundJob, DestructorJoinsARunningJob) {
  std::atomic<int> finished{0};
  {
    BackgroundJob job;
    job.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished = 1;
    });
  }  // without a join, std::thread's destructor would call std::terminate
  EXPECT_EQ(finished.load(), 1);
}

TEST(BackgroundJob, StopSignalsAreBlockedInTheJobOnly) {
  sigset_t before, inside, after;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &before), 0);
  ASSERT_EQ(sigismember(&before, SIGTERM), 0);
  BackgroundJob job;
  job.start([&] { pthread_sigmask(SIG_BLOCK, nullptr, &inside); });
  job.wait();
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &after), 0);
  for (int sig : {SIGTERM, SIGUSR1, SIGINT}) {
    EXPECT_EQ(sigismember(&inside, sig), 1) << sig;
    EXPECT_EQ(sigismember(&after, sig), 0) << sig;  // the caller's mask is restored
  }
}

TEST(AsyncCheckpointWriter, NothingInFlightAtFirst) {
  AsyncCheckpointWriter w;
  EXPECT_FALSE(w.in_flight());
  EXPECT_TRUE(w.written());
}

}  // namespace
}  // namespace loom
