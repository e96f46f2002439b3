// Engine benchmark (`nvmw bench engine`): put-then-get throughput of one engine
// for small (128 B) and large (800 KB) values with a few client threads.
#ifndef NVMW_BENCH_ENGINE_BENCH_H_
#define NVMW_BENCH_ENGINE_BENCH_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "nvmw/status.h"

namespace nvmw {

struct EngineBenchOptions {
  // "pmem" or "memory".
  std::string engine = "pmem";
  // Directory for the temporary pool file (pmem only); removed afterwards.
  // /dev/shm with PMEM_IS_PMEM_FORCE=1 measures the engine at DRAM speed.
  std::string pool_dir = "/dev/shm";
  // Client threads; keys are split evenly between them.
  int threads = 2;
  // Small-value phase: this many distinct keys, each written once then read once.
  uint64_t small_keys = 100000;
  uint64_t small_bytes = 128;
  // Large-value phase.
  uint64_t large_keys = 256;
  uint64_t large_bytes = 800 * 1024;
  // Pool size; 0 sizes it from the data set (2x the bytes written + 64 MB).
  uint64_t pool_size_bytes = 0;
  // PmemOptions::prefault: map the pool's pages before the timed phases, so the
  // put figures measure the engine rather than tmpfs allocating pages on first
  // touch (which real pmem does not do). Reported as `prefault` in the output.
  bool prefault = true;
  // PmemOptions::huge_pages; the timed phases begin once the pool is on 2 MiB pages
  // (reported as `huge_pages_mib`).
  bool huge_pages = true;
  // Polled between phases (never inside a timed one): once it reads true the run stops
  // with Shutdown (the pool is removed). Lets a caller cancel it (Ctrl-C in Python).
  const std::atomic<bool>* cancel = nullptr;
};

// Runs the benchmark and fills *out with put_128_ops_per_s, get_128_ops_per_s,
// put_800k_ops_per_s, get_800k_ops_per_s, put_800k_gb_per_s, get_800k_gb_per_s,
// threads (the names keep the default sizes even when small/large_bytes change),
// plus small_bytes, large_bytes and prefault (0/1), and memcpy_800k_gb_per_s (the
// same threads copying large_bytes buffers from memory: the get ceiling) with
// get_800k_vs_memcpy, their ratio measured in the same run. Gets verify every value they read; a
// mismatch is Corruption. Errors: InvalidArgument for bad options, whatever the
// engine returns otherwise.
Status RunEngineBench(const EngineBenchOptions& options, std::map<std::string, double>* out);

}  // namespace nvmw

#endif  // NVMW_BENCH_ENGINE_BENCH_H_
