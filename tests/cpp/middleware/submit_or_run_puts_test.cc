// SubmitOrRunPuts, the group submission of an event loop's writes: with a free permit
// of the first valid request's class, that class's valid Puts run on the calling thread
// under that one permit through one Engine::PutMany, and their completions run inline,
// in order, before the call returns; everything else (another class, no free permit,
// hand-off) goes one by one as SubmitOrRun takes it, and accepted[i] is what
// SubmitOrRun would have returned. GroupEngine records each PutMany call.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
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

// TestEngine whose PutMany records its calls (keys, thread) and may run a hook or throw
// before storing the items one by one (Engine's default).
class GroupEngine : public TestEngine {
 public:
  // Runs inside PutMany, before the items are stored. Set before use.
  std::function<void()> in_put_many;
  // What PutMany throws instead of storing anything: 0 nothing, 1 runtime_error, 2 bad_alloc.
  std::atomic<int> throw_kind{0};

  void PutMany(const KeyValue* items, size_t n, Status* results) override {
    {
      std::lock_guard<std::mutex> lock(calls_mu_);
      std::vector<std::string> keys;
      for (size_t i = 0; i < n; ++i) keys.emplace_back(items[i].key);
      calls_.push_back(std::move(keys));
      threads_.push_back(std::this_thread::get_id());
    }
    if (in_put_many) in_put_many();
    if (throw_kind.load() == 1) throw std::runtime_error("injected");
    if (throw_kind.load() == 2) throw std::bad_alloc();
    Engine::PutMany(items, n, results);
  }

  std::vector<std::vector<std::string>> Calls() {
    std::lock_guard<std::mutex> lock(calls_mu_);
    return calls_;
  }
  std::vector<std::thread::id> Threads() {
    std::lock_guard<std::mutex> lock(calls_mu_);
    return threads_;
  }
  std::string Value(const std::string& key) {
    std::string v;
    Status s = Get(key, [&](std::string_view x) { v = std::string(x); });
    return s.ok() ? v : "<" + s.ToString() + ">";
  }

 private:
  std::mutex calls_mu_;
  std::vector<std::vector<std::string>> calls_;
  std::vector<std::thread::id> threads_;
};

MiddlewareOptions Options(Execution e = Execution::kCallerRuns) {
  MiddlewareOptions o;
  o.max_threads = 4;
  o.window_s = 60;
  o.execution = e;
  return o;
}

Request Put(std::string key, std::string value, RequestClass cls = RequestClass::kInteractive) {
  Request r;
  r.op = OpType::kPut;
  r.key = std::move(key);
  r.value = std::move(value);
  r.cls = cls;
  return r;
}

// n requests, their completions and what each saw: how many calls, the status of the
// last one, the thread, and the order in which they ran.
struct Group {
  std::vector<Request> requests;
  std::vector<Completion> done;
  std::vector<Status> accepted;
  std::vector<std::atomic<int>> calls;
  std::vector<Status> status;
  std::vector<std::thread::id> thread;
  std::mutex mu;
  std::vector<size_t> order;

  explicit Group(std::vector<Request> reqs)
      : requests(std::move(reqs)), done(requests.size()), accepted(requests.size()),
        calls(requests.size()), status(requests.size()), thread(requests.size()) {
    for (size_t i = 0; i < requests.size(); ++i) {
      done[i] = [this, i](const Status& s, std::string&&) {
        {
          std::lock_guard<std::mutex> lock(mu);
          status[i] = s;
          thread[i] = std::this_thread::get_id();
          order.push_back(i);
        }
        calls[i].fetch_add(1);
      };
    }
  }
  // What SubmitOrRunPuts returns: how many ran together under one permit.
  size_t SubmitTo(Middleware* mw) {
    return mw->SubmitOrRunPuts(requests.data(), done.data(), requests.size(), accepted.data());
  }
  int Called(size_t i) const { return calls[i].load(); }
  bool AllCalled(const std::vector<size_t>& which) const {
    for (size_t i : which) {
      if (calls[i].load() == 0) return false;
    }
    return true;
  }
  std::vector<size_t> Order() {
    std::lock_guard<std::mutex> lock(mu);
    return order;
  }
};

