// Tests of the core's clock: FastNowNs() never goes backwards on a thread, lives on
// NowNs()'s (steady_clock's) timeline and runs at its rate, and falls back to
// steady_clock when told to. No assertion on speed (bench/ measures that).
#include "util/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace nvmw {
namespace {

// Returns how many of `reads` consecutive FastNowNs() readings went backwards.
uint64_t Backwards(uint64_t reads) {
  uint64_t backwards = 0;
  int64_t prev = FastNowNs();
  for (uint64_t i = 0; i < reads; ++i) {
    const int64_t now = FastNowNs();
    if (now < prev) ++backwards;
    prev = now;
  }
  return backwards;
}

TEST(ClockTest, FastClockIsMonotonicOnOneThread) {
  EXPECT_EQ(Backwards(2'000'000), 0u);
}

TEST(ClockTest, FastClockIsMonotonicOnEachOfManyThreads) {
  // More threads than cores, so they are preempted and move between CPUs while reading.
  constexpr int kThreads = 8;
  std::vector<uint64_t> backwards(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&backwards, t] {
      for (int round = 0; round < 20; ++round) {
        backwards[t] += Backwards(20'000);
        std::this_thread::yield();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(backwards[t], 0u) << "thread " << t;
}

TEST(ClockTest, FastClockAdvancesWithTime) {
  const int64_t before = FastNowNs();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(FastNowNs() - before, 2'000'000);
}

TEST(ClockTest, FastClockIsOnTheSteadyClockTimeline) {
  // Each reading lies between two steady_clock readings taken around it, give or take
  // 1 ms (calibration error accumulated since the process started is microseconds).
  constexpr int64_t kSlackNs = 1'000'000;
  for (int i = 0; i < 1000; ++i) {
    const int64_t before = NowNs();
    const int64_t fast = FastNowNs();
    const int64_t after = NowNs();
    ASSERT_GE(fast, before - kSlackNs) << "reading " << i;
    ASSERT_LE(fast, after + kSlackNs) << "reading " << i;
  }
}

// One FastNowNs() reading and the steady_clock time it was taken at: the midpoint of the
// narrowest steady_clock bracket around it of a few tries (a preemption widens one).
struct Reading {
  int64_t fast_ns = 0;
  int64_t steady_ns = 0;
  int64_t bracket_ns = INT64_MAX;
};

Reading Read() {
  Reading best;
  for (int i = 0; i < 100; ++i) {
    const int64_t before = NowNs();
    const int64_t fast = FastNowNs();
    const int64_t after = NowNs();
    if (after - before < best.bracket_ns) best = {fast, before + (after - before) / 2, after - before};
  }
  return best;
}

TEST(ClockTest, FastClockRunsAtTheSteadyClockRate) {
  // Over ~100 ms both clocks measure the same interval to within 5 %.
  const Reading begin = Read();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const Reading end = Read();
  ASSERT_LT(begin.bracket_ns + end.bracket_ns, 1'000'000) << "machine too busy to bracket a read";
  const double steady = static_cast<double>(end.steady_ns - begin.steady_ns);
  const double fast = static_cast<double>(end.fast_ns - begin.fast_ns);
  ASSERT_GT(steady, 0);
  EXPECT_NEAR(fast / steady, 1.0, 0.05)
      << "fast " << fast << " ns, steady " << steady << " ns, tsc " << FastClockUsesTsc();
}

TEST(ClockTest, IntervalsAcrossThreadsAreNearlyConsistent) {
  // A reading taken on one thread after another thread's reading (ordered through an
  // atomic) is not earlier than it by more than 5 us: the counters of the CPUs are in
  // step, and the latency of a request started on one thread and finished on another is
  // meaningful (the SLA's p99 goal is hundreds of us). The virtual CPUs of a shared
  // machine differ by up to about a microsecond (1,032 ns seen once in CI), so a tighter
  // bound tests the host, not this clock; a wrong scale or anchor is off by far more.
  std::atomic<int64_t> sent{0};
  std::atomic<bool> quit{false};
  int64_t worst_ns = 0;
  std::thread sender([&] {
    while (!quit.load(std::memory_order_relaxed)) {
      sent.store(FastNowNs(), std::memory_order_release);
    }
  });
  for (int i = 0; i < 200'000; ++i) {
    const int64_t theirs = sent.load(std::memory_order_acquire);
    const int64_t mine = FastNowNs();
    if (theirs != 0 && theirs - mine > worst_ns) worst_ns = theirs - mine;
  }
  quit.store(true);
  sender.join();
  EXPECT_LE(worst_ns, 5000);
}

TEST(ClockTest, CalibrationHonoursSteadyOverride) {
  const char* outer = std::getenv("NVMW_CLOCK");
  const std::string saved = outer != nullptr ? outer : "";
  ASSERT_EQ(::setenv("NVMW_CLOCK", "steady", 1), 0);
  const clock_internal::TscScale forced = clock_internal::CalibrateTsc();
  if (outer != nullptr) {
    ASSERT_EQ(::setenv("NVMW_CLOCK", saved.c_str(), 1), 0);
  } else {
    ASSERT_EQ(::unsetenv("NVMW_CLOCK"), 0);
  }
  EXPECT_FALSE(forced.use_tsc);
  // With the environment as the process found it, a second calibration decides as the
  // first did, at the same rate.
  const clock_internal::TscScale again = clock_internal::CalibrateTsc();
  const clock_internal::TscScale& first = clock_internal::Scale();
  EXPECT_EQ(again.use_tsc, first.use_tsc);
  if (first.use_tsc) {
    EXPECT_NEAR(static_cast<double>(again.mult) / static_cast<double>(first.mult), 1.0, 0.01);
  }
}

}  // namespace
}  // namespace nvmw
