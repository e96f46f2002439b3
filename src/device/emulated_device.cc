// EmulatedDevice: an Engine wrapper that holds every access for its modelled Optane
// time, with processor sharing among the accesses in flight. The scheduler is exact
// in its own (modelled) time; threads sleep on futexes and one timer thread wakes them.
//
// Scheduler. Every active accessor of kind k (read/write) progresses at
// DeviceModel::RatePerAccessor(k, readers, writers) reference bytes per ns. All accessors
// of one kind share that rate, so each kind keeps a virtual clock V_k that advances at
// that rate; an access needing W bytes of work that arrives when V_k = v leaves when
// V_k reaches v + W (its tag). Within a kind accesses therefore leave in tag order,
// whatever the rates do; across kinds the earliest predicted departure comes first.
// Advance(t) replays departures up to time t in order, changing the rates at each.
// After its transfer an access waits the idle latency (and a stall, if drawn) before
// it returns; that tail does not occupy the device.
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "nvmw/device.h"
#include "util/clock.h"
#include "util/futex.h"
#include "util/spin.h"

namespace nvmw {

namespace {

// Time is the core's clock, nvmw::NowNs (std::chrono::steady_clock, which is
// CLOCK_MONOTONIC on Linux): the absolute deadlines below are slept on with
// clock_nanosleep(CLOCK_MONOTONIC) and the timer thread's condition variable waits on
// steady_clock time points.

// Waiters sleep on raw futexes (util/futex.h): waking an address whose owner has
// already returned is harmless, which lets a departure wake a waiter whose Job lives on
// its stack.

// The default 50 us timer slack would dwarf the waits we time; ask for 1 ns, once per
// thread that sleeps on a deadline.
void UseFineTimerSlack() {
  thread_local bool done = false;
  if (!done) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    done = true;
  }
}

// Until the monotonic clock reads `deadline_ns`: sleep with an absolute deadline when
// the wait is long, spin the last short stretch.
void WaitUntilNs(int64_t deadline_ns, uint64_t spin_below_ns) {
  int64_t now = NowNs();
  if (deadline_ns - now > static_cast<int64_t>(spin_below_ns)) {
    UseFineTimerSlack();
    timespec ts;
    ts.tv_sec = deadline_ns / 1000000000;
    ts.tv_nsec = deadline_ns % 1000000000;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
  while (NowNs() < deadline_ns) CpuRelax();
}

struct Job {
  int kind = 0;              // DeviceOp as index
  double tag = 0;            // leaves when virtual_[kind] reaches tag
  uint64_t seq = 0;          // tie-break for equal tags
  uint64_t bytes = 0;        // requested bytes (stats)
  bool spinning = false;     // its thread busy-waits (no futex wake, not timed)
  double departed_ns = 0;    // emulator time of departure, set before `done`
  std::atomic<uint32_t> done{0};
};

struct JobOrder {
  bool operator()(const Job* a, const Job* b) const {
    return a->tag != b->tag ? a->tag < b->tag : a->seq < b->seq;
  }
};

class EmulatedDeviceImpl final : public EmulatedDevice {
 public:
  EmulatedDeviceImpl(Engine* base, const DeviceProfile& profile,
                     const EmulatedDeviceOptions& options)
      : base_(base),
        model_(profile),
        options_(options),
        passthrough_(profile.passthrough),
        epoch_ns_(::nvmw::NowNs()),
        rng_(options.seed) {
    max_spinning_ = options_.max_spinning_threads;
    if (max_spinning_ == 0) {
      max_spinning_ = std::max(1u, std::thread::hardware_concurrency() / 2);
    }
    stall_probability_ = options_.write_stalls ? profile.write_stall_probability : 0.0;
    if (!passthrough_) timer_ = std::thread([this] { TimerLoop(); });
  }

  ~EmulatedDeviceImpl() override {
    if (timer_.joinable()) {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
      }
      cv_.notify_one();
      timer_.join();
    }
  }

  Status Get(std::string_view key, const ValueFn& fn) override {
    if (passthrough_) return base_->Get(key, fn);
    uint64_t value_bytes = 0;
    Status s = base_->Get(key, [&](std::string_view v) {
      value_bytes = v.size();
      fn(v);
    });
    if (s.ok() || s.IsNotFound()) Hold(DeviceOp::kRead, key.size() + value_bytes);
    return s;
  }

  Status Put(std::string_view key, std::string_view value) override {
    if (passthrough_) return base_->Put(key, value);
    Status s = base_->Put(key, value);
    if (s.ok()) Hold(DeviceOp::kWrite, key.size() + value.size());
    return s;
  }

  Status Remove(std::string_view key) override {
    if (passthrough_) return base_->Remove(key);
    Status s = base_->Remove(key);
    // A miss only probed the index: a read.
    if (s.ok()) Hold(DeviceOp::kWrite, key.size());
    else if (s.IsNotFound()) Hold(DeviceOp::kRead, key.size());
    return s;
  }

  Status Exists(std::string_view key) override {
    if (passthrough_) return base_->Exists(key);
    Status s = base_->Exists(key);
    if (s.ok() || s.IsNotFound()) Hold(DeviceOp::kRead, key.size());
    return s;
  }

  uint64_t Count() override { return base_->Count(); }
  const char* Name() const override { return "emulated"; }

  const DeviceModel& model() const override { return model_; }

  EmulatedDeviceStats GetStats() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!passthrough_) AdvanceLocked(NowNs());
    EmulatedDeviceStats s = stats_;
    s.clock_ns = clock_ns_;
    s.active[0] = static_cast<uint32_t>(active_[0].size());
    s.active[1] = static_cast<uint32_t>(active_[1].size());
    return s;
  }

 private:
  // Emulator time: ns since creation (hides the free NowNs inside the class).
  double NowNs() const { return static_cast<double>(::nvmw::NowNs() - epoch_ns_); }

  // One access: join the device, wait for the transfer to finish, then the tail.
  void Hold(DeviceOp op, uint64_t bytes) {
    const int k = static_cast<int>(op);
    const double work = model_.WorkBytes(op, bytes);
    double tail_ns = model_.LatencyNs(op);
    Job job;
    job.kind = k;
    job.bytes = bytes;
    bool spin = false;
    double finish = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      double now = NowNs();
      AdvanceLocked(now);
      if (op == DeviceOp::kWrite && stall_probability_ > 0 &&
          std::uniform_real_distribution<double>(0, 1)(rng_) < stall_probability_) {
        tail_ns += model_.profile().write_stall_ns;
        ++stats_.write_stalls;
      }
      if (!(work > 0)) {
        // Nothing to transfer (zero-byte access without a size curve): latency only.
        ++stats_.accesses[k];
        stats_.bytes[k] += bytes;
        job.departed_ns = now;
        job.done.store(1, std::memory_order_relaxed);
      } else {
        job.tag = virtual_[k] + work;
        job.seq = next_seq_++;
        active_[k].insert(&job);
        finish = PredictLocked(job);
        spin = finish - now <= static_cast<double>(options_.spin_below_ns) &&
               spinning_ < max_spinning_;
        job.spinning = spin;
        if (spin) ++spinning_;
        RearmTimerLocked();
      }
    }
    if (spin) {
      // Short wait: watch the clock, and settle the departure ourselves when it is due.
      while (job.done.load(std::memory_order_acquire) == 0) {
        if (NowNs() < finish) {
          CpuRelax();
          continue;
        }
        std::lock_guard<std::mutex> lk(mu_);
        AdvanceLocked(NowNs());
        if (job.done.load(std::memory_order_relaxed) != 0) break;
        finish = PredictLocked(job);
        if (finish - clock_ns_ > static_cast<double>(options_.spin_below_ns)) {
          // Others arrived and slowed us down: sleep like everyone else.
          job.spinning = false;
          --spinning_;
          spin = false;
          RearmTimerLocked();
          break;
        }
      }
    }
    while (job.done.load(std::memory_order_acquire) == 0) FutexWait(&job.done, 0);
    // The tail runs from the modelled departure, so a late wake-up eats into it.
    WaitUntilNs(epoch_ns_ + static_cast<int64_t>(job.departed_ns + tail_ns),
                options_.spin_below_ns);
  }

  // Emulator time at which `job` leaves if no one arrives or leaves meanwhile.
  double PredictLocked(const Job& job) const {
    uint32_t r = static_cast<uint32_t>(active_[0].size());
    uint32_t w = static_cast<uint32_t>(active_[1].size());
    double rate = model_.RatePerAccessor(static_cast<DeviceOp>(job.kind), r, w);
    return clock_ns_ + std::max(0.0, job.tag - virtual_[job.kind]) / rate;
  }

  // Replays the schedule up to emulator time t: departures in order, rates updated.
  void AdvanceLocked(double t) {
    while (t > clock_ns_) {
      uint32_t n[2] = {static_cast<uint32_t>(active_[0].size()),
                       static_cast<uint32_t>(active_[1].size())};
      if (n[0] + n[1] == 0) {
        clock_ns_ = t;
        return;
      }
      double rate[2] = {0, 0};
      double first_dt = HUGE_VAL;
      int first_kind = -1;
      for (int k = 0; k < 2; ++k) {
        if (n[k] == 0) continue;
        rate[k] = model_.RatePerAccessor(static_cast<DeviceOp>(k), n[0], n[1]);
        double dt = std::max(0.0, ((*active_[k].begin())->tag - virtual_[k]) / rate[k]);
        if (dt < first_dt) {
          first_dt = dt;
          first_kind = k;
        }
      }
      double remaining = t - clock_ns_;
      double step = std::min(first_dt, remaining);
      for (int k = 0; k < 2; ++k) {
        virtual_[k] += rate[k] * step;
        stats_.served_bytes[k] += rate[k] * n[k] * step;
      }
      stats_.busy_ns += step;
      stats_.accessor_ns += static_cast<double>(n[0] + n[1]) * step;
      clock_ns_ += step;
      if (first_dt > remaining) return;
      Job* job = *active_[first_kind].begin();
      virtual_[first_kind] = job->tag;  // exact, no rounding drift
      DepartLocked(job);
    }
  }

  void DepartLocked(Job* job) {
    active_[job->kind].erase(active_[job->kind].begin());
    ++stats_.accesses[job->kind];
    stats_.bytes[job->kind] += job->bytes;
    bool spinning = job->spinning;
    if (spinning) --spinning_;
    job->departed_ns = clock_ns_;
    // After this store the waiter may return and its Job vanish: touch nothing but
    // the futex word's address.
    job->done.store(1, std::memory_order_release);
    if (!spinning) FutexWake(&job->done);
  }

  // Earliest predicted departure of a sleeping (non-spinning) access.
  double NextTimerEventLocked() const {
    double next = HUGE_VAL;
    for (int k = 0; k < 2; ++k) {
      for (const Job* job : active_[k]) {
        if (job->spinning) continue;  // its own thread settles it
        next = std::min(next, PredictLocked(*job));
        break;  // later tags of this kind leave later
      }
    }
    return next;
  }

  // Wake the timer if the next departure is now notably earlier than it planned.
  void RearmTimerLocked() {
    double next = NextTimerEventLocked();
    if (!std::isfinite(next)) return;
    double slack = HUGE_VAL;
    if (std::isfinite(timer_deadline_ns_)) {
      slack = std::max(static_cast<double>(options_.timer_tolerance_ns),
                       options_.timer_tolerance_fraction * (timer_deadline_ns_ - clock_ns_));
    }
    if (!std::isfinite(timer_deadline_ns_) || next < timer_deadline_ns_ - slack) {
      timer_deadline_ns_ = next;
      cv_.notify_one();
    }
  }

  void TimerLoop() {
    // Named for per-thread accounting (top -H, /proc/PID/task/TID/comm, schedstat).
    prctl(PR_SET_NAME, "nvmw-devtimer", 0UL, 0UL, 0UL);
    UseFineTimerSlack();
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      AdvanceLocked(NowNs());
      double next = NextTimerEventLocked();
      timer_deadline_ns_ = next;
      if (!std::isfinite(next)) {
        cv_.wait(lk);
      } else {
        auto when = std::chrono::steady_clock::time_point(
            std::chrono::nanoseconds(epoch_ns_ + static_cast<int64_t>(std::ceil(next))));
        cv_.wait_until(lk, when);
      }
    }
  }

  Engine* const base_;
  const DeviceModel model_;
  const EmulatedDeviceOptions options_;
  const bool passthrough_;
  const int64_t epoch_ns_;  // nvmw::NowNs() at creation; emulator time 0
  uint32_t max_spinning_ = 1;
  double stall_probability_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;  // wakes the timer thread
  std::thread timer_;
  // Guarded by mu_:
  bool stop_ = false;
  double clock_ns_ = 0;              // emulator time up to which the schedule is settled
  double virtual_[2] = {0, 0};       // per-kind virtual clocks (reference bytes)
  std::set<Job*, JobOrder> active_[2];
  uint64_t next_seq_ = 0;
  uint32_t spinning_ = 0;
  double timer_deadline_ns_ = HUGE_VAL;  // when the timer thread plans to wake
  std::mt19937_64 rng_;
  EmulatedDeviceStats stats_;
};

}  // namespace

std::unique_ptr<Engine> NewEmulatedDevice(Engine* base, const DeviceProfile& profile,
                                          const EmulatedDeviceOptions& options) {
  if (base == nullptr || !ValidateDeviceProfile(profile).ok()) return nullptr;
  try {
    return std::make_unique<EmulatedDeviceImpl>(base, profile, options);
  } catch (const std::system_error&) {
    return nullptr;  // the operating system refused the timer thread
  }
}

}  // namespace nvmw
