// Monitor side of the middleware: the thread that samples queue lengths and machine load
// and closes a statistics window every window_s, and the calls that read windows
// (GetStats / GetState / WaitForWindow / QueueLength).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "middleware/middleware_impl.h"
#include "util/clock.h"

namespace nvmw {

namespace {

// Runnable threads on the whole machine (the 4th field of /proc/loadavg, "R/T"),
// or -1 when unavailable. `fd` is /proc/loadavg kept open by the monitor: procfs renders
// the file afresh for every read at offset 0, so a sample costs one pread, not an
// open, a stat, a read and a close.
int MachineRunnable(int fd) {
  if (fd < 0) return -1;
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  double l1, l5, l15;
  int runnable = -1, total = 0;
  if (std::sscanf(buf, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &runnable, &total) != 5) return -1;
  return runnable;
}

}  // namespace

uint64_t Middleware::Impl::QueueLen(int c) const {
  if (!started.load(std::memory_order_acquire)) return 0;
  // Caller-runs: waiting for a permit, plus async tasks holding one that no worker has
  // taken yet. Hand-off: the queue holds them all.
  if (!options.control) return shared_waiting[c].load(std::memory_order_relaxed);
  uint64_t n = UsesPermits() ? permits[c].waiting() : 0;
  return n + pools[c]->queue.SizeApprox();
}

int Middleware::Impl::Threads(int c) const {
  if (!started.load(std::memory_order_acquire) || !options.control) return 0;
  return pools[c]->target.load(std::memory_order_relaxed);
}

void Middleware::Impl::SampleQueues(int loadavg_fd) {
  const int runnable = MachineRunnable(loadavg_fd);
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

void Middleware::Impl::CloseWindow(int64_t window_start_ns, int64_t now_ns) {
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
    for (int c = 0; c < kClasses; ++c) {
      const ClassStats& s = c == 0 ? w.interactive : w.batch;
      ClassTotals& t = totals[c];
      t.windows = w.seq;
      t.ops += s.ops;
      t.errors += s.errors;
      t.rejected += s.rejected;
      t.latency_s += s.mean_us * static_cast<double>(s.ops) / 1e6;
    }
  }
  window_cv.notify_all();
}

void Middleware::Impl::MonitorMain(int loadavg_fd) {
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
      SampleQueues(loadavg_fd);
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
  if (loadavg_fd >= 0) ::close(loadavg_fd);
  // The final, partial window holds everything completed since the last close (Stop
  // has drained the queues by now).
  CloseWindow(window_start, NowNs());
  lock.lock();
  mon_running = false;
  lock.unlock();
  window_cv.notify_all();
}

// ---- public entry points of this role ----

WindowStats Middleware::GetStats() const {
  std::lock_guard<std::mutex> lock(impl_->mon_mu);
  return impl_->last;
}

ClassTotals Middleware::Totals(RequestClass cls) const {
  std::lock_guard<std::mutex> lock(impl_->mon_mu);
  if (cls != RequestClass::kAuto) return impl_->totals[static_cast<int>(cls)];
  ClassTotals sum = impl_->totals[0];
  const ClassTotals& b = impl_->totals[1];
  sum.ops += b.ops;
  sum.errors += b.errors;
  sum.rejected += b.rejected;
  sum.latency_s += b.latency_s;
  return sum;
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

size_t Middleware::QueueLength(RequestClass cls) const {
  if (cls != RequestClass::kInteractive && cls != RequestClass::kBatch) return 0;
  return impl_->QueueLen(static_cast<int>(cls));
}

}  // namespace nvmw
