// Middleware implementation: two bounded lock-free FIFO queues, two resizable worker
// pools, futex-based completion of synchronous calls, and the window monitor.
// docs/middleware.md explains the protocols (wake-up, resize, drain, statistics).
#include "nvmw/middleware.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <semaphore>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "middleware/bounded_queue.h"
#include "middleware/window_stats.h"

namespace nvmw {

namespace {

constexpr int kClasses = 2;
constexpr int kMaxThreadsLimit = 1024;
constexpr int kMaxInflightLimit = 1 << 20;
constexpr int kCallerStripes = 16;  // stats shards of no-control caller threads

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

const char* ClassName(int cls) { return cls == 0 ? "interactive" : "batch"; }

// Completion state of a task; a synchronous caller waits on it.
constexpr uint32_t kPending = 0;  // not finished, caller not parked
constexpr uint32_t kDone = 1;     // finished; the worker never touches the task again
constexpr uint32_t kParked = 2;   // not finished, caller is (about to be) asleep

// Sleep state of a worker slot.
constexpr uint32_t kRunning = 0;
constexpr uint32_t kAsleep = 1;
constexpr uint32_t kNotified = 2;

// Futex words for parked synchronous callers. A caller's task lives on its stack and
// dies the moment the caller sees kDone, so the worker must not notify on the task
// itself; it notifies one of these static words instead (chosen by task address), which
// outlive every task. Two callers sharing a word only cost a spurious wake-up.
struct alignas(64) WakeWord {
  std::atomic<uint32_t> seq{0};
};
constexpr size_t kWakeWords = 256;
WakeWord g_wake_words[kWakeWords];

std::atomic<uint32_t>& CallerWakeWord(const void* task) {
  uintptr_t h = reinterpret_cast<uintptr_t>(task);
  h ^= h >> 7;
  h ^= h >> 17;
  return g_wake_words[(h >> 4) % kWakeWords].seq;
}

// One request travelling through a queue. Sync calls keep it on the caller's stack and
// point into the caller's key/value (the caller blocks, so the views stay valid); async
// calls allocate an AsyncTask that owns its strings and the completion.
struct Task {
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

// Runs one engine operation; `bytes` receives the value bytes moved.
Status ExecuteOp(Engine* db, OpType op, std::string_view key, std::string_view value,
                 std::string* out, uint64_t* bytes) {
  *bytes = 0;
  try {
    switch (op) {
      case OpType::kGet: {
        Status s = db->Get(key, out);
        if (s.ok()) *bytes = out->size();
        return s;
      }
      case OpType::kPut:
        *bytes = value.size();
        return db->Put(key, value);
      case OpType::kRemove:
        return db->Remove(key);
    }
  } catch (const std::bad_alloc&) {
    return Status::NoSpace("out of memory in engine operation");
  } catch (const std::exception& e) {
    return Status::IOError(std::string("engine threw: ") + e.what());
  }
  return Status::InvalidArgument("unknown operation");
}

bool IsError(const Status& s) { return !s.ok() && !s.IsNotFound(); }

}  // namespace

// One class's queue and worker pool.
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
    std::thread thread;       // guarded by Impl::ctl_mu_ (until Stop closes the pools)
    bool alive = false;       // guarded by Impl::ctl_mu_
    StatsShard* shard = nullptr;  // created once, then stable
    // The worker's futex word: kRunning, kAsleep, kNotified. Whoever moves it out of
    // kAsleep (a waker, or the worker itself on finding work) decrements `parked`.
    alignas(64) std::atomic<uint32_t> sleep{0};
  };
  std::vector<Slot> slots;
};

struct Middleware::Impl {
  explicit Impl(const MiddlewareOptions& o) : options(o) {
    unsigned hc = std::thread::hardware_concurrency();
    cores = hc == 0 ? 1 : static_cast<int>(hc);
  }
  ~Impl() {
    AsyncTask* t = nullptr;
    while (free_tasks && free_tasks->TryPop(&t)) delete t;
  }

