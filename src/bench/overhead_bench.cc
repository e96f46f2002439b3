// Middleware overhead benchmark: sync round trip through the permit path and through the
// hand-off mode vs the direct engine call vs a raw mutex+condvar two-thread round trip,
// plus async throughput in both modes.
#include "bench/overhead_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <unistd.h>

#include "middleware/window_stats.h"
#include "nvmw/engine.h"
#include "nvmw/middleware.h"
#include "util/clock.h"
#include "util/histogram.h"

namespace nvmw {

namespace {

using Clock = std::chrono::steady_clock;

int64_t ToNs(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

std::string KeyOf(uint64_t i) { return "overhead-key-" + std::to_string(i); }

// Times `n` calls of fn(i) into a histogram; returns the elapsed seconds.
template <typename Fn>
Status TimeSeries(uint64_t warmup, uint64_t n, Histogram* h, double* elapsed_s, Fn fn) {
  for (uint64_t i = 0; i < warmup; ++i) {
    Status s = fn(i);
    if (!s.ok()) return s;
  }
  const auto begin = Clock::now();
  auto prev = begin;
  for (uint64_t i = 0; i < n; ++i) {
    Status s = fn(i);
    if (!s.ok()) return s;
    const auto now = Clock::now();
    h->Record(static_cast<uint64_t>(ToNs(now - prev)));
    prev = now;
  }
  *elapsed_s = std::chrono::duration<double>(prev - begin).count();
  return Status::OK();
}

// 1-minute load average, or -1.
double LoadAverage1() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  double l1 = -1;
  if (std::fscanf(f, "%lf", &l1) != 1) l1 = -1;
  std::fclose(f);
  return l1;
}

// Mutex + condition variable ping-pong between two threads: the per-request hand-off
// cost that a naive queue+condvar worker pool pays twice per synchronous request.
void MeasureCondvar(uint64_t rounds, Histogram* h) {
  std::mutex mu;
  std::condition_variable to_pong, to_ping;
  uint64_t turn = 0;  // odd: pong's turn; even: ping's turn
  bool quit = false;
  std::thread pong([&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      to_pong.wait(lock, [&] { return quit || turn % 2 == 1; });
      if (quit) return;
      ++turn;
      to_ping.notify_one();
    }
  });
  for (uint64_t i = 0; i < rounds + 100; ++i) {
    const auto t0 = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      ++turn;
    }
    to_pong.notify_one();
    {
      std::unique_lock<std::mutex> lock(mu);
      to_ping.wait(lock, [&] { return turn % 2 == 0; });
    }
    if (i >= 100) h->Record(static_cast<uint64_t>(ToNs(Clock::now() - t0)));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    quit = true;
  }
  to_pong.notify_one();
  pong.join();
}

// The sync round trip through a Middleware started on `db` with limits (1, 1): a Get of
// an existing key, or, when `put_value` is given, a Put of it.
Status MeasureMiddlewareSync(Engine* db, const OverheadBenchOptions& o,
                             const std::vector<std::string>& keys, Execution mode,
                             int64_t spin_ns, uint64_t n, Histogram* h, double* elapsed_s,
                             const std::string* put_value = nullptr) {
  MiddlewareOptions mo;
  mo.spin_ns = spin_ns;
  mo.window_s = 1.0;
  mo.execution = mode;
  Middleware mw(mo);
  Status s = mw.Start(db, 1, 1);
  if (!s.ok()) return s;
  std::string value;
  s = TimeSeries(o.warmup_ops, n, h, elapsed_s, [&](uint64_t i) {
    if (put_value != nullptr) return mw.Put(keys[i % keys.size()], *put_value, RequestClass::kInteractive);
    return mw.Get(keys[i % keys.size()], &value, RequestClass::kInteractive);
  });
  Status stop = mw.Stop();
  if (!s.ok()) return s;
  if (put_value == nullptr && value.size() != o.value_bytes) {
    return Status::Corruption("middleware Get returned a wrong value");
  }
  return stop;
}

