// Middleware behaviour: sync/async operations through both classes, FIFO order, Stop
// draining, the action table, back-pressure, bad input, no-control bound, and the
// per-window statistics, in both execution modes. Runs against TestEngine (delays,
// gate, counters).
#include "nvmw/middleware.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "middleware/test_engine.h"

namespace nvmw {
namespace {

using testing::TestEngine;

// Every test runs in both execution modes (caller-runs and hand-off).
class MiddlewareTest : public ::testing::TestWithParam<Execution> {
 protected:
  MiddlewareOptions SmallOptions() const {
    MiddlewareOptions o;
    o.max_threads = 4;
    o.window_s = 60;  // only Stop closes a window unless a test wants more
    o.execution = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, MiddlewareTest,
                         ::testing::Values(Execution::kCallerRuns, Execution::kHandOff),
                         [](const ::testing::TestParamInfo<Execution>& info) {
                           return info.param == Execution::kHandOff ? "HandOff" : "CallerRuns";
                         });

// Counts completions per request id; fails the test on a second completion.
class CompletionLog {
 public:
  explicit CompletionLog(size_t n) : calls_(n) {}
  Completion For(size_t id) {
    return [this, id](const Status& s, std::string&& value) {
      const int prev = calls_[id].fetch_add(1);
      EXPECT_EQ(prev, 0) << "completion " << id << " called twice";
      if (s.ok()) ok_.fetch_add(1);
      done_.fetch_add(1);
    };
  }
  int Calls(size_t id) const { return calls_[id].load(); }
  size_t done() const { return done_.load(); }
  size_t ok() const { return ok_.load(); }
  bool WaitAll(size_t n, double timeout_s = 30) const {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (done_.load() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  std::vector<std::atomic<int>> calls_;
  std::atomic<size_t> done_{0}, ok_{0};
};

TEST_P(MiddlewareTest, SyncOpsThroughBothClasses) {
  TestEngine engine;
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 2, 2).ok());
  EXPECT_TRUE(mw.running());
  for (RequestClass cls : {RequestClass::kInteractive, RequestClass::kBatch, RequestClass::kAuto}) {
    const std::string key = "k" + std::to_string(static_cast<int>(cls));
    ASSERT_TRUE(mw.Put(key, "value-" + key, cls).ok());
    std::string got;
    ASSERT_TRUE(mw.Get(key, &got, cls).ok());
    EXPECT_EQ(got, "value-" + key);
    ASSERT_TRUE(mw.Remove(key, cls).ok());
    std::string untouched = "x";
    EXPECT_TRUE(mw.Get(key, &untouched, cls).IsNotFound());
    EXPECT_EQ(untouched, "x");
    EXPECT_TRUE(mw.Remove(key, cls).IsNotFound());
  }
  // An engine error comes back as the call's status.
  EXPECT_TRUE(mw.Put(engine.fail_key, "v").IsIOError());
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_FALSE(mw.running());
  EXPECT_EQ(engine.puts(), 4u);
  EXPECT_EQ(engine.gets(), 6u);
  EXPECT_EQ(engine.removes(), 6u);
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.all.ops, 16u);
  EXPECT_EQ(w.all.errors, 1u);  // NotFound is not an error
  EXPECT_EQ(w.batch.ops, 5u);
  EXPECT_EQ(w.interactive.ops, 11u);
}

TEST_P(MiddlewareTest, LargeSyncValueIsNotTruncated) {
  TestEngine engine;
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::string big(1 << 20, 'z');
  big[12345] = 'q';
  ASSERT_TRUE(mw.Put("big", big).ok());  // >= 64 KiB: batch by the size rule
  std::string got;
  ASSERT_TRUE(mw.Get("big", &got, RequestClass::kBatch).ok());
  EXPECT_EQ(got, big);
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(mw.GetStats().batch.ops, 2u);
}

TEST_P(MiddlewareTest, AsyncOpsThroughBothClasses) {
  TestEngine engine;
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 2, 1).ok());
  constexpr size_t kN = 400;
  CompletionLog log(2 * kN);
  for (size_t i = 0; i < kN; ++i) {
    Request r;
    r.op = OpType::kPut;
    r.key = "a" + std::to_string(i);
    r.value = std::string(i % 2 ? 100 : 70000, 'v');  // alternate classes by size
    ASSERT_TRUE(mw.Submit(std::move(r), log.For(i)).ok());
  }
  ASSERT_TRUE(log.WaitAll(kN));
  std::atomic<size_t> matched{0};
  std::atomic<size_t> got{0};
  for (size_t i = 0; i < kN; ++i) {
    Request r;
    r.op = OpType::kGet;
    r.key = "a" + std::to_string(i);
    r.cls = i % 2 ? RequestClass::kInteractive : RequestClass::kBatch;
    const size_t want = i % 2 ? 100 : 70000;
    ASSERT_TRUE(mw.Submit(std::move(r),
                          [&, want](const Status& s, std::string&& v) {
                            if (s.ok() && v.size() == want) matched.fetch_add(1);
                            got.fetch_add(1);
                          })
                    .ok());
  }
  ASSERT_TRUE(mw.Stop().ok());  // drains
  EXPECT_EQ(log.ok(), kN);
  EXPECT_EQ(got.load(), kN);
  EXPECT_EQ(matched.load(), kN);
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.all.ops, 2 * kN);
  EXPECT_EQ(w.batch.ops, kN);  // kN/2 big puts + kN/2 batch gets
  EXPECT_EQ(w.interactive.ops, kN);
}

