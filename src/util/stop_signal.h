// StopSignal: a stop flag that sleepers can wait on until a deadline.
//
// Paced load generators (trace replay, YCSB) run hundreds of client threads that sleep
// until each request is due and must end promptly when told to stop. Sleeping in short
// slices and re-reading a flag costs one wake-up per slice per client: 400 replay
// clients in 5 ms slices woke 80,000 times a second, most of a vCPU in the kernel on a
// 2-core machine, taken from the system being measured. Here a sleeper wakes once, at
// its deadline, or when Set() wakes every sleeper at once.
#ifndef NVMW_UTIL_STOP_SIGNAL_H_
#define NVMW_UTIL_STOP_SIGNAL_H_

#include <atomic>
#include <cstdint>

#include "util/clock.h"
#include "util/futex.h"

namespace nvmw {

class StopSignal {
 public:
  bool stopped() const { return word_.load(std::memory_order_acquire) != 0; }

  // Sets the flag and wakes every thread in SleepUntil.
  void Set() {
    word_.store(1, std::memory_order_release);
    FutexWake(&word_);
  }

  // Clears the flag (only while nobody sleeps on it: before the sleepers start).
  void Reset() { word_.store(0, std::memory_order_release); }

  // Sleeps until NowNs() reads `deadline_ns` or the flag is set. True when the
  // deadline came (or had passed) with the flag still clear.
  bool SleepUntil(int64_t deadline_ns) {
    for (;;) {
      if (stopped()) return false;
      if (NowNs() >= deadline_ns) return true;
      FutexWaitUntil(&word_, 0, deadline_ns);
    }
  }

 private:
  std::atomic<uint32_t> word_{0};
};

}  // namespace nvmw

#endif  // NVMW_UTIL_STOP_SIGNAL_H_
