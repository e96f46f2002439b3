// Concurrency limits as permits: the Permits FIFO on its own, then the middleware's
// caller-runs path: a class never has more than its limit in the engine (callers and
// workers together), a sync call with a free permit runs on the caller's thread and a
// waiting one on a worker, waiters are served in FIFO order, grow admits them at once, shrink takes effect as permits come
// back, Stop drains parked waiters, no-control has no per-class limit, and the queue
// length counts sync waiters. TestEngine's gate makes every count exact.
#include "middleware/permits.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "middleware/test_engine.h"
#include "nvmw/middleware.h"
#include "test_util.h"

namespace nvmw {
namespace {

using testing::TestEngine;
using testing::WaitUntil;

// ---------------------------------------------------------------- Permits alone

std::vector<PermitWaiter*> ToVector(PermitWaiter* list) {
  std::vector<PermitWaiter*> out;
  for (; list != nullptr; list = list->next) out.push_back(list);
  return out;
}

TEST(PermitsTest, ClosedUntilOpened) {
  Permits p;
  p.SetLimit(2);
  PermitWaiter w;
  EXPECT_EQ(p.Acquire(&w, 10), Permits::Admit::kClosed);
  p.Open();
  EXPECT_EQ(p.Acquire(&w, 10), Permits::Admit::kGranted);
  EXPECT_EQ(p.in_use(), 1u);
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_TRUE(p.Idle());
}

TEST(PermitsTest, ReleaseHandsThePermitToTheOldestWaiter) {
  Permits p;
  p.SetLimit(1);
  p.Open();
  PermitWaiter holder, w[3], newcomer;
  ASSERT_EQ(p.Acquire(&holder, 10), Permits::Admit::kGranted);
  for (PermitWaiter& x : w) ASSERT_EQ(p.Acquire(&x, 10), Permits::Admit::kQueued);
  EXPECT_EQ(p.waiting(), 3u);
  // The permit moves to the oldest waiter; it never becomes free in between.
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&w[0]});
  EXPECT_EQ(p.in_use(), 1u);
  EXPECT_EQ(p.waiting(), 2u);
  // A newcomer queues behind those already waiting.
  EXPECT_EQ(p.Acquire(&newcomer, 10), Permits::Admit::kQueued);
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&w[1]});
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&w[2]});
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&newcomer});
  EXPECT_EQ(p.in_use(), 1u);
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_TRUE(p.Idle());
}

TEST(PermitsTest, FullFifoRefusesAndClosedKeepsWaiters) {
  Permits p;
  p.SetLimit(1);
  p.Open();
  PermitWaiter holder, a, b, c;
  ASSERT_EQ(p.Acquire(&holder, 2), Permits::Admit::kGranted);
  ASSERT_EQ(p.Acquire(&a, 2), Permits::Admit::kQueued);
  ASSERT_EQ(p.Acquire(&b, 2), Permits::Admit::kQueued);
  EXPECT_EQ(p.Acquire(&c, 2), Permits::Admit::kFull);
  EXPECT_EQ(p.waiting(), 2u);
  p.Close();
  EXPECT_EQ(p.Acquire(&c, 10), Permits::Admit::kClosed);
  EXPECT_FALSE(p.Idle());
  // Closing refuses newcomers only: the queued ones still get their permits, in order.
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&a});
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&b});
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_TRUE(p.Idle());
}

TEST(PermitsTest, GrowAdmitsWaitersAtOnceAndShrinkWaitsForReleases) {
  Permits p;
  p.SetLimit(1);
  p.Open();
  PermitWaiter holder, w[4];
  ASSERT_EQ(p.Acquire(&holder, 10), Permits::Admit::kGranted);
  for (PermitWaiter& x : w) ASSERT_EQ(p.Acquire(&x, 10), Permits::Admit::kQueued);
  // Grow to 3: the two oldest waiters get permits now, nobody releases anything.
  EXPECT_EQ(ToVector(p.SetLimit(3)), (std::vector<PermitWaiter*>{&w[0], &w[1]}));
  EXPECT_EQ(p.in_use(), 3u);
  EXPECT_EQ(p.waiting(), 2u);
  // Shrink to 1: nothing is taken away; the next two releases destroy their permits
  // (in use 3 -> 2 -> 1) and only the third is handed on.
  EXPECT_EQ(p.SetLimit(1), nullptr);
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_EQ(p.in_use(), 2u);
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_EQ(p.in_use(), 1u);
  EXPECT_EQ(p.waiting(), 2u);
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&w[2]});
  EXPECT_EQ(ToVector(p.Release()), std::vector<PermitWaiter*>{&w[3]});
  EXPECT_EQ(p.Release(), nullptr);
  EXPECT_TRUE(p.Idle());
}

