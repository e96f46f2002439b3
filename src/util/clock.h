// The one monotonic clock of the C++ core: nanoseconds since an arbitrary epoch
// (std::chrono::steady_clock). Every latency, window boundary and schedule uses it.
#ifndef NVMW_UTIL_CLOCK_H_
#define NVMW_UTIL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace nvmw {

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace nvmw

#endif  // NVMW_UTIL_CLOCK_H_
