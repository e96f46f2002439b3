// When the operating system refuses a thread (std::thread throws std::system_error),
// the middleware (Start, a pool grow), the YCSB generator (Load, Start), the replay and
// the emulated device (its timer thread, the device benchmark) return an error Status after stopping and joining the threads they had started;
// nothing calls std::terminate and nothing hangs.
//
// Each case runs in a forked child whose address space is capped a little above what
// it maps at that point, so that only `room` more thread stacks fit: pthread_create
// fails with EAGAIN, as under a thread or memory limit (RLIMIT_NPROC would not bind:
// tests may run as root). The parent reports how the child ended; a child killed by
// SIGABRT is the std::terminate this guards against, SIGALRM a hang.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "device/device_test_util.h"
#include "nvmw/device.h"
#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "nvmw/replay.h"
#include "nvmw/ycsb.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NVMW_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NVMW_SANITIZED 1
#endif
#endif

namespace nvmw {
namespace {

using testing::InChild;

uint64_t MappedBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t DefaultStackBytes() {
  pthread_attr_t attr;
  size_t size = 8u << 20;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
  }
  return size;
}

// Caps the address space so that `room` more default thread stacks fit (plus a little
// for small allocations). A child must not let a thread end before this: glibc keeps
// the stacks of ended threads and starts new threads on them without mapping more.
bool LimitThreads(int room) {
  const uint64_t stack = DefaultStackBytes() + (64u << 10);  // guard page and TLS
  const uint64_t cap = MappedBytes() + room * stack + stack / 2;
  rlimit rl{cap, cap};
  return setrlimit(RLIMIT_AS, &rl) == 0;
}

bool NoThreadStarts() {
  try {
    std::thread([] {}).join();
    return false;
  } catch (const std::system_error&) {
    return true;
  }
}

class ThreadStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef NVMW_SANITIZED
    GTEST_SKIP() << "a capped address space is not compatible with sanitizer shadow memory";
#endif
  }
};

TEST_F(ThreadStartTest, CappedChildCannotStartAThread) {
  // The set-up the cases below rely on: after LimitThreads(0), std::thread throws.
  EXPECT_EQ(InChild([] {
              CHILD_CHECK(LimitThreads(0));
              CHILD_CHECK(NoThreadStarts());
              return 0;
            }),
            0);
}

TEST_F(ThreadStartTest, MiddlewareStartIsAnErrorAndJoinsWhatStarted) {
  for (int room : {0, 1, 2}) {  // no worker; one worker; workers but no monitor
    EXPECT_EQ(InChild([room] {
                auto engine = NewMemoryEngine();
                Middleware mw{MiddlewareOptions()};
                CHILD_CHECK(LimitThreads(room));
                Status s = mw.Start(engine.get(), 4, 4);
                CHILD_CHECK(s.IsIOError());
                CHILD_CHECK(s.ToString().find("cannot start") != std::string::npos);
                CHILD_CHECK(!mw.running());
                std::string v;
                CHILD_CHECK(mw.Put("k", "v").IsShutdown());  // refused, not hung
                WindowStats w;
                CHILD_CHECK(mw.WaitForWindow(0, 5.0, &w).IsShutdown());
                CHILD_CHECK(mw.Stop().ok());
                return 0;
              }),
              0)
        << "room for " << room << " thread(s)";
  }
}

TEST_F(ThreadStartTest, FailedGrowKeepsThePoolItHasAndSaysSo) {
  EXPECT_EQ(InChild([] {
              auto engine = NewMemoryEngine();
              Middleware mw{MiddlewareOptions()};
              CHILD_CHECK(mw.Start(engine.get(), 2, 1).ok());
              CHILD_CHECK(LimitThreads(0));
              Status s = mw.SetThreads(8, 1);
              CHILD_CHECK(s.IsIOError());
              CHILD_CHECK(s.ToString().find("runs with 2") != std::string::npos);
              int i = 0, b = 0;
              mw.GetThreads(&i, &b);
              CHILD_CHECK(i == 2 && b == 1);  // what runs, not what was asked
              CHILD_CHECK(mw.Put("k", "v").ok());
              std::string v;
              CHILD_CHECK(mw.Get("k", &v).ok() && v == "v");
              CHILD_CHECK(mw.SetThreads(1, 1).ok());  // shrinking needs no thread
              CHILD_CHECK(mw.Stop().ok());
              return 0;
            }),
            0);
}