  static constexpr size_t kFreeTasks = 1024;
  static constexpr size_t kKeepStringBytes = 1024;  // larger buffers are released

  AsyncTask* NewAsyncTask() {
    AsyncTask* t = nullptr;
    if (free_tasks->TryPop(&t)) return t;
    return new AsyncTask;
  }

  void RecycleAsyncTask(AsyncTask* t) {
    t->done = nullptr;  // destroys the callback's captures here, as a delete would
    for (std::string* str : {&t->request.key, &t->request.value}) {
      if (str->capacity() > kKeepStringBytes) {
        std::string().swap(*str);
      } else {
        str->clear();
      }
    }
    if (!free_tasks->TryPush(t)) delete t;
  }

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

  // No-control mode.
  std::unique_ptr<std::counting_semaphore<kMaxInflightLimit>> inflight;
  std::atomic<uint64_t> waiting[kClasses] = {};  // callers blocked on the semaphore

  // Monitor.
  int64_t start_ns = 0;
  std::thread monitor;
  mutable std::mutex mon_mu;
  std::condition_variable mon_cv;     // wakes the monitor for Stop
  std::condition_variable window_cv;  // wakes WaitForWindow callers
  bool mon_stop = false;              // guarded by mon_mu
  bool mon_running = false;           // guarded by mon_mu
  WindowStats last;                   // guarded by mon_mu
  // Queue samples of the open window (monitor thread only).
  double queue_sample_sum[kClasses] = {0, 0};
  uint64_t queue_samples = 0;

  // ---- validation and classification ----
  static bool ValidClass(RequestClass c) {
    return c == RequestClass::kInteractive || c == RequestClass::kBatch ||
           c == RequestClass::kAuto;
  }
  static bool ValidOp(OpType op) {
    return op == OpType::kGet || op == OpType::kPut || op == OpType::kRemove;
  }
  RequestClass Resolve(OpType op, size_t value_bytes, RequestClass hint) const {
    if (hint != RequestClass::kAuto) return hint;
    return op == OpType::kPut && value_bytes >= options.batch_threshold_bytes
               ? RequestClass::kBatch
               : RequestClass::kInteractive;
  }
  Status Validate(OpType op, size_t value_bytes, RequestClass hint) const {
    if (!ValidOp(op)) {
      return Status::InvalidArgument("unknown operation type " +
                                     std::to_string(static_cast<int>(op)));
    }
    if (!ValidClass(hint)) {
      return Status::InvalidArgument("unknown request class " +
                                     std::to_string(static_cast<int>(hint)));
    }
    if (op == OpType::kPut && value_bytes > options.max_value_bytes) {
      return Status::InvalidArgument("value of " + std::to_string(value_bytes) +
                                     " bytes exceeds max_value_bytes " +
                                     std::to_string(options.max_value_bytes));
    }
    return Status::OK();
  }

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
  bool WorkerMaySpin() const {
    if (options.spin_ns <= 0) return false;
    return running_workers.load(std::memory_order_relaxed) +
               spinners.load(std::memory_order_relaxed) +
               other_runnable.load(std::memory_order_relaxed) <=
           cores;
  }

  // ---- queues and wake-ups ----
  // Claims one sleeping worker (kAsleep -> kNotified) and wakes it. Slots are few
  // (<= max_threads) and this runs only when `parked` says someone sleeps.
  static void WakeOne(Pool& p) {
    for (Pool::Slot& slot : p.slots) {
      uint32_t expected = kAsleep;
      if (slot.sleep.load(std::memory_order_relaxed) == kAsleep &&
          slot.sleep.compare_exchange_strong(expected, kNotified, std::memory_order_seq_cst)) {
        p.parked.fetch_sub(1, std::memory_order_seq_cst);
        slot.sleep.notify_one();
        return;
      }
    }
  }
  // Wakes every sleeping worker (resize, stop, retiring worker handing over work).
  static void WakeAll(Pool& p) {
    for (Pool::Slot& slot : p.slots) {
      uint32_t expected = kAsleep;
      if (slot.sleep.compare_exchange_strong(expected, kNotified, std::memory_order_seq_cst)) {
        p.parked.fetch_sub(1, std::memory_order_seq_cst);
        slot.sleep.notify_one();
      }
    }
  }

