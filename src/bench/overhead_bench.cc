// Middleware overhead benchmark: sync round trip through the middleware vs the direct
// engine call vs a raw mutex+condvar two-thread round trip, plus async throughput.
#include "bench/overhead_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvmw/engine.h"
#include "nvmw/middleware.h"
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

// Mutex + condition variable ping-pong between two threads: the per-request hand-off
// cost that a naive queue+condvar worker pool pays twice per synchronous request.
void MeasureHandoff(uint64_t rounds, Histogram* h) {
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

Status MeasureMiddlewareSync(Engine* db, const OverheadBenchOptions& o, int64_t spin_ns,
                             uint64_t n, Histogram* h, double* elapsed_s) {
  MiddlewareOptions mo;
  mo.spin_ns = spin_ns;
  mo.window_s = 1.0;
  Middleware mw(mo);
  Status s = mw.Start(db, 1, 1);
  if (!s.ok()) return s;
  std::string value;
  s = TimeSeries(o.warmup_ops, n, h, elapsed_s, [&](uint64_t i) {
    return mw.Get(KeyOf(i % o.keys), &value, RequestClass::kInteractive);
  });
  Status stop = mw.Stop();
  if (!s.ok()) return s;
  if (value.size() != o.value_bytes) return Status::Corruption("middleware Get returned a wrong value");
  return stop;
}

Status MeasureAsync(Engine* db, const OverheadBenchOptions& o, double* ops_per_s) {
  MiddlewareOptions mo;
  mo.spin_ns = o.spin_ns;
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
  std::atomic<bool> go{false};
  std::vector<std::thread> submitters;
  for (int t = 0; t < o.async_submitters; ++t) {
    submitters.emplace_back([&, t] {
      Counter* c = &counters[t];
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
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

}  // namespace

Status RunOverheadBench(const OverheadBenchOptions& o, std::map<std::string, double>* out) {
  if (out == nullptr) return Status::InvalidArgument("RunOverheadBench needs an output map");
  if (o.ops < 100) return Status::InvalidArgument("ops must be >= 100");
  if (o.keys < 1) return Status::InvalidArgument("keys must be >= 1");
  if (o.handoff_rounds < 100) return Status::InvalidArgument("handoff_rounds must be >= 100");
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

  std::unique_ptr<Engine> db = NewMemoryEngine();
  const std::string value(o.value_bytes, 'v');
  for (uint64_t i = 0; i < o.keys; ++i) {
    Status s = db->Put(KeyOf(i), value);
    if (!s.ok()) return s;
  }

  // Raw hand-off first, then the middleware, then the direct call: all in this run.
  Histogram handoff;
  MeasureHandoff(o.handoff_rounds, &handoff);

  Histogram mw_lat;
  double mw_elapsed = 0;
  Status s = MeasureMiddlewareSync(db.get(), o, o.spin_ns, o.ops, &mw_lat, &mw_elapsed);
  if (!s.ok()) return s;

  Histogram nospin_lat;
  if (o.nospin_ops > 0) {
    double ignored = 0;
    s = MeasureMiddlewareSync(db.get(), o, 0, o.nospin_ops, &nospin_lat, &ignored);
    if (!s.ok()) return s;
  }

  Histogram direct_lat;
  double direct_elapsed = 0;
  std::string got;
  s = TimeSeries(o.warmup_ops, o.ops, &direct_lat, &direct_elapsed,
                 [&](uint64_t i) { return db->Get(KeyOf(i % o.keys), &got); });
  if (!s.ok()) return s;

  double async_ops_per_s = 0;
  s = MeasureAsync(db.get(), o, &async_ops_per_s);
  if (!s.ok()) return s;

  constexpr double kUs = 1000.0;
  auto& r = *out;
  r["middleware_p50_us"] = mw_lat.Percentile(50) / kUs;
  r["middleware_p99_us"] = mw_lat.Percentile(99) / kUs;
  r["middleware_mean_us"] = mw_lat.Mean() / kUs;
  r["middleware_ops_per_s"] = static_cast<double>(o.ops) / mw_elapsed;
  r["direct_p50_us"] = direct_lat.Percentile(50) / kUs;
  r["direct_p99_us"] = direct_lat.Percentile(99) / kUs;
  r["direct_ops_per_s"] = static_cast<double>(o.ops) / direct_elapsed;
  r["handoff_p50_us"] = handoff.Percentile(50) / kUs;
  r["handoff_p99_us"] = handoff.Percentile(99) / kUs;
  r["ratio_p50_vs_handoff"] = r["middleware_p50_us"] / r["handoff_p50_us"];
  if (o.nospin_ops > 0) {
    r["nospin_p50_us"] = nospin_lat.Percentile(50) / kUs;
    r["nospin_p99_us"] = nospin_lat.Percentile(99) / kUs;
    r["ratio_nospin_p50_vs_handoff"] = r["nospin_p50_us"] / r["handoff_p50_us"];
  }
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
