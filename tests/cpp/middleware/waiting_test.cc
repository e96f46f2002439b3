// How the middleware's threads wait: past the middleware's own spin policy a sync caller
// waiting for a permit, or an idle worker, sleeps on a futex at once. Nothing may call
// sched_yield() on the way: libstdc++'s std::atomic::wait yields four times before it
// sleeps (and again after every wake-up), which with hundreds of waiting callers on a few
// cores kept nearly all of them runnable and took the CPU from the permit holders
// (docs/middleware.md, "Waiting without yielding").
//
// sched_yield is interposed in this executable (the middleware is linked statically
// into it) to count every call.
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "middleware/test_engine.h"
#include "nvmw/middleware.h"

namespace {
std::atomic<int> g_yields{0};
}  // namespace

extern "C" int sched_yield() noexcept {
  g_yields.fetch_add(1, std::memory_order_relaxed);
  return static_cast<int>(::syscall(SYS_sched_yield));
}

namespace nvmw {
namespace {

// The scheduler state of one of this process's threads ('R' runnable, 'S' asleep, ...).
char ThreadState(long tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');  // the name may contain spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

bool WaitFor(const std::function<bool()>& done, double timeout_s = 10) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The interposition works: a direct call is counted (otherwise the tests below could
// not fail).
TEST(WaitingTest, SchedYieldIsCounted) {
  const int before = g_yields.load();
  sched_yield();
  std::this_thread::yield();
  EXPECT_EQ(g_yields.load() - before, 2);
}

// A caller that finds no free permit waits in the FIFO asleep, without yielding, and is
// woken by its own completion; idle workers park the same way. Both execution modes.
TEST(WaitingTest, WaitersAndIdleWorkersSleepWithoutYielding) {
  for (Execution mode : {Execution::kCallerRuns, Execution::kHandOff}) {
    SCOPED_TRACE(mode == Execution::kHandOff ? "hand-off" : "caller-runs");
    testing::TestEngine engine;
    MiddlewareOptions o;
    o.execution = mode;
    o.spin_ns = 0;  // no spinning of our own: a waiter goes straight to its futex
    const int before = g_yields.load();
    Middleware mw(o);
    ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
    // Give the idle workers time to park.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));

    engine.CloseGate();
    std::thread holder([&] { EXPECT_TRUE(mw.Put("a", "1", RequestClass::kInteractive).ok()); });
    ASSERT_TRUE(engine.WaitInflight(1));  // holds the class's only permit, blocked
    std::atomic<long> waiter_tid{0};
    std::thread waiter([&] {
      waiter_tid = static_cast<long>(::syscall(SYS_gettid));
      EXPECT_TRUE(mw.Put("b", "2", RequestClass::kInteractive).ok());
    });
    ASSERT_TRUE(WaitFor([&] { return mw.QueueLength(RequestClass::kInteractive) == 1; }));
    ASSERT_TRUE(WaitFor([&] { return waiter_tid.load() != 0 && ThreadState(waiter_tid) == 'S'; }));
    engine.OpenGate();
    holder.join();
    waiter.join();
    std::string v;
    EXPECT_TRUE(mw.Get("b", &v, RequestClass::kInteractive).ok());
    EXPECT_EQ(v, "2");
    // Counted before Stop: a worker signals its caller before it gives the permit back,
    // so Stop can find that permit still held for a moment and yield while it drains.
    // Draining at shutdown is not waiting for a permit.
    EXPECT_EQ(g_yields.load() - before, 0);
    ASSERT_TRUE(mw.Stop().ok());
  }
}

// CoreToSpare, which a network loop asks before it polls instead of sleeping, says no
// once the machine has more runnable threads than cores: here cores + 2 threads of this
// process that never sleep, which the monitor counts among the machine's others.
TEST(WaitingTest, NoCoreToSpareWhileMoreThreadsRunThanCores) {
  testing::TestEngine engine;
  MiddlewareOptions o;
  o.queue_sample_s = 0.005;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cores + 2; ++i) {
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  EXPECT_TRUE(WaitFor([&] { return !mw.CoreToSpare(); }, 60));
  stop = true;
  for (auto& t : busy) t.join();
  ASSERT_TRUE(mw.Stop().ok());
}

}  // namespace
}  // namespace nvmw
