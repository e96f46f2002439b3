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
using testing::Mode;
using testing::ModeName;
using testing::OnePermitOptions;
using testing::NoLeaks;
using testing::WaitUntil;

constexpr const char* kHung = "(142 = 128 + SIGALRM: the child hung)";

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
  Middleware mw(OnePermitOptions(mode));
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

// Starts a driver (a generator or a replay) on mw: sharing its ownership (shared given)
// or pointing at it (raw). nullptr if it did not start.
using StartDriver =
    std::function<std::shared_ptr<void>(std::shared_ptr<Middleware> shared, Middleware* raw)>;

// The driver's destructor in the completion stopped the clients and joined them, one of
// which waited for the completion's permit: a hang. Now it returns at once and the
// clients are joined on a thread of their own. Shared: the driver held the last
// reference to the middleware, which goes on that thread too (and stops the middleware
// there). Raw: the application stops the middleware once the deferred join is done.
int DriverDestroyedInsideCompletion(Mode mode, bool shared, const StartDriver& start) {
  auto engine = NewMemoryEngine();
  std::shared_ptr<Middleware> sp;
  std::unique_ptr<Middleware> owned;
  if (shared) {
    sp = std::make_shared<Middleware>(OnePermitOptions(mode));
  } else {
    owned = std::make_unique<Middleware>(OnePermitOptions(mode));
  }
  Middleware* mw = shared ? sp.get() : owned.get();
  const std::weak_ptr<Middleware> weak = sp;
  CHILD_CHECK(mw->Start(engine.get(), 1, 1).ok());
  std::shared_ptr<void> driver = start(std::move(sp), mw);
  CHILD_CHECK(driver != nullptr);
  CHILD_CHECK(InsideCompletionWithClientWaiting(mw, [&] { driver.reset(); }));
  CHILD_CHECK(driver == nullptr);
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

void ExpectDestroyedInsideCompletionJoinsOnAThreadOfItsOwn(const StartDriver& start) {
  for (Mode mode : {Mode::kCallerRuns, Mode::kHandOff, Mode::kNoControl}) {
    for (bool shared : {true, false}) {
      SCOPED_TRACE(std::string(ModeName(mode)) + (shared ? " shared" : " raw"));
      EXPECT_EQ(InChild([&] { return DriverDestroyedInsideCompletion(mode, shared, start); }), 0)
          << kHung;
    }
  }
}

TEST(InsideCompletionTest, YcsbDestroyedInsideCompletionJoinsOnAThreadOfItsOwn) {
  ExpectDestroyedInsideCompletionJoinsOnAThreadOfItsOwn(
      [](std::shared_ptr<Middleware> shared, Middleware* raw) -> std::shared_ptr<void> {
        auto gen = shared ? std::make_shared<YcsbGenerator>(Endless(), std::move(shared))
                          : std::make_shared<YcsbGenerator>(Endless(), raw);
        if (!gen->Load().ok() || !gen->Start().ok()) return nullptr;
        return gen;
      });
}

// ---- trace replay ----

int ReplayWaitingCallsInsideCompletion(Mode mode) {
  auto engine = NewMemoryEngine();
  Middleware mw(OnePermitOptions(mode));
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

TEST(InsideCompletionTest, ReplayDestroyedInsideCompletionJoinsOnAThreadOfItsOwn) {
  ExpectDestroyedInsideCompletionJoinsOnAThreadOfItsOwn(
      [](std::shared_ptr<Middleware> shared, Middleware* raw) -> std::shared_ptr<void> {
        auto replay = std::make_shared<Replay>(LoopTrace(), Looping());
        const Status s = shared ? replay->Start(std::move(shared)) : replay->Start(raw);
        return s.ok() ? replay : nullptr;
      });
}

}  // namespace
}  // namespace nvmw
