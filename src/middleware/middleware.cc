// Middleware lifecycle: options check, Start (pools, workers, monitor) and Stop (drain,
// join). The other roles live beside it: middleware_admission.cc (request path),
// middleware_pools.cc (workers and resizing), middleware_monitor.cc (windows).
// docs/middleware.md explains the protocols (wake-up, resize, drain, statistics).
#include "nvmw/middleware.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "middleware/deferred_stop.h"
#include "middleware/middleware_impl.h"
#include "util/clock.h"

namespace nvmw {

Middleware::Impl::Impl(const MiddlewareOptions& o) : options(o) {
  unsigned hc = std::thread::hardware_concurrency();
  cores = hc == 0 ? 1 : static_cast<int>(hc);
}

Middleware::Impl::~Impl() {
  AsyncTask* t = nullptr;
  while (free_tasks && free_tasks->TryPop(&t)) delete t;
}

Status Middleware::Impl::CheckOptions() const {
  const MiddlewareOptions& o = options;
  if (o.max_threads < 1 || o.max_threads > kMaxThreadsLimit) {
    return Status::InvalidArgument("max_threads must be in [1, " +
                                   std::to_string(kMaxThreadsLimit) + "]");
  }
  if (!(o.window_s >= 0.001 && o.window_s <= 86400)) {
    return Status::InvalidArgument("window_s must be in [0.001, 86400]");
  }
  if (!(o.queue_sample_s > 0 && std::isfinite(o.queue_sample_s))) {
    return Status::InvalidArgument("queue_sample_s must be > 0");
  }
  if (o.queue_capacity < 1 || o.queue_capacity > (size_t{1} << 30)) {
    return Status::InvalidArgument("queue_capacity must be in [1, 2^30]");
  }
  if (o.no_control_max_inflight < 1 || o.no_control_max_inflight > kMaxInflightLimit) {
    return Status::InvalidArgument("no_control_max_inflight must be in [1, 2^20]");
  }
  if (o.execution != Execution::kCallerRuns && o.execution != Execution::kHandOff) {
    return Status::InvalidArgument("execution must be kCallerRuns or kHandOff");
  }
  if (o.spin_ns < 0) return Status::InvalidArgument("spin_ns must be >= 0");
  if (o.batch_nice < 0 || o.batch_nice > 19) {
    return Status::InvalidArgument("batch_nice must be in [0, 19]");
  }
  return Status::OK();
}

Status Middleware::Impl::Start(Engine* engine, int interactive_threads, int batch_threads) {
  std::lock_guard<std::mutex> life(lifecycle_mu);
  if (engine == nullptr) return Status::InvalidArgument("Start needs an engine");
  if (started.load(std::memory_order_relaxed)) {
    return Status::InvalidArgument(
        "middleware already started (a stopped middleware cannot be restarted)");
  }
  Status s = CheckOptions();
  if (!s.ok()) return s;
  db = engine;
  start_ns = NowNs();
  FastNowNs();  // calibrates the request clock (once per process) here, not in a request
  if (options.control) {
    // Caller-runs queues only async tasks that hold a permit: at most max_threads.
    const size_t capacity = UsesPermits() ? static_cast<size_t>(options.max_threads) + 1
                                          : options.queue_capacity;
    for (int c = 0; c < kClasses; ++c) {
      pools[c] = std::make_unique<Pool>(capacity, options.max_threads);
    }
    free_tasks = std::make_unique<BoundedQueue<AsyncTask>>(kFreeTasks);
    max_waiters = options.queue_capacity;
  } else {
    // No control: no per-class limit, one bound for both classes together, and callers
    // wait rather than being refused (the thesis baseline).
    max_waiters = Permits::kMaxWaiters;
  }
  if (UsesPermits()) {
    for (int i = 0; i < kCallerStripes; ++i) caller_stripes.push_back(NewShard());
  }
  started.store(true, std::memory_order_release);
  if (options.control) {
    std::lock_guard<std::mutex> lock(ctl_mu);
    const int sizes[kClasses] = {std::clamp(interactive_threads, 1, options.max_threads),
                                 std::clamp(batch_threads, 1, options.max_threads)};
    for (int c = 0; c < kClasses; ++c) {
      s = ResizeLocked(c, sizes[c]);
      if (!s.ok()) break;
    }
  }
  if (!options.control) {
    // Both classes share one limit in the baseline: the interactive permits serve all.
    permits[0].SetLimit(options.no_control_max_inflight);
  }
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mon_mu);
      mon_running = true;
    }
    // Opened here, not in the monitor thread, so the descriptor exists once Start
    // returns: a caller counting its descriptors never races the monitor for one.
    const int loadavg_fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);  // -1: no load figure
    try {
      monitor = std::thread(&Impl::MonitorMain, this, loadavg_fd);
    } catch (const std::system_error& e) {
      if (loadavg_fd >= 0) ::close(loadavg_fd);
      // std::thread's exception must not escape (it would terminate the process):
      // the workers already started are stopped and joined below.
      {
        std::lock_guard<std::mutex> lock(mon_mu);
        mon_running = false;
      }
      s = Status::IOError(std::string("cannot start the monitor thread: ") + e.what());
    }
  }
  accepting.store(true, std::memory_order_seq_cst);
  if (UsesPermits()) {
    for (int c = 0; c < kClasses; ++c) PermitsOf(c).Open();
  }
  if (!s.ok()) {
    // A worker or the monitor failed to start: undo through the ordinary drain path,
    // which joins every thread already started.
    StopLocked();
    return s;
  }
  return Status::OK();
}

