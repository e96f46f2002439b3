// SubmitOrRun, the non-blocking submission an event loop uses: with a free permit the
// request runs on the calling thread and completes before the call returns; without one
// the call returns at once and a worker of the class runs it later; it never waits, in
// any mode. TestEngine's gate makes "no free permit" exact.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "middleware/test_engine.h"
#include "nvmw/middleware.h"
#include "test_util.h"

namespace nvmw {
namespace {

using testing::TestEngine;
using testing::WaitUntil;

MiddlewareOptions Options(Execution e = Execution::kCallerRuns) {
  MiddlewareOptions o;
  o.max_threads = 4;
  o.window_s = 60;
  o.execution = e;
  return o;
}

Request Req(OpType op, std::string key, std::string value = {},
            RequestClass cls = RequestClass::kInteractive) {
  Request r;
  r.op = op;
  r.key = std::move(key);
  r.value = std::move(value);
  r.cls = cls;
  return r;
}

// Records one completion: status, value and the thread it ran on.
struct Outcome {
  std::atomic<bool> done{false};
  Status status;
  std::string value;
  std::thread::id thread;
  Completion Fn() {
    return [this](const Status& s, std::string&& v) {
      status = s;
      value = std::move(v);
      thread = std::this_thread::get_id();
      done.store(true);
    };
  }
};

TEST(SubmitOrRunTest, FreePermitRunsInlineAndCompletesBeforeReturning) {
  TestEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  ASSERT_TRUE(mw.Put("k", std::string(100000, 'x')).ok());
  Outcome get;
  ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kGet, "k"), get.Fn()).ok());
  ASSERT_TRUE(get.done.load());  // before the call returned
  EXPECT_EQ(get.thread, std::this_thread::get_id());
  EXPECT_TRUE(get.status.ok());
  EXPECT_EQ(get.value, std::string(100000, 'x'));
  Outcome missing;
  ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kGet, "nope"), missing.Fn()).ok());
  ASSERT_TRUE(missing.done.load());
  EXPECT_TRUE(missing.status.IsNotFound());
  EXPECT_TRUE(missing.value.empty());
  ASSERT_TRUE(mw.Stop().ok());
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.interactive.ops, 2u);  // both inline gets
  EXPECT_EQ(w.batch.ops, 1u);        // the 100 KB put (size rule)
}

TEST(SubmitOrRunTest, NoFreePermitReturnsAtOnceAndAWorkerRunsItLater) {
  TestEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw.Put("holder", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));  // the only interactive permit is taken
  Outcome put;
  ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kPut, "queued", "val"), put.Fn()).ok());
  EXPECT_FALSE(put.done.load());  // returned without waiting for the permit
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), 1u);
  engine.OpenGate();
  holder.join();
  ASSERT_TRUE(WaitUntil([&] { return put.done.load(); }));
  EXPECT_TRUE(put.status.ok());
  EXPECT_NE(put.thread, std::this_thread::get_id());  // a worker ran it
  std::string v;
  ASSERT_TRUE(mw.Get("queued", &v).ok());
  EXPECT_EQ(v, "val");
  ASSERT_TRUE(mw.Stop().ok());
}

TEST(SubmitOrRunTest, RefusedWhenStoppedAndForBadInput) {
  TestEngine engine;
  Middleware mw(Options());
  bool called = false;
  auto fn = [&](const Status&, std::string&&) { called = true; };
  EXPECT_TRUE(mw.SubmitOrRun(Req(OpType::kGet, "k"), fn).IsShutdown());  // before Start
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  EXPECT_TRUE(mw.SubmitOrRun(Req(static_cast<OpType>(9), "k"), fn).IsInvalidArgument());
  EXPECT_TRUE(mw.SubmitOrRun(Req(OpType::kGet, "k"), nullptr).IsInvalidArgument());
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_TRUE(mw.SubmitOrRun(Req(OpType::kGet, "k"), fn).IsShutdown());
  EXPECT_FALSE(called);
}

TEST(SubmitOrRunTest, StopDrainsQueuedRequests) {
  TestEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw.Put("holder", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));
  constexpr int kN = 20;
  std::atomic<int> completed{0};
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kPut, "k" + std::to_string(i), "v"),
                               [&](const Status& s, std::string&&) {
                                 EXPECT_TRUE(s.ok());
                                 completed.fetch_add(1);
                               })
                    .ok());
  }
  EXPECT_EQ(completed.load(), 0);
  std::thread stopper([&] { ASSERT_TRUE(mw.Stop().ok()); });
  engine.OpenGate();
  stopper.join();
  holder.join();
  EXPECT_EQ(completed.load(), kN);
  EXPECT_EQ(engine.Count(), static_cast<uint64_t>(kN + 1));
}

TEST(SubmitOrRunTest, NoControlRunsInlineOrRefusesNeverWaits) {
  TestEngine engine;
  MiddlewareOptions o = Options();
  o.control = false;
  o.no_control_max_inflight = 1;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  Outcome inline_put;
  ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kPut, "a", "1"), inline_put.Fn()).ok());
  ASSERT_TRUE(inline_put.done.load());
  EXPECT_EQ(inline_put.thread, std::this_thread::get_id());
  engine.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw.Put("holder", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));
  bool called = false;
  Status refused = mw.SubmitOrRun(Req(OpType::kGet, "a"), [&](const Status&, std::string&&) {
    called = true;
  });
  EXPECT_TRUE(refused.IsOverloaded());
  // Nothing queues without control: the message says what is full (it said "queue full").
  EXPECT_EQ(refused.message(), "no free permit: all 1 requests no control runs at once are in flight");
  EXPECT_FALSE(called);
  engine.OpenGate();
  holder.join();
  ASSERT_TRUE(mw.Stop().ok());
}

TEST(SubmitOrRunTest, HandOffRunsOnAWorker) {
  TestEngine engine;
  Middleware mw(Options(Execution::kHandOff));
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  Outcome put;
  ASSERT_TRUE(mw.SubmitOrRun(Req(OpType::kPut, "k", "v"), put.Fn()).ok());
  ASSERT_TRUE(WaitUntil([&] { return put.done.load(); }));
  EXPECT_TRUE(put.status.ok());
  EXPECT_NE(put.thread, std::this_thread::get_id());
  ASSERT_TRUE(mw.Stop().ok());
}

}  // namespace
}  // namespace nvmw
