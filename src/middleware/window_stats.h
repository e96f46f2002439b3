// Per-window statistics plumbing of the middleware: the accumulators that recording
// threads fill (one shard per worker, or per stripe of caller threads) and the code that
// turns merged accumulators into the public ClassStats when a window closes. The
// simulator (src/sim) records into the same ClassAccum and closes its windows with the
// same MakeClassStats, so both report identical numbers for identical samples.
#ifndef NVMW_MIDDLEWARE_WINDOW_STATS_H_
#define NVMW_MIDDLEWARE_WINDOW_STATS_H_

#include <cstdint>
#include <mutex>

#include "nvmw/stats.h"
#include "util/histogram.h"

namespace nvmw {

// Everything a window needs about completed requests of one class.
struct ClassAccum {
  Histogram latency_ns;   // its count is the number of completed requests
  uint64_t errors = 0;
  uint64_t bytes = 0;     // value bytes read (successful gets) or written (puts)
  uint64_t writes = 0;    // puts + removes

  void Record(uint64_t latency_ns_value, uint64_t value_bytes, bool write, bool error) {
    latency_ns.Record(latency_ns_value);
    bytes += value_bytes;
    writes += write ? 1 : 0;
    errors += error ? 1 : 0;
  }
  void Merge(const ClassAccum& other);
  void Clear();
};

// One recording thread's (or stripe's) accumulators. The mutex is uncontended except for
// the moment the monitor folds the shard into a closing window.
struct StatsShard {
  std::mutex mu;
  ClassAccum cls[2];  // indexed by RequestClass (interactive, batch)

  void Record(RequestClass c, uint64_t latency_ns, uint64_t bytes, bool write, bool error) {
    std::lock_guard<std::mutex> lock(mu);
    cls[static_cast<int>(c)].Record(latency_ns, bytes, write, error);
  }
};

// Builds the public numbers of one class (or of `all`) for a window of `duration_s`.
ClassStats MakeClassStats(const ClassAccum& accum, uint64_t rejected, double duration_s,
                          uint64_t queue_len_end, double queue_len_mean, int threads);

}  // namespace nvmw

#endif  // NVMW_MIDDLEWARE_WINDOW_STATS_H_
