// Middleware overhead benchmark (`nvmw bench overhead`): what the middleware adds to a
// small engine operation, measured side by side in one run against the direct engine
// call and against the raw two-thread wake-up round trip it is designed to avoid.
#ifndef NVMW_BENCH_OVERHEAD_BENCH_H_
#define NVMW_BENCH_OVERHEAD_BENCH_H_

#include <cstdint>
#include <map>
#include <string>

#include "nvmw/status.h"

namespace nvmw {

struct OverheadBenchOptions {
  // Timed synchronous operations per latency series (middleware, direct engine).
  uint64_t ops = 200000;
  // Untimed operations before each series (page faults, caches, spinning state).
  uint64_t warmup_ops = 5000;
  // Value size of the preloaded keys that the gets read, and of the async puts.
  uint64_t value_bytes = 128;
  // Distinct preloaded keys.
  uint64_t keys = 1024;
  // Round trips of the mutex+condvar ping-pong (each costs ~15 us: keep it modest).
  uint64_t handoff_rounds = 20000;
  // Extra series with spinning disabled (spin_ns = 0): the pure futex path. 0 skips it.
  uint64_t nospin_ops = 20000;
  // Async phase: requests in total, submitter threads, requests each submitter keeps
  // in flight, interactive worker threads, and the share of puts among them.
  uint64_t async_ops = 2000000;
  int async_submitters = 1;
  uint64_t async_window = 4096;
  int async_workers = 1;
  double async_put_fraction = 0.25;
  // Spin budget of the middleware in the spinning series (MiddlewareOptions::spin_ns).
  int64_t spin_ns = 20000;
};

// Runs every series on a fresh MemoryEngine and fills *out with:
//   middleware_p50_us, middleware_p99_us, middleware_mean_us, middleware_ops_per_s
//     (one client, sync Get of an existing value_bytes key, interactive class, 1 worker);
//   direct_p50_us, direct_p99_us, direct_ops_per_s (the same Get on the engine);
//   handoff_p50_us, handoff_p99_us (mutex+condvar ping-pong round trip, two threads);
//   ratio_p50_vs_handoff = middleware_p50_us / handoff_p50_us;
//   nospin_p50_us, nospin_p99_us, ratio_nospin_p50_vs_handoff (if nospin_ops > 0);
//   async_ops_per_s (pipelined async Submit of gets/puts, completions counted);
//   cores, value_bytes, ops, async_ops, async_submitters.
// Errors: InvalidArgument for bad options; any failed engine or middleware call.
Status RunOverheadBench(const OverheadBenchOptions& options, std::map<std::string, double>* out);

}  // namespace nvmw

#endif  // NVMW_BENCH_OVERHEAD_BENCH_H_