TEST_P(MiddlewareTest, ClassifyUsesHintThenSizeRule) {
  MiddlewareOptions o = SmallOptions();
  o.batch_threshold_bytes = 1000;
  Middleware mw(o);
  EXPECT_EQ(mw.Classify(OpType::kPut, 999, RequestClass::kAuto), RequestClass::kInteractive);
  EXPECT_EQ(mw.Classify(OpType::kPut, 1000, RequestClass::kAuto), RequestClass::kBatch);
  EXPECT_EQ(mw.Classify(OpType::kGet, 1 << 20, RequestClass::kAuto), RequestClass::kInteractive);
  EXPECT_EQ(mw.Classify(OpType::kRemove, 0, RequestClass::kAuto), RequestClass::kInteractive);
  EXPECT_EQ(mw.Classify(OpType::kPut, 5, RequestClass::kBatch), RequestClass::kBatch);
  EXPECT_EQ(mw.Classify(OpType::kPut, 1 << 20, RequestClass::kInteractive),
            RequestClass::kInteractive);
  EXPECT_EQ(mw.Classify(OpType::kPut, 5, static_cast<RequestClass>(7)), RequestClass::kAuto);
}

// Exists answers OK or NotFound without copying the value (no engine Get), sync and
// async, and counts as a read of 0 bytes of its class.
TEST_P(MiddlewareTest, ExistsReadsNoValue) {
  TestEngine engine;
  ASSERT_TRUE(engine.Put("present", std::string(800 * 1024, 'p')).ok());
  Middleware mw(SmallOptions());
  EXPECT_EQ(mw.Classify(OpType::kExists, 0, RequestClass::kAuto), RequestClass::kInteractive);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  EXPECT_TRUE(mw.Exists("present").ok());
  EXPECT_TRUE(mw.Exists("absent").IsNotFound());
  EXPECT_TRUE(mw.Exists("present", RequestClass::kBatch).ok());
  EXPECT_TRUE(mw.Exists("present", static_cast<RequestClass>(7)).IsInvalidArgument());
  std::atomic<int> ok{0}, not_found{0}, with_value{0};
  auto done = [&](const Status& st, std::string&& v) {
    if (st.ok()) ok.fetch_add(1);
    if (st.IsNotFound()) not_found.fetch_add(1);
    if (!v.empty()) with_value.fetch_add(1);
  };
  for (const char* key : {"present", "absent"}) {
    Request r;
    r.op = OpType::kExists;
    r.key = key;
    ASSERT_TRUE(mw.Submit(r, done).ok());
    ASSERT_TRUE(mw.SubmitOrRun(std::move(r), done).ok());
  }
  ASSERT_TRUE(mw.Stop().ok());  // drains and closes the window
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(not_found.load(), 2);
  EXPECT_EQ(with_value.load(), 0);
  EXPECT_EQ(engine.gets(), 0u);  // no value was read
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.interactive.ops, 6u);
  EXPECT_EQ(w.batch.ops, 1u);
  EXPECT_EQ(w.all.errors, 0u);  // NotFound is an answer, not an error
  EXPECT_DOUBLE_EQ(w.all.write_ratio, 0.0);
  EXPECT_DOUBLE_EQ(w.all.mean_block_bytes, 0.0);
  EXPECT_DOUBLE_EQ(w.all.bytes_per_s, 0.0);
}

