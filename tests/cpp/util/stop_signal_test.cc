// Tests of StopSignal: sleepers return at their deadline with the flag clear, and Set()
// wakes every sleeper however far its deadline, including one that is just going to
// sleep (no lost wake-up). No assertion on how long anything takes.
#include "util/stop_signal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "util/clock.h"

namespace nvmw {
namespace {

constexpr int64_t kHourNs = 3'600'000'000'000;

TEST(StopSignal, ReturnsAtTheDeadlineWhileClear) {
  StopSignal s;
  EXPECT_FALSE(s.stopped());
  EXPECT_TRUE(s.SleepUntil(NowNs() - 1));  // already past
  for (int64_t wait_ns : {1'000, 200'000, 2'000'000}) {
    const int64_t deadline = NowNs() + wait_ns;
    EXPECT_TRUE(s.SleepUntil(deadline));
    EXPECT_GE(NowNs(), deadline);  // never early
  }
}

TEST(StopSignal, SetWakesEverySleeperWithAFarDeadline) {
  StopSignal s;
  std::atomic<int> returned_stopped{0};
  std::vector<std::thread> sleepers;
  for (int i = 0; i < 8; ++i) {
    sleepers.emplace_back([&] {
      if (!s.SleepUntil(NowNs() + kHourNs)) returned_stopped.fetch_add(1);
    });
  }
  s.Set();
  for (auto& t : sleepers) t.join();  // an hour each if a wake-up were lost
  EXPECT_EQ(returned_stopped.load(), 8);
  EXPECT_TRUE(s.stopped());
  EXPECT_FALSE(s.SleepUntil(NowNs() + kHourNs));  // stays set: no sleep at all
}

TEST(StopSignal, SetRacingWithGoingToSleepIsNeverLost) {
  for (int round = 0; round < 500; ++round) {
    StopSignal s;
    std::atomic<bool> ready{false};
    bool slept_to_deadline = true;
    std::thread sleeper([&] {
      ready.store(true);
      slept_to_deadline = s.SleepUntil(NowNs() + kHourNs);
    });
    while (!ready.load()) {
    }
    s.Set();
    sleeper.join();
    ASSERT_FALSE(slept_to_deadline) << "round " << round;
  }
}

TEST(StopSignal, ResetLetsSleepersSleepAgain) {
  StopSignal s;
  s.Set();
  EXPECT_FALSE(s.SleepUntil(NowNs() + kHourNs));
  s.Reset();
  EXPECT_FALSE(s.stopped());
  const int64_t deadline = NowNs() + 100'000;
  EXPECT_TRUE(s.SleepUntil(deadline));
  EXPECT_GE(NowNs(), deadline);
}

}  // namespace
}  // namespace nvmw