std::vector<Request> Puts(const std::string& prefix, int n) {
  std::vector<Request> r;
  for (int i = 0; i < n; ++i) r.push_back(Put(prefix + std::to_string(i), "v" + std::to_string(i)));
  return r;
}

// Whether a SubmitOrRun of the class, from another thread, finds a free permit (its
// completion ran before the call returned). When it does not, the probe stays queued
// and a worker completes it later; *probe_done says when.
bool OtherThreadFindsAFreePermit(Middleware* mw, RequestClass cls, std::atomic<bool>* probe_done) {
  bool inline_done = false;
  std::thread t([&] {
    Request r;
    r.op = OpType::kGet;
    r.key = "probe";
    r.cls = cls;
    Status s = mw->SubmitOrRun(std::move(r), [probe_done](const Status&, std::string&&) {
      probe_done->store(true);
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    inline_done = probe_done->load();
  });
  t.join();
  return inline_done;
}

TEST(SubmitOrRunPutsTest, GroupRunsInlineInOnePutManyWithCompletionsInOrder) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::atomic<bool> probe_done{false};
  bool probe_inline = true;
  engine.in_put_many = [&] {
    // The group holds the class's only permit while the engine runs it.
    probe_inline = OtherThreadFindsAFreePermit(&mw, RequestClass::kInteractive, &probe_done);
  };
  constexpr int kN = 5;
  Group g(Puts("k", kN));
  // As for one request, the completions run before the permit goes back.
  std::atomic<bool> late_probe_done{false};
  bool late_probe_inline = true;
  Completion last = std::move(g.done[kN - 1]);
  g.done[kN - 1] = [&](const Status& s, std::string&& v) {
    late_probe_inline = OtherThreadFindsAFreePermit(&mw, RequestClass::kInteractive, &late_probe_done);
    last(s, std::move(v));
  };
  EXPECT_EQ(g.SubmitTo(&mw), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_TRUE(g.accepted[i].ok()) << i << " " << g.accepted[i].ToString();
    EXPECT_EQ(g.Called(i), 1) << i;  // before the call returned
    EXPECT_TRUE(g.status[i].ok()) << i;
    EXPECT_EQ(g.thread[i], std::this_thread::get_id()) << i;
    EXPECT_EQ(engine.Value("k" + std::to_string(i)), "v" + std::to_string(i));
  }
  EXPECT_EQ(g.Order(), (std::vector<size_t>{0, 1, 2, 3, 4}));
  const auto calls = engine.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{"k0", "k1", "k2", "k3", "k4"}));
  EXPECT_EQ(engine.Threads()[0], std::this_thread::get_id());
  EXPECT_FALSE(probe_inline);
  EXPECT_FALSE(late_probe_inline);
  // The permit went back: the probes queued meanwhile are run, and a new group runs inline.
  ASSERT_TRUE(WaitUntil([&] { return probe_done.load() && late_probe_done.load(); }));
  engine.in_put_many = nullptr;
  Group again(Puts("again", 2));
  EXPECT_EQ(again.SubmitTo(&mw), 2u);
  EXPECT_EQ(again.Called(0), 1);
  EXPECT_EQ(again.Called(1), 1);
  EXPECT_EQ(engine.Calls().size(), 2u);
  ASSERT_TRUE(mw.Stop().ok());
}

