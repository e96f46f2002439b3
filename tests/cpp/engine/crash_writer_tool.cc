// Child process of crash_test: opens the pmem pool and writes self-describing
// values (and some removals) as fast as it can from two threads, announcing
// each operation before it starts and again once the engine acknowledged it,
// until its parent kills it with SIGKILL.
//
// Usage: crash_writer_tool POOL FIRST_VERSION SEED WRITE_FD
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crash_protocol.h"
#include "engine_test_util.h"
#include "nvmw/engine.h"

namespace {

using nvmw::test::CrashEvent;
using nvmw::test::CrashRecord;

int g_fd = -1;

void Send(const CrashRecord& r) {
  const char* p = reinterpret_cast<const char*>(&r);
  ssize_t n;
  do {
    n = write(g_fd, p, sizeof(r));
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(r))) _exit(3);  // parent gone: nothing to report to
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s POOL FIRST_VERSION SEED WRITE_FD\n", argv[0]);
    return 2;
  }
  const std::string pool = argv[1];
  const uint64_t first_version = std::strtoull(argv[2], nullptr, 10);
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  g_fd = std::atoi(argv[4]);

  nvmw::PmemOptions options;
  options.pool_size_bytes = 256ull << 20;
  options.bucket_count = 64;  // short table: chains of several keys, as under load
  std::unique_ptr<nvmw::Engine> engine;
  nvmw::Status s = nvmw::OpenPmemEngine(pool, options, &engine);
  if (!s.ok()) {
    std::fprintf(stderr, "crash_writer_tool: open: %s\n", s.ToString().c_str());
    return 1;
  }
  Send(CrashRecord{static_cast<uint32_t>(engine->Count()), CrashEvent::kReady, 0, 0});

  // Thread t owns the keys with index % 2 == t, so every key has at most one
  // operation in flight and the parent's model stays exact.
  constexpr int kThreads = 2;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 7919 + t);
      // Versions are unique across threads and runs: FIRST_VERSION + n*kThreads + t.
      for (uint64_t n = 0;; ++n) {
        uint64_t version = first_version + n * kThreads + t;
        uint32_t key = static_cast<uint32_t>(rng() % (nvmw::test::kCrashKeys / kThreads)) *
                           kThreads + t;
        const std::string k = nvmw::test::CrashKey(key);
        if (rng() % 16 == 0) {
          Send(CrashRecord{key, CrashEvent::kBeginRemove, version, 0});
          nvmw::Status st = engine->Remove(k);
          if (!st.ok() && !st.IsNotFound()) {
            std::fprintf(stderr, "crash_writer_tool: remove: %s\n", st.ToString().c_str());
            _exit(1);
          }
          Send(CrashRecord{key, CrashEvent::kAck, version, 0});
          continue;
        }
        uint64_t length;
        if (key < nvmw::test::kCrashLargeKeys) {
          length = (1ull << 20) + rng() % (3ull << 20);
        } else if (rng() % 8 == 0) {
          length = 4096 + rng() % 60000;
        } else {
          length = 32 + rng() % 1000;
        }
        std::string value = nvmw::test::MakeValue(k, version, length);
        Send(CrashRecord{key, CrashEvent::kBeginPut, version, length});
        nvmw::Status st = engine->Put(k, value);
        if (!st.ok()) {
          std::fprintf(stderr, "crash_writer_tool: put: %s\n", st.ToString().c_str());
          _exit(1);
        }
        Send(CrashRecord{key, CrashEvent::kAck, version, length});
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}