// Many threads acquire and release; a granted waiter is told through an atomic flag.
// The number holding a permit never exceeds the limit, and every acquisition is served.
// Once the word shows every permit back (what Stop waits for before it frees the
// middleware), no Release may touch the permits any more. Two holders release at once
// with one waiter queued; the one handed the waiter's permit gives it back at once. A
// release that saw the waiter, then found it gone under the mutex, gave its permit back
// there and went on reading the word and unlocking the mutex after the last permit was
// back: here the permits are freed as soon as they look idle, and ThreadSanitizer saw
// the free race with those reads (in a few of the rounds).
TEST(PermitsTest, NoReleaseTouchesThePermitsOnceAllAreBack) {
  constexpr int kRounds = 2000;
  for (int round = 0; round < kRounds; ++round) {
    auto* p = new Permits;
    p->SetLimit(2);
    p->Open();
    PermitWaiter a, b, w;
    ASSERT_EQ(p->Acquire(&a, 8), Permits::Admit::kGranted);
    ASSERT_EQ(p->Acquire(&b, 8), Permits::Admit::kGranted);
    ASSERT_EQ(p->Acquire(&w, 8), Permits::Admit::kQueued);
    std::atomic<int> ready{0};
    std::atomic<bool> wrong{false};
    auto holder = [&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      PermitWaiter* granted = p->Release();
      if (granted != nullptr) {
        if (granted != &w || granted->next != nullptr) wrong.store(true);
        (void)p->Release();  // the waiter's request ran at once
      }
    };
    std::thread t1(holder), t2(holder);
    while (!p->Idle()) std::this_thread::yield();
    delete p;
    t1.join();
    t2.join();
    ASSERT_FALSE(wrong.load());
  }
}