// With one worker, requests of a class run in submission order.
TEST_P(MiddlewareTest, FifoPerClassWithOneWorker) {
  TestEngine engine;
  engine.record_order = true;
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  constexpr int kN = 2000;
  CompletionLog log(kN);
  for (int i = 0; i < kN; ++i) {
    Request r;
    r.op = i % 3 == 0 ? OpType::kGet : OpType::kPut;
    r.cls = i % 2 ? RequestClass::kBatch : RequestClass::kInteractive;
    r.key = (i % 2 ? "b" : "i") + std::to_string(i);
    r.value = "x";
    ASSERT_TRUE(mw.Submit(std::move(r), log.For(i)).ok());
  }
  ASSERT_TRUE(mw.Stop().ok());
  ASSERT_EQ(log.done(), static_cast<size_t>(kN));
  std::vector<int> interactive, batch;
  for (const std::string& k : engine.Order()) {
    (k[0] == 'b' ? batch : interactive).push_back(std::stoi(k.substr(1)));
  }
  ASSERT_EQ(interactive.size() + batch.size(), static_cast<size_t>(kN));
  EXPECT_TRUE(std::is_sorted(interactive.begin(), interactive.end()));
  EXPECT_TRUE(std::is_sorted(batch.begin(), batch.end()));
}

TEST_P(MiddlewareTest, StopDrainsEveryAcceptedRequestExactlyOnce) {
  TestEngine engine;
  engine.put_delay_ns = 20000;  // 20 us: the queues are still full when Stop begins
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  constexpr size_t kN = 3000;
  CompletionLog log(kN);
  for (size_t i = 0; i < kN; ++i) {
    Request r;
    r.op = OpType::kPut;
    r.key = "d" + std::to_string(i);
    r.value = "v";
    r.cls = i % 2 ? RequestClass::kBatch : RequestClass::kInteractive;
    ASSERT_TRUE(mw.Submit(std::move(r), log.For(i)).ok());
  }
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(log.done(), kN);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(log.Calls(i), 1) << i;
  EXPECT_EQ(engine.puts(), kN);
  EXPECT_EQ(mw.GetStats().all.ops, kN);
  // Stopped: new work is refused and no completion runs.
  Request r;
  r.key = "late";
  bool called = false;
  EXPECT_TRUE(mw.Submit(std::move(r), [&](const Status&, std::string&&) { called = true; })
                  .IsShutdown());
  EXPECT_TRUE(mw.Put("late", "v").IsShutdown());
  std::string v;
  EXPECT_TRUE(mw.Get("late", &v).IsShutdown());
  EXPECT_FALSE(called);
  EXPECT_TRUE(mw.Stop().ok());  // idempotent
  EXPECT_TRUE(mw.SetThreads(2, 2).IsShutdown());
  EXPECT_TRUE(mw.PerformAction(1).IsShutdown());
}

TEST_P(MiddlewareTest, StopWhileSyncCallersWait) {
  TestEngine engine;
  engine.get_delay_ns = 200000;
  Middleware mw(SmallOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::vector<std::thread> clients;
  std::atomic<int> finished{0}, refused{0};
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        std::string v;
        Status s = mw.Get("k", &v);
        if (s.IsShutdown()) {
          refused.fetch_add(1);
        } else {
          EXPECT_TRUE(s.IsNotFound()) << s.ToString();
        }
        finished.fetch_add(1);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(mw.Stop().ok());
  for (auto& c : clients) c.join();
  EXPECT_EQ(finished.load(), 120);
  // Every accepted Get reached the engine; the rest were refused, none lost.
  EXPECT_EQ(engine.gets() + static_cast<uint64_t>(refused.load()), 120u);
}

TEST_P(MiddlewareTest, PerformActionTableAndClamping) {
  TestEngine engine;
  MiddlewareOptions o = SmallOptions();
  o.max_threads = 3;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 2, 2).ok());
  int i = 0, b = 0;
  mw.GetThreads(&i, &b);
  EXPECT_EQ(i, 2);
  EXPECT_EQ(b, 2);
  for (int a = 0; a < kNumActions; ++a) {
    ASSERT_TRUE(mw.SetThreads(2, 2).ok());
    ASSERT_TRUE(mw.PerformAction(a).ok()) << a;
    mw.GetThreads(&i, &b);
    EXPECT_EQ(i, 2 + kActionDeltas[a][0]) << "action " << a;
    EXPECT_EQ(b, 2 + kActionDeltas[a][1]) << "action " << a;
  }
  // Clamping at both ends is not an error.
  ASSERT_TRUE(mw.SetThreads(1, 3).ok());
  ASSERT_TRUE(mw.PerformAction(7).ok());  // I-1, B+1
  mw.GetThreads(&i, &b);
  EXPECT_EQ(i, 1);
  EXPECT_EQ(b, 3);
  ASSERT_TRUE(mw.SetThreads(3, 1).ok());
  ASSERT_TRUE(mw.PerformAction(6).ok());  // I+1, B-1
  mw.GetThreads(&i, &b);
  EXPECT_EQ(i, 3);
  EXPECT_EQ(b, 1);
  // The pools still serve after all that.
  ASSERT_TRUE(mw.Put("k", "v", RequestClass::kBatch).ok());
  std::string v;
  ASSERT_TRUE(mw.Get("k", &v, RequestClass::kInteractive).ok());
  const State st = mw.GetState();
  EXPECT_EQ(st[0], 3);
  EXPECT_EQ(st[1], 1);
  ASSERT_TRUE(mw.Stop().ok());
}