  Status Enqueue(Task* t) {
    const int c = static_cast<int>(t->cls);
    Pool& p = *pools[c];
    if (!p.queue.TryPush(t)) {
      rejected[c].fetch_add(1, std::memory_order_relaxed);
      return Status::Overloaded(std::string(ClassName(c)) + " queue full (capacity " +
                                std::to_string(p.queue.capacity()) + ")");
    }
    // Pairs with the parker's seq_cst "asleep, parked++, then LooksEmpty()": either it
    // sees the item or this load sees it parked.
    if (p.parked.load(std::memory_order_seq_cst) > 0) WakeOne(p);
    return Status::OK();
  }

  // ---- sync completion ----
  static void CompleteSync(Task* t, Status status) {
    t->status = std::move(status);
    std::atomic<uint32_t>& word = CallerWakeWord(t);
    if (t->state.exchange(kDone, std::memory_order_acq_rel) == kParked) {
      word.fetch_add(1, std::memory_order_seq_cst);
      word.notify_all();
    }
  }

  void WaitSync(Task* t) {
    if (t->state.load(std::memory_order_acquire) == kDone) return;
    if (CallerMaySpin()) {
      spinners.fetch_add(1, std::memory_order_relaxed);
      const int64_t deadline = NowNs() + options.spin_ns;
      for (uint32_t i = 1;; ++i) {
        if (t->state.load(std::memory_order_acquire) == kDone) break;
        CpuRelax();
        if ((i & 63) == 0 && NowNs() >= deadline) break;
      }
      spinners.fetch_sub(1, std::memory_order_relaxed);
    }
    uint32_t expected = kPending;
    if (!t->state.compare_exchange_strong(expected, kParked, std::memory_order_acq_rel)) {
      return;  // already kDone
    }
    std::atomic<uint32_t>& word = CallerWakeWord(t);
    for (;;) {
      const uint32_t seq = word.load(std::memory_order_seq_cst);
      if (t->state.load(std::memory_order_acquire) == kDone) return;
      word.wait(seq, std::memory_order_seq_cst);
    }
  }

  // ---- workers ----
  void RunTask(Task* t, StatsShard* shard) {
    uint64_t bytes = 0;
    if (t->async) {
      auto* at = static_cast<AsyncTask*>(t);
      std::string value;
      Status s = ExecuteOp(db, t->op, t->key, t->value, &value, &bytes);
      shard->Record(t->cls, static_cast<uint64_t>(std::max<int64_t>(0, NowNs() - t->submit_ns)),
                    bytes, t->op != OpType::kGet, IsError(s));
      if (!s.ok()) value.clear();
      try {
        at->done(s, std::move(value));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nvmw: completion threw (ignored): %s\n", e.what());
      } catch (...) {
        std::fprintf(stderr, "nvmw: completion threw (ignored)\n");
      }
      RecycleAsyncTask(at);
      return;
    }
    Status s = ExecuteOp(db, t->op, t->key, t->value, t->get_out, &bytes);
    shard->Record(t->cls, static_cast<uint64_t>(std::max<int64_t>(0, NowNs() - t->submit_ns)),
                  bytes, t->op != OpType::kGet, IsError(s));
    CompleteSync(t, std::move(s));
  }

