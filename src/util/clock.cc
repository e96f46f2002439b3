// Calibration of FastNowNs() (util/clock.h): whether the TSC may be used, and its scale
// against steady_clock.
#include "util/clock.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#if NVMW_CLOCK_HAS_TSC
#include <cpuid.h>
#endif

namespace nvmw {
namespace clock_internal {

#if NVMW_CLOCK_HAS_TSC
namespace {

// Invariant TSC (CPUID 0x80000007, EDX bit 8): constant rate in every P-, C- and
// T-state, so ticks convert to time with one fixed scale.
bool InvariantTsc() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
  if (!__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 8)) != 0;
}

// The kernel keeps the TSC as its clocksource only while it finds the counters of all
// CPUs in step (it switches away, e.g. to kvm-clock or hpet, when it sees a warp), and
// steady_clock then is this very counter scaled. Anything else: do not trust it.
bool KernelClocksourceIsTsc() {
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return static_cast<bool>(f >> name) && name == "tsc";
}

// One (tsc, steady ns) pair: the steady_clock read bracketed by two TSC reads, the
// narrowest bracket of a few tries (an interrupt widens one).
void Pair(uint64_t* tsc, int64_t* ns) {
  uint64_t best_width = ~uint64_t{0};
  for (int i = 0; i < 16; ++i) {
    unsigned aux = 0;
    const uint64_t t0 = __rdtscp(&aux);
    const int64_t n = NowNs();
    const uint64_t t1 = __rdtscp(&aux);
    if (t1 >= t0 && t1 - t0 < best_width) {
      best_width = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = n;
    }
  }
}

}  // namespace
#endif

TscScale CalibrateTsc() {
  TscScale s;
#if NVMW_CLOCK_HAS_TSC
  const char* env = std::getenv("NVMW_CLOCK");
  if (env != nullptr && std::strcmp(env, "steady") == 0) return s;
  if (!InvariantTsc() || !KernelClocksourceIsTsc()) return s;
  // 5 ms between the two pairs: each pair is good to tens of ns, so the rate is good
  // to ~10 ppm (10 us per second of interval), far below anything a latency resolves.
  constexpr int64_t kCalibrationNs = 5'000'000;
  uint64_t tsc0 = 0, tsc1 = 0;
  int64_t ns0 = 0, ns1 = 0;
  Pair(&tsc0, &ns0);
  std::this_thread::sleep_for(std::chrono::nanoseconds(kCalibrationNs));
  Pair(&tsc1, &ns1);
  if (tsc1 <= tsc0 || ns1 <= ns0) return s;
  const unsigned __int128 mult =
      (static_cast<unsigned __int128>(ns1 - ns0) << TscScale::kShift) / (tsc1 - tsc0);
  // Sanity: a counter between 10 MHz and 100 GHz.
  if (mult == 0 || mult > (static_cast<unsigned __int128>(100) << TscScale::kShift)) return s;
  s.use_tsc = true;
  s.base_tsc = tsc1;
  s.base_ns = ns1;
  s.mult = static_cast<uint64_t>(mult);
#endif
  return s;
}

}  // namespace clock_internal
}  // namespace nvmw