TEST_P(MiddlewareTest, StartClampsPoolSizes) {
  TestEngine engine;
  Middleware mw(SmallOptions());  // max 4
  ASSERT_TRUE(mw.Start(&engine, 0, 99).ok());
  int i = 0, b = 0;
  mw.GetThreads(&i, &b);
  EXPECT_EQ(i, 1);
  EXPECT_EQ(b, 4);
}

TEST_P(MiddlewareTest, OverloadedWhenQueueIsFull) {
  TestEngine engine;
  MiddlewareOptions o = SmallOptions();
  o.queue_capacity = 2;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  CompletionLog log(4);
  auto make = [](int i) {
    Request r;
    r.op = OpType::kPut;
    r.key = "o" + std::to_string(i);
    r.value = "v";
    r.cls = RequestClass::kInteractive;
    return r;
  };
  ASSERT_TRUE(mw.Submit(make(0), log.For(0)).ok());
  ASSERT_TRUE(engine.WaitInflight(1));  // the only worker is now blocked in the engine
  ASSERT_TRUE(mw.Submit(make(1), log.For(1)).ok());
  ASSERT_TRUE(mw.Submit(make(2), log.For(2)).ok());
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), 2u);
  EXPECT_TRUE(mw.Submit(make(3), log.For(3)).IsOverloaded());
  EXPECT_TRUE(mw.Put("sync", "v", RequestClass::kInteractive).IsOverloaded());
  // The other class has its own queue.
  CompletionLog blog(1);
  Request br = make(9);
  br.cls = RequestClass::kBatch;
  ASSERT_TRUE(mw.Submit(std::move(br), blog.For(0)).ok());
  engine.OpenGate();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(log.done(), 3u);
  EXPECT_EQ(log.Calls(3), 0);  // refused: its completion never runs
  EXPECT_EQ(blog.done(), 1u);
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.interactive.rejected, 2u);
  EXPECT_EQ(w.batch.rejected, 0u);
  EXPECT_EQ(w.all.rejected, 2u);
  EXPECT_EQ(w.interactive.ops, 3u);
}

