// The monotonic clock of the C++ core, nanoseconds since std::chrono::steady_clock's
// epoch, in two readings:
//   NowNs()     steady_clock itself: windows, deadlines and anything converted to a
//               steady_clock::time_point (waits, sleeps). Use it unless a path is hot.
//   FastNowNs() the same timeline read from the CPU's time-stamp counter where that is
//               safe, for per-request latencies on the request path: one RDTSC and a
//               multiply (~10 ns here) instead of clock_gettime (~25 ns through the vDSO,
//               which does the same RDTSC plus a fence and a seqlock).
// FastNowNs() is anchored to steady_clock and calibrated against it once per process
// (docs/middleware.md, "Overhead benchmark"), so it agrees with NowNs() to a few parts
// per million: fine for intervals of any length and for comparing with NowNs() over
// seconds, not for deadlines hours ahead. Take both ends of an interval from the same
// function. It never goes backwards on one thread; between threads it is as consistent
// as the kernel's own clock (it is used only when the kernel's clocksource is the TSC).
#ifndef NVMW_UTIL_CLOCK_H_
#define NVMW_UTIL_CLOCK_H_

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define NVMW_CLOCK_HAS_TSC 1
#else
#define NVMW_CLOCK_HAS_TSC 0
#endif

namespace nvmw {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace clock_internal {

// ns = base_ns + ((tsc - base_tsc) * mult) >> kShift. use_tsc is false when the TSC is
// not invariant, the kernel does not trust it as its clocksource, NVMW_CLOCK=steady is
// set, or the machine is not x86-64; FastNowNs() is then NowNs().
struct TscScale {
  static constexpr int kShift = 32;
  bool use_tsc = false;
  uint64_t base_tsc = 0;
  int64_t base_ns = 0;
  uint64_t mult = 0;  // ns per tick, fixed point with kShift fraction bits
};

// Decides and calibrates (a few milliseconds, once per process). Defined in clock.cc.
TscScale CalibrateTsc();

inline const TscScale& Scale() {
  static const TscScale scale = CalibrateTsc();
  return scale;
}

}  // namespace clock_internal

// True when FastNowNs() reads the TSC (false: it is steady_clock).
inline bool FastClockUsesTsc() { return clock_internal::Scale().use_tsc; }

inline int64_t FastNowNs() {
#if NVMW_CLOCK_HAS_TSC
  const clock_internal::TscScale& s = clock_internal::Scale();
  if (s.use_tsc) {
    // A thread that moved to another CPU could read a counter a few ticks behind the
    // last one it read; the clamp keeps each thread's readings monotonic.
    static thread_local int64_t last_ns = 0;
    // Signed: another CPU's counter may read a hair below the calibration anchor.
    const auto ticks = static_cast<int64_t>(__rdtsc() - s.base_tsc);
    const int64_t ns =
        s.base_ns + static_cast<int64_t>((static_cast<__int128>(ticks) * s.mult) >>
                                         clock_internal::TscScale::kShift);
    if (ns < last_ns) return last_ns;
    last_ns = ns;
    return ns;
  }
#endif
  return NowNs();
}

}  // namespace nvmw

#endif  // NVMW_UTIL_CLOCK_H_
