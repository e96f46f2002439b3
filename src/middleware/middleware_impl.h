// The middleware's internal state (Middleware::Impl) shared by its source files, one per
// role: middleware.cc (lifecycle and options), middleware_admission.cc (validation,
// classification, admission gate, enqueue, sync completion, no-control path),
// middleware_pools.cc (worker loop, parking and wake-up, resize, retire) and
// middleware_monitor.cc (monitor thread, window close, load sampling); permits.{h,cc}
// hold a class's concurrency limit; deferred_stop.{h,cc} run the stops a destructor
// cannot run on its own thread.
// docs/middleware.md explains the protocols.
#ifndef NVMW_MIDDLEWARE_MIDDLEWARE_IMPL_H_
#define NVMW_MIDDLEWARE_MIDDLEWARE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "middleware/bounded_queue.h"
#include "middleware/permits.h"
#include "middleware/window_stats.h"
#include "nvmw/middleware.h"

namespace nvmw {

inline constexpr int kClasses = 2;
inline constexpr int kMaxThreadsLimit = 1024;
inline constexpr int kMaxInflightLimit = 1 << 20;
inline constexpr int kCallerStripes = 16;  // stats shards of threads that run their own request

inline const char* ClassName(int cls) { return cls == 0 ? "interactive" : "batch"; }

// Completion state of a task; a synchronous caller waits on it.
inline constexpr uint32_t kPending = 0;  // not finished, caller not parked
inline constexpr uint32_t kDone = 1;     // finished; the worker never touches the task again
inline constexpr uint32_t kParked = 2;   // not finished, caller is (about to be) asleep

// Sleep state of a worker slot.
inline constexpr uint32_t kRunning = 0;
inline constexpr uint32_t kAsleep = 1;
inline constexpr uint32_t kNotified = 2;

// One request waiting for a permit or travelling through a queue. Sync calls keep it on
// the caller's stack and point into the caller's key/value (the caller blocks, so the
// views stay valid); async calls allocate an AsyncTask that owns its strings and the
// completion. A waiting sync caller is woken through `state` (kDone) when a worker has
// run its request, or, in no-control mode, when it holds a permit.
struct Task : PermitWaiter {
  OpType op = OpType::kGet;
  RequestClass cls = RequestClass::kInteractive;
  bool async = false;
  std::string_view key;
  std::string_view value;
  int64_t submit_ns = 0;
  std::string* get_out = nullptr;  // sync Get only
  Status status;                   // sync only: written by the worker before kDone
  std::atomic<uint32_t> state{kPending};
};

struct AsyncTask : Task {
  Request request;
  Completion done;
};

// Runs one engine operation; `bytes` receives the value bytes moved. Engine exceptions
// become a Status.
Status ExecuteOp(Engine* db, OpType op, std::string_view key, std::string_view value,
                 std::string* out, uint64_t* bytes);

inline bool IsError(const Status& s) { return !s.ok() && !s.IsNotFound(); }
// Whether the window statistics count the operation as a write (Get and Exists are reads).
inline bool IsWrite(OpType op) { return op == OpType::kPut || op == OpType::kRemove; }

// One class's queue and worker pool. With hand-off the queue holds every request of the
// class; with caller-runs it holds only async tasks that already hold a permit, so it
// never has more than max_threads items.
struct Pool {
  Pool(size_t capacity, int max_threads) : queue(capacity), slots(max_threads) {}

  BoundedQueue<Task> queue;
  // Target size. Workers in slots >= target retire after their current request.
  std::atomic<int> target{0};
  // Workers asleep and not yet claimed by a waker. Producers read it after publishing an
  // item and wake someone only when it is non-zero, so a busy pool pays no wake-up cost,
  // and a worker being woken no longer attracts redundant wake-ups (it was un-counted
  // by whoever claimed it).
  alignas(64) std::atomic<int> parked{0};

  struct Slot {
    std::thread thread;       // guarded by Impl::ctl_mu (until Stop closes the pools)
    bool alive = false;       // guarded by Impl::ctl_mu
    StatsShard* shard = nullptr;  // created once, then stable
    // The worker's futex word: kRunning, kAsleep, kNotified. Whoever moves it out of
    // kAsleep (a waker, or the worker itself on finding work) decrements `parked`.
    alignas(64) std::atomic<uint32_t> sleep{0};
    // Hand-off: set from before the worker's target check until its pop is over, so a
    // shrink can wait until no worker above the new target is taking a request
    // (ResizeLocked).
    std::atomic<bool> taking{false};
  };
  std::vector<Slot> slots;
};

struct Middleware::Impl {
  explicit Impl(const MiddlewareOptions& o);
  ~Impl();