TEST(PermitsTest, ConcurrentHoldersNeverExceedTheLimit) {
  struct Waiter : PermitWaiter {
    std::atomic<bool> granted{false};
  };
  Permits p;
  constexpr int kLimit = 3;
  p.SetLimit(kLimit);
  p.Open();
  std::atomic<int> holding{0}, max_holding{0};
  std::atomic<long> served{0};
  constexpr int kThreads = 8, kRounds = 3000;
  auto hand_over = [](PermitWaiter* list) {
    while (list != nullptr) {
      auto* w = static_cast<Waiter*>(list);
      list = list->next;
      w->granted.store(true);
      w->granted.notify_one();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        Waiter w;
        const Permits::Admit a = p.Acquire(&w, 1000);
        ASSERT_NE(a, Permits::Admit::kFull);
        ASSERT_NE(a, Permits::Admit::kClosed);
        if (a == Permits::Admit::kQueued) w.granted.wait(false);
        const int now = holding.fetch_add(1) + 1;
        int prev = max_holding.load();
        while (now > prev && !max_holding.compare_exchange_weak(prev, now)) {
        }
        if (i % 7 == 0) std::this_thread::yield();
        holding.fetch_sub(1);
        served.fetch_add(1);
        hand_over(p.Release());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(served.load(), long{kThreads} * kRounds);
  EXPECT_LE(max_holding.load(), kLimit);
  EXPECT_GE(max_holding.load(), 1);
  EXPECT_TRUE(p.Idle());
}

// ---------------------------------------------------------------- through the middleware

MiddlewareOptions LimitOptions() {
  MiddlewareOptions o;
  o.max_threads = 8;
  o.window_s = 60;
  o.execution = Execution::kCallerRuns;
  return o;
}

// Sync and async requests of both classes from many threads: the engine never sees
// more than a class's limit of its requests at once (callers and workers together).
TEST(CallerRunsTest, CallersAndWorkersTogetherNeverExceedTheLimit) {
  TestEngine engine;
  engine.put_delay_ns = 20000;
  engine.get_delay_ns = 5000;
  Middleware mw(LimitOptions());
  constexpr int kInteractive = 3, kBatch = 2;
  ASSERT_TRUE(mw.Start(&engine, kInteractive, kBatch).ok());

  // First, exactly: with the engine's gate closed, each class fills its limit and the
  // rest wait in its queue.
  engine.CloseGate();
  std::vector<std::thread> blocked;
  std::atomic<int> async_done{0};
  for (int i = 0; i < 6; ++i) {
    blocked.emplace_back([&, i] { ASSERT_TRUE(mw.Put("i-g" + std::to_string(i), "v", RequestClass::kInteractive).ok()); });
    Request r;
    r.op = OpType::kPut;
    r.key = "b-g" + std::to_string(i);
    r.cls = RequestClass::kBatch;
    ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status& s, std::string&&) {
                    EXPECT_TRUE(s.ok());
                    async_done++;
                  }).ok());
  }
  ASSERT_TRUE(WaitUntil([&] {
    return engine.inflight('i') == kInteractive && engine.inflight('b') == kBatch &&
           mw.QueueLength(RequestClass::kInteractive) == 3 &&
           mw.QueueLength(RequestClass::kBatch) == 4;
  }));
  EXPECT_EQ(engine.inflight('i'), kInteractive);
  EXPECT_EQ(engine.inflight('b'), kBatch);
  engine.OpenGate();
  for (auto& t : blocked) t.join();
  ASSERT_TRUE(WaitUntil([&] { return async_done.load() == 6; }));

  // Then a free-running mix.
  constexpr int kSync = 6, kAsync = 2, kPerThread = 300;
  std::atomic<int> completions{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kSync; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const bool batch = (t + i) % 3 == 0;
        const std::string key = std::string(batch ? "b" : "i") + "-s" + std::to_string(t) + "-" +
                                std::to_string(i);
        const RequestClass cls = batch ? RequestClass::kBatch : RequestClass::kInteractive;
        std::string v;
        Status s = i % 2 ? mw.Put(key, "v", cls) : mw.Get(key, &v, cls);
        EXPECT_TRUE(s.ok() || s.IsNotFound()) << s.ToString();
        completions++;
      }
    });
  }
  for (int t = 0; t < kAsync; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const bool batch = i % 2 == 0;
        Request r;
        r.op = OpType::kPut;
        r.key = std::string(batch ? "b" : "i") + "-a" + std::to_string(t) + "-" + std::to_string(i);
        r.cls = batch ? RequestClass::kBatch : RequestClass::kInteractive;
        ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status& s, std::string&&) {
                        EXPECT_TRUE(s.ok());
                        completions++;
                      }).ok());
      }
    });
  }
  for (auto& c : clients) c.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(completions.load(), (kSync + kAsync) * kPerThread);
  EXPECT_LE(engine.max_inflight('i'), kInteractive);
  EXPECT_LE(engine.max_inflight('b'), kBatch);
  EXPECT_EQ(mw.GetStats().all.ops, static_cast<uint64_t>((kSync + kAsync) * kPerThread + 12));
}

// A sync call that finds a free permit runs the engine operation on the caller's own
// thread; async requests run on the class's workers.
TEST(CallerRunsTest, SyncCallWithAFreePermitRunsOnTheCallingThread) {
  TestEngine engine;
  std::mutex mu;
  std::vector<std::pair<std::string, std::thread::id>> seen;
  engine.on_op = [&](std::string_view key) {
    std::lock_guard<std::mutex> lock(mu);
    seen.emplace_back(std::string(key), std::this_thread::get_id());
  };
  Middleware mw(LimitOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  ASSERT_TRUE(mw.Put("sync-i", "v", RequestClass::kInteractive).ok());
  ASSERT_TRUE(mw.Put("sync-b", "v", RequestClass::kBatch).ok());
  std::string v;
  ASSERT_TRUE(mw.Get("sync-i", &v).ok());
  EXPECT_EQ(v, "v");
  std::atomic<bool> done{false};
  Request r;
  r.op = OpType::kPut;
  r.key = "async";
  ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status&, std::string&&) {
                  done = true;
                  done.notify_all();
                }).ok());
  done.wait(false);
  ASSERT_TRUE(mw.Stop().ok());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& [key, id] : seen) {
    if (key == "async") {
      EXPECT_NE(id, std::this_thread::get_id()) << key;
    } else {
      EXPECT_EQ(id, std::this_thread::get_id()) << key;
    }
  }
}