// With a limit of 2 the group takes one permit, not one per Put: the other stays free.
TEST(SubmitOrRunPutsTest, GroupHoldsOnePermitWhateverItsSize) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 2, 1).ok());
  std::atomic<bool> probe_done{false};
  bool probe_inline = false;
  engine.in_put_many = [&] {
    probe_inline = OtherThreadFindsAFreePermit(&mw, RequestClass::kInteractive, &probe_done);
  };
  Group g(Puts("k", 6));
  g.SubmitTo(&mw);
  EXPECT_TRUE(probe_inline);
  ASSERT_EQ(engine.Calls().size(), 1u);
  EXPECT_EQ(engine.Calls()[0].size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(g.Called(i), 1) << i;
  ASSERT_TRUE(mw.Stop().ok());
}

TEST(SubmitOrRunPutsTest, NoFreePermitQueuesEachForTheWorkers) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  engine.CloseGate();
  std::thread holder([&] { ASSERT_TRUE(mw.Put("holder", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(1));  // the only interactive permit is taken
  constexpr int kN = 3;
  Group g(Puts("q", kN));
  EXPECT_EQ(g.SubmitTo(&mw), 0u);  // none ran together
  for (int i = 0; i < kN; ++i) {
    EXPECT_TRUE(g.accepted[i].ok()) << i << " " << g.accepted[i].ToString();
    EXPECT_EQ(g.Called(i), 0) << i;  // returned without waiting for the permit
  }
  EXPECT_EQ(mw.QueueLength(RequestClass::kInteractive), static_cast<size_t>(kN));
  engine.OpenGate();
  holder.join();
  ASSERT_TRUE(WaitUntil([&] { return g.AllCalled({0, 1, 2}); }));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(g.Called(i), 1) << i;
    EXPECT_TRUE(g.status[i].ok()) << i;
    EXPECT_NE(g.thread[i], std::this_thread::get_id()) << i;  // a worker ran it
    EXPECT_EQ(engine.Value("q" + std::to_string(i)), "v" + std::to_string(i));
  }
  EXPECT_TRUE(engine.Calls().empty());
  ASSERT_TRUE(mw.Stop().ok());
}

// Invalid requests are refused as SubmitOrRun refuses them, their completions never
// run, and they do not keep the valid ones (before and after them) out of the group.
TEST(SubmitOrRunPutsTest, InvalidRequestsAreRefusedAndTheOthersStillGroup) {
  GroupEngine engine;
  MiddlewareOptions o = Options();
  o.max_value_bytes = 16;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::vector<Request> reqs;
  reqs.push_back(Put("big", std::string(17, 'x')));                       // 0: over max_value_bytes
  reqs.push_back(Put("a", std::string(16, 'a')));                         // 1
  reqs.push_back(Put("get", "v"));                                        // 2: not a Put
  reqs[2].op = OpType::kGet;
  reqs.push_back(Put("nodone", "v"));                                     // 3: no completion
  reqs.push_back(Put("b", "b"));                                          // 4
  reqs.push_back(Put("badcls", "v", static_cast<RequestClass>(7)));       // 5: no such class
  reqs.push_back(Put("rm", "v"));                                         // 6: not a Put
  reqs[6].op = OpType::kRemove;
  reqs.push_back(Put(engine.fail_key, "v"));                              // 7: the engine fails it
  reqs.push_back(Put("c", "c"));                                          // 8
  Group g(std::move(reqs));
  g.done[3] = nullptr;
  EXPECT_EQ(g.SubmitTo(&mw), 4u);  // a, b, the engine's failure and c
  for (size_t i : {0, 2, 3, 5, 6}) {
    EXPECT_TRUE(g.accepted[i].IsInvalidArgument()) << i << " " << g.accepted[i].ToString();
    EXPECT_EQ(g.Called(i), 0) << i;
  }
  EXPECT_NE(g.accepted[0].ToString().find("max_value_bytes"), std::string::npos);
  for (size_t i : {1, 4, 7, 8}) {
    EXPECT_TRUE(g.accepted[i].ok()) << i << " " << g.accepted[i].ToString();
    EXPECT_EQ(g.Called(i), 1) << i;
  }
  // Each member gets its own result.
  EXPECT_TRUE(g.status[1].ok());
  EXPECT_TRUE(g.status[4].ok());
  EXPECT_TRUE(g.status[7].IsIOError()) << g.status[7].ToString();
  EXPECT_TRUE(g.status[8].ok());
  EXPECT_EQ(g.Order(), (std::vector<size_t>{1, 4, 7, 8}));
  const auto calls = engine.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{"a", "b", engine.fail_key, "c"}));
  const auto exec = engine.Executions();
  for (const char* k : {"big", "get", "nodone", "badcls", "rm"}) EXPECT_EQ(exec.count(k), 0u) << k;
  EXPECT_EQ(engine.Value("a"), std::string(16, 'a'));
  EXPECT_EQ(engine.Value("c"), "c");
  ASSERT_TRUE(mw.Stop().ok());
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.interactive.ops, 4u);
  EXPECT_EQ(w.interactive.errors, 1u);
}

