// Stop racing with 40 threads of calls (sync get/put/remove, async submit, resizes
// and actions, statistics, window waits, queue lengths), in both execution modes and
// in no-control mode, many times. The callers share the middleware through a
// std::shared_ptr and the main thread drops its reference right after Stop, so the
// last caller to finish frees it: under AddressSanitizer a use after free fails the
// test, under ThreadSanitizer any unsynchronised access does.
//
// Checked each time: Stop returns with every accepted async request completed
// exactly once; no call answers anything but OK, NotFound or Shutdown; once Stop has
// returned, every call answers Shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "middleware/test_engine.h"
#include "nvmw/middleware.h"

namespace nvmw {
namespace {

using testing::TestEngine;

constexpr int kThreads = 40;
constexpr int kRepetitions = 25;

struct Mode {
  const char* name;
  bool control;
  Execution execution;
};

class ShutdownRaceTest : public ::testing::TestWithParam<Mode> {};

INSTANTIATE_TEST_SUITE_P(
    Modes, ShutdownRaceTest,
    ::testing::Values(Mode{"CallerRuns", true, Execution::kCallerRuns},
                      Mode{"HandOff", true, Execution::kHandOff},
                      Mode{"NoControl", false, Execution::kCallerRuns}),
    [](const ::testing::TestParamInfo<Mode>& info) { return std::string(info.param.name); });

struct Counters {
  std::atomic<int64_t> ops{0};        // calls answered (any status)
  std::atomic<int64_t> accepted{0};   // async requests Submit accepted
  std::atomic<int64_t> completed{0};  // completions run
  std::atomic<int64_t> bad_status{0}; // answers other than OK / NotFound / Shutdown
  std::atomic<int64_t> reopened{0};   // a call that did not answer Shutdown after one did
  std::atomic<int> saw_shutdown{0};   // threads that saw Shutdown
  std::atomic<bool> stop_returned{false};
};

bool Expected(const Status& s) { return s.ok() || s.IsNotFound() || s.IsShutdown(); }

// One racing thread: a mix of every call until one answers Shutdown, then (once Stop
// has returned) one more of each kind, all of which must answer Shutdown.
void Caller(std::shared_ptr<Middleware> mw, int idx, Counters* c, std::atomic<bool>* go) {
  while (!go->load(std::memory_order_acquire)) std::this_thread::yield();
  const std::string key = "k" + std::to_string(idx);
  const std::string value(64 + idx, 'v');
  uint64_t x = 0x9e3779b97f4a7c15ull * (idx + 1);
  // Returns the status of call `kind` (OK for calls without one).
  auto call = [&](int kind) -> Status {
    std::string out;
    switch (kind) {
      case 0:
        return mw->Get(key, &out, RequestClass::kInteractive);
      case 1:
        return mw->Put(key, value, idx % 2 ? RequestClass::kBatch : RequestClass::kInteractive);
      case 2:
        return mw->Remove(key, RequestClass::kAuto);
      case 3: {
        Request r;
        r.op = idx % 2 ? OpType::kPut : OpType::kGet;
        r.key = key;
        r.value = value;
        r.cls = RequestClass::kAuto;
        Status s = mw->Submit(std::move(r), [c](const Status& st, std::string&&) {
          if (!Expected(st)) c->bad_status.fetch_add(1);
          c->completed.fetch_add(1);
        });
        if (s.ok()) c->accepted.fetch_add(1);
        return s;
      }
      case 4:
        return mw->SetThreads(1 + static_cast<int>(x % 4), 1 + static_cast<int>((x >> 8) % 4));
      case 5:
        return mw->PerformAction(static_cast<int>(x % 9));
      case 6: {
        WindowStats w = mw->GetStats();
        State st = mw->GetState();
        (void)st;
        return mw->WaitForWindow(w.seq, 0.001, &w).IsShutdown() ? Status::Shutdown() : Status::OK();
      }
      default: {
        int i = 0, b = 0;
        mw->GetThreads(&i, &b);
        (void)mw->QueueLength(RequestClass::kBatch);
        return mw->running() ? Status::OK() : Status::Shutdown();
      }
    }
  };
  while (true) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    Status s = call(static_cast<int>(x % 8));
    c->ops.fetch_add(1, std::memory_order_relaxed);
    if (!Expected(s)) c->bad_status.fetch_add(1);
    if (s.IsShutdown()) break;
  }
  c->saw_shutdown.fetch_add(1);
  // While Stop runs, the classes close one after the other; once it has returned,
  // every call that can be refused must be.
  while (!c->stop_returned.load(std::memory_order_acquire)) std::this_thread::yield();
  for (int kind : {0, 1, 2, 3, 4, 5}) {
    if (!call(kind).IsShutdown()) c->reopened.fetch_add(1);
  }
}

TEST_P(ShutdownRaceTest, StopRacesWithFortyCallingThreads) {
  const Mode mode = GetParam();
  for (int rep = 0; rep < kRepetitions; ++rep) {
    SCOPED_TRACE("repetition " + std::to_string(rep));
    TestEngine engine;  // outlives every thread below (they are joined first)
    MiddlewareOptions o;
    o.max_threads = 4;
    o.window_s = 0.01;
    o.control = mode.control;
    o.execution = mode.execution;
    o.spin_ns = 0;
    auto mw = std::make_shared<Middleware>(o);
    ASSERT_TRUE(mw->Start(&engine, 2, 2).ok());

    Counters c;
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) threads.emplace_back(Caller, mw, i, &c, &go);
    go.store(true, std::memory_order_release);
    // Stop after a varying amount of traffic (bounded wait: threads never stall).
    const int64_t target = 100 + 150 * rep;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (c.ops.load() < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // A second Stop at the same time: both return once the drain is over.
    std::thread second([mw] { EXPECT_TRUE(mw->Stop().ok()); });
    EXPECT_TRUE(mw->Stop().ok());  // (no ASSERT: the threads must be joined)
    const int64_t completed_at_stop = c.completed.load();
    c.stop_returned.store(true, std::memory_order_release);
    second.join();
    mw.reset();  // the callers hold the last references now

    for (auto& t : threads) t.join();
    EXPECT_EQ(c.saw_shutdown.load(), kThreads);
    EXPECT_EQ(c.bad_status.load(), 0);
    EXPECT_EQ(c.reopened.load(), 0);
    // Every accepted request completed before Stop returned, and exactly once.
    EXPECT_EQ(c.accepted.load(), completed_at_stop);
    EXPECT_EQ(c.completed.load(), completed_at_stop);
    EXPECT_GT(c.ops.load(), 0);
  }
}

}  // namespace
}  // namespace nvmw