Status Middleware::Impl::Stop() {
  // Inside one of its own completions this thread holds a permit (with hand-off, it is
  // a worker) until the completion returns, and a worker would join itself: the drain
  // would wait for this very call.
  if (OnOwnThread()) {
    return Status::NotSupported(
        "Stop: called from inside one of the middleware's own completions (or on one of its "
        "workers), which the drain would wait for; stop it from another thread, or drop the "
        "reference (the destructor there stops it on a thread of its own)");
  }
  std::lock_guard<std::mutex> life(lifecycle_mu);
  return StopLocked();
}

Status Middleware::Impl::StopLocked() {
  if (!started.load(std::memory_order_relaxed) || stopped) return Status::OK();
  stopped = true;
  accepting.store(false, std::memory_order_seq_cst);
  for (Permits& p : permits) p.Close();
  // Every caller that passed the gate finishes enqueuing before we go on.
  while (submitting.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  // Permits: every accepted request holds a permit or waits for one (and keeps its
  // place: closing refuses only newcomers). Each one runs, and gives its permit back
  // after recording its statistics and running its completion. Workers are still up
  // to run the async ones.
  for (int spins = 0; !std::all_of(std::begin(permits), std::end(permits),
                                   [](const Permits& p) { return p.Idle(); });
       ++spins) {
    if (spins < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // A thread that handed a permit over, or submitted a task that has run since, may
  // still be waking a worker under its gate (Dispatch, Submit): wait for it too.
  while (submitting.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  if (options.control) {
    {
      std::lock_guard<std::mutex> lock(ctl_mu);
      pools_closed = true;
      stopping.store(true, std::memory_order_seq_cst);
    }
    for (int c = 0; c < kClasses; ++c) WakeAll(*pools[c]);
    // No one else touches the thread objects once pools_closed is set.
    for (int c = 0; c < kClasses; ++c) {
      for (Pool::Slot& slot : pools[c]->slots) {
        if (slot.thread.joinable()) slot.thread.join();
      }
    }
  }
  {
    std::lock_guard<std::mutex> lock(mon_mu);
    mon_stop = true;
  }
  mon_cv.notify_all();
  if (monitor.joinable()) monitor.join();
  return Status::OK();
}

// ---- public entry points of this role ----

Middleware::Middleware(const MiddlewareOptions& options) : impl_(new Impl(options)) {}

Middleware::~Middleware() {
  if (impl_->OnOwnThread()) {
    // The last reference went inside one of its own completions (or on a worker):
    // stopping here would wait for this thread. The stop (which still drains every
    // accepted request) and the free run on a thread of their own; this thread's
    // permit comes back, and a worker sees the stop, once it leaves the completion.
    Impl* impl = impl_.release();
    if (!RunDeferredStop([impl] {
          (void)impl->Stop();
          delete impl;
        })) {
      std::fprintf(stderr,
                   "nvmw: cannot start a thread to stop a middleware freed inside its own "
                   "completion; leaking it\n");
    }
    return;
  }
  Stop();
}

Status Middleware::Start(Engine* db, int interactive_threads, int batch_threads) {
  return impl_->Start(db, interactive_threads, batch_threads);
}

Status Middleware::Stop() { return impl_->Stop(); }

const MiddlewareOptions& Middleware::options() const { return impl_->options; }

bool Middleware::running() const { return impl_->accepting.load(std::memory_order_acquire); }

bool Middleware::CoreToSpare() const { return impl_->CoreToSpare(); }

}  // namespace nvmw