// The group is the first valid request's class; a request of the other class goes
// through SubmitOrRun (here inline too: its class has a free permit), outside PutMany.
TEST(SubmitOrRunPutsTest, OtherClassGoesThroughSubmitOrRun) {
  for (const RequestClass first : {RequestClass::kInteractive, RequestClass::kBatch}) {
    const RequestClass other =
        first == RequestClass::kInteractive ? RequestClass::kBatch : RequestClass::kInteractive;
    GroupEngine engine;
    Middleware mw(Options());
    ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
    std::vector<Request> reqs;
    reqs.push_back(Put("g0", "1", first));
    reqs.push_back(Put("o1", "2", other));
    reqs.push_back(Put("g2", "3", first));
    reqs.push_back(Put("o3", "4", other));
    reqs.push_back(Put("g4", "5", first));
    Group g(std::move(reqs));
    EXPECT_EQ(g.SubmitTo(&mw), 3u);  // the two of the other class ran alone
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_TRUE(g.accepted[i].ok()) << i;
      EXPECT_EQ(g.Called(i), 1) << i;
      EXPECT_TRUE(g.status[i].ok()) << i;
    }
    const auto calls = engine.Calls();
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0], (std::vector<std::string>{"g0", "g2", "g4"}));
    const auto exec = engine.Executions();
    EXPECT_EQ(exec.at("o1"), 1);
    EXPECT_EQ(exec.at("o3"), 1);
    EXPECT_EQ(engine.Value("o3"), "4");
    ASSERT_TRUE(mw.Stop().ok());
    const WindowStats w = mw.GetStats();
    const ClassStats& grouped = first == RequestClass::kInteractive ? w.interactive : w.batch;
    const ClassStats& alone = first == RequestClass::kInteractive ? w.batch : w.interactive;
    EXPECT_EQ(grouped.ops, 3u);
    EXPECT_EQ(alone.ops, 2u);
  }
}

// The size rule decides the class of a kAuto request, as for SubmitOrRun.
TEST(SubmitOrRunPutsTest, AutoClassFollowsTheSizeRule) {
  GroupEngine engine;
  MiddlewareOptions o = Options();
  o.batch_threshold_bytes = 8;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  Group g({Put("small0", "v", RequestClass::kAuto), Put("large", std::string(8, 'x'), RequestClass::kAuto),
           Put("small1", "v", RequestClass::kAuto)});
  g.SubmitTo(&mw);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(g.Called(i), 1) << i;
  ASSERT_EQ(engine.Calls().size(), 1u);
  EXPECT_EQ(engine.Calls()[0], (std::vector<std::string>{"small0", "small1"}));
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(mw.GetStats().batch.ops, 1u);
  EXPECT_EQ(mw.GetStats().interactive.ops, 2u);
}