  static constexpr size_t kFreeTasks = 1024;
  static constexpr size_t kKeepStringBytes = 1024;  // larger buffers are released

  const MiddlewareOptions options;
  int cores = 1;
  Engine* db = nullptr;

  std::mutex lifecycle_mu;          // serializes Start/Stop
  std::atomic<bool> started{false};  // pools/shards exist (set once)
  std::atomic<bool> accepting{false};
  std::atomic<int> submitting{0};    // callers between the accept check and enqueue
  std::atomic<bool> stopping{false}; // all submissions finished; workers drain and exit
  bool stopped = false;              // guarded by lifecycle_mu

  std::unique_ptr<Pool> pools[kClasses];
  std::mutex ctl_mu;         // resizes, worker exit decisions, slot threads
  bool pools_closed = false;  // guarded by ctl_mu: Stop owns the threads now

  // Threads known to be running (not parked) inside the middleware: workers, and sync
  // callers that are spinning. Used only to decide whether spinning can help.
  std::atomic<int> running_workers{0};
  std::atomic<int> spinners{0};
  // Runnable threads on the machine that are not ours (other processes, and our
  // callers while they run their own code), from /proc/loadavg, sampled by the
  // monitor; the minimum of the last three samples, so a passing blip does not count.
  // A spinner that would have to share a core with them only delays the thread it
  // waits for.
  std::atomic<int> other_runnable{0};
  int other_samples[3] = {0, 0, 0};  // monitor thread only
  uint64_t other_sample_count = 0;   // monitor thread only

  std::mutex shards_mu;  // guards shards (the shards themselves have their own mutex)
  std::vector<std::unique_ptr<StatsShard>> shards;
  std::vector<StatsShard*> caller_stripes;  // no-control mode, fixed after Start
  std::atomic<uint64_t> rejected[kClasses] = {};

  // Finished async tasks kept for reuse: a task is allocated by the submitter and
  // finished by a worker, and recycling it avoids a cross-thread malloc/free pair per
  // request (allocator arena lock traffic between the two threads).
  std::unique_ptr<BoundedQueue<AsyncTask>> free_tasks;

  // Caller-runs and no-control: each class's concurrency limit and its waiters. Closed
  // until Start opens them (and again from Stop on), which is the admission check of
  // these modes. Unused with hand-off, whose workers are the limit.
  Permits permits[kClasses];
  // Most waiters a class may have before new requests get Overloaded.
  uint64_t max_waiters = 0;
  // No-control mode: both classes share permits[0] (one bound for all, as the thesis
  // baseline), so its waiters are counted per class here.
  std::atomic<uint64_t> shared_waiting[kClasses] = {};

  // Monitor.
  int64_t start_ns = 0;
  std::thread monitor;
  mutable std::mutex mon_mu;
  std::condition_variable mon_cv;     // wakes the monitor for Stop
  std::condition_variable window_cv;  // wakes WaitForWindow callers
  bool mon_stop = false;              // guarded by mon_mu
  bool mon_running = false;           // guarded by mon_mu
  WindowStats last;                   // guarded by mon_mu
  ClassTotals totals[kClasses];       // guarded by mon_mu: every window closed so far
  // Queue samples of the open window (monitor thread only).
  double queue_sample_sum[kClasses] = {0, 0};
  uint64_t queue_samples = 0;

  // ---- validation and classification (middleware_admission.cc) ----
  static bool ValidClass(RequestClass c) {
    return c == RequestClass::kInteractive || c == RequestClass::kBatch ||
           c == RequestClass::kAuto;
  }
  static bool ValidOp(OpType op) {
    return op == OpType::kGet || op == OpType::kPut || op == OpType::kRemove ||
           op == OpType::kExists;
  }
  RequestClass Resolve(OpType op, size_t value_bytes, RequestClass hint) const;
  // OK, or InvalidArgument naming the fault. Inline: every request passes here, and
  // only a refusal needs the message built (Invalid, out of line).
  Status Validate(OpType op, size_t value_bytes, RequestClass hint) const {
    if (ValidOp(op) && ValidClass(hint) &&
        (op != OpType::kPut || value_bytes <= options.max_value_bytes)) {
      return Status::OK();
    }
    return Invalid(op, value_bytes, hint);
  }
  Status Invalid(OpType op, size_t value_bytes, RequestClass hint) const;

