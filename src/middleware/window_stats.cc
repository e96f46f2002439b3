// Window statistics: merging shard accumulators and deriving rates, percentiles and ratios.
#include "middleware/window_stats.h"

namespace nvmw {

void ClassAccum::Merge(const ClassAccum& other) {
  latency_ns.Merge(other.latency_ns);
  errors += other.errors;
  bytes += other.bytes;
  writes += other.writes;
}

void ClassAccum::Clear() {
  latency_ns.Clear();
  errors = 0;
  bytes = 0;
  writes = 0;
}

ClassStats MakeClassStats(const ClassAccum& accum, uint64_t rejected, double duration_s,
                          uint64_t queue_len_end, double queue_len_mean, int threads) {
  ClassStats s;
  const Histogram& h = accum.latency_ns;
  s.ops = h.count();
  s.errors = accum.errors;
  s.rejected = rejected;
  if (duration_s > 0) {
    s.ops_per_s = static_cast<double>(s.ops) / duration_s;
    s.bytes_per_s = static_cast<double>(accum.bytes) / duration_s;
  }
  constexpr double kNsPerUs = 1000.0;
  s.p50_us = h.Percentile(50.0) / kNsPerUs;
  s.p99_us = h.Percentile(99.0) / kNsPerUs;
  s.p999_us = h.Percentile(99.9) / kNsPerUs;
  s.mean_us = h.Mean() / kNsPerUs;
  s.std_us = h.StdDev() / kNsPerUs;
  s.max_us = static_cast<double>(h.max()) / kNsPerUs;
  s.queue_len_end = queue_len_end;
  s.queue_len_mean = queue_len_mean;
  if (s.ops > 0) {
    s.mean_block_bytes = static_cast<double>(accum.bytes) / static_cast<double>(s.ops);
    s.write_ratio = static_cast<double>(accum.writes) / static_cast<double>(s.ops);
  }
  s.threads = threads;
  return s;
}

}  // namespace nvmw