// A sync call that has to wait is run by a worker of its class when its turn comes (a
// thread already running), not by its own thread; its caller gets the result.
TEST(CallerRunsTest, WaitingSyncCallIsRunByAWorker) {
  TestEngine engine;
  std::mutex mu;
  std::map<std::string, std::thread::id> ran_on;
  engine.on_op = [&](std::string_view key) {
    std::lock_guard<std::mutex> lock(mu);
    ran_on[std::string(key)] = std::this_thread::get_id();
  };
  Middleware mw(LimitOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  ASSERT_TRUE(mw.Put("k", "value").ok());
  engine.CloseGate();
  std::thread::id holder_id, waiter_id;
  std::thread holder([&] {
    holder_id = std::this_thread::get_id();
    ASSERT_TRUE(mw.Put("holder", "v").ok());
  });
  ASSERT_TRUE(engine.WaitInflight(1));
  std::string got;
  std::thread waiter([&] {
    waiter_id = std::this_thread::get_id();
    ASSERT_TRUE(mw.Get("k", &got).ok());
  });
  ASSERT_TRUE(WaitUntil([&] { return mw.QueueLength(RequestClass::kInteractive) == 1; }));
  engine.OpenGate();
  holder.join();
  waiter.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(got, "value");
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(ran_on["holder"], holder_id);  // found a free permit: ran on its caller
  EXPECT_NE(ran_on["k"], waiter_id);       // waited: a worker ran it
  EXPECT_NE(ran_on["k"], holder_id);
}

// Waiters (sync and async) get the permit in arrival order.
TEST(CallerRunsTest, WaitersAreServedInArrivalOrder) {
  TestEngine engine;
  engine.record_order = true;
  Middleware mw(LimitOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::vector<std::thread> threads;
  threads.emplace_back([&] { ASSERT_TRUE(mw.Put("w00", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));  // holds the only interactive permit
  constexpr int kWaiters = 12;
  std::atomic<int> async_done{0};
  for (int k = 1; k <= kWaiters; ++k) {
    const std::string key = "w" + std::string(k < 10 ? "0" : "") + std::to_string(k);
    if (k % 3 == 0) {
      Request r;
      r.op = OpType::kPut;
      r.key = key;
      ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status&, std::string&&) { async_done++; }).ok());
    } else {
      threads.emplace_back([&, key] { ASSERT_TRUE(mw.Put(key, "v").ok()); });
    }
    // The next one arrives only once this one is queued.
    ASSERT_TRUE(WaitUntil([&] { return mw.QueueLength(RequestClass::kInteractive) == static_cast<size_t>(k); }));
  }
  engine.OpenGate();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(async_done.load(), kWaiters / 3);
  const std::vector<std::string> order = engine.Order();
  ASSERT_EQ(order.size(), static_cast<size_t>(kWaiters + 1));
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(engine.max_inflight(), 1);
}

// Growing the limit lets waiting callers into the engine at once, while the first
// request is still blocked there.
TEST(CallerRunsTest, GrowAdmitsWaitersAtOnce) {
  TestEngine engine;
  Middleware mw(LimitOptions());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { ASSERT_TRUE(mw.Put("g" + std::to_string(i), "v").ok()); });
  }
  ASSERT_TRUE(WaitUntil([&] {
    return engine.inflight() == 1 && mw.QueueLength(RequestClass::kInteractive) == 3;
  }));
  ASSERT_TRUE(mw.SetThreads(4, 1).ok());
  // Nobody has released a permit (the gate is still closed), yet all four are in.
  ASSERT_TRUE(engine.WaitInflight(4));
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), 0u);
  engine.OpenGate();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(engine.puts(), 4u);
}

// Shrinking under load: once every client has finished the operation it had begun,
// the engine never again sees more than the new limit.
TEST(CallerRunsTest, ShrinkUnderLoadTakesEffectAsPermitsComeBack) {
  TestEngine engine;
  engine.put_delay_ns = 30000;
  Middleware mw(LimitOptions());
  ASSERT_TRUE(mw.Start(&engine, 6, 1).ok());
  constexpr int kClients = 8;
  std::atomic<bool> stop{false};
  std::vector<std::atomic<long>> ops(kClients);
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (long i = 0; !stop.load(); ++i) {
        ASSERT_TRUE(mw.Put("s" + std::to_string(t) + "-" + std::to_string(i), "v").ok());
        ops[t]++;
      }
    });
  }
  ASSERT_TRUE(WaitUntil([&] { return ops[0].load() > 10; }));
  ASSERT_TRUE(mw.SetThreads(2, 1).ok());
  std::vector<long> at_shrink(kClients);
  for (int t = 0; t < kClients; ++t) at_shrink[t] = ops[t].load();
  // Every client completes two more calls: whatever it had in the engine when the limit
  // moved has finished, and it has since passed the new limit at least once.
  ASSERT_TRUE(WaitUntil([&] {
    for (int t = 0; t < kClients; ++t) {
      if (ops[t].load() < at_shrink[t] + 2) return false;
    }
    return true;
  }));
  engine.ResetMaxInflight();
  const long before = ops[0].load();
  ASSERT_TRUE(WaitUntil([&] { return ops[0].load() > before + 20; }));
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_LE(engine.max_inflight('s'), 2);
  ASSERT_TRUE(mw.Stop().ok());
}

