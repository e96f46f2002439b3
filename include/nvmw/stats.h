// Per-window statistics of the middleware (DESIGN section 3), the RL state vector
// (thesis Table 3.2) and the action table (thesis Table 3.3).
#ifndef NVMW_STATS_H_
#define NVMW_STATS_H_

#include <array>
#include <cstdint>

namespace nvmw {

enum class RequestClass : uint8_t {
  kInteractive = 0,  // latency-sensitive
  kBatch = 1,        // throughput-oriented
  kAuto = 2,         // let the middleware decide (size rule, see MiddlewareOptions)
};

// Statistics of one class (or of both: `all`) over one closed monitor window.
// Latencies are completion - submit, so queueing time is included.
struct ClassStats {
  uint64_t ops = 0;              // requests completed in the window
  uint64_t errors = 0;           // completed with a non-OK, non-NotFound status
  uint64_t rejected = 0;         // refused with Overloaded (queue full)
  double ops_per_s = 0;
  double bytes_per_s = 0;        // value bytes moved (read or written)
  double p50_us = 0, p99_us = 0, p999_us = 0;   // log-linear histogram, <= 1 % error
  double mean_us = 0, std_us = 0, max_us = 0;   // exact
  uint64_t queue_len_end = 0;    // queued (not yet started) requests when the window closed
  double queue_len_mean = 0;     // mean of periodic samples over the window
  double mean_block_bytes = 0;   // mean value size of completed requests
  double write_ratio = 0;        // puts+removes / ops (0 when ops == 0)
  int threads = 0;               // worker threads at window end (0 in no-control mode)
};

struct WindowStats {
  uint64_t seq = 0;         // 1 for the first closed window, then +1 per window
  double start_s = 0;       // window start, seconds since Middleware::Start
  double duration_s = 0;    // actual window length
  ClassStats interactive, batch, all;
};

// Thesis Table 3.2, in this order.
inline constexpr int kStateSize = 8;
using State = std::array<double, kStateSize>;
// interactive threads, batch threads, interactive queue size, batch queue size,
// interactive mean block size, batch mean block size, interactive write ratio,
// batch write ratio.

// Thesis Table 3.3: {delta interactive, delta batch} for actions 0..8.
inline constexpr int kNumActions = 9;
inline constexpr std::array<std::array<int, 2>, kNumActions> kActionDeltas = {{
    {0, 0}, {+1, 0}, {-1, 0}, {0, +1}, {0, -1}, {+1, +1}, {+1, -1}, {-1, +1}, {-1, -1}}};

}  // namespace nvmw

#endif  // NVMW_STATS_H_
