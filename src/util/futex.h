// FutexWait / FutexWake: sleep on a 32-bit atomic and wake its sleepers (Linux futex,
// process-private), and nothing else.
//
// Why not C++20 std::atomic::wait/notify: libstdc++ (GCC 12) spins before it sleeps,
// 12 pause loops then 4 sched_yield() calls, on every wait and again after every
// wake-up. With hundreds of waiting threads on a few cores each yield is a context
// switch into another waiter, and a yielding thread stays runnable: under the
// interference test (100 + 100 closed-loop clients on 2 cores) nearly all waiting
// client threads were runnable at any moment, and the workers holding the permits
// waited behind them for a core (docs/middleware.md, "Waiting without yielding"). The
// middleware has its own spin policy (spin only while a core is free); past it, a
// waiter must sleep at once.
//
// Waking an address is harmless even when the waiter has returned and the memory holds
// something else: the kernel only compares the address, it never writes to it. A
// sleeper that shares the address later sees at most a spurious wake-up, so every wait
// sits in a loop that re-checks its condition.
#ifndef NVMW_UTIL_FUTEX_H_
#define NVMW_UTIL_FUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace nvmw {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex word must be a plain 32-bit integer");

// Sleeps while *word == expected. Returns on a wake-up, at once if the value differs,
// or on a signal: callers re-check their condition and wait again.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

// Sleeps while *word == expected, at most until CLOCK_MONOTONIC (steady_clock, NowNs())
// reads `deadline_ns`. Returns on a wake-up, the deadline, a signal or a changed value:
// callers re-check both their condition and the clock.
inline void FutexWaitUntil(std::atomic<uint32_t>* word, uint32_t expected, int64_t deadline_ns) {
  if (deadline_ns < 0) deadline_ns = 0;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(deadline_ns / 1000000000);
  ts.tv_nsec = static_cast<long>(deadline_ns % 1000000000);
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (FUTEX_WAIT a relative
  // one), so a wait resumed after a signal does not drift.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_BITSET_PRIVATE, expected, &ts,
          nullptr, FUTEX_BITSET_MATCH_ANY);
}

// Wakes up to `n` threads sleeping on `word` (INT_MAX: all). Does not touch *word.
inline void FutexWake(std::atomic<uint32_t>* word, int n = INT_MAX) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr,
          nullptr, 0);
}

}  // namespace nvmw

#endif  // NVMW_UTIL_FUTEX_H_