TEST(SubmitOrRunPutsTest, HandOffRunsEachOnAWorker) {
  GroupEngine engine;
  Middleware mw(Options(Execution::kHandOff));
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  Group g(Puts("h", 3));
  EXPECT_EQ(g.SubmitTo(&mw), 0u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(g.accepted[i].ok()) << i;
  ASSERT_TRUE(WaitUntil([&] { return g.AllCalled({0, 1, 2}); }));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(g.Called(i), 1) << i;
    EXPECT_TRUE(g.status[i].ok()) << i;
    EXPECT_NE(g.thread[i], std::this_thread::get_id()) << i;
    EXPECT_EQ(engine.Value("h" + std::to_string(i)), "v" + std::to_string(i));
  }
  EXPECT_TRUE(engine.Calls().empty());
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(mw.GetStats().interactive.ops, 3u);
}

// No control: one of the shared permits for the group, inline; with none free, every
// request is Overloaded (nothing queues without control) and no completion runs.
TEST(SubmitOrRunPutsTest, NoControlGroupsUnderOneSharedPermitOrRefuses) {
  GroupEngine engine;
  MiddlewareOptions o = Options();
  o.control = false;
  o.no_control_max_inflight = 2;
  Middleware mw(o);
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  std::atomic<bool> probe_done{false};
  bool probe_inline = false;
  engine.in_put_many = [&] {
    probe_inline = OtherThreadFindsAFreePermit(&mw, RequestClass::kInteractive, &probe_done);
  };
  Group g(Puts("n", 4));
  g.SubmitTo(&mw);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(g.accepted[i].ok()) << i;
    EXPECT_EQ(g.Called(i), 1) << i;
    EXPECT_EQ(g.thread[i], std::this_thread::get_id()) << i;
  }
  EXPECT_TRUE(probe_inline);  // one shared permit taken, the other free
  ASSERT_EQ(engine.Calls().size(), 1u);
  EXPECT_EQ(engine.Calls()[0].size(), 4u);
  engine.in_put_many = nullptr;

  engine.CloseGate();
  std::thread h1([&] { ASSERT_TRUE(mw.Put("holder1", "v").ok()); });
  std::thread h2([&] { ASSERT_TRUE(mw.Put("holder2", "v").ok()); });
  ASSERT_TRUE(engine.WaitInflight(2));  // both shared permits taken
  Group full(Puts("f", 3));
  full.SubmitTo(&mw);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(full.accepted[i].IsOverloaded()) << i << " " << full.accepted[i].ToString();
    EXPECT_EQ(full.Called(i), 0) << i;
  }
  engine.OpenGate();
  h1.join();
  h2.join();
  ASSERT_TRUE(mw.Stop().ok());
  EXPECT_EQ(engine.Calls().size(), 1u);
  EXPECT_EQ(mw.GetStats().interactive.rejected, 3u);
}

TEST(SubmitOrRunPutsTest, NotRunningIsShutdown) {
  GroupEngine engine;
  Middleware mw(Options());
  Group before(Puts("b", 3));
  EXPECT_EQ(before.SubmitTo(&mw), 0u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(before.accepted[i].IsShutdown()) << i << " " << before.accepted[i].ToString();
    EXPECT_EQ(before.Called(i), 0) << i;
  }
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  ASSERT_TRUE(mw.Stop().ok());
  Group after(Puts("a", 3));
  EXPECT_EQ(after.SubmitTo(&mw), 0u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(after.accepted[i].IsShutdown()) << i << " " << after.accepted[i].ToString();
    EXPECT_EQ(after.Called(i), 0) << i;
  }
  EXPECT_TRUE(engine.Calls().empty());
  EXPECT_EQ(engine.Count(), 0u);
}