YcsbOptions LongRun(int threads) {
  YcsbOptions o;
  o.record_count = 100;
  o.operation_count = 0;
  o.duration_s = 600;  // only a stop ends it within the child's 30 s alarm
  o.threads = threads;
  return o;
}

TEST_F(ThreadStartTest, GeneratorStartStopsAndJoinsTheClientsThatStarted) {
  for (int room : {0, 2}) {
    EXPECT_EQ(InChild([room] {
                auto engine = NewMemoryEngine();
                auto mw = std::make_shared<Middleware>(MiddlewareOptions());
                CHILD_CHECK(mw->Start(engine.get(), 2, 1).ok());
                // Inserts only, no load phase: a thread that ran and exited would leave
                // its stack in glibc's cache, and the next thread would start on it.
                YcsbOptions o = LongRun(4);
                o.record_count = 0;
                o.read_proportion = o.update_proportion = 0;
                o.insert_proportion = 1;
                YcsbGenerator gen(o, mw);
                CHILD_CHECK(LimitThreads(room));
                Status s = gen.Start();
                CHILD_CHECK(s.IsIOError());
                const std::string want = "client thread " + std::to_string(room + 1) + " of 4";
                CHILD_CHECK(s.ToString().find(want) != std::string::npos);
                CHILD_CHECK(!gen.running());
                YcsbResults r;
                CHILD_CHECK(gen.Results(&r).ok());  // what the started clients did
                CHILD_CHECK(gen.Start().code() == Status::Code::kNotSupported);
                CHILD_CHECK(mw->Stop().ok());
                return 0;
              }),
              0)
        << "room for " << room << " client(s)";
  }
}

TEST_F(ThreadStartTest, GeneratorLoadIsAnError) {
  EXPECT_EQ(InChild([] {
              auto engine = NewMemoryEngine();
              YcsbOptions o = LongRun(4);
              o.record_count = 100000;
              YcsbGenerator gen(o, engine.get());
              CHILD_CHECK(LimitThreads(1));
              Status s = gen.Load();
              CHILD_CHECK(s.IsIOError());
              CHILD_CHECK(s.ToString().find("load thread 2 of 4") != std::string::npos);
              return 0;
            }),
            0);
}

TEST_F(ThreadStartTest, ReplayStartIsAnError) {
  EXPECT_EQ(InChild([] {
              auto engine = NewMemoryEngine();
              auto mw = std::make_shared<Middleware>(MiddlewareOptions());
              CHILD_CHECK(mw->Start(engine.get(), 2, 1).ok());
              Trace t;
              for (int i = 0; i < 100; ++i) {
                t.records.push_back({int64_t{i} * 1000000, TraceOp::kWrite, "k" + std::to_string(i), 64});
              }
              ReplayOptions o;
              o.threads = 4;
              o.preload = false;
              Replay replay(t, o);
              CHILD_CHECK(LimitThreads(1));
              Status s = replay.Start(mw);
              CHILD_CHECK(s.IsIOError());
              CHILD_CHECK(s.ToString().find("client thread 2 of 4") != std::string::npos);
              CHILD_CHECK(!replay.running());
              CHILD_CHECK(mw->Stop().ok());
              return 0;
            }),
            0);
}

TEST_F(ThreadStartTest, EmulatedDeviceAndItsBenchmarkAreErrors) {
  DeviceProfile profile;
  ASSERT_TRUE(LoadDeviceProfile(testing::DevicesDir(), "optane-1dimm", &profile).ok());
  EXPECT_EQ(InChild([&profile] {
              auto base = NewMemoryEngine();
              CHILD_CHECK(LimitThreads(0));
              // No timer thread: no device (nullptr, as for a bad profile), not a terminate.
              CHILD_CHECK(NewEmulatedDevice(base.get(), profile, EmulatedDeviceOptions()) == nullptr);
              DeviceBenchOptions o;
              o.threads = 2;
              DeviceBenchResult r;
              CHILD_CHECK(!RunDeviceBench(profile, o, &r).ok());
              return 0;
            }),
            0);
  EXPECT_EQ(InChild([&profile] {
              CHILD_CHECK(LimitThreads(2));  // the timer and one client: the second client fails
              DeviceBenchOptions o;
              o.threads = 2;
              o.warmup_ms = 1;
              o.duration_ms = 1;
              DeviceBenchResult r;
              Status s = RunDeviceBench(profile, o, &r);
              CHILD_CHECK(s.IsIOError());
              CHILD_CHECK(s.ToString().find("thread 2 of 2") != std::string::npos);
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace nvmw