TEST_P(MiddlewareTest, BadInputIsRejected) {
  TestEngine engine;
  MiddlewareOptions o = SmallOptions();
  o.max_value_bytes = 1000;
  o.max_threads = 32;
  Middleware mw(o);
  EXPECT_TRUE(mw.Start(nullptr, 1, 1).IsInvalidArgument());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  EXPECT_TRUE(mw.Start(&engine, 1, 1).IsInvalidArgument());  // already started
  const auto bad = static_cast<RequestClass>(7);
  std::string v;
  EXPECT_TRUE(mw.Put("k", "v", bad).IsInvalidArgument());
  EXPECT_TRUE(mw.Get("k", &v, bad).IsInvalidArgument());
  EXPECT_TRUE(mw.Remove("k", bad).IsInvalidArgument());
  EXPECT_TRUE(mw.Get("k", nullptr).IsInvalidArgument());
  EXPECT_TRUE(mw.Put("k", std::string(1001, 'x')).IsInvalidArgument());
  EXPECT_TRUE(mw.Put("k", std::string(1000, 'x')).ok());
  bool called = false;
  auto done = [&](const Status&, std::string&&) { called = true; };
  Request r;
  r.key = "k";
  r.cls = bad;
  EXPECT_TRUE(mw.Submit(r, done).IsInvalidArgument());
  r.cls = RequestClass::kAuto;
  r.op = static_cast<OpType>(9);
  EXPECT_TRUE(mw.Submit(r, done).IsInvalidArgument());
  r.op = OpType::kPut;
  r.value = std::string(1001, 'x');
  EXPECT_TRUE(mw.Submit(r, done).IsInvalidArgument());
  r.value = "ok";
  EXPECT_TRUE(mw.Submit(r, Completion()).IsInvalidArgument());
  EXPECT_FALSE(called);
  EXPECT_TRUE(mw.PerformAction(9).IsInvalidArgument());
  EXPECT_TRUE(mw.PerformAction(-1).IsInvalidArgument());
  EXPECT_TRUE(mw.SetThreads(0, 1).IsInvalidArgument());
  EXPECT_TRUE(mw.SetThreads(33, 1).IsInvalidArgument());
  EXPECT_TRUE(mw.SetThreads(1, 0).IsInvalidArgument());
  EXPECT_TRUE(mw.SetThreads(1, 33).IsInvalidArgument());
  EXPECT_TRUE(mw.SetThreads(32, 32).ok());
  WindowStats w;
  EXPECT_TRUE(mw.WaitForWindow(0, -1, &w).IsInvalidArgument());
  EXPECT_TRUE(mw.WaitForWindow(0, 1, nullptr).IsInvalidArgument());
  EXPECT_EQ(mw.QueueLength(bad), 0u);
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(mw.GetStats().all.ops, 1u);  // only the valid Put ran
}

TEST_P(MiddlewareTest, BadOptionsAreRejected) {
  TestEngine engine;
  auto start_with = [&](auto mutate) {
    MiddlewareOptions o;
    mutate(o);
    Middleware mw(o);
    return mw.Start(&engine, 1, 1);
  };
  EXPECT_TRUE(start_with([](MiddlewareOptions& o) { o.max_threads = 0; }).IsInvalidArgument());
  EXPECT_TRUE(start_with([](MiddlewareOptions& o) { o.window_s = 0; }).IsInvalidArgument());
  EXPECT_TRUE(start_with([](MiddlewareOptions& o) { o.queue_capacity = 0; }).IsInvalidArgument());
  EXPECT_TRUE(start_with([](MiddlewareOptions& o) { o.no_control_max_inflight = 0; })
                  .IsInvalidArgument());
  EXPECT_TRUE(start_with([](MiddlewareOptions& o) { o.spin_ns = -1; }).IsInvalidArgument());
  EXPECT_TRUE(start_with([](MiddlewareOptions&) {}).ok());
}

TEST_P(MiddlewareTest, CallsBeforeStartAreRefused) {
  Middleware mw(SmallOptions());
  std::string v;
  EXPECT_TRUE(mw.Get("k", &v).IsShutdown());
  EXPECT_TRUE(mw.Put("k", "v").IsShutdown());
  EXPECT_TRUE(mw.Submit(Request(), [](const Status&, std::string&&) {}).IsShutdown());
  EXPECT_TRUE(mw.PerformAction(1).IsShutdown());
  EXPECT_TRUE(mw.SetThreads(1, 1).IsShutdown());
  WindowStats w;
  EXPECT_TRUE(mw.WaitForWindow(0, 0.01, &w).IsShutdown());
  EXPECT_EQ(mw.GetStats().seq, 0u);
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), 0u);
  EXPECT_TRUE(mw.Stop().ok());
}

