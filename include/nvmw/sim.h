// Simulator: a virtual-time discrete-event model of nvmw under a two-class workload.
// Same pieces as the real system: trace-paced clients, the middleware's execution path
// (per-class permits with callers running their own operations, as
// Execution::kCallerRuns; or the class queues and worker pools of Execution::kHandOff;
// or the no-control baseline), a CPU shared by every runnable thread, and the device
// model of device.h in virtual time. One RunWindow() call produces the WindowStats the
// real middleware's monitor would report for one window, in microseconds of CPU time
// rather than seconds of wall time, so reinforcement-learning training (hundreds of
// episodes per workload phase, as in the thesis) takes minutes instead of days.
//
// The free parameters (SimParams: CPU costs, wake-up cost, copy bandwidth, jitter) are
// fitted from a sweep of the real system (`nvmw sim fit`).
//
// Thread safety: none; one thread drives a Simulator.
#ifndef NVMW_SIM_H_
#define NVMW_SIM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "nvmw/device.h"
#include "nvmw/middleware.h"
#include "nvmw/stats.h"
#include "nvmw/status.h"

namespace nvmw {

// One class's offered load: a trace schedule replayed by `clients` client threads that
// each take the next scheduled request, wait for its time and issue it: synchronously
// (the client waits for the result, as the trace replay does), or with `async` as
// Middleware::Submit (the client goes on at once; a worker of the class runs it).
struct SimClassWorkload {
  std::vector<double> times_us;   // scheduled offsets from the start, sorted, >= 0
  std::vector<uint8_t> writes;    // 1 = write (put), 0 = read (get), per request
  std::vector<uint32_t> bytes;    // value size per request
  double period_us = 0;           // > 0: start over after this long (loop); 0: one pass
  int clients = 1;
  bool async = false;             // requests are submitted async (run inline in no-control)
};

// Host costs, all fitted (defaults: rough figures of a 2-core VM, see docs/sim.md).
struct SimParams {
  double cores = 2;               // CPUs shared by all runnable threads (processor sharing)
  double background = 0.0;        // fraction of the CPUs taken by everything else, [0, 1)
  double client_cpu_us = 5;       // CPU a client spends per request (wake from its sleep, issue)
  // CPU of waking a parked thread, paid per hand-off: caller-runs pays it when a request
  // waited for a permit and for an async request's worker; hand-off pays it for the
  // worker and again for the client on completion.
  double wake_cpu_us = 10;
  double op_cpu_us = 1;           // fixed CPU of one engine operation
  double copy_bytes_per_ns = 10;  // engine copy bandwidth (GB/s) for the value bytes
  double jitter = 0.3;            // sigma of the log-normal factor on every CPU cost
  // CPU scheduling: 0 = processor sharing (every runnable thread progresses at once);
  // > 0 = round robin on round(cores) CPUs with this time slice, so a woken thread
  // waits behind running ones (the Linux scheduler lies between the two).
  double quantum_us = 0;
  // Caller-runs and no-control: a synchronous request that has to wait for a permit
  // busy-waits this long (CPU) before parking when a core is free, as the middleware's
  // MiddlewareOptions::spin_ns; handed its permit meanwhile it pays no wake_cpu_us.
  // 0 = waiters always park (the fitted model so far).
  double spin_us = 0;
};

struct SimOptions {
  SimParams params;
  DeviceProfile device;           // passthrough (the default) = no device stage
  bool control = true;            // false: the no-control baseline (callers run operations)
  // Controlled mode's execution path, as MiddlewareOptions::execution: kCallerRuns (a
  // class's thread count is its number of permits; a sync request holding one runs on its
  // client's thread) or kHandOff (workers run every request). No-control is the same in
  // both: callers run their own operations, at most no_control_max_inflight at once.
  Execution execution = Execution::kCallerRuns;
  int interactive_threads = 15;
  int batch_threads = 15;
  int max_threads = 32;
  int no_control_max_inflight = 200;
  double window_s = 1.0;          // virtual seconds per window
  uint64_t seed = 0;
  // Fast-forward (docs/sim.md): a window is simulated in chunks of ff_chunk_s; once the
  // busy clients of both classes have stayed level (within ff_tolerance x their mean + 2)
  // over at least two chunks holding >= ff_min_ops interactive and >= ff_min_ops / 10
  // batch completions, the rest of the window is extrapolated from that steady segment
  // instead of simulated. false: every window is simulated whole (the exact mode).
  // Windows shorter than 4 chunks are always simulated whole.
  bool fast_forward = false;
  double ff_chunk_s = 0.005;
  int ff_min_ops = 1000;
  double ff_tolerance = 0.25;
};

class Simulator {
 public:
  // InvalidArgument on bad options (thread counts, window, params out of range).
  static Status Create(const SimOptions& options, std::unique_ptr<Simulator>* out);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Replaces the offered workload from now on (a phase switch). Requests already issued
  // complete; requests scheduled by the old workload but not yet issued are dropped.
  // `start_offset_us` starts each schedule that far into its trace (wrapped by period).
  Status SetWorkload(const SimClassWorkload& interactive, const SimClassWorkload& batch,
                     double start_offset_us = 0);
  // Set the thread counts. Caller-runs: the permit limits (growing admits waiters at once,
  // shrinking takes effect as permits come back). Hand-off: the pool sizes (growing adds
  // parked workers; shrinking retires parked workers at once and busy ones when they
  // finish their request). Ignored in no-control mode.
  Status SetThreads(int interactive, int batch);
  void GetThreads(int* interactive, int* batch) const;
  // Advance virtual time by one window and report it (seq counts windows from 1).
  Status RunWindow(WindowStats* out);
  // Seconds of windows run (what the middleware's clock would show).
  double now_s() const;
  // Virtual seconds actually simulated (less than now_s() once fast-forward skipped).
  double virtual_s() const;
  // Events processed since creation (for benchmarks).
  uint64_t events() const;

 private:
  struct Impl;
  explicit Simulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmw

#endif  // NVMW_SIM_H_