  // ---- admission gate (Stop waits for callers inside it) ----
  struct Gate {
    explicit Gate(Impl* impl) : impl_(impl) {
      impl_->submitting.fetch_add(1, std::memory_order_seq_cst);
      open = impl_->accepting.load(std::memory_order_seq_cst);
    }
    ~Gate() { impl_->submitting.fetch_sub(1, std::memory_order_release); }
    Impl* impl_;
    bool open;
  };

  // ---- spinning policy ----
  // A waiter spins only while the threads busy inside the middleware leave it a core.
  bool CallerMaySpin() const {
    if (options.spin_ns <= 0) return false;
    return running_workers.load(std::memory_order_relaxed) +
               spinners.load(std::memory_order_relaxed) +
               other_runnable.load(std::memory_order_relaxed) <
           cores;
  }
  // An idle worker counts itself among running_workers.
  bool WorkerMaySpin() const { return options.spin_ns > 0 && CoreToSpare(); }
  // The busy threads, ours and others', leave a core (see Middleware::CoreToSpare).
  bool CoreToSpare() const {
    return running_workers.load(std::memory_order_relaxed) +
               spinners.load(std::memory_order_relaxed) +
               other_runnable.load(std::memory_order_relaxed) <=
           cores;
  }

  // With permits (caller-runs, or no control) rather than workers for everything.
  bool UsesPermits() const {
    return !options.control || options.execution == Execution::kCallerRuns;
  }

  // ---- async task pool, enqueue, sync completion, front door (middleware_admission.cc) ----
  // A task owning the request and its completion (from the free list when possible).
  AsyncTask* NewAsyncTask(Request&& request, Completion&& done, RequestClass cls,
                          int64_t submit_ns);
  void RecycleAsyncTask(AsyncTask* t);
  // Recycles a refused task and hands its completion back to *done, the caller's: what
  // it captured (maybe the last reference to this middleware, whose destructor stops
  // and frees it) then goes once the call has left the middleware, not in here, where
  // the task free list, the refusal count or the admission gate are still in use.
  void RecycleRefused(AsyncTask* t, Completion* done);
  // Counts a refused request of class c and says why.
  Status Refuse(int c, uint64_t capacity);
  // Asks for a permit of class c for async task t, queueing it when none is free. Sets
  // *granted (t is the caller's to run) or returns with t queued (OK) or recycled and
  // refused (Shutdown, or Refuse's status; its completion back in *done).
  Status AcquireAsync(int c, AsyncTask* t, bool* granted, Completion* done);
  Status Enqueue(Task* t);
  // Publishes an async task that holds a permit to its class's workers.
  void PushReady(Task* t);
  // Wakes a waiting sync caller (its request is done, or it holds a permit now).
  static void Signal(Task* t);
  static void CompleteSync(Task* t, Status status);
  void WaitSync(Task* t);
  StatsShard* CallerStripe();
  // Hands each granted waiter its permit: queues the request, sync or async, for the
  // class's workers (or, when run_next is given and empty, returns one there for the
  // calling worker to run itself). In no-control mode (no workers) wakes the sync
  // caller to run it.
  void Dispatch(PermitWaiter* granted, Task** run_next);
  Permits& PermitsOf(int c) { return options.control ? permits[c] : permits[0]; }
  void ReleasePermit(int c, Task** run_next) { Dispatch(PermitsOf(c).Release(), run_next); }
  // Admits `t` under its class's permits and runs it on the calling thread when a
  // permit is free; otherwise waits in the FIFO until a worker has run it (no-control:
  // until it holds a permit, then runs it). Returns Shutdown/Overloaded when refused;
  // else *result is the engine's status. With `done` (no-control Submit; control must
  // be off) the request's completion is called before the permit goes back instead.
  Status RunOnCaller(Task* t, std::string* out, Status* result,
                     Completion* done = nullptr);
  Status SyncCall(OpType op, std::string_view key, std::string_view value, std::string* out,
                  RequestClass hint);
  Status Submit(Request&& request, Completion&& done);
  Status SubmitOrRun(Request&& request, Completion&& done);
  size_t SubmitOrRunPuts(Request* requests, Completion* done, size_t n, Status* accepted);