TEST_P(MiddlewareTest, NoControlModeBoundsInflight) {
  TestEngine engine;
  engine.get_delay_ns = 1000000;  // 1 ms: callers pile up on the semaphore
  engine.put_delay_ns = 1000000;
  MiddlewareOptions o = SmallOptions();
  o.control = false;
  o.no_control_max_inflight = 3;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 5, 5).ok());
  constexpr int kThreads = 10, kPerThread = 10;
  std::atomic<int> async_done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string key = "n" + std::to_string(t) + "-" + std::to_string(i);
        if (i % 2 == 0) {
          ASSERT_TRUE(mw.Put(key, "v").ok());
        } else {
          Request r;
          r.op = OpType::kGet;
          r.key = key;
          // Inline: the completion has run when Submit returns.
          ASSERT_TRUE(mw.Submit(std::move(r),
                                [&](const Status& s, std::string&&) {
                                  EXPECT_TRUE(s.IsNotFound());
                                  async_done.fetch_add(1);
                                })
                          .ok());
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(async_done.load(), kThreads * kPerThread / 2);
  EXPECT_LE(engine.max_inflight(), 3);
  EXPECT_GE(engine.max_inflight(), 1);
  int i = -1, b = -1;
  mw.GetThreads(&i, &b);
  EXPECT_EQ(i, 0);
  EXPECT_EQ(b, 0);
  EXPECT_TRUE(mw.PerformAction(1).ok());  // accepted, nothing to resize
  EXPECT_TRUE(mw.PerformAction(9).IsInvalidArgument());
  ASSERT_TRUE(mw.Stop().ok());
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.all.ops, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(w.all.threads, 0);
  EXPECT_DOUBLE_EQ(w.interactive.write_ratio, 0.5);
  EXPECT_GE(w.all.p50_us, 1000.0 * 0.99);  // every op slept >= 1 ms in the engine
}

// No control runs an async request on the submitting thread; Stop must still wait for
// its completion, as it waits for a worker's. The completion lingers, so a Stop that
// did not wait would return while it runs.
TEST_P(MiddlewareTest, NoControlStopWaitsForARunningCompletion) {
  TestEngine engine;
  MiddlewareOptions o = SmallOptions();
  o.control = false;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::atomic<bool> entered{false}, finished{false};
  std::thread submitter([&] {
    Request r;
    r.op = OpType::kPut;
    r.key = "k";
    r.value = "v";
    EXPECT_TRUE(mw.Submit(std::move(r),
                          [&](const Status& s, std::string&&) {
                            EXPECT_TRUE(s.ok());
                            entered.store(true);
                            std::this_thread::sleep_for(std::chrono::milliseconds(50));
                            finished.store(true);
                          })
                    .ok());
  });
  while (!entered.load()) std::this_thread::yield();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_TRUE(finished.load());
  submitter.join();
  EXPECT_EQ(mw.GetStats().all.ops, 1u);
}

// Window statistics of a run with known operations, delays and sizes.
TEST_P(MiddlewareTest, WindowStatsOfKnownRun) {
  TestEngine engine;
  engine.get_delay_ns = 100000;  // 100 us
  engine.put_delay_ns = 300000;  // 300 us
  MiddlewareOptions o = SmallOptions();
  o.batch_threshold_bytes = 10000;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 2, 3).ok());
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(mw.Put("s" + std::to_string(i), std::string(100, 'a')).ok());
  for (int i = 0; i < 60; ++i) {
    std::string v;
    ASSERT_TRUE(mw.Get("s" + std::to_string(i % 30), &v).ok());
  }
  for (int i = 0; i < 10; ++i) {
    std::string v;
    ASSERT_TRUE(mw.Get("missing" + std::to_string(i), &v).IsNotFound());
  }
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(mw.Remove("s" + std::to_string(i)).ok());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(mw.Put("L" + std::to_string(i), std::string(20000, 'b')).ok());
  std::string v;
  ASSERT_TRUE(mw.Get("L0", &v, RequestClass::kBatch).ok());
  ASSERT_TRUE(mw.Put(engine.fail_key, "x", RequestClass::kBatch).IsIOError());
  ASSERT_TRUE(mw.Stop().ok());

  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.seq, 1u);
  EXPECT_GT(w.duration_s, 0);
  const ClassStats& in = w.interactive;
  EXPECT_EQ(in.ops, 105u);
  EXPECT_EQ(in.errors, 0u);
  EXPECT_EQ(in.rejected, 0u);
  EXPECT_DOUBLE_EQ(in.write_ratio, 35.0 / 105.0);
  EXPECT_DOUBLE_EQ(in.mean_block_bytes, (30 * 100.0 + 60 * 100.0) / 105.0);
  EXPECT_EQ(in.threads, 2);
  EXPECT_EQ(in.queue_len_end, 0u);
  EXPECT_GE(in.queue_len_mean, 0.0);
  EXPECT_LE(in.queue_len_mean, 1.0);  // one synchronous client: at most one queued
  // Latency includes the engine's sleep, so it has a hard floor.
  EXPECT_GE(in.p50_us, 100.0 * 0.99);
  EXPECT_GE(in.p99_us, 300.0 * 0.99);  // 35 of 105 requests slept 300 us
  EXPECT_LE(in.p50_us, in.p99_us);
  EXPECT_LE(in.p99_us, in.p999_us);
  EXPECT_LE(in.p999_us, in.max_us * 1.0000001);
  EXPECT_GT(in.mean_us, 100.0);
  EXPECT_GT(in.std_us, 0.0);
  EXPECT_NEAR(in.ops_per_s, in.ops / w.duration_s, 1e-6 * in.ops_per_s);
  EXPECT_NEAR(in.bytes_per_s, 9000.0 / w.duration_s, 1e-6 * in.bytes_per_s);

  const ClassStats& ba = w.batch;
  EXPECT_EQ(ba.ops, 10u);
  EXPECT_EQ(ba.errors, 1u);
  EXPECT_DOUBLE_EQ(ba.write_ratio, 0.9);
  EXPECT_DOUBLE_EQ(ba.mean_block_bytes, (8 * 20000.0 + 20000.0 + 1.0) / 10.0);
  EXPECT_EQ(ba.threads, 3);

  const ClassStats& all = w.all;
  EXPECT_EQ(all.ops, 115u);
  EXPECT_EQ(all.errors, 1u);
  EXPECT_DOUBLE_EQ(all.write_ratio, 44.0 / 115.0);
  EXPECT_EQ(all.threads, 5);
  EXPECT_DOUBLE_EQ(all.max_us, std::max(in.max_us, ba.max_us));

  const State st = mw.GetState();  // threads read 2/3 (targets kept after Stop)
  EXPECT_EQ(st[0], 2);
  EXPECT_EQ(st[1], 3);
  EXPECT_EQ(st[2], 0);
  EXPECT_EQ(st[3], 0);
  EXPECT_DOUBLE_EQ(st[4], in.mean_block_bytes);
  EXPECT_DOUBLE_EQ(st[5], ba.mean_block_bytes);
  EXPECT_DOUBLE_EQ(st[6], in.write_ratio);
  EXPECT_DOUBLE_EQ(st[7], ba.write_ratio);
}

