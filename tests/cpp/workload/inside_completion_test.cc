// A YCSB generator or a trace replay used from inside a completion of the middleware
// it drives. That thread holds a permit of the middleware (with hand-off, it is a
// worker; without control, one of the shared permits) until the completion returns,
// and a client may be waiting for exactly that permit: a call that waits for the
// clients (Join, Results, Start, Load, Run) returns NotSupported there, and the
// destructor stops the clients and leaves joining them, and the free, to a thread of
// its own (WaitForDeferredStops).
//
// The cases that deadlocked run in a forked child with an alarm: a child killed by
// SIGALRM is the hang this guards against.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/replay.h"
#include "nvmw/trace.h"
#include "nvmw/ycsb.h"
#include "test_util.h"

namespace nvmw {
namespace {

using testing::InChild;
using testing::NoLeaks;
using testing::WaitUntil;

constexpr const char* kHung = "(142 = 128 + SIGALRM: the child hung)";

enum class Mode { kCallerRuns, kHandOff, kNoControl };

const char* ModeName(Mode m) {
  return m == Mode::kCallerRuns ? "caller-runs" : m == Mode::kHandOff ? "hand-off" : "no-control";
}

// One interactive permit (one worker with hand-off; one shared permit without
// control): while a completion runs, every client waits for it.
MiddlewareOptions Options(Mode m) {
  MiddlewareOptions o;
  o.max_threads = 4;
  o.window_s = 60;
  o.control = m != Mode::kNoControl;
  o.execution = m == Mode::kHandOff ? Execution::kHandOff : Execution::kCallerRuns;
  o.no_control_max_inflight = 1;
  return o;
}

bool Refused(const Status& s) {
  if (s.code() == Status::Code::kNotSupported) return true;
  std::fprintf(stderr, "child: expected NotSupported, got %s\n", s.ToString().c_str());
  return false;
}

// Runs body inside a completion of an interactive request of mw, once a client is
// waiting for the permit that completion holds (the deadlock needs one); false if the
// completion never ran or no client came.
bool InsideCompletionWithClientWaiting(Middleware* mw, const std::function<void()>& body) {
  std::atomic<bool> done{false}, waited{false};
  Request r;
  r.op = OpType::kExists;
  r.key = "k";
  r.cls = RequestClass::kInteractive;
  const Status s = mw->Submit(std::move(r), [&](const Status&, std::string&&) {
    waited.store(WaitUntil([mw] { return mw->QueueLength(RequestClass::kInteractive) > 0; }));
    body();
    done.store(true);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "child: submit: %s\n", s.ToString().c_str());
    return false;
  }
  return WaitUntil([&] { return done.load(); }) && waited.load();
}

// Clients that run until stopped, reading and writing the interactive class.
YcsbOptions Endless() {
  YcsbOptions o;
  o.record_count = 16;
  o.operation_count = 0;
  o.duration_s = 3600;
  o.read_proportion = 0.5;
  o.update_proportion = 0.5;
  o.threads = 2;
  o.value_bytes = 16;
  return o;
}

// 1,000 records 1 ms apart over 16 keys, looped: the clients run until stopped.
Trace LoopTrace() {
  Trace t;
  for (int i = 0; i < 1000; ++i) {
    t.records.push_back({static_cast<int64_t>(i) * 1000, i % 2 ? TraceOp::kRead : TraceOp::kWrite,
                         "key" + std::to_string(i % 16), 16});
  }
  return t;
}

ReplayOptions Looping() {
  ReplayOptions o;
  o.threads = 2;
  o.loop = true;
  o.cls = RequestClass::kInteractive;
  o.preload_threads = 1;
  return o;
}

// ---- YCSB generator ----

// Join from the completion waited for the clients, one of which waited for the
// completion's permit: a hang. Every call that waits for the clients is refused there.
int YcsbWaitingCallsInsideCompletion(Mode mode) {
  auto engine = NewMemoryEngine();
  Middleware mw(Options(mode));
  CHILD_CHECK(mw.Start(engine.get(), 1, 1).ok());
  YcsbGenerator gen(Endless(), &mw);
  CHILD_CHECK(gen.Load().ok());
  CHILD_CHECK(gen.Start().ok());
  Status join, results, start, load, run;
  bool running = false;
  CHILD_CHECK(InsideCompletionWithClientWaiting(&mw, [&] {
    join = gen.Join();
    YcsbResults r;
    results = gen.Results(&r);
    start = gen.Start();
    load = gen.Load();
    run = gen.Run(&r);
    running = gen.running();
  }));
  CHILD_CHECK(Refused(join));
  CHILD_CHECK(Refused(results));
  CHILD_CHECK(Refused(start));
  CHILD_CHECK(Refused(load));
  CHILD_CHECK(Refused(run));
  CHILD_CHECK(running);
  // From this thread, the same calls work.
  gen.Stop();
  CHILD_CHECK(gen.Join().ok());
  YcsbResults r;
  CHILD_CHECK(gen.Results(&r).ok());
  CHILD_CHECK(r.all.ops > 0);
  CHILD_CHECK(mw.Stop().ok());
  return 0;
}

TEST(InsideCompletionTest, YcsbWaitingCallsAreRefused) {
  for (Mode mode : {Mode::kCallerRuns, Mode::kHandOff, Mode::kNoControl}) {
    SCOPED_TRACE(ModeName(mode));
    EXPECT_EQ(InChild([mode] { return YcsbWaitingCallsInsideCompletion(mode); }), 0) << kHung;
  }
}

// ~YcsbGenerator in the completion stopped the clients and joined them, one of which
// waited for the completion's permit: a hang. Now it returns at once and the clients
// are joined on a thread of their own. Shared: the generator held the last reference
// to the middleware, which goes on that thread too (and stops the middleware there).
// Raw: the application stops the middleware once the deferred join is done.
int YcsbDestroyedInsideCompletion(Mode mode, bool shared) {
  auto engine = NewMemoryEngine();
  std::unique_ptr<YcsbGenerator> gen;
  std::unique_ptr<Middleware> owned;
  std::weak_ptr<Middleware> weak;
  Middleware* mw = nullptr;
  if (shared) {
    auto sp = std::make_shared<Middleware>(Options(mode));
    weak = sp;
    mw = sp.get();
    CHILD_CHECK(mw->Start(engine.get(), 1, 1).ok());
    gen = std::make_unique<YcsbGenerator>(Endless(), std::move(sp));
  } else {
    owned = std::make_unique<Middleware>(Options(mode));
    mw = owned.get();
    CHILD_CHECK(mw->Start(engine.get(), 1, 1).ok());
    gen = std::make_unique<YcsbGenerator>(Endless(), mw);
  }
  CHILD_CHECK(gen->Load().ok());
  CHILD_CHECK(gen->Start().ok());
  CHILD_CHECK(InsideCompletionWithClientWaiting(mw, [&] { gen.reset(); }));
  CHILD_CHECK(gen == nullptr);
  CHILD_CHECK(WaitForDeferredStops(30).ok());
  if (shared) {
    CHILD_CHECK(weak.expired());
  } else {
    CHILD_CHECK(mw->running());
    CHILD_CHECK(mw->Stop().ok());
    owned.reset();
  }
  engine.reset();
  CHILD_CHECK(NoLeaks());
  return 0;
}

TEST(InsideCompletionTest, YcsbDestroyedInsideCompletionJoinsOnAThreadOfItsOwn) {
  for (Mode mode : {Mode::kCallerRuns, Mode::kHandOff, Mode::kNoControl}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(std::string(ModeName(mode)) + (shared ? " shared" : " raw"));
      EXPECT_EQ(InChild([=] { return YcsbDestroyedInsideCompletion(mode, shared); }), 0) << kHung;
    }
  }
}

// ---- trace replay ----

int ReplayWaitingCallsInsideCompletion(Mode mode) {
  auto engine = NewMemoryEngine();
  Middleware mw(Options(mode));
  CHILD_CHECK(mw.Start(engine.get(), 1, 1).ok());
  Replay replay(LoopTrace(), Looping());
  CHILD_CHECK(replay.Start(&mw).ok());
  Status join, start, run;
  bool running = false;
  CHILD_CHECK(InsideCompletionWithClientWaiting(&mw, [&] {
    ReplayResult r;
    join = replay.Join(&r);
    start = replay.Start(&mw);
    run = replay.Run(&mw, &r);
    running = replay.running();
  }));
  CHILD_CHECK(Refused(join));
  CHILD_CHECK(Refused(start));
  CHILD_CHECK(Refused(run));
  CHILD_CHECK(running);
  replay.Stop();
  ReplayResult r;
  CHILD_CHECK(replay.Join(&r).ok());
  CHILD_CHECK(r.all.ops > 0 && r.stopped);
  CHILD_CHECK(mw.Stop().ok());
  return 0;
}

TEST(InsideCompletionTest, ReplayWaitingCallsAreRefused) {
  for (Mode mode : {Mode::kCallerRuns, Mode::kHandOff, Mode::kNoControl}) {
    SCOPED_TRACE(ModeName(mode));
    EXPECT_EQ(InChild([mode] { return ReplayWaitingCallsInsideCompletion(mode); }), 0) << kHung;
  }
}

int ReplayDestroyedInsideCompletion(Mode mode, bool shared) {
  auto engine = NewMemoryEngine();
  auto replay = std::make_unique<Replay>(LoopTrace(), Looping());
  std::unique_ptr<Middleware> owned;
  std::weak_ptr<Middleware> weak;
  Middleware* mw = nullptr;
  if (shared) {
    auto sp = std::make_shared<Middleware>(Options(mode));
    weak = sp;
    mw = sp.get();
    CHILD_CHECK(mw->Start(engine.get(), 1, 1).ok());
    CHILD_CHECK(replay->Start(std::move(sp)).ok());
  } else {
    owned = std::make_unique<Middleware>(Options(mode));
    mw = owned.get();
    CHILD_CHECK(mw->Start(engine.get(), 1, 1).ok());
    CHILD_CHECK(replay->Start(mw).ok());
  }
  CHILD_CHECK(InsideCompletionWithClientWaiting(mw, [&] { replay.reset(); }));
  CHILD_CHECK(replay == nullptr);
  CHILD_CHECK(WaitForDeferredStops(30).ok());
  if (shared) {
    CHILD_CHECK(weak.expired());
  } else {
    CHILD_CHECK(mw->running());
    CHILD_CHECK(mw->Stop().ok());
    owned.reset();
  }
  engine.reset();
  CHILD_CHECK(NoLeaks());
  return 0;
}

TEST(InsideCompletionTest, ReplayDestroyedInsideCompletionJoinsOnAThreadOfItsOwn) {
  for (Mode mode : {Mode::kCallerRuns, Mode::kHandOff, Mode::kNoControl}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(std::string(ModeName(mode)) + (shared ? " shared" : " raw"));
      EXPECT_EQ(InChild([=] { return ReplayDestroyedInsideCompletion(mode, shared); }), 0) << kHung;
    }
  }
}

}  // namespace
}  // namespace nvmw
