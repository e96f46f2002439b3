// Worker side of the middleware: the worker loop, parking and wake-up, retiring, and
// resizing the pools while requests flow (PerformAction / SetThreads).
#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "middleware/middleware_impl.h"
#include "util/clock.h"
#include "util/futex.h"
#include "util/spin.h"

namespace nvmw {

// Claims one sleeping worker (kAsleep -> kNotified) and wakes it. Slots are few
// (<= max_threads) and this runs only when `parked` says someone sleeps.
void Middleware::Impl::WakeOne(Pool& p) {
  for (Pool::Slot& slot : p.slots) {
    uint32_t expected = kAsleep;
    if (slot.sleep.load(std::memory_order_relaxed) == kAsleep &&
        slot.sleep.compare_exchange_strong(expected, kNotified, std::memory_order_seq_cst)) {
      p.parked.fetch_sub(1, std::memory_order_seq_cst);
      FutexWake(&slot.sleep, 1);
      return;
    }
  }
}

// Wakes every sleeping worker (resize, stop, retiring worker handing over work).
void Middleware::Impl::WakeAll(Pool& p) {
  for (Pool::Slot& slot : p.slots) {
    uint32_t expected = kAsleep;
    if (slot.sleep.compare_exchange_strong(expected, kNotified, std::memory_order_seq_cst)) {
      p.parked.fetch_sub(1, std::memory_order_seq_cst);
      FutexWake(&slot.sleep, 1);
    }
  }
}

void Middleware::Impl::RunTask(Task* t, StatsShard* shard) {
  uint64_t bytes = 0;
  if (t->async) {
    auto* at = static_cast<AsyncTask*>(t);
    std::string value;
    Status s = ExecuteOp(db, t->op, t->key, t->value, &value, &bytes);
    shard->Record(t->cls, static_cast<uint64_t>(std::max<int64_t>(0, FastNowNs() - t->submit_ns)),
                  bytes, IsWrite(t->op), IsError(s));
    if (!s.ok()) value.clear();
    CallCompletion(at->done, s, std::move(value));
    RecycleAsyncTask(at);
    return;
  }
  Status s = ExecuteOp(db, t->op, t->key, t->value, t->get_out, &bytes);
  shard->Record(t->cls, static_cast<uint64_t>(std::max<int64_t>(0, FastNowNs() - t->submit_ns)),
                bytes, IsWrite(t->op), IsError(s));
  CompleteSync(t, std::move(s));
}

void Middleware::Impl::RunHoldingPermit(Task* t, int cls, StatsShard* shard) {
  while (t != nullptr) {
    RunTask(t, shard);  // records and completes before the permit goes back (Stop's drain)
    Task* next = nullptr;
    ReleasePermit(cls, &next);
    t = next;
  }
}

// Called by a worker whose slot is at or above the target. Decides under ctl_mu so
// that a concurrent grow either sees the slot dead (and restarts it) or keeps it.
bool Middleware::Impl::TryRetire(Pool& p, int slot, bool force) {
  std::lock_guard<std::mutex> lock(ctl_mu);
  if (!force && slot < p.target.load(std::memory_order_relaxed)) return false;
  p.slots[slot].alive = false;
  running_workers.fetch_sub(1, std::memory_order_relaxed);
  // A wake-up may have been aimed at this worker; pass it on if work is waiting.
  if (!p.queue.LooksEmpty()) WakeAll(p);
  return true;
}

void Middleware::Impl::WorkerMain(Pool* pool, int slot, StatsShard* shard) {
  Pool& p = *pool;
  const int cls = pool == pools[static_cast<int>(RequestClass::kBatch)].get() ? 1 : 0;
  const bool holds_permits = UsesPermits();
  MarkWorkerThread();
  // Named for per-thread CPU accounting (top -H, /proc/PID/task/TID/comm, perf).
  (void)::pthread_setname_np(::pthread_self(), cls ? "nvmw-batch" : "nvmw-inter");
  if (cls == static_cast<int>(RequestClass::kBatch) && options.batch_nice > 0) {
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
  std::atomic<bool>& taking = p.slots[slot].taking;
  for (;;) {
    // With hand-off the pool is the limit: a worker above the target must take no new
    // request once a shrink has returned. It says so before it checks the target, and
    // the shrink waits for it (Dekker: either it sees the new target, or the shrink
    // sees it taking and waits until its pop is over), so what it pops is a request it
    // was taking when the shrink came, its current one.
    if (!holds_permits) taking.store(true, std::memory_order_seq_cst);
    if (slot >= p.target.load(std::memory_order_seq_cst)) {
      if (!holds_permits) taking.store(false, std::memory_order_release);
      if (TryRetire(p, slot, false)) return;
      continue;  // a grow kept the slot: check again
    }
    // Read `stopping` before popping: once it is set every submission has been
    // published, so a failed pop afterwards means the queue is really drained.
    const bool stop = stopping.load(std::memory_order_acquire);
    Task* t = nullptr;
    const bool popped = p.queue.TryPop(&t);
    if (!holds_permits) taking.store(false, std::memory_order_release);
    if (popped) {
      if (holds_permits) {
        RunHoldingPermit(t, cls, shard);
      } else {
        RunTask(t, shard);
      }
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

void Middleware::Impl::Park(Pool& p, int slot) {
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
    // A raw futex: sleeps at once, where std::atomic::wait would yield first (util/futex.h).
    while (sleep.load(std::memory_order_seq_cst) == kAsleep) FutexWait(&sleep, kAsleep);
  }
  sleep.store(kRunning, std::memory_order_relaxed);
  running_workers.fetch_add(1, std::memory_order_relaxed);
}

StatsShard* Middleware::Impl::NewShard() {
  std::lock_guard<std::mutex> lock(shards_mu);
  shards.push_back(std::make_unique<StatsShard>());
  return shards.back().get();
}

void Middleware::Impl::WaitForTakers(Pool& p, int n) {
  for (size_t s = static_cast<size_t>(n); s < p.slots.size(); ++s) {
    while (p.slots[s].taking.load(std::memory_order_seq_cst)) std::this_thread::yield();
  }
}

// Sets a pool's target and starts workers for dead slots below it. ctl_mu held.
Status Middleware::Impl::ResizeLocked(int cls, int n) {
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
      // The pool keeps the workers it has (slots 0..s-1; slot 0 is never retired once
      // started), and the limit follows it, so GetThreads reports what runs. Start
      // (s == 0 possible there) undoes everything on this error.
      running_workers.fetch_sub(1, std::memory_order_relaxed);
      const int kept = std::max(s, 1);
      p.target.store(kept, std::memory_order_seq_cst);
      if (kept < old) WakeAll(p);
      if (kept < old && !UsesPermits()) WaitForTakers(p, kept);
      if (UsesPermits() && s > 0) Dispatch(permits[cls].SetLimit(kept), nullptr);
      std::string msg = std::string("cannot start ") + ClassName(cls) + " worker " +
                        std::to_string(s + 1) + " of " + std::to_string(n) + " (" + e.what() + ")";
      if (accepting.load(std::memory_order_acquire)) {  // a resize: the middleware runs on
        msg += "; the class runs with " + std::to_string(kept);
      }
      return Status::IOError(msg);
    }
    slot.alive = true;
  }
  if (n < old) WakeAll(p);  // parked workers above the target must wake to retire
  // With hand-off the pool is the limit: none of them may take a request from now on.
  if (n < old && !UsesPermits()) WaitForTakers(p, n);
  // The limit follows the pool: a grow admits waiters now, a shrink as permits return.
  if (UsesPermits()) Dispatch(permits[cls].SetLimit(n), nullptr);
  return Status::OK();
}

Status Middleware::Impl::Resize(int action, int interactive, int batch) {
  if (!started.load(std::memory_order_acquire) || !accepting.load(std::memory_order_acquire)) {
    return Status::Shutdown("middleware is not running");
  }
  if (!options.control) return Status::OK();  // no limits: nothing to resize
  std::lock_guard<std::mutex> lock(ctl_mu);
  if (pools_closed) return Status::Shutdown("middleware is stopping");
  if (action >= 0) {
    std::tie(interactive, batch) =
        ApplyAction(pools[0]->target.load(std::memory_order_relaxed),
                    pools[1]->target.load(std::memory_order_relaxed), action, options.max_threads);
  }
  const int sizes[kClasses] = {interactive, batch};
  for (int c = 0; c < kClasses; ++c) {
    const int current = pools[c]->target.load(std::memory_order_relaxed);
    const int n = sizes[c];
    if (n == current) continue;
    Status s = ResizeLocked(c, n);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

// ---- public entry points of this role ----

Status Middleware::PerformAction(int action) {
  if (action < 0 || action >= kNumActions) {
    return Status::InvalidArgument("action must be in [0, 8], got " + std::to_string(action));
  }
  return impl_->Resize(action, 0, 0);
}

Status Middleware::SetThreads(int interactive, int batch) {
  const int max = impl_->options.max_threads;
  if (interactive < 1 || interactive > max || batch < 1 || batch > max) {
    return Status::InvalidArgument("thread counts must be in [1, " + std::to_string(max) +
                                   "], got (" + std::to_string(interactive) + ", " +
                                   std::to_string(batch) + ")");
  }
  return impl_->Resize(-1, interactive, batch);
}

void Middleware::GetThreads(int* interactive, int* batch) const {
  // Under ctl_mu, which a resize holds while it changes both classes one after the
  // other: read without it, the pair could be half of one resize and half of the next.
  std::lock_guard<std::mutex> lock(impl_->ctl_mu);
  if (interactive != nullptr) *interactive = impl_->Threads(0);
  if (batch != nullptr) *batch = impl_->Threads(1);
}

}  // namespace nvmw
