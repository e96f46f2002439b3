// Histogram: the one log-linear latency histogram (HdrHistogram-like) of the C++ core: the
// middleware's and the simulator's per-window statistics, the trace replay's and the
// YCSB workload's client-side latencies. Values are non-negative integers (nanoseconds).
//
// Buckets: values below 128 each get their own bucket (exact); above, every power of two
// [2^e, 2^(e+1)) is split into 128 equal sub-buckets, so a bucket is at most 1/128 of its
// lower bound wide and its midpoint is within 0.4 % of any value in it (<= 1 % required).
// Count, sum, sum of squares, min and max are kept exactly, so mean/std/min/max are exact.
// Bucket memory grows with the largest value recorded (about 18 KB up to 10 ms) and an
// empty histogram allocates nothing, so idle per-thread histograms cost nothing.
//
// Thread safety: none. Each recording thread owns one histogram; windows merge them.
#ifndef NVMW_UTIL_HISTOGRAM_H_
#define NVMW_UTIL_HISTOGRAM_H_

#include <cstdint>
#include <vector>

namespace nvmw {

class Histogram {
 public:
  // Sub-buckets per power of two (a power of two itself).
  static constexpr int kSubBits = 7;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;  // 128
  // 64-bit values: exact range [0, 128) plus 57 octaves of 128 sub-buckets.
  static constexpr int kNumBuckets = static_cast<int>(kSub + (64 - kSubBits) * kSub);

  Histogram();

  void Record(uint64_t value);
  // Adds every sample of `other` (histograms of the same layout always merge exactly).
  void Merge(const Histogram& other);
  // Adds the samples of `other` as if each had been seen `factor` (>= 0) times: bucket
  // counts are scaled with the rounding carried from bucket to bucket, so the count
  // grows by round(factor * other.count()); sum and sum of squares scale by `factor`,
  // min and max are other's. For extrapolating a sample to a longer stretch (the
  // simulator's steady-state fast-forward).
  void MergeScaled(const Histogram& other, double factor);
  // Forgets all samples. Cost is proportional to the buckets actually used.
  void Clear();

  uint64_t count() const { return count_; }
  uint64_t sum() const { return sum_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double Mean() const;
  // Population standard deviation (0 with fewer than two samples).
  double StdDev() const;
  // Nearest-rank percentile, p in [0, 100]: the ceil(p/100 * count)-th smallest sample
  // (rank at least 1), reported as the midpoint of its bucket clamped to [min, max]; the
  // ranks 1 and count are the exact min and max. 0 when empty.
  double Percentile(double p) const;

  // Bucket layout, exposed for tests.
  static int BucketIndex(uint64_t value);
  static uint64_t BucketLow(int index);    // smallest value in the bucket
  static uint64_t BucketHigh(int index);   // largest value in the bucket

 private:
  std::vector<uint64_t> buckets_;    // indices [0, size) allocated; grows on demand
  uint64_t count_ = 0;
  uint64_t sum_ = 0;                 // wraps only after ~584 years of nanoseconds
  unsigned __int128 sum_squares_ = 0;  // exact: 128 bits hold 2^64 samples of 2^32
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  int lowest_used_ = kNumBuckets;    // bucket range touched since the last Clear
  int highest_used_ = -1;
};

}  // namespace nvmw

#endif  // NVMW_UTIL_HISTOGRAM_H_
