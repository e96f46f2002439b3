// MiddlewareOptions::batch_nice: batch workers lower their own CPU priority; interactive
// workers keep the caller's. Observed from inside engine calls on each pool.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>

#include "gtest/gtest.h"
#include "nvmw/engine.h"
#include "nvmw/middleware.h"

namespace nvmw {
namespace {

int ThreadNice() {
  errno = 0;
  return ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
}

// Records the niceness of the thread that runs each Put, by key.
class NiceProbeEngine : public Engine {
 public:
  Status Get(std::string_view, const ValueFn&) override { return Status::NotFound(); }
  Status Put(std::string_view key, std::string_view) override {
    (key == "batch" ? batch_nice_ : interactive_nice_).store(ThreadNice());
    return Status::OK();
  }
  Status Remove(std::string_view) override { return Status::NotFound(); }
  Status Exists(std::string_view) override { return Status::NotFound(); }
  uint64_t Count() override { return 0; }
  const char* Name() const override { return "nice-probe"; }
  std::atomic<int> batch_nice_{-100}, interactive_nice_{-100};
};

// Runs a Put through Submit and waits for its completion (a worker runs it).
void SubmitPutAndWait(Middleware& mw, const std::string& key, RequestClass cls) {
  std::atomic<bool> done{false};
  Request r;
  r.op = OpType::kPut;
  r.key = key;
  r.value = "v";
  r.cls = cls;
  ASSERT_TRUE(mw.Submit(std::move(r), [&](const Status& s, std::string&&) {
                  EXPECT_TRUE(s.ok());
                  done = true;
                  done.notify_all();
                }).ok());
  done.wait(false);
}

// Batch workers run at the configured niceness, in both execution modes; with
// hand-off they run sync calls too. With caller-runs a sync call runs on the caller's
// thread, so it keeps the caller's niceness.
TEST(BatchNiceTest, BatchWorkersRunAtTheConfiguredNiceness) {
  const int caller = ThreadNice();
  for (Execution mode : {Execution::kCallerRuns, Execution::kHandOff}) {
    for (int nice : {0, 7}) {
      SCOPED_TRACE("batch_nice=" + std::to_string(nice) +
                   (mode == Execution::kHandOff ? " hand-off" : " caller-runs"));
      NiceProbeEngine engine;
      MiddlewareOptions o;
      o.batch_nice = nice;
      o.execution = mode;
      Middleware mw(o);
      ASSERT_TRUE(mw.Start(&engine, 2, 2).ok());
      auto run = [&](const std::string& key, RequestClass cls) {
        if (mode == Execution::kHandOff) {
          ASSERT_TRUE(mw.Put(key, "v", cls).ok());
        } else {
          SubmitPutAndWait(mw, key, cls);
        }
      };
      run("batch", RequestClass::kBatch);
      run("interactive", RequestClass::kInteractive);
      // After a resize too: new batch workers start at the same niceness.
      ASSERT_TRUE(mw.SetThreads(1, 5).ok());
      for (int i = 0; i < 50; ++i) run("batch", RequestClass::kBatch);
      EXPECT_EQ(engine.batch_nice_.load(), std::min(19, caller + nice));
      EXPECT_EQ(engine.interactive_nice_.load(), caller);
      if (mode == Execution::kCallerRuns) {
        ASSERT_TRUE(mw.Put("batch", "v", RequestClass::kBatch).ok());
        EXPECT_EQ(engine.batch_nice_.load(), caller);  // ran on this thread
      }
      ASSERT_TRUE(mw.Stop().ok());
    }
  }
}

TEST(BatchNiceTest, OutOfRangeIsInvalidArgument) {
  NiceProbeEngine engine;
  for (int bad : {-1, 20}) {
    MiddlewareOptions o;
    o.batch_nice = bad;
    Middleware mw(o);
    EXPECT_TRUE(mw.Start(&engine, 1, 1).IsInvalidArgument()) << bad;
  }
}

}  // namespace
}  // namespace nvmw
