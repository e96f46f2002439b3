// Per-window statistics of the middleware (one ClassStats per request class and for both
// together, closed by the monitor every window), the reinforcement-learning state vector
// (thesis Table 3.2) and the action table (thesis Table 3.3).
//
// The names and orders here are the only definition: the Python binding exports them
// (`_core.STATE_NAMES`, `_core.CLASS_STAT_KEYS`, `_core.ACTION_DELTAS`, `_core.N_ACTIONS`,
// `_core.apply_action`) and the stats dicts are built by iterating kClassStatFields.
#ifndef NVMW_STATS_H_
#define NVMW_STATS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <variant>

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
  uint64_t rejected = 0;         // refused with Overloaded (queue full; no free permit without control)
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

// Every ClassStats field with its public name (the keys of the Python stats dicts), in
// declaration order. Iterate this instead of listing the fields again:
//   for (const auto& f : kClassStatFields)
//     std::visit([&](auto member) { out(f.name, stats.*member); }, f.member);
struct ClassStatField {
  std::string_view name;
  std::variant<uint64_t ClassStats::*, double ClassStats::*, int ClassStats::*> member;
};
inline constexpr int kNumClassStatFields = 16;
inline constexpr std::array<ClassStatField, kNumClassStatFields> kClassStatFields = {{
    {"ops", &ClassStats::ops},
    {"errors", &ClassStats::errors},
    {"rejected", &ClassStats::rejected},
    {"ops_per_s", &ClassStats::ops_per_s},
    {"bytes_per_s", &ClassStats::bytes_per_s},
    {"p50_us", &ClassStats::p50_us},
    {"p99_us", &ClassStats::p99_us},
    {"p999_us", &ClassStats::p999_us},
    {"mean_us", &ClassStats::mean_us},
    {"std_us", &ClassStats::std_us},
    {"max_us", &ClassStats::max_us},
    {"queue_len_end", &ClassStats::queue_len_end},
    {"queue_len_mean", &ClassStats::queue_len_mean},
    {"mean_block_bytes", &ClassStats::mean_block_bytes},
    {"write_ratio", &ClassStats::write_ratio},
    {"threads", &ClassStats::threads},
}};

// A class's requests since Middleware::Start, summed over every closed window: the counts
// a reader that skipped windows (it reads only the last one) would otherwise miss.
struct ClassTotals {
  uint64_t windows = 0;   // windows closed
  uint64_t ops = 0;       // requests completed
  uint64_t errors = 0;    // completed with a non-OK, non-NotFound status
  uint64_t rejected = 0;  // refused with Overloaded
  double latency_s = 0;   // sum of the completed requests' latencies
};

struct WindowStats {
  uint64_t seq = 0;         // 1 for the first closed window, then +1 per window
  double start_s = 0;       // window start, seconds since Middleware::Start
  double duration_s = 0;    // actual window length
  ClassStats interactive, batch, all;
};

// The state vector of thesis Table 3.2, in this order (names as exported to Python).
inline constexpr int kStateSize = 8;
using State = std::array<double, kStateSize>;
inline constexpr std::array<std::string_view, kStateSize> kStateNames = {
    "interactive_threads",    "batch_threads",          "interactive_queue_size",
    "batch_queue_size",       "interactive_block_size", "batch_block_size",
    "interactive_write_ratio", "batch_write_ratio"};

// Thesis Table 3.3: {delta interactive, delta batch} for actions 0..8.
inline constexpr int kNumActions = 9;
inline constexpr std::array<std::array<int, 2>, kNumActions> kActionDeltas = {{
    {0, 0}, {+1, 0}, {-1, 0}, {0, +1}, {0, -1}, {+1, +1}, {+1, -1}, {-1, +1}, {-1, -1}}};

// Thread counts {interactive, batch} after `action` (thesis Table 3.3), each clamped to
// [1, max_threads]. `action` must be in [0, kNumActions); callers validate it (the
// middleware answers InvalidArgument, the binding ValueError). max_threads >= 1.
constexpr std::pair<int, int> ApplyAction(int interactive, int batch, int action, int max_threads) {
  const auto& d = kActionDeltas[static_cast<size_t>(action)];
  return {std::clamp(interactive + d[0], 1, max_threads), std::clamp(batch + d[1], 1, max_threads)};
}

}  // namespace nvmw

#endif  // NVMW_STATS_H_