// Each Put of a group counts as one request of its class: ops, bytes, writes.
TEST(SubmitOrRunPutsTest, WindowCountsEachPutOfTheGroup) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  constexpr int kN = 7;
  std::vector<Request> reqs;
  for (int i = 0; i < kN; ++i) reqs.push_back(Put("w" + std::to_string(i), std::string(10, 'v')));
  Group g(std::move(reqs));
  g.SubmitTo(&mw);
  ASSERT_EQ(engine.Calls().size(), 1u);
  ASSERT_TRUE(mw.Stop().ok());
  const WindowStats w = mw.GetStats();
  EXPECT_EQ(w.interactive.ops, static_cast<uint64_t>(kN));
  EXPECT_EQ(w.interactive.errors, 0u);
  EXPECT_DOUBLE_EQ(w.interactive.write_ratio, 1.0);
  EXPECT_DOUBLE_EQ(w.interactive.mean_block_bytes, 10.0);
  EXPECT_EQ(w.batch.ops, 0u);
  EXPECT_EQ(w.all.ops, static_cast<uint64_t>(kN));
}

// An engine whose PutMany throws: every member completes once with an error, and the
// permit goes back (the next group and a synchronous call run).
TEST(SubmitOrRunPutsTest, ThrowingPutManyFailsEachMemberAndReleasesThePermit) {
  for (const int kind : {1, 2}) {
    GroupEngine engine;
    Middleware mw(Options());
    ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
    engine.throw_kind = kind;
    Group g(Puts("t", 3));
    g.SubmitTo(&mw);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(g.accepted[i].ok()) << i;
      EXPECT_EQ(g.Called(i), 1) << i;
      EXPECT_FALSE(g.status[i].ok()) << i;
      if (kind == 2) {
        EXPECT_TRUE(g.status[i].IsNoSpace()) << g.status[i].ToString();
      }
    }
    engine.throw_kind = 0;
    Group next(Puts("n", 2));
    next.SubmitTo(&mw);
    EXPECT_EQ(next.Called(0), 1);
    EXPECT_EQ(next.Called(1), 1);
    EXPECT_EQ(next.thread[0], std::this_thread::get_id());  // inline: the permit is free
    EXPECT_TRUE(mw.Put("sync", "v").ok());
    ASSERT_TRUE(mw.Stop().ok());
    EXPECT_EQ(mw.GetStats().interactive.errors, 3u);
    EXPECT_EQ(mw.GetStats().interactive.ops, 6u);
  }
}

// A completion of the group may submit again (the server resumes a connection, whose
// next command adds a SET, from inside the loop): with the class's only permit held by
// the group, the nested group is queued and a worker runs it.
TEST(SubmitOrRunPutsTest, CompletionMaySubmitAnotherGroup) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  Group inner(Puts("inner", 2));
  Group outer(Puts("outer", 2));
  Completion first = std::move(outer.done[0]);
  outer.done[0] = [&](const Status& s, std::string&& v) {
    inner.SubmitTo(&mw);
    first(s, std::move(v));
  };
  outer.SubmitTo(&mw);
  EXPECT_EQ(outer.Called(0), 1);
  EXPECT_EQ(outer.Called(1), 1);
  EXPECT_TRUE(inner.accepted[0].ok());
  EXPECT_TRUE(inner.accepted[1].ok());
  ASSERT_TRUE(WaitUntil([&] { return inner.AllCalled({0, 1}); }));
  EXPECT_TRUE(inner.status[0].ok());
  EXPECT_EQ(engine.Value("inner1"), "v1");
  ASSERT_TRUE(mw.Stop().ok());
}

TEST(SubmitOrRunPutsTest, EmptyAndSingleRequests) {
  GroupEngine engine;
  Middleware mw(Options());
  ASSERT_TRUE(mw.Start(&engine, 1, 1).ok());
  EXPECT_EQ(mw.SubmitOrRunPuts(nullptr, nullptr, 0, nullptr), 0u);
  Group one(Puts("one", 1));
  EXPECT_EQ(one.SubmitTo(&mw), 0u);  // one alone takes the SubmitOrRun path
  EXPECT_TRUE(one.accepted[0].ok());
  EXPECT_EQ(one.Called(0), 1);
  EXPECT_EQ(engine.Value("one0"), "v0");
  ASSERT_TRUE(mw.Stop().ok());
}

}  // namespace
}  // namespace nvmw