Status MeasureAsync(Engine* db, const OverheadBenchOptions& o, Execution mode,
                    double* ops_per_s) {
  MiddlewareOptions mo;
  mo.spin_ns = o.spin_ns;
  mo.execution = mode;
  mo.queue_capacity = std::max<size_t>(1 << 16, o.async_window * o.async_submitters * 2);
  Middleware mw(mo);
  Status s = mw.Start(db, o.async_workers, 1);
  if (!s.ok()) return s;
  const std::string put_value(o.value_bytes, 'p');
  struct alignas(64) Counter {
    std::atomic<uint64_t> done{0};
    std::atomic<uint64_t> failed{0};
  };
  std::vector<Counter> counters(o.async_submitters);
  std::vector<Status> errors(o.async_submitters);
  const uint64_t per = o.async_ops / o.async_submitters;
  const uint64_t put_every =
      o.async_put_fraction > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(1.0 / o.async_put_fraction))
                               : 0;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, aborted{false};
  std::vector<std::thread> submitters;
  try {
    for (int t = 0; t < o.async_submitters; ++t) {
      submitters.emplace_back([&, t] {
        Counter* c = &counters[t];
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        if (aborted.load(std::memory_order_acquire)) return;
        for (uint64_t i = 0; i < per; ++i) {
          while (i - c->done.load(std::memory_order_acquire) >= o.async_window) std::this_thread::yield();
          Request r;
          const bool put = put_every != 0 && i % put_every == 0;
          r.op = put ? OpType::kPut : OpType::kGet;
          r.key = KeyOf((i * 7 + static_cast<uint64_t>(t)) % o.keys);
          if (put) r.value = put_value;
          r.cls = RequestClass::kInteractive;
          for (;;) {
            Status st = mw.Submit(std::move(r), [c](const Status& done_status, std::string&&) {
              if (!done_status.ok()) c->failed.fetch_add(1, std::memory_order_relaxed);
              c->done.fetch_add(1, std::memory_order_release);
            });
            if (st.ok()) break;
            if (!st.IsOverloaded()) {
              errors[t] = st;
              return;
            }
            std::this_thread::yield();  // queue full: back off, the request was not taken
            r = Request();
            r.op = put ? OpType::kPut : OpType::kGet;
            r.key = KeyOf((i * 7 + static_cast<uint64_t>(t)) % o.keys);
            if (put) r.value = put_value;
            r.cls = RequestClass::kInteractive;
          }
        }
        while (c->done.load(std::memory_order_acquire) < per) std::this_thread::yield();
      });
    }
  } catch (const std::system_error& e) {
    // The operating system refused a submitter: release and join the ones waiting.
    const size_t started = submitters.size();
    aborted.store(true, std::memory_order_release);
    go.store(true, std::memory_order_release);
    for (auto& th : submitters) th.join();
    mw.Stop();
    return Status::IOError("overhead bench: could not start submitter " + std::to_string(started + 1) + " of " +
                           std::to_string(o.async_submitters) + " (" + e.what() + ")");
  }
  while (ready.load() < o.async_submitters) std::this_thread::yield();
  const auto begin = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : submitters) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  s = mw.Stop();
  for (const Status& e : errors) {
    if (!e.ok()) return e;
  }
  uint64_t failed = 0;
  for (const Counter& c : counters) failed += c.failed.load();
  if (failed != 0) return Status::Corruption(std::to_string(failed) + " async requests failed");
  *ops_per_s = static_cast<double>(per * o.async_submitters) / elapsed;
  return s;
}

// Mean cost of one read of `clock` over a million back-to-back reads, in ns.
template <typename ClockFn>
double ClockReadNs(ClockFn clock) {
  constexpr int kReads = 1'000'000;
  int64_t sink = 0;
  const auto begin = Clock::now();
  for (int i = 0; i < kReads; ++i) sink += clock();
  const auto end = Clock::now();
  asm volatile("" : : "r"(sink));
  return static_cast<double>(ToNs(end - begin)) / kReads;
}

}  // namespace

