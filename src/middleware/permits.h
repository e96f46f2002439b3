// Permits: one request class's concurrency limit ("threads" in thesis Table 3.2/3.3),
// counted as permits, with a FIFO of the requests waiting for one.
//
// A request runs in the engine only while it holds a permit. Acquire takes a free permit
// at once when nobody is waiting (one compare-and-swap on one word), and otherwise appends
// the request to the FIFO. Release hands the permit straight to the oldest waiter, so a
// newcomer never overtakes a waiter. SetLimit moves the limit while requests flow: a grow
// admits waiters at once; a shrink takes effect as permits come back (a release above
// the limit destroys its permit instead of handing it on).
//
// The word packs the permits in use, the number of waiters and a "closed" bit. While
// anyone waits, the word only changes under the FIFO mutex (both fast paths require zero
// waiters), so a release either sees no waiter and just decrements, or takes the mutex
// and hands over; a waiter re-checks for a free permit under the same mutex before it
// queues. No wake-up is lost and the uncontended path takes no lock.
//
// What a granted waiter does with its permit is the caller's business: Release and
// SetLimit return the waiters they granted as PermitWaiter pointers (linked through
// `next`), and the middleware hands each request to a worker (or, with no workers,
// wakes the waiting caller).
//
// Thread safety: every method may be called from any thread.
#ifndef NVMW_MIDDLEWARE_PERMITS_H_
#define NVMW_MIDDLEWARE_PERMITS_H_

#include <atomic>
#include <cstdint>
#include <mutex>

namespace nvmw {

// A waiting request; the FIFO links waiters through `next` (no allocation).
struct PermitWaiter {
  PermitWaiter* next = nullptr;
};

class Permits {
 public:
  enum class Admit {
    kGranted,  // the caller holds a permit now
    kQueued,   // appended to the FIFO; it will be returned by a Release or SetLimit
    kClosed,   // Close() was called (or Open() never was): nothing queued
    kFull,     // max_waiters are already waiting: nothing queued
  };

  // Largest limit and waiter count the word can hold.
  static constexpr int kMaxLimit = (1 << 24) - 1;
  static constexpr uint64_t kMaxWaiters = (uint64_t{1} << 32) - 1;

  Permits() = default;
  Permits(const Permits&) = delete;
  Permits& operator=(const Permits&) = delete;

  // Takes a permit, or queues `w` (FIFO) when none is free or others already wait.
  Admit Acquire(PermitWaiter* w, uint64_t max_waiters) {
    uint64_t cur = word_.load(std::memory_order_relaxed);
    if ((cur & (kClosedBit | kWaiterMask)) == 0 &&
        InUse(cur) < static_cast<uint64_t>(limit_.load(std::memory_order_relaxed)) &&
        word_.compare_exchange_strong(cur, cur + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      return Admit::kGranted;
    }
    return AcquireSlow(w, max_waiters);
  }

  // Takes a free permit without ever queuing: kGranted, kClosed, or kFull when none is
  // free (or others already wait: a newcomer never overtakes a waiter).
  Admit TryAcquire() {
    uint64_t cur = word_.load(std::memory_order_relaxed);
    for (;;) {
      if (cur & kClosedBit) return Admit::kClosed;
      if ((cur & kWaiterMask) != 0 ||
          InUse(cur) >= static_cast<uint64_t>(limit_.load(std::memory_order_relaxed))) {
        return Admit::kFull;
      }
      if (word_.compare_exchange_weak(cur, cur + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        return Admit::kGranted;
      }
    }
  }

  // Gives back one permit. Returns the waiters that hold a permit now (oldest first,
  // linked through `next`, nullptr when none): the one handed the released permit, plus
  // any that room under the limit admits. The caller must dispatch each one.
  // Once the word shows every permit back, the owner may free this (the middleware's
  // Stop does): a release touches nothing after the step that gives its permit back.
  PermitWaiter* Release() {
    uint64_t cur = word_.load(std::memory_order_relaxed);
    for (;;) {
      if ((cur & kWaiterMask) == 0) {
        if (word_.compare_exchange_weak(cur, cur - 1, std::memory_order_release,
                                        std::memory_order_relaxed)) {
          return nullptr;
        }
        continue;
      }
      PermitWaiter* granted = nullptr;
      if (ReleaseSlow(&granted)) return granted;
      cur = word_.load(std::memory_order_relaxed);
    }
  }

  // Opens admission (the limit is whatever SetLimit last set; 0 at first).
  void Open();
  // Refuses new acquisitions (kClosed). Waiters already queued still get their permits.
  void Close();
  // New limit; returns the waiters a grow admits (as Release does).
  PermitWaiter* SetLimit(int limit);

  int limit() const { return limit_.load(std::memory_order_relaxed); }
  uint64_t in_use() const { return InUse(word_.load(std::memory_order_acquire)); }
  uint64_t waiting() const { return Waiters(word_.load(std::memory_order_acquire)); }
  // No permit in use and nobody waiting.
  bool Idle() const { return (word_.load(std::memory_order_acquire) & ~kClosedBit) == 0; }

 private:
  static constexpr int kWaiterShift = 24;
  static constexpr uint64_t kInUseMask = (uint64_t{1} << kWaiterShift) - 1;
  static constexpr uint64_t kWaiterOne = uint64_t{1} << kWaiterShift;
  static constexpr uint64_t kWaiterMask = kMaxWaiters << kWaiterShift;
  static constexpr uint64_t kClosedBit = uint64_t{1} << 63;

  static uint64_t InUse(uint64_t w) { return w & kInUseMask; }
  static uint64_t Waiters(uint64_t w) { return (w & kWaiterMask) >> kWaiterShift; }

  Admit AcquireSlow(PermitWaiter* w, uint64_t max_waiters);
  // Under the mutex, while anyone waits: hands the permit over (or, above the limit,
  // gives it back) and sets *granted; the word keeps a waiter or a permit in use until
  // the mutex is released. False, changing nothing, when nobody waits any more: the
  // permit then goes back outside the mutex, by the fast path.
  bool ReleaseSlow(PermitWaiter** granted);
  // Moves the FIFO's head to the granted list. mu_ held.
  PermitWaiter* PopLocked();
  // While waiters wait and the limit leaves room, grants permits to the oldest. mu_ held.
  void AdmitLocked(PermitWaiter** head, PermitWaiter** tail);

  // In use (bits 0..23), waiters (bits 24..55), closed (bit 63). Starts closed.
  alignas(64) std::atomic<uint64_t> word_{kClosedBit};
  std::atomic<int> limit_{0};
  std::mutex mu_;                  // the FIFO; every change of the word while waiters > 0
  PermitWaiter* head_ = nullptr;   // guarded by mu_: oldest waiter
  PermitWaiter* tail_ = nullptr;   // guarded by mu_
};

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_PERMITS_H_
