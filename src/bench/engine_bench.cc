// Engine benchmark: N threads put then get disjoint key ranges; throughput is
// total operations over the wall time of the slowest thread in each phase.
#include "bench/engine_bench.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/pmem_engine_impl.h"
#include "nvmw/engine.h"

namespace nvmw {
namespace {

std::string KeyOf(const char* prefix, uint64_t i) {
  char buf[32];
  int n = std::snprintf(buf, sizeof(buf), "%s%012llu", prefix, static_cast<unsigned long long>(i));
  return std::string(buf, n);
}

// Fills a value so that it depends on its key index; gets check the first and
// last 8 bytes (cheap enough not to distort the measurement).
void FillValue(std::string* v, uint64_t i) {
  if (v->size() >= 8) {
    std::memcpy(v->data(), &i, 8);
    std::memcpy(v->data() + v->size() - 8, &i, 8);
  }
}

bool ValueMatches(std::string_view v, uint64_t i, uint64_t bytes) {
  if (v.size() != bytes) return false;
  if (bytes < 8) return true;
  uint64_t a, b;
  std::memcpy(&a, v.data(), 8);
  std::memcpy(&b, v.data() + v.size() - 8, 8);
  return a == i && b == i;
}

// Runs fn(thread, first_key, end_key) on `threads` threads; returns seconds.
template <typename Fn>
double RunPhase(int threads, uint64_t keys, Fn fn, Status* status) {
  std::vector<Status> results(threads);
  std::vector<std::thread> workers;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, aborted{false};
  std::chrono::steady_clock::time_point start;
  try {
    for (int t = 0; t < threads; ++t) {
      uint64_t first = keys * t / threads, end = keys * (t + 1) / threads;
      workers.emplace_back([&, t, first, end] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        if (aborted.load(std::memory_order_acquire)) return;
        results[t] = fn(t, first, end);
      });
    }
  } catch (const std::system_error& e) {
    // The operating system refused a worker: release and join the ones waiting.
    const size_t started = workers.size();
    aborted.store(true, std::memory_order_release);
    go.store(true, std::memory_order_release);
    for (auto& w : workers) w.join();
    *status = Status::IOError("engine bench: could not start worker " + std::to_string(started + 1) + " of " +
                              std::to_string(threads) + " (" + e.what() + ")");
    return 0;
  }
  while (ready.load() < threads) std::this_thread::yield();
  start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& w : workers) w.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const Status& s : results) {
    if (!s.ok()) {
      *status = s;
      break;
    }
  }
  return secs;
}

Status PutGet(Engine* engine, int threads, const char* prefix, uint64_t keys, uint64_t bytes,
              const std::atomic<bool>* cancel, double* put_s, double* get_s) {
  Status s;
  *put_s = RunPhase(threads, keys, [&](int, uint64_t first, uint64_t end) {
    std::string value(bytes, 'v');
    for (uint64_t i = first; i < end; ++i) {
      FillValue(&value, i);
      Status st = engine->Put(KeyOf(prefix, i), value);
      if (!st.ok()) return st;
    }
    return Status::OK();
  }, &s);
  if (!s.ok()) return s;
  if (cancel != nullptr && cancel->load()) return Status::Shutdown("engine bench: stopped");
  *get_s = RunPhase(threads, keys, [&](int, uint64_t first, uint64_t end) {
    // One reused buffer per thread, as a real reader would keep: a fresh
    // 800 KB allocation per get would measure page faults, not the engine.
    std::string value;
    value.reserve(bytes);
    for (uint64_t i = first; i < end; ++i) {
      Status st = engine->Get(KeyOf(prefix, i), &value);
      if (!st.ok()) return st;
      if (!ValueMatches(value, i, bytes)) {
        return Status::Corruption("value of " + KeyOf(prefix, i) + " read back wrong");
      }
    }
    return Status::OK();
  }, &s);
  return s;
}

