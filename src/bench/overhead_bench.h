// Middleware overhead benchmark (`nvmw bench overhead`): what the middleware adds to a
// small engine operation, measured side by side in one run: the permit path (caller-runs)
// and the hand-off mode against the direct engine call and against the raw two-thread
// wake-up round trip that caller-runs is designed to avoid.
#ifndef NVMW_BENCH_OVERHEAD_BENCH_H_
#define NVMW_BENCH_OVERHEAD_BENCH_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "nvmw/status.h"

namespace nvmw {

struct OverheadBenchOptions {
  // Timed synchronous operations per latency series (direct engine, permit path,
  // hand-off mode with spinning).
  uint64_t ops = 200000;
  // Untimed operations before each series (page faults, caches, spinning state).
  uint64_t warmup_ops = 5000;
  // Value size of the preloaded keys that the gets read, and of the async puts.
  uint64_t value_bytes = 128;
  // Distinct preloaded keys.
  uint64_t keys = 1024;
  // Round trips of the mutex+condvar ping-pong (each costs ~15 us: keep it modest).
  uint64_t condvar_rounds = 20000;
  // Extra hand-off series with spinning disabled (spin_ns = 0): the pure futex path.
  // 0 skips it.
  uint64_t nospin_ops = 20000;
  // Async phase (both execution modes): requests in total, submitter threads, requests
  // each submitter keeps in flight, interactive worker threads (= the class limit), and
  // the share of puts among them.
  uint64_t async_ops = 2000000;
  int async_submitters = 1;
  uint64_t async_window = 4096;
  int async_workers = 1;
  double async_put_fraction = 0.25;
  // Spin budget of the middleware in the spinning series (MiddlewareOptions::spin_ns).
  int64_t spin_ns = 20000;
  // Directory for a temporary pmem pool on which the direct and permit-path series are
  // repeated (the engine the middleware is meant for). Empty skips them.
  std::string pmem_pool_dir = "/dev/shm";
  // Polled between series (never inside a timed one): once it reads true the run stops
  // with Shutdown. Lets a caller cancel the ~10 s run (Ctrl-C in Python).
  const std::atomic<bool>* cancel = nullptr;
};

// Runs every series on a fresh MemoryEngine, one client thread, sync Get of an existing
// value_bytes key (keys prebuilt, so only the call is timed), interactive class, limit 1,
// and fills *out with:
//   direct_p50_us, direct_p99_us, direct_mean_us, direct_ops_per_s: Get on the engine;
//   direct_timed_*: the same plus what measuring a request costs the middleware (two
//     clock reads and one statistics record), the floor of any monitored path;
//   permits_*: the same through the middleware, caller-runs (the permit path);
//   handoff_mode_*: the same with Execution::kHandOff (a worker runs it), spinning on;
//   handoff_nospin_p50_us, handoff_nospin_p99_us: hand-off with spin_ns = 0 (if
//     nospin_ops > 0), the pure futex path;
//   condvar_p50_us, condvar_p99_us: raw mutex+condvar ping-pong round trip, two threads;
//   ratio_p50_permits_vs_direct, ratio_mean_permits_vs_direct,
//   ratio_p50_permits_vs_direct_timed,
//   ratio_p50_handoff_mode_vs_direct, ratio_p50_permits_vs_condvar,
//   ratio_p50_handoff_mode_vs_condvar;
//   async_ops_per_s, async_handoff_ops_per_s: pipelined async Submit of gets/puts in each
//     mode, completions counted;
//   pmem_direct_*, pmem_permits_*, ratio_p50_pmem_permits_vs_direct: direct and permit
//     path again on a pmem engine (pool in pmem_pool_dir, removed afterwards);
//   pmem_put_direct_*, pmem_put_permits_*, ratio_p50_pmem_put_permits_vs_direct,
//     ratio_mean_pmem_put_permits_vs_direct: the same for a durable Put overwriting an
//     existing value_bytes key (every key is read back afterwards: Corruption if a Put
//     through the middleware was lost);
//   cores, load1 (1-minute load average when the run began, -1 if unknown),
//   value_bytes, ops, async_ops, async_submitters.
// Errors: InvalidArgument for bad options; any failed engine or middleware call.
Status RunOverheadBench(const OverheadBenchOptions& options, std::map<std::string, double>* out);

}  // namespace nvmw

#endif  // NVMW_BENCH_OVERHEAD_BENCH_H_