  // Called by a worker whose slot is at or above the target. Decides under ctl_mu so
  // that a concurrent grow either sees the slot dead (and restarts it) or keeps it.
  bool TryRetire(Pool& p, int slot, bool force) {
    std::lock_guard<std::mutex> lock(ctl_mu);
    if (!force && slot < p.target.load(std::memory_order_relaxed)) return false;
    p.slots[slot].alive = false;
    running_workers.fetch_sub(1, std::memory_order_relaxed);
    // A wake-up may have been aimed at this worker; pass it on if work is waiting.
    if (!p.queue.LooksEmpty()) WakeAll(p);
    return true;
  }

  void WorkerMain(Pool* pool, int slot, StatsShard* shard) {
    Pool& p = *pool;
    if (pool == pools[static_cast<int>(RequestClass::kBatch)].get() && options.batch_nice > 0) {
      // Per-thread on Linux: PRIO_PROCESS with a thread id. Best effort; failure only
      // means batch keeps the caller's priority.
      // Relative to the niceness inherited from the starting thread, so it never asks
      // for more priority than the caller had (that would need privilege).
      const id_t tid = static_cast<id_t>(::syscall(SYS_gettid));
      errno = 0;
      const int inherited = ::getpriority(PRIO_PROCESS, tid);
      if (errno == 0) {
        (void)::setpriority(PRIO_PROCESS, tid, std::min(19, inherited + options.batch_nice));
      }
    }
    for (;;) {
      if (slot >= p.target.load(std::memory_order_relaxed) && TryRetire(p, slot, false)) return;
      // Read `stopping` before popping: once it is set every submission has been
      // published, so a failed pop afterwards means the queue is really drained.
      const bool stop = stopping.load(std::memory_order_acquire);
      Task* t = nullptr;
      if (p.queue.TryPop(&t)) {
        RunTask(t, shard);
        continue;
      }
      if (stop) {
        TryRetire(p, slot, true);
        return;
      }
      if (WorkerMaySpin()) {
        const int64_t deadline = NowNs() + options.spin_ns;
        bool ready = false;
        for (uint32_t i = 1;; ++i) {
          if (!p.queue.LooksEmpty() || stopping.load(std::memory_order_relaxed) ||
              slot >= p.target.load(std::memory_order_relaxed)) {
            ready = true;
            break;
          }
          CpuRelax();
          if ((i & 63) == 0 && NowNs() >= deadline) break;
        }
        if (ready) continue;
      }
      Park(p, slot);
    }
  }

  void Park(Pool& p, int slot) {
    std::atomic<uint32_t>& sleep = p.slots[slot].sleep;
    sleep.store(kAsleep, std::memory_order_seq_cst);
    p.parked.fetch_add(1, std::memory_order_seq_cst);
    running_workers.fetch_sub(1, std::memory_order_relaxed);
    if (!p.queue.LooksEmpty() || slot >= p.target.load(std::memory_order_seq_cst) ||
        stopping.load(std::memory_order_seq_cst)) {
      // Work (or a reason to exit) arrived meanwhile: un-park ourselves unless a waker
      // already claimed us (then it did the decrement).
      uint32_t expected = kAsleep;
      if (sleep.compare_exchange_strong(expected, kRunning, std::memory_order_seq_cst)) {
        p.parked.fetch_sub(1, std::memory_order_seq_cst);
      }
    } else {
      while (sleep.load(std::memory_order_seq_cst) == kAsleep) {
        sleep.wait(kAsleep, std::memory_order_seq_cst);
      }
    }
    sleep.store(kRunning, std::memory_order_relaxed);
    running_workers.fetch_add(1, std::memory_order_relaxed);
  }

  StatsShard* NewShard() {
    std::lock_guard<std::mutex> lock(shards_mu);
    shards.push_back(std::make_unique<StatsShard>());
    return shards.back().get();
  }

