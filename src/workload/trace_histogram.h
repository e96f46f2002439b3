// Private: the latency histogram of the trace replay. Log-linear (64 sub-buckets
// per power of two, <= 0.8 % error at the bucket midpoint), nanosecond values up
// to ~73 minutes, exact mean and max. One per client thread, merged at Join, so
// the hot path never shares a cache line with another client.
#ifndef NVMW_WORKLOAD_TRACE_HISTOGRAM_H_
#define NVMW_WORKLOAD_TRACE_HISTOGRAM_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace nvmw::trace_internal {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kSub = 1u << kSubBits;
  static constexpr int kMaxMsb = 42;  // values are clamped below 2^43 ns
  static constexpr size_t kBuckets = kSub + (kMaxMsb - kSubBits + 1) * kSub;

  void Record(uint64_t ns) {
    if (counts_.empty()) counts_.assign(kBuckets, 0);  // lazily: idle clients cost nothing
    ns = std::min<uint64_t>(ns, (1ull << (kMaxMsb + 1)) - 1);
    ++counts_[Index(ns)];
    ++count_;
    sum_ += static_cast<double>(ns);
    max_ = std::max(max_, ns);
  }

  void Merge(const LatencyHistogram& other) {
    if (other.count_ == 0) return;
    if (counts_.empty()) counts_.assign(kBuckets, 0);
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    max_ = std::max(max_, other.max_);
  }

  uint64_t count() const { return count_; }
  double MeanUs() const { return count_ ? sum_ / static_cast<double>(count_) / 1e3 : 0; }
  double MaxUs() const { return static_cast<double>(max_) / 1e3; }

  // Nearest-rank quantile, reported at the bucket midpoint (capped at the max seen).
  double QuantileUs(double q) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(Midpoint(i), static_cast<double>(max_)) / 1e3;
    }
    return MaxUs();
  }

 private:
  static size_t Index(uint64_t v) {
    if (v < kSub) return static_cast<size_t>(v);
    int msb = 63 - std::countl_zero(v);
    int shift = msb - kSubBits;
    return static_cast<size_t>(kSub + shift * kSub + ((v >> shift) - kSub));
  }
  static double Midpoint(size_t i) {
    if (i < kSub) return static_cast<double>(i);
    size_t shift = (i - kSub) / kSub;
    uint64_t mant = kSub + (i - kSub) % kSub;
    double lo = static_cast<double>(mant << shift);
    return lo + static_cast<double>((1ull << shift) - 1) / 2.0;
  }

  std::vector<uint32_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
  uint64_t max_ = 0;
};

}  // namespace nvmw::trace_internal

#endif  // NVMW_WORKLOAD_TRACE_HISTOGRAM_H_