// Windows close periodically; a window that sees a stuck queue reports its length.
TEST_P(MiddlewareTest, PeriodicWindowsAndQueueSampling) {
  TestEngine engine;
  MiddlewareOptions o = SmallOptions();
  o.window_s = 0.05;
  o.queue_sample_s = 0.002;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  WindowStats w1;
  ASSERT_TRUE(mw.WaitForWindow(0, 10, &w1).ok());
  EXPECT_GE(w1.seq, 1u);
  WindowStats w2;
  ASSERT_TRUE(mw.WaitForWindow(w1.seq, 10, &w2).ok());
  EXPECT_GT(w2.seq, w1.seq);
  EXPECT_GE(w2.start_s, w1.start_s);
  WindowStats none;
  EXPECT_TRUE(mw.WaitForWindow(w2.seq + 1000, 0.001, &none).IsIOError());

  // Block the batch worker, queue five more batch requests, and look at a window
  // that began after they were queued: every sample saw exactly five.
  engine.CloseGate();
  CompletionLog log(6);
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.op = OpType::kPut;
    r.key = "q" + std::to_string(i);
    r.cls = RequestClass::kBatch;
    ASSERT_TRUE(mw.Submit(std::move(r), log.For(i)).ok());
    if (i == 0) {
      ASSERT_TRUE(engine.WaitInflight(1));
    }
  }
  EXPECT_EQ(mw.QueueLength(RequestClass::kBatch), 5u);
  WindowStats opened;
  ASSERT_TRUE(mw.WaitForWindow(mw.GetStats().seq, 10, &opened).ok());
  WindowStats full;
  ASSERT_TRUE(mw.WaitForWindow(opened.seq, 10, &full).ok());
  EXPECT_EQ(full.batch.queue_len_end, 5u);
  EXPECT_DOUBLE_EQ(full.batch.queue_len_mean, 5.0);
  EXPECT_EQ(full.interactive.queue_len_end, 0u);
  EXPECT_EQ(full.all.queue_len_end, 5u);
  EXPECT_EQ(full.batch.ops, 0u);
  EXPECT_EQ(mw.GetState()[3], 5.0);
  engine.OpenGate();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(log.done(), 6u);
  EXPECT_TRUE(mw.WaitForWindow(mw.GetStats().seq, 1, &none).IsShutdown());
}

}  // namespace
}  // namespace nvmw