  // Sets a pool's target and starts workers for dead slots below it. ctl_mu held.
  Status ResizeLocked(int cls, int n) {
    Pool& p = *pools[cls];
    const int old = p.target.load(std::memory_order_relaxed);
    p.target.store(n, std::memory_order_seq_cst);
    for (int s = 0; s < n; ++s) {
      Pool::Slot& slot = p.slots[s];
      if (slot.alive) continue;
      // A dead slot's thread has decided to exit under ctl_mu and only returns now.
      if (slot.thread.joinable()) slot.thread.join();
      if (slot.shard == nullptr) slot.shard = NewShard();
      running_workers.fetch_add(1, std::memory_order_relaxed);
      try {
        slot.thread = std::thread(&Impl::WorkerMain, this, &p, s, slot.shard);
      } catch (const std::system_error& e) {
        running_workers.fetch_sub(1, std::memory_order_relaxed);
        p.target.store(std::max(s, 1), std::memory_order_seq_cst);
        return Status::IOError(std::string("cannot start ") + ClassName(cls) +
                               " worker: " + e.what());
      }
      slot.alive = true;
    }
    if (n < old) WakeAll(p);  // parked workers above the target must wake to retire
    return Status::OK();
  }

  // ---- no-control mode ----
  StatsShard* CallerStripe() {
    static thread_local const size_t h = std::hash<std::thread::id>()(std::this_thread::get_id());
    return caller_stripes[h % caller_stripes.size()];
  }

  Status RunInline(OpType op, RequestClass cls, std::string_view key, std::string_view value,
                   std::string* out, int64_t submit_ns) {
    const int c = static_cast<int>(cls);
    waiting[c].fetch_add(1, std::memory_order_relaxed);
    inflight->acquire();
    waiting[c].fetch_sub(1, std::memory_order_relaxed);
    uint64_t bytes = 0;
    Status s = ExecuteOp(db, op, key, value, out, &bytes);
    inflight->release();
    CallerStripe()->Record(cls, static_cast<uint64_t>(std::max<int64_t>(0, NowNs() - submit_ns)),
                           bytes, op != OpType::kGet, IsError(s));
    return s;
  }

  // ---- front door ----
  Status SyncCall(OpType op, std::string_view key, std::string_view value, std::string* out,
                  RequestClass hint) {
    Status s = Validate(op, value.size(), hint);
    if (!s.ok()) return s;
    const int64_t submit_ns = NowNs();
    Task t;
    t.op = op;
    t.cls = Resolve(op, value.size(), hint);
    if (!options.control) {
      Gate gate(this);
      if (!gate.open) return Status::Shutdown("middleware is not running");
      return RunInline(op, t.cls, key, value, out, submit_ns);
    }
    t.key = key;
    t.value = value;
    t.get_out = out;
    t.submit_ns = submit_ns;
    {
      Gate gate(this);
      if (!gate.open) return Status::Shutdown("middleware is not running");
      s = Enqueue(&t);
      if (!s.ok()) return s;
    }
    WaitSync(&t);
    return std::move(t.status);
  }

  Status Submit(Request&& request, Completion&& done) {
    Status s = Validate(request.op, request.value.size(), request.cls);
    if (!s.ok()) return s;
    if (!done) return Status::InvalidArgument("Submit needs a completion callback");
    const int64_t submit_ns = NowNs();
    const RequestClass cls = Resolve(request.op, request.value.size(), request.cls);
    if (!options.control) {
      Gate gate(this);
      if (!gate.open) return Status::Shutdown("middleware is not running");
      std::string value;
      s = RunInline(request.op, cls, request.key, request.value, &value, submit_ns);
      if (!s.ok()) value.clear();
      done(s, std::move(value));
      return Status::OK();
    }
    // Admission first: before Start there is no task pool to draw from.
    Gate gate(this);
    if (!gate.open) return Status::Shutdown("middleware is not running");
    AsyncTask* t = NewAsyncTask();
    t->request = std::move(request);
    t->done = std::move(done);
    t->op = t->request.op;
    t->cls = cls;
    t->async = true;
    t->key = t->request.key;
    t->value = t->request.value;
    t->submit_ns = submit_ns;
    s = Enqueue(t);
    if (!s.ok()) RecycleAsyncTask(t);
    return s;
  }

