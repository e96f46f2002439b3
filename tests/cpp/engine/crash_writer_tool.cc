// Child process of crash_test: opens the pmem pool and writes self-describing
// values (and some removals) as fast as it can from two threads, announcing
// each operation before it starts and again once the engine acknowledged it,
// until its parent kills it with SIGKILL. In mode "many" the values go in by
// PutMany, 1..kCrashMaxBatch distinct keys a call, each announced and
// acknowledged as a whole.
//
// Usage: crash_writer_tool POOL FIRST_VERSION SEED WRITE_FD [put|many]
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// One write(2) for all of `records` (at most PIPE_BUF bytes: never interleaved with
// another thread's records, never cut in half by the kill).
void SendAll(const CrashRecord* records, size_t count) {
  const char* p = reinterpret_cast<const char*>(records);
  const size_t bytes = count * sizeof(CrashRecord);
  ssize_t n;
  do {
    n = write(g_fd, p, bytes);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(bytes)) _exit(3);  // parent gone: nothing to report to
}

void Send(const CrashRecord& r) { SendAll(&r, 1); }

// Length of the value for `key`: 1-4 MB for the large keys, else mostly small
// (32-1031 bytes) and one in eight 4-64 KB.
uint64_t ValueLength(uint32_t key, std::mt19937_64& rng) {
  if (key < nvmw::test::kCrashLargeKeys) return (1ull << 20) + rng() % (3ull << 20);
  if (rng() % 8 == 0) return 4096 + rng() % 60000;
  return 32 + rng() % 1000;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && (std::strcmp(argv[5], "put") == 0 ||
                                    std::strcmp(argv[5], "many") == 0))) {
    std::fprintf(stderr, "usage: %s POOL FIRST_VERSION SEED WRITE_FD [put|many]\n", argv[0]);
    return 2;
  }
  const bool many = argc == 6 && std::strcmp(argv[5], "many") == 0;
  const std::string pool = argv[1];
  const uint64_t first_version = std::strtoull(argv[2], nullptr, 10);
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  g_fd = std::atoi(argv[4]);

  nvmw::PmemOptions options;
  options.pool_size_bytes = 256ull << 20;
  options.bucket_count = nvmw::test::kCrashBuckets;  // short table: chains of several keys
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
        if (many) {
          // Distinct keys of this thread in random order, the first being `key`.
          constexpr uint32_t kOwn = nvmw::test::kCrashKeys / kThreads;
          std::vector<uint32_t> own;
          for (uint32_t j = 0; j < kOwn; ++j) own.push_back(j * kThreads + t);
          std::swap(own[0], own[key / kThreads]);
          std::shuffle(own.begin() + 1, own.end(), rng);
          const uint32_t count = 1 + static_cast<uint32_t>(rng() % nvmw::test::kCrashMaxBatch);
          // One call in eight carries 1-4 MB values; the others values of at most 64 KB,
          // so that publishing, not copying, takes much of a call's time and kills
          // land between its groups too.
          const bool with_large = rng() % 8 == 0;
          std::vector<CrashRecord> begin{CrashRecord{count, CrashEvent::kBeginPutMany, 0, 0}};
          std::vector<std::string> keys, values;
          for (uint32_t j = 0; j < count; ++j) {
            if (j > 0) version = first_version + (++n) * kThreads + t;
            const uint64_t length =
                ValueLength(with_large ? own[j] : nvmw::test::kCrashLargeKeys, rng);
            keys.push_back(nvmw::test::CrashKey(own[j]));
            values.push_back(nvmw::test::MakeValue(keys.back(), version, length));
            begin.push_back(CrashRecord{own[j], CrashEvent::kBeginPut, version, length});
          }
          std::vector<nvmw::KeyValue> items;
          for (uint32_t j = 0; j < count; ++j) items.push_back(nvmw::KeyValue{keys[j], values[j]});
          std::vector<nvmw::Status> results(count);
          SendAll(begin.data(), begin.size());
          engine->PutMany(items.data(), count, results.data());
          std::vector<CrashRecord> acks;
          for (uint32_t j = 0; j < count; ++j) {
            if (!results[j].ok()) {
              std::fprintf(stderr, "crash_writer_tool: put many: %s\n",
                           results[j].ToString().c_str());
              _exit(1);
            }
            acks.push_back(CrashRecord{own[j], CrashEvent::kAck, begin[j + 1].version,
                                       begin[j + 1].length});
          }
          SendAll(acks.data(), acks.size());
          continue;
        }
        const uint64_t length = ValueLength(key, rng);
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