// Stop with sync callers parked in the FIFO and async requests queued behind a blocked
// request: it refuses newcomers, waits for every accepted one, and loses nothing.
TEST(CallerRunsTest, StopDrainsParkedWaiters) {
  TestEngine engine;
  MiddlewareOptions o = LimitOptions();
  o.spin_ns = 0;  // waiters go straight to the futex
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::vector<std::thread> threads;
  std::atomic<int> sync_ok{0}, async_done{0};
  threads.emplace_back([&] { if (mw.Put("p-first", "v").ok()) sync_ok++; });
  ASSERT_TRUE(engine.WaitInflight(1));
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] { if (mw.Put("p-s" + std::to_string(i), "v").ok()) sync_ok++; });
    Request r;
    r.op = OpType::kPut;
    r.key = "p-a" + std::to_string(i);
    ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status& s, std::string&&) {
                    EXPECT_TRUE(s.ok());
                    async_done++;
                  }).ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return mw.QueueLength(RequestClass::kInteractive) == 10; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    EXPECT_TRUE(mw.Stop().ok());
    stopped = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return !mw.running(); }));
  EXPECT_TRUE(mw.Put("p-late", "v").IsShutdown());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(stopped.load());  // the engine is still blocked: Stop must be waiting
  engine.OpenGate();
  stopper.join();
  for (auto& t : threads) t.join();
  EXPECT_EQ(sync_ok.load(), 6);
  EXPECT_EQ(async_done.load(), 5);
  EXPECT_EQ(engine.puts(), 11u);
  for (const auto& [key, n] : engine.Executions()) EXPECT_EQ(n, 1) << key;
  EXPECT_EQ(mw.GetStats().all.ops, 11u);
}

// No control: the start sizes are no limit; only no_control_max_inflight bounds it.
TEST(CallerRunsTest, NoControlHasNoPerClassLimit) {
  TestEngine engine;
  MiddlewareOptions o = LimitOptions();
  o.control = false;
  o.no_control_max_inflight = 200;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  constexpr int kCallers = 24;
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_TRUE(mw.Put("n" + std::to_string(i), "v", i % 2 ? RequestClass::kBatch
                                                              : RequestClass::kInteractive)
                      .ok());
    });
  }
  ASSERT_TRUE(engine.WaitInflight(kCallers));
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), 0u);
  EXPECT_EQ(mw.QueueLength(RequestClass::kBatch), 0u);
  engine.OpenGate();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(engine.max_inflight(), kCallers);
}

// The queue length (QueueLength, window stats, state) counts sync callers waiting for
// a permit as well as queued async requests.
TEST(CallerRunsTest, QueueLengthCountsSyncWaiters) {
  TestEngine engine;
  MiddlewareOptions o = LimitOptions();
  o.window_s = 0.05;
  o.queue_sample_s = 0.002;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::vector<std::thread> threads;
  threads.emplace_back([&] { ASSERT_TRUE(mw.Put("q-first", "v", RequestClass::kBatch).ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { ASSERT_TRUE(mw.Put("q-s" + std::to_string(i), "v", RequestClass::kBatch).ok()); });
  }
  std::atomic<int> async_done{0};
  for (int i = 0; i < 2; ++i) {
    Request r;
    r.op = OpType::kPut;
    r.key = "q-a" + std::to_string(i);
    r.cls = RequestClass::kBatch;
    ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status&, std::string&&) { async_done++; }).ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return mw.QueueLength(RequestClass::kBatch) == 5; }));
  WindowStats opened, full;
  ASSERT_TRUE(mw.WaitForWindow(mw.GetStats().seq, 10, &opened).ok());
  ASSERT_TRUE(mw.WaitForWindow(opened.seq, 10, &full).ok());
  EXPECT_EQ(full.batch.queue_len_end, 5u);
  EXPECT_DOUBLE_EQ(full.batch.queue_len_mean, 5.0);
  EXPECT_EQ(full.interactive.queue_len_end, 0u);
  EXPECT_EQ(mw.GetState()[3], 5.0);
  engine.OpenGate();
  for (auto& t : threads) t.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(async_done.load(), 2);
  EXPECT_EQ(engine.puts(), 6u);
}

}  // namespace
}  // namespace nvmw