  // ---- completions and the thread running them (middleware_admission.cc) ----
  // Calls a request's completion on this thread (a worker, or the caller of a request
  // run inline), recording for the duration of the call that this thread runs one of
  // this middleware's completions; an exception it throws is reported and dropped.
  // Destroys the completion (what it captured) before the record ends, so that a last
  // reference to the middleware dropped with it is dropped inside the completion.
  void CallCompletion(Completion& done, const Status& status, std::string&& value);
  // Whether this thread is inside one of this middleware's completions, also nested
  // in a completion of another middleware (a completion may submit to a no-control
  // middleware, or call SubmitOrRun, and that completion runs inside it). Such a
  // thread holds one of this middleware's permits (with hand-off: is one of its
  // workers) until the completion returns, so it must not wait for a permit or a
  // worker: a synchronous call is refused (NotSupported) and a no-control Submit
  // that finds no permit free is refused (Overloaded) instead of waiting.
  bool InCompletion() const;
  // Whether this thread must not wait for this middleware to stop: it is inside one of
  // its completions, or one of its workers. Stop is refused there and the destructor
  // hands the stop to a thread of its own.
  bool OnOwnThread() const;
  // Records that the calling thread is one of this middleware's workers (WorkerMain).
  void MarkWorkerThread();
  // Runs a request that holds a permit of class c on this thread: executes, records,
  // calls done (and destroys it), recycles `recycle` if given, then releases the permit
  // (waiters it grants go to the workers).
  void RunInlineHoldingPermit(int c, OpType op, RequestClass cls, std::string_view key,
                              std::string_view value, int64_t submit_ns, Completion& done,
                              AsyncTask* recycle = nullptr);
  // Runs a synchronous request that holds a permit of class c on this thread: executes
  // (a Get's value goes to *out), records, releases the permit; returns the engine's
  // status.
  Status RunSyncHoldingPermit(int c, OpType op, RequestClass cls, std::string_view key,
                              std::string_view value, std::string* out, int64_t submit_ns);

  // ---- workers and pools (middleware_pools.cc) ----
  static void WakeOne(Pool& p);
  static void WakeAll(Pool& p);
  void RunTask(Task* t, StatsShard* shard);
  // Runs an async task that holds a permit, then passes the permit on; keeps going with
  // an async waiter the permit went to, so a busy class costs no wake-up per request.
  void RunHoldingPermit(Task* t, int cls, StatsShard* shard);
  bool TryRetire(Pool& p, int slot, bool force);
  // Hand-off, after lowering p's target to n: waits until no worker in a slot >= n is
  // between its target check and its pop. ctl_mu held.
  static void WaitForTakers(Pool& p, int n);
  void WorkerMain(Pool* pool, int slot, StatsShard* shard);
  void Park(Pool& p, int slot);
  StatsShard* NewShard();
  Status ResizeLocked(int cls, int n);
  // Sets both classes' limits and pools to (interactive, batch), or, when action >= 0,
  // to the current ones after that action (thesis Table 3.3, clamped by ApplyAction).
  Status Resize(int action, int interactive, int batch);

  // ---- monitor (middleware_monitor.cc) ----
  uint64_t QueueLen(int c) const;
  int Threads(int c) const;
  void SampleQueues(int loadavg_fd);
  void CloseWindow(int64_t window_start_ns, int64_t now_ns);
  void MonitorMain(int loadavg_fd);  // owns and closes loadavg_fd (-1: no load figure)

  // ---- lifecycle (middleware.cc) ----
  Status CheckOptions() const;
  Status Start(Engine* engine, int interactive_threads, int batch_threads);
  Status Stop();
  Status StopLocked();
};

// Whether the calling thread runs a completion of any middleware
// (middleware_admission.cc; WaitForDeferredStops refuses to wait there).
bool ThreadInAnyCompletion();

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_MIDDLEWARE_IMPL_H_