// The ceiling for an 800 KB get on this machine, measured in the same run: the
// threads copy `keys` distinct buffers of `bytes` (written beforehand, so they
// come from memory, as the engine's values do) into one reused buffer each.
double MemcpySeconds(int threads, uint64_t keys, uint64_t bytes) {
  std::vector<std::string> sources(keys);
  for (uint64_t i = 0; i < keys; ++i) sources[i].assign(bytes, static_cast<char>('a' + i % 26));
  Status ignored;
  return RunPhase(threads, keys, [&](int, uint64_t first, uint64_t end) {
    std::string dst;
    dst.reserve(bytes);
    for (uint64_t i = first; i < end; ++i) dst.assign(sources[i]);
    return Status::OK();
  }, &ignored);
}

}  // namespace

Status RunEngineBench(const EngineBenchOptions& options, std::map<std::string, double>* out) {
  if (out == nullptr) return Status::InvalidArgument("out is null");
  if (options.threads < 1 || options.threads > 1024) {
    return Status::InvalidArgument("threads must be in [1, 1024]");
  }
  if (options.small_keys == 0 || options.large_keys == 0) {
    return Status::InvalidArgument("small_keys and large_keys must be positive");
  }
  std::unique_ptr<Engine> engine;
  std::string pool_path;
  uint64_t huge_bytes = 0;
  if (options.engine == "memory") {
    engine = NewMemoryEngine();
  } else if (options.engine == "pmem") {
    pool_path = options.pool_dir + "/nvmw-engine-bench-" + std::to_string(getpid()) + ".pool";
    PmemOptions po;
    uint64_t data = options.small_keys * (options.small_bytes + 96) +
                    options.large_keys * (options.large_bytes + 160);
    po.pool_size_bytes = options.pool_size_bytes != 0 ? options.pool_size_bytes
                                                      : 2 * data + (64ull << 20);
    po.prefault = options.prefault;
    po.huge_pages = options.huge_pages;
    Status s = OpenPmemEngine(pool_path, po, &engine);
    if (!s.ok()) {
      unlink(pool_path.c_str());  // a refused or partial pool must not stay in pool_dir
      return s;
    }
    // Measure the engine as it runs once open for a while: after its background move
    // to 2 MiB pages (PmemOptions::huge_pages).
    huge_bytes = static_cast<pmem_internal::PmemEngine*>(engine.get())->WaitHugePages();
  } else {
    return Status::InvalidArgument("engine must be \"pmem\" or \"memory\", got \"" +
                                   options.engine + "\"");
  }

  double put_small, get_small, put_large, get_large;
  Status s = PutGet(engine.get(), options.threads, "s", options.small_keys,
                    options.small_bytes, options.cancel, &put_small, &get_small);
  if (s.ok() && options.cancel != nullptr && options.cancel->load()) {
    s = Status::Shutdown("engine bench: stopped");
  }
  if (s.ok()) {
    s = PutGet(engine.get(), options.threads, "L", options.large_keys, options.large_bytes,
               options.cancel, &put_large, &get_large);
  }
  engine.reset();
  if (!pool_path.empty()) unlink(pool_path.c_str());
  if (!s.ok()) return s;

  const double memcpy_large = MemcpySeconds(options.threads, options.large_keys,
                                            options.large_bytes);
  const double nk = static_cast<double>(options.small_keys);
  const double nl = static_cast<double>(options.large_keys);
  const double lb = static_cast<double>(options.large_bytes);
  (*out)["put_128_ops_per_s"] = nk / put_small;
  (*out)["get_128_ops_per_s"] = nk / get_small;
  (*out)["put_800k_ops_per_s"] = nl / put_large;
  (*out)["get_800k_ops_per_s"] = nl / get_large;
  (*out)["put_800k_gb_per_s"] = nl * lb / put_large / 1e9;
  (*out)["get_800k_gb_per_s"] = nl * lb / get_large / 1e9;
  (*out)["memcpy_800k_gb_per_s"] = nl * lb / memcpy_large / 1e9;
  // Side-by-side ratio (the machine is shared and noisy; absolute figures drift).
  (*out)["get_800k_vs_memcpy"] = memcpy_large / get_large;
  (*out)["threads"] = options.threads;
  (*out)["small_bytes"] = static_cast<double>(options.small_bytes);
  (*out)["large_bytes"] = lb;
  (*out)["prefault"] = options.prefault && options.engine == "pmem" ? 1 : 0;
  (*out)["huge_pages_mib"] = static_cast<double>(huge_bytes >> 20);
  return Status::OK();
}

}  // namespace nvmw