  // ---- monitor ----
  uint64_t QueueLen(int c) const {
    if (!started.load(std::memory_order_acquire)) return 0;
    if (!options.control) return waiting[c].load(std::memory_order_relaxed);
    return pools[c]->queue.SizeApprox();
  }

  int Threads(int c) const {
    if (!started.load(std::memory_order_acquire) || !options.control) return 0;
    return pools[c]->target.load(std::memory_order_relaxed);
  }

  // Runnable threads on the whole machine (the 4th field of /proc/loadavg, "R/T"),
  // or -1 when unavailable.
  static int MachineRunnable() {
    std::FILE* f = std::fopen("/proc/loadavg", "r");
    if (f == nullptr) return -1;
    double l1, l5, l15;
    int runnable = -1, total = 0;
    if (std::fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &runnable, &total) != 5) runnable = -1;
    std::fclose(f);
    return runnable;
  }

  void SampleQueues() {
    const int runnable = MachineRunnable();
    if (runnable >= 0) {
      // Ours: busy workers, spinning callers, and the monitor reading the file.
      const int ours = running_workers.load(std::memory_order_relaxed) +
                       spinners.load(std::memory_order_relaxed) + 1;
      other_samples[other_sample_count++ % 3] = std::max(0, runnable - ours);
      other_runnable.store(std::min({other_samples[0], other_samples[1], other_samples[2]}),
                           std::memory_order_relaxed);
    }
    for (int c = 0; c < kClasses; ++c) queue_sample_sum[c] += static_cast<double>(QueueLen(c));
    ++queue_samples;
  }

  void CloseWindow(int64_t window_start_ns, int64_t now_ns) {
    ClassAccum merged[kClasses];
    {
      std::lock_guard<std::mutex> lock(shards_mu);
      for (auto& shard : shards) {
        std::lock_guard<std::mutex> shard_lock(shard->mu);
        for (int c = 0; c < kClasses; ++c) {
          merged[c].Merge(shard->cls[c]);
          shard->cls[c].Clear();
        }
      }
    }
    const double duration_s = static_cast<double>(now_ns - window_start_ns) / 1e9;
    uint64_t rej[kClasses], qend[kClasses];
    double qmean[kClasses];
    int threads[kClasses];
    for (int c = 0; c < kClasses; ++c) {
      rej[c] = rejected[c].exchange(0, std::memory_order_relaxed);
      qend[c] = QueueLen(c);
      qmean[c] = queue_samples ? queue_sample_sum[c] / static_cast<double>(queue_samples)
                               : static_cast<double>(qend[c]);
      queue_sample_sum[c] = 0;
      threads[c] = Threads(c);
    }
    queue_samples = 0;

    WindowStats w;
    w.start_s = static_cast<double>(window_start_ns - start_ns) / 1e9;
    w.duration_s = duration_s;
    w.interactive = MakeClassStats(merged[0], rej[0], duration_s, qend[0], qmean[0], threads[0]);
    w.batch = MakeClassStats(merged[1], rej[1], duration_s, qend[1], qmean[1], threads[1]);
    ClassAccum all = std::move(merged[0]);
    all.Merge(merged[1]);
    w.all = MakeClassStats(all, rej[0] + rej[1], duration_s, qend[0] + qend[1],
                           qmean[0] + qmean[1], threads[0] + threads[1]);
    {
      std::lock_guard<std::mutex> lock(mon_mu);
      w.seq = last.seq + 1;
      last = w;
    }
    window_cv.notify_all();
  }

  void MonitorMain() {
    const int64_t window_ns = std::max<int64_t>(1, std::llround(options.window_s * 1e9));
    const int64_t sample_ns = std::max<int64_t>(
        1, std::llround(std::min(options.queue_sample_s, options.window_s / 4) * 1e9));
    int64_t window_start = start_ns;
    int64_t next_close = start_ns + window_ns;
    int64_t next_sample = start_ns + sample_ns;
    std::unique_lock<std::mutex> lock(mon_mu);
    while (!mon_stop) {
      const int64_t wake = std::min(next_close, next_sample);
      mon_cv.wait_until(lock,
                        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(wake)),
                        [this] { return mon_stop; });
      if (mon_stop) break;
      lock.unlock();
      const int64_t now = NowNs();
      if (now >= next_sample) {
        SampleQueues();
        next_sample += sample_ns;
        if (next_sample <= now) next_sample = now + sample_ns;
      }
      if (now >= next_close) {
        CloseWindow(window_start, now);
        window_start = now;
        next_close += window_ns;
        if (next_close <= now) next_close = now + window_ns;  // fell behind: skip, don't burst
      }
      lock.lock();
    }
    lock.unlock();
    // The final, partial window holds everything completed since the last close (Stop
    // has drained the queues by now).
    CloseWindow(window_start, NowNs());
    lock.lock();
    mon_running = false;
    lock.unlock();
    window_cv.notify_all();
  }

  // ---- lifecycle ----
  Status CheckOptions() const {
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
    if (o.spin_ns < 0) return Status::InvalidArgument("spin_ns must be >= 0");
    if (o.batch_nice < 0 || o.batch_nice > 19) {
      return Status::InvalidArgument("batch_nice must be in [0, 19]");
    }
    return Status::OK();
  }

  Status Start(Engine* engine, int interactive_threads, int batch_threads) {
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
    if (options.control) {
      for (int c = 0; c < kClasses; ++c) {
        pools[c] = std::make_unique<Pool>(options.queue_capacity, options.max_threads);
      }
      free_tasks = std::make_unique<BoundedQueue<AsyncTask>>(kFreeTasks);
    } else {
      inflight = std::make_unique<std::counting_semaphore<kMaxInflightLimit>>(
          options.no_control_max_inflight);
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
    {
      std::lock_guard<std::mutex> lock(mon_mu);
      mon_running = true;
    }
    monitor = std::thread(&Impl::MonitorMain, this);
    accepting.store(true, std::memory_order_seq_cst);
    if (!s.ok()) {
      // Workers failed to start: undo through the ordinary drain path.
      StopLocked();
      return s;
    }
    return Status::OK();
  }

  Status Stop() {
    std::lock_guard<std::mutex> life(lifecycle_mu);
    return StopLocked();
  }

  Status StopLocked() {
    if (!started.load(std::memory_order_relaxed) || stopped) return Status::OK();
    stopped = true;
    accepting.store(false, std::memory_order_seq_cst);
    // Every caller that passed the gate finishes enqueuing (or, in no-control mode,
    // finishes its whole operation) before we go on.
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

  Status Resize(const int delta_or_size[2], bool absolute) {
    if (!started.load(std::memory_order_acquire) || !accepting.load(std::memory_order_acquire)) {
      return Status::Shutdown("middleware is not running");
    }
    if (!options.control) return Status::OK();  // no pools: nothing to resize
    std::lock_guard<std::mutex> lock(ctl_mu);
    if (pools_closed) return Status::Shutdown("middleware is stopping");
    for (int c = 0; c < kClasses; ++c) {
      const int current = pools[c]->target.load(std::memory_order_relaxed);
      const int n = absolute ? delta_or_size[c]
                             : std::clamp(current + delta_or_size[c], 1, options.max_threads);
      if (n == current) continue;
      Status s = ResizeLocked(c, n);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }
};

Middleware::Middleware(const MiddlewareOptions& options) : impl_(new Impl(options)) {}

Middleware::~Middleware() { Stop(); }

Status Middleware::Start(Engine* db, int interactive_threads, int batch_threads) {
  return impl_->Start(db, interactive_threads, batch_threads);
}

Status Middleware::Stop() { return impl_->Stop(); }

Status Middleware::Get(std::string_view key, std::string* value, RequestClass cls) {
  if (value == nullptr) return Status::InvalidArgument("Get needs an output string");
  return impl_->SyncCall(OpType::kGet, key, {}, value, cls);
}

Status Middleware::Put(std::string_view key, std::string_view value, RequestClass cls) {
  return impl_->SyncCall(OpType::kPut, key, value, nullptr, cls);
}

Status Middleware::Remove(std::string_view key, RequestClass cls) {
  return impl_->SyncCall(OpType::kRemove, key, {}, nullptr, cls);
}

Status Middleware::Submit(Request request, Completion done) {
  return impl_->Submit(std::move(request), std::move(done));
}

WindowStats Middleware::GetStats() const {
  std::lock_guard<std::mutex> lock(impl_->mon_mu);
  return impl_->last;
}

State Middleware::GetState() const {
  const WindowStats w = GetStats();
  int interactive = 0, batch = 0;
  GetThreads(&interactive, &batch);
  return State{static_cast<double>(interactive),
               static_cast<double>(batch),
               static_cast<double>(w.interactive.queue_len_end),
               static_cast<double>(w.batch.queue_len_end),
               w.interactive.mean_block_bytes,
               w.batch.mean_block_bytes,
               w.interactive.write_ratio,
               w.batch.write_ratio};
}

Status Middleware::WaitForWindow(uint64_t after_seq, double timeout_s, WindowStats* out) {
  if (out == nullptr) return Status::InvalidArgument("WaitForWindow needs an output");
  if (!(timeout_s >= 0)) return Status::InvalidArgument("timeout_s must be >= 0");
  std::unique_lock<std::mutex> lock(impl_->mon_mu);
  const auto ready = [&] { return impl_->last.seq > after_seq || !impl_->mon_running; };
  // Cap the wait so that a huge timeout cannot overflow the clock arithmetic.
  impl_->window_cv.wait_for(lock, std::chrono::duration<double>(std::min(timeout_s, 1e7)), ready);
  if (impl_->last.seq > after_seq) {
    *out = impl_->last;
    return Status::OK();
  }
  if (!impl_->mon_running) return Status::Shutdown("middleware is not running");
  return Status::IOError("timeout");
}

Status Middleware::PerformAction(int action) {
  if (action < 0 || action >= kNumActions) {
    return Status::InvalidArgument("action must be in [0, 8], got " + std::to_string(action));
  }
  const int delta[kClasses] = {kActionDeltas[action][0], kActionDeltas[action][1]};
  return impl_->Resize(delta, false);
}

Status Middleware::SetThreads(int interactive, int batch) {
  const int max = impl_->options.max_threads;
  if (interactive < 1 || interactive > max || batch < 1 || batch > max) {
    return Status::InvalidArgument("thread counts must be in [1, " + std::to_string(max) +
                                   "], got (" + std::to_string(interactive) + ", " +
                                   std::to_string(batch) + ")");
  }
  const int sizes[kClasses] = {interactive, batch};
  return impl_->Resize(sizes, true);
}

void Middleware::GetThreads(int* interactive, int* batch) const {
  if (interactive != nullptr) *interactive = impl_->Threads(0);
  if (batch != nullptr) *batch = impl_->Threads(1);
}

size_t Middleware::QueueLength(RequestClass cls) const {
  if (cls != RequestClass::kInteractive && cls != RequestClass::kBatch) return 0;
  return impl_->QueueLen(static_cast<int>(cls));
}

RequestClass Middleware::Classify(OpType op, size_t value_bytes, RequestClass hint) const {
  if (!Impl::ValidClass(hint) || !Impl::ValidOp(op)) return RequestClass::kAuto;
  return impl_->Resolve(op, value_bytes, hint);
}

const MiddlewareOptions& Middleware::options() const { return impl_->options; }

bool Middleware::running() const { return impl_->accepting.load(std::memory_order_acquire); }

}  // namespace nvmw
