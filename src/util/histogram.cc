// Log-linear histogram: bucket arithmetic, merging and percentile extraction.
#include "util/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace nvmw {

Histogram::Histogram() = default;

int Histogram::BucketIndex(uint64_t value) {
  if (value < kSub) return static_cast<int>(value);
  const int e = std::bit_width(value) - 1;  // value in [2^e, 2^(e+1)), e >= kSubBits
  const uint64_t sub = (value >> (e - kSubBits)) & (kSub - 1);
  return static_cast<int>(kSub + static_cast<uint64_t>(e - kSubBits) * kSub + sub);
}

uint64_t Histogram::BucketLow(int index) {
  if (index < static_cast<int>(kSub)) return static_cast<uint64_t>(index);
  const int octave = (index - static_cast<int>(kSub)) / static_cast<int>(kSub);
  const uint64_t sub = static_cast<uint64_t>(index) & (kSub - 1);
  const int e = octave + kSubBits;
  return (uint64_t{1} << e) + (sub << (e - kSubBits));
}

uint64_t Histogram::BucketHigh(int index) {
  if (index < static_cast<int>(kSub)) return static_cast<uint64_t>(index);
  const int octave = (index - static_cast<int>(kSub)) / static_cast<int>(kSub);
  const int e = octave + kSubBits;
  return BucketLow(index) + ((uint64_t{1} << (e - kSubBits)) - 1);
}

void Histogram::Record(uint64_t value) {
  const int i = BucketIndex(value);
  if (static_cast<size_t>(i) >= buckets_.size()) buckets_.resize(static_cast<size_t>(i) + 1, 0);
  ++buckets_[i];
  ++count_;
  sum_ += value;
  sum_squares_ += static_cast<unsigned __int128>(value) * value;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
  lowest_used_ = std::min(lowest_used_, i);
  highest_used_ = std::max(highest_used_, i);
}

void Histogram::Merge(const Histogram& other) {
  if (other.count_ == 0) return;
  if (static_cast<size_t>(other.highest_used_) >= buckets_.size()) {
    buckets_.resize(static_cast<size_t>(other.highest_used_) + 1, 0);
  }
  for (int i = other.lowest_used_; i <= other.highest_used_; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  sum_squares_ += other.sum_squares_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  lowest_used_ = std::min(lowest_used_, other.lowest_used_);
  highest_used_ = std::max(highest_used_, other.highest_used_);
}

void Histogram::MergeScaled(const Histogram& other, double factor) {
  if (other.count_ == 0 || !(factor > 0)) return;
  if (static_cast<size_t>(other.highest_used_) >= buckets_.size()) {
    buckets_.resize(static_cast<size_t>(other.highest_used_) + 1, 0);
  }
  double carried = 0;   // exact scaled count so far
  uint64_t added = 0;   // whole samples added so far
  int lo = kNumBuckets, hi = -1;
  for (int i = other.lowest_used_; i <= other.highest_used_; ++i) {
    if (other.buckets_[i] == 0) continue;
    carried += static_cast<double>(other.buckets_[i]) * factor;
    const uint64_t upto = static_cast<uint64_t>(std::llround(carried));
    const uint64_t n = upto > added ? upto - added : 0;
    if (n == 0) continue;
    buckets_[i] += n;
    added += n;
    lo = std::min(lo, i);
    hi = std::max(hi, i);
  }
  if (added == 0) return;
  count_ += added;
  sum_ += static_cast<uint64_t>(std::llround(static_cast<long double>(other.sum_) * factor));
  sum_squares_ += static_cast<unsigned __int128>(static_cast<long double>(other.sum_squares_) * factor);
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  lowest_used_ = std::min(lowest_used_, lo);
  highest_used_ = std::max(highest_used_, hi);
}

void Histogram::Clear() {
  if (highest_used_ >= lowest_used_) {
    std::fill(buckets_.begin() + lowest_used_, buckets_.begin() + highest_used_ + 1, 0);
  }
  count_ = 0;
  sum_ = 0;
  sum_squares_ = 0;
  min_ = UINT64_MAX;
  max_ = 0;
  lowest_used_ = kNumBuckets;
  highest_used_ = -1;
}

double Histogram::Mean() const {
  return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
}

double Histogram::StdDev() const {
  if (count_ < 2) return 0.0;
  // n * sum(x^2) - (sum x)^2 is exact in 128 bits for any realistic window
  // (it overflows only past ~2^64 samples of ~2^32 ns); the division is in long double.
  const unsigned __int128 n = count_;
  const unsigned __int128 s = sum_;
  const unsigned __int128 num = n * sum_squares_ - s * s;
  const long double var =
      static_cast<long double>(num) / (static_cast<long double>(count_) * count_);
  return static_cast<double>(std::sqrt(var));
}

double Histogram::Percentile(double p) const {
  if (count_ == 0) return 0.0;
  p = std::clamp(p, 0.0, 100.0);
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  if (rank == count_) return static_cast<double>(max_);
  if (rank == 1) return static_cast<double>(min_);
  uint64_t seen = 0;
  for (int i = lowest_used_; i <= highest_used_; ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const double mid = (static_cast<double>(BucketLow(i)) + static_cast<double>(BucketHigh(i))) / 2.0;
      return std::clamp(mid, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

}  // namespace nvmw
