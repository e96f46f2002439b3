// Permits: the slow paths (FIFO under the mutex), resize and close. See permits.h.
#include "middleware/permits.h"

#include <algorithm>

namespace nvmw {

namespace {

void Append(PermitWaiter** head, PermitWaiter** tail, PermitWaiter* w) {
  w->next = nullptr;
  if (*tail == nullptr) {
    *head = w;
  } else {
    (*tail)->next = w;
  }
  *tail = w;
}

}  // namespace

Permits::Admit Permits::AcquireSlow(PermitWaiter* w, uint64_t max_waiters) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cur = word_.load(std::memory_order_relaxed);
  for (;;) {
    if (cur & kClosedBit) return Admit::kClosed;
    const uint64_t waiters = Waiters(cur);
    if (waiters == 0 && InUse(cur) < static_cast<uint64_t>(limit_.load(std::memory_order_relaxed))) {
      // A permit came back between the fast path and here.
      if (word_.compare_exchange_weak(cur, cur + 1, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        return Admit::kGranted;
      }
      continue;
    }
    if (waiters >= std::min(max_waiters, kMaxWaiters)) return Admit::kFull;
    // Counted as a waiter in the same word the fast paths check: from here on no release
    // can miss it, and no newcomer can overtake it.
    if (word_.compare_exchange_weak(cur, cur + kWaiterOne, std::memory_order_relaxed,
                                    std::memory_order_relaxed)) {
      Append(&head_, &tail_, w);
      return Admit::kQueued;
    }
  }
}

PermitWaiter* Permits::PopLocked() {
  PermitWaiter* w = head_;
  head_ = w->next;
  if (head_ == nullptr) tail_ = nullptr;
  w->next = nullptr;
  return w;
}

void Permits::AdmitLocked(PermitWaiter** head, PermitWaiter** tail) {
  uint64_t cur = word_.load(std::memory_order_relaxed);
  // Waiters only change under mu_, so while there are any the in-use count cannot move
  // either (both fast paths need zero waiters); the CAS still guards the closed bit.
  while (Waiters(cur) > 0 &&
         InUse(cur) < static_cast<uint64_t>(limit_.load(std::memory_order_relaxed))) {
    if (word_.compare_exchange_weak(cur, cur + 1 - kWaiterOne, std::memory_order_acq_rel,
                                    std::memory_order_relaxed)) {
      Append(head, tail, PopLocked());
      cur = word_.load(std::memory_order_relaxed);
    }
  }
}

bool Permits::ReleaseSlow(PermitWaiter** granted_out) {
  PermitWaiter* granted = nullptr;
  PermitWaiter* granted_tail = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cur = word_.load(std::memory_order_relaxed);
  // The waiter seen by the fast path left meanwhile (a release handed it a permit).
  // Giving this permit back here could leave none in use while this thread still reads
  // the word and unlocks the mutex, after its owner may have freed them.
  if (Waiters(cur) == 0) return false;
  for (;;) {
    const bool hand_over =
        Waiters(cur) > 0 &&
        InUse(cur) <= static_cast<uint64_t>(limit_.load(std::memory_order_relaxed));
    // Hand over: the permit stays in use and the oldest waiter leaves the FIFO with it.
    // Otherwise (a shrink left us above the limit) the permit is given back, and the
    // waiters still counted keep the word from looking idle.
    const uint64_t next = hand_over ? cur - kWaiterOne : cur - 1;
    if (word_.compare_exchange_weak(cur, next, std::memory_order_acq_rel,
                                    std::memory_order_relaxed)) {
      if (hand_over) Append(&granted, &granted_tail, PopLocked());
      break;
    }
  }
  AdmitLocked(&granted, &granted_tail);
  *granted_out = granted;
  return true;
}

void Permits::Open() { word_.fetch_and(~kClosedBit, std::memory_order_acq_rel); }

void Permits::Close() { word_.fetch_or(kClosedBit, std::memory_order_acq_rel); }

PermitWaiter* Permits::SetLimit(int limit) {
  PermitWaiter* granted = nullptr;
  PermitWaiter* granted_tail = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  limit_.store(std::clamp(limit, 0, kMaxLimit), std::memory_order_relaxed);
  AdmitLocked(&granted, &granted_tail);
  return granted;
}

}  // namespace nvmw