Status RunOverheadBench(const OverheadBenchOptions& o, std::map<std::string, double>* out) {
  if (out == nullptr) return Status::InvalidArgument("RunOverheadBench needs an output map");
  if (o.ops < 100) return Status::InvalidArgument("ops must be >= 100");
  if (o.keys < 1) return Status::InvalidArgument("keys must be >= 1");
  if (o.condvar_rounds < 100) return Status::InvalidArgument("condvar_rounds must be >= 100");
  if (o.async_submitters < 1 || o.async_submitters > 256) {
    return Status::InvalidArgument("async_submitters must be in [1, 256]");
  }
  if (o.async_workers < 1 || o.async_workers > 32) {
    return Status::InvalidArgument("async_workers must be in [1, 32]");
  }
  if (o.async_ops < static_cast<uint64_t>(o.async_submitters)) {
    return Status::InvalidArgument("async_ops must be >= async_submitters");
  }
  if (o.async_window < 1) return Status::InvalidArgument("async_window must be >= 1");
  if (!(o.async_put_fraction >= 0 && o.async_put_fraction <= 1)) {
    return Status::InvalidArgument("async_put_fraction must be in [0, 1]");
  }
  if (o.value_bytes > (64u << 20)) return Status::InvalidArgument("value_bytes must be <= 64 MiB");
  if (o.spin_ns < 0) return Status::InvalidArgument("spin_ns must be >= 0");

  const double load1 = LoadAverage1();
  std::unique_ptr<Engine> db = NewMemoryEngine();
  const std::string value(o.value_bytes, 'v');
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < o.keys; ++i) {
    keys.push_back(KeyOf(i));
    Status s = db->Put(keys.back(), value);
    if (!s.ok()) return s;
  }

  // Every series in this run, on the same engine and keys.
  const auto stopped = [&o] { return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed); };
  const Status kStopped = Status::Shutdown("overhead bench: stopped");
  Histogram condvar;
  MeasureCondvar(o.condvar_rounds, &condvar);
  if (stopped()) return kStopped;

  Histogram direct_lat;
  double direct_elapsed = 0;
  std::string got;
  Status s = TimeSeries(o.warmup_ops, o.ops, &direct_lat, &direct_elapsed,
                        [&](uint64_t i) { return db->Get(keys[i % keys.size()], &got); });
  if (!s.ok()) return s;
  if (stopped()) return kStopped;
  if (got.size() != o.value_bytes) return Status::Corruption("engine Get returned a wrong value");

  // The direct call measured the way the middleware measures every request.
  Histogram timed_lat;
  double timed_elapsed = 0;
  StatsShard shard;
  s = TimeSeries(o.warmup_ops, o.ops, &timed_lat, &timed_elapsed, [&](uint64_t i) {
    const int64_t begin_ns = FastNowNs();
    Status st = db->Get(keys[i % keys.size()], &got);
    shard.Record(RequestClass::kInteractive, static_cast<uint64_t>(FastNowNs() - begin_ns),
                 got.size(), false, !st.ok());
    return st;
  });
  if (!s.ok()) return s;
  if (stopped()) return kStopped;

  Histogram permits_lat;
  double permits_elapsed = 0;
  s = MeasureMiddlewareSync(db.get(), o, keys, Execution::kCallerRuns, o.spin_ns, o.ops,
                            &permits_lat, &permits_elapsed);
  if (!s.ok()) return s;
  if (stopped()) return kStopped;

  Histogram handoff_lat;
  double handoff_elapsed = 0;
  s = MeasureMiddlewareSync(db.get(), o, keys, Execution::kHandOff, o.spin_ns, o.ops,
                            &handoff_lat, &handoff_elapsed);
  if (!s.ok()) return s;
  if (stopped()) return kStopped;

  Histogram nospin_lat;
  if (o.nospin_ops > 0) {
    double ignored = 0;
    s = MeasureMiddlewareSync(db.get(), o, keys, Execution::kHandOff, 0, o.nospin_ops,
                              &nospin_lat, &ignored);
    if (!s.ok()) return s;
  }
  if (stopped()) return kStopped;

  double async_ops_per_s = 0, async_handoff_ops_per_s = 0;
  s = MeasureAsync(db.get(), o, Execution::kCallerRuns, &async_ops_per_s);
  if (!s.ok()) return s;
  if (stopped()) return kStopped;
  s = MeasureAsync(db.get(), o, Execution::kHandOff, &async_handoff_ops_per_s);
  if (!s.ok()) return s;
  if (stopped()) return kStopped;

  // The engine the middleware is meant for: a pmem pool (tmpfs by default). Besides the
  // Get, a Put that overwrites an existing key: the durable write a service's small SET
  // makes, whose cost (allocation, copy, flush, publish) the permit path adds to.
  Histogram pmem_direct_lat, pmem_permits_lat, pmem_put_direct_lat, pmem_put_permits_lat;
  double pmem_direct_elapsed = 0, pmem_permits_elapsed = 0;
  double pmem_put_direct_elapsed = 0, pmem_put_permits_elapsed = 0;
  if (!o.pmem_pool_dir.empty()) {
    const std::string path =
        o.pmem_pool_dir + "/nvmw-overhead-bench-" + std::to_string(::getpid()) + ".pool";
    PmemOptions po;
    po.pool_size_bytes = std::max<uint64_t>(64ull << 20, 4 * o.keys * (o.value_bytes + 256));
    std::unique_ptr<Engine> pmem;
    s = OpenPmemEngine(path, po, &pmem);
    for (uint64_t i = 0; s.ok() && i < o.keys; ++i) s = pmem->Put(keys[i], value);
    if (s.ok()) {
      s = TimeSeries(o.warmup_ops, o.ops, &pmem_direct_lat, &pmem_direct_elapsed,
                     [&](uint64_t i) { return pmem->Get(keys[i % keys.size()], &got); });
    }
    if (s.ok()) {
      s = MeasureMiddlewareSync(pmem.get(), o, keys, Execution::kCallerRuns, o.spin_ns, o.ops,
                                &pmem_permits_lat, &pmem_permits_elapsed);
    }
    const std::string direct_put_value(o.value_bytes, 'd'), permits_put_value(o.value_bytes, 'm');
    if (s.ok() && !stopped()) {
      s = TimeSeries(o.warmup_ops, o.ops, &pmem_put_direct_lat, &pmem_put_direct_elapsed,
                     [&](uint64_t i) { return pmem->Put(keys[i % keys.size()], direct_put_value); });
    }
    if (s.ok() && !stopped()) {
      s = MeasureMiddlewareSync(pmem.get(), o, keys, Execution::kCallerRuns, o.spin_ns, o.ops,
                                &pmem_put_permits_lat, &pmem_put_permits_elapsed, &permits_put_value);
    }
    // The last series wrote every key through the middleware: each must read back its value.
    for (uint64_t i = 0; s.ok() && !stopped() && i < keys.size(); ++i) {
      s = pmem->Get(keys[i], &got);
      if (s.ok() && got != permits_put_value) s = Status::Corruption("pmem Put through the middleware was lost");
    }
    pmem.reset();
    ::unlink(path.c_str());
    if (!s.ok()) return s;
    if (stopped()) return kStopped;
  }

  constexpr double kUs = 1000.0;
  auto& r = *out;
  auto series = [&](const std::string& name, const Histogram& h, double elapsed_s) {
    r[name + "_p50_us"] = h.Percentile(50) / kUs;
    r[name + "_p99_us"] = h.Percentile(99) / kUs;
    r[name + "_mean_us"] = h.Mean() / kUs;
    r[name + "_ops_per_s"] = static_cast<double>(o.ops) / elapsed_s;
  };
  series("direct", direct_lat, direct_elapsed);
  series("direct_timed", timed_lat, timed_elapsed);
  series("permits", permits_lat, permits_elapsed);
  series("handoff_mode", handoff_lat, handoff_elapsed);
  r["condvar_p50_us"] = condvar.Percentile(50) / kUs;
  r["condvar_p99_us"] = condvar.Percentile(99) / kUs;
  r["ratio_p50_permits_vs_direct"] = r["permits_p50_us"] / r["direct_p50_us"];
  r["ratio_mean_permits_vs_direct"] = r["permits_mean_us"] / r["direct_mean_us"];
  r["ratio_p50_permits_vs_direct_timed"] = r["permits_p50_us"] / r["direct_timed_p50_us"];
  r["ratio_p50_handoff_mode_vs_direct"] = r["handoff_mode_p50_us"] / r["direct_p50_us"];
  r["ratio_p50_permits_vs_condvar"] = r["permits_p50_us"] / r["condvar_p50_us"];
  r["ratio_p50_handoff_mode_vs_condvar"] = r["handoff_mode_p50_us"] / r["condvar_p50_us"];
  if (o.nospin_ops > 0) {
    r["handoff_nospin_p50_us"] = nospin_lat.Percentile(50) / kUs;
    r["handoff_nospin_p99_us"] = nospin_lat.Percentile(99) / kUs;
  }
  r["async_handoff_ops_per_s"] = async_handoff_ops_per_s;
  if (!o.pmem_pool_dir.empty()) {
    series("pmem_direct", pmem_direct_lat, pmem_direct_elapsed);
    series("pmem_permits", pmem_permits_lat, pmem_permits_elapsed);
    r["ratio_p50_pmem_permits_vs_direct"] = r["pmem_permits_p50_us"] / r["pmem_direct_p50_us"];
    series("pmem_put_direct", pmem_put_direct_lat, pmem_put_direct_elapsed);
    series("pmem_put_permits", pmem_put_permits_lat, pmem_put_permits_elapsed);
    r["ratio_p50_pmem_put_permits_vs_direct"] = r["pmem_put_permits_p50_us"] / r["pmem_put_direct_p50_us"];
    r["ratio_mean_pmem_put_permits_vs_direct"] =
        r["pmem_put_permits_mean_us"] / r["pmem_put_direct_mean_us"];
  }
  r["load1"] = load1;
  // What timing a request costs: one NowNs() (steady_clock) and one FastNowNs() read.
  r["clock_steady_read_ns"] = ClockReadNs(NowNs);
  r["clock_fast_read_ns"] = ClockReadNs(FastNowNs);
  // 1 when request latencies were timed with the TSC (FastNowNs), 0 with steady_clock.
  r["fast_clock_tsc"] = FastClockUsesTsc() ? 1 : 0;
  r["async_ops_per_s"] = async_ops_per_s;
  const unsigned cores = std::thread::hardware_concurrency();
  r["cores"] = cores;
  r["value_bytes"] = static_cast<double>(o.value_bytes);
  r["ops"] = static_cast<double>(o.ops);
  r["async_ops"] = static_cast<double>((o.async_ops / o.async_submitters) * o.async_submitters);
  r["async_submitters"] = o.async_submitters;
  return Status::OK();
}

}  // namespace nvmw
